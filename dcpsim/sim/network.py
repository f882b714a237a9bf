"""A shared network: links as resources, transfers as flows that share them (max-min fair), inside SimPy.

Links (``sim.network = "shared"``), capacities in *NIC units* (1 = one GPU's
network bandwidth, the rate at which a transfer alone runs at the profile's
speed, so an uncontended flow takes exactly its ``ideal`` time):

* per GPU, its NIC (rail) in each direction: ``("tx", gpu)``, ``("rx", gpu)``,
  capacity 1 (times ``degraded_link_scale`` for the degraded GPU's NIC);
* per pod (``pod_gpus`` consecutive GPUs under one leaf), the uplink to the
  spine and the downlink from it: ``("up", pod)``, ``("down", pod)``,
  capacity ``pod_gpus / oversubscription``; traffic between pods crosses the
  source pod's uplink and the destination pod's downlink. A flat fabric
  (``pod_gpus = 0``) has no pod links (a non-blocking spine).
* NVLink transfers stay inside their domain and are not modelled as flows
  (they keep their ideal time; see the end of this docstring).

Sharing: **max-min fair** (progressive filling). Every flow on a link gets an
equal share of it unless the flow is held back elsewhere, in which case the
others split what it leaves. That is the allocation that per-flow fair
congestion control converges to (InfiniBand credit-based flow control with
equal-weight virtual lanes, TCP-like rate control) and, for flows that all
cross one link, it is processor sharing; unlike a fixed per-link split it
does not waste the share of a flow that another bottleneck limits. Rates are
recomputed whenever a flow starts or ends (the only moments they change), so
between events every flow progresses linearly; a flow of ``work`` seconds
(its time alone) at rate ``r`` advances ``r`` seconds of work per second.

Granularity: one flow per GPU pair of a pipeline transfer (its activations or
gradients, ``tp`` GPUs per stage rank) and one flow per ring hop of a
collective (a ring's hops run concurrently, so the collective ends when its
slowest hop does); the whole transfer time, latency included, is treated as
bandwidth work (latency terms are small next to the megabyte transfers these
are). The distributed optimizer's bucketed gradient reduce-scatter of a stage
whose DP×CP group leaves its NVLink domain is one flow per bucket per ring
hop between domains (:class:`BucketedReduceScatter`); its parameter
all-gather likewise, one bucket at a time as the engine launches them
(:class:`DpRingBucket`; Megatron's launch rule, ``vp = 1``, see
:mod:`dcpsim.sim.engine`), so the buckets share the NICs with the first
microbatches' CP rings and pipeline transfers; without overlap it runs after
the optimizer step, bucket after bucket. TP collectives stay inside op
durations at NVLink speed: a TP size that does not divide the NVLink domain
(the profile's or ``hardware.nvlink_domain_gpus``) is refused
(:func:`dcpsim.hardware.placement.check_tp_in_domain`), so TP groups always
stay inside one domain. NVLink itself is not a shared resource here
(CP rings, pipeline and DP traffic inside a domain keep their ideal times).

CP rings (``p2p``) of groups that leave their NVLink domain: one *paced* flow
per network hop per op (:meth:`PipelineTransfers.ring`). In Megatron/TE ring
attention each of the ``c − 1`` steps of a layer sends the next K/V block
while computing attention on the current one (``a = attn/c``), and the next
step starts when both are done: a step takes ``max(a, tx)`` alone and
``max(a, tx/r)`` when its hop gets rate ``r``. The flow carries the op's whole
ring traffic ``W = L·(c−1)·tx`` with a rate cap ``W/R``, ``R = L·(c−1)·max(a,
tx)`` the steps' time alone (a private link of that capacity, so max-min
treats the cap like any bottleneck). Alone it ends after ``R`` (the op takes
its ideal time); at a constant share ``r`` it ends after ``max(R, W/r)``, which
is the per-step sum ``L·(c−1)·max(a, tx/r)`` exactly, and the NIC capacity it
leaves to others equals the per-step average (while ``tx/r ≤ a`` the step's
transfer runs at ``r`` for ``tx/r`` and leaves the link for the rest of the
step): contention shows only where it exceeds the steps' compute slack. The
engine ends the op at ``t_f + D − R`` (``t_f`` the slowest hop's end). What
one flow per op leaves out, against one flow per step: a share that changes
within an op is averaged over the op's steps (a slow step cannot borrow a
later step's slack in the per-step ring, and the paced flow cannot run ahead
of its pace) and the hops of a ring do not re-synchronise every step; the
steps of the ``L`` layers are taken as one phase at the op's start. Per step
would cost ``L·(c − 1)`` times the flows (35 for Llama-13B pp 8, cp 8) and as
many max-min re-ratings, for a difference that exists only while the shares
move faster than one op (tested equal to a per-step reference at constant
shares, ``tests/test_network.py``). ``all_gather``/``a2a`` CP collectives
overlap nothing: cap 1, ``R = W``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import simpy

from dcpsim.errors import ConfigError
from dcpsim.hardware.placement import crosses_domain

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
        self.events += 1
        if work_s <= 0.0:
            on_done()
            return
        fid = self._next_id
        self._next_id += 1
        links = list(links)
        caps = self._cap
        demand = float(cap) if cap < 1.0 else float("inf")
        for ln in links:  # capacities looked up once per link (the hot loops index the dict)
            c = caps.get(ln)
            if c is None:
                c = caps[ln] = self.fabric.capacity(ln)
            if c < demand:
                demand = c
        if cap < 1.0:
            own = ("cap", fid)
            caps[own] = float(cap)
            links.append(own)
        self.flows[fid] = _Flow(float(work_s), links, on_done, 0.0, self.env.now, 0, demand)
        on_link, load = self.on_link, self._load
        for ln in links:
            users = on_link.get(ln)
            if users is None:
                on_link[ln] = {fid}
                load[ln] = demand
            else:
                users.add(fid)
                load[ln] += demand
        self._new.add(fid)
        if not self._settling:  # flows starting at the same moment get their rates together
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

def ring_collective_s(fabric: Fabric, ring: list[int], ideal_s: float, *, concurrent: list[list[int]] | None = None) -> float:
    """Time of a ring collective over GPUs ``ring`` whose ideal (uncontended) time is ``ideal_s``, with other
    rings in ``concurrent`` (same ideal time) running at the same moment: one flow per ring hop, the
    collective ends when its slowest hop does. Hops inside one NVLink domain are not given (pass only
    network hops' GPUs)."""
    env = simpy.Environment()
    net = FlowNetwork(env, fabric)
    end: dict[int, float] = {}
    rings = [ring] + list(concurrent or [])
    for j, r in enumerate(rings):
        for a, b in zip(r, r[1:] + r[:1], strict=True):
            def done(j=j) -> None:
                end[j] = max(end.get(j, 0.0), env.now)
            net.start(ideal_s, fabric.path(a, b), done)
    env.run()
    return end[0]


def transfer_time_s(fabric: Fabric, pairs: list[tuple[int, int]], ideal_s: float) -> np.ndarray:
    """Finish time of each of ``pairs`` (src GPU, dst GPU) started together, each ``ideal_s`` alone."""
    env = simpy.Environment()
    net = FlowNetwork(env, fabric)
    out = np.zeros(len(pairs))
    for k, (a, b) in enumerate(pairs):
        def done(k=k) -> None:
            out[k] = env.now
        net.start(ideal_s, fabric.path(a, b), done)
    env.run()
    return out


def dp_ring_hops(topology, stage: int) -> list[tuple[int, int]]:
    """Network hops (src GPU, dst GPU) of the DP×CP gradient rings of pipeline stage ``stage``.

    As :func:`~dcpsim.cost.communication.group_collective_time_s` models it: across NVLink domains NCCL runs one
    ring per NIC (channel), so the ``k``-th GPU of each domain the group touches sends to the ``k``-th GPU
    of the next domain (domains in a ring), for every TP rank's group; hops inside a domain are NVLink.
    Empty when every group stays inside one domain.
    """
    R, d = topology.ranks_per_stage, topology.nvlink_domain_gpus
    hops: list[tuple[int, int]] = []
    for t in range(topology.tp):
        g = topology.gpu_id(stage, np.arange(R), t)
        dom = g // d
        members = [g[dom == x] for x in np.unique(dom)]
        if len(members) <= 1:
            continue
        for i, m in enumerate(members):
            nxt = members[(i + 1) % len(members)]
            hops += list(zip(m[:nxt.size].tolist(), nxt[:m.size].tolist(), strict=True))
    return hops


class BucketedReduceScatter:
    """The bucketed gradient reduce-scatter of one stage as flows (``sim.network = "shared"``).

    Granularity: one flow per bucket per network hop (channel ring hop between NVLink domains, see
    :func:`dp_ring_hops`), of work ``bucket_s`` = the bucket's whole ring reduce-scatter alone
    (its ``bytes·(n−1)/n`` at the per-NIC bus bandwidth; with ``g`` channels each NIC is busy for the
    whole collective, so an uncontended bucket takes exactly its ideal time). A bucket ends when its
    slowest hop does. Not per ring step: a ring's ``n − 1`` steps are paced by the same slowest hop, so
    per-step flows give the same time under contention that lasts longer than a step (buckets are
    ≥ 40M parameters, hundreds of MB, steps of MBs) at ``n − 1`` times the events. The NCCL latency term
    is inside the profile's size-dependent bus bandwidth (not separable; < 1 % at these sizes), so it is
    carried as work. Buckets run one after another on one communication stream, bucket ``i`` starting
    at ``max(ready_i, end of bucket i−1)``, as in the ideal model.
    """

    def __init__(self, net: FlowNetwork, hops: list[tuple[int, int]], bucket_s: float, buckets: int) -> None:
        self.net = net
        self.paths = [net.fabric.path(a, b) for a, b in hops]
        self.bucket_s = float(bucket_s)
        self.buckets = int(buckets)

    def run(self, ready: list[float | None], done: Callable[[float], None]) -> None:
        """Start the buckets at absolute times ``ready`` (non-decreasing, not before now; ``None``: when
        :meth:`release` is called, the stage's backward barrier); ``done(t)`` at the end."""
        env = self.net.env
        self._released = False
        self._waiting: int | None = None

        def start(i: int) -> None:
            left = [len(self.paths)]

            def hop_done() -> None:
                left[0] -= 1
                if left[0] == 0:
                    if i + 1 == self.buckets:
                        done(env.now)
                    else:
                        at(i + 1)

            for path in self.paths:
                self.net.start(self.bucket_s, path, hop_done)

        def at(i: int) -> None:
            if ready[i] is None and not self._released:
                self._waiting = i
                return
            wait = -1.0 if ready[i] is None else ready[i] - env.now
            if wait > 0.0:
                env.timeout(wait).callbacks.append(lambda _ev: start(i))
            else:
                start(i)

        self._start = start
        at(0)

    def release(self) -> None:
        """The stage's last backward has ended: buckets waiting for it (``ready`` ``None``) may start."""
        self._released = True
        if self._waiting is not None:
            i, self._waiting = self._waiting, None
            self._start(i)


class DpRingBucket:
    """One bucket of a stage's parameter all-gather as flows, started on demand (``sim.network = "shared"``).

    Same hops and granularity as :class:`BucketedReduceScatter` (one flow per inter-domain ring hop of
    ``bucket_s``, the bucket's all-gather alone); the engine decides when each bucket starts (Megatron's
    forward pre-hooks, :func:`dcpsim.sim.engine.param_gather_ends`).
    """

    def __init__(self, net: FlowNetwork, hops: list[tuple[int, int]], bucket_s: float) -> None:
        self.net = net
        self.paths = [net.fabric.path(a, b) for a, b in hops]
        self.bucket_s = float(bucket_s)

    def start_at(self, t: float, done: Callable[[float], None]) -> None:
        """Start one bucket at absolute time ``t`` (now if past); ``done(end)`` when its slowest hop ends."""
        env = self.net.env
        wait = t - env.now
        if wait > 0.0:
            env.timeout(wait).callbacks.append(lambda _ev: self.start_at(env.now, done))
            return
        left = [len(self.paths)]

        def hop_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                done(env.now)

        for path in self.paths:
            self.net.start(self.bucket_s, path, hop_done)


class PipelineTransfers:
    """Pipeline transfers of one iteration as flows on a shared :class:`FlowNetwork` (``sim.network = "shared"``).

    The transfer of group ``g`` between virtual stages ``s`` and ``s + 1`` (either direction) is one
    flow per GPU pair that crosses the network (``tp`` GPUs per stage rank, each to the same
    coordinates on the other stage), of work ``p2p_network_alone_s[g]``, plus the NVLink pairs' fixed
    ``p2p_nvlink_s[g]``; it arrives when all of them have.
    """

    def __init__(self, env: simpy.Environment, fabric: Fabric, topology, work, n_groups: int) -> None:
        self.env = env
        self.net = FlowNetwork(env, fabric)
        self.topo = topology
        self.G = n_groups
        self.start = work.table.start
        self.size = work.table.size
        self.t_net = work.p2p_network_alone_s
        self.t_nvl = work.p2p_nvlink_s
        self._pairs: dict[tuple[int, int, int], tuple[list[tuple[int, int]], bool]] = {}

    def pairs(self, g: int, p_from: int, p_to: int) -> tuple[list[tuple[int, int]], bool]:
        """(network GPU pairs, whether some pair stays on NVLink) of group ``g`` from stage ``p_from`` to ``p_to``."""
        key = (g, p_from, p_to)
        got = self._pairs.get(key)
        if got is None:  # plain integers: a group has a few dozen pairs, too few for numpy to pay
            topo = self.topo
            tp, d = topo.tp, topo.nvlink_domain_gpus
            per_stage = tp * topo.ranks_per_stage
            oa, ob = per_stage * p_from, per_stage * p_to  # topo.gpu_id(p, r, t) = t + tp·r + tp·R·p
            lo = int(self.start[g])
            net: list[tuple[int, int]] = []
            nvl = False
            for t in range(tp):
                for r in range(lo, lo + int(self.size[g])):
                    x = t + tp * r
                    a, b = x + oa, x + ob
                    if a // d != b // d:  # crosses_domain
                        net.append((a, b))
                    else:
                        nvl = True
            got = self._pairs[key] = (net, nvl)
        return got

    def cp_hops(self, g: int, p: int) -> list[tuple[int, int]]:
        """Network hops of group ``g``'s CP ring on stage ``p``: for each TP rank, stage rank ``r`` of the group
        sends to ``r + 1`` (cyclically), the ring order of Megatron's ring attention; only hops that
        leave the NVLink domain."""
        key = (g, p, -1)
        if key not in self._pairs:
            topo = self.topo
            r = np.arange(self.start[g], self.start[g] + self.size[g])
            hops: list[tuple[int, int]] = []
            for t in range(topo.tp):
                a = topo.gpu_id(p, r, t)
                b = np.roll(a, -1)
                cross = crosses_domain(a, b, topo.nvlink_domain_gpus)
                hops += list(zip(a[cross].tolist(), b[cross].tolist(), strict=True))
            self._pairs[key] = (hops, False)
        return self._pairs[key][0]

    def ring(self, node: int, work_s: float, cap: float, done: Callable[[float], None]) -> None:
        """The CP ring of the engine's node ``node`` (virtual stage, direction, group): one flow per network hop
        (the hops run concurrently), each carrying the whole ring's traffic of the op (``cp − 1`` steps of
        K/V or their gradients in each of the stage's layers, ``work_s``), paced at ``cap`` (the ring's
        transfer over the attention it overlaps, see :class:`RingPacing`); ``done(t)`` when the slowest has
        finished."""
        s, g = divmod(node, self.G)
        hops = self.cp_hops(g, (s // 2) % self.topo.pp)
        if not hops:
            done(self.env.now)
            return
        left = [len(hops)]

        def hop_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                done(self.env.now)

        for a, b in hops:
            self.net.start(work_s, self.net.fabric.path(a, b), hop_done, cap)

    def reduce_scatter(self, stage: int, bucket_s: float, buckets: int) -> BucketedReduceScatter | None:
        """Stage ``stage``'s bucketed gradient reduce-scatter on this network (``None`` if it stays on NVLink)."""
        hops = dp_ring_hops(self.topo, stage)
        if not hops or bucket_s <= 0.0:
            return None
        return BucketedReduceScatter(self.net, hops, bucket_s, buckets)

    def all_gather(self, stage: int, bucket_s: float) -> DpRingBucket | None:
        """One bucket of stage ``stage``'s parameter all-gather on this network (``None`` if it stays on NVLink)."""
        hops = dp_ring_hops(self.topo, stage)
        if not hops or bucket_s <= 0.0:
            return None
        return DpRingBucket(self.net, hops, bucket_s)

    def send(self, src_node: int, dst_node: int, arrived: Callable[[], None]) -> None:
        """Start the transfer on the edge ``src_node → dst_node`` of the engine's graph; ``arrived()`` at its end."""
        G, pp = self.G, self.topo.pp
        s1, g = divmod(src_node, G)[0] // 2, src_node % G
        s2 = (dst_node // G) // 2
        net_pairs, on_nvlink = self.pairs(g, s1 % pp, s2 % pp)
        left = [len(net_pairs) + (1 if on_nvlink else 0)]

        def part_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                arrived()

        if on_nvlink:
            self.env.timeout(float(self.t_nvl[g])).callbacks.append(lambda _ev: part_done())
        for a, b in net_pairs:
            self.net.start(float(self.t_net[g]), self.net.fabric.path(a, b), part_done)
