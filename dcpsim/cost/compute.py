"""Device kernels: GEMMs, attention, element-wise work, FP8 casts, and the output layer and embedding.

All functions take the cost model's :class:`~dcpsim.cost.settings.CostSettings`
and arrays with one entry per pack (``s``: local tokens per rank) or per
document, and return seconds for ONE layer on one rank unless said otherwise.

* GEMM: each forward GEMM of a block costs 2·s·n·k FLOPs at the profile's
  achieved FLOP/s for ``s`` local tokens; backward is twice the forward FLOPs.
* Attention: per document of padded length L on a c-way group, each rank does
  F/c with F = 2·L²·q/TP forward (causal); with the ring (``p2p``) and
  ``all_gather`` the diagonal 1/c of it runs as a causal block and the rest as
  non-causal blocks, each at the profile's efficiency for L/c tokens; with
  ``a2a`` each rank runs whole sequences for 1/c of the heads (efficiency at
  L). Backward costs 2.5× forward FLOPs (FlashAttention's recomputation).
* Element-wise work (RMSNorms, RoPE, SwiGLU, residual adds) is memory-bound at
  the profile's HBM bandwidth.
* FP8: the block GEMMs run at the profile's FP8 rate and pay their casts,
  memory-bound, as Transformer Engine does them under Megatron-Core's TE layer
  spec (``get_gpt_layer_with_transformer_engine_spec``, megatron/core/models/
  gpt/gpt_layer_specs.py: QKV and fc1 are ``TELayerNormColumnParallelLinear``,
  proj and fc2 ``TERowParallelLinear``), read from TE v1.8 and v2.1
  (``module/layernorm_linear.py``, ``module/linear.py``, ``module/base.py``
  ``grad_output_preprocess``); bytes per element (:func:`fp8_cast_bytes`):

  - QKV and fc1: the norm kernel writes its output in FP8 (no cast kernel;
    the norm writes 1 B instead of 2 B per element, :func:`elementwise_terms`);
    backward transposes the (gathered) FP8 input for wgrad (2 B per element of
    s×k) and casts + transposes the output gradient in one kernel (4 B per
    element of s×n; column-parallel, so not gathered);
  - proj and fc2: without TP the input is cast + transposed in one kernel
    (4 B per element of s×k) and so is the output gradient backward (4 B per
    element of s×n); with sequence parallelism the input is cast only (3 B),
    transposed in backward (2 B), and the output gradient is cast on the local
    shard (3 B per element of s×n/TP), all-gathered in FP8 and transposed
    (2 B per element of s×n).

  The backward GEMMs (dgrad, wgrad) run with split accumulation: Transformer
  Engine sets ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = True``,
  ``_2X_ACC_WGRAD = True`` (``transformer_engine/pytorch/module/base.py``), so
  cuBLASLt's fast FP8 accumulation serves the forward GEMM only; the backward
  ones take ``timing.fp8_split_accumulation_factor`` times as long (the
  profile names the figure's source).
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.fixed import KERNELS_CROSS_ENTROPY_UNFUSED, KERNELS_EMBED, KERNELS_HEAD
from dcpsim.cost.settings import CostSettings
from dcpsim.model import ModelSpec
from dcpsim.model.accounting import ATTN_BWD_FLOPS_FACTOR, attention_flops

GEMM_BWD_FLOPS_FACTOR = 2.0  # dgrad + wgrad
ELEMENTWISE_BWD_FACTOR = 2.0  # backward of an element-wise op reads the saved input and the incoming gradient
# Cross-entropy HBM bytes per logit (s x V/TP), forward and backward:
# fused (one kernel reads the BF16 logits twice, the backward reads them and writes the gradient): 4 and 4;
# unfused (Megatron-Core's vocab-parallel cross-entropy without --cross-entropy-loss-fusion, counted from its
# passes): forward casts to fp32 (2 + 4), max (4), subtract in place (8), exp (8), sum (4), divide (8) = 38;
# backward scales the saved softmax (8) and casts the gradient to BF16 (4 + 2) = 14.
CROSS_ENTROPY_BYTES = {"fused": (4.0, 4.0), "unfused": (38.0, 14.0)}


def fp8_weight_cast_bytes(model: ModelSpec, tp: int) -> float:
    """HBM bytes per layer to cast the block weights to FP8 once per iteration (read BF16, write FP8 + transpose)."""
    return 4.0 * model.linear_params_per_layer() / tp


def gemm_bwd_factor(st: CostSettings) -> float:
    """Backward over forward time of the block GEMMs: twice the FLOPs (dgrad + wgrad), and in FP8 the split
    accumulation's factor (``timing.fp8_split_accumulation_factor``)."""
    if st.precision == "fp8":
        return GEMM_BWD_FLOPS_FACTOR * st.profile.timing.fp8_split_accumulation_factor
    return GEMM_BWD_FLOPS_FACTOR


