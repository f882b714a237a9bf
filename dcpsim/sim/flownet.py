"""The flow network of the shared network model: links as capacities, transfers as max-min fair flows in SimPy.

:class:`Fabric` names the links and their capacities (NIC units), :class:`FlowNetwork` runs flows on them
and re-rates the affected ones whenever a flow starts or ends (:func:`max_min_rates`, progressive
filling). The model (which links, which flows, why max-min) is described in :mod:`dcpsim.sim.network`.
Times in seconds; rates in seconds of work per second.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import simpy

from dcpsim.errors import ConfigError

Link = tuple[str, int]
_TIGHT = 1.0 - 1e-9  # a link whose load exceeds this fraction of its capacity may bind (FlowNetwork._component)


@dataclass
class Fabric:
    """Link capacities of a cluster (NIC units, see the module docstring)."""

    gpus: int
    pod_gpus: int = 0
    oversubscription: float = 1.0
    degraded_gpu: int | None = None
    degraded_link_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.oversubscription < 1.0:
            raise ConfigError("hardware.oversubscription", self.oversubscription, ">= 1")

    def capacity(self, link: Link) -> float:
        """Capacity of ``link`` in NIC units."""
        kind, i = link
        if kind in ("tx", "rx"):
            return self.degraded_link_scale if i == self.degraded_gpu else 1.0
        return self.pod_gpus / self.oversubscription

    def path(self, src: int, dst: int) -> list[Link]:
        """Links a transfer from GPU ``src`` to GPU ``dst`` crosses."""
        links: list[Link] = [("tx", src), ("rx", dst)]
        if self.pod_gpus and src // self.pod_gpus != dst // self.pod_gpus:
            links += [("up", src // self.pod_gpus), ("down", dst // self.pod_gpus)]
        return links


@dataclass(slots=True)
class _Flow:
    work: float  # seconds of transfer left at rate 1, as of time t0
    links: list[Link]
    done: Callable[[], None]
    rate: float = 0.0
    t0: float = 0.0
    version: int = 0
    demand: float = 1.0  # the most it can get, NIC units: the smallest capacity among its links


class FlowNetwork:
    """Flows sharing a :class:`Fabric` in a SimPy environment (max-min fair, see the module docstring).

    ``start(work_s, links, on_done)`` begins a flow; ``on_done()`` is called when it has moved its
    ``work_s`` seconds' worth of bytes. When a flow starts or ends, only the flows connected to it
    through shared links (its *component*) get new rates; every flow's finish time sits in a heap and
    one SimPy timer waits for the earliest. ``events`` counts flow starts and ends.
    """

    def __init__(self, env: simpy.Environment, fabric: Fabric) -> None:
        self.env = env
        self.fabric = fabric
        self.flows: dict[int, _Flow] = {}
        self.on_link: dict[Link, set[int]] = {}
        self.events = 0
        self._next_id = 0
        self._heap: list[tuple[float, int, int]] = []  # (finish time, flow id, flow version)
        self._timer = 0
        self._armed_at = -1.0  # the finish time the live timer waits for (-1: none)
        self._dirty: set[Link] = set()  # links whose flows' rates may change (they bound before a flow ended)
        self._new: set[int] = set()  # flows started since the last settling
        self._settling = False
        self._cap: dict[Link, float] = {}
        self._load: dict[Link, float] = {}  # per link, the sum of its flows' demands (NIC units)

    def start(self, work_s: float, links: list[Link], on_done: Callable[[], None], cap: float = 1.0) -> None:
        """Begin a flow of ``work_s`` seconds' worth of bytes over ``links``; ``on_done()`` at its end.

        ``cap`` (``0 < cap ≤ 1``): the most the flow can use, in NIC units (a *paced* flow such as a CP
        ring step that can send no faster than the attention it overlaps consumes its data); a private
        link ``("cap", id)`` of that capacity, so max-min fairness treats it like any other bottleneck.
        """
        self.start_many(work_s, [links], on_done, cap)

    def start_many(self, work_s: float, paths: list[list[Link]], on_done: Callable[[], None], cap: float = 1.0) -> None:
        """``start(work_s, path, on_done, cap)`` for each of ``paths`` in order (the hops or GPU pairs of one
        collective or transfer): the same flows, ids, loads and settling, with the per-call look-ups done once."""
        n = len(paths)
        self.events += n
        if work_s <= 0.0:
            for _ in range(n):
                on_done()
            return
        if not n:
            return
        work_s, paced = float(work_s), cap < 1.0
        flows, on_link, load, caps, capacity = self.flows, self.on_link, self._load, self._cap, self.fabric.capacity
        new, now = self._new, self.env.now
        fid = self._next_id
        self._next_id += n
        for path in paths:
            links = list(path)
            demand = float(cap) if paced else float("inf")
            for ln in links:
                c = caps.get(ln)
                if c is None:
                    c = caps[ln] = capacity(ln)
                if c < demand:
                    demand = c
            if paced:
                own = ("cap", fid)
                caps[own] = float(cap)
                links.append(own)
            flows[fid] = _Flow(work_s, links, on_done, 0.0, now, 0, demand)
            for ln in links:
                users = on_link.get(ln)
                if users is None:
                    on_link[ln] = {fid}
                    load[ln] = demand
                else:
                    users.add(fid)
                    load[ln] += demand
            new.add(fid)
            fid += 1
        if not self._settling:
            self._settling = True
            self.env.timeout(0.0).callbacks.append(self._settle)

    def _settle(self, _ev) -> None:
        self._settling = False
        dirty, self._dirty = self._dirty, set()
        new, self._new = self._new, set()
        self._rerate(dirty, new)
        self._arm()

    def _component(self, links: set[Link], new: set[int]) -> tuple[list[int], bool]:
        """Flows whose rates may change when the flows ``new`` have started and flows have ended on
        ``links`` (those that could bind before), and whether a link among theirs can bind.

        A flow never gets more than its *demand* (the smallest capacity among its links), so a link whose
        flows' demands add up to no more than its capacity (its *load*) never binds: it leaves each of its
        flows its demand whatever the rest of the network does, rates do not propagate through it and the
        walk does not cross it. The new flows are in the component, and the ``links`` where flows ended
        are crossed (a link that just became slack releases its flows); a link that could not bind before
        a flow on it ended cannot bind after, so its other flows keep their rates. Exact: every link that can bind and touches a flow of the
        component has all its flows in it, and the links that cannot bind change nothing (the demands
        bound each flow), so :func:`max_min_rates` over the component gives the rates of a whole
        recomputation. A component none of whose links can bind gives every flow its demand (the
        shortcut of :meth:`_rerate`). Loads within ``1e-9`` of the capacity count as binding (rounding
        of the running sums can only make the walk larger).
        """
        on_link, flows, cap, load = self.on_link, self.flows, self._cap, self._load
        seen_l, seen_f = set(links), set()
        binds = False
        for ln in links:
            if load[ln] > cap[ln] * _TIGHT and len(on_link[ln]) > 1:
                binds = True
        todo = list(links)
        pending = [fid for fid in new if fid in flows]  # (a flow of no work never enters)
        while todo or pending:
            for fid in (pending if pending else on_link[todo.pop()]):
                if fid not in seen_f:
                    seen_f.add(fid)
                    for ln in flows[fid].links:
                        if ln not in seen_l:
                            seen_l.add(ln)
                            if load[ln] > cap[ln] * _TIGHT and len(on_link[ln]) > 1:
                                binds = True
                                todo.append(ln)
            pending = []
        return sorted(seen_f), binds

    def _rerate(self, links: set[Link], new: set[int]) -> None:
        """New max-min rates for the component of ``links`` and ``new`` (:meth:`_component`); their finish
        times go into the heap."""
        now = self.env.now
        flows, heap = self.flows, self._heap
        if not links and self._alone(new):  # the common case: new flows on links that cannot bind
            for fid in new:
                f = flows[fid]
                f.rate = f.demand
                f.t0 = now
                f.version = 1
                heapq.heappush(heap, (now + f.work / f.rate, fid, 1))
            return
        ids, binds = self._component(links, new)
        comp = [flows[f] for f in ids]
        old = [f.rate for f in comp]
        if binds:
            max_min_rates(comp, self._cap.__getitem__)
        else:  # no link can bind: every flow gets its demand
            for f in comp:
                f.rate = f.demand
        for fid, f, r0 in zip(ids, comp, old, strict=True):
            if f.rate == r0 and f.version:  # unchanged rate: its finish time in the heap still holds
                continue
            f.work -= r0 * (now - f.t0)
            f.t0 = now
            f.version += 1
            heapq.heappush(heap, (now + f.work / f.rate, fid, f.version))

    def _alone(self, new: set[int]) -> bool:
        """Whether no link of the flows ``new`` can bind (then each gets its demand and nothing else changes)."""
        flows, on_link, cap, load = self.flows, self.on_link, self._cap, self._load
        for fid in new:
            for ln in flows[fid].links:
                if load[ln] > cap[ln] * _TIGHT and len(on_link[ln]) > 1:
                    return False
        return True

    def _arm(self) -> None:
        """One SimPy timer at the earliest finish time (kept if one is already set for that moment)."""
        heap, flows = self._heap, self.flows
        while heap and (heap[0][1] not in flows or flows[heap[0][1]].version != heap[0][2]):
            heapq.heappop(heap)
        if heap and heap[0][0] != self._armed_at:
            self._timer += 1
            self._armed_at = heap[0][0]
            self.env.timeout(max(heap[0][0] - self.env.now, 0.0), self._timer).callbacks.append(self._on_timer)

    def _on_timer(self, ev) -> None:
        if ev.value != self._timer:  # superseded by a later change
            return
        self._armed_at = -1.0
        now = self.env.now
        heap, done, freed = self._heap, [], set()
        while heap and heap[0][0] <= now * (1.0 + 1e-12) + 1e-15:  # due now (rounding of now + dt)
            _, fid, ver = heapq.heappop(heap)
            f = self.flows.get(fid)
            if f is None or f.version != ver:
                continue
            del self.flows[fid]
            for ln in f.links:
                if ln[0] == "cap":  # a paced flow's own link goes with it
                    del self.on_link[ln], self._cap[ln], self._load[ln]
                    continue
                users, load = self.on_link[ln], self._load[ln]
                if load > self._cap[ln] * _TIGHT and len(users) > 1:  # it could bind: its flows may speed up
                    freed.add(ln)
                users.discard(fid)
                # the running sum restarts at exactly 0 when the link empties (no rounding carried over)
                self._load[ln] = load - f.demand if users else 0.0
            done.append(f.done)
        self.events += len(done)
        if freed:
            self._dirty.update(freed)
            self._settle(None)
        else:
            self._arm()
        for cb in done:
            cb()


_VECTOR_FLOWS = 24  # components of at least this many flows are filled with numpy (max_min_rates)


def max_min_rates(flows: Iterable[_Flow], capacity: Callable[[Link], float]) -> None:
    """Max-min fair rates by progressive filling (sets ``flow.rate``).

    Repeatedly the link with the smallest fair share (capacity left / flows not yet fixed on it) fixes
    its flows at that share; their rates come off every link they cross. Small sets: a heap of shares
    with lazy updates (``O(F·k·log L)`` for ``F`` flows of ``k`` links each); from ``_VECTOR_FLOWS``
    flows on, :func:`_max_min_numpy` (the same filling in rounds over a flow-link incidence).
    """
    flows = list(flows)
    if len(flows) >= _VECTOR_FLOWS:
        _max_min_numpy(flows, capacity)
    else:
        _max_min_heap(flows, capacity)


def _max_min_heap(flows: list[_Flow], capacity: Callable[[Link], float]) -> None:
    """:func:`max_min_rates` with a heap of link shares (lazy updates), for small sets."""
    left: dict[Link, float] = {}
    users: dict[Link, list[int]] = {}
    for i, f in enumerate(flows):
        f.rate = -1.0
        for ln in f.links:
            if ln not in left:
                left[ln] = capacity(ln)
                users[ln] = []
            users[ln].append(i)
    count = {ln: len(us) for ln, us in users.items()}
    heap = [(left[ln] / n, ln) for ln, n in count.items()]
    heapq.heapify(heap)
    while heap:
        s, ln = heapq.heappop(heap)
        if ln not in count:
            continue
        cur = left[ln] / count[ln]
        if cur != s:  # stale key (its flows changed since it was pushed): push the current one
            heapq.heappush(heap, (cur, ln))
            continue
        for i in users[ln]:
            f = flows[i]
            if f.rate >= 0.0:
                continue
            f.rate = s
            for l2 in f.links:
                left[l2] -= s
                count[l2] -= 1
                if count[l2] == 0:
                    del count[l2]
                elif l2 != ln:
                    heapq.heappush(heap, (left[l2] / count[l2], l2))



def _max_min_numpy(flows: list[_Flow], capacity: Callable[[Link], float]) -> None:
    """:func:`max_min_rates` in rounds with numpy over the sparse flow-link incidence.

    Each round computes every link's fair share (capacity left / unfixed flows on it), fixes the unfixed
    flows of the links whose share is the smallest at that share, and takes their rates off all their
    links (``O(rounds·nnz)``; the rounds are the distinct bottleneck levels, a handful). The same
    allocation as the heap (tests/test_network.py: equal to 1e-12); the two differ only in the rounding
    of the running sums (``k`` rates taken off a link at once here, one by one there).
    """
    index: dict[Link, int] = {}
    caps: list[float] = []
    inc_link: list[int] = []
    per_flow: list[int] = []
    for f in flows:
        for ln in f.links:
            j = index.get(ln)
            if j is None:
                j = index[ln] = len(caps)
                caps.append(capacity(ln))
            inc_link.append(j)
        per_flow.append(len(f.links))
    n_links = len(caps)
    li = np.asarray(inc_link, dtype=np.intp)
    fi = np.repeat(np.arange(len(flows)), per_flow)
    left = np.asarray(caps, dtype=np.float64)
    count = np.bincount(li, minlength=n_links).astype(np.float64)
    rate = np.full(len(flows), -1.0)
    live = np.ones(li.size, dtype=bool)  # incidences of flows not fixed yet
    share = np.empty(n_links)
    while True:
        on = count > 0.0
        if not on.any():
            break
        share.fill(np.inf)
        np.divide(left, count, out=share, where=on)
        s = share.min()
        hit = live & (share[li] == s)  # incidences on a bottleneck link
        fixed = np.zeros(len(flows), dtype=bool)
        fixed[fi[hit]] = True
        rate[fixed] = s
        gone = live & fixed[fi]  # every incidence of the newly fixed flows
        k = np.bincount(li[gone], minlength=n_links)
        left -= k * s
        count -= k
        live &= ~gone
    for f, r in zip(flows, rate.tolist(), strict=True):
        f.rate = r
