"""Memory per GPU: the peak with a microbatch of ``s`` local tokens, and the largest ``s`` that fits.

The figures come from :func:`dcpsim.model.memory_per_gpu` (weights, gradients,
optimizer state sharded over DP×CP, activations of the microbatches in flight)
for the cost model's settings; the limit is
:attr:`CostSettings.usable_memory_bytes <dcpsim.cost.settings.CostSettings.usable_memory_bytes>`.
"""

from __future__ import annotations

import functools

import numpy as np

from dcpsim.cost.settings import CostSettings
from dcpsim.model import MemorySettings, attention_score_bytes, memory_per_gpu
from dcpsim.model import max_tokens_per_rank as _max_tokens_per_rank


def memory_settings(st: CostSettings) -> MemorySettings:
    """The settings :func:`dcpsim.model.memory_per_gpu` reads (CP = 1: ``s`` is already per rank)."""
    return MemorySettings(tp=st.tp, pp=st.pp, dp=st.dp_cp, cp=1, recompute=st.recompute,
                          microbatches_in_flight=st.microbatches_in_flight, precision=st.precision,
                          grad_bytes=st.grad_bytes_per_param)


def peak_memory_bytes(st: CostSettings, local_tokens, sum_sq_lengths=None) -> np.ndarray:
    """Peak bytes per GPU with ``local_tokens`` per microbatch (PP microbatches in flight, or
    ``microbatches_in_flight``). ``sum_sq_lengths`` (Σ L² per microbatch, same shape) adds unfused
    attention's score matrices (:func:`dcpsim.model.attention_score_bytes`); ignored with flash attention."""
    s = np.asarray(local_tokens, dtype=np.float64)
    ms, (m0, m1) = _terms_of(st)
    if st.attention == "unfused" and sum_sq_lengths is not None:
        return _peak_with_scores(st, s, np.asarray(sum_sq_lengths, dtype=np.float64), ms)
    return m0 + (m1 - m0) * s


def peak_memory_one(st: CostSettings, local_tokens: float, sum_sq_length: float | None = None) -> float:
    """:func:`peak_memory_bytes` of one microbatch, as a float, without building arrays (the planner checks
    thousands of candidates one at a time): the same arithmetic on the same float64 numbers."""
    ms, (m0, m1) = _terms_of(st)
    if st.attention == "unfused" and sum_sq_length is not None:
        return float(_peak_with_scores(st, np.array([float(local_tokens)]), np.array([float(sum_sq_length)]), ms)[0])
    return float(m0 + (m1 - m0) * float(local_tokens))


_TERMS: dict[int, tuple] = {}


def _terms_of(st: CostSettings) -> tuple[MemorySettings, tuple[float, float]]:
    """(:func:`memory_settings`, :func:`_linear_terms`) of ``st``, once per settings object (held; they are frozen):
    the planner asks one layout's cost model for the memory of every micro-batch size."""
    hit = _TERMS.get(id(st))
    if hit is None or hit[0] is not st:
        if len(_TERMS) > 16384:
            _TERMS.clear()
        ms = memory_settings(st)
        hit = _TERMS[id(st)] = (st, ms, _linear_terms(st.model, ms))
    return hit[1], hit[2]


@functools.lru_cache(maxsize=4096)
def _linear_terms(model, ms: MemorySettings) -> tuple[float, float]:
    """Bytes per GPU at 0 and 1 local tokens (the peak is linear in between without score matrices); cached:
    the planner asks for the same layout at many micro-batch sizes."""
    return (memory_per_gpu(model, ms, tokens_per_rank=0).total_bytes,
            memory_per_gpu(model, ms, tokens_per_rank=1).total_bytes)


def _peak_with_scores(st: CostSettings, s: np.ndarray, sq: np.ndarray, ms: MemorySettings) -> np.ndarray:
    """Peak per microbatch with unfused attention's scores: one exact evaluation per distinct (tokens, Σ L²)."""
    s, sq = np.broadcast_arrays(s, sq)
    pairs, inv = np.unique(np.stack([s.ravel(), sq.ravel()], axis=1), axis=0, return_inverse=True)
    vals = np.array([memory_per_gpu(st.model, ms, tokens_per_rank=t, score_bytes=attention_score_bytes(
        st.model, st.tp, q)).total_bytes for t, q in pairs])
    return vals[np.asarray(inv).ravel()].reshape(s.shape)


def max_tokens_per_rank(st: CostSettings) -> int:
    """Largest local token count per microbatch that fits in the usable memory."""
    return _max_tokens_per_rank(st.model, memory_settings(st), memory_limit_bytes=st.usable_memory_bytes)
