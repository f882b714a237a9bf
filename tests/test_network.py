"""The shared network: max-min fair flows, closed forms, and the simulator with network = "shared"."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.sim.network import Fabric, ring_collective_s, transfer_time_s


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
         "sim": {"iterations": 1, "planning": "ignore", "network": network, "engine": "events"}}
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
    from dcpsim.sim.simulator import SimOptions

    with pytest.raises(ConfigError, match="sim.engine"):
        SimOptions(network="shared", engine="fast")
    with pytest.raises(ConfigError, match="sim.network"):
        SimOptions(network="mesh")
    assert np.isfinite(_run("shared", sim__engine="auto").iterations.iloc[0].iteration_time_s)
