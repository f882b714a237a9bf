"""FLOPs accounting, written once: attention kernel FLOPs, and TFLOPS per GPU, tokens/s and MFU.

Attention kernel FLOPs (what the profiles' attention tables are measured in
and what the cost model divides by them): forward ``4·L²·d·H`` per document
of ``L`` tokens, halved when causal; backward :data:`ATTN_BWD_FLOPS_FACTOR`
times the forward (FlashAttention's recomputation, REFERENCE §6).

Throughput follows Megatron's convention: ``tflops_per_gpu = FLOPs / (T · GPUs · 1e12)`` with
the model FLOPs of the sequences trained (:meth:`ModelSpec.flops
<dcpsim.model.ModelSpec.flops>`, recomputation not counted), ``mfu`` that
over the GPU's dense peak. Every table, row and summary computes them here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ATTN_BWD_FLOPS_FACTOR", "attention_flops", "mfu", "tflops_per_gpu", "throughput"]

ATTN_BWD_FLOPS_FACTOR = 2.5  # FlashAttention backward / forward FLOPs (REFERENCE §6)


def attention_flops(lengths, q_dim: float, *, causal: bool = True, direction: str = "fwd") -> np.ndarray:
    """Attention FLOPs of each document (float array like ``lengths``) for ``q_dim = heads·head_dim`` (per TP rank if divided)."""
    L = np.asarray(lengths, dtype=np.float64)
    f = 4.0 * L * L * q_dim * (0.5 if causal else 1.0)
    return f * (ATTN_BWD_FLOPS_FACTOR if direction == "bwd" else 1.0)


def tflops_per_gpu(flops: float, time_s: float, gpus: int) -> float:
    """Counted TFLOPS per GPU (``nan`` when ``time_s`` is not positive)."""
    return flops / (time_s * gpus * 1e12) if time_s > 0 else float("nan")


def mfu(flops: float, time_s: float, gpus: int, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: achieved counted FLOP/s per GPU over ``peak_flops_per_s`` (a fraction)."""
    return tflops_per_gpu(flops, time_s, gpus) * 1e12 / peak_flops_per_s


def throughput(flops: float, tokens: float, time_s: float, gpus: int, peak_flops_per_s: float) -> dict[str, float]:
    """``tflops_per_gpu``, ``tokens_per_s`` and ``mfu`` of ``flops`` and ``tokens`` trained in ``time_s`` on ``gpus``."""
    return {
        "tflops_per_gpu": tflops_per_gpu(flops, time_s, gpus),
        "tokens_per_s": float(tokens) / time_s if time_s > 0 else float("nan"),
        "mfu": mfu(flops, time_s, gpus, peak_flops_per_s),
    }
