"""Closed-form times of a pipeline stage's data-parallel synchronisation (seconds).

The bucketed gradient reduce-scatter after the stage's last backward, the optimizer step and the parameter
all-gather (Megatron's rules are described in :mod:`dcpsim.sim.engine`'s docstring). One set of formulas for
the event engine (:mod:`dcpsim.sim.engine`), the fast path (:mod:`dcpsim.sim.fastpath`) and the planner's
screen (:mod:`dcpsim.planning.screen`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.choices import PARAM_GATHER_LAUNCHES
from dcpsim.errors import ConfigError
from dcpsim.sim.durations import SyncCost


def grad_sync_end_s(b0: float, b1: float, total_s: float, bucket_s: float, buckets: int, overlap: bool) -> float:
    """End of the bucketed gradient reduce-scatter of a stage whose last backward runs over ``[b0, b1]``."""
    if not overlap:
        return b1 + total_s
    return max(b1 + bucket_s, b0 + (b1 - b0) / buckets + buckets * bucket_s)


def param_gather_stall_s(total_s: float, bucket_s: float, buckets: int, first_fwd_s: float, overlap: bool) -> float:
    """Time the next iteration's first forward waits for the bucketed parameter all-gather (before pipeline fill)."""
    if not overlap:
        return total_s
    return max(bucket_s, buckets * bucket_s - first_fwd_s * (buckets - 1) / buckets)


def gathers_at_first_forward(overlap_param_gather: bool, vp: int) -> bool:
    """Whether the parameter all-gather runs at the stages' first forwards (Megatron's rule for ``vp = 1``
    with --overlap-param-gather, see the module docstring) rather than in the stage's tail."""
    return bool(overlap_param_gather) and vp == 1


def param_gather_launch_s(rule: str) -> float | None:
    """When a stage's first all-gather bucket is dispatched under ``sim.param_gather_launch`` (vp = 1,
    overlap): ``None`` for ``"first_forward"`` (by the stage's first forward pre-hook, Megatron-Core
    r0.9.0 on), ``0.0`` (the iteration's start) for ``"step_start"`` (Megatron-Core v0.6.0 .. r0.8.0's
    ``DistributedOptimizer.zero_grad``)."""
    if rule == "first_forward":
        return None
    if rule == "step_start":
        return 0.0
    raise ConfigError("sim.param_gather_launch", rule, f"one of {PARAM_GATHER_LAUNCHES}")


def param_gather_ends(ready: np.ndarray, fwd: np.ndarray, bucket_s: float, buckets: int,
                      launch_s: float | None = None) -> np.ndarray:
    """Ends of a stage's first forward ops under the bucketed parameter all-gather (Megatron, ``vp = 1``).

    ``ready``: when each op's inputs are there (its ranks free, its pipeline input arrived); ``fwd``: its
    duration; ``bucket_s``: one bucket's all-gather. Bucket 0 starts at ``launch_s`` (``step_start``: the
    iteration's start, :func:`param_gather_launch_s`) or, when ``None``, at ``J = max(ready)`` (each rank
    dispatches it from its first forward's pre-hook; the collective runs when the last has). Op ``i``'s
    segment 0 starts at ``max(ready_i, bucket 0's end)``; segment ``k`` (``fwd/B`` of the op) starts when
    bucket ``k`` has arrived and segment ``k − 1`` is done; bucket ``k + 1`` starts when the last rank
    starts segment ``k``. For equal ops at the first forward: ``J + t + (B − 1)·max(t, F/B) + F/B``; at
    the step's start with one bucket: ``max(ready, launch + t) + F``.
    """
    seg = fwd / buckets
    t0 = float(ready.max()) if launch_s is None else float(launch_s)
    f = np.maximum(ready, t0 + bucket_s)
    for _ in range(1, buckets):
        f = np.maximum(f.max() + bucket_s, f + seg)
    return f + seg


def sync_buckets(sync: SyncCost) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buckets, reduce-scatter per bucket, all-gather per bucket) per stage; one bucket when not given."""
    pp = sync.reduce_scatter_s.size
    nb = sync.buckets if sync.buckets is not None else np.ones(pp)
    rs_b = sync.reduce_scatter_bucket_s if sync.reduce_scatter_bucket_s is not None else sync.reduce_scatter_s
    ag_b = sync.all_gather_bucket_s if sync.all_gather_bucket_s is not None else sync.all_gather_s
    return nb.astype(int), rs_b, ag_b


def sync_ends(bwd_end: np.ndarray, last_bstart: np.ndarray, sync: SyncCost,
              overlap_grad_sync: bool) -> tuple[np.ndarray, np.ndarray]:
    """(reduce-scatter end, optimizer end) per stage from its backward end and last backward start."""
    nb, rs_b, _ = sync_buckets(sync)
    rs_end = np.array([grad_sync_end_s(float(last_bstart[p]), float(bwd_end[p]), float(sync.reduce_scatter_s[p]),
                                       float(rs_b[p]), int(nb[p]), overlap_grad_sync) for p in range(nb.size)])
    return rs_end, rs_end + sync.optimizer_s



@dataclass(frozen=True)
class SyncRule:
    """How a stage's synchronisation overlaps: ``overlap_grad_sync`` (Megatron --overlap-grad-reduce),
    ``overlap_param_gather`` (--overlap-param-gather), ``at_first_forward`` (the all-gather runs at the stage's
    first forwards, :func:`gathers_at_first_forward`, instead of in the stage's tail)."""

    overlap_grad_sync: bool = True
    overlap_param_gather: bool = False
    at_first_forward: bool = False


def stage_end_s(p: int, last_bstart: float, bwd_end: float, first_fwd_start: float, first_fwd_s: float,
                sync: SyncCost, rule: SyncRule) -> float:
    """End of stage ``p`` (seconds): its bucketed reduce-scatter after the last backward (which started at
    ``last_bstart`` and ended at ``bwd_end``), the optimizer step, and the parameter all-gather stall (less
    the time the stage's first forward of this iteration, starting at ``first_fwd_start``, waited for its
    pipeline input anyway). The one formula of the event simulation and the fast path; ``rule``: the
    overlap flags (:class:`SyncRule`)."""
    nb, rs_b, _ = sync_buckets(sync)
    r_end = grad_sync_end_s(last_bstart, bwd_end, float(sync.reduce_scatter_s[p]), float(rs_b[p]), int(nb[p]),
                            rule.overlap_grad_sync)
    return after_reduce_scatter_s(p, r_end, first_fwd_start, first_fwd_s, sync, rule.overlap_param_gather,
                                  rule.at_first_forward)


def after_reduce_scatter_s(p: int, r_end: float, first_fwd_start: float, first_fwd_s: float, sync: SyncCost,
                           overlap_param_gather: bool, at_first_forward: bool = False) -> float:
    """End of stage ``p`` given its reduce-scatter end ``r_end``: optimizer step, then the parameter
    all-gather stall (see :func:`stage_end_s`; none when it runs at the first forwards)."""
    if at_first_forward:
        return r_end + float(sync.optimizer_s[p])
    nb, _, ag_b = sync_buckets(sync)
    stall = param_gather_stall_s(float(sync.all_gather_s[p]), float(ag_b[p]), int(nb[p]), first_fwd_s,
                                 overlap_param_gather)
    if overlap_param_gather:  # the stage waits for its first pipeline input anyway
        stall = max(0.0, stall - first_fwd_start)
    return r_end + float(sync.optimizer_s[p]) + stall

