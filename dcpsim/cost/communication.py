"""Communication: CP exchanges of K/V, TP collectives, and collectives over groups spanning NVLink domains.

* CP communication per layer: ``p2p`` ring of c−1 steps, each moving the
  local K and V (s·2·kv·2 B/TP), hidden behind that step's attention block;
  only the excess is exposed (backward moves twice the bytes). A ring that
  leaves the NVLink domain runs at the slowest hop (one NIC). ``all_gather``
  exposes a K/V all-gather forward and a reduce-scatter backward. ``a2a``
  exposes four all-to-alls each way.
* TP communication with sequence parallelism: two all-gathers and two
  reduce-scatters of s·h·2 B per layer each way, on NVLink, exposed; with
  ``tp_comm_overlap`` (Megatron --tp-comm-overlap) they are split into TP
  chunks pipelined with the GEMMs, one chunk stays exposed:
  ``max(t_tp / TP, t_tp − t_gemm)``. In FP8 the all-gathers move FP8, 1 B
  per element: Transformer Engine gathers the FP8 norm output its
  LayerNormLinear writes (forward; TE v1.8 ``layernorm_linear.py``
  ``gather_along_first_dim(ln_out)`` on the uint8 output, v2.1
  ``with_quantized_all_gather = fp8``) and, backward, the row-parallel
  layers' output gradient cast to FP8 before the gather (``module/base.py``
  ``grad_output_preprocess``: "cast, transpose for efficient gather"); the
  reduce-scatters move the BF16 GEMM outputs and input gradients.

Times are seconds for ONE layer on one rank, one entry per pack.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.settings import CostSettings
from dcpsim.hardware import HardwareProfile, bus_factor


def cp_terms(st: CostSettings, s, cp, spans, attn_fwd, attn_bwd) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CP communication per layer: exposed forward, exposed backward, total transfer time, and the
    forward part of the total."""
    npk = cp.size
    cp_fwd, cp_bwd, cp_total, fwd_comm = np.zeros(npk), np.zeros(npk), np.zeros(npk), np.zeros(npk)
    multi = cp > 1
    if not multi.any():
        return cp_fwd, cp_bwd, cp_total, fwd_comm
    prof, cpf = st.profile, cp.astype(np.float64)
    kv_bytes = s * 2.0 * st.model.kv_dim * 2.0 / st.tp
    for tier, sel in (("nvlink", multi & ~spans), ("network", multi & spans)):
        idx = np.nonzero(sel)[0]
        if idx.size == 0:
            continue
        if st.cp_comm == "p2p":
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
            fw, bw = cp_collective(st, tier, s[sub], kv_bytes[sub], int(c))
            cp_fwd[sub], cp_bwd[sub], cp_total[sub], fwd_comm[sub] = fw, bw, fw + bw, fw
    return cp_fwd, cp_bwd, cp_total, fwd_comm


def cp_collective(st: CostSettings, tier: str, s, kv_bytes, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Exposed forward and backward time of the ``all_gather`` or ``a2a`` CP collectives."""
    prof, m, tp = st.profile, st.model, st.tp
    if st.cp_comm == "all_gather":
        full = kv_bytes * c
        return (prof.collective_time_s("all_gather", tier, full, c),
                prof.collective_time_s("reduce_scatter", tier, full, c))
    q_b = s * m.q_dim * 2.0 / tp  # a2a: Q, K, V, O each way
    kv1 = s * m.kv_dim * 2.0 / tp
    fw = 2 * prof.collective_time_s("all_to_all", tier, q_b, c) + 2 * prof.collective_time_s("all_to_all", tier, kv1, c)
    return fw, fw


def tp_terms(st: CostSettings, s, gemm_fwd, gemm_bwd) -> tuple[np.ndarray, np.ndarray]:
    """Exposed TP communication (sequence parallel: 2 AG + 2 RS of s·h·2 B each way; the AGs of s·h·1 B in FP8)
    forward and backward."""
    tp, prof = st.tp, st.profile
    if tp <= 1:
        return np.zeros(s.size), np.zeros(s.size)
    buf = s * st.model.hidden * 2.0
    ag_buf = buf / 2.0 if st.precision == "fp8" else buf
    tp_one = (2 * prof.collective_time_s("all_gather", "nvlink", ag_buf, tp)
              + 2 * prof.collective_time_s("reduce_scatter", "nvlink", buf, tp))
    if not st.tp_comm_overlap:
        return tp_one, tp_one
    # one of TP chunks exposed, the rest behind the same pass's GEMMs
    return np.maximum(tp_one / tp, tp_one - gemm_fwd), np.maximum(tp_one / tp, tp_one - gemm_bwd)


def group_collective_time_s(
    profile: HardwareProfile,
    op: str,
    nbytes,
    n_ranks: int,
    *,
    domains: int = 1,
    network_scale: float = 1.0,
) -> np.ndarray:
    """Time of ``op`` over ``n_ranks`` ranks spread over ``domains`` NVLink domains.

    Inside one domain the NVLink table applies. Across domains NCCL runs one
    ring per NIC, so with ``g = n_ranks / domains`` ranks per domain each using
    its own NIC the bus bandwidth is ``min(NVLink busbw, g × per-NIC busbw)``
    (REFERENCE §5: 8×400G nodes reach ≈ 8 × 47 GB/s). ``network_scale`` scales
    the network bandwidth (a degraded link or oversubscription < 1).
    """
    nbytes = np.asarray(nbytes, dtype=float)
    if n_ranks <= 1:
        return np.zeros_like(nbytes)
    f = bus_factor(op, n_ranks)
    size = np.maximum(nbytes, 1.0)
    nvl = profile.busbw_bytes_per_s(op, "nvlink", size)
    if domains <= 1:
        bw = nvl
    else:
        per_domain = max(1.0, n_ranks / domains)
        net = profile.busbw_bytes_per_s(op, "network", size / per_domain) * per_domain * network_scale
        bw = np.minimum(nvl, net)
    return np.where(nbytes > 0, nbytes * f / bw, 0.0)
