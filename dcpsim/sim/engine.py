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

    ``start``/``finish`` are ``(PP·vp, 2, G)`` arrays (virtual stage, direction, group); virtual stage
    ``s = c·PP + p`` is chunk ``c`` of pipeline stage ``p`` (so ``[:PP]`` are the stages themselves
    without interleaving, and each stage's first chunk with it). Per stage: ``bwd_end_s`` (all ranks'
    last backward done), ``last_bwd_start_s``, ``reduce_scatter_end_s``, ``stage_end_s`` (after
    optimizer and all-gather).
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


def sync_ends(bwd_end: np.ndarray, last_bstart: np.ndarray, sync: SyncCost,
              overlap_grad_sync: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reduce-scatter end, optimizer end, stage end) per stage from its backward end and last backward start."""
    rs = sync.reduce_scatter_s
    rs_end = np.maximum(bwd_end, last_bstart + rs) if overlap_grad_sync else bwd_end + rs
    opt_end = rs_end + sync.optimizer_s
    return rs_end, opt_end, opt_end + sync.all_gather_s


class _Run:
    """State of one SimPy iteration (callbacks on plain lists; see the module docstring)."""

    def __init__(self, work: IterationWork, graph: Graph, sync: SyncCost, overlap_grad_sync: bool) -> None:
        f, b, _ = work.virtual()
        V, G = f.shape
        dur = np.empty((V, 2, G))
        dur[:, FWD, :] = f
        dur[:, BWD, :] = b
        self.shape = (V, 2, G)
        self.dur = dur.reshape(-1).tolist()
        self.indptr = graph.indptr.tolist()
        self.dst = graph.dst.tolist()
        self.delay = graph.delay_s.tolist()
        self.count = graph.indegree.tolist()
        n = graph.n_nodes
        self.start = [math.nan] * n
        self.finish = [math.nan] * n
        pp = len(graph.last_ops)
        self.pp = pp
        self.stage_left = [len(x) for x in graph.last_ops]
        is_last = np.full(n, -1, dtype=np.int64)
        for p, nodes in enumerate(graph.last_ops):
            is_last[nodes] = p
        self.is_last = is_last.tolist()
        self.last_bstart = [0.0] * pp
        self.bwd_end = [0.0] * pp
        self.rs = sync.reduce_scatter_s.tolist()
        self.tail = (sync.optimizer_s + sync.all_gather_s).tolist()
        self.overlap = overlap_grad_sync
        self.stage_end = [0.0] * pp
        self.stages_left = pp
        self.end_time = math.nan
        self.events = 0
        self.env = simpy.Environment()
        self.timeout = self.env.timeout

    def launch(self, n: int) -> None:
        self.start[n] = self.env.now
        ev = self.timeout(self.dur[n], n)
        ev.callbacks.append(self.on_done)

    def on_arrive(self, ev) -> None:
        self.events += 1
        d = ev.value
        self.count[d] -= 1
        if self.count[d] == 0:
            self.launch(d)

    def on_stage_done(self, ev) -> None:
        self.events += 1
        self.stage_end[ev.value] = self.env.now
        self.stages_left -= 1
        if self.stages_left == 0:
            self.end_time = self.env.now

    def on_done(self, ev) -> None:
        self.events += 1
        n = ev.value
        now = self.env.now
        self.finish[n] = now
        count, dst, delay = self.count, self.dst, self.delay
        for e in range(self.indptr[n], self.indptr[n + 1]):
            d = dst[e]
            x = delay[e]
            if x > 0.0:
                t = self.timeout(x, d)
                t.callbacks.append(self.on_arrive)
            else:
                count[d] -= 1
                if count[d] == 0:
                    self.launch(d)
        p = self.is_last[n]
        if p >= 0:
            self.on_rank_end(p, n, now)

    def on_rank_end(self, p: int, n: int, now: float) -> None:
        if self.start[n] > self.last_bstart[p]:
            self.last_bstart[p] = self.start[n]
        self.stage_left[p] -= 1
        if self.stage_left[p] == 0:  # the stage's N-way barrier: a counter, one event
            self.bwd_end[p] = now
            rs = self.rs[p]
            r_end = max(now, self.last_bstart[p] + rs) if self.overlap else now + rs
            t = self.timeout(r_end + self.tail[p] - now, p)
            t.callbacks.append(self.on_stage_done)


def run_iteration(work: IterationWork, graph: Graph, sync: SyncCost, *, overlap_grad_sync: bool = True) -> IterationTimeline:
    """Simulate one iteration in a fresh SimPy environment."""
    run = _Run(work, graph, sync, overlap_grad_sync)
    for n in np.nonzero(graph.indegree == 0)[0].tolist():
        run.launch(n)
    run.env.run()
    fin = np.asarray(run.finish).reshape(run.shape)
    if np.isnan(fin).any() or math.isnan(run.end_time):
        stuck = int(np.isnan(fin).sum())
        raise SimulationError(f"{stuck} of {graph.n_nodes} group ops never ran (dependency cycle in the plan's schedule)")
    bwd_end = np.asarray(run.bwd_end)
    last_bstart = np.asarray(run.last_bstart)
    rs_end, opt_end, _ = sync_ends(bwd_end, last_bstart, sync, overlap_grad_sync)
    return IterationTimeline(
        start=np.asarray(run.start).reshape(run.shape),
        finish=fin,
        bwd_end_s=bwd_end,
        last_bwd_start_s=last_bstart,
        reduce_scatter_end_s=rs_end,
        optimizer_end_s=opt_end,
        stage_end_s=np.asarray(run.stage_end),
        makespan_s=float(run.end_time),
        events=int(run.events),
    )
