"""Fixed per-step work: the kernels every layer and microbatch launches, and the launch floor they set.

Every layer launches ``KERNELS_*`` kernels (counted for Megatron-Core with
Transformer Engine); the host needs ``per_kernel_overhead_s`` per launch
(profile ``[timing]``), so a layer takes at least ``kernels ×
per_kernel_overhead_s``: when the GPU work is shorter, the difference is
exposed (``launch_*``). Each microbatch pays its own launches (pipeline
send/receive, embedding or loss) as ``overhead_*``, not scaled by layers.

With a profile's ``[host]`` table the floor is 0 (``per_kernel_overhead_s``
must be 0 there): the host timeline (:mod:`dcpsim.cost.host`) prices each
kernel's issue instead, beside the device rather than as a floor on it.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.settings import CostSettings

# Kernels per transformer layer, Megatron-Core with Transformer Engine (fused ops), counted:
KERNELS_FWD = 12  # norm, QKV GEMM, RoPE q and k (2), flash fwd, proj GEMM, residual add, norm, fc1 GEMM, SwiGLU, fc2 GEMM, residual add
KERNELS_BWD = 20  # 4 GEMMs x (dgrad + wgrad), 2 norms x (dx + dgamma), SwiGLU, RoPE q and k (2), flash bwd (preprocess, main, dq convert), 2 residual-gradient adds
KERNELS_TP = 4  # sequence parallel: 2 all-gathers + 2 reduce-scatters, each way
KERNELS_FP8 = (2, 6)  # TE casts (compute.py): fwd proj and fc2 inputs (QKV and fc1 inputs written by the norm); bwd 2 input transposes (QKV, fc1) + 4 output-gradient cast-transposes
KERNELS_FP8_SP = (0, 4)  # with sequence parallelism: bwd proj and fc2 input transposes, and their output gradients cast and transposed apart (2 each instead of 1)
KERNELS_RING_STEP_FWD = 3  # per extra ring step: attention block, output/LSE correction, send/recv
KERNELS_RING_STEP_BWD = 5  # per extra ring step: attention bwd (3), dK/dV accumulate, send/recv
KERNELS_CP_COLLECTIVE = {"all_gather": 1, "a2a": 4}  # per pass
KERNELS_MICROBATCH = 2  # pipeline send + receive, each way, every stage
KERNELS_EMBED = (1, 2)  # first stage: embedding lookup fwd; bwd (gradient scatter-add, zeroing)
KERNELS_UNFUSED_ATTENTION = (5, 8)  # extra over one flash kernel: scores GEMM, softmax, dropout, context GEMM, copies; bwd: 4 GEMMs, 2 elementwise, copies
KERNELS_CROSS_ENTROPY_UNFUSED = (6, 2)  # extra launches over the fused kernel (cast, max, sub, exp, sum, div; mul, cast)
KERNELS_HEAD = (9, 8)  # last stage fwd: final norm, logits GEMM, cross-entropy (max, exp-sum, 2 TP all-reduces, target logit, loss), loss average; bwd: CE grad, 2 GEMMs, 2 norm, scale, 2 misc


def kernels_per_layer(st: CostSettings, cp) -> tuple[np.ndarray, np.ndarray]:
    """Kernels one layer launches forward and backward (recompute excluded), per pack of CP size ``cp``."""
    cp = np.asarray(cp, dtype=np.float64)
    kf = np.full(cp.shape, float(KERNELS_FWD))
    kb = np.full(cp.shape, float(KERNELS_BWD))
    if st.tp > 1:
        kf += KERNELS_TP
        kb += KERNELS_TP
    if st.precision == "fp8":
        kf += KERNELS_FP8[0] + (KERNELS_FP8_SP[0] if st.tp > 1 else 0)
        kb += KERNELS_FP8[1] + (KERNELS_FP8_SP[1] if st.tp > 1 else 0)
    if st.attention == "unfused":
        kf += KERNELS_UNFUSED_ATTENTION[0]
        kb += KERNELS_UNFUSED_ATTENTION[1]
    multi = cp > 1
    if st.cp_comm == "p2p":
        kf += np.where(multi, (cp - 1) * KERNELS_RING_STEP_FWD, 0.0)
        kb += np.where(multi, (cp - 1) * KERNELS_RING_STEP_BWD, 0.0)
    else:
        kf += np.where(multi, KERNELS_CP_COLLECTIVE[st.cp_comm], 0.0)
        kb += np.where(multi, KERNELS_CP_COLLECTIVE[st.cp_comm], 0.0)
    return kf, kb


def launch_terms(st: CostSettings, cp: np.ndarray, gpu_fwd: np.ndarray,
                 gpu_bwd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exposed launch time per layer forward and backward (seconds per pack): the host needs kernels ×
    ``per_kernel_overhead_s``; GPU work (``gpu_fwd``/``gpu_bwd``, seconds per layer) hides it when longer.
    Recomputation relaunches the forward's kernels (``full``) or the attention kernel (``selective``)."""
    k_fwd, k_bwd = kernels_per_layer(st, cp)
    o = st.profile.timing.per_kernel_overhead_s
    k_re = k_fwd if st.recompute == "full" else (1 if st.recompute == "selective" else 0)
    return np.maximum(0.0, k_fwd * o - gpu_fwd), np.maximum(0.0, (k_bwd + k_re) * o - gpu_bwd)


def microbatch_overhead(st: CostSettings, n_packs: int) -> np.ndarray:
    """Per-microbatch launches (pipeline send + receive) of every stage, seconds per pack, each way."""
    return np.full(n_packs, KERNELS_MICROBATCH * st.profile.timing.per_kernel_overhead_s)
