"""The parameter all-gather gate of the event engine: a stage's first forward ops wait for its buckets.

Megatron's rule for ``vp = 1`` with --overlap-param-gather (see :mod:`dcpsim.sim.engine`'s docstring):
:class:`_Gate` holds the first forward ops of the plan's first step on one pipeline stage and ends each
where the bucket chain puts it (ideal bucket times in closed form, or flows on the shared network).
Times in seconds of the simulated clock. ``run`` is the engine's iteration state (:class:`dcpsim.sim.engine._Run`;
typed ``Any`` here so that this module does not import the engine back).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dcpsim.sim.durations import IterationWork, SyncCost
from dcpsim.sim.graph import FWD, Graph
from dcpsim.sim.stage_sync import param_gather_ends, sync_buckets


class _Arrival:
    """The value of a shared-network arrival, shaped like the SimPy event :meth:`_Run.on_arrive` takes."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


class _Gate:
    """The first forward ops of pipeline stage ``p`` waiting for its parameter all-gather (vp = 1, overlap).

    The ops arrive as their inputs do. At the first forward (``launch_s`` ``None``): when the last has
    (``J``), bucket 0 starts. At the step's start (``launch_s`` a time, ``step_start``): bucket 0 starts
    then, and op ``i``'s segment 0 starts at ``max(ready_i, bucket 0's end)`` as soon as both are known
    (with one bucket the op's end is known then too). Then the chain of :func:`param_gather_ends`, its
    bucket times either the ideal ``bucket_s`` (closed form at once) or flows on the shared network
    (``flows``: a :class:`~dcpsim.sim.network.DpRingBucket`), bucket ``k + 1`` starting when the last op
    starts its segment ``k``. Each op ends where the chain puts it. An op with a CP ring on the network
    starts its ring flows with its compute (its segment 0, so they share the NICs with the later buckets)
    and ends no earlier than ``t_f + D − R`` (as any op with a ring, :meth:`_Run.begin`).
    """

    def __init__(self, run: Any, p: int, nodes: list[int], bucket_s: float, buckets: int, flows,
                 launch_s: float | None = None) -> None:
        self.run, self.p, self.nodes = run, p, nodes
        self.bucket_s, self.B, self.flows, self.launch_s = bucket_s, buckets, flows, launch_s
        self.left = len(nodes)
        self.k = 0
        self.f = np.zeros(0)
        self.ends: dict[int, float] = {}
        self.by_ring: dict[int, float] = {n: 0.0 for n in nodes if run.cp_work[n] <= 0.0}
        self.e0: float | None = None  # bucket 0's end once known (step_start)
        self.arrived: list[int] = []
        if launch_s is not None:
            if flows is not None:
                flows.start_at(launch_s, self.first_bucket_done)
            else:
                self.e0 = launch_s + bucket_s

    def arrive(self, n: int) -> None:
        self.left -= 1
        if self.launch_s is not None:
            self.arrived.append(n)
            if self.e0 is not None:
                self.segment0(n)
                if self.left == 0:
                    self.chain()
        elif self.left == 0:
            self.open()

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        run = self.run
        return (np.array([run.start[n] for n in self.nodes]), np.array([run.dur[n] for n in self.nodes]))

    def open(self) -> None:
        """All ops are there (first-forward launch): bucket 0 starts now."""
        ready, dur = self._arrays()
        if self.flows is not None:
            self.flows.start_at(float(ready.max()), self.bucket_done)
            return
        e0 = float(ready.max()) + self.bucket_s
        if len(self.by_ring) < len(self.nodes):
            self.run.timeout(e0 - self.run.env.now).callbacks.append(lambda _ev: self.rings(e0))
        self.finish(param_gather_ends(ready, dur, self.bucket_s, self.B))

    def first_bucket_done(self, e: float) -> None:
        """Bucket 0 launched at the step's start has ended at ``e`` (shared network)."""
        self.e0 = e
        for n in self.arrived:
            self.segment0(n)
        if self.left == 0:
            self.chain()

    def segment0(self, n: int) -> None:
        """Op ``n`` (arrived; bucket 0's end known, step_start) starts computing at ``max(ready, e0)``; with
        one bucket that also gives its end."""
        run = self.run
        t = max(run.start[n], self.e0)
        if n not in self.by_ring:
            run.timeout(t - run.env.now).callbacks.append(lambda _ev, n=n: self.ring(n))
        if self.B == 1:
            end = t + run.dur[n]
            stall = end - run.start[n] - run.dur[n]
            run.gather_stall[self.p] = max(run.gather_stall[self.p], stall) if len(self.ends) else stall
            self.ends[n] = end
            self.done(n)

    def chain(self) -> None:
        """Step_start, every op there and bucket 0 ended: buckets 1 .. B − 1 follow (several buckets)."""
        if self.B == 1:
            return
        ready, dur = self._arrays()
        if self.flows is None:
            self.finish(param_gather_ends(ready, dur, self.bucket_s, self.B, self.launch_s))
            return
        self.f = np.maximum(ready, self.e0)
        self.k = 1
        self.flows.start_at(float(self.f.max()), self.bucket_done)

    def bucket_done(self, e: float) -> None:
        """Bucket ``k``'s flows have all ended at ``e`` (shared network)."""
        seg = self._arrays()[1] / self.B
        if self.k == 0:
            self.f = np.full(seg.shape, e)
            self.rings(e)
        else:
            self.f = np.maximum(e, self.f + seg)
        self.k += 1
        if self.k < self.B:
            self.flows.start_at(float(self.f.max()), self.bucket_done)
        else:
            self.finish(self.f + seg)

    def rings(self, e0: float) -> None:
        """The ops' compute starts (bucket 0 is there): their CP rings on the network start."""
        for n in self.nodes:
            if n not in self.by_ring:
                self.ring(n)

    def ring(self, n: int) -> None:
        """Op ``n``'s compute starts now: its CP ring on the network starts."""
        run = self.run
        w, r = run.cp_work[n], run.cp_window[n]

        def ring_done(t_f: float) -> None:
            self.by_ring[n] = t_f + run.dur[n] - r  # the op's end by its ring (started with its compute)
            self.done(n)

        run.transfers.ring(n, w, min(1.0, w / r), ring_done)

    def finish(self, ends: np.ndarray) -> None:
        ready, dur = self._arrays()
        self.run.gather_stall[self.p] = float((ends - ready - dur).max())
        self.ends = dict(zip(self.nodes, ends.tolist(), strict=True))
        for n in self.nodes:
            self.done(n)

    def done(self, n: int) -> None:
        """Op ``n`` ends once both its place in the chain and its ring's end are known: at the later of the
        two (the ring's and the gather's waits overlap in time; alone the ring ends within the op)."""
        if n in self.ends and n in self.by_ring:
            run = self.run
            run.timeout(max(self.ends[n], self.by_ring[n]) - run.env.now, n).callbacks.append(run.cb_done)


