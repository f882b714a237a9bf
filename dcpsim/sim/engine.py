"""The discrete-event core: SimPy orders group ops, gradient syncs and the iteration end.

The engine simulates at decision points only. Durations come precomputed
from numpy (:mod:`dcpsim.sim.durations`); the dependency graph from
:mod:`dcpsim.sim.graph`. Events:

* a group op finishes (one SimPy timeout per node);
* a pipeline transfer arrives (one timeout per edge with a non-zero delay);
* a stage finishes its last backward: a counter per stage (no ``AllOf`` over
  thousands of events) fires the stage's gradient synchronisation, one
  timeout; a counter over stages ends the iteration.

A node starts at the moment its last incoming edge fires, so every group
starts only when all its member ranks are free and its pipeline input has
arrived. Simultaneous events are processed in scheduling order (SimPy's
insertion counter), so one input gives one timeline.

Gradient sync of stage ``p`` (distributed optimizer, ``B`` buckets of
``t_b`` each, :class:`~dcpsim.sim.durations.SyncCost`). With
``overlap_grad_sync`` (Megatron --overlap-grad-reduce) the buckets become
ready evenly during the stage's last backward op ``[b0, b1]`` and their
reduce-scatters run one after another as they become ready, so the last
ends at ``max(b1 + t_b, b0 + (b1 − b0)/B + B·t_b)``: exactly one bucket is
exposed when compute outlasts the communication; without overlap all of it
starts at ``b1``. The optimizer step follows.

Parameter all-gather (distributed optimizer, ``B`` buckets of ``t`` on stage
0, one bucket elsewhere: Megatron turns bucketing off on every pipeline stage
but the first). Without ``overlap_param_gather`` it runs exposed after the
optimizer step (Megatron ``DistributedOptimizer.step_with_ready_grads``
all-gathers synchronously). With it (Megatron --overlap-param-gather) the
rule depends on the schedule, as in Megatron-Core
(``megatron/core/distributed/distributed_data_parallel.py``,
``param_and_grad_buffer.py``):

* ``vp = 1`` (1F1B; Megatron forces ``align_param_gather`` off): nothing is
  launched at the optimizer step; the forward pre-hook of the first module of
  a rank's first forward finds bucket 0 not yet dispatched, dispatches it and
  waits for it; the pre-hook of the first module of bucket ``k``'s parameters
  waits for bucket ``k`` and then dispatches bucket ``k + 1``
  (``finish_param_sync``). So on every stage the all-gather starts only when
  the stage's first forward starts, after its pipeline input has arrived (on
  stages > 0 it is exposed in the pipeline fill, on every stage), and bucket
  ``k + 1`` moves while the forward computes with bucket ``k``. The engine
  holds the first forward ops of the plan's first step on each stage (a
  :class:`_Gate`); as a collective a bucket starts when the last rank has
  dispatched it; the ops' ends come from :func:`param_gather_ends` (ideal
  bucket times, closed form) or from the buckets' flows (shared network).
  This iteration's ops wait for the all-gather of the previous optimizer step
  (the steady state: one all-gather per iteration); the stage's tail is its
  reduce-scatter and optimizer step.
  ``sim.param_gather_launch = "step_start"`` (Megatron-Core core_v0.6.0 ..
  core_r0.8.0: ``DistributedOptimizer.zero_grad`` dispatches bucket 0 at the
  start of the training step on every stage): bucket 0 starts at the
  iteration's start, op ``i`` starts computing at ``max(ready_i, its end)``,
  the rest of the chain as above; a stage > 0 (one bucket) then hides its
  all-gather behind its wait for the first pipeline input.
* ``vp > 1`` (interleaved; ``align_param_gather`` on by default): every
  stage launches the all-gathers of its first model chunks at the start of
  the schedule, all buckets at once (``skip_next_bucket_dispatch``); with all
  chunks' parameters taken together, bucket ``i`` is needed after ``i/B`` of
  the stage's first forward op ``F``, so the stall is ``max(t, B·t −
  F·(B−1)/B)``, less the time the stage waits for its first pipeline input
  anyway (its first forward's start in this iteration), added to the stage's
  tail. Not run as flows on the shared network (it keeps this formula).

The iteration ends when every stage is done (the next one starts in step on
all ranks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import simpy

from dcpsim.errors import DcpsimError
from dcpsim.sim.durations import IterationWork, SyncCost
from dcpsim.sim.gate import _Arrival, _gates, _zero_delay_into
from dcpsim.sim.graph import BWD, FWD, Graph
from dcpsim.sim.stage_sync import (
    SyncRule,
    after_reduce_scatter_s,
    gathers_at_first_forward,
    grad_sync_end_s,
    param_gather_ends,
    param_gather_launch_s,
    param_gather_stall_s,
    stage_end_s,
    sync_buckets,
    sync_ends,
)

# the stage-sync formulas (dcpsim.sim.stage_sync) stay importable from here
__all__ = [
    "IterationTimeline", "SimulationError", "after_reduce_scatter_s", "gathers_at_first_forward", "grad_sync_end_s",
    "param_gather_ends", "param_gather_launch_s", "param_gather_stall_s", "run_iteration", "stage_end_s",
    "sync_buckets", "sync_ends", "SyncRule",
]


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
    param_gather_s: np.ndarray | None = None  # per stage, the exposed all-gather wait of its first forwards
    # with a host model (dcpsim.cost.host): when each op's issue began and when its host was free again,
    # ``(PP·vp, 2, G)`` like ``start``/``finish``
    host_start: np.ndarray | None = None
    host_end: np.ndarray | None = None


def _per_node(fwd: np.ndarray, bwd: np.ndarray, vp: int, shape: tuple[int, int, int]) -> list[float]:
    """Per-stage ``(PP, G)`` forward and backward values as a flat per-node list (each of ``vp`` chunks gets ``1/vp``)."""
    out = np.zeros(shape)
    out[:, FWD, :] = np.tile(fwd / vp, (vp, 1))
    out[:, BWD, :] = np.tile(bwd / vp, (vp, 1))
    return out.reshape(-1).tolist()


class _Run:
    """State of one SimPy iteration (callbacks on plain lists; see the module docstring)."""

    def __init__(self, work: IterationWork, graph: Graph, sync: SyncCost, overlap_grad_sync: bool,
                 overlap_param_gather: bool = False, network=None, param_gather_launch: str = "first_forward") -> None:
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
        self.sync = sync
        self.overlap = overlap_grad_sync
        self.overlap_pg = overlap_param_gather
        self.G = G
        self.first_fwd = [float(f[p, 0]) if G else 0.0 for p in range(pp)]  # chunk 0 of stage p is virtual stage p
        self.stage_end = [0.0] * pp
        self.stages_left = pp
        self.end_time = math.nan
        self.events = 0
        self.env = simpy.Environment()
        self.timeout = self.env.timeout
        self.cb_done = self.on_done  # bound once (callbacks are appended per event)
        self.cb_arrive = self.on_arrive
        # a network whose transfers are flows (shared): dcpsim.sim.network.PipelineTransfers; None: ideal
        self.transfers = None if network is None else network.flows(self.env, work, G)
        # shared network: stages whose gradient reduce-scatter leaves NVLink run it as flows
        self.rs_flows: list = [None] * pp
        if self.transfers is not None and sync.reduce_scatter_bucket_alone_s is not None:
            nb, _, _ = sync_buckets(sync)
            self.rs_flows = [self.transfers.reduce_scatter(p, float(sync.reduce_scatter_bucket_alone_s[p]), int(nb[p]))
                             for p in range(pp)]
        self.cp_work = [0.0] * len(self.dur)
        self.cp_window = self.cp_work
        self.cp_pre: tuple[list[float], list[float]] | None = None
        if self.transfers is not None and work.cp_fwd_ring_s is not None:
            self.cp_work = _per_node(work.cp_fwd_ring_s, work.cp_bwd_ring_s, work.vp, (V, 2, G))
            self.cp_window = _per_node(work.cp_fwd_window_s, work.cp_bwd_window_s, work.vp, (V, 2, G))
            if work.cp_recompute_ring:  # the backward repeats the forward ring first
                zero = np.zeros_like(work.cp_fwd_ring_s)
                self.cp_pre = (_per_node(zero, work.cp_fwd_ring_s, work.vp, (V, 2, G)),
                               _per_node(zero, work.cp_fwd_window_s, work.vp, (V, 2, G)))
        # Megatron's parameter all-gather at each stage's first forwards (vp = 1 with overlap_param_gather)
        launch_s = param_gather_launch_s(param_gather_launch)
        self.gather_stall = [0.0] * pp
        self.gates = (_gates(self, work, sync, launch_s) if gathers_at_first_forward(overlap_param_gather, work.vp)
                      else [])
        self.gate_of = [-1] * n
        for g in self.gates:
            for node in g.nodes:
                self.gate_of[node] = g.p
        self.ag_flows: list = [None] * pp  # shared network, no overlap: the exposed all-gather as flows
        if self.transfers is not None and not overlap_param_gather and sync.all_gather_bucket_alone_s is not None:
            self.ag_flows = [self.transfers.all_gather(p, float(sync.all_gather_bucket_alone_s[p])) for p in range(pp)]
        # ops that need more than a timeout go through begin(); a gated first forward is caught where its
        # pipeline input arrives (on_arrive(), launch()), so the ideal network keeps the lean path unless an
        # input of one arrives without a transfer delay
        shared = self.transfers is not None and (any(x is not None for x in self.rs_flows)
                                                 or any(x > 0.0 for x in self.cp_work))
        self.watch = shared or (bool(self.gates) and _zero_delay_into(graph, self.gates))
        # the host timeline (dcpsim.cost.host): each rank's host clock, groups' rank ranges
        self.host = getattr(work, "host", None)
        if self.host is not None:
            self.host = self.host.full()  # run_one reads every stage's arrays by the node number
            self.hfree = [[0.0] * int(work.table.ranks) for _ in range(pp)]  # per stage, per rank (Python floats)
            self.host_one = self.host.run_one
            self.g_start = work.table.start.tolist()
            self.g_end = (work.table.start + work.table.size).tolist()
            self.h_start = [math.nan] * graph.n_nodes
            self.h_end = [math.nan] * graph.n_nodes
        if not self.watch and self.transfers is None and self.host is None:  # the ideal network: lean closures
            self.cb_done, self.cb_arrive = self._lean_callbacks()
        self.last_started = [0] * pp
        self.last_total = list(self.stage_left)
        self.last_end_max = [0.0] * pp
        self.rs_end = [math.nan] * pp

    def launch(self, n: int) -> None:
        """Node ``n``'s inputs are all there: it starts now, or, with the host timeline, when its host has
        issued it (:meth:`host_issue`)."""
        if self.host is not None:
            t = self.host_issue(n)
            if t > self.env.now:
                self.timeout(t - self.env.now, n).callbacks.append(self._issued)
                return
        self._launch(n)

    def _issued(self, ev) -> None:
        self._launch(ev.value)

    def host_issue(self, n: int) -> float:
        """The host rule (:meth:`dcpsim.cost.host.HostOps.run`) for node ``n`` ready now: updates its ranks'
        host clocks and its duration (device start to end); returns its device start."""
        G = self.G
        g = n % G
        p = (n // (2 * G)) % self.pp  # node n = (s * 2 + d) * G + g, virtual stage s of stage s % pp
        lo, hi = self.g_start[g], self.g_end[g]
        hfree = self.hfree[p]
        # one op on Python floats (HostOps.run_one: HostOps.run's operations, the same float64 results); the
        # HostOps arrays' C order (V, 2, G) numbers ops as the graph numbers nodes
        st, fin, h_after, h_st = self.host_one(n, max(hfree[lo:hi]), float(self.env.now), float(self.dur[n]))
        hfree[lo:hi] = [h_after] * (hi - lo)
        self.h_start[n], self.h_end[n] = h_st, h_after
        self.dur[n] = fin - st
        return st

    def _launch(self, n: int) -> None:
        self.start[n] = self.env.now
        if self.watch:
            self.begin(n)
        elif self.gate_of[n] >= 0:
            self.gates[self.gate_of[n]].arrive(n)
        else:
            self.timeout(self.dur[n], n).callbacks.append(self.cb_done)

    def begin(self, n: int) -> None:
        """Run op ``n`` that has just started (shared network). A CP group that leaves its NVLink domain runs
        its ring (all the op's forward or backward ring steps) as paced flows from the op's start: traffic
        ``W``, window ``R`` (the steps' time alone, each step's transfer hidden behind that step's attention
        when it is shorter), pace ``W/R``. Alone they end at ``start + R`` and the op at its ideal
        ``start + D``; slowed by sharing to end at ``t_f``, the op ends at ``t_f + D − R``: only contention
        beyond the steps' compute slack shows (:class:`~dcpsim.sim.network.PipelineTransfers.ring`).
        A stage's first forward waits for the stage's parameter all-gather (:class:`_Gate`)."""
        p = self.gate_of[n]
        if p >= 0:
            self.gates[p].arrive(n)
            return
        w = self.cp_work[n]
        if w > 0.0:
            self.ring_op(n, w)
        else:
            self.timeout(self.dur[n], n).callbacks.append(self.cb_done)
        self.started(n)

    def ring_op(self, n: int, w: float) -> None:
        """Op ``n`` with a CP ring on the network (see :meth:`begin`); a backward with full recomputation
        first repeats the forward ring: two phases one after the other, ending at ``t_f + D − R₁ − R₂``."""
        t0, d, r = self.env.now, self.dur[n], self.cp_window[n]
        ring = self.transfers.ring
        w0 = r0 = 0.0
        if self.cp_pre is not None:
            w0, r0 = self.cp_pre[0][n], self.cp_pre[1][n]

        def ring_done(t_f: float) -> None:
            fin = max(t0 + d, t_f + d - r - r0)
            self.timeout(max(fin - self.env.now, 0.0), n).callbacks.append(self.cb_done)

        if w0 > 0.0:
            ring(n, w0, min(1.0, w0 / r0), lambda _t: ring(n, w, min(1.0, w / r), ring_done))
        else:
            ring(n, w, min(1.0, w / r), ring_done)

    def started(self, n: int) -> None:
        """Node ``n`` has just started (shared network only): once every last backward of its stage has
        started, their end is known, so the stage's bucket ready times are, and its reduce-scatter flows
        are scheduled (buckets ready evenly over ``[last start, last end]`` with overlap, all at the end
        without)."""
        p = self.is_last[n]
        if p < 0 or self.rs_flows[p] is None:
            return
        now = self.env.now
        self.last_started[p] += 1
        self.last_end_max[p] = max(self.last_end_max[p], now + self.dur[n])
        if self.last_started[p] < self.last_total[p]:
            return
        b0, b1 = now, self.last_end_max[p]
        flows = self.rs_flows[p]
        B = flows.buckets
        ready: list[float | None] = [b0 + (i + 1) * (b1 - b0) / B if self.overlap else None for i in range(B)]
        ready[-1] = None  # the last bucket (without overlap, all) at the actual barrier: a ring may stretch the op
        flows.run(ready, partial(self.on_rs_end, p))

    def on_rs_end(self, p: int, t: float) -> None:
        self.rs_end[p] = t
        self.maybe_tail(p)

    def maybe_tail(self, p: int) -> None:
        """Stage ``p`` (reduce-scatter as flows) ends after its backward barrier and its last bucket."""
        if self.stage_left[p] or self.rs_end[p] != self.rs_end[p]:
            return
        now = self.env.now
        if self.ag_flows[p] is not None:  # exposed all-gather after the optimizer step, bucket after bucket
            self.gather_tail(p, self.rs_end[p] + float(self.sync.optimizer_s[p]), int(sync_buckets(self.sync)[0][p]))
            return
        base = (2 * p + FWD) * self.G
        fill = min((x for x in self.start[base:base + self.G] if x == x), default=0.0)
        end = after_reduce_scatter_s(p, self.rs_end[p], fill, self.first_fwd[p], self.sync, self.overlap_pg,
                                     bool(self.gates))
        self.timeout(max(end - now, 0.0), p).callbacks.append(self.on_stage_done)

    def gather_tail(self, p: int, t: float, left: int) -> None:
        """Shared network, no overlap: stage ``p``'s ``left`` remaining all-gather buckets from ``t`` on, then its end."""
        if left == 0:
            self.timeout(max(t - self.env.now, 0.0), p).callbacks.append(self.on_stage_done)
            return
        self.ag_flows[p].start_at(t, lambda end: self.gather_tail(p, end, left - 1))

    def on_arrive(self, ev) -> None:
        """An input of node ``ev.value`` has arrived (a timed transfer, or a shared-network flow via
        :meth:`arrived`). Not counted here: :func:`run_iteration` counts one event per delayed edge."""
        d = ev.value
        count = self.count
        count[d] -= 1
        if count[d] == 0:
            self.launch(d)

    def on_stage_done(self, ev) -> None:
        self.events += 1
        self.stage_end[ev.value] = self.env.now
        self.stages_left -= 1
        if self.stages_left == 0:
            self.end_time = self.env.now

    def arrived(self, d: int) -> None:
        """A shared-network transfer into node ``d`` has arrived."""
        self.on_arrive(_Arrival(d))

    def _lean_callbacks(self):
        """(op done, input arrived) callbacks for the ideal network: the same steps as :meth:`on_done` and
        :meth:`on_arrive` with every transfer a timeout and no op needing :meth:`begin`, as closures over
        local names (no attribute lookups per event: the events/s target of issue 13)."""
        env, count, dst, delay, start, dur, finish = self.env, self.count, self.dst, self.delay, self.start, self.dur, self.finish
        indptr, is_last, on_rank_end, timeout, gate_of, gates = (self.indptr, self.is_last, self.on_rank_end, self.timeout,
                                                                 self.gate_of, self.gates)

        def on_done(ev) -> None:
            n = ev.value
            now = env.now
            finish[n] = now
            for e in range(indptr[n], indptr[n + 1]):
                d = dst[e]
                x = delay[e]
                if x > 0.0:
                    timeout(x, d).callbacks.append(on_arrive)
                else:
                    count[d] -= 1
                    if count[d] == 0:  # a zero-delay edge never ends at a gated node here (see watch)
                        start[d] = now
                        timeout(dur[d], d).callbacks.append(on_done)
            p = is_last[n]
            if p >= 0:
                on_rank_end(p, n, now)

        def on_arrive(ev) -> None:
            d = ev.value
            count[d] -= 1
            if count[d] == 0:
                start[d] = env.now
                if gate_of[d] >= 0:
                    gates[gate_of[d]].arrive(d)
                else:
                    timeout(dur[d], d).callbacks.append(on_done)

        return on_done, on_arrive

    def on_done(self, ev) -> None:
        n = ev.value  # not counted here: run_iteration counts one event per node
        now = self.env.now
        self.finish[n] = now
        count, dst, delay, timeout, start, dur = self.count, self.dst, self.delay, self.timeout, self.start, self.dur
        for e in range(self.indptr[n], self.indptr[n + 1]):
            d = dst[e]
            x = delay[e]
            if x > 0.0:
                if self.transfers is None:
                    timeout(x, d).callbacks.append(self.cb_arrive)
                else:
                    self.transfers.send(n, d, partial(self.arrived, d))
            else:
                count[d] -= 1
                if count[d] == 0:
                    if self.host is not None:
                        self.launch(d)
                        continue
                    start[d] = now
                    if self.watch:
                        self.begin(d)
                    else:
                        timeout(dur[d], d).callbacks.append(self.cb_done)
        p = self.is_last[n]
        if p >= 0:
            self.on_rank_end(p, n, now)

    def on_rank_end(self, p: int, n: int, now: float) -> None:
        if self.start[n] > self.last_bstart[p]:
            self.last_bstart[p] = self.start[n]
        self.stage_left[p] -= 1
        if self.stage_left[p] == 0:  # the stage's N-way barrier: a counter, one event
            self.bwd_end[p] = now
            if self.rs_flows[p] is not None:
                self.rs_flows[p].release()
                self.maybe_tail(p)
                return
            t = self.timeout(self.stage_tail_s(p, now), p)
            t.callbacks.append(self.on_stage_done)

    def stage_tail_s(self, p: int, now: float) -> float:
        """Time from stage ``p``'s last backward end to its end: exposed reduce-scatter, optimizer, all-gather stall."""
        base = (2 * p + FWD) * self.G
        fill = min((x for x in self.start[base:base + self.G] if x == x), default=0.0)  # skips NaN
        rule = SyncRule(self.overlap, self.overlap_pg, bool(self.gates))
        return stage_end_s(p, self.last_bstart[p], now, fill, self.first_fwd[p], self.sync, rule) - now



def run_iteration(work: IterationWork, graph: Graph, sync: SyncCost, *, overlap_grad_sync: bool = True,
                  overlap_param_gather: bool = False, network=None,
                  param_gather_launch: str = "first_forward") -> IterationTimeline:
    """Simulate one iteration in a fresh SimPy environment.

    ``network``: the :class:`~dcpsim.sim.networks.base.NetworkModel` (``None``: every transfer takes its
    precomputed time); its :meth:`~dcpsim.sim.networks.base.NetworkModel.flows` gives the flows of a model
    whose transfers share links (``shared``: :class:`~dcpsim.sim.network.PipelineTransfers`).
    ``param_gather_launch``: when the overlapped all-gather's first bucket is dispatched (vp = 1;
    :func:`param_gather_launch_s`).
    """
    run = _Run(work, graph, sync, overlap_grad_sync, overlap_param_gather, network, param_gather_launch)
    for n in np.nonzero(graph.indegree == 0)[0].tolist():
        run.launch(n)
    run.env.run()
    fin = np.asarray(run.finish).reshape(run.shape)
    if np.isnan(fin).any() or math.isnan(run.end_time):
        stuck = int(np.isnan(fin).sum())
        raise SimulationError(f"{stuck} of {graph.n_nodes} group ops never ran (dependency cycle in the plan's schedule)")
    bwd_end = np.asarray(run.bwd_end)
    last_bstart = np.asarray(run.last_bstart)
    rs_end, opt_end = sync_ends(bwd_end, last_bstart, sync, overlap_grad_sync)
    flowed = np.array([x is not None for x in run.rs_flows])
    if flowed.any():  # shared network: the reduce-scatters that ran as flows
        rs_end = np.where(flowed, np.asarray(run.rs_end), rs_end)
        opt_end = rs_end + sync.optimizer_s
    return IterationTimeline(
        start=np.asarray(run.start).reshape(run.shape),
        finish=fin,
        bwd_end_s=bwd_end,
        last_bwd_start_s=last_bstart,
        reduce_scatter_end_s=rs_end,
        optimizer_end_s=opt_end,
        stage_end_s=np.asarray(run.stage_end),
        makespan_s=float(run.end_time),
        # op completions (one per node) and arrivals (one per delayed edge) are counted here, not per callback
        events=(int(run.events) + graph.n_nodes + int(np.count_nonzero(graph.delay_s > 0.0))
                + (run.transfers.net.events if run.transfers is not None else 0)),
        param_gather_s=np.asarray(run.gather_stall),
        host_start=np.asarray(run.h_start).reshape(run.shape) if run.host is not None else None,
        host_end=np.asarray(run.h_end).reshape(run.shape) if run.host is not None else None,
    )
