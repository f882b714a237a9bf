"""A pack's cost as a breakdown: per-pack arrays (:class:`BatchCost`) and one pack's scalars (:class:`PackCost`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


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
