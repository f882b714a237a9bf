"""The shared network: max-min fair flows, closed forms, and the simulator with network = "shared"."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.sim.network import Fabric, FlowNetwork, ring_collective_s, transfer_time_s


def test_two_equal_flows_on_one_link_take_twice_as_long():
    f = Fabric(gpus=16)
    assert transfer_time_s(f, [(0, 8)], 1.5).tolist() == [1.5]
    assert transfer_time_s(f, [(0, 8), (1, 8)], 1.5) == pytest.approx([3.0, 3.0], rel=1e-12)
    # processor sharing: a short flow leaves, the long one speeds up again
    import simpy

    from dcpsim.sim.network import FlowNetwork

    env = simpy.Environment()
    net = FlowNetwork(env, f)
    end = {}
    net.start(1.0, f.path(0, 8), lambda: end.setdefault("short", env.now))
    net.start(3.0, f.path(1, 8), lambda: end.setdefault("long", env.now))
    env.run()
    assert end["short"] == pytest.approx(2.0) and end["long"] == pytest.approx(4.0)  # 2 s at 1/2, then 2 s alone


def test_max_min_fair_not_equal_split():
    # flows A: 0->8, B: 0->9, C: 1->9. tx0 and rx9 carry two flows each: all get 1/2
    f = Fabric(gpus=16)
    assert transfer_time_s(f, [(0, 8), (0, 9), (1, 9)], 1.0) == pytest.approx([2.0, 2.0, 2.0])
    # a flow held back elsewhere leaves its share: A 0->8 is capped at 1/4 by GPU 8's degraded NIC, so B 0->9
    # gets the 3/4 of GPU 0's NIC that A leaves (an equal split would give it 1/2)
    d = Fabric(gpus=16, degraded_gpu=8, degraded_link_scale=0.25)
    assert transfer_time_s(d, [(0, 8), (0, 9)], 1.0) == pytest.approx([4.0, 1.0 / 0.75], rel=1e-12)


@pytest.mark.parametrize("o", [1.0, 2.0, 4.0])
def test_ring_crossing_an_oversubscribed_spine_slows_by_the_factor(o):
    """8 two-GPU rings, each pairing GPU i of pod 0 with GPU i of pod 1: the 8 flows per direction share
    the pod uplink of 8/o NIC units, so each hop (and the ring) runs o times slower; inside a pod, no change."""
    f = Fabric(gpus=16, pod_gpus=8, oversubscription=o)
    rings = [[i, 8 + i] for i in range(8)]
    assert ring_collective_s(f, rings[0], 0.7, concurrent=rings[1:]) == pytest.approx(0.7 * o, rel=1e-12)
    inside = [[2 * i, 2 * i + 1] for i in range(4)]
    assert ring_collective_s(f, inside[0], 0.7, concurrent=inside[1:]) == pytest.approx(0.7, rel=1e-12)


def _run(network: str, **over):
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    d = {"cluster": {"gpus": 64}, "parallel": {"pp": 4, "cp": 2, "tp": 2}, "workload": {"gbs": 64},
         "hardware": {"pod_gpus": 16, "oversubscription": 4.0},
         "sim": {"iterations": 1, "planning": "ignore", "network": network, "engine": "events",
                 "host_timeline": False}}  # the network's mechanisms alone
    for k, v in over.items():
        sec, key = k.split("__")
        d.setdefault(sec, {})[key] = v
    return run_simulation(config_from_dict(d))


def test_shared_network_in_the_simulator():
    ideal = _run("ideal").iterations.iloc[0]
    shared = _run("shared").iterations.iloc[0]
    # pipeline transfers between pods share the uplinks: never faster than alone, and the ideal model's
    # per-transfer oversubscription factor is replaced by the actual sharing
    assert shared.iteration_time_s > 0 and shared.events > ideal.events
    # without pods and oversubscription, uncontended transfers: one flow per NIC pair, same times
    a = _run("ideal", hardware__pod_gpus="flat", hardware__oversubscription=1.0).iterations.iloc[0]
    b = _run("shared", hardware__pod_gpus="flat", hardware__oversubscription=1.0).iterations.iloc[0]
    assert b.iteration_time_s >= a.iteration_time_s * (1 - 1e-12)


def test_shared_network_needs_events():
    from dcpsim.sim.settings import SimSettings

    with pytest.raises(ConfigError, match="sim.engine"):
        SimSettings(network="shared", engine="fast")
    with pytest.raises(ConfigError, match="sim.network"):
        SimSettings(network="mesh")
    assert np.isfinite(_run("shared", sim__engine="auto").iterations.iloc[0].iteration_time_s)


def _dp_topology():
    from dcpsim.sim.topology import Topology

    return Topology(tp=1, pp=1, dp=16, cp=1, nvlink_domain_gpus=8)


def test_gradient_bucket_alone_takes_its_ideal_time():
    import simpy

    from dcpsim.sim.network import BucketedReduceScatter, FlowNetwork, dp_ring_hops

    hops = dp_ring_hops(_dp_topology(), 0)  # one ring per NIC: GPU k of domain 0 <-> GPU k of domain 1
    assert sorted(hops) == sorted([(k, 8 + k) for k in range(8)] + [(8 + k, k) for k in range(8)])
    for ready, expect in (([0.0], 0.25), ([0.0, 0.0, 0.0], 0.75), ([0.1, 0.2, 0.6], 0.85)):
        env = simpy.Environment()
        net = FlowNetwork(env, Fabric(gpus=16))
        end = []
        BucketedReduceScatter(net, hops, 0.25, len(ready)).run(ready, end.append)
        env.run()
        assert end == [pytest.approx(expect, rel=1e-12)]


def test_gradient_bucket_and_pipeline_flow_share_a_nic_max_min():
    """A bucket (work w on each of 16 hops) and a pipeline transfer 0 -> 9 (work w) start together: GPU 0's
    NIC carries hop 0 -> 8 and the transfer, GPU 9's carries hop 1 -> 9 and the transfer: max-min gives each
    1/2, so the transfer and the bucket (its slowest hop) both end at 2w; the other hops end at w."""
    import simpy

    from dcpsim.sim.network import BucketedReduceScatter, FlowNetwork, dp_ring_hops

    f = Fabric(gpus=16)
    env = simpy.Environment()
    net = FlowNetwork(env, f)
    end = {}
    BucketedReduceScatter(net, dp_ring_hops(_dp_topology(), 0), 0.5, 1).run([0.0], lambda t: end.setdefault("rs", t))
    net.start(0.5, f.path(0, 9), lambda: end.setdefault("p2p", env.now))
    env.run()
    assert end["rs"] == pytest.approx(1.0, rel=1e-12) and end["p2p"] == pytest.approx(1.0, rel=1e-12)
    # the transfer alone on a NIC the bucket does not use: no slow-down for either
    env = simpy.Environment()
    net = FlowNetwork(env, Fabric(gpus=24))
    end = {}
    BucketedReduceScatter(net, dp_ring_hops(_dp_topology(), 0), 0.5, 1).run([0.0], lambda t: end.setdefault("rs", t))
    net.start(0.5, f.path(16, 17), lambda: end.setdefault("p2p", env.now))
    env.run()
    assert end == {"rs": pytest.approx(0.5, rel=1e-12), "p2p": pytest.approx(0.5, rel=1e-12)}


@pytest.mark.parametrize("overlap", [True, False])
def test_gradient_flows_alone_equal_the_ideal_sync(overlap):
    """pp 1 (no pipeline transfers), flat fabric: the reduce-scatter flows meet nothing, so the shared run
    equals the ideal one (the closed form of the bucketed overlap); several buckets on the stage; static CP
    groups of 2 ranks x tp 2 stay inside a node (no CP ring flows to meet)."""
    over = {"hardware__pod_gpus": "flat", "hardware__oversubscription": 1.0, "parallel__pp": 1, "policy__name": "packing",
            "sim__overlap_grad_sync": overlap, "sim__grad_bucket_params": 20_000_000}
    a = _run("ideal", **over)
    b = _run("shared", **over)
    ia, ib = a.iterations.iloc[0], b.iterations.iloc[0]
    assert ib.iteration_time_s == pytest.approx(ia.iteration_time_s, rel=1e-9)
    assert ib.events > ia.events  # the buckets ran as flows


def test_gradient_flows_compete_with_pipeline_transfers():
    """pp 4, flat fabric, no oversubscription: the last backward's gradient sends to the previous stage share
    the NICs with the overlapped reduce-scatter, so the shared run is slower than the ideal one."""
    over = {"hardware__pod_gpus": "flat", "hardware__oversubscription": 1.0, "sim__grad_bucket_params": 20_000_000}
    ia = _run("ideal", **over).iterations.iloc[0]
    ib = _run("shared", **over).iterations.iloc[0]
    assert ib.iteration_time_s > ia.iteration_time_s * (1 + 1e-9)


def test_cp_ring_flows_alone_equal_the_ideal_op():
    """pp 1, dp 1, static cp 16 x tp 2 over four NVLink domains, flat fabric: each op's CP ring is 8 network
    flows (per TP rank, the 4 domain-crossing hops) on distinct NICs that meet nothing (the gradient
    reduce-scatter starts after the last backward and the parameter all-gather after the optimizer step: no
    overlap), so every op takes its ideal time."""
    over = {"cluster__gpus": 32, "parallel__pp": 1, "parallel__cp": 16, "parallel__tp": 2, "workload__gbs": 4,
            "policy__name": "packing", "sim__overlap_grad_sync": False, "sim__overlap_param_gather": False,
            "hardware__pod_gpus": "flat", "hardware__oversubscription": 1.0}
    a = _run("ideal", **over).iterations.iloc[0]
    b = _run("shared", **over).iterations.iloc[0]
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    assert b.events > a.events


def test_cp_ring_hops_and_their_sharing():
    """A CP group of stage ranks 4..11 (tp 1, domains of 8) crosses the network on hops 7 -> 8 and 11 -> 4."""
    import simpy

    from dcpsim.sim.network import PipelineTransfers
    from dcpsim.sim.topology import Topology

    class _T:
        start, size = np.array([4]), np.array([8])

    class _W:
        table = _T()
        p2p_network_alone_s = p2p_nvlink_s = np.zeros(1)

    env = simpy.Environment()
    f = Fabric(gpus=16)
    pt = PipelineTransfers(env, f, Topology(tp=1, pp=1, dp=2, cp=8), _W(), 1)
    assert sorted(pt.cp_hops(0, 0)) == [(7, 8), (11, 4)]
    end = {}
    pt.ring(0, 0.5, 1.0, lambda t: end.setdefault("ring", t))
    pt.net.start(0.5, f.path(7, 12), lambda: end.setdefault("p2p", env.now))  # shares GPU 7's NIC
    env.run()
    assert end == {"ring": pytest.approx(1.0, rel=1e-12), "p2p": pytest.approx(1.0, rel=1e-12)}


def test_cp_rings_across_an_oversubscribed_spine_slow_down():
    """Groups leaving their pod: ideal applies 1/o to each ring alone; shared makes the rings share the
    pod uplinks. Both slower than without oversubscription."""
    base = {"hardware__pod_gpus": 16}
    for net in ("ideal", "shared"):
        t1 = _run(net, hardware__oversubscription=1.0, **base).iterations.iloc[0].iteration_time_s
        t4 = _run(net, hardware__oversubscription=4.0, **base).iterations.iloc[0].iteration_time_s
        assert t4 >= t1 * (1 - 1e-12)


def _per_step_ring(tx: float, a: float, steps: int, background: float) -> tuple[float, float]:
    """Reference: a CP ring step by step on hop 0 -> 8 (step i's transfer overlaps step i's attention ``a``; the
    next step starts when both are done) next to a long flow 0 -> 9 on the same NIC. (ring end, background
    work done by then)."""
    import simpy

    from dcpsim.sim.network import FlowNetwork

    f = Fabric(gpus=16)
    env = simpy.Environment()
    net = FlowNetwork(env, f)
    bg_end = []
    net.start(background, f.path(0, 9), lambda: bg_end.append(env.now))
    out = []

    def step(i: int) -> None:
        if i == steps:
            out.append(env.now)
            return
        left = [2]

        def part(_=None) -> None:
            left[0] -= 1
            if left[0] == 0:
                step(i + 1)

        net.start(tx, f.path(0, 8), part)
        env.timeout(a).callbacks.append(part)

    step(0)
    env.run()
    return out[0], bg_end[0]


def _paced_ring(tx: float, a: float, steps: int, background: float) -> tuple[float, float]:
    """The same ring as one paced flow (work ``steps·tx``, pace ``min(1, tx/a)``)."""
    import simpy

    from dcpsim.sim.network import FlowNetwork

    f = Fabric(gpus=16)
    env = simpy.Environment()
    net = FlowNetwork(env, f)
    out, bg_end = [], []
    net.start(background, f.path(0, 9), lambda: bg_end.append(env.now))
    net.start(steps * tx, f.path(0, 8), lambda: out.append(env.now), min(1.0, tx / a))
    env.run()
    return out[0], bg_end[0]


@pytest.mark.parametrize("tx,a", [(0.1, 0.4), (0.2, 0.4), (0.3, 0.4), (0.5, 0.4), (0.2, 0.0001)])
def test_paced_ring_equals_the_per_step_ring_under_contention(tx, a):
    """One flow shares the ring's NIC max-min (rate 1/2 while both send): per step the transfer takes 2·tx,
    hidden while 2·tx <= a. The paced flow gives the per-step ring's end exactly (closed form
    ``steps·max(a, 2·tx)``) and leaves the other flow the same work (it ends at the same time)."""
    steps, bg = 7, 50.0
    ref_end, ref_bg = _per_step_ring(tx, a, steps, bg)
    end, bg_end = _paced_ring(tx, a, steps, bg)
    assert ref_end == pytest.approx(steps * max(a, 2 * tx), rel=1e-12)
    assert end == pytest.approx(ref_end, rel=1e-12)
    assert bg_end == pytest.approx(ref_bg, rel=1e-12)


def test_paced_ring_alone_takes_its_window():
    """Uncontended: a compute-bound ring (tx < a) ends after steps·a, a transfer-bound one after steps·tx."""
    for tx, a in ((0.1, 0.4), (0.5, 0.4)):
        import simpy

        from dcpsim.sim.network import FlowNetwork

        f = Fabric(gpus=16)
        env = simpy.Environment()
        net = FlowNetwork(env, f)
        out = []
        net.start(5 * tx, f.path(0, 8), lambda env=env, out=out: out.append(env.now), min(1.0, tx / a))
        env.run()
        assert out == [pytest.approx(5 * max(tx, a), rel=1e-12)]


def _ring_sim(network: str, degraded_gpu: int | None, scale: float, max_tokens: int):
    """pp 1, dp 1, cp 16 x tp 2 over four NVLink domains (ring hops 6->8, 7->9, ... cross the network)."""
    from dcpsim.policies import get_policy
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import build_cost_model, build_layout
    from dcpsim.sim.settings import SimSettings
    from dcpsim.sim.simulator import ClusterSimulator
    from dcpsim.sim.topology import Topology

    cfg = config_from_dict({"cluster": {"gpus": 32}, "parallel": {"pp": 1, "cp": 16, "tp": 2,
                                                                  "max_tokens_per_rank": max_tokens}})
    cost = build_cost_model(cfg)
    topo = Topology(tp=2, pp=1, dp=1, cp=16, degraded_gpu=degraded_gpu, degraded_link_scale=scale)
    sim = ClusterSimulator(cost, topo, settings=SimSettings(network=network, engine="events", overlap_grad_sync=False))
    lengths = np.array([16 * max_tokens, 4 * max_tokens, 2 * max_tokens])
    plan = get_policy("packing").plan(lengths, build_layout(cfg, cost), cost)
    return sim.simulate(plan)


@pytest.mark.parametrize("max_tokens", [512, 32768])
def test_ring_slowed_by_k_takes_the_per_step_time(max_tokens):
    """GPU 6's NIC runs at 1/k (k = 4): the network hop 6 -> 8 of every op's ring is slowed by k and nothing
    else shares it, so each step's transfer takes k·tx. The per-step closed form (the ideal model's cost
    formula with the group's network bandwidth / k: exposed = steps·max(0, k·tx − a)) must come out of the
    paced flows exactly, for short sequences (transfer-bound: +(k−1)·W per op) and long ones (much of it
    hidden behind attention)."""
    ideal = _ring_sim("ideal", 6, 0.25, max_tokens)
    shared = _ring_sim("shared", 6, 0.25, max_tokens)
    base = _ring_sim("ideal", None, 1.0, max_tokens)
    w = shared.work
    assert (w.cp_fwd_ring_s > 0).all()
    transfer_bound = w.cp_fwd_window_s <= w.cp_fwd_ring_s * (1 + 1e-12)
    assert transfer_bound.all() if max_tokens == 512 else (~transfer_bound).any()
    t_i, t_s, t_b = (r.timeline.finish for r in (ideal, shared, base))
    np.testing.assert_allclose(t_s, t_i, rtol=1e-9)
    assert (t_s[-1, 0] > t_b[-1, 0]).all()
    if max_tokens == 512:  # transfer-bound: each forward is (k - 1) W longer
        d = (t_s - shared.timeline.start)[0, 0] - (t_b - base.timeline.start)[0, 0]
        np.testing.assert_allclose(d, 3.0 * w.cp_fwd_ring_s[0], rtol=1e-9)
    else:  # a slow-down inside the slack (k = 1/0.9, tx/a = 0.84 on the long pack): that forward is unchanged
        ideal, shared = _ring_sim("ideal", 6, 0.9, max_tokens), _ring_sim("shared", 6, 0.9, max_tokens)
        np.testing.assert_allclose(shared.timeline.finish, ideal.timeline.finish, rtol=1e-9)
        hidden = shared.work.cp_fwd_ring_s[0] / 0.9 < shared.work.cp_fwd_window_s[0]
        assert hidden.any()
        d = (shared.timeline.finish - shared.timeline.start)[0, 0] - (t_b - base.timeline.start)[0, 0]
        np.testing.assert_allclose(d[hidden], 0.0, atol=1e-12)


# ------------------------------------------------------------------ parameter all-gather (Megatron's rule, vp = 1)
def test_param_gather_chain_closed_form():
    """Megatron-Core (vp = 1, --overlap-param-gather): the first forward's pre-hook dispatches bucket 0 and
    waits for it; the hook of bucket k's parameters waits for bucket k and dispatches bucket k + 1. Equal
    ops of F: ``J + t + (B − 1)·max(t, F/B) + F/B``; one bucket: ``J + t + F``; a collective starts when
    the last rank has dispatched it (unequal ops: bucket k + 1 waits for the slowest op's segment k)."""
    from dcpsim.sim.engine import param_gather_ends

    ready = np.array([0.5, 0.2, 0.3])
    for t, B, F in ((0.01, 8, 1.0), (0.3, 8, 1.0), (0.2, 1, 1.0), (0.125, 4, 0.5)):
        ends = param_gather_ends(ready, np.full(3, F), t, B)
        np.testing.assert_allclose(ends, 0.5 + t + (B - 1) * max(t, F / B) + F / B, rtol=1e-12)
    # unequal ops (F = 0.3 and 3, segments 0.1 and 1), t = 0.1, B = 3: bucket 1 at 0.1 (both start segment 0),
    # bucket 2 at 1.1 (the long op starts segment 1 then), so the short op waits for it until 1.2
    ends = param_gather_ends(np.zeros(2), np.array([0.3, 3.0]), 0.1, 3)
    np.testing.assert_allclose(ends, [1.3, 3.1], rtol=1e-12)


def test_param_gather_launched_at_the_step_start_closed_form():
    """Megatron-Core v0.6 .. r0.8 (``DistributedOptimizer.zero_grad`` dispatches bucket 0 at the step's start,
    sim.param_gather_launch = "step_start"): op i's first segment starts at max(ready_i, launch + t); one
    bucket: ``max(ready, t) + F`` (no wait once the input comes after the bucket); the rest of the chain as
    at the first forward (ready 0: both rules agree)."""
    from dcpsim.sim.engine import param_gather_ends, param_gather_launch_s

    assert param_gather_launch_s("first_forward") is None and param_gather_launch_s("step_start") == 0.0
    ready = np.array([0.5, 0.2, 0.3])
    for t in (0.1, 0.25, 0.7):
        ends = param_gather_ends(ready, np.full(3, 1.0), t, 1, 0.0)
        np.testing.assert_allclose(ends, np.maximum(ready, t) + 1.0, rtol=1e-12)
    # several buckets, ready [0.5, 0.2], t = 0.3, F = 0.6 (segments 0.2), B = 3: segment 0 at [0.5, 0.3]; bucket 1
    # at 0.5 -> 0.8, segments 1 at [0.8, 0.8]; bucket 2 at 0.8 -> 1.1, ends 1.3
    np.testing.assert_allclose(param_gather_ends(np.array([0.5, 0.2]), np.full(2, 0.6), 0.3, 3, 0.0), [1.3, 1.3],
                               rtol=1e-12)
    for t, B, F in ((0.01, 8, 1.0), (0.3, 8, 1.0), (0.2, 1, 1.0)):
        np.testing.assert_allclose(param_gather_ends(np.zeros(3), np.full(3, F), t, B, 0.0),
                                   param_gather_ends(np.zeros(3), np.full(3, F), t, B), rtol=1e-15)
    with pytest.raises(ConfigError, match="sim.param_gather_launch"):
        param_gather_launch_s("optimizer")


@pytest.mark.parametrize("network", ["ideal", "shared"])
def test_param_gather_is_exposed_at_each_stage_first_forward(network):
    """pp 4, flat fabric, static CP: a stage > 0 has one bucket (Megatron turns bucketing off there); its
    all-gather starts when the stage's first forwards have their input and every one of them waits for it:
    finish = max(ready) + t_p + F. Stage 0 follows the bucket chain from time 0."""
    from dcpsim.sim.engine import param_gather_ends

    over = {"hardware__pod_gpus": "flat", "hardware__oversubscription": 1.0, "policy__name": "packing"}
    rec = _run(network, **over).records[0]
    tl, w, sync = rec.timeline, rec.work, rec.sync
    f = w.virtual()[0]
    first = np.nonzero(w.table.step == 0)[0]
    for p in range(4):
        ready = tl.start[p, 0, first]
        ends = param_gather_ends(ready, f[p, first], float(sync.all_gather_bucket_s[p]), int(sync.buckets[p]))
        if network == "ideal" or p > 0:  # shared: stage 0's first forwards meet nothing on the NICs either
            np.testing.assert_allclose(tl.finish[p, 0, first], ends, rtol=1e-9)
        if p > 0:
            np.testing.assert_allclose(tl.finish[p, 0, first], ready.max() + sync.all_gather_s[p] + f[p, first],
                                       rtol=1e-12)
    assert tl.param_gather_s[1] >= sync.all_gather_s[1] * (1 - 1e-12)
    # Megatron-Core <= r0.8: launched at the step's start on every stage, so a stage > 0's one bucket runs while
    # the stage waits for its first input (uncontended flows: the ideal times); stage 0 as before (ready at 0)
    rec = _run(network, sim__param_gather_launch="step_start", **over).records[0]
    tl = rec.timeline
    for p in range(4):
        ready = tl.start[p, 0, first]
        ends = param_gather_ends(ready, f[p, first], float(sync.all_gather_bucket_s[p]), int(sync.buckets[p]), 0.0)
        if network == "ideal" or p > 0:
            np.testing.assert_allclose(tl.finish[p, 0, first], ends, rtol=1e-9)
        if p > 0:
            np.testing.assert_allclose(tl.finish[p, 0, first], np.maximum(ready, sync.all_gather_s[p]) + f[p, first],
                                       rtol=1e-9)
            assert ready.min() > sync.all_gather_s[p]  # this layout hides it entirely on stages > 0
    assert tl.param_gather_s[1:].max() < 1e-12
    # without overlap the all-gather is in the tail again (after the optimizer step), the first forwards don't wait
    rec = _run(network, sim__overlap_param_gather=False, **over).records[0]
    np.testing.assert_allclose(rec.timeline.finish[:, 0, first], rec.timeline.start[:, 0, first] + f[:, first],
                               rtol=1e-12)


def test_param_gather_shares_the_nics_with_the_first_cp_rings():
    """pp 1, cp 16 x tp 2 over four NVLink domains, flat fabric: stage 0's all-gather buckets cross the
    network on the NICs that the first forward's CP ring uses (the ring starts with the op's compute,
    after bucket 0). Shared: the first forward is slower than ideal (ideal and shared agree when the
    all-gather runs after the optimizer step instead: test_cp_ring_flows_alone_equal_the_ideal_op)."""
    over = {"cluster__gpus": 32, "parallel__pp": 1, "parallel__cp": 16, "parallel__tp": 2, "workload__gbs": 4,
            "policy__name": "packing", "sim__overlap_grad_sync": False,
            "hardware__pod_gpus": "flat", "hardware__oversubscription": 1.0}
    a, b = _run("ideal", **over).records[0], _run("shared", **over).records[0]
    fa, fb = a.timeline.finish[0, 0, 0], b.timeline.finish[0, 0, 0]
    # at most all the NICs' extra work: the all-gather's buckets and the ring's traffic
    assert fa < fb <= fa + float(a.sync.all_gather_s[0]) + b.work.cp_fwd_ring_s[0, 0]


@pytest.mark.parametrize("seed", range(3))
def test_incremental_rerating_equals_a_global_recomputation(seed):
    """The component walk (which does not cross links carrying no more flows than their capacity) gives the
    same finish times as re-rating every flow at every change: random flows, some paced, on a fabric with
    oversubscribed pods (pod links going tight and slack) and a degraded NIC."""
    import simpy

    from dcpsim.sim.network import FlowNetwork

    class Global(FlowNetwork):
        def _component(self, links, new):
            return sorted(self.flows), True

    rng = np.random.default_rng(seed)
    fabric = Fabric(gpus=32, pod_gpus=8, oversubscription=3.0, degraded_gpu=5, degraded_link_scale=0.3)
    spec = [(float(rng.uniform(0, 2)), int(rng.integers(32)), int(rng.integers(32)), float(rng.uniform(0.05, 1)),
             float(rng.choice([1.0, 0.4, 0.8]))) for _ in range(120)]
    ends = []
    for cls in (FlowNetwork, Global):
        env = simpy.Environment()
        net = cls(env, fabric)
        out = np.zeros(len(spec))

        def go(i, at, a, b, w, cap, net=net, env=env, out=out):
            def begin(_ev):
                net.start(w, fabric.path(a, b if b != a else (a + 9) % 32), lambda: out.__setitem__(i, env.now), cap)
            env.timeout(at).callbacks.append(begin)

        for i, sp in enumerate(spec):
            go(i, *sp)
        env.run()
        ends.append(out)
    np.testing.assert_allclose(ends[0], ends[1], rtol=1e-9)
    assert (ends[0] > 0).all()


def _random_flows(net_cls, fabric: Fabric, spec) -> np.ndarray:
    import simpy

    env = simpy.Environment()
    net = net_cls(env, fabric)
    out = np.zeros(len(spec))

    def go(i, at, a, b, w, cap):
        def begin(_ev):
            net.start(w, fabric.path(a, b), lambda: out.__setitem__(i, env.now), cap)
        env.timeout(at).callbacks.append(begin)

    for i, sp in enumerate(spec):
        go(i, *sp)
    env.run()
    return out


class _OneByOne(FlowNetwork):
    """start_many as one start per path (what it stands for; ``start`` is ``start_many`` of one path)."""

    def start_many(self, work_s, paths, on_done, cap=1.0):
        for path in paths:
            FlowNetwork.start_many(self, work_s, [path], on_done, cap)


@pytest.mark.parametrize("seed", range(3))
def test_start_many_equals_one_start_per_path(seed):
    """Groups of flows started together (a collective's hops, a transfer's GPU pairs: equal work, one cap,
    some of no work, some empty) with start_many finish at exactly the times of one start per flow, on an
    oversubscribed fabric with a degraded NIC, with single flows starting among them."""
    import simpy

    rng = np.random.default_rng(200 + seed)
    n = 32
    fabric = Fabric(gpus=n, pod_gpus=8, oversubscription=float(rng.choice([1.0, 3.0])), degraded_gpu=6,
                    degraded_link_scale=0.4)
    groups = []
    for _ in range(60):
        k = int(rng.integers(0, 6))
        pairs = [(int(a), int((a + rng.integers(1, n)) % n)) for a in rng.integers(0, n, size=k)]
        work = float(rng.choice([0.0, float(rng.uniform(0.05, 1.0))], p=[0.1, 0.9]))
        groups.append((float(rng.integers(0, 15)) * 0.1, pairs, work,
                       float(rng.choice([1.0, 0.5, float(rng.uniform(0.05, 1.0))]))))
    ends = []
    for cls in (FlowNetwork, _OneByOne):
        env = simpy.Environment()
        net = cls(env, fabric)
        out: list[list[float]] = [[] for _ in groups]

        def go(i, at, pairs, work, cap, net=net, env=env, out=out):
            def begin(_ev):
                net.start_many(work, [fabric.path(a, b) for a, b in pairs], lambda: out[i].append(env.now), cap)
                if i % 3 == 0 and pairs:  # a lone flow among the groups
                    net.start(work / 2, fabric.path(*pairs[0]), lambda: out[i].append(-env.now))
            env.timeout(at).callbacks.append(begin)

        for i, g in enumerate(groups):
            go(i, *g)
        env.run()
        ends.append(out)
        assert net.events >= sum(len(g[1]) for g in groups)
    assert ends[0] == ends[1]  # bit for bit, in the same order


@pytest.mark.parametrize("seed", range(4))
def test_flow_solver_equals_the_reference_solver(seed):
    """Issue 24's solver (walk over links that can bind, no-binding shortcut) against the solver it replaced
    (tests/network_reference.py, re-rating every flow connected through links with more flows than their
    capacity): random flows, many starting together, paced at caps that fill links exactly (1/2, 1/4) or
    not, on oversubscribed or flat fabrics with a degraded NIC; equal finish times."""
    from network_reference import ReferenceFlowNetwork

    from dcpsim.sim.network import FlowNetwork

    rng = np.random.default_rng(100 + seed)
    n = 32
    fabric = (Fabric(gpus=n, pod_gpus=8, oversubscription=float(rng.choice([1.0, 2.0, 4.0])), degraded_gpu=3,
                     degraded_link_scale=0.5) if seed % 2 == 0 else Fabric(gpus=n))
    spec = []
    for _ in range(150):
        a = int(rng.integers(n))
        b = (a + int(rng.integers(1, n))) % n
        spec.append((float(rng.integers(0, 20)) * 0.1, a, b, float(rng.uniform(0.05, 1.0)),
                     float(rng.choice([1.0, 1.0, 0.5, 0.25, 0.3, float(rng.uniform(0.05, 1.0))]))))
    new, ref = _random_flows(FlowNetwork, fabric, spec), _random_flows(ReferenceFlowNetwork, fabric, spec)
    assert (ref > 0).all()
    np.testing.assert_allclose(new, ref, rtol=1e-12)


def test_shared_simulation_equals_the_reference_solver(monkeypatch):
    """The same simulated iteration (every op's start and finish) with the reference solver in the network."""
    from network_reference import ReferenceFlowNetwork

    import dcpsim.sim.network as network

    over = {"parallel__cp": 4, "parallel__tp": 1, "hardware__pod_gpus": 8, "policy__name": "dynamic"}
    a = _run("shared", **over)
    monkeypatch.setattr(network, "FlowNetwork", ReferenceFlowNetwork)
    b = _run("shared", **over)
    ta, tb = a.records[0].timeline, b.records[0].timeline
    np.testing.assert_allclose(ta.finish, tb.finish, rtol=1e-12)
    np.testing.assert_allclose(ta.start, tb.start, rtol=1e-12)
    assert a.iterations.iloc[0].iteration_time_s == pytest.approx(b.iterations.iloc[0].iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_vectorised_filling_equals_the_reference_progressive_filling(seed):
    """max_min_rates on sets large enough for the numpy rounds (and small ones, on the heap) against the
    reference solver's progressive filling (tests/network_reference.py): random flows on an oversubscribed
    fabric with a degraded NIC, some paced at caps that fill links exactly or not; equal rates."""
    from network_reference import _Flow as RefFlow
    from network_reference import max_min_rates as reference

    from dcpsim.sim.network import _VECTOR_FLOWS, _Flow, max_min_rates

    rng = np.random.default_rng(200 + seed)
    fabric = Fabric(gpus=64, pod_gpus=16, oversubscription=4.0, degraded_gpu=3, degraded_link_scale=0.5)
    for n in (3, _VECTOR_FLOWS - 1, _VECTOR_FLOWS, 60, 250):
        caps, paths = {}, []
        for i in range(n):
            a = int(rng.integers(64))
            path = fabric.path(a, (a + int(rng.integers(1, 64))) % 64)
            if rng.random() < 0.4:
                caps[("cap", i)] = float(rng.choice([0.5, 0.25, rng.uniform(0.05, 1.0)]))
                path.append(("cap", i))
            paths.append(path)

        def capacity(ln, caps=caps):
            return caps[ln] if ln[0] == "cap" else fabric.capacity(ln)

        new, ref = [_Flow(1.0, p, None) for p in paths], [RefFlow(1.0, p, None) for p in paths]
        max_min_rates(new, capacity)
        reference(ref, capacity)
        r_new, r_ref = np.array([f.rate for f in new]), np.array([f.rate for f in ref])
        assert (r_ref > 0).all()
        np.testing.assert_allclose(r_new, r_ref, rtol=1e-12)
