"""What a capacity planner is told, as practitioners state it: prices, deadlines, token counts, the data.

Token counts. Every count flag (``--tokens``, ``--gbs-tokens``,
``--max-gbs-tokens``) reads the same units (:mod:`dcpsim.units`): SI suffixes
K = 10^3, M = 10^6, G = B = 10^9, T = 10^12 (``2T``, ``300B``, ``1e12``) and
binary ones only when asked for by name, Ki = 2^10, Mi = 2^20, Gi = 2^30,
Ti = 2^40 (Llama 2's "4M-token" batch is 1,024 sequences of 4,096 =
4,194,304 tokens = ``4Mi``), or a plain integer (``4194304``). One
convention for every flag: "B" is never 2^30 in one flag and 10^9 in another.

The data (:class:`DataSpec`) is either *fixed-length* pre-training
(documents concatenated and cut into windows of ``seq_len`` tokens, every
sequence exactly ``seq_len``, attention over the whole window) or a
*variable-length* workload (a preset, a lengths file or a distribution table,
with ``max_len``: long-context and SFT work). :data:`DATA_PRESETS` names the
common cases.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.limits import MAX_GBS
from dcpsim.units import parse_count


def parse_gpu_prices(text: str) -> dict[str, float]:
    """``"h100-sxm:2.5,h200-sxm:3.5"`` -> ``{"h100-sxm": 2.5, "h200-sxm": 3.5}`` (price per GPU-hour)."""
    out: dict[str, float] = {}
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        name, sep, price = item.rpartition(":")
        try:
            p = float(price)
        except ValueError:
            p = -1.0
        if not sep or not name or p < 0 or not math.isfinite(p):
            raise ConfigError("--gpus", item, "GPU:PRICE pairs, e.g. h100-sxm:2.5 (price per GPU-hour, >= 0)")
        if name in out:
            raise ConfigError("--gpus", item, f"each GPU type once ({name} is listed at {out[name]:g} and {p:g} "
                              "per GPU-hour; one price per type)")
        out[name] = p
    if not out:
        raise ConfigError("--gpus", text, "at least one GPU:PRICE pair")
    return out


def _positive_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1


def _real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def check_request_values(r: Any) -> None:
    """The numbers and lists of a :class:`~dcpsim.planning.CapacityRequest`, checked before they are read:
    ``int()`` made the sizes ``"64"`` GPU counts 6 and 4 and ``64.5`` 64, a NaN price costed every row NaN,
    ``iterations=0`` meant the default, and a string of tokens or a dict as ``base`` failed deep inside."""
    from dcpsim.run.config import RunConfig

    if not _real(r.tokens):
        raise ConfigError("--tokens", r.tokens, "a positive number of training tokens (parse_token_count reads '2T')")
    if isinstance(r.sizes, str | bytes | numbers.Number) or not all(_positive_int(s) for s in r.sizes):
        raise ConfigError("--sizes", r.sizes, "a list of positive integer GPU counts, e.g. (512, 1024)")
    if isinstance(r.policies, str | bytes):
        raise ConfigError("--policies", r.policies, "a list of policy names, e.g. ('packing', 'dynamic')")
    for name, price in ({} if isinstance(r.gpu_prices, str) else dict(r.gpu_prices)).items():
        if not _real(price) or not math.isfinite(price) or price < 0:
            raise ConfigError(f"--gpus {name}", price, "a finite price per GPU-hour >= 0")
    if r.deadline_days is not None and (not _real(r.deadline_days) or not math.isfinite(r.deadline_days)
                                        or r.deadline_days <= 0):
        raise ConfigError("--deadline", r.deadline_days, "a positive number of days (or None: no deadline)")
    for flag, v in (("--simulate", r.simulate), ("--seeds", r.seeds), ("--iterations", r.iterations)):
        if not (v is None and flag == "--iterations") and not _positive_int(v):
            raise ConfigError(flag, v, "a positive integer" + (" (or None: the default)" if flag == "--iterations" else ""))
    if r.base is not None and not isinstance(r.base, RunConfig):
        raise ConfigError("base", type(r.base).__name__, "a RunConfig (RunConfig().with_updates({...}) or load_config)")


def parse_duration_days(text: str | float | None) -> float | None:
    """``"30d"``, ``"720h"``, ``"4w"`` or a plain number of days -> days."""
    if text is None:
        return None
    s = str(text).strip().lower()
    units = {"d": 1.0, "h": 1 / 24.0, "w": 7.0}
    mult = units.get(s[-1:], None)
    num = s[:-1] if mult is not None else s
    try:
        v = float(num) * (mult or 1.0)
    except ValueError:
        v = -1.0
    if not v > 0 or not math.isfinite(v):
        raise ConfigError("--deadline", text, "a positive duration such as 30d, 720h or 4w")
    return v


def parse_token_count(text: str | float | int, field: str = "--gbs-tokens") -> int:
    """``"4M"`` -> 4,000,000; ``"4Mi"`` -> 4,194,304; ``"2T"``; ``"300B"``; ``"1e12"`` (:mod:`dcpsim.units`)."""
    return parse_count(text, field, "token count")


def fixed_workload(seq_len: int, documents: str | dict | None = None, gbs: int | None = None) -> dict[str, Any]:
    """``RunConfig.with_updates`` entries of fixed-length pre-training (the simulator's ``fixed`` workload).

    Every sequence is one ``seq_len`` window; ``documents`` (a workload) makes attention per document
    inside each window, ``None`` one causal block over the whole window.
    """
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ConfigError("--seq-len", seq_len, "a positive number of tokens per sequence")
    u: dict[str, Any] = {"workload.name": "fixed", "workload.seq_len": int(seq_len), "workload.documents": documents}
    if gbs is not None:
        u["workload.gbs"] = int(gbs)
    return u


@dataclass(frozen=True)
class DataPreset:
    """A named kind of training data: fixed windows (``seq_len``) or a variable-length workload with a cap."""

    name: str
    description: str
    seq_len: int | None = None
    workload: str | None = None
    max_len: int | None = None


DATA_PRESETS: dict[str, DataPreset] = {p.name: p for p in (
    DataPreset("pretrain-4k", "pre-training, fixed 4,096-token windows (Llama 2)", seq_len=4096),
    DataPreset("pretrain-8k", "pre-training, fixed 8,192-token windows (Llama 3)", seq_len=8192),
    DataPreset("long-context-32k", "long-context continued training, GitHub-like lengths up to 32K", workload="github",
               max_len=32768),
    DataPreset("long-context-128k", "long-context continued training, GitHub-like lengths up to 128K",
               workload="github", max_len=131072),
    DataPreset("sft-8k", "supervised fine-tuning, Wikipedia-like lengths up to 8K (unpacked documents)",
               workload="wikipedia", max_len=8192),
    DataPreset("sft-32k", "supervised fine-tuning, CommonCrawl-like lengths up to 32K", workload="commoncrawl",
               max_len=32768),
)}


@dataclass(frozen=True)
class DataSpec:
    """The data and global batch a plan is made for.

    seq_len:   fixed-length windows (tokens), or ``None`` for a variable-length workload.
    workload:  the workload's config form (``workload.name``): a preset name, file or distribution dict.
    max_len / min_len: the variable-length workload's bounds (tokens); ``None`` for fixed windows.
    gbs:       sequences per global batch (at every cluster size unless the batch scales).
    mean_len:  mean sequence length (tokens), to state the batch in tokens.
    """

    seq_len: int | None
    workload: str | dict
    gbs: int
    mean_len: float
    max_len: int | None = None
    min_len: int | None = None
    documents: str | dict | None = None

    @property
    def fixed(self) -> bool:
        return self.seq_len is not None

    @property
    def gbs_tokens(self) -> float:
        return self.gbs * self.mean_len

    @property
    def longest(self) -> int:
        """Longest sequence the data can hold (tokens)."""
        return int(self.seq_len if self.fixed else (self.max_len or 131072))

    def config_updates(self, gbs: int | None = None) -> dict[str, Any]:
        """``RunConfig.with_updates`` entries for this data (``gbs`` sequences, default the spec's)."""
        if self.fixed:
            return fixed_workload(int(self.seq_len), self.documents, int(gbs or self.gbs))
        return {"workload.name": self.workload, "workload.min_len": self.min_len, "workload.max_len": self.max_len,
                "workload.gbs": int(gbs or self.gbs), "workload.seq_len": None, "workload.documents": None}

    def describe(self) -> str:
        if self.fixed:
            att = (f"per-document attention ({self.documents})" if self.documents is not None
                   else "attention over the whole window")
            return f"fixed-length windows of {self.seq_len} tokens (documents concatenated; {att})"
        name = self.workload if isinstance(self.workload, str) else "custom distribution"
        return f"variable-length {name}, {self.min_len or 1}..{self.max_len} tokens (mean {self.mean_len:,.0f})"


def workload_mean(workload: str | dict, min_len: int | None, max_len: int | None) -> float:
    """Mean length (tokens) of a workload within its bounds."""
    from dcpsim.workload import get_workload

    dist = get_workload(workload, min_len=min_len, max_len=max_len)
    m = dist.mean_estimate()
    if m is None or not m > 0:
        import numpy as np

        m = float(dist.sample(20000, np.random.default_rng(0)).mean())
    return float(m)


def _check_batch_size(gbs: int, mean: float, seq_len: int | None, gbs_tokens: int | None) -> None:
    """At most :data:`dcpsim.limits.MAX_GBS` sequences; ``seq_len`` when the batch came from tokens in fixed windows."""
    if gbs <= MAX_GBS:
        return
    if seq_len is not None:
        tokens = gbs * mean
        raise ConfigError("--seq-len", seq_len, f"a window of at least {math.ceil(tokens / MAX_GBS):,} tokens (a batch "
                          f"of {tokens:,.0f} tokens in {seq_len}-token windows is {gbs:,} sequences, above the "
                          f"limit of {MAX_GBS:,})")
    raise ConfigError("--gbs-tokens" if gbs_tokens is not None else "--gbs", gbs_tokens or gbs,
                      f"a batch of at most {MAX_GBS:,} sequences (this one is {gbs:,} of mean length {mean:,.0f})")


def make_data_spec(*, seq_len: int | None = None, workload: str | dict | None = None, max_len: int | None = None,
                   min_len: int | None = None, gbs: int | None = None, gbs_tokens: int | None = None,
                   preset: str | None = None, documents: str | dict | None = None) -> DataSpec:
    """One :class:`DataSpec` from what the user said (see :func:`dcpsim.planning.plan_capacity`).

    Exactly one of ``seq_len`` (fixed windows), ``workload`` (variable lengths)
    or ``preset`` (:data:`DATA_PRESETS`); the batch as ``gbs`` sequences or
    ``gbs_tokens`` (rounded to whole sequences of the mean length).
    """
    if preset is not None:
        if preset not in DATA_PRESETS:
            raise ConfigError("--data", preset, f"one of {sorted(DATA_PRESETS)}")
        if seq_len is not None or workload is not None:
            raise ConfigError("--data", preset, "either --data or --seq-len/--workload, not both")
        p = DATA_PRESETS[preset]
        seq_len, workload, max_len = p.seq_len, p.workload, max_len or p.max_len
    if seq_len is not None and workload is not None:
        raise ConfigError("--seq-len", seq_len, "either --seq-len (fixed windows) or --workload (variable lengths)")
    if gbs is not None and gbs_tokens is not None:
        raise ConfigError("--gbs", gbs, "either --gbs (sequences) or --gbs-tokens, not both")
    if seq_len is not None:
        if not isinstance(seq_len, int) or seq_len < 1:
            raise ConfigError("--seq-len", seq_len, "a positive number of tokens per sequence")
        mean = float(seq_len)
        wl: str | dict = "fixed"
        max_len = min_len = None
    else:
        wl = workload if workload is not None else "github"
        max_len = max_len or 131072
        min_len = min_len if min_len is not None else 256
        mean = workload_mean(wl, min_len, max_len)
    derived = gbs is None
    if gbs is None:
        tokens = gbs_tokens if gbs_tokens is not None else 4 * 2**20
        if tokens < mean:
            raise ConfigError("--gbs-tokens", tokens, f"a batch of at least one sequence ({mean:,.0f} tokens on "
                              "average here)")
        gbs = max(1, int(round(tokens / mean)))
    if not isinstance(gbs, int) or gbs < 1:
        raise ConfigError("--gbs", gbs, "a positive number of sequences")
    _check_batch_size(gbs, mean, seq_len if derived else None, gbs_tokens)
    if documents is not None and seq_len is None:
        raise ConfigError("--documents", documents, "only with --seq-len (per-document attention in fixed windows)")
    return DataSpec(seq_len=seq_len, workload=wl, gbs=gbs, mean_len=mean, max_len=max_len, min_len=min_len,
                    documents=documents)
