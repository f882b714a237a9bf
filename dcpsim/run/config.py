"""One run, described by one TOML file (validated; every error names its field).

Example (every field optional; these are the defaults)::

    [model]
    name = "llama-13b"          # or a path to a spec .toml, or an inline table of ModelSpec fields

    [hardware]
    gpu = "h100-sxm"            # profile name or folder
    network_scale = 1.0         # multiplies network bandwidth (<1: degraded/oversubscribed)
    pod_gpus = "flat"           # GPUs per full-bandwidth pod ("flat" = one flat fabric)
    oversubscription = 1.0      # bandwidth divisor for traffic leaving a pod
    nvlink_domain_gpus = "profile"  # GPUs per NVLink domain (72 for NVL72); "profile" = the profile's value

    [cluster]
    gpus = 64                   # = tp * pp * dp * cp

    [parallel]
    tp = 1
    pp = 8
    cp = 2                      # static CP size; dynamic CP goes up to dp*cp
    min_cp = 1
    max_tokens_per_rank = 65536 # Megatron --max-seqlen-per-dp-cp-rank (launch script of PR #2959); "auto" = ceil(max_len/(dp*cp))
    cp_comm = "p2p"             # p2p | all_gather | a2a
    recompute = "full"          # none | selective | full
    mbs = 1                     # sequences per microbatch per DP rank (fixed workload only; Megatron --micro-batch-size)
    precision = "bf16"          # bf16 | fp8 (GEMMs in FP8, attention in BF16; needs a profile with FP8 figures)
    first_stage_layers = 0      # Megatron --decoder-first-pipeline-num-layers; 0 = even split
    last_stage_layers = 0       # Megatron --decoder-last-pipeline-num-layers; 0 = even split
    cross_entropy = "fused"     # fused (--cross-entropy-loss-fusion) | unfused (Megatron-Core's default fp32 cross-entropy)
    attention = "flash"         # flash (fused kernels) | unfused (Megatron before fused attention: GEMMs + softmax + dropout; cp = 1)
    rope_fusion = true          # Megatron's fused RoPE (default); false = --no-rope-fusion (unfused RoPE kernels)

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
    noise_cv = 0.0              # coefficient of variation of kernel times (0 .. 1)
    straggler_fraction = 0.0
    straggler_slowdown = 1.0
    degraded_link_scale = 1.0   # bandwidth factor of one degraded network link
    overlap_grad_sync = true    # Megatron --overlap-grad-reduce (bucketed gradient reduce-scatter)
    overlap_param_gather = true # Megatron --overlap-param-gather (bucketed parameter all-gather)
    param_gather_launch = "first_forward"  # its first bucket: first_forward (Megatron-Core >= r0.9) | step_start (<= r0.8)
    tp_comm_overlap = false     # Megatron --tp-comm-overlap (TP collectives overlapped with GEMMs)
    grad_bucket_params = 0      # parameters per DDP bucket; 0 = Megatron's default max(40M, 1M x DP)
    planning = "hidden"         # modelled planning time: hidden (overlaps the previous iteration) | stall | ignore | sampler
    grad_reduce_bytes_per_param = 4
    fp8_param_gather = true     # Megatron --fp8-param-gather: FP8 block weights all-gathered at 1 B (precision fp8 only)

Validation (:mod:`dcpsim.schema`): types are strict (``2.5`` is not an
int, ``"false"`` is not a bool), numbers finite, bounds physical, unknown keys
refused; a value never silently means "default" (``"auto"``, ``"flat"`` and
``"profile"`` say so). To add a field, declare it with its bounds and a
description (``vp: int = Field(1, ge=1, description=...)``): the TOML file,
``--set section.field=VALUE`` on every command and the fuzz tests
(tests/test_fuzz.py) pick it up; a dedicated CLI flag is one entry in the
command's ``add_config_flags`` list (dcpsim/commands/_common.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from dcpsim.choices import (
    ENGINES,
    NETWORKS,
    POLICIES,
    AttentionKernel,
    Clip,
    CpComm,
    CrossEntropy,
    CudaGraphs,
    DynamicCpExchange,
    ParamGatherLaunch,
    Planning,
    Precision,
    Recompute,
    TransformerImpl,
)
from dcpsim.errors import ConfigError
from dcpsim.failure_rates import llama3_gpu_mtbf_hours
from dcpsim.limits import MAX_GBS
from dcpsim.padding import per_rank_tokens_int
from dcpsim.schema import InputModel, parse_model

PositiveInt = Annotated[int, Field(ge=1)]


class _Section(InputModel):
    """A config section: strict types, finite numbers, no unknown keys (see :mod:`dcpsim.schema`)."""


class ModelSection(_Section):
    name: Annotated[str, Field(min_length=1)] | dict[str, Any] = Field(
        "llama-13b", description="model spec name, path to a spec .toml, or an inline spec table (ModelSpec fields)")


class HardwareSection(_Section):
    gpu: str = Field("h100-sxm", min_length=1, description="hardware profile name or folder")
    network_scale: float = Field(1.0, ge=1e-3, le=1000, description="multiplier on network bandwidth (1e-3 .. 1000)")
    pod_gpus: PositiveInt | Literal["flat"] = Field(
        "flat", description='GPUs per full-bandwidth pod; "flat" = one flat fabric')
    oversubscription: float = Field(1.0, ge=1.0, le=1000, description="bandwidth divisor for traffic leaving a pod")
    nvlink_domain_gpus: PositiveInt | Literal["profile"] = Field(
        "profile", description='GPUs per NVLink domain (72 for NVL72); "profile" = the hardware profile\'s value')


class ClusterSection(_Section):
    gpus: int = Field(64, ge=1, le=10_000_000, description="total GPUs = tp*pp*dp*cp")


class ParallelSection(_Section):
    tp: int = Field(1, ge=1, le=1024, description="tensor-parallel size")
    pp: int = Field(8, ge=1, le=4096, description="pipeline-parallel size")
    cp: int = Field(2, ge=1, le=1_000_000, description="static CP size; dynamic CP uses powers of two up to dp*cp")
    min_cp: int = Field(1, ge=1, le=1_000_000, description="smallest dynamic CP size (a power of two)")
    max_tokens_per_rank: PositiveInt | Literal["auto"] = Field(
        65536, description='Megatron --max-seqlen-per-dp-cp-rank (tokens per rank per microbatch); '
        '"auto" = ceil(max_len/(dp*cp))')
    cp_comm: CpComm = Field("p2p", description="CP communication: p2p ring, all_gather or a2a")
    recompute: Recompute = Field("full", description="activation recomputation")
    mbs: int = Field(1, ge=1, le=4096, description="sequences per microbatch per DP rank (fixed workload only; Megatron --micro-batch-size)")
    vp: int = Field(1, ge=1, le=1024, description="virtual pipeline stages (model chunks) per pipeline rank: interleaved 1F1B "
                    "when > 1 (Megatron --num-layers-per-virtual-pipeline-stage n maps to vp = layers/(pp*n)); "
                    "microbatches per pipeline must then be a multiple of pp")
    precision: Precision = Field("bf16", description="GEMM precision; fp8 needs a profile with FP8 figures")
    first_stage_layers: int = Field(0, ge=0, le=100_000, description="Megatron --decoder-first-pipeline-num-layers; 0 = even split")
    last_stage_layers: int = Field(0, ge=0, le=100_000, description="Megatron --decoder-last-pipeline-num-layers; 0 = even split")
    cross_entropy: CrossEntropy = Field(
        "fused", description="loss kernels: fused (Megatron --cross-entropy-loss-fusion, NeMo's default) or unfused "
                             "(Megatron-Core's default fp32 vocab-parallel cross-entropy: many passes over the logits)")
    attention: AttentionKernel = Field(
        "flash", description="attention kernels: flash (fused) or unfused (batched GEMMs + softmax + dropout over "
                             "the L x L scores, Megatron before fused attention; cp = 1 only)")
    rope_fusion: bool = Field(True, description="RoPE kernels: Transformer Engine's fused RoPE, one kernel per "
                              "query and key each way (Megatron's default), or with --no-rope-fusion Megatron-Core's "
                              "unfused rope_utils path (cos, sin, scale, casts, rotate-half, multiply-adds, concat)")


class WorkloadSection(_Section):
    name: str | dict[str, Any] = Field("github", description="preset name, lengths file, or distribution table")
    gbs: int = Field(2048, ge=1, le=MAX_GBS, description="sequences per global batch")
    min_len: int | None = Field(256, ge=1, le=1 << 40, description="drop (or clamp) sequences shorter than this")
    max_len: int | None = Field(131072, ge=1, le=1 << 40, description="drop (or clamp) sequences longer than this")
    clip: Clip = Field("drop", description="lengths outside [min_len, max_len]: drop (redraw) or truncate")
    seq_len: int | None = Field(None, ge=1, le=2**24, description="fixed workload: tokens per sequence (Megatron --seq-length)")
    documents: str | dict[str, Any] | None = Field(
        None, description="fixed workload: documents inside each window (per-document attention); None = full window")


class PolicySection(_Section):
    name: str = Field("dynamic", min_length=1, description="scheduling policy (dcpsim schedule --list)")
    options: dict[str, Any] = Field(default_factory=dict, description="policy options (keyword arguments)")


class SimSection(_Section):
    iterations: int = Field(1, ge=1, le=1_000_000, description="simulated iterations (a fresh batch each)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of every random stream")
    noise_cv: float = Field(0.0, ge=0, le=1.0, description="coefficient of variation of kernel times (<= 1)")
    straggler_fraction: float = Field(0.0, ge=0, le=1, description="share of GPUs that run slow")
    straggler_slowdown: float = Field(1.0, ge=1.0, le=1000, description="time factor of a slow GPU")
    degraded_link_scale: float = Field(1.0, ge=1e-3, le=1.0, description="bandwidth factor of one degraded network "
                                       "link (1e-3 .. 1)")
    overlap_grad_sync: bool = Field(True, description="Megatron --overlap-grad-reduce: bucketed gradient reduce-scatter "
                                    "overlaps the last backward pass")
    overlap_param_gather: bool = Field(True, description="Megatron --overlap-param-gather: bucketed parameter all-gather "
                                       "overlaps the first forward pass (vp 1: launched by each stage's first forward, "
                                       "as Megatron does; see dcpsim.sim.engine)")
    param_gather_launch: ParamGatherLaunch = Field(
        "first_forward", description="with overlap_param_gather and vp 1, when the first all-gather bucket (on "
        "pipeline stages > 0 the only one) is dispatched: first_forward = by each stage's first forward pre-hook "
        "(Megatron-Core core_r0.9.0 on, param_and_grad_buffer.py finish_param_sync), step_start = at the start "
        "of the training step on every stage (Megatron-Core core_v0.6.0 .. core_r0.8.0, "
        "DistributedOptimizer.zero_grad); later buckets follow the forward either way; vp > 1 unaffected")
    tp_comm_overlap: bool = Field(False, description="Megatron --tp-comm-overlap: TP collectives overlap the GEMMs")
    grad_bucket_params: int = Field(0, ge=0, le=10**12, description="parameters per DDP bucket; 0 = Megatron's "
                                    "default max(40M, 1M x DP)")
    planning: Planning = Field("hidden", description="modelled planning time: hidden (behind the previous "
                               "iteration), stall, ignore, or sampler (Megatron PR #2959's forked prefetching "
                               "sampler, dcpsim.sim.sampler)")
    sampler_prefetch: int = Field(32, ge=1, le=1_000_000, description="with planning = sampler: microbatch indices "
                                  "the data loader prefetches (num_workers x prefetch_factor; PR #2959's launch "
                                  "script: NW=16 workers x PyTorch's default prefetch_factor 2 = 32)")
    grad_reduce_bytes_per_param: int = Field(4, ge=1, le=4, description="bytes per gradient element reduced")
    fp8_param_gather: bool = Field(True, description="Megatron --fp8-param-gather (with parallel.precision = fp8): the "
                                   "distributed optimizer all-gathers the block GEMM weights in FP8, 1 B per parameter "
                                   "(embeddings, output layer and norms stay at 2 B); false = BF16 weights, 2 B; "
                                   "ignored for bf16")
    dynamic_cp_padding: bool = Field(False, description="Megatron's dynamic-CP sample padding: a dynamic policy's "
                                     "samples are padded to a multiple of 2*DP*CP*(TP if TP>1) tokens before "
                                     "scheduling; the padding is timed, not counted as FLOPs")
    dynamic_cp_exchange: DynamicCpExchange = Field(
        "none", description="per-iteration scheduler communication of a dynamic plan before its first microbatch: "
        "async (PR #2959's background scheduler: one small all-reduce over DP*CP), sync (lengths all-gather and "
        "all-to-all rerouting of the samples' tokens), none")
    cp_switch_s: float = Field(0.0, ge=0, le=1.0, description="seconds a group op pays when its ranks ran another CP "
                               "size in the previous microbatch (communicator switch; assumed, no public figure)")
    microbatch_overhead_s: float = Field(0.0, ge=0, le=10.0, description="extra seconds every microbatch op pays "
                                         "(forward), every policy, ON TOP of the time model's per-microbatch fixed "
                                         "cost (BatchCost.overhead_*, kernels x the profile's per_kernel_overhead_s): "
                                         "a sensitivity add-on (assumed, not measured)")
    host_timeline: bool = Field(True, description="price the host (CPU) timeline of every step (kernel launches, "
                                "module and NCCL calls, syncs: dcpsim.cost.host) when the hardware profile has a [host] "
                                "table; false = device time only (what-if: a host that never waits)")
    engine: str = Field(
        "auto", min_length=1, json_schema_extra={"registry": "dcpsim.choices:ENGINES"}, description="a registered engine (dcpsim.sim.engines): events = SimPy event simulation; "
        "fast = the exact vectorised evaluation of the same schedule (same finish times); auto = fast whenever the "
        "network allows")
    network: str = Field(
        "ideal", min_length=1, json_schema_extra={"registry": "dcpsim.choices:NETWORKS"}, description="a registered network model (dcpsim.sim.networks): ideal: every transfer at its profile time; shared: pipeline transfers, the bucketed "
        "gradient reduce-scatter and parameter all-gather, and CP rings (paced by their attention) that leave the "
        "NVLink domain are flows that share NICs and pod uplinks (max-min fair; dcpsim.sim.network; needs the "
        "events engine)")
    long_run_hours: float = Field(0.0, ge=0, le=24 * 3650, description="long-run mode: hours of training simulated at "
                                  "iteration granularity with failures, checkpoints, restarts and slow episodes "
                                  "(0 = off); summary gains goodput_* (dcpsim.sim.longrun)")
    long_run_seeds: int = Field(8, ge=1, le=10_000, description="independent long runs (goodput mean and spread)")
    gpu_mtbf_h: float = Field(llama3_gpu_mtbf_hours(), ge=1.0, le=1e9, description="mean time between failures of one GPU, "
                              "hours (default: Llama 3 report, 419 interruptions in 54 days on 16,384 GPUs)")
    checkpoint_s: float = Field(60.0, ge=0, le=1e6, description="seconds training stops to write a checkpoint (assumed)")
    restart_s: float = Field(600.0, ge=0, le=1e7, description="seconds from a failure to training again (assumed)")
    checkpoint_interval_s: Annotated[float, Field(ge=1.0, le=1e9)] | Literal["young"] = Field(
        "young", description='work seconds between checkpoints; "young" = sqrt(2 x checkpoint_s x job MTBF)')
    slow_gpu_per_day: float = Field(0.0, ge=0, le=1e6, description="episodes per day in which one GPU runs slow")
    slow_gpu_episode_s: float = Field(3600.0, ge=1.0, le=1e8, description="length of a slow-GPU episode, seconds")
    slow_gpu_slowdown: float = Field(1.5, ge=1.0, le=1000, description="time factor of the GPU during an episode")
    degraded_link_per_day: float = Field(0.0, ge=0, le=1e6, description="episodes per day in which one link degrades")
    degraded_link_episode_s: float = Field(3600.0, ge=1.0, le=1e8, description="length of a degraded-link episode, s")
    degraded_link_episode_scale: float = Field(0.25, ge=1e-3, le=1.0, description="bandwidth factor of the link in an "
                                               "episode")


class StepSection(_Section):
    """What a training step does besides the layers' forward and backward, as Megatron-LM's flags set it.

    These are the run's own settings (read from Megatron arguments by :mod:`dcpsim.export.reader`), kept so the
    host model can price them: syncs from logging, deterministic kernels, CUDA graphs, the optimizer path. The
    defaults are Megatron-LM's own defaults (``megatron/training/arguments.py``).
    """

    log_interval: int = Field(100, ge=1, le=10**9, description="Megatron --log-interval: steps between log lines "
                              "(each one reads the loss and timers on the host: a device sync)")
    log_params_norm: bool = Field(False, description="Megatron --log-params-norm: the parameter norm every logged "
                                  "step (a reduction over all parameters and a sync)")
    log_num_zeros_in_grad: bool = Field(False, description="Megatron --log-num-zeros-in-grad: count zero gradients "
                                        "every step (a pass over the gradients and a sync)")
    log_memory: bool = Field(False, description="Megatron --log-memory-to-tensorboard (allocator statistics each "
                             "logged step)")
    log_timers: bool = Field(False, description="Megatron --log-timers-to-tensorboard (timer values each logged step)")
    timing_log_level: int = Field(0, ge=0, le=2, description="Megatron --timing-log-level (timers that sync the "
                                  "device: 0 none, 1 and 2 more)")
    deterministic: bool = Field(False, description="Megatron --deterministic-mode (deterministic kernels)")
    cuda_graphs: CudaGraphs = Field(
        "none", description="Megatron --cuda-graph-impl: CUDA graphs capture the layers' kernels (none = eager)")
    clip_grad: float = Field(1.0, ge=0, le=1e9, description="Megatron --clip-grad (0 = no gradient-norm clipping; "
                             "else a global norm all-reduce and a sync every step)")
    transformer_impl: TransformerImpl = Field(
        "transformer_engine", description="Megatron --transformer-impl: Transformer Engine modules or Megatron's local "
                                          "PyTorch modules")
    grad_accumulation_fusion: bool = Field(True, description="Megatron's gradient-accumulation fusion (off with "
                                           "--no-gradient-accumulation-fusion: a separate add per weight gradient)")
    manual_gc: bool = Field(False, description="Megatron --manual-gc (Python garbage collection only every "
                            "--manual-gc-interval steps)")
    check_for_nan_in_loss_and_grad: bool = Field(True, description="Megatron's default NaN/Inf checks (off with "
                                                 "--no-check-for-nan-in-loss-and-grad): the loss of every microbatch "
                                                 "(last stage) and each gradient bucket are read on the host, a "
                                                 "device sync each")
    test_mode_qk_checks: bool = Field(False, description="Megatron --test-mode with --qk-layernorm: every "
                                      "self-attention forward all-gathers the q/k norm parameters over the DP and TP "
                                      "groups and compares them on the host (4 syncs per rank of each group)")
    attention_mask_in_dataloader: bool = Field(
        True, description="Megatron's default (off with --no-create-attention-mask-in-dataloader): each sample carries "
                          "an s x s attention mask that get_batch copies to the GPU and broadcasts over the TP group, "
                          "and Transformer Engine's unfused attention ORs into its causal mask")
    overlap_p2p_comm: bool = Field(True, description="Megatron's overlap of pipeline p2p with compute (default on, "
                                   "interleaved schedules only; --no-overlap-p2p-communication): off, and always with "
                                   "vp = 1, pipeline sends/receives are batched and followed by a device sync "
                                   "(batch_p2p_sync)")


class RunConfig(_Section):
    """A whole run. Build from TOML with :func:`dcpsim.run.load.load_config` or from a dict with
    :func:`dcpsim.run.load.config_from_dict` (schema and the named extensions' checks); :meth:`with_updates` and
    :func:`parse_config` check the schema alone."""

    model: ModelSection = ModelSection()
    hardware: HardwareSection = HardwareSection()
    cluster: ClusterSection = ClusterSection()
    parallel: ParallelSection = ParallelSection()
    workload: WorkloadSection = WorkloadSection()
    policy: PolicySection = PolicySection()
    sim: SimSection = SimSection()
    step: StepSection = StepSection()

    @model_validator(mode="after")
    def _check_layout(self) -> RunConfig:
        p = self.parallel
        per = p.tp * p.pp * p.cp
        if self.cluster.gpus % per:
            raise ConfigError("cluster.gpus", self.cluster.gpus,
                              f"a multiple of tp*pp*cp = {p.tp}*{p.pp}*{p.cp} = {per}")
        if p.vp > 1 and p.pp == 1:
            raise ConfigError("parallel.vp", p.vp, "1 when parallel.pp = 1 (interleaved model chunks need pipeline stages)")
        if p.min_cp & (p.min_cp - 1):
            raise ConfigError("parallel.min_cp", p.min_cp, "a power of two (1, 2, 4, ...)")
        w = self.workload
        if w.min_len and w.max_len and w.min_len > w.max_len:
            raise ConfigError("workload.min_len", w.min_len, f"<= workload.max_len ({w.max_len})")
        if w.gbs < self.dp:
            raise ConfigError("workload.gbs", w.gbs,
                              f">= the data-parallel size dp = gpus/(tp*pp*cp) = {self.dp} (every DP rank needs a sequence)")
        self._check_fixed()
        self._check_names()
        return self

    def _check_names(self) -> None:
        """policy.name, sim.network and sim.engine are registered names (by name only: the schema imports no
        policy or simulator). What the named things accept (a policy's options, a distribution table's
        parameters, whether the engine runs the network) is checked by the layer that knows them:
        :func:`dcpsim.run.load.check_config`, :class:`dcpsim.sim.settings.SimSettings`."""
        POLICIES.check(self.policy.name)
        NETWORKS.check(self.sim.network)
        ENGINES.check(self.sim.engine)

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
        """Tokens per rank per microbatch; ``"auto"`` resolves to ceil(max_len / (dp*cp))."""
        p = self.parallel
        if self.is_fixed:  # mbs whole windows; a window on cp > 1 ranks is padded to a multiple of 2*cp
            return p.mbs * per_rank_tokens_int(int(self.workload.seq_len), p.cp)
        if p.max_tokens_per_rank != "auto":
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
        # a default [step] section is left out, so configurations written before it existed keep their hash
        exclude = {"step"} if self.step == StepSection() else None
        blob = json.dumps(self.model_dump(mode="json", exclude=exclude), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def with_updates(self, updates: Mapping[str, Any], *, names: Mapping[str, str] | None = None,
                     where: str | None = None) -> RunConfig:
        """A copy with dotted-path updates, e.g. ``{"parallel.cp": 4, "cluster.gpus": 512}``.

        ``names`` maps a dotted path to the name the user gave it (a CLI flag
        such as ``--cp``), so errors name that instead.
        """
        if not isinstance(updates, Mapping):  # else .items() raised a bare AttributeError
            raise ConfigError("updates", type(updates).__name__, "a mapping of dotted paths to values "
                              "({'parallel.cp': 4})", where=where)
        d = self.model_dump(mode="python")
        for path, value in updates.items():
            if not isinstance(path, str):
                raise ConfigError(str(path), value, "a dotted config path section.field as text (e.g. 'parallel.cp')",
                                  where=where)
            try:
                set_dotted(d, path, value)
            except ConfigError as exc:
                raise ConfigError((names or {}).get(path, exc.field), exc.value, exc.expected, where=where) from None
        return parse_config(d, where=where, names=names)


def field_info(path: str):
    """The declaration (pydantic FieldInfo) of a dotted RunConfig path; ConfigError if there is none."""
    model: Any = RunConfig
    info = None
    for key in path.split("."):
        fields = getattr(model, "model_fields", None)
        if not fields or key not in fields:
            raise ConfigError(path, None, "a RunConfig field (section.field)")
        info = fields[key]
        model = info.annotation
    return info


def set_dotted(d: dict, path: str, value: Any) -> None:
    """Set ``d[a][b] = value`` for ``path = "a.b"``; only existing fields (and policy options) may be set."""
    keys = path.split(".")
    if any(not k for k in keys) or len(keys) < 2:
        raise ConfigError(path, value, "a dotted config path section.field (e.g. parallel.cp)")
    cur = d
    for i, k in enumerate(keys[:-1]):
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            if i >= 1 and keys[i - 1] == "policy" and k == "options":
                nxt = cur[k] = {}
            else:
                known = ", ".join(sorted(cur)) if isinstance(cur, dict) else ""
                raise ConfigError(path, value, f"a dotted path to a config field ({k!r} is not a section; known: {known})")
        cur = nxt
    free = keys[:2] == ["policy", "options"] and len(keys) > 2
    if keys[-1] not in cur and not free:
        raise ConfigError(path, value, f"a known field (this section has: {', '.join(sorted(cur))})")
    cur[keys[-1]] = value


def parse_config(d: Mapping[str, Any], where: str | None = None,
                 names: Mapping[str, str] | None = None) -> RunConfig:
    """Validate a parsed TOML table (or dict) against the schema alone; one ConfigError in the user's words.

    Names of policies, networks and engines are checked by name; what a named policy or a workload table
    accepts is checked by :func:`dcpsim.run.load.config_from_dict` (:func:`dcpsim.run.load.check_config`)."""
    return parse_model(RunConfig, d, where=where, names=names)
