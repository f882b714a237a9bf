"""The host timeline: who waits for whom between the CPU that issues a step and the GPU that runs it.

Mechanism. Every op (one pipeline stage's forward or backward of one
microbatch, or a piece of the step's end) has a *host* cost ``h`` (the CPU
time to issue it: Python and Transformer Engine module code, PyTorch's
dispatcher, kernel launches, NCCL calls) and a *device* cost ``d`` (the GPU
time of its ``k`` kernels). The host issues ops in order and never waits for
the device, except at a *sync*, where it waits until the device has drained
everything issued before (and, for a pipeline receive, until the input has
arrived). The device starts an op's first kernel once it is issued, the
device is free and the op's input is ready, and runs the op's kernels as the
host issues them. With the op's kernels taken as ``k`` equal pieces (host
``h/k`` and device ``d/k`` each), the op's device end is the two-machine flow
shop's makespan::

    H       = host free                      (sync before: max(host free, device free, ready) + sync_s)
    start   = max(device free, ready, H + h/k)
    end     = max(start + d, H + h + d/k)
    host    = H + h                          (sync after: max(H + h, end) + sync_s)

so a long run of ops costs ``~ max(Σh, Σd)``: the host runs ahead while the
device is the bottleneck (its costs hide), and the device idles while the host
is (``Σh`` shows). A sync drains the queue and throws the host's lead away.
:func:`issue` is that rule, vectorised; :func:`evaluate` runs it over one op
list (one rank's ops, or a step's end); the pipeline evaluators
(:func:`dcpsim.pipeline.group_times`, through :meth:`HostOps.runner`, and the
event engine, through :func:`issue_one`) run it per op with the device's own
dependencies.

Order apart from execution: :func:`host_ops` and :func:`step_end_ops` are
pure functions saying what the host issues and what it costs; the evaluators
above run it. A layer pass costs its kernels times the host's per-kernel cost
of that direction (``kernel_fwd_s``, ``kernel_bwd_s``: measured per kernel of
a whole transformer block, module Python and the autograd engine included)
and its NCCL calls times ``collective_call_s``; with ``layer_fwd_s``/``layer_bwd_s``
in the table, the base layer's pass (its ``kernels_base`` kernels) costs the measured
block's pass as a whole instead, and only the kernels beyond it are priced one by one
(a framework that fuses the same layer into fewer kernels does not issue it faster: the
module Python per pass stays). ``step.transformer_impl`` (``local`` or
``transformer_engine`` modules) prices the same: a BF16 ``te.Linear`` costs about
a torch Linear on the host since TE's 2025-26 releases (TransformerEngine issue
#2126, 2026-01; #2053's 2.7x on Grace was measured before them), and Megatron-LM's
CI rows of one layout with either implementation measure alike (TP1 PP1 DP8:
0.0530 s local, 0.0529 s TE; experiments/megatron_ci).

Syncs in a Megatron-LM training step (read in ``NVIDIA/Megatron-LM`` at
d98e8a64, 2026-08-22; flags are Megatron's):

* pipeline p2p with ``batch_p2p_comm`` and ``batch_p2p_sync`` (the defaults;
  ``batch_p2p_comm = not overlap_p2p_comm`` and overlap is forced off without
  interleaving, ``training/arguments.py``): ``torch.cuda.synchronize()`` after
  every batched send/receive (``core/pipeline_parallel/p2p_communication.py``,
  ``_communicate``). So with ``pp > 1`` and ``vp = 1`` every op waits for its
  input and a drained device; interleaved schedules overlap p2p and do not;
* the loss NaN/Inf check (``--check-for-nan-in-loss-and-grad``, on by
  default): ``pretrain_gpt.py`` ``loss_func`` calls
  ``rerun_state_machine.validate_result`` with ``torch.isnan``/``torch.isinf``,
  whose result is used as a Python bool: a sync per microbatch on the last
  stage; the same check on gradients per bucket before their reduction
  (``core/distributed/param_and_grad_buffer.py`` ``check_grads``);
* gradient norm for clipping (``--clip-grad``, default 1.0):
  ``core/optimizer/clip_grads.py`` ``total_norm.item()``;
* ``--log-num-zeros-in-grad``: ``count_zeros_fp32`` ``.item()``;
* logging every ``--log-interval`` steps: ``loss_scale.item()``, the
  ``interval-time`` timer with ``barrier=True`` (``torch.cuda.synchronize()``
  in ``core/timers.py``), and with ``--log-params-norm``
  ``calc_params_l2_norm`` (a full-model norm + all-reduce + ``.item()``);
* packed (THD) microbatches: the sequence metadata (``cu_seqlens``,
  ``max_seqlen``) is read on the host per microbatch;
* Dynamic-CP: the scheduler's exchange of sequence lengths before the step.

CUDA graphs (``--cuda-graph-impl local|transformer_engine``) capture whole
transformer layers: a graphed layer pass costs one module call and one graph
launch (``graph_replay_s`` plus ``graph_kernel_s`` per captured kernel)
instead of its kernels' and calls' host costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dcpsim.choices import CUDA_GRAPH_IMPLS
from dcpsim.cost import determinism
from dcpsim.cost.host_calls import checkpoint_host_s, get_batch_host_s
from dcpsim.hardware.host import HostCosts

# Kernels the step's end launches besides per-tensor loops: multi-tensor L2 norm and scale, Adam, the
# main -> model parameter copy, the scalar all-reduces' pre/post ops (counted from clip_grads.py and
# optimizer.py at d98e8a64; multi_tensor_apply launches one kernel per chunk of tensors, assumed one here).
KERNELS_GRAD_NORM = 3
KERNELS_OPTIMIZER = 4

# Per forward_step / backward_step call: once per model chunk per microbatch (the interleaved schedule calls
# them for each of a rank's vp chunks, the other schedules once per microbatch). Counted in NVIDIA/Megatron-LM
# at d98e8a64 (2026-08-22), priced per call at ``module_call_s`` and per launch at ``kernel_launch_s``:
# * forward (core/pipeline_parallel/schedules.py ``forward_step`` and ``forward_step_calc_loss``; pretrain_gpt.py
#   ``forward_step``): set_current_microbatch, set_input_tensor, the chunk's module chain
#   DistributedDataParallel.forward (core/distributed/data_parallel_base.py) -> Float16Module.forward
#   (core/transformer/module.py) -> GPTModel.forward -> TransformerBlock.forward with its two
#   make_viewless_tensor calls (core/transformer/transformer_block.py), ``num_tokens = torch.tensor(0)``,
#   and ``total_num_tokens += num_tokens`` (``forward_step_helper_postprocess`` / the 1F1B loop: one kernel);
# * backward (schedules.py ``backward_step``): ``retain_grad`` on the input and ``custom_backward``'s call into the
#   autograd engine (the engine's own work is in the layers' measured backward pass).
FORWARD_STEP_CALLS = 10
FORWARD_STEP_KERNELS = 1
BACKWARD_STEP_CALLS = 2
# Per pipeline exchange of an op beyond its NCCL calls (core/pipeline_parallel/p2p_communication.py ``_communicate``
# and schedules.py at d98e8a64): the received tensor's ``torch.empty`` (``create_tensor_recv_prev/next``), one
# ``Work.wait()`` per request (send and receive: a stream-wait enqueue each, priced as a launch), and after a
# forward ``deallocate_output_tensor``'s ``torch.empty((1,))`` (``deallocate_pipeline_outputs`` is set by
# training/argument_utils.py).
P2P_CALLS_FWD = 2
P2P_CALLS_BWD = 1
P2P_WAITS = 2


@dataclass(frozen=True)
class Op:
    """One unit the host issues and the device runs (seconds; ``kernels`` >= 1 equal pieces)."""

    name: str
    host_s: float
    device_s: float
    kernels: int = 1
    sync_before: bool = False
    sync_after: bool = False
    ready_s: float = 0.0


@dataclass(frozen=True)
class OpCosts:
    """What :func:`issue` reads of ops: host issue seconds, device seconds, kernels (>= 1 equal pieces), and
    whether the host synchronises before / after each (scalars for one op, arrays for independent ops).
    An :class:`Op` has the same fields, so it can be passed as it is."""

    host_s: Any
    device_s: Any
    kernels: Any = 1
    sync_before: Any = False
    sync_after: Any = False


def issue(host_free, device_free, ready, op: OpCosts | Op, sync_s: float):
    """The host/device rule of the module docstring for one op (or arrays of independent ops).

    Returns ``(issue_start, device_start, device_end, host_free_after)``, all seconds, broadcast over the
    inputs. ``op.sync_before``/``op.sync_after`` are booleans (or boolean arrays).
    """
    sync_before, sync_after = op.sync_before, op.sync_after
    h = np.asarray(op.host_s, dtype=np.float64)
    d = np.asarray(op.device_s, dtype=np.float64)
    k = np.maximum(np.asarray(op.kernels, dtype=np.float64), 1.0)
    hf = np.asarray(host_free, dtype=np.float64)
    df = np.asarray(device_free, dtype=np.float64)
    r = np.asarray(ready, dtype=np.float64)
    H = np.where(sync_before, np.maximum(np.maximum(hf, df), r) + sync_s, hf)
    start = np.maximum(np.maximum(df, r), H + h / k)
    end = np.maximum(start + d, H + h + d / k)
    host_after = np.where(sync_after, np.maximum(H + h, end) + sync_s, H + h)
    return H, start, end, host_after


def issue_one(host_free: float, device_free: float, ready: float, device_s: float,
              op: tuple[float, float, bool, bool], sync_s: float) -> tuple[float, float, float, float]:
    """:func:`issue` for one op on Python floats (seconds): the same operations in the same order, so the same
    float64 results (a binary float operation rounds alike in Python and numpy), without numpy's per-call cost.

    ``op`` is the op's host side ``(host_s, kernels, sync_before, sync_after)`` (kernels floored at 1).
    Inputs are finite (NaN would propagate through :func:`issue`'s ``np.maximum`` but not here).
    Returns ``(issue_start, device_start, device_end, host_free_after)``.
    """
    host_s, kernels, sync_before, sync_after = op
    k = kernels if kernels > 1.0 else 1.0
    if sync_before:
        H = host_free if host_free >= device_free else device_free
        H = (H if H >= ready else ready) + sync_s
    else:
        H = host_free
    start = device_free if device_free >= ready else ready
    t = H + host_s / k
    if t > start:
        start = t
    end = start + device_s
    t = H + host_s + device_s / k
    if t > end:
        end = t
    host_after = H + host_s
    if sync_after:
        host_after = (host_after if host_after >= end else end) + sync_s
    return H, start, end, host_after


@dataclass
class HostTimeline:
    """Times of one op list under :func:`issue` (seconds from the list's start)."""

    ops: list[Op]
    issue_start: np.ndarray
    device_start: np.ndarray
    device_end: np.ndarray
    host_end: np.ndarray

    @property
    def end_s(self) -> float:
        """When both the device and the host are done with the list."""
        if not self.ops:
            return 0.0
        return float(max(self.device_end.max(), self.host_end[-1]))

    @property
    def host_busy_s(self) -> float:
        return float(sum(op.host_s for op in self.ops))

    @property
    def device_busy_s(self) -> float:
        return float(sum(op.device_s for op in self.ops))

    def breakdown(self) -> list[dict[str, float | str]]:
        """One row per op: host and device cost, when the device ran it, and the device's wait for the host."""
        rows = []
        prev_end = 0.0
        for i, op in enumerate(self.ops):
            wait = max(0.0, float(self.device_start[i]) - max(prev_end, op.ready_s))
            rows.append({"op": op.name, "host_s": op.host_s, "device_s": op.device_s,
                         "device_start_s": float(self.device_start[i]), "device_end_s": float(self.device_end[i]),
                         "device_waits_for_host_s": wait, "sync": "before" if op.sync_before else
                         ("after" if op.sync_after else "")})
            prev_end = float(self.device_end[i])
        return rows


def evaluate(ops: list[Op], sync_s: float, host_start: float = 0.0, device_start: float = 0.0) -> HostTimeline:
    """Run :func:`issue` over ``ops`` in order on one host and one device (the one evaluator of an op list)."""
    n = len(ops)
    out = np.zeros((4, n))
    hf, df = float(host_start), float(device_start)
    sync_s = float(sync_s)
    for i, op in enumerate(ops):
        H, s, e, hf2 = issue_one(hf, df, float(op.ready_s), float(op.device_s),
                                 (float(op.host_s), float(op.kernels), bool(op.sync_before), bool(op.sync_after)), sync_s)
        out[:, i] = (H, s, e, hf2)
        hf, df = hf2, e
    return HostTimeline(list(ops), out[0], out[1], out[2], out[3])


# ---------------------------------------------------------------- what the host issues (pure)
@dataclass(frozen=True)
class StepFlags:
    """What a run's flags add to the host's work (Megatron-LM names in comments; see the module docstring)."""

    check_nan: bool = True  # --check-for-nan-in-loss-and-grad (default on)
    clip_grad: bool = True  # --clip-grad > 0 (default 1.0): gradient norm with .item()
    log_params_norm: bool = False  # --log-params-norm
    log_num_zeros: bool = False  # --log-num-zeros-in-grad
    log_interval: int = 100  # --log-interval (default 100): a logged step syncs and runs the logging Python
    cuda_graphs: str = "none"  # --cuda-graph-impl
    overlap_p2p_comm: bool = True  # interleaved schedules only; vp = 1 always syncs after batched p2p
    test_mode_qk_checks: bool = False  # --test-mode with --qk-layernorm: per attention forward, q/k norms compared
    log_memory: bool = False  # --log-memory-to-tensorboard: allocator statistics written each logged step
    log_timers: bool = False  # --log-timers-to-tensorboard: timer values written each logged step
    timing_log_level: int = 0  # --timing-log-level: 1 adds synced timers around the step's phases, 2 per op
    grad_accumulation_fusion: bool = True  # off: one extra add kernel per weight gradient per microbatch
    attention_mask_in_dataloader: bool = True  # default; off with --no-create-attention-mask-in-dataloader
    packed: bool = False  # variable-length (THD) batches: get_batch's cu_seqlens path, not the fixed one priced here
    thd: bool = False  # per-microbatch metadata read on the host (Dynamic-CP's local CP size)
    dynamic_cp: bool = False  # Dynamic-CP: the scheduler's exchange of lengths before the step
    deterministic: bool = False  # --deterministic-mode: NaN fill of every uninitialised allocation (cost/determinism.py)
    transformer_impl: str = "transformer_engine"  # --transformer-impl: which allocations a layer fills

    @classmethod
    def from_settings(cls, s, **kw) -> StepFlags:
        """From a run's ``[step]`` settings (:class:`~dcpsim.run.config.StepSection` field names; a missing
        field keeps its default), ``kw`` overriding."""
        d = cls()
        vals = dict(check_nan=bool(getattr(s, "check_for_nan_in_loss_and_grad", d.check_nan)),
                    clip_grad=float(getattr(s, "clip_grad", 1.0)) > 0,
                    log_params_norm=bool(getattr(s, "log_params_norm", d.log_params_norm)),
                    log_num_zeros=bool(getattr(s, "log_num_zeros_in_grad", d.log_num_zeros)),
                    log_interval=int(getattr(s, "log_interval", d.log_interval)),
                    cuda_graphs=str(getattr(s, "cuda_graphs", d.cuda_graphs)),
                    overlap_p2p_comm=bool(getattr(s, "overlap_p2p_comm", d.overlap_p2p_comm)),
                    log_memory=bool(getattr(s, "log_memory", d.log_memory)),
                    log_timers=bool(getattr(s, "log_timers", d.log_timers)),
                    timing_log_level=int(getattr(s, "timing_log_level", d.timing_log_level)),
                    grad_accumulation_fusion=bool(getattr(s, "grad_accumulation_fusion", d.grad_accumulation_fusion)),
                    test_mode_qk_checks=bool(getattr(s, "test_mode_qk_checks", d.test_mode_qk_checks)),
                    deterministic=bool(getattr(s, "deterministic", d.deterministic)),
                    transformer_impl=str(getattr(s, "transformer_impl", d.transformer_impl)),
                    attention_mask_in_dataloader=bool(getattr(s, "attention_mask_in_dataloader",
                                                              d.attention_mask_in_dataloader)))
        vals.update(kw)
        return cls(**vals)

    @property
    def logged_scalars(self) -> int:
        """Values a logged step writes (training_log: loss, learning rate, loss scale, grad norm, batch size,
        iteration time and a few more, plus the flags' own): each one a Python call."""
        return (8 + int(self.log_params_norm) + int(self.log_num_zeros) + 6 * int(self.log_memory)
                + 2 * int(self.log_timers) * max(self.timing_log_level, 1))


@dataclass(frozen=True)
class StepEndWork:
    """Device work and sizes of a stage's step end (seconds, counts), from the cost model and simulator."""

    optimizer_device_s: float  # memory-bound optimizer step + grad norm + zeroing (device)
    param_tensors: int  # parameter tensors on the stage (per-tensor host loops)
    buckets: int = 1  # gradient buckets (grad checks, reduce-scatter and all-gather calls)
    norm_device_s: float = 0.0  # one read of the stage's parameters (params norm), device
    extra: tuple[Op, ...] = field(default_factory=tuple)


def step_end_ops(work: StepEndWork, flags: StepFlags, host: HostCosts) -> list[Op]:
    """The ops of a stage's step end, after its last backward, in Megatron's order (read at d98e8a64):
    finalize the gradients (per bucket a NaN check read on the host, the reduce-scatter and all-gather
    calls), the optimizer step (main gradients gathered per tensor, the gradient norm: a per-tensor filter,
    a multi-tensor L2 norm, an all-reduce and its read; the clip; the zero count: per tensor a count and
    two adds, an all-reduce and a read; Adam's multi-tensor kernels and the main-to-model copy, per
    tensor), the parameter norm (``calc_params_l2_norm``: per tensor a filter, eight bucket norms, six
    all-reduces, a read; Megatron's own code comment puts its steady cost near 10 ms, model not stated),
    then the logging of a logged step. Counts are read from the code; the unit costs are the host's."""
    kl, mc, cc, pt = host.kernel_launch_s, host.module_call_s, host.collective_call_s, host.param_tensor_s
    n = max(int(work.param_tensors), 1)
    ops = []
    if flags.check_nan:  # per bucket: a norm of the bucket's grads checked on the host
        ops.append(Op("grad NaN check", work.buckets * (mc + 2 * kl), 0.0, kernels=2 * work.buckets, sync_after=True))
    ops.append(Op("grad sync calls", work.buckets * 2 * cc + mc, 0.0, kernels=max(work.buckets, 1)))
    ops.append(Op("copy grads to main", n * pt + mc, 0.0, kernels=1))
    if flags.clip_grad:
        ops.append(Op("grad norm", n * mc + KERNELS_GRAD_NORM * kl + cc + mc, 0.0, kernels=KERNELS_GRAD_NORM,
                      sync_after=True))
        ops.append(Op("clip", kl + mc, 0.0))
    if flags.log_num_zeros:
        ops.append(Op("count zeros", n * (3 * kl + mc) + cc + mc, 0.0, kernels=3 * n, sync_after=True))
    ops.append(Op("optimizer", KERNELS_OPTIMIZER * kl + 2 * n * pt + mc, work.optimizer_device_s,
                  kernels=KERNELS_OPTIMIZER))
    ops.extend(work.extra)
    if flags.log_params_norm:
        ops.append(Op("params norm", n * (mc + pt) + 8 * KERNELS_GRAD_NORM * kl + 6 * cc + mc, work.norm_device_s,
                      kernels=8 * KERNELS_GRAD_NORM, sync_after=True))
    # a logged step reads the loss scale and the reduced losses, stops the interval timer with a barrier and
    # writes the logs: every log_interval steps, so its host time is spread over them (one sync each, when
    # every step is logged)
    every = flags.log_interval <= 1
    logging = 2 * mc + 2 * cc + flags.logged_scalars * mc
    ops.append(Op("loss report and logging", logging / max(flags.log_interval, 1), 0.0, sync_after=every))
    if host.step_s > 0:  # per-step host work outside the mechanisms above (training loop Python, every step)
        ops.append(Op("training loop", host.step_s, 0.0))
    if flags.timing_log_level >= 1:  # the level-1 timers (forward-backward, optimizer, ...) sync at start and stop
        ops = [replace(o, sync_before=True) if o.name == "optimizer" else o for o in ops]
    return ops


def layer_collectives(tp: int, cp, cp_comm: str) -> tuple[np.ndarray, np.ndarray]:
    """NCCL calls per layer (forward, backward) per pack of CP size ``cp``: sequence-parallel TP (two
    all-gathers and two reduce-scatters each way), the CP ring's sends and receives per extra step (``p2p``: the
    K/V pair forward, the K/V and dK/dV pairs backward) or the CP collectives (``all_gather`` 1, ``a2a`` 4 each
    way)."""
    cp = np.asarray(cp, dtype=np.float64)
    n = np.full(cp.shape, 4.0 if tp > 1 else 0.0)
    multi = cp > 1
    if cp_comm == "p2p":  # Transformer Engine's ring: NCCL ops per extra step (dcpsim.cost.fixed.NCCL_RING_STEP)
        from dcpsim.cost.fixed import NCCL_RING_STEP

        return (n + np.where(multi, (cp - 1) * NCCL_RING_STEP[0], 0.0),
                n + np.where(multi, (cp - 1) * NCCL_RING_STEP[1], 0.0))
    if cp_comm == "a2a+p2p":
        extra = np.where(multi, 4.0 + np.maximum(cp / 8.0 - 1.0, 0.0), 0.0)
    else:
        extra = np.where(multi, {"all_gather": 1.0, "a2a": 4.0}.get(cp_comm, 1.0), 0.0)
    return n + extra, n + extra


@dataclass(frozen=True)
class HostOps:
    """Host side of one iteration's group ops: ``(V, 2, G)`` arrays (virtual stage, direction, group).

    ``host_s``: issue cost; ``kernels``: kernels the op launches (>= 1); ``sync_before``/``sync_after``:
    the op's syncs (see the module docstring); ``sync_s``: the host's wake-up after a drain. The pipeline
    evaluators run each op in schedule order with per-rank host clocks (:meth:`runner`, :meth:`run_one`).
    """

    host_s: np.ndarray
    kernels: np.ndarray
    sync_before: np.ndarray
    sync_after: np.ndarray
    sync_s: float
    stage_row: tuple[int, ...] | None = None  # set: the arrays are ``(R, 2, G)``, stage s's ops in row stage_row[s]

    def take_groups(self, order: np.ndarray) -> HostOps:
        """The same ops with groups reordered (``order`` indexes the last axis)."""
        return HostOps(self.host_s[..., order], self.kernels[..., order], self.sync_before[..., order],
                       self.sync_after[..., order], self.sync_s, self.stage_row)

    def full(self) -> HostOps:
        """The same ops as ``(V, 2, G)`` arrays (each stage's shared row copied; itself when none is shared)."""
        if self.stage_row is None:
            return self
        r = list(self.stage_row)
        return HostOps(self.host_s[r], self.kernels[r], self.sync_before[r], self.sync_after[r], self.sync_s)

    def run(self, s: int, d: int, a: int, z: int, host_free, ready, dur):
        """Ops ``(s, d, a:z)`` whose hosts are free at ``host_free`` and whose device inputs (ranks free,
        pipeline input arrived) are ready at ``ready``, device time ``dur``: ``(device start, device end,
        host free after, issue start)`` by :func:`issue`."""
        s = s if self.stage_row is None else self.stage_row[s]
        ops = OpCosts(self.host_s[s, d, a:z], dur, self.kernels[s, d, a:z], self.sync_before[s, d, a:z],
                      self.sync_after[s, d, a:z])
        H, start, end, host_after = issue(host_free, ready, ready, ops, self.sync_s)
        return start, end, host_after, H

    def runner(self, fwd_s: np.ndarray, bwd_s: np.ndarray):
        """:meth:`run` for ops of device times ``fwd_s``/``bwd_s`` (``(V, G)`` per direction), as a function
        (:func:`dcpsim.cost.host_runner.runner`: the same operations as :func:`issue`, the same results)."""
        from dcpsim.cost.host_runner import runner

        return runner(self, fwd_s, bwd_s)

    def run_one(self, i: int, host_free: float, ready: float, dur: float) -> tuple[float, float, float, float]:
        """:meth:`run` for the one op at flat index ``i`` of the ``(V, 2, G)`` arrays (``(s * 2 + d) * G + g``: the
        event engine's node number; arrays of every stage: :meth:`full`) on Python floats (seconds): ``(device start,
        device end, host free after, issue start)``, equal to :meth:`run`'s. Reads the arrays' items per call."""
        op = (self.host_s.item(i), self.kernels.item(i), self.sync_before.item(i), self.sync_after.item(i))
        H, start, end, host_after = issue_one(host_free, ready, ready, dur, op, self.sync_s)
        return start, end, host_after, H


@dataclass(frozen=True)
class PassShape:
    """What the host issues per group op, from the cost model (per group arrays ``(G,)``; scalars per run)."""

    stage_layers: np.ndarray  # (pp,) layers per pipeline stage
    vp: int
    tp: int
    kernels_fwd: np.ndarray  # kernels per layer, forward, per group
    kernels_bwd: np.ndarray
    collectives_fwd: np.ndarray  # NCCL calls per layer, per group
    collectives_bwd: np.ndarray
    recompute: str = "none"
    n_seqs: np.ndarray | None = None  # documents per group's microbatch (THD when > 1)
    first_step: np.ndarray | None = None  # groups of the plan's first step (Dynamic-CP exchange)
    kernels_base: tuple[float, float] = (12.0, 20.0)  # a base layer's kernels (no TP, CP, FP8): priced by layer_*_s
    dp_cp: int = 1  # data-parallel x context-parallel ranks (a group's DP group is dp_cp / its CP size)
    cps: np.ndarray | None = None  # CP size per group (None: 1)
    kernels_head: tuple[float, float] = (9.0, 8.0)
    kernels_embed: tuple[float, float] = (1.0, 2.0)


def layer_pass_host(shape: PassShape, host: HostCosts, flags: StepFlags):
    """Host seconds and kernels of one layer's forward and backward pass per group, ``(G,)`` arrays:
    ``(forward host, backward host, forward kernels, backward kernels)`` (recomputation in the backward)."""
    kf, kb = np.asarray(shape.kernels_fwd, float), np.asarray(shape.kernels_bwd, float)
    cf, cb = np.asarray(shape.collectives_fwd, float), np.asarray(shape.collectives_bwd, float)
    if flags.cuda_graphs not in CUDA_GRAPH_IMPLS:
        from dcpsim.errors import ConfigError

        raise ConfigError("step.cuda_graphs", flags.cuda_graphs, f"one of {CUDA_GRAPH_IMPLS}")
    graphs = flags.cuda_graphs != "none"
    if not flags.grad_accumulation_fusion:  # a separate add per GEMM weight gradient
        kb = kb + 4.0
    if graphs:  # one call and one replay per captured layer pass; its kernels (collectives too) cost the replay
        f_host = host.module_call_s + host.graph_replay_s + kf * host.graph_kernel_s
        b_host = host.module_call_s + host.graph_replay_s + kb * host.graph_kernel_s
    elif host.layer_fwd_s > 0 or host.layer_bwd_s > 0:
        # the base layer's pass as measured (a whole block's host time), the kernels beyond it one by one
        base_f, base_b = shape.kernels_base
        f_host = (host.layer_fwd_s + np.maximum(kf - cf - base_f, 0.0) * host.kernel_fwd_s
                  + cf * host.collective_call_s)
        b_host = (host.layer_bwd_s + np.maximum(kb - cb - base_b, 0.0) * host.kernel_bwd_s
                  + cb * host.collective_call_s)
    else:  # a [host] table without layer costs: every kernel at the per-kernel cost
        f_host = (kf - cf) * host.kernel_fwd_s + cf * host.collective_call_s
        b_host = (kb - cb) * host.kernel_bwd_s + cb * host.collective_call_s
    f_k, b_k = kf, kb
    if flags.deterministic:
        f_host, b_host, f_k, b_k = _fill_host(f_host, b_host, f_k, b_k, host, flags, graphs)
    if flags.test_mode_qk_checks and not graphs:
        # run_realtime_tests (megatron/core/transformer/attention.py at d98e8a64), every attention forward: the q/k
        # norm parameters stacked, all-gathered over the DP group and over the TP group, and each rank's copy
        # compared on the host (eq + all kernels, then bool(): a sync) for its 4 tensors. Priced: the calls, the
        # launches and one sync wake-up per comparison (the collectives' own latency and waits for peers are not).
        cps = np.ones(kf.shape) if shape.cps is None else np.asarray(shape.cps, dtype=np.float64)
        ranks = np.maximum(float(shape.dp_cp) / cps, 1.0) + float(shape.tp)
        f_host = (f_host + host.kernel_launch_s + 2 * host.collective_call_s
                  + 4 * ranks * (2 * host.kernel_launch_s + host.sync_s))
        f_k = f_k + 1 + 8 * ranks
    if shape.recompute == "full":
        b_host, b_k = b_host + f_host + (0.0 if graphs else checkpoint_host_s(host)), b_k + f_k
    elif shape.recompute == "selective" and not graphs:
        b_host = b_host + host.kernel_fwd_s
    return f_host, b_host, f_k, b_k


def _fill_host(f_host, b_host, f_k, b_k, host: HostCosts, flags: StepFlags, graphs: bool):
    """A layer pass's host seconds and kernels with ``--deterministic-mode``'s fill kernels added
    (:mod:`dcpsim.cost.determinism`: ``fills_per_layer`` launches at ``kernel_launch_s`` each; inside a CUDA graph
    the fills are captured kernels, at ``graph_kernel_s``)."""
    n_f, n_b = determinism.fills_per_layer(flags.transformer_impl)
    each = host.graph_kernel_s if graphs else host.kernel_launch_s
    return (f_host + determinism.fill_host_s(n_f, each), b_host + determinism.fill_host_s(n_b, each),
            f_k + n_f, b_k + n_b)


def _pass_rows(hs: np.ndarray, ks: np.ndarray, n_layers: np.ndarray, layer: tuple, p2p: tuple, step: tuple,
               mb: float) -> None:
    """:func:`host_ops`'s per row ``s`` host seconds and kernels of its ``n_layers[s]`` layers' pass, pipeline
    exchange, step entry and share of the microbatch Python, in place (``layer``: one layer's forward and
    backward host seconds and kernels; ``p2p``, ``step``: forward and backward seconds); rows of equal layer
    counts get the first one's rows (the same operations on the same values)."""
    (f_host, b_host, f_k, b_k), row_of = layer, {}
    for s in range(hs.shape[0]):
        n = n_layers[s]
        if row_of.setdefault(n, s) != s:
            hs[s], ks[s] = hs[row_of[n]], ks[row_of[n]]
            continue
        hs[s, 0] = n * f_host + p2p[0] + step[0] + mb
        hs[s, 1] = n * b_host + p2p[1] + step[1] + mb
        ks[s, 0] = np.maximum(n * f_k, 1.0)
        ks[s, 1] = np.maximum(n * b_k, 1.0)


def _stage_key(s: int, layers: np.ndarray, V: int) -> tuple:
    """What :func:`host_ops` reads of virtual stage ``s`` of ``V``: its layers, whether first, last, in chunk 0."""
    return layers[s % layers.size], s == 0, s == V - 1, s < layers.size


def host_ops(shape: PassShape, host: HostCosts, flags: StepFlags, shared: bool = False) -> HostOps:
    """The host cost and syncs of every group op of an iteration (pure: what is issued, not when).

    Per virtual stage ``s`` (chunk ``c`` of rank ``p``, ``stage_layers[p]/vp`` layers): the layers'
    calls (:func:`layer_calls`; full recomputation repeats the forward's calls in the backward, selective
    the attention call), the pipeline send/receive calls with their buffers and waits (``P2P_*``), the
    ``forward_step``/``backward_step`` entry (``FORWARD_STEP_CALLS``, ``BACKWARD_STEP_CALLS``: once per chunk
    op, so ``vp`` times per microbatch with the interleaved schedule), half of the per-microbatch Python each
    way (spread over the rank's vp chunks: it is paid once per microbatch), the embedding on virtual stage 0
    and output layer + loss on the last. Syncs: a pipeline receive with
    ``pp > 1`` and ``vp = 1`` (Megatron's batched p2p with ``batch_p2p_sync``) before every op with a
    pipeline input; the loss NaN/Inf check after the last stage's forward (``check_nan``); THD metadata
    before every forward (``thd`` and more than one document); the Dynamic-CP exchange before the first
    step's forwards. Computed once per distinct stage (layers, first, last, first chunk): ``shared`` keeps those
    rows (:attr:`HostOps.stage_row`), else each stage gets a copy of its row (:meth:`HostOps.full`).
    """
    layers = np.asarray(shape.stage_layers, dtype=np.float64)
    pp, vp = layers.size, int(shape.vp)
    V, G = pp * vp, int(np.asarray(shape.kernels_fwd).size)
    keys = [_stage_key(s, layers, V) for s in range(V)]
    reps = sorted({keys.index(k) for k in keys})  # each distinct stage's first stage: one row each
    hs, ks = np.empty((len(reps), 2, G)), np.empty((len(reps), 2, G))  # every row set by _pass_rows
    sb, sa = np.zeros((len(reps), 2, G), dtype=bool), np.zeros((len(reps), 2, G), dtype=bool)
    f_host, b_host, f_k, b_k = layer_pass_host(shape, host, flags)
    p2p = 2.0 * host.collective_call_s if pp > 1 else 0.0
    p2p_f = p2p + ((P2P_CALLS_FWD * host.module_call_s + P2P_WAITS * host.kernel_launch_s) if pp > 1 else 0.0)
    p2p_b = p2p + ((P2P_CALLS_BWD * host.module_call_s + P2P_WAITS * host.kernel_launch_s) if pp > 1 else 0.0)
    # forward_step / backward_step entry per chunk op (FORWARD_STEP_CALLS above): vp times per microbatch
    # when interleaved, unlike ``microbatch_s``
    step_f = FORWARD_STEP_CALLS * host.module_call_s + FORWARD_STEP_KERNELS * host.kernel_launch_s
    step_b = BACKWARD_STEP_CALLS * host.module_call_s
    # the per-microbatch Python (loss.backward() entry, embedding and output Python: measured per microbatch of
    # the whole model) is paid once per microbatch per rank, half each way, spread over the rank's vp chunks
    mb = 0.5 * host.microbatch_s / vp
    if flags.deterministic:  # the chunk's and the pipeline buffers' filled allocations (cost/determinism.py)
        step_f += determinism.FILLS_CHUNK_FWD * host.kernel_launch_s
        if pp > 1:
            p2p_f += determinism.FILLS_P2P[0] * host.kernel_launch_s
            p2p_b += determinism.FILLS_P2P[1] * host.kernel_launch_s
    _pass_rows(hs, ks, (layers / vp)[[s % pp for s in reps]], (f_host, b_host, f_k, b_k), (p2p_f, p2p_b),
               (step_f, step_b), mb)
    for r, s in enumerate(reps):
        if (s == 0 or s == V - 1) and not (flags.packed or flags.thd):  # is_first_or_last_pipeline_stage
            cps = np.ones(G) if shape.cps is None else shape.cps
            hs[r, 0] += get_batch_host_s(host, s == 0, s == V - 1, cps, mask=flags.attention_mask_in_dataloader)
        if s == 0:
            hs[r, 0] += shape.kernels_embed[0] * host.kernel_fwd_s
            hs[r, 1] += shape.kernels_embed[1] * host.kernel_bwd_s
            ks[r] += np.asarray(shape.kernels_embed, dtype=np.float64)[:, None]
        if s == V - 1:
            hs[r, 0] += shape.kernels_head[0] * host.kernel_fwd_s
            hs[r, 1] += shape.kernels_head[1] * host.kernel_bwd_s
            ks[r] += np.asarray(shape.kernels_head, dtype=np.float64)[:, None]
            if flags.deterministic:  # the logits' FP32 copy and its gradient, filled (cost/determinism.py)
                hs[r] += determinism.fill_host_s(determinism.FILLS_HEAD, host.kernel_launch_s)[:, None]
                ks[r] += np.asarray(determinism.FILLS_HEAD, dtype=np.float64)[:, None]
            sa[r, 0] = flags.check_nan
        if pp > 1 and (vp == 1 or not flags.overlap_p2p_comm):
            sb[r, 0] = s > 0
            sb[r, 1] = s < V - 1
    if flags.timing_log_level >= 2:  # per-op timers (forward-compute, backward-compute, recv/send) sync
        sb[:], sa[:] = True, True
    if flags.thd and shape.n_seqs is not None:
        sb[:, 0] |= (np.asarray(shape.n_seqs) > 1)[None, :]
    if flags.dynamic_cp and shape.first_step is not None:
        first, lo = np.asarray(shape.first_step, dtype=bool), np.array([s < pp for s in reps])
        sb[lo, 0] |= first[None, :]
        # lengths all-gathered, read on the host, the plan broadcast (data_schedule_utils.py): two calls
        hs[lo, 0] += np.where(first, 2 * (host.collective_call_s + host.module_call_s), 0.0)[None, :]
    ops = HostOps(hs, ks, sb, sa, float(host.sync_s), tuple(reps.index(keys.index(k)) for k in keys))
    return ops if shared else ops.full()
