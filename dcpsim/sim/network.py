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

from collections.abc import Callable

import numpy as np
import simpy

from dcpsim.hardware.placement import crosses_domain
from dcpsim.sim.flownet import _VECTOR_FLOWS, Fabric, FlowNetwork, Link, _Flow, max_min_rates

# the flow network (dcpsim.sim.flownet) stays importable from here
__all__ = [
    "BucketedReduceScatter", "DpRingBucket", "Fabric", "FlowNetwork", "Link", "PipelineTransfers", "_Flow",
    "_VECTOR_FLOWS", "dp_ring_hops", "max_min_rates", "ring_collective_s", "transfer_time_s",
]


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

            self.net.start_many(self.bucket_s, self.paths, hop_done)

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

        self.net.start_many(self.bucket_s, self.paths, hop_done)


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

        path = self.net.fabric.path
        self.net.start_many(work_s, [path(a, b) for a, b in hops], hop_done, cap)

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
        if net_pairs:
            path = self.net.fabric.path
            self.net.start_many(float(self.t_net[g]), [path(a, b) for a, b in net_pairs], part_done)