def _zero_delay_into(graph: Graph, gates: list[_Gate]) -> bool:
    """Whether an edge without transfer delay ends at a gated node (it would bypass :meth:`_Run.on_arrive`)."""
    gated = np.zeros(graph.n_nodes, dtype=bool)
    for g in gates:
        gated[g.nodes] = True
    return bool((gated[graph.dst] & (graph.delay_s <= 0.0)).any())


def _gates(run: Any, work: IterationWork, sync: SyncCost, launch_s: float | None) -> list[_Gate]:
    """One :class:`_Gate` per pipeline stage over the groups of the plan's first step (vp = 1); ``launch_s``:
    :func:`param_gather_launch_s`."""
    table, G, pp = work.table, run.G, run.pp
    if G == 0:
        return []
    first = np.nonzero(table.step == table.step.min())[0].tolist()
    nb, _, ag_b = sync_buckets(sync)
    alone = sync.all_gather_bucket_alone_s
    gates = []
    for p in range(pp):
        flows = None
        if run.transfers is not None and alone is not None:
            flows = run.transfers.all_gather(p, float(alone[p]))
        gates.append(_Gate(run, p, [(2 * p + FWD) * G + g for g in first], float(ag_b[p]), int(nb[p]), flows,
                           launch_s))
    return gates


