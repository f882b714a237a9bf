"""Megatron-LM's ``--deterministic-mode``: the NaN fill of every uninitialised allocation.

What the flag does (read in ``NVIDIA/Megatron-LM`` at d98e8a64, 2026-08-22,
``megatron/training/determinism.py``, ``apply_determinism_to_args``): it sets
``NCCL_ALGO=Ring``, ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`` and
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` where unset, and calls
``torch.use_deterministic_algorithms(True)``. With that call PyTorch's
``torch.utils.deterministic.fill_uninitialized_memory`` (default ``True``)
makes the CUDA ``empty`` factories fill the tensor they return with NaN (or
the integer maximum): ``at::native::empty_cuda`` and ``empty_strided_cuda``
call ``fill_empty_deterministic_`` when both switches are on, and ``resize_``
fills the bytes it grows (PyTorch PR #101849 / #104995, issue #109802:
"requires paying filling penalty unconditionally"). So every
``torch.empty``/``empty_like``/``new_empty``, every ``at::empty`` of a C++
extension (Transformer Engine's outputs and workspaces) and every
``.contiguous()``/``.float()`` copy that allocates through them costs one more
kernel: a host dispatch and launch, and a device write of the tensor's bytes.
Megatron-LM PR #7093 (merged 2026-09-05, after the snapshot) clears the switch
under ``--deterministic-mode``, "worth roughly 15% TFLOP/s on large configs"
(issue #6253: "determinism tax reduced from ~15% to ~2%"): the fill is what the
CI runs at the snapshot paid, and the only part of the flag priced here.

Not priced (no figure found): TE's deterministic attention backward under
``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`` (a slower or fallback kernel), NCCL's
Ring algorithm instead of NVLS/Tree for small collectives, cuBLAS's
``:4096:8`` workspace.

Which allocations are filled: counted per transformer layer from the module
structure, an honest approximation (not a trace). Structured PyTorch ops
(``mm``/``addmm``/``bmm``, ``add``, ``softmax``, ``gelu``) allocate their
outputs without the dispatched ``empty`` and are not filled; ``native_layer_norm``
(output, mean, rstd and their gradients), ``native_dropout`` (output and mask;
backward output), ``clone``/``contiguous`` and every Transformer Engine C++
output are.

Every layer's forward also ends in ``make_viewless_tensor`` (``transformer_layer.py``), whose
``torch.empty((1,))`` is filled: one more fill forward, counted in both rows below.

* ``transformer_engine`` (Megatron-Core's TE spec), forward 19: two
  LayerNorm+Linear modules (norm output, mean, rsigma, GEMM output: 4 each),
  fused attention (output, softmax statistics, RNG state: 3), the projection and
  fc2 GEMM outputs (1 each), the activation output (1), two bias-dropout-adds
  (dropout output and mask: 2 each), the viewless output (1). Backward 29: two LayerNorm+Linear
  (dgrad, wgrad, bias grad, norm dx, dgamma, dbeta and their two partial-sum
  workspaces: 8 each), the projection and fc2 (dgrad, wgrad, bias grad: 3 each),
  attention (dq, dk, dv and a workspace: 4), the activation gradient (1), two
  dropout gradients (1 each). Weight gradients are allocated (not fused into
  ``main_grad``) under ``--no-gradient-accumulation-fusion``, which every CI
  case sets; counted either way.
* ``local`` (plain torch modules, unfused attention), forward 15: two
  LayerNorms (output, mean, rstd: 3 each), three dropouts (attention
  probabilities and two bias-dropout-adds; ``native_dropout``'s output and mask:
  2 each), the context's ``permute(...).contiguous()`` and one layout copy (2),
  the viewless output (1).
  Backward 14: two LayerNorm gradients (dx, dgamma, dbeta and two partial-sum
  buffers: 5 each), three dropout gradients (1 each), one layout copy (1).
  Cross-check: ``experiments/host/determinism_fills.py`` counts the fills of a
  layer of that structure with PyTorch's CPU profiler (torch 2.13, CPU kernels,
  whose dropout and LayerNorm backward allocate differently; without Megatron's
  viewless-tensor wrapper): 14 forward and 15 backward beyond the non-deterministic run.

Outside the layers, per model-chunk op (read at d98e8a64): ``TransformerBlock.forward``'s two
``make_viewless_tensor`` calls (``FILLS_CHUNK_FWD``), and with a pipeline the received tensor's
``torch.empty`` buffer and, after a forward, ``deallocate_output_tensor``'s ``torch.empty((1,))``
(``FILLS_P2P``, the buffers ``dcpsim.cost.host.P2P_CALLS_*`` count): one launch each on the host; their
device bytes (one activation per receive) are not priced.

Costs. Host: each fill is one kernel issued from C++ (the dispatcher, a
``TensorIterator`` and a launch), priced at the host table's ``kernel_launch_s``
(measured: one tiny in-place kernel enqueued from Python, 6.5 us on an H100 host,
``profiles/h100-sxm-measured/MEASURED.md``; the fill skips the Python binding,
so this is an upper estimate of its host cost). Device: the bytes written at
the profile's HBM bandwidth (``hbm_bw_bytes_per_s``): the layer's token-sized
tensors (:func:`fill_bytes_per_token_layer`), the unfused attention's dropout
over the ``L x L`` scores (local), and the last stage's FP32 logits copy (one
fill forward, one backward: the vocab-parallel cross-entropy's ``.float()``
and its gradient).
"""

