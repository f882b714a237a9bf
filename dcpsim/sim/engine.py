"""The discrete-event core: SimPy orders group ops, gradient syncs and the iteration end.

The engine simulates at decision points only. Durations come precomputed
from numpy (:mod:`dcpsim.sim.durations`); the dependency graph from
:mod:`dcpsim.sim.schedule`. Events:

* a group op finishes (one SimPy timeout per node);
* a pipeline transfer arrives (one timeout per edge with a non-zero delay);
* a stage finishes its last backward: a counter per stage (no ``AllOf`` over
  thousands of events) fires the stage's gradient synchronisation, one
  timeout; a counter over stages ends the iteration.

A node starts at the moment its last incoming edge fires, so every group
starts only when all its member ranks are free and its pipeline input has
arrived. Simultaneous events are processed in scheduling order (SimPy's
insertion counter), so one input gives one timeline.

Gradient sync of stage ``p`` (distributed optimizer): with
``overlap_grad_sync`` the reduce-scatter runs during the last backward pass
of the stage's ranks, so it ends at ``max(last backward end, last backward
start + t_rs)``; without it, it starts when the last backward ends. The
optimizer step and the parameter all-gather follow, exposed. The iteration
ends when every stage is done (the next one starts in step on all ranks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from dcpsim.errors import DcpsimError
from dcpsim.sim.durations import IterationWork, SyncCost
from dcpsim.sim.schedule import BWD, FWD, Graph


class SimulationError(DcpsimError):
    """The simulated schedule could not complete (a plan or engine bug, e.g. a dependency cycle)."""


@dataclass
class IterationTimeline:
    """Simulated times of one iteration (seconds from the iteration's first op; planning stall excluded).

    ``start``/``finish`` are ``(PP, 2, G)`` arrays (stage, direction, group).
    Per stage: ``bwd_end_s`` (all ranks' last backward done), ``last_bwd_start_s``,
    ``reduce_scatter_end_s``, ``stage_end_s`` (after optimizer and all-gather).
    """

    start: np.ndarray
    finish: np.ndarray
    bwd_end_s: np.ndarray
    last_bwd_start_s: np.ndarray
    reduce_scatter_end_s: np.ndarray
    optimizer_end_s: np.ndarray
    stage_end_s: np.ndarray
    makespan_s: float
    events: int


def run_iteration(work: IterationWork, graph: Graph, sync: SyncCost, *, overlap_grad_sync: bool = True) -> IterationTimeline:  # noqa: C901 - temporary, split by pipeline
    """Simulate one iteration in a fresh SimPy environment."""
    pp = work.fwd_s.shape[0]
    G = work.table.n_groups
    n_nodes = graph.n_nodes
    dur = np.empty((pp, 2, G))
    dur[:, FWD, :] = work.fwd_s
    dur[:, BWD, :] = work.bwd_s
    dur_l = dur.reshape(-1).tolist()
    indptr = graph.indptr.tolist()
    dst = graph.dst.tolist()
    delay = graph.delay_s.tolist()
    count = graph.indegree.tolist()
    start = [math.nan] * n_nodes
    finish = [math.nan] * n_nodes

    stage_left = [len(x) for x in graph.last_ops]
    is_last = np.full(n_nodes, -1, dtype=np.int64)
    for p, nodes in enumerate(graph.last_ops):
        is_last[nodes] = p
    is_last_l = is_last.tolist()
    last_bstart = [0.0] * pp
    bwd_end = [0.0] * pp
    rs_end = [0.0] * pp
    opt_end = [0.0] * pp
    stage_end = [0.0] * pp
    rs = sync.reduce_scatter_s.tolist()
    ag = sync.all_gather_s.tolist()
    opt = sync.optimizer_s.tolist()
    stages_left = [pp]
    end_time = [math.nan]
    n_events = [0]

    env = simpy.Environment()
    timeout = env.timeout

    def launch(n: int) -> None:
        start[n] = env.now
        ev = timeout(dur_l[n], n)
        ev.callbacks.append(on_done)

    def on_arrive(ev) -> None:
        n_events[0] += 1
        d = ev.value
        count[d] -= 1
        if count[d] == 0:
            launch(d)

    def on_stage_done(ev) -> None:
        n_events[0] += 1
        p = ev.value
        stage_end[p] = env.now
        stages_left[0] -= 1
        if stages_left[0] == 0:
            end_time[0] = env.now

    def on_done(ev) -> None:
        n_events[0] += 1
        n = ev.value
        now = env.now
        finish[n] = now
        for e in range(indptr[n], indptr[n + 1]):
            d = dst[e]
            x = delay[e]
            if x > 0.0:
                t = timeout(x, d)
                t.callbacks.append(on_arrive)
            else:
                count[d] -= 1
                if count[d] == 0:
                    launch(d)
        p = is_last_l[n]
        if p >= 0:
            if start[n] > last_bstart[p]:
                last_bstart[p] = start[n]
            stage_left[p] -= 1
            if stage_left[p] == 0:  # the stage's N-way barrier: a counter, one event
                bwd_end[p] = now
                r_end = max(now, last_bstart[p] + rs[p]) if overlap_grad_sync else now + rs[p]
                rs_end[p] = r_end
                opt_end[p] = r_end + opt[p]
                t = timeout(opt_end[p] + ag[p] - now, p)
                t.callbacks.append(on_stage_done)

    for n in np.nonzero(graph.indegree == 0)[0].tolist():
        launch(n)
    env.run()

    fin = np.asarray(finish).reshape(pp, 2, G)
    if np.isnan(fin).any() or math.isnan(end_time[0]):
        stuck = int(np.isnan(fin).sum())
        raise SimulationError(f"{stuck} of {n_nodes} group ops never ran (dependency cycle in the plan's schedule)")
    return IterationTimeline(
        start=np.asarray(start).reshape(pp, 2, G),
        finish=fin,
        bwd_end_s=np.asarray(bwd_end),
        last_bwd_start_s=np.asarray(last_bstart),
        reduce_scatter_end_s=np.asarray(rs_end),
        optimizer_end_s=np.asarray(opt_end),
        stage_end_s=np.asarray(stage_end),
        makespan_s=float(end_time[0]),
        events=int(n_events[0]),
    )
