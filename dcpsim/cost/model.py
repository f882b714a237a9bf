"""Per-microbatch time and memory of one CP group on one pipeline stage.

The cost of a *pack* (the sequences one CP group trains in one microbatch) is
computed per rank of the group. Every rank of a group does the same work: the
load-balanced causal split (rank i of c holds chunks i and 2c−1−i of every
document, each document padded to a multiple of 2c) gives each rank exactly
1/c of every document's causal attention and of its tokens.

Time model (all seconds, for the ``layers_per_stage`` layers of one stage):

* GEMM: each forward GEMM of a block costs 2·s·n·k FLOPs at the profile's
  achieved FLOP/s for ``s`` local tokens; backward is twice the forward FLOPs.
* Attention: per document of padded length L on a c-way group, each rank does
  F/c with F = 2·L²·q/TP forward (causal); with the ring (``p2p``) and
  ``all_gather`` the diagonal 1/c of it runs as a causal block and the rest as
  non-causal blocks, each at the profile's efficiency for L/c tokens; with
  ``a2a`` each rank runs whole sequences for 1/c of the heads (efficiency at
  L). Backward costs 2.5× forward FLOPs (FlashAttention's recomputation).
  Each document is its own causal block, so short documents run at
  short-length efficiency.
* CP communication per layer: ``p2p`` ring of c−1 steps, each moving the
  local K and V (s·2·kv·2 B/TP), hidden behind that step's attention block;
  only the excess is exposed (backward moves twice the bytes). A ring that
  leaves the NVLink domain runs at the slowest hop (one NIC). ``all_gather``
  exposes a K/V all-gather forward and a reduce-scatter backward. ``a2a``
  exposes four all-to-alls each way.
* Element-wise work (RMSNorms, RoPE, SwiGLU, residual adds) is memory-bound:
  per token per layer it moves about (20·h + 6·ffn + 4·(q + 2·kv))·/TP bytes
  forward and twice that backward, at the profile's HBM bandwidth (a
  measured profile carries the measured copy bandwidth; the public ones the
  datasheet figure, so this term is optimistic there).
* TP communication with sequence parallelism: two all-gathers and two
  reduce-scatters of s·h·2 B per layer each way, on NVLink, exposed.
* Recompute: ``full`` repeats the forward (GEMM, attention, communication)
  before the backward; ``selective`` repeats the attention forward only.
* The output layer (logits GEMM, final norm, cross-entropy) is reported
  separately (``head_*``), since only the last pipeline stage runs it; the
  embedding (``embed_*``) runs on the first stage only.
* Precision: with ``precision="fp8"`` the block GEMMs run at the profile's
  FP8 rate (:meth:`HardwareProfile.gemm_flops_per_s`) and pay their casts,
  memory-bound at HBM bandwidth (``fp8_cast_*``): forward, each GEMM input
  is read in BF16 and written in FP8 plus its FP8 transpose for the weight
  gradient (4 B per element of the M×K input); backward, each output
  gradient likewise (4 B per element of M×N). Assumed unfused (Transformer
  Engine fuses some casts into norms; this is the upper end). Attention
  and the output layer stay BF16. Weight casts are once per iteration
  (:func:`fp8_weight_cast_bytes`, priced by the simulator).
* Fixed costs: every layer launches ``KERNELS_*`` kernels (counted below for
  Megatron-Core with Transformer Engine); the host needs
  ``per_kernel_overhead_s`` per launch (profile ``[timing]``), so a layer
  takes at least ``kernels × per_kernel_overhead_s``: when the GPU work is
  shorter, the difference is exposed (``launch_*``). Each microbatch pays
  its own launches (pipeline send/receive, embedding or loss) as
  ``overhead_*``, not scaled by layers.
* TP communication overlap (``tp_comm_overlap``, Megatron --tp-comm-overlap):
  the TP collectives are split into TP chunks pipelined with the GEMMs
  (Transformer Engine userbuffers); one chunk stays exposed, the rest hides
  behind the GEMMs of the same pass: exposed ``max(t_tp / TP, t_tp − t_gemm)``.
* Uneven pipeline stages (``first_stage_layers``, ``last_stage_layers``,
  Megatron --decoder-first/last-pipeline-num-layers): ``stage_layers`` holds
  every stage's layer count; batch costs are for ``layers_per_stage`` =
  the largest count, and :attr:`BatchCost.layer_fwd_s` scales linearly to
  any other stage (:mod:`dcpsim.sim.durations` does so per stage).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from dcpsim.choices import CP_COMM_TYPES as _CP_COMM_TYPES
from dcpsim.cost.padding import padded_lengths
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.hardware import HardwareProfile, get_profile
from dcpsim.hardware.placement import check_tp_in_domain
from dcpsim.model import RECOMPUTE_MODES, ModelSpec, get_model, memory_per_gpu
from dcpsim.model.accounting import ATTN_BWD_FLOPS_FACTOR, attention_flops

CP_COMM_TYPES = _CP_COMM_TYPES  # defined once in dcpsim.choices
GEMM_BWD_FLOPS_FACTOR = 2.0  # dgrad + wgrad
ELEMENTWISE_BWD_FACTOR = 2.0  # backward of an element-wise op reads the saved input and the incoming gradient
PRECISIONS = ("bf16", "fp8")
# Share of a GPU's HBM (the capacity NVML reports, profile ``hbm_bytes``: 79.6 GiB on an "80 GB" H100) that the
# tensors the memory model counts may fill; the other 10% is for what it does not count: the CUDA context, NCCL
# and cuBLAS workspaces, the caching allocator's fragmentation. 0.9 is dcpsim's original share, NOT fitted to any
# run (the published runs are the check: dcpsim.published.memory). Cross-check: the Dynamic-CP solver of
# Megatron-LM PR #2959 rejects plans above 70 GiB on an 80 GB GPU (REFERENCE §1), 88% of 79.6 GiB.
USABLE_HBM_FRACTION = 0.9

# Kernels per transformer layer, Megatron-Core with Transformer Engine (fused ops), counted:
KERNELS_FWD = 12  # norm, QKV GEMM, RoPE q and k (2), flash fwd, proj GEMM, residual add, norm, fc1 GEMM, SwiGLU, fc2 GEMM, residual add
KERNELS_BWD = 20  # 4 GEMMs x (dgrad + wgrad), 2 norms x (dx + dgamma), SwiGLU, RoPE q and k (2), flash bwd (preprocess, main, dq convert), 2 residual-gradient adds
KERNELS_TP = 4  # sequence parallel: 2 all-gathers + 2 reduce-scatters, each way
KERNELS_FP8 = 4  # one cast(+transpose) per GEMM input (fwd) or output gradient (bwd)
KERNELS_RING_STEP_FWD = 3  # per extra ring step: attention block, output/LSE correction, send/recv
KERNELS_RING_STEP_BWD = 5  # per extra ring step: attention bwd (3), dK/dV accumulate, send/recv
KERNELS_CP_COLLECTIVE = {"all_gather": 1, "a2a": 4}  # per pass
KERNELS_MICROBATCH = 2  # pipeline send + receive, each way, every stage
KERNELS_EMBED = (1, 2)  # first stage: embedding lookup fwd; bwd (gradient scatter-add, zeroing)
KERNELS_UNFUSED_ATTENTION = (5, 8)  # extra over one flash kernel: scores GEMM, softmax, dropout, context GEMM, copies; bwd: 4 GEMMs, 2 elementwise, copies
ATTENTION_KERNELS = ("flash", "unfused")
# Cross-entropy HBM bytes per logit (s x V/TP), forward and backward:
# fused (one kernel reads the BF16 logits twice, the backward reads them and writes the gradient): 4 and 4;
# unfused (Megatron-Core's vocab-parallel cross-entropy without --cross-entropy-loss-fusion, counted from its
# passes): forward casts to fp32 (2 + 4), max (4), subtract in place (8), exp (8), sum (4), divide (8) = 38;
# backward scales the saved softmax (8) and casts the gradient to BF16 (4 + 2) = 14.
CROSS_ENTROPY_BYTES = {"fused": (4.0, 4.0), "unfused": (38.0, 14.0)}
KERNELS_CROSS_ENTROPY_UNFUSED = (6, 2)  # extra launches over the fused kernel (cast, max, sub, exp, sum, div; mul, cast)
KERNELS_HEAD = (9, 8)  # last stage fwd: final norm, logits GEMM, cross-entropy (max, exp-sum, 2 TP all-reduces, target logit, loss), loss average; bwd: CE grad, 2 GEMMs, 2 norm, scale, 2 misc


@dataclass
class BatchCost:
    """Per-pack cost arrays (one entry per pack; seconds unless named otherwise).

    Times are per rank of the pack's CP group for one pipeline stage of
    ``layers_per_stage`` layers, output layer excluded (see ``head_*``).
    """

    local_tokens: np.ndarray
    gemm_fwd_s: np.ndarray
    attn_fwd_s: np.ndarray
    cp_fwd_exposed_s: np.ndarray
    tp_fwd_s: np.ndarray
    gemm_bwd_s: np.ndarray
    attn_bwd_s: np.ndarray
    cp_bwd_exposed_s: np.ndarray
    tp_bwd_s: np.ndarray
    elementwise_fwd_s: np.ndarray
    elementwise_bwd_s: np.ndarray
    recompute_s: np.ndarray
    cp_comm_total_s: np.ndarray
    head_fwd_s: np.ndarray
    head_bwd_s: np.ndarray
    peak_memory_bytes: np.ndarray
    fits_memory: np.ndarray
    fp8_cast_fwd_s: np.ndarray
    fp8_cast_bwd_s: np.ndarray
    launch_fwd_s: np.ndarray
    launch_bwd_s: np.ndarray
    overhead_fwd_s: np.ndarray
    overhead_bwd_s: np.ndarray
    embed_fwd_s: np.ndarray
    embed_bwd_s: np.ndarray
    cp_fwd_comm_s: np.ndarray  # forward part of ``cp_comm_total_s`` (all of the ring's forward transfers)

    @property
    def layer_fwd_s(self) -> np.ndarray:
        """Forward time of the ``layers_per_stage`` layers (scales linearly with the layer count)."""
        return (self.gemm_fwd_s + self.attn_fwd_s + self.cp_fwd_exposed_s + self.tp_fwd_s + self.elementwise_fwd_s
                + self.fp8_cast_fwd_s + self.launch_fwd_s)

    @property
    def layer_bwd_s(self) -> np.ndarray:
        """Backward time of the layers including recomputation (scales linearly with the layer count)."""
        return (self.gemm_bwd_s + self.attn_bwd_s + self.cp_bwd_exposed_s + self.tp_bwd_s + self.elementwise_bwd_s
                + self.recompute_s + self.fp8_cast_bwd_s + self.launch_bwd_s)

    @property
    def fwd_s(self) -> np.ndarray:
        """Forward time of one stage: its layers plus the per-microbatch overhead (embedding and head excluded)."""
        return self.layer_fwd_s + self.overhead_fwd_s

    @property
    def bwd_s(self) -> np.ndarray:
        """Backward time including recomputation and the per-microbatch overhead."""
        return self.layer_bwd_s + self.overhead_bwd_s

    @property
    def total_s(self) -> np.ndarray:
        return self.fwd_s + self.bwd_s

    def __len__(self) -> int:
        return len(self.local_tokens)

    def pack(self, i: int) -> PackCost:
        return PackCost(**{f.name: float(getattr(self, f.name)[i]) for f in fields(self)})


@dataclass(frozen=True)
class PackCost:
    """Scalar breakdown of one pack (see :class:`BatchCost` for meanings)."""

    local_tokens: float
    gemm_fwd_s: float
    attn_fwd_s: float
    cp_fwd_exposed_s: float
    tp_fwd_s: float
    gemm_bwd_s: float
    attn_bwd_s: float
    cp_bwd_exposed_s: float
    tp_bwd_s: float
    elementwise_fwd_s: float
    elementwise_bwd_s: float
    recompute_s: float
    cp_comm_total_s: float
    head_fwd_s: float
    head_bwd_s: float
    peak_memory_bytes: float
    fits_memory: float
    fp8_cast_fwd_s: float = 0.0
    fp8_cast_bwd_s: float = 0.0
    launch_fwd_s: float = 0.0
    launch_bwd_s: float = 0.0
    overhead_fwd_s: float = 0.0
    overhead_bwd_s: float = 0.0
    embed_fwd_s: float = 0.0
    embed_bwd_s: float = 0.0
    cp_fwd_comm_s: float = 0.0

    @property
    def fwd_s(self) -> float:
        return (self.gemm_fwd_s + self.attn_fwd_s + self.cp_fwd_exposed_s + self.tp_fwd_s + self.elementwise_fwd_s
                + self.fp8_cast_fwd_s + self.launch_fwd_s + self.overhead_fwd_s)

    @property
    def bwd_s(self) -> float:
        return (self.gemm_bwd_s + self.attn_bwd_s + self.cp_bwd_exposed_s + self.tp_bwd_s + self.elementwise_bwd_s
                + self.recompute_s + self.fp8_cast_bwd_s + self.launch_bwd_s + self.overhead_bwd_s)

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(fwd_s=self.fwd_s, bwd_s=self.bwd_s, total_s=self.total_s)
        return d


def stage_layer_counts(n_layers: int, pp: int, first: int = 0, last: int = 0) -> np.ndarray:
    """Layers on each of ``pp`` pipeline stages (Megatron --decoder-first/last-pipeline-num-layers).

    ``first``/``last`` (0 = not set) fix the first/last stage's count; the
    remaining layers split evenly over the other stages, which must divide
    them (Megatron's rule). Raises :class:`ConfigError` naming the field.
    """
    for name, v in (("parallel.first_stage_layers", first), ("parallel.last_stage_layers", last)):
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise ConfigError(name, v, "an integer >= 0 (0 = even split)")
    if pp == 1:
        if first or last:
            raise ConfigError("parallel.first_stage_layers" if first else "parallel.last_stage_layers",
                              first or last, "0 with pp = 1 (one stage holds every layer)")
        return np.array([n_layers], dtype=np.int64)
    fixed = int(first > 0) + int(last > 0)
    rest, others = n_layers - first - last, pp - fixed
    if rest < 0 or (others == 0 and rest != 0) or (others > 0 and (rest % others or rest == 0)):
        field = "parallel.first_stage_layers" if first else "parallel.last_stage_layers"
        if not fixed:
            raise ConfigError("pp", pp, f"a divisor of the model's {n_layers} layers "
                                        "(or set parallel.first_stage_layers / last_stage_layers)")
        raise ConfigError(field, first if first else last,
                          f"first/last stage layers leaving a positive multiple of the other {others} stages "
                          f"from {n_layers} layers (got first={first}, last={last})")
    out = np.full(pp, rest // others if others else 0, dtype=np.int64)
    if first:
        out[0] = first
    if last:
        out[-1] = last
    return out


def fp8_weight_cast_bytes(model: ModelSpec, tp: int) -> float:
    """HBM bytes per layer to cast the block weights to FP8 once per iteration (read BF16, write FP8 + transpose)."""
    return 4.0 * model.linear_params_per_layer() / tp


class CostModel:
    """Cost of packs for one (hardware, model, TP, PP, CP-comm, recompute) setting.

    Parameters
    ----------
    profile, model:
        hardware profile and model spec (objects or names).
    tp, pp:
        tensor- and pipeline-parallel sizes; each stage runs n_layers/pp layers.
    dp_cp:
        ranks per pipeline stage (DP×CP), over which the optimizer state is
        sharded (memory only).
    cp_comm:
        ``p2p`` (ring), ``all_gather`` or ``a2a`` (Ulysses).
    recompute:
        ``none``, ``selective`` or ``full``.
    memory_limit_bytes:
        usable HBM per GPU; default ``USABLE_HBM_FRACTION`` of the profile's HBM.
    precision:
        ``bf16`` or ``fp8`` (block GEMMs in FP8; needs a profile with FP8 figures).
    tp_comm_overlap:
        overlap TP collectives with the GEMMs (Megatron --tp-comm-overlap).
    first_stage_layers, last_stage_layers:
        Megatron --decoder-first/last-pipeline-num-layers (0: even split).
    attention:
        ``flash`` (fused kernels, the profile's attention table) or ``unfused``
        (Megatron before fused attention: batched GEMMs + softmax + dropout
        over the L×L scores, see :meth:`_unfused_attention`; cp = 1 only).
    cross_entropy:
        ``fused`` (one kernel, Megatron --cross-entropy-loss-fusion / NeMo) or
        ``unfused`` (Megatron-Core's default fp32 vocab-parallel cross-entropy,
        many passes over the logits; ``CROSS_ENTROPY_BYTES``).
    grad_bytes_per_param:
        bytes per element of the gradient buffer (memory only): 4 = FP32 (Megatron-LM's default for BF16),
        2 = BF16 (``grad_reduce_in_fp32=False``; the run's ``sim.grad_reduce_bytes_per_param``).
    """

    def __init__(
        self,
        profile: HardwareProfile | str,
        model: ModelSpec | str,
        *,
        tp: int = 1,
        pp: int = 1,
        dp_cp: int = 1,
        cp_comm: str = "p2p",
        recompute: str = "full",
        memory_limit_bytes: float | None = None,
        precision: str = "bf16",
        tp_comm_overlap: bool = False,
        first_stage_layers: int = 0,
        last_stage_layers: int = 0,
        attention: str = "flash",
        microbatches_in_flight: float | None = None,
        cross_entropy: str = "fused",
        grad_bytes_per_param: float = 4.0,
    ) -> None:
        self.profile = get_profile(profile)
        self.model = get_model(model)
        for name, v in (("tp", tp), ("pp", pp), ("dp_cp", dp_cp)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(name, v, "a positive integer")
        self.stage_layers = stage_layer_counts(self.model.n_layers, int(pp), first_stage_layers, last_stage_layers)
        self._set_kernels(precision, attention, cross_entropy)
        self.tp_comm_overlap = bool(tp_comm_overlap)
        if tp > self.profile.nvlink_domain_gpus:
            raise ConfigError("tp", tp, f"<= the NVLink domain ({self.profile.nvlink_domain_gpus} GPUs)")
        check_tp_in_domain(int(tp), int(self.profile.nvlink_domain_gpus))  # TP collectives are priced at NVLink speed
        for dim in ("n_heads", "n_kv_heads", "ffn_hidden"):
            if getattr(self.model, dim) % tp:
                raise ConfigError("tp", tp, f"a divisor of model.{dim} ({getattr(self.model, dim)})")
        if cp_comm not in CP_COMM_TYPES:
            raise ConfigError("cp_comm", cp_comm, f"one of {CP_COMM_TYPES}")
        if recompute not in RECOMPUTE_MODES:
            raise ConfigError("recompute", recompute, f"one of {RECOMPUTE_MODES}")
        self.tp, self.pp, self.dp_cp = int(tp), int(pp), int(dp_cp)
        # activations stage 0 holds, in microbatches of a whole stage (None: pp, 1F1B; the interleaved
        # schedule holds more: dcpsim.pipeline.activations_in_flight)
        self.microbatches_in_flight = microbatches_in_flight
        self.cp_comm, self.recompute = cp_comm, recompute
        self.layers_per_stage = int(self.stage_layers.max())
        if not grad_bytes_per_param > 0:
            raise ConfigError("grad_bytes_per_param", grad_bytes_per_param, "a positive number of bytes")
        self.grad_bytes_per_param = float(grad_bytes_per_param)
        self.memory_limit_bytes = (
            USABLE_HBM_FRACTION * self.profile.hbm_bytes if memory_limit_bytes is None else float(memory_limit_bytes)
        )
        if self.memory_limit_bytes <= 0:
            raise ConfigError("memory_limit_bytes", memory_limit_bytes, "a positive number of bytes")
        self._shapes = self.model.gemm_shapes(tp)

    def _set_kernels(self, precision: str, attention: str, cross_entropy: str) -> None:
        """Validate and keep the kernel choices (precision, attention, cross-entropy)."""
        if precision not in PRECISIONS:
            raise ConfigError("parallel.precision", precision, f"one of {PRECISIONS}")
        if precision == "fp8" and not self.profile.timing.has_fp8:
            raise ConfigError("parallel.precision", precision,
                              f"'bf16': profile {self.profile.name} has no FP8 figures "
                              "(timing.peak_fp8_flops, timing.fp8_gemm_best_tflops)")
        if attention not in ATTENTION_KERNELS:
            raise ConfigError("parallel.attention", attention, f"one of {ATTENTION_KERNELS}")
        if cross_entropy not in CROSS_ENTROPY_BYTES:
            raise ConfigError("parallel.cross_entropy", cross_entropy, f"one of {tuple(CROSS_ENTROPY_BYTES)}")
        self.precision, self.attention, self.cross_entropy = precision, attention, cross_entropy

    # ------------------------------------------------------------------ API
    def pack_cost(self, lengths, cp: int = 1, *, spans_network: bool = False, check_memory: bool = True) -> PackCost:
        """Breakdown of one pack of ``lengths`` on a ``cp``-rank group.

        Raises :class:`InfeasibleError` when the pack does not fit in memory
        (``check_memory``) or the CP size does not divide the heads (``a2a``).
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.ndim != 1 or lengths.size == 0 or (lengths <= 0).any():
            raise ConfigError("lengths", lengths.tolist()[:8], "a non-empty list of positive token counts")
        out = self.batch_cost(lengths, np.zeros(lengths.size, dtype=np.int64), np.array([cp]), np.array([spans_network]))
        pc = out.pack(0)
        if check_memory and not pc.fits_memory:
            raise InfeasibleError(
                "memory",
                f"pack of {int(lengths.sum())} tokens on cp={cp} needs {pc.peak_memory_bytes / 2**30:.1f} GiB "
                f"per GPU > limit {self.memory_limit_bytes / 2**30:.1f} GiB",
            )
        return pc

    def batch_cost(self, lengths, pack_ids, cp, spans_network=None) -> BatchCost:
        """Vectorised cost of many packs.

        ``lengths`` (int, one per document) and ``pack_ids`` (same size, the
        pack each document belongs to, 0..P−1) describe the packs; ``cp`` and
        ``spans_network`` have one entry per pack.
        """
        lengths = np.asarray(lengths, dtype=np.float64)
        pack_ids = np.asarray(pack_ids, dtype=np.int64)
        cp = np.asarray(cp, dtype=np.int64)
        npk = cp.size
        spans = self._check_packs(cp, spans_network)
        L, prof = self.layers_per_stage, self.profile

        padded = padded_lengths(lengths, cp[pack_ids]).astype(np.float64)
        s = np.bincount(pack_ids, weights=padded, minlength=npk) / np.maximum(cp, 1)  # local tokens per rank

        gemm_fwd, cast_fwd, cast_bwd = self._gemm_terms(s)
        gemm_bwd = GEMM_BWD_FLOPS_FACTOR * gemm_fwd
        attn_fwd, attn_bwd = self._attention_terms(padded, cp, pack_ids)
        cp_fwd, cp_bwd, cp_total, cp_fwd_comm = self._cp_terms(s, cp, spans, attn_fwd, attn_bwd)
        tp_fwd, tp_bwd = self._tp_terms(s, gemm_fwd, gemm_bwd)
        ew_fwd = s * self.elementwise_bytes_per_token_layer() / prof.hbm_bw_bytes_per_s
        ew_bwd = ELEMENTWISE_BWD_FACTOR * ew_fwd
        if self.recompute == "full":
            recompute = gemm_fwd + attn_fwd + cp_fwd + tp_fwd + ew_fwd + cast_fwd
        elif self.recompute == "selective":
            recompute = attn_fwd.copy()
        else:
            recompute = np.zeros(npk)

        # launch floors per layer: the host needs kernels x per-kernel time; the GPU work hides it when longer
        k_fwd, k_bwd = self.kernels_per_layer(cp)
        o = prof.timing.per_kernel_overhead_s
        gpu_fwd = gemm_fwd + attn_fwd + cp_fwd + tp_fwd + ew_fwd + cast_fwd
        gpu_bwd = gemm_bwd + attn_bwd + cp_bwd + tp_bwd + ew_bwd + cast_bwd + recompute
        k_re = k_fwd if self.recompute == "full" else (1 if self.recompute == "selective" else 0)
        launch_fwd = np.maximum(0.0, k_fwd * o - gpu_fwd)
        launch_bwd = np.maximum(0.0, (k_bwd + k_re) * o - gpu_bwd)
        head_fwd, head_bwd, emb_fwd, emb_bwd = self._end_terms(s)
        overhead = np.full(npk, KERNELS_MICROBATCH * o)

        sq = np.bincount(pack_ids, weights=padded * padded, minlength=npk) if self.attention == "unfused" else None
        mem = self.peak_memory_bytes(s, sq)
        return BatchCost(
            local_tokens=s,
            gemm_fwd_s=gemm_fwd * L,
            attn_fwd_s=attn_fwd * L,
            cp_fwd_exposed_s=cp_fwd * L,
            tp_fwd_s=tp_fwd * L,
            gemm_bwd_s=gemm_bwd * L,
            attn_bwd_s=attn_bwd * L,
            cp_bwd_exposed_s=cp_bwd * L,
            tp_bwd_s=tp_bwd * L,
            elementwise_fwd_s=ew_fwd * L,
            elementwise_bwd_s=ew_bwd * L,
            recompute_s=recompute * L,
            cp_comm_total_s=cp_total * L,
            head_fwd_s=head_fwd,
            head_bwd_s=head_bwd,
            peak_memory_bytes=mem,
            fits_memory=mem <= self.memory_limit_bytes,
            fp8_cast_fwd_s=cast_fwd * L,
            fp8_cast_bwd_s=cast_bwd * L,
            launch_fwd_s=launch_fwd * L,
            launch_bwd_s=launch_bwd * L,
            overhead_fwd_s=overhead,
            overhead_bwd_s=overhead.copy(),
            embed_fwd_s=emb_fwd,
            embed_bwd_s=emb_bwd,
            cp_fwd_comm_s=cp_fwd_comm * L,
        )

    # ------------------------------------------------------- batch_cost terms (one layer, per rank)
    def _check_packs(self, cp: np.ndarray, spans_network) -> np.ndarray:
        npk = cp.size
        spans = np.zeros(npk, dtype=bool) if spans_network is None else np.asarray(spans_network, dtype=bool)
        if spans.size != npk:
            raise ConfigError("spans_network", spans.size, f"one entry per pack ({npk})")
        if (cp < 1).any():
            raise ConfigError("cp", int(cp.min()), "CP sizes >= 1")
        if self.attention == "unfused" and (cp > 1).any():
            raise ConfigError("parallel.attention", self.attention,
                              "'flash' when cp > 1 (context parallelism runs fused attention kernels)")
        if self.cp_comm == "a2a":
            m = self.model
            bad = (m.n_heads % (cp * self.tp) != 0) | (m.n_kv_heads % np.minimum(cp * self.tp, m.n_kv_heads) != 0)
            if bad.any():
                c = int(cp[bad][0])
                raise InfeasibleError("divisibility", f"a2a needs n_heads ({m.n_heads}) divisible by cp*tp ({c}*{self.tp})")
        return spans

    def _gemm_terms(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Block GEMMs forward, and in FP8 the casts forward and backward (seconds per pack)."""
        prof = self.profile
        gemm_fwd, cast_fwd, cast_bwd = np.zeros(s.size), np.zeros(s.size), np.zeros(s.size)
        for _, n, k, cnt in self._shapes:
            eff = prof.gemm_flops_per_s(np.maximum(s, 1.0), n, k, precision=self.precision)
            gemm_fwd += cnt * 2.0 * s * n * k / eff
            if self.precision == "fp8":
                cast_fwd += cnt * 4.0 * s * k / prof.hbm_bw_bytes_per_s
                cast_bwd += cnt * 4.0 * s * n / prof.hbm_bw_bytes_per_s
        return gemm_fwd, cast_fwd, cast_bwd

    def _attention_terms(self, padded: np.ndarray, cp: np.ndarray, pack_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Attention forward and backward per pack (flash: per document at the profile's efficiency)."""
        npk = cp.size
        if self.attention == "unfused":
            t_fwd_doc, t_bwd_doc = self._unfused_attention(padded)
            return (np.bincount(pack_ids, weights=t_fwd_doc, minlength=npk),
                    np.bincount(pack_ids, weights=t_bwd_doc, minlength=npk))
        m, tp, prof = self.model, self.tp, self.profile
        c_doc = cp[pack_ids].astype(np.float64)
        f_fwd = attention_flops(padded, m.q_dim / tp) / c_doc  # causal forward FLOPs on this rank, one layer
        hd = m.head_dim
        if self.cp_comm == "a2a":
            seq, diag = padded, np.ones_like(c_doc)
        else:
            seq, diag = padded / c_doc, 1.0 / c_doc
        e = prof.attention_flops_per_s
        t_fwd_doc = f_fwd * (diag / e(seq, direction="fwd", causal=True, head_dim=hd)
                             + (1 - diag) / e(seq, direction="fwd", causal=False, head_dim=hd))
        f_bwd = ATTN_BWD_FLOPS_FACTOR * f_fwd
        t_bwd_doc = f_bwd * (diag / e(seq, direction="bwd", causal=True, head_dim=hd)
                             + (1 - diag) / e(seq, direction="bwd", causal=False, head_dim=hd))
        return (np.bincount(pack_ids, weights=t_fwd_doc, minlength=npk),
                np.bincount(pack_ids, weights=t_bwd_doc, minlength=npk))

    def _unfused_attention(self, padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unfused attention per document (Megatron before fused kernels): two batched GEMMs over the whole
        L×L score matrix (no causal saving) plus the masked softmax and attention dropout, memory-bound.

        The ``h_l = n_heads/TP`` heads of a document run as one batched GEMM, priced as a GEMM of
        ``L·h_l`` rows: scores ``(L·h_l) × L × head_dim`` and context ``(L·h_l) × head_dim × L``; backward
        is twice the forward FLOPs. Memory per score element (fp16/bf16): forward softmax reads and writes
        it (4 B), dropout reads it, writes it and its 1-byte mask (5 B); backward reads the mask and the
        gradient and writes it (5 B), softmax backward reads output and gradient and writes (6 B). Dropout
        is Megatron's default attention dropout (0.1, arguments.py), assumed on in such runs.
        """
        m, prof = self.model, self.profile
        hl, d = m.n_heads / self.tp, m.head_dim
        t_fwd, t_bwd = np.zeros(padded.size), np.zeros(padded.size)
        for length in np.unique(padded):
            sel = padded == length
            rows = max(1.0, length * hl)
            g = 2.0 * rows * length * d  # FLOPs of one of the two batched GEMMs
            t = (g / float(prof.gemm_flops_per_s(rows, int(length), d, precision="bf16"))
                 + g / float(prof.gemm_flops_per_s(rows, d, int(length), precision="bf16")))
            elems = hl * length * length
            t_fwd[sel] = t + 9.0 * elems / prof.hbm_bw_bytes_per_s
            t_bwd[sel] = GEMM_BWD_FLOPS_FACTOR * t + 11.0 * elems / prof.hbm_bw_bytes_per_s
        return t_fwd, t_bwd

    def _cp_terms(self, s, cp, spans, attn_fwd, attn_bwd) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CP communication per layer: exposed forward, exposed backward, total transfer time, and the
        forward part of the total."""
        npk = cp.size
        cp_fwd, cp_bwd, cp_total, fwd_comm = np.zeros(npk), np.zeros(npk), np.zeros(npk), np.zeros(npk)
        multi = cp > 1
        if not multi.any():
            return cp_fwd, cp_bwd, cp_total, fwd_comm
        prof, cpf = self.profile, cp.astype(np.float64)
        kv_bytes = s * 2.0 * self.model.kv_dim * 2.0 / self.tp
        for tier, sel in (("nvlink", multi & ~spans), ("network", multi & spans)):
            idx = np.nonzero(sel)[0]
            if idx.size == 0:
                continue
            if self.cp_comm == "p2p":
                tx = prof.collective_time_s("sendrecv", tier, kv_bytes[idx], 2)
                tx_b = prof.collective_time_s("sendrecv", tier, 2.0 * kv_bytes[idx], 2)
                steps = cpf[idx] - 1
                cp_fwd[idx] = steps * np.maximum(0.0, tx - attn_fwd[idx] / cpf[idx])
                cp_bwd[idx] = steps * np.maximum(0.0, tx_b - attn_bwd[idx] / cpf[idx])
                cp_total[idx] = steps * (tx + tx_b)
                fwd_comm[idx] = steps * tx
                continue
            for c in np.unique(cp[idx]):
                sub = idx[cp[idx] == c]
                fw, bw = self._cp_collective(tier, s[sub], kv_bytes[sub], int(c))
                cp_fwd[sub], cp_bwd[sub], cp_total[sub], fwd_comm[sub] = fw, bw, fw + bw, fw
        return cp_fwd, cp_bwd, cp_total, fwd_comm

    def _cp_collective(self, tier: str, s, kv_bytes, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Exposed forward and backward time of the ``all_gather`` or ``a2a`` CP collectives."""
        prof, m, tp = self.profile, self.model, self.tp
        if self.cp_comm == "all_gather":
            full = kv_bytes * c
            return (prof.collective_time_s("all_gather", tier, full, c),
                    prof.collective_time_s("reduce_scatter", tier, full, c))
        q_b = s * m.q_dim * 2.0 / tp  # a2a: Q, K, V, O each way
        kv1 = s * m.kv_dim * 2.0 / tp
        fw = 2 * prof.collective_time_s("all_to_all", tier, q_b, c) + 2 * prof.collective_time_s("all_to_all", tier, kv1, c)
        return fw, fw

    def _tp_terms(self, s, gemm_fwd, gemm_bwd) -> tuple[np.ndarray, np.ndarray]:
        """Exposed TP communication (sequence parallel: 2 AG + 2 RS of s·h·2 B each way) forward and backward."""
        tp, prof = self.tp, self.profile
        if tp <= 1:
            return np.zeros(s.size), np.zeros(s.size)
        buf = s * self.model.hidden * 2.0
        tp_one = (2 * prof.collective_time_s("all_gather", "nvlink", buf, tp)
                  + 2 * prof.collective_time_s("reduce_scatter", "nvlink", buf, tp))
        if not self.tp_comm_overlap:
            return tp_one, tp_one
        # one of TP chunks exposed, the rest behind the same pass's GEMMs
        return np.maximum(tp_one / tp, tp_one - gemm_fwd), np.maximum(tp_one / tp, tp_one - gemm_bwd)

    def _end_terms(self, s) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Output layer + final norm + loss (last stage) and embedding (first stage), forward and backward, BF16."""
        m, tp, prof = self.model, self.tp, self.profile
        o = prof.timing.per_kernel_overhead_s
        bw = prof.hbm_bw_bytes_per_s
        v = m.vocab // tp if m.vocab % tp == 0 else m.vocab / tp
        head_fwd = 2.0 * s * m.hidden * v / prof.gemm_flops_per_s(np.maximum(s, 1.0), int(v), m.hidden)
        head_bwd = GEMM_BWD_FLOPS_FACTOR * head_fwd
        # cross-entropy over s x V/TP logits, memory-bound (CROSS_ENTROPY_BYTES)
        b_f, b_b = CROSS_ENTROPY_BYTES[self.cross_entropy]
        k_f, k_b = KERNELS_HEAD
        if self.cross_entropy == "unfused":
            k_f, k_b = k_f + KERNELS_CROSS_ENTROPY_UNFUSED[0], k_b + KERNELS_CROSS_ENTROPY_UNFUSED[1]
        head_fwd = np.maximum(head_fwd + b_f * s * v / bw, k_f * o)
        head_bwd = np.maximum(head_bwd + b_b * s * v / bw, k_b * o)
        # embedding: write s x h bf16; bwd scatter-adds into fp32 gradients (read + write)
        emb_fwd = np.maximum(s * m.hidden * 4.0 / bw, KERNELS_EMBED[0] * o)
        emb_bwd = np.maximum(s * m.hidden * 10.0 / bw, KERNELS_EMBED[1] * o)
        return head_fwd, head_bwd, emb_fwd, emb_bwd

    def kernels_per_layer(self, cp) -> tuple[np.ndarray, np.ndarray]:
        """Kernels one layer launches forward and backward (recompute excluded), per pack of CP size ``cp``."""
        cp = np.asarray(cp, dtype=np.float64)
        kf = np.full(cp.shape, float(KERNELS_FWD))
        kb = np.full(cp.shape, float(KERNELS_BWD))
        if self.tp > 1:
            kf += KERNELS_TP
            kb += KERNELS_TP
        if self.precision == "fp8":
            kf += KERNELS_FP8
            kb += KERNELS_FP8
        if self.attention == "unfused":
            kf += KERNELS_UNFUSED_ATTENTION[0]
            kb += KERNELS_UNFUSED_ATTENTION[1]
        multi = cp > 1
        if self.cp_comm == "p2p":
            kf += np.where(multi, (cp - 1) * KERNELS_RING_STEP_FWD, 0.0)
            kb += np.where(multi, (cp - 1) * KERNELS_RING_STEP_BWD, 0.0)
        else:
            kf += np.where(multi, KERNELS_CP_COLLECTIVE[self.cp_comm], 0.0)
            kb += np.where(multi, KERNELS_CP_COLLECTIVE[self.cp_comm], 0.0)
        return kf, kb

    def elementwise_bytes_per_token_layer(self) -> float:
        """HBM bytes moved per token per layer by the forward element-wise ops (bf16).

        Two RMSNorms (read + write h: 8h), two residual adds (read 2h, write h: 12h),
        SwiGLU (read 2·ffn, write ffn: 6·ffn) and RoPE on Q and K (read + write: 4·(q + kv)).
        """
        m = self.model
        return (20.0 * m.hidden + 6.0 * m.ffn_hidden + 4.0 * (m.q_dim + m.kv_dim)) / self.tp

    def peak_memory_bytes(self, local_tokens, sum_sq_lengths=None) -> np.ndarray:
        """Peak bytes per GPU with ``local_tokens`` per microbatch (PP microbatches in flight, or
        ``microbatches_in_flight``). ``sum_sq_lengths`` (Σ L² per microbatch, same shape) adds unfused
        attention's score matrices (:func:`dcpsim.model.attention_score_bytes`); ignored with flash attention."""
        s = np.asarray(local_tokens, dtype=np.float64)
        kw = dict(tp=self.tp, pp=self.pp, dp=self.dp_cp, cp=1, recompute=self.recompute,
                  microbatches_in_flight=self.microbatches_in_flight, precision=self.precision,
                  grad_bytes=self.grad_bytes_per_param)
        if self.attention == "unfused" and sum_sq_lengths is not None:
            return self._peak_with_scores(s, np.asarray(sum_sq_lengths, dtype=np.float64), kw)
        m0 = memory_per_gpu(self.model, tokens_per_rank=0, **kw).total_bytes
        m1 = memory_per_gpu(self.model, tokens_per_rank=1, **kw).total_bytes
        return m0 + (m1 - m0) * s

    def _peak_with_scores(self, s: np.ndarray, sq: np.ndarray, kw: dict) -> np.ndarray:
        """Peak per microbatch with unfused attention's scores: one exact evaluation per distinct (tokens, Σ L²)."""
        from dcpsim.model import attention_score_bytes

        s, sq = np.broadcast_arrays(s, sq)
        pairs, inv = np.unique(np.stack([s.ravel(), sq.ravel()], axis=1), axis=0, return_inverse=True)
        vals = np.array([memory_per_gpu(self.model, tokens_per_rank=t, score_bytes=attention_score_bytes(
            self.model, self.tp, q), **kw).total_bytes for t, q in pairs])
        return vals[np.asarray(inv).ravel()].reshape(s.shape)

    def max_tokens_per_rank(self) -> int:
        """Largest local token count per microbatch that fits in ``memory_limit_bytes``."""
        from dcpsim.model import max_tokens_per_rank

        return max_tokens_per_rank(
            self.model, memory_limit_bytes=self.memory_limit_bytes, tp=self.tp, pp=self.pp, dp=self.dp_cp, cp=1,
            recompute=self.recompute, microbatches_in_flight=self.microbatches_in_flight, precision=self.precision,
            grad_bytes=self.grad_bytes_per_param,
        )

    def flops(self, lengths) -> float:
        """Megatron-counted FLOPs of the sequences (whole model, all stages)."""
        return self.model.flops(lengths)

    def describe(self) -> dict:
        return {
            "gpu": self.profile.name,
            "model": self.model.name,
            "tp": self.tp,
            "pp": self.pp,
            "dp_cp": self.dp_cp,
            "cp_comm": self.cp_comm,
            "recompute": self.recompute,
            "layers_per_stage": self.layers_per_stage,
            "stage_layers": self.stage_layers.tolist(),
            "precision": self.precision,
            "tp_comm_overlap": self.tp_comm_overlap,
            "attention": self.attention,
            "cross_entropy": self.cross_entropy,
            "memory_limit_bytes": self.memory_limit_bytes,
            "grad_bytes_per_param": self.grad_bytes_per_param,
        }