from __future__ import annotations

import numpy as np

# Filled allocations per transformer layer (forward, backward), counted above.
FILLS_LAYER = {"transformer_engine": (19, 29), "local": (15, 14)}
# Filled allocations of the last stage's output layer + loss per microbatch (forward, backward), unfused
# cross-entropy (--cross-entropy-loss-fusion is refused under --deterministic-mode at d98e8a64:
# ARG_VALUES_REQUIRED_FOR_DETERMINISM): the logits' FP32 copy and its gradient.
FILLS_HEAD = (1, 1)


# Per model-chunk op: TransformerBlock.forward's two viewless tensors (forward only).
FILLS_CHUNK_FWD = 2
# Per pipeline exchange (forward, backward) with pp > 1: the receive buffer, and the deallocated output's stub after
# a forward (core/pipeline_parallel/p2p_communication.py, schedules.py at d98e8a64; dcpsim.cost.host.P2P_CALLS_*).
FILLS_P2P = (2, 1)


def fills_per_layer(transformer_impl: str) -> tuple[int, int]:
    """Filled allocations per layer pass (forward, backward) of a Megatron-LM layer with ``transformer_impl``
    (``transformer_engine`` or ``local``; anything else counts as Transformer Engine, Megatron's default)."""
    return FILLS_LAYER.get(transformer_impl, FILLS_LAYER["transformer_engine"])


def fill_host_s(fills, kernel_launch_s: float):
    """Host seconds to issue ``fills`` fill kernels (one launch each, ``kernel_launch_s`` seconds)."""
    return np.asarray(fills, dtype=np.float64) * float(kernel_launch_s)


def fill_bytes_per_token_layer(model, tp: int) -> tuple[float, float]:
    """Bytes the fills write per token per layer (forward, backward), BF16 activations (2 B) and bool masks (1 B),
    sharded tensors divided by ``tp``. Forward: two norm outputs, the projection, fc2 and two dropout outputs
    (``h`` each, 6h), two dropout masks (``h`` bytes each), the QKV and attention outputs ((q + 2kv) / tp + q / tp),
    fc1 and activation outputs (2 ffn / tp). Backward: the same tensors' gradients, masks excepted. Norm
    statistics, RNG states and workspaces are a few bytes per token and left out."""
    h, q, kv, ffn = float(model.hidden), float(model.q_dim), float(model.kv_dim), float(model.ffn_hidden)
    sharded = (2.0 * q + 2.0 * kv + 2.0 * ffn) / tp
    fwd = 2.0 * (6.0 * h + sharded) + 2.0 * h
    bwd = 2.0 * (6.0 * h + sharded)
    return fwd, bwd


def fill_device_terms(st, s, sq=None) -> tuple[np.ndarray, np.ndarray]:
    """Device seconds of one layer's fills per pack (forward, backward): token-sized bytes of ``s`` local tokens
    (:func:`fill_bytes_per_token_layer`) and, with unfused attention and ``sq`` (sum of squared padded lengths per
    pack), the attention dropout's output (2 B) and mask (1 B) forward and its gradient (2 B) backward over
    ``heads / tp`` score matrices, at the profile's HBM bandwidth. Zeros unless ``st.deterministic_fill``."""
    s = np.asarray(s, dtype=np.float64)
    if not st.deterministic_fill:
        return np.zeros(s.shape), np.zeros(s.shape)
    bw = float(st.profile.hbm_bw_bytes_per_s)
    bf, bb = fill_bytes_per_token_layer(st.model, st.tp)
    fwd, bwd = s * bf / bw, s * bb / bw
    if st.attention == "unfused" and sq is not None:
        scores = np.asarray(sq, dtype=np.float64) * st.model.n_heads / st.tp
        fwd = fwd + 3.0 * scores / bw
        bwd = bwd + 2.0 * scores / bw
    return fwd, bwd


def fill_head_device_terms(st, s) -> tuple[np.ndarray, np.ndarray]:
    """Device seconds of the last stage's logits fills per pack (forward, backward): ``FILLS_HEAD`` FP32 copies of
    ``s x vocab / tp`` logits at HBM bandwidth. Zeros unless ``st.deterministic_fill``."""
    s = np.asarray(s, dtype=np.float64)
    if not st.deterministic_fill:
        return np.zeros(s.shape), np.zeros(s.shape)
    per = s * 4.0 * st.model.vocab / st.tp / float(st.profile.hbm_bw_bytes_per_s)
    return FILLS_HEAD[0] * per, FILLS_HEAD[1] * per
