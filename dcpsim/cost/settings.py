"""The cost model's settings: one frozen, validated object passed whole.

:class:`CostSettings` holds everything a :class:`~dcpsim.cost.model.CostModel`
reads. It is built once (from a run's configuration by
:func:`dcpsim.run.single.cost_settings`, or by hand through
:meth:`CostModel.build <dcpsim.cost.model.CostModel.build>`), validated at
construction (a :class:`~dcpsim.errors.ConfigError` names the field), and a
variant is ``dataclasses.replace(settings, field=value)``, which validates
again. Nothing re-lists these fields: a copy that dropped one would be a
silent wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.choices import (
    ATTENTION_KERNELS,
    CP_COMM_TYPES,
    CROSS_ENTROPY_KINDS,
    PRECISIONS,
    RECOMPUTE_MODES,
    TRANSFORMER_IMPLS,
)
from dcpsim.errors import ConfigError
from dcpsim.hardware import HardwareProfile
from dcpsim.hardware.placement import check_tp_in_domain
from dcpsim.model import ModelSpec

# Share of a GPU's HBM (the capacity NVML reports, profile ``hbm_bytes``: 79.6 GiB on an "80 GB" H100) that the
# tensors the memory model counts may fill; the other 10% is for what it does not count: the CUDA context, NCCL
# and cuBLAS workspaces, the caching allocator's fragmentation. 0.9 is dcpsim's original share, NOT fitted to any
# run (the published runs are the check: dcpsim.published.memory). Cross-check: the Dynamic-CP solver of
# Megatron-LM PR #2959 rejects plans above 70 GiB on an 80 GB GPU (REFERENCE §1), 88% of 79.6 GiB.
USABLE_HBM_FRACTION = 0.9


@dataclass(frozen=True)
class CostSettings:
    """What one cost model prices: hardware, model, parallel layout and kernel choices.

    Attributes
    ----------
    profile, model:
        hardware profile and model spec (objects; :meth:`CostModel.build` resolves names).
    tp, pp:
        tensor- and pipeline-parallel sizes; each stage runs its share of the layers.
    dp_cp:
        ranks per pipeline stage (DP×CP), over which the optimizer state is sharded (memory only).
    cp_comm:
        ``p2p`` (ring), ``all_gather`` or ``a2a`` (Ulysses).
    recompute:
        ``none``, ``selective`` or ``full``.
    memory_limit_bytes:
        usable HBM per GPU, bytes; None = ``USABLE_HBM_FRACTION`` of the profile's HBM.
    precision:
        ``bf16`` or ``fp8`` (block GEMMs in FP8; needs a profile with FP8 figures).
    tp_comm_overlap:
        overlap TP collectives with the GEMMs (Megatron --tp-comm-overlap).
    first_stage_layers, last_stage_layers:
        Megatron --decoder-first/last-pipeline-num-layers (0: even split).
    attention:
        ``flash`` (fused kernels, the profile's attention table) or ``unfused`` (batched GEMMs + softmax +
        dropout over the L×L scores; cp = 1 only).
    microbatches_in_flight:
        activations stage 0 holds, in microbatches of a whole stage (None: pp, 1F1B; the interleaved
        schedule holds more: :func:`dcpsim.pipeline.activations_in_flight`).
    cross_entropy:
        ``fused`` (one kernel) or ``unfused`` (Megatron-Core's fp32 vocab-parallel passes).
    grad_bytes_per_param:
        bytes per element of the gradient buffer (memory only): 4 = FP32 (Megatron-LM's default for BF16),
        2 = BF16 (a run's ``sim.grad_reduce_bytes_per_param``).
    deterministic_fill:
        Megatron --deterministic-mode at d98e8a64: every uninitialised allocation is filled with NaN on the device
        (:mod:`dcpsim.cost.determinism`; a run's ``step.deterministic``).
    rope_fusion:
        Transformer Engine's fused RoPE (True, Megatron's default) or Megatron-Core's unfused RoPE kernels
        (``--no-rope-fusion``; :data:`dcpsim.cost.fixed.KERNELS_ROPE_UNFUSED`).
    transformer_impl:
        ``transformer_engine`` or ``local`` modules (a run's ``step.transformer_impl``): with ``unfused`` attention,
        Transformer Engine's unfused backend builds its causal mask on the device every forward
        (:data:`dcpsim.cost.fixed.KERNELS_TE_UNFUSED_MASK`); Megatron's local attention does not.
    test_mode_qk_checks:
        a run's ``step.test_mode_qk_checks`` (Megatron --test-mode with --qk-layernorm): the q/k norms are there
        (:attr:`qk_norms`) whatever the model spec says.
    attention_mask:
        the dataloader's attention mask reaches the attention (a run's ``step.attention_mask_in_dataloader``):
        Transformer Engine's unfused backend ORs it into its own mask (one kernel more per forward).
    """

    profile: HardwareProfile
    model: ModelSpec
    tp: int = 1
    pp: int = 1
    dp_cp: int = 1
    cp_comm: str = "p2p"
    recompute: str = "full"
    memory_limit_bytes: float | None = None
    precision: str = "bf16"
    tp_comm_overlap: bool = False
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    attention: str = "flash"
    microbatches_in_flight: float | None = None
    cross_entropy: str = "fused"
    grad_bytes_per_param: float = 4.0
    deterministic_fill: bool = False
    rope_fusion: bool = True
    transformer_impl: str = "transformer_engine"
    attention_mask: bool = True
    test_mode_qk_checks: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp_cp"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(name, v, "a positive integer")
            object.__setattr__(self, name, int(v))  # numpy integers in, plain ints kept
        stage_layer_counts(self.model.n_layers, self.pp, self.first_stage_layers, self.last_stage_layers)
        self._check_kernels()
        tp, prof = self.tp, self.profile
        if tp > prof.nvlink_domain_gpus:
            raise ConfigError("tp", tp, f"<= the NVLink domain ({prof.nvlink_domain_gpus} GPUs)")
        check_tp_in_domain(tp, int(prof.nvlink_domain_gpus))  # TP collectives are priced at NVLink speed
        for dim in ("n_heads", "n_kv_heads", "ffn_hidden"):
            if getattr(self.model, dim) % tp:
                raise ConfigError("tp", tp, f"a divisor of model.{dim} ({getattr(self.model, dim)})")
        if self.cp_comm not in CP_COMM_TYPES:
            raise ConfigError("cp_comm", self.cp_comm, f"one of {CP_COMM_TYPES}")
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError("recompute", self.recompute, f"one of {RECOMPUTE_MODES}")
        if not self.grad_bytes_per_param > 0:
            raise ConfigError("grad_bytes_per_param", self.grad_bytes_per_param, "a positive number of bytes")
        object.__setattr__(self, "grad_bytes_per_param", float(self.grad_bytes_per_param))
        object.__setattr__(self, "tp_comm_overlap", bool(self.tp_comm_overlap))
        object.__setattr__(self, "deterministic_fill", bool(self.deterministic_fill))
        object.__setattr__(self, "rope_fusion", bool(self.rope_fusion))
        object.__setattr__(self, "attention_mask", bool(self.attention_mask))
        object.__setattr__(self, "test_mode_qk_checks", bool(self.test_mode_qk_checks))
        if self.memory_limit_bytes is not None:
            if not float(self.memory_limit_bytes) > 0:
                raise ConfigError("memory_limit_bytes", self.memory_limit_bytes, "a positive number of bytes")
            object.__setattr__(self, "memory_limit_bytes", float(self.memory_limit_bytes))

    def _check_kernels(self) -> None:
        """The kernel choices (precision, attention, cross-entropy) exist, and FP8 has the profile's figures."""
        if self.precision not in PRECISIONS:
            raise ConfigError("parallel.precision", self.precision, f"one of {PRECISIONS}")
        if self.precision == "fp8" and not self.profile.timing.has_fp8:
            raise ConfigError("parallel.precision", self.precision,
                              f"'bf16': profile {self.profile.name} has no FP8 figures "
                              "(timing.peak_fp8_flops, timing.fp8_gemm_best_tflops)")
        if self.attention not in ATTENTION_KERNELS:
            raise ConfigError("parallel.attention", self.attention, f"one of {ATTENTION_KERNELS}")
        if self.cross_entropy not in CROSS_ENTROPY_KINDS:
            raise ConfigError("parallel.cross_entropy", self.cross_entropy, f"one of {CROSS_ENTROPY_KINDS}")
        if self.transformer_impl not in TRANSFORMER_IMPLS:
            raise ConfigError("step.transformer_impl", self.transformer_impl, f"one of {TRANSFORMER_IMPLS}")

    @property
    def qk_norms(self) -> bool:
        """Norms on the queries and keys: the model's ``qk_layernorm``, or a run whose ``--test-mode`` checks compare
        them (``test_mode_qk_checks``, which Megatron runs only with ``--qk-layernorm``)."""
        return bool(self.model.qk_layernorm or self.test_mode_qk_checks)

    @property
    def usable_memory_bytes(self) -> float:
        """The memory limit in bytes: ``memory_limit_bytes``, or ``USABLE_HBM_FRACTION`` of the profile's HBM."""
        if self.memory_limit_bytes is None:
            return USABLE_HBM_FRACTION * self.profile.hbm_bytes
        return float(self.memory_limit_bytes)

    def stage_layers(self) -> np.ndarray:
        """Layers on each pipeline stage (:func:`stage_layer_counts`)."""
        return stage_layer_counts(self.model.n_layers, self.pp, self.first_stage_layers, self.last_stage_layers)


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