FP8_NORM_FUSED = ("qkv", "fc1")
"""Block GEMMs whose FP8 input the preceding norm writes (Megatron-Core's TE spec: TELayerNormColumnParallelLinear)."""


def fp8_cast_bytes(name: str, tp: int) -> tuple[float, float, float]:
    """HBM bytes of one block GEMM's FP8 casts and transposes: (forward per element of the s×k input,
    backward per element of the s×k input, backward per element of the s×n output gradient); module docstring."""
    if name in FP8_NORM_FUSED:
        return 0.0, 2.0, 4.0
    if tp <= 1:
        return 4.0, 0.0, 4.0
    return 3.0, 2.0, 3.0 / tp + 2.0


def gemm_terms(st: CostSettings, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block GEMMs forward, and in FP8 the casts forward and backward (seconds per pack)."""
    prof = st.profile
    gemm_fwd, cast_fwd, cast_bwd = np.zeros(s.size), np.zeros(s.size), np.zeros(s.size)
    for name, n, k, cnt in st.model.gemm_shapes(st.tp):
        eff = prof.gemm_flops_per_s(np.maximum(s, 1.0), n, k, precision=st.precision)
        gemm_fwd += cnt * 2.0 * s * n * k / eff
        if st.precision == "fp8":
            b_in, b_in_bwd, b_grad = fp8_cast_bytes(name, st.tp)
            cast_fwd += cnt * b_in * s * k / prof.hbm_bw_bytes_per_s
            cast_bwd += cnt * (b_in_bwd * s * k + b_grad * s * n) / prof.hbm_bw_bytes_per_s
    return gemm_fwd, cast_fwd, cast_bwd


def token_terms(st: CostSettings, s: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`gemm_terms` then :func:`end_terms` of the local token counts ``s`` (both elementwise in ``s``):
    above ``_DISTINCT_MIN`` packs computed once per distinct count and spread (token counts repeat a lot:
    a planner's table of 383,000 single-sequence packs has some 25,000), the same numbers."""
    if s.size > _DISTINCT_MIN:
        u, inv = np.unique(s, return_inverse=True)
        if 2 * u.size < s.size:
            inv = inv.reshape(s.shape)
            return tuple(x[inv] for x in (*gemm_terms(st, u), *end_terms(st, u)))
    return (*gemm_terms(st, s), *end_terms(st, s))


def attention_doc_terms(st: CostSettings, padded: np.ndarray, c_int: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Attention forward and backward seconds (one layer) of each document of padded length ``padded`` (float)
    on ``c_int`` CP ranks (int, one per document; flash: at the profile's efficiency, each document its own
    causal block, so short documents run at short-length efficiency). A pack's attention is their sum."""
    if st.attention == "unfused":
        return unfused_attention(st, padded)
    inv = None
    if padded.size > _DISTINCT_MIN:  # many documents: time each distinct (length, CP size) once
        got = distinct_pairs(padded.astype(np.int64), c_int)
        if got is not None:
            p_u, c_int, inv = got
            padded = p_u.astype(np.float64)
    t_fwd_doc, t_bwd_doc = _flash_attention_doc(st, padded, c_int.astype(np.float64))
    if inv is not None:
        t_fwd_doc, t_bwd_doc = t_fwd_doc.take(inv), t_bwd_doc.take(inv)
    return t_fwd_doc, t_bwd_doc


_DISTINCT_MIN = 4096  # above this many documents, each distinct (length, CP size) is padded and timed once
_DENSE_SPAN = 1 << 22  # distinct_pairs: tables of up to this many cells (or 4 per entry) mark values; wider: a sort


def distinct_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The distinct pairs ``(x[i], y[i])`` of two int64 arrays of one shape, ascending by ``(x, y)``, and each
    entry's index among them: ``(x_u, y_u, inv)`` with ``x_u[inv] == x`` and ``y_u[inv] == y`` (what
    ``np.unique`` of the pairs with ``return_inverse`` gives). Small value ranges (token counts, CP sizes) are
    marked in a table, one pass each, without sorting; wide ones are sorted. None when the pairs are not
    fewer than half the entries (nothing to gain) or an array is empty."""
    if x.size == 0 or x.shape != y.shape:
        return None
    y_u, y_code = distinct_codes(y.ravel())
    return coded_pairs(x.ravel(), y_u, y_code)


def distinct_codes(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values ascending, each entry's index among them) of a non-empty 1-D int64 array: what
    ``np.unique(v, return_inverse=True)`` gives; values within ``_DENSE_SPAN`` of each other are marked in a
    table (no sort)."""
    lo, hi = int(v.min()), int(v.max())
    if hi - lo >= _DENSE_SPAN:
        return np.unique(v, return_inverse=True)
    code, u = _dense_codes(v - lo if lo else v, hi - lo + 1)
    return u + lo, code


def coded_pairs(x: np.ndarray, y_u: np.ndarray, y_code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`distinct_pairs` of ``x`` and ``y = y_u[y_code]`` (``y_u`` ascending and distinct, ``y_code`` int
    in ``0..y_u.size-1``, both as :func:`distinct_codes` gives them), 1-D arrays."""
    ny = y_u.size
    x_lo, x_hi = int(x.min()), int(x.max())
    span = (x_hi - x_lo + 1) * ny
    if span >= 1 << 62:  # the pair keys would overflow int64
        return None
    key = x - x_lo  # ascending in (x, y), one key per pair: (x - x_lo) * ny + y's index
    if ny > 1:
        key *= ny
        key += y_code
    if span <= max(_DENSE_SPAN, 4 * x.size):
        inv, key_u = _dense_codes(key, span)
    else:
        key_u, inv = np.unique(key, return_inverse=True)
    if 2 * key_u.size >= x.size:
        return None
    return key_u // ny + x_lo, y_u.take(key_u % ny), inv


def _dense_codes(v: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """(each entry's index among the distinct values, the distinct values ascending) of the int array ``v``
    whose values lie in ``0..span-1``: a table of ``span`` cells marks the values present."""
    seen = np.zeros(span, dtype=bool)
    seen[v] = True
    u = np.flatnonzero(seen)
    index = np.empty(span, dtype=np.int32 if u.size < 2**31 else np.int64)  # (fewer pages written)
    index[u] = np.arange(u.size, dtype=index.dtype)
    return index.take(v), u


def _flash_attention_doc(st: CostSettings, padded: np.ndarray, c_doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flash attention forward and backward seconds of each document (one layer) of padded length ``padded``
    on ``c_doc`` CP ranks (both float arrays)."""
    m, tp, prof = st.model, st.tp, st.profile
    f_fwd = attention_flops(padded, m.q_dim / tp) / c_doc  # causal forward FLOPs on this rank, one layer
    hd = m.head_dim
    if st.cp_comm == "a2a":
        seq, diag = padded, np.ones_like(c_doc)
    else:
        seq, diag = padded / c_doc, 1.0 / c_doc
    e = prof.attention_flops_per_s
    t_fwd_doc = f_fwd * (diag / e(seq, direction="fwd", causal=True, head_dim=hd)
                         + (1 - diag) / e(seq, direction="fwd", causal=False, head_dim=hd))
    f_bwd = ATTN_BWD_FLOPS_FACTOR * f_fwd
    t_bwd_doc = f_bwd * (diag / e(seq, direction="bwd", causal=True, head_dim=hd)
                         + (1 - diag) / e(seq, direction="bwd", causal=False, head_dim=hd))
    return t_fwd_doc, t_bwd_doc


def unfused_attention(st: CostSettings, padded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unfused attention per document (Megatron before fused kernels): two batched GEMMs over the whole
    L×L score matrix (no causal saving) plus the masked softmax and attention dropout, memory-bound.

    The ``h_l = n_heads/TP`` heads of a document run as one batched GEMM, priced as a GEMM of
    ``L·h_l`` rows: scores ``(L·h_l) × L × head_dim`` and context ``(L·h_l) × head_dim × L``; backward
    is twice the forward FLOPs. Memory per score element (fp16/bf16): forward softmax reads and writes
    it (4 B), dropout reads it, writes it and its 1-byte mask (5 B); backward reads the mask and the
    gradient and writes it (5 B), softmax backward reads output and gradient and writes (6 B). Dropout
    is Megatron's default attention dropout (0.1, arguments.py), assumed on in such runs.
    """
    m, prof = st.model, st.profile
    hl, d = m.n_heads / st.tp, m.head_dim
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


def elementwise_bytes_per_token_layer(st: CostSettings) -> float:
    """HBM bytes moved per token per layer by the forward element-wise ops (bf16).

    Two RMSNorms (read + write h: 8h), two residual adds (read 2h, write h: 12h),
    SwiGLU (read 2·ffn, write ffn: 6·ffn) and RoPE on Q and K (read + write: 4·(q + kv)).
    """
    m = st.model
    return (20.0 * m.hidden + 6.0 * m.ffn_hidden + 4.0 * (m.q_dim + m.kv_dim)) / st.tp


# HBM bytes per element of the query and key tensors that Megatron-Core's unfused RoPE (--no-rope-fusion) moves beyond
# the fused kernel's read + write (2 + 2 B; bf16), counted from the kernels of dcpsim.cost.fixed.KERNELS_ROPE_UNFUSED:
# forward t * cos (4), the negated half (2), the rotate-half concatenation (4), * sin (4), the add (read 4, write 2),
# the final concatenation (4) = 24, 20 beyond the fused 4; backward the two products' gradients (8), the negation (2),
# the split's concatenation (4), the sum of the paths (6), the slice's zeros + copy (6) = 26, 18 beyond the fused
# backward's 8 (ELEMENTWISE_BWD_FACTOR x 4). The cos/sin tables ([s, 1, 1, d], fp32) are not counted.
ROPE_UNFUSED_EXTRA_BYTES = (20.0, 18.0)


def rope_unfused_terms(st: CostSettings, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Extra element-wise seconds (forward, backward; per pack, one layer) of Megatron-Core's unfused RoPE over the
    fused kernel (``ROPE_UNFUSED_EXTRA_BYTES``); zero with ``rope_fusion``."""
    if st.rope_fusion:
        return np.zeros(np.shape(s)), np.zeros(np.shape(s))
    elems = s * (st.model.q_dim + st.model.kv_dim) / st.tp
    bw = st.profile.hbm_bw_bytes_per_s
    return ROPE_UNFUSED_EXTRA_BYTES[0] * elems / bw, ROPE_UNFUSED_EXTRA_BYTES[1] * elems / bw


def elementwise_terms(st: CostSettings, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Memory-bound element-wise work forward and backward (seconds per pack, one layer). In FP8 the two
    norms write their outputs in FP8, 1 B per element instead of 2 (module docstring): 2h/TP bytes per token
    fewer forward; their backward reads the BF16 input, unchanged."""
    bw = st.profile.hbm_bw_bytes_per_s
    fwd = s * elementwise_bytes_per_token_layer(st) / bw
    bwd = ELEMENTWISE_BWD_FACTOR * fwd
    if st.precision == "fp8":
        fwd = fwd - s * 2.0 * st.model.hidden / st.tp / bw
    if st.qk_norms:  # two more norms over the queries and keys: read + write, bf16 (the block's norms' 4 B)
        qk = s * 4.0 * (st.model.q_dim + st.model.kv_dim) / st.tp / bw
        fwd, bwd = fwd + qk, bwd + ELEMENTWISE_BWD_FACTOR * qk
    if not st.rope_fusion:
        rf, rb = rope_unfused_terms(st, s)
        fwd, bwd = fwd + rf, bwd + rb
    return fwd, bwd


def end_terms(st: CostSettings, s) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Output layer + final norm + loss (last stage) and embedding (first stage), forward and backward, BF16,
    each at least its kernels' launch time (seconds per pack, not per layer)."""
    m, tp, prof = st.model, st.tp, st.profile
    o = prof.timing.per_kernel_overhead_s
    bw = prof.hbm_bw_bytes_per_s
    v = m.vocab // tp if m.vocab % tp == 0 else m.vocab / tp
    head_fwd = 2.0 * s * m.hidden * v / prof.gemm_flops_per_s(np.maximum(s, 1.0), int(v), m.hidden)
    head_bwd = GEMM_BWD_FLOPS_FACTOR * head_fwd
    # cross-entropy over s x V/TP logits, memory-bound (CROSS_ENTROPY_BYTES)
    b_f, b_b = CROSS_ENTROPY_BYTES[st.cross_entropy]
    k_f, k_b = KERNELS_HEAD
    if st.cross_entropy == "unfused":
        k_f, k_b = k_f + KERNELS_CROSS_ENTROPY_UNFUSED[0], k_b + KERNELS_CROSS_ENTROPY_UNFUSED[1]
    head_fwd = np.maximum(head_fwd + b_f * s * v / bw, k_f * o)
    head_bwd = np.maximum(head_bwd + b_b * s * v / bw, k_b * o)
    # embedding: write s x h bf16; bwd scatter-adds into fp32 gradients (read + write)
    emb_fwd = np.maximum(s * m.hidden * 4.0 / bw, KERNELS_EMBED[0] * o)
    emb_bwd = np.maximum(s * m.hidden * 10.0 / bw, KERNELS_EMBED[1] * o)
    return head_fwd, head_bwd, emb_fwd, emb_bwd
