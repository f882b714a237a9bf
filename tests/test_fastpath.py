"""The exact fast path equals the event simulation (random plans: static and dynamic, 1F1B and interleaved)."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.pipeline import pipeline_schedule, valid_microbatch_count
from dcpsim.policies import get_policy
from dcpsim.policies.base import pad_for_schedule
from dcpsim.policies.plan import Group, Layout, Plan, Step
from dcpsim.run import config_from_dict
from dcpsim.run.single import build_cost_model, build_layout, build_simulator, run_simulation
from dcpsim.sim import build_graph, build_group_table, run_iteration
from dcpsim.sim.fastpath import fast_iteration

REL = 1e-9


def random_dynamic_plan(lengths, lay: Layout, rng: np.random.Generator) -> Plan:
    """Random aligned power-of-two groups per step (ranks may stay empty), sequences dealt at random."""
    R = lay.ranks_per_stage
    n_steps = int(rng.integers(1, 7))
    steps = []
    for _ in range(n_steps):
        groups, r = [], 0
        while r < R:
            c = 1 << int(rng.integers(0, int(np.log2(R)) + 1))
            while r % c or r + c > R:
                c //= 2
            if rng.random() < 0.8:
                groups.append(Group(r, c, []))
            r += c
        steps.append(groups or [Group(0, 1, [])])
    flat = [g for st in steps for g in st]
    for i in range(len(lengths)):
        flat[int(rng.integers(len(flat)))].seq_ids.append(i)
    return Plan("random", lay, np.asarray(lengths), [Step(g) for g in steps], dynamic=True)


def assert_same(a, b) -> None:
    for f in ("start", "finish", "bwd_end_s", "last_bwd_start_s", "reduce_scatter_end_s", "optimizer_end_s", "stage_end_s"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=REL, atol=0, err_msg=f)
    assert a.makespan_s == pytest.approx(b.makespan_s, rel=REL, abs=0)


def _cfg(pp: int, vp: int, cp: int, gpus: int, **sim) -> object:
    return config_from_dict({"cluster": {"gpus": gpus}, "parallel": {"pp": pp, "cp": cp, "vp": vp, "max_tokens_per_rank": 16384},
                             "sim": {"iterations": 1, "planning": "ignore", "noise_cv": 0.3, "straggler_fraction": 0.1,
                                     "straggler_slowdown": 1.7, **sim}})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pp,vp", [(1, 1), (2, 1), (4, 1), (2, 2), (4, 5)])
def test_fast_path_equals_events_on_random_plans(seed, pp, vp):
    rng = np.random.default_rng(seed)
    cfg = _cfg(pp, vp, 2, pp * 16, overlap_grad_sync=bool(seed % 2), overlap_param_gather=seed in (1, 2, 4),
               grad_bucket_params=[0, 0, 50_000_000, 10_000_000, 0, 0][seed])
    cost = build_cost_model(cfg)
    lay = build_layout(cfg, cost)
    sim = build_simulator(cfg, cost)
    lengths = rng.integers(128, 30000, size=int(rng.integers(4, 40)))
    if seed % 3 == 0:
        plan = get_policy("packing").plan(lengths, lay, cost)
    elif seed % 3 == 1:
        plan = get_policy("dynamic").plan(lengths, lay, cost)
    else:
        plan = pad_for_schedule(random_dynamic_plan(lengths, lay, rng))
    table = build_group_table(plan)
    work = sim.durations.work(plan, table, noise_cv=0.3, rng=np.random.default_rng(seed))
    sched = pipeline_schedule(pp, table.n_steps, vp)
    assert table.n_steps == valid_microbatch_count(table.n_steps, pp, vp)
    o = sim.settings
    des = run_iteration(work, build_graph(table, sched, work.virtual()[2]), sim.sync,
                        overlap_grad_sync=o.overlap_grad_sync, overlap_param_gather=o.overlap_param_gather)
    fast = fast_iteration(work, sched, sim.sync, overlap_grad_sync=o.overlap_grad_sync,
                          overlap_param_gather=o.overlap_param_gather)
    assert des.events > 0 and fast.events == 0
    assert_same(des, fast)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pp", [2, 4])
def test_fast_path_equals_events_with_the_step_start_gather(seed, pp):
    """sim.param_gather_launch = "step_start" (Megatron-Core <= r0.8): both engines, same finish times."""
    rng = np.random.default_rng(100 + seed)
    cfg = _cfg(pp, 1, 2, pp * 16, overlap_param_gather=True, param_gather_launch="step_start",
               grad_bucket_params=[0, 10_000_000, 50_000_000, 0][seed])
    cost = build_cost_model(cfg)
    lay = build_layout(cfg, cost)
    sim = build_simulator(cfg, cost)
    lengths = rng.integers(128, 30000, size=int(rng.integers(4, 40)))
    plan = (get_policy("dynamic").plan(lengths, lay, cost) if seed % 2 else
            pad_for_schedule(random_dynamic_plan(lengths, lay, rng)))
    table = build_group_table(plan)
    work = sim.durations.work(plan, table, noise_cv=0.3, rng=np.random.default_rng(seed))
    sched = pipeline_schedule(pp, table.n_steps, 1)
    o = sim.settings
    assert o.param_gather_launch == "step_start"
    des = run_iteration(work, build_graph(table, sched, work.virtual()[2]), sim.sync, overlap_param_gather=True,
                        param_gather_launch="step_start")
    fast = fast_iteration(work, sched, sim.sync, overlap_param_gather=True, param_gather_launch="step_start")
    assert_same(des, fast)
    np.testing.assert_allclose(des.param_gather_s, fast.param_gather_s, rtol=REL, atol=1e-15)
    ff = fast_iteration(work, sched, sim.sync, overlap_param_gather=True)
    assert fast.makespan_s <= ff.makespan_s * (1 + 1e-12)  # an earlier launch never delays


@pytest.mark.parametrize("policy", ["packing", "dynamic"])
def test_run_simulation_same_rows_on_both_engines(policy):
    rows = {}
    for engine in ("events", "fast"):
        cfg = _cfg(4, 2, 2, 64, engine=engine, iterations=2).with_updates({"policy.name": policy, "workload.gbs": 64})
        rows[engine] = run_simulation(cfg)
    a, b = rows["events"], rows["fast"]
    for col in ("iteration_time_s", "tflops_per_gpu", "bubble_s", "imbalance_s", "compute_s", "grad_sync_s"):
        np.testing.assert_allclose(a.iterations[col], b.iterations[col], rtol=REL, err_msg=col)
    np.testing.assert_allclose(a.ranks["idle_s"], b.ranks["idle_s"], rtol=REL, atol=1e-12)
