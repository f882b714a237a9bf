"""Megatron-LM Python calls the host timeline prices outside the layers' measured pass: ``get_batch`` per microbatch
on the stages that read data, and the activation-checkpoint wrapper of a fully recomputed layer.

Counted in ``NVIDIA/Megatron-LM`` at d98e8a64 (2026-08-22); each call is priced at the host table's unit costs
(:class:`~dcpsim.hardware.host.HostCosts`: ``kernel_launch_s`` per dispatcher call or launch, ``module_call_s`` per
Python module/function entry, ``collective_call_s`` per NCCL call). :mod:`dcpsim.cost.host` adds them to the ops.
"""

from __future__ import annotations

import numpy as np

from dcpsim.hardware.host import HostCosts

# get_batch per microbatch on a stage that reads data (pretrain_gpt.py ``get_batch`` and megatron/core/utils.py
# ``get_batch_on_this_tp_rank`` / ``_get_batch_on_this_cp_rank_per_sequence_balancing`` at d98e8a64), fixed-length
# (not THD) batches, priced for TP rank 0 (the rank that loads): every tensor of the loader's batch is copied to the
# GPU (``.cuda(non_blocking=True)``: tokens, labels, loss mask, position ids, and the attention mask unless
# --no-create-attention-mask-in-dataloader), then broadcast over the TP group (a call even in a one-rank group): with
# pp = 1 all of them, on the first stage tokens and position ids, on the last labels and loss mask, the mask on
# both; with CP each tensor left is cut to the rank's two zigzag chunks (``torch.zeros``, two ``fill_``,
# ``index_select``). Middle stages return before any of it. The next(data_iterator) call, the TransformerConfig
# get_batch builds, and the copies' and broadcasts' device time (the mask is mbs x s x s bytes over PCIe and NVLink)
# are not priced.
BATCH_TENSORS = 4  # tokens, labels, loss_mask, position_ids
BATCH_TENSORS_END_STAGE = 2  # first stage: tokens, position_ids; last stage: labels, loss_mask
CP_SLICE_KERNELS = 4


def get_batch_host_s(host: HostCosts, first: bool, last: bool, cps, *, mask: bool = True) -> np.ndarray:
    """Host seconds of one fixed-length ``get_batch`` call (per microbatch, on a stage that reads data: ``first``
    and/or ``last`` pipeline stage), per group of CP size ``cps`` (array): the copies, TP broadcasts and CP slicing
    counted above, with the dataloader's attention mask when ``mask``. Zero on a middle stage. (Packed, THD,
    batches take get_batch's cu_seqlens path, not priced here: the caller skips them.)"""
    cps = np.asarray(cps, dtype=np.float64)
    if not (first or last):
        return np.zeros(cps.shape)
    m = 1 if mask else 0
    copies = BATCH_TENSORS + m
    kept = (BATCH_TENSORS if (first and last) else BATCH_TENSORS_END_STAGE) + m
    h = copies * (host.module_call_s + host.kernel_launch_s) + kept * host.collective_call_s
    return h + np.where(cps > 1, kept * (host.module_call_s + CP_SLICE_KERNELS * host.kernel_launch_s), 0.0)


# Megatron's full recomputation wraps each layer (--recompute-method uniform, 1 layer per chunk: the case dcpsim
# prices) in tensor_parallel.CheckpointFunction (megatron/core/tensor_parallel/random.py and core/recompute.py at
# d98e8a64). Beyond the recomputed forward (priced as the forward), per layer: RNG states read in the forward
# (CPU, CUDA, tracker: 3) and in the backward saved, set and restored (_fork_rng and _set_all_rng_states: 9), the
# saved tensors stored and read (2), the no_grad / enable_grad contexts (2), the two tensor inputs detached and
# marked for grad (4): 20 dispatcher calls at ``kernel_launch_s``; the autograd Function's entry and the nested
# torch.autograd.backward (2) at ``module_call_s``.
CHECKPOINT_TORCH_CALLS = 20
CHECKPOINT_MODULE_CALLS = 2


def checkpoint_host_s(host: HostCosts) -> float:
    """Host seconds CheckpointFunction adds per recomputed layer beyond the recomputed forward (counts above)."""
    return CHECKPOINT_TORCH_CALLS * host.kernel_launch_s + CHECKPOINT_MODULE_CALLS * host.module_call_s
