"""One run, described by one TOML file (validated; every error names its field).

Example (every field optional; these are the defaults)::

    [model]
    name = "llama-13b"          # or a path to a spec .toml, or an inline table of ModelSpec fields

    [hardware]
    gpu = "h100-sxm"            # profile name or folder
    network_scale = 1.0         # multiplies network bandwidth (<1: degraded/oversubscribed)
    pod_gpus = 0                # GPUs per full-bandwidth pod (0 = one flat fabric)
    oversubscription = 1.0      # bandwidth divisor for traffic leaving a pod
    nvlink_domain_gpus = 0      # GPUs per NVLink domain (72 for NVL72); 0 = the profile's value

    [cluster]
    gpus = 64                   # = tp * pp * dp * cp

    [parallel]
    tp = 1
    pp = 8
    cp = 2                      # static CP size; dynamic CP goes up to dp*cp
    min_cp = 1
    max_tokens_per_rank = 65536 # Megatron --max-seqlen-per-dp-cp-rank (launch script of PR #2959); 0 = ceil(max_len/(dp*cp))
    cp_comm = "p2p"             # p2p | all_gather | a2a
    recompute = "full"          # none | selective | full
    mbs = 1                     # sequences per microbatch per DP rank (fixed workload only; Megatron --micro-batch-size)

    [workload]
    name = "github"             # preset, lengths file, or distribution table
    gbs = 2048                  # sequences per global batch
    min_len = 256
    max_len = 131072
    clip = "drop"               # drop | truncate
    seq_len = 4096              # only with name = "fixed": tokens per sequence (Megatron --seq-length)
    documents = "wikipedia"     # only with name = "fixed", optional: per-document attention inside each
                                # window (documents from this workload); unset = one full-window causal sequence

With ``name = "fixed"`` every sequence has ``seq_len`` tokens (pre-training on
concatenated documents), ``min_len``/``max_len``/``clip`` and
``parallel.max_tokens_per_rank`` are not used (a microbatch is ``mbs``
sequences), and ``gbs`` must be a multiple of ``dp * mbs`` (Megatron's rule).

    [policy]
    name = "dynamic"
    options = {}

    [sim]
    iterations = 1
    seed = 0
    noise_cv = 0.0              # coefficient of variation of kernel times
    straggler_fraction = 0.0
    straggler_slowdown = 1.0
    degraded_link_scale = 1.0   # bandwidth factor of one degraded network link
    overlap_grad_sync = true
    planning = "hidden"         # hidden (overlaps the previous iteration) | stall | ignore
    grad_reduce_bytes_per_param = 4
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dcpsim.errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    name: str | dict[str, Any] = Field(
        "llama-13b", description="model spec name, path to a spec .toml, or an inline spec table (ModelSpec fields)")


class HardwareSection(_Section):
    gpu: str = Field("h100-sxm", description="hardware profile name or folder")
    network_scale: float = Field(1.0, gt=0, description="multiplier on network bandwidth")
    pod_gpus: int = Field(0, ge=0, description="GPUs per full-bandwidth pod (0 = flat fabric)")
    oversubscription: float = Field(1.0, ge=1.0, description="bandwidth divisor for traffic leaving a pod")
    nvlink_domain_gpus: int = Field(0, ge=0, description="GPUs per NVLink domain (72 for NVL72); 0 = the profile's value")


class ClusterSection(_Section):
    gpus: int = Field(64, ge=1, description="total GPUs = tp*pp*dp*cp")


class ParallelSection(_Section):
    tp: int = Field(1, ge=1)
    pp: int = Field(8, ge=1)
    cp: int = Field(2, ge=1, description="static CP size; dynamic CP uses powers of two up to dp*cp")
    min_cp: int = Field(1, ge=1)
    max_tokens_per_rank: int = Field(65536, ge=0, description="Megatron --max-seqlen-per-dp-cp-rank; 0 = ceil(max_len/(dp*cp))")
    cp_comm: Literal["p2p", "all_gather", "a2a"] = "p2p"
    recompute: Literal["none", "selective", "full"] = "full"
    mbs: int = Field(1, ge=1, le=4096, description="sequences per microbatch per DP rank (fixed workload only; Megatron --micro-batch-size)")
    vp: int = Field(1, ge=1, le=1024, description="virtual pipeline stages (model chunks) per pipeline rank: interleaved 1F1B "
                    "when > 1 (Megatron --num-layers-per-virtual-pipeline-stage n maps to vp = layers/(pp*n)); "
                    "microbatches per pipeline must then be a multiple of pp")


class WorkloadSection(_Section):
    name: str | dict[str, Any] = Field("github", description="preset name, lengths file, or distribution table")
    gbs: int = Field(2048, ge=1, description="sequences per global batch")
    min_len: int | None = Field(256, ge=1)
    max_len: int | None = Field(131072, ge=1)
    clip: Literal["drop", "truncate"] = "drop"
    seq_len: int | None = Field(None, ge=1, le=2**24, description="fixed workload: tokens per sequence (Megatron --seq-length)")
    documents: str | dict[str, Any] | None = Field(
        None, description="fixed workload: documents inside each window (per-document attention); None = full window")


class PolicySection(_Section):
    name: str = "dynamic"
    options: dict[str, Any] = Field(default_factory=dict)


class SimSection(_Section):
    iterations: int = Field(1, ge=1)
    seed: int = Field(0, ge=0)
    noise_cv: float = Field(0.0, ge=0)
    straggler_fraction: float = Field(0.0, ge=0, le=1)
    straggler_slowdown: float = Field(1.0, ge=1.0)
    degraded_link_scale: float = Field(1.0, gt=0, le=1.0)
    overlap_grad_sync: bool = True
    planning: Literal["hidden", "stall", "ignore"] = "hidden"
    grad_reduce_bytes_per_param: int = Field(4, ge=1, le=4)


class RunConfig(_Section):
    """A whole run. Build from TOML with :func:`load_config` or from a dict with :func:`config_from_dict`."""

    model: ModelSection = ModelSection()
    hardware: HardwareSection = HardwareSection()
    cluster: ClusterSection = ClusterSection()
    parallel: ParallelSection = ParallelSection()
    workload: WorkloadSection = WorkloadSection()
    policy: PolicySection = PolicySection()
    sim: SimSection = SimSection()

    @model_validator(mode="after")
    def _check_layout(self) -> RunConfig:
        p = self.parallel
        per = p.tp * p.pp * p.cp
        if self.cluster.gpus % per:
            raise ConfigError("cluster.gpus", self.cluster.gpus,
                              f"a multiple of tp*pp*cp = {p.tp}*{p.pp}*{p.cp} = {per}")
        w = self.workload
        if w.min_len and w.max_len and w.min_len > w.max_len:
            raise ConfigError("workload.min_len", w.min_len, f"<= workload.max_len ({w.max_len})")
        self._check_fixed()
        return self

    def _check_fixed(self) -> None:
        """Fields of the fixed-length workload: set only with it, and Megatron's gbs rule."""
        w, p = self.workload, self.parallel
        if not self.is_fixed:
            for field, v, ok in (("parallel.mbs", p.mbs, 1), ("workload.seq_len", w.seq_len, None),
                                 ("workload.documents", w.documents, None)):
                if v != ok:
                    raise ConfigError(field, v, f"{ok} unless workload.name = 'fixed' (variable-length data is packed by "
                                      "parallel.max_tokens_per_rank)")
            return
        if w.seq_len is None:
            raise ConfigError("workload.seq_len", None, "tokens per sequence (required with workload.name = 'fixed')")
        if w.gbs % (self.dp * p.mbs):
            raise ConfigError("workload.gbs", w.gbs, f"a multiple of dp*mbs = {self.dp}*{p.mbs} = {self.dp * p.mbs} "
                              "(Megatron's rule for fixed-length data)")

    @property
    def is_fixed(self) -> bool:
        """Whether the workload is fixed-length windows (``workload.name = "fixed"``)."""
        return self.workload.name == "fixed"

    @property
    def dp(self) -> int:
        p = self.parallel
        return self.cluster.gpus // (p.tp * p.pp * p.cp)

    @property
    def max_tokens_per_rank(self) -> int:
        p = self.parallel
        if self.is_fixed:  # mbs whole windows; a window on cp > 1 ranks is padded to a multiple of 2*cp
            from dcpsim.policies.plan import per_rank_tokens

            return p.mbs * int(per_rank_tokens(self.workload.seq_len, p.cp))
        if p.max_tokens_per_rank:
            return p.max_tokens_per_rank
        max_len = self.workload.max_len or 131072
        return math.ceil(max_len / (self.dp * p.cp))

    def resolved(self) -> dict:
        """The full configuration with defaults filled in (what gets hashed and written beside results)."""
        d = self.model_dump(mode="json")
        d["derived"] = {"dp": self.dp, "max_tokens_per_rank": self.max_tokens_per_rank}
        return d

    def config_hash(self) -> str:
        """Stable 12-hex-digit hash of the resolved configuration."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def with_updates(self, updates: dict[str, Any]) -> RunConfig:
        """A copy with dotted-path updates, e.g. ``{"parallel.cp": 4, "cluster.gpus": 512}``."""
        d = self.model_dump(mode="python")
        for path, value in updates.items():
            set_dotted(d, path, value)
        return config_from_dict(d)


def set_dotted(d: dict, path: str, value: Any) -> None:
    keys = path.split(".")
    cur = d
    for k in keys[:-1]:
        if not isinstance(cur.get(k), dict):
            raise ConfigError(path, value, "a dotted path to an existing config field (section.field)")
        cur = cur[k]
    if keys[-1] not in cur and not (len(keys) > 1 and keys[-2] == "options"):
        if keys[0] != "policy" or keys[1] != "options":
            raise ConfigError(path, value, f"a known field (section has {sorted(cur)})")
    cur[keys[-1]] = value


def _raise_from_validation(exc: ValidationError, where: str | None) -> None:
    err = exc.errors()[0]
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):  # raised by a cross-field check: already names its field
        raise ConfigError(cause.field, cause.value, cause.expected, where=where) from None
    field = ".".join(str(x) for x in err["loc"]) or "config"
    value = err.get("input")
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "no such field (check the spelling; see dcpsim/run/config.py for the fields)"
    raise ConfigError(field, value, msg.removeprefix("Value error, "), where=where) from None


def config_from_dict(d: dict, where: str | None = None) -> RunConfig:
    try:
        return RunConfig.model_validate(d)
    except ValidationError as exc:
        _raise_from_validation(exc, where)
        raise  # unreachable


def load_config(path: str | Path) -> RunConfig:
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", str(p), "an existing TOML file")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", str(p), f"valid TOML ({exc})") from None
    return config_from_dict(data, where=str(p))
