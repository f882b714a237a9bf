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
# Transformer Engine's CP ring (cp_comm p2p: AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention/
# dot_product_attention/context_parallel.py, read in NVIDIA/TransformerEngine at d0067d0d, 2026-08-22; causal, BF16,
# sbhd/bshd), counted per layer beyond the one attention kernel (3 backward) of cp = 1:
# * forward, once: K and V concatenated into the send buffer, the first step's LSE cloned, the output initialised
#   from the first step (out_correction_init), the second half of the LSE kept for the backward: 4 kernels;
#   per extra step: its attention block, the LSE correction and the output correction (3) and one batched
#   isend/irecv pair (2 NCCL ops);
# * backward, once: the second-half LSE made contiguous and K/V copied into the first send buffer (2);
#   per step (every one of the cp steps, the first replacing cp = 1's attention backward): the attention backward
#   (3), dQ copied or accumulated (1, 2 on some ranks' split halves: 1 taken) and dK, dV (2); per extra step the K/V
#   pair sent on and the dK/dV pair returned (4 NCCL ops).
KERNELS_RING_FIXED = (4, 2)
KERNELS_RING_STEP_FWD = 3 + 2  # per extra ring step: attention block, LSE and output corrections; isend + irecv
KERNELS_RING_STEP_BWD = 6 + 4  # per extra ring step: attention bwd (3), dQ, dK, dV; K/V and dK/dV isend + irecv
NCCL_RING_STEP = (2, 4)  # NCCL ops per extra ring step (forward, backward), included in the counts above
KERNELS_CP_COLLECTIVE = {"all_gather": 1, "a2a": 4}  # per pass
KERNELS_MICROBATCH = 2  # pipeline send + receive, each way, every stage
KERNELS_EMBED = (1, 2)  # first stage: embedding lookup fwd; bwd (gradient scatter-add, zeroing)
KERNELS_UNFUSED_ATTENTION = (5, 8)  # extra over one flash kernel: scores GEMM, softmax, dropout, context GEMM, copies; bwd: 4 GEMMs, 2 elementwise, copies
# Megatron-Core's unfused RoPE (--no-rope-fusion; megatron/core/models/common/embeddings/rope_utils.py
# ``_apply_rotary_pos_emb_bshd`` at d98e8a64, mscale 1, not MLA), per query and key tensor, counted from the code:
# forward cos, * mscale, cast; sin, * mscale, cast; t * cos; rotate-half (negate, concatenate); * sin; add; the final
# concatenate with the (empty) pass-through part: 12 kernels where TE's fused RoPE launches 1; backward (autograd of
# the same): the two products' gradients (2), the negation's (1), the rotate-half split's concatenation (1), the sum of
# the two paths (1) and the rot_dim slice's backward (zeros + copy, 2): 7 where the fused RoPE launches 1.
# Extra over the fused kernels, for the two tensors of a layer:
KERNELS_ROPE_UNFUSED = (2 * (12 - 1), 2 * (7 - 1))
# Transformer Engine's unfused attention backend (--attention-backend unfused; transformer_engine/pytorch/attention/
# dot_product_attention/utils.py ``get_full_mask``, read in NVIDIA/TransformerEngine at d0067d0d, 2026-08-22) builds
# the causal mask on the device every forward: two aranges and their difference, the left and right window bounds,
# two comparisons, a negation, an AND and a NOT (10 kernels), plus a logical OR with the dataloader's mask when
# Megatron passes one (KERNELS_TE_UNFUSED_DATALOADER_MASK). Megatron's local attention does not build it.
KERNELS_TE_UNFUSED_MASK = 10
KERNELS_TE_UNFUSED_DATALOADER_MASK = 1
# --qk-layernorm (Megatron-Core's TE layer spec: q_layernorm and k_layernorm are TENorm modules applied to the queries
# and keys in SelfAttention.get_query_key_value_tensors, megatron/core/transformer/attention.py at d98e8a64): a norm
# kernel each forward, and each backward the input gradient and the weight-gradient reduction, as the block's own
# norms are counted in KERNELS_BWD.
KERNELS_QK_NORM = (2, 4)
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
        kf += KERNELS_UNFUSED_ATTENTION[0] + te_unfused_mask_kernels(st)
        kb += KERNELS_UNFUSED_ATTENTION[1]
    if st.qk_norms:
        kf += KERNELS_QK_NORM[0]
        kb += KERNELS_QK_NORM[1]
    if not st.rope_fusion:
        kf += KERNELS_ROPE_UNFUSED[0]
        kb += KERNELS_ROPE_UNFUSED[1]
    multi = cp > 1
    if st.cp_comm == "p2p":
        kf += np.where(multi, KERNELS_RING_FIXED[0] + (cp - 1) * KERNELS_RING_STEP_FWD, 0.0)
        kb += np.where(multi, KERNELS_RING_FIXED[1] + (cp - 1) * KERNELS_RING_STEP_BWD, 0.0)
    else:
        kf += np.where(multi, KERNELS_CP_COLLECTIVE[st.cp_comm], 0.0)
        kb += np.where(multi, KERNELS_CP_COLLECTIVE[st.cp_comm], 0.0)
    return kf, kb


def te_unfused_mask_kernels(st: CostSettings) -> int:
    """Kernels Transformer Engine's unfused attention spends per forward building its mask (0 for flash attention
    or Megatron's local modules): :data:`KERNELS_TE_UNFUSED_MASK`, and one OR with the dataloader's mask when the
    run creates one (``attention_mask``)."""
    if st.attention != "unfused" or st.transformer_impl != "transformer_engine":
        return 0
    return KERNELS_TE_UNFUSED_MASK + (KERNELS_TE_UNFUSED_DATALOADER_MASK if st.attention_mask else 0)


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
