"""The shared network's flow solver as it was before issue 24 (commit 7def83a), kept as the reference the
incremental solver of :class:`dcpsim.sim.network.FlowNetwork` is tested against (``tests/test_network.py``).

Re-rates a flow's whole component (links carrying more flows than their capacity crossed) by progressive
filling at every change. Not used by dcpsim.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import simpy

from dcpsim.sim.network import Fabric, Link


@dataclass
class _Flow:
    work: float  # seconds of transfer left at rate 1, as of time t0
    links: list[Link]
    done: Callable[[], None]
    rate: float = 0.0
    t0: float = 0.0
    version: int = 0


class ReferenceFlowNetwork:
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
        self._dirty: set[Link] = set()
        self._settling = False
        self._cap: dict[Link, float] = {}

    def start(self, work_s: float, links: list[Link], on_done: Callable[[], None], cap: float = 1.0) -> None:
        """Begin a flow of ``work_s`` seconds' worth of bytes over ``links``; ``on_done()`` at its end.

        ``cap`` (``0 < cap ≤ 1``): the most the flow can use, in NIC units (a *paced* flow such as a CP
        ring step that can send no faster than the attention it overlaps consumes its data); a private
        link ``("cap", id)`` of that capacity, so max-min fairness treats it like any other bottleneck.
        """
        self.events += 1
        if work_s <= 0.0:
            on_done()
            return
        fid = self._next_id
        self._next_id += 1
        links = list(links)
        caps = self._cap
        for ln in links:  # capacities looked up once per link (the hot loops index the dict)
            if ln not in caps:
                caps[ln] = self.fabric.capacity(ln)
        if cap < 1.0:
            own = ("cap", fid)
            caps[own] = float(cap)
            links.append(own)
        self.flows[fid] = _Flow(float(work_s), links, on_done, t0=self.env.now)
        for ln in links:
            self.on_link.setdefault(ln, set()).add(fid)
        self._dirty.update(links)
        if not self._settling:  # flows starting at the same moment get their rates together
            self._settling = True
            self.env.timeout(0.0).callbacks.append(self._settle)

    def start_many(self, work_s: float, paths: list[list[Link]], on_done: Callable[[], None], cap: float = 1.0) -> None:
        """One :meth:`start` per path, in order (what ``FlowNetwork.start_many`` stands for)."""
        for path in paths:
            self.start(work_s, path, on_done, cap)

    def _settle(self, _ev) -> None:
        self._settling = False
        dirty, self._dirty = self._dirty, set()
        self._rerate(dirty)
        self._arm()

    def _component(self, links: set[Link]) -> list[int]:
        """Flows whose rates may change when flows start or end on ``links``: those connected to them
        through links that can bind.

        A link carrying no more flows than its capacity never binds (every flow is held to at most 1 NIC
        unit by its own NIC), so rates do not propagate through it and the walk does not cross it; the
        changed ``links`` themselves are always crossed (a link that just became slack releases its
        flows). Exact: every link that can bind and touches a flow of the component has all its flows
        in it, so :func:`max_min_rates` over the component gives the rates of a whole recomputation.
        """
        on_link, flows, cap = self.on_link, self.flows, self._cap
        seen_l, seen_f = set(links), set()
        todo = list(links)
        while todo:
            for fid in on_link.get(todo.pop(), ()):
                if fid not in seen_f:
                    seen_f.add(fid)
                    for ln in flows[fid].links:
                        if ln not in seen_l:
                            seen_l.add(ln)
                            n = len(on_link[ln])
                            if n > 1 and n > cap[ln]:
                                todo.append(ln)
        return sorted(seen_f)

    def _rerate(self, links: set[Link]) -> None:
        """New max-min rates for the component of ``links``; their finish times go into the heap."""
        now = self.env.now
        ids = self._component(links)
        comp = [self.flows[f] for f in ids]
        old = [f.rate for f in comp]
        max_min_rates(comp, self._cap.__getitem__)
        for fid, f, r0 in zip(ids, comp, old, strict=True):
            if f.rate == r0 and f.version:  # unchanged rate: its finish time in the heap still holds
                continue
            f.work -= r0 * (now - f.t0)
            f.t0 = now
            f.version += 1
            heapq.heappush(self._heap, (now + f.work / f.rate, fid, f.version))

    def _arm(self) -> None:
        heap = self._heap
        while heap and (heap[0][1] not in self.flows or self.flows[heap[0][1]].version != heap[0][2]):
            heapq.heappop(heap)
        if heap:
            self._timer += 1
            self.env.timeout(max(heap[0][0] - self.env.now, 0.0), self._timer).callbacks.append(self._on_timer)

    def _on_timer(self, ev) -> None:
        if ev.value != self._timer:  # superseded by a later change
            return
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
                    del self.on_link[ln], self._cap[ln]
                    continue
                self.on_link[ln].discard(fid)
                freed.add(ln)
            done.append(f.done)
        self.events += len(done)
        if freed:
            self._dirty.update(freed)
            self._settle(None)
        else:
            self._arm()
        for cb in done:
            cb()


def max_min_rates(flows: Iterable[_Flow], capacity: Callable[[Link], float]) -> None:
    """Max-min fair rates by progressive filling (sets ``flow.rate``).

    Repeatedly the link with the smallest fair share (capacity left / flows not yet fixed on it) fixes
    its flows at that share; their rates come off every link they cross (a heap of shares with lazy
    updates: ``O(F·k·log L)`` for ``F`` flows of ``k`` links each).
    """
    flows = list(flows)
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
