"""The one pipeline schedule (dcpsim.pipeline): Megatron's orders, closed forms, the microbatch rule, and the
simulator running it (1F1B and interleaved)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.pipeline import (
    BWD,
    FWD,
    bubble_fraction,
    chain_times,
    check_microbatches,
    makespan,
    microbatch_rule_violation,
    pipeline_schedule,
    stage_order,
    valid_microbatch_count,
    vp_from_layers_per_virtual_stage,
)
from dcpsim.policies.plan import Layout
from dcpsim.sim import ClusterSimulator, Topology, build_graph, build_group_table, run_iteration

DATA = Path(__file__).parent / "data" / "megatron_pipeline_orders.json"


# ------------------------------------------------------------------ Megatron's order
def test_orders_equal_megatron():
    """Expected orders were produced by running Megatron-LM's own get_pp_rank_microbatches and
    get_schedule_table (commit in the file) outside the project: tests/data/gen_megatron_pipeline_orders.py."""
    data = json.loads(DATA.read_text())
    assert len(data["megatron_commit"]) == 40 and len(data["cases"]) >= 10
    for case in data["cases"]:
        for rank, ops in enumerate(case["orders"]):
            want = np.array([[FWD if d == "F" else BWD, k, c] for d, k, c in ops])
            got = stage_order(rank, case["pp"], case["m"], case["vp"], case["group"])
            assert np.array_equal(got, want), (case["pp"], case["vp"], case["m"], rank)


def test_schedule_graph_is_complete_and_topological():
    for pp, m, vp in [(1, 3, 1), (4, 6, 1), (4, 8, 2), (3, 9, 3), (8, 16, 4)]:
        s = pipeline_schedule(pp, m, vp)
        assert s.n_nodes == 2 * pp * vp * m
        idx = np.arange(s.n_nodes)
        assert np.all(s.prev < idx) and np.all(s.dep < idx)
        # every (virtual stage, direction, microbatch) exactly once
        key = (s.stage * 2 + s.direction) * m + s.microbatch
        assert np.array_equal(np.sort(key), np.arange(s.n_nodes))
        # a backward never precedes its own forward on the last virtual stage
        last = s.stage == pp * vp - 1
        for k in range(m):
            f = idx[last & (s.direction == FWD) & (s.microbatch == k)][0]
            b = idx[last & (s.direction == BWD) & (s.microbatch == k)][0]
            assert f < b


# ------------------------------------------------------------------ closed forms
@settings(max_examples=40, deadline=None)
@given(pp=st.sampled_from([1, 2, 3, 4, 8]), mult=st.integers(1, 4), vp=st.sampled_from([1, 2, 3, 4]),
       tf=st.floats(0.01, 2.0), tb=st.floats(0.01, 4.0))
def test_equal_microbatches_closed_forms(pp, mult, vp, tf, tb):
    m = pp * mult if vp > 1 else mult + pp // 2
    ms = makespan(np.full((m, 1), tf), np.full((m, 1), tb), pp, vp)[0]
    ideal = m * (tf + tb)
    if vp == 1:
        assert ms == pytest.approx((m + pp - 1) * (tf + tb), rel=1e-12)
    assert (ms - ideal) / ideal == pytest.approx(bubble_fraction(pp, m, vp), rel=1e-9, abs=1e-12)


def test_chunks_take_the_head_last_and_the_embedding_first():
    from dcpsim.pipeline import chunk_durations

    stage = np.array([[10.0], [8.0], [12.0]])  # rank 0 holds a 2 s embedding, rank 2 a 4 s head
    v = chunk_durations(stage, 2, head_s=np.array([4.0]), first_s=np.array([2.0]))
    assert v[:, 0].tolist() == [6.0, 4.0, 4.0, 4.0, 4.0, 8.0]  # virtual stages 0..5 = (chunk, rank)
    assert v.sum() == stage.sum()
    assert np.array_equal(chunk_durations(stage, 1, np.array([4.0]), np.array([2.0])), stage)


def test_chain_times_columns_are_independent_and_transfers_add():
    pp, m = 4, 8
    f = np.random.default_rng(0).uniform(0.1, 1.0, (m, 3))
    b = 2 * f
    both = makespan(f, b, pp)
    for j in range(3):
        assert makespan(f[:, j:j + 1], b[:, j:j + 1], pp)[0] == both[j]
    # one microbatch: fill and drain over every stage plus 2·(pp−1) transfers
    x = 0.05
    assert makespan([[1.0]], [[2.0]], pp, xfer_s=x)[0] == pytest.approx(pp * 3.0 + 2 * (pp - 1) * x)
    # interleaved, one microbatch per... (m = pp): the wrap-around transfers count too
    s = pipeline_schedule(2, 2, 2)
    _, fin = chain_times(s, np.full((4, 2, 1), 1.0), np.full((4, 2, 1), 1.0), np.full((3, 2, 1), x))
    _, fin0 = chain_times(s, np.full((4, 2, 1), 1.0), np.full((4, 2, 1), 1.0), None)
    assert fin[s.last].max() >= fin0[s.last].max() + 2 * 3 * x - 1e-12


# ------------------------------------------------------------------ the rule
def test_microbatch_rule():
    assert microbatch_rule_violation(5, 4, 1) is None
    assert microbatch_rule_violation(8, 4, 2) is None
    assert "multiple of pp" in microbatch_rule_violation(2, 4, 2)
    assert "last group of 2" in microbatch_rule_violation(6, 4, 2)
    assert microbatch_rule_violation(9, 4, 2, group=5) is None  # 9 mod 5 = 4 >= pp
    with pytest.raises(InfeasibleError, match="pipeline"):
        check_microbatches(6, 4, 2)
    with pytest.raises(InfeasibleError):
        stage_order(0, 4, 6, 2)
    assert valid_microbatch_count(5, 4, 2) == 8 and valid_microbatch_count(5, 4, 1) == 5
    assert vp_from_layers_per_virtual_stage(40, 4, 5) == 2
    with pytest.raises(ConfigError, match="num_layers_per_virtual_pipeline_stage"):
        vp_from_layers_per_virtual_stage(40, 4, 3)


# ------------------------------------------------------------------ the simulator runs it
def _equal_plan(lay: Layout, m: int, L: int):
    from dcpsim.policies.plan import Group, Plan, Step

    c, dp = lay.cp, lay.dp
    steps = [Step([Group(d * c, c, [k * dp + d]) for d in range(dp)]) for k in range(m)]
    return Plan("equal", lay, np.full(m * dp, L, dtype=np.int64), steps, dynamic=False)


@pytest.mark.parametrize("pp,vp,m", [(4, 2, 8), (4, 4, 4), (2, 3, 6), (8, 2, 16)])
def test_simulated_interleaved_bubble_closed_form(pp, vp, m):
    tf, tb = 0.3, 0.7
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=65536, pp=pp, vp=vp)
    plan = _equal_plan(lay, m, 4096)
    sim = ClusterSimulator(CostModel.build("h100-sxm", "llama-13b", pp=pp, dp_cp=2), Topology(tp=1, pp=pp, dp=2, cp=1, vp=vp))
    table = build_group_table(plan)
    work = sim.durations.work(plan, table)
    work.fwd_s[:] = tf
    work.bwd_s[:] = tb
    work.head_fwd_s[:] = 0.0
    work.head_bwd_s[:] = 0.0
    work.embed_fwd_s[:] = 0.0
    work.embed_bwd_s[:] = 0.0
    work.xfer_s = np.zeros(work.xfer_s.shape)  # (a read-only broadcast row when every link is alike)
    graph = build_graph(table, pipeline_schedule(pp, m, vp), work.virtual()[2])
    tl = run_iteration(work, graph, sim.sync, overlap_grad_sync=False)
    ideal = m * (tf + tb)
    assert (tl.bwd_end_s.max() - ideal) / ideal == pytest.approx((pp - 1) / (vp * m), rel=1e-9)


def test_interleaved_run_from_config_and_rule_error():
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import build_cost_model, build_layout, run_simulation

    def cfg(vp):
        return config_from_dict({"cluster": {"gpus": 32}, "parallel": {"pp": 4, "cp": 2, "vp": vp},
                                 "sim": {"iterations": 1, "planning": "ignore"}})

    times = {}
    for vp in (1, 2):
        c = cfg(vp)
        lay = build_layout(c, build_cost_model(c))
        assert lay.vp == vp
        res = run_simulation(c, plans=[_equal_plan(lay, 8, 16384)])
        times[vp] = res.iterations.iloc[0]
        assert res.meta["topology"]["vp"] == vp
    # smaller bubble, more transfers (each chunk sends its activations on)
    assert times[2].bubble_s < times[1].bubble_s
    assert times[2].iteration_time_s < times[1].iteration_time_s
    c = cfg(2)
    lay = build_layout(c, build_cost_model(c))
    with pytest.raises(InfeasibleError, match="multiple of pp|last group"):
        run_simulation(c, plans=[_equal_plan(lay, 6, 16384)])


# ------------------------------------------------------------------ policies score with the same schedule
def test_evaluate_plan_is_the_schedule_makespan():
    from dcpsim.policies import evaluate_plan

    pp, dp, m, L = 4, 2, 8, 8192
    cost = CostModel.build("h100-sxm", "llama-13b", pp=pp, dp_cp=dp)
    for vp in (1, 2):
        lay = Layout(dp=dp, cp=1, max_tokens_per_rank=65536, pp=pp, vp=vp)
        plan = _equal_plan(lay, m, L)
        pc = cost.pack_cost([L], 1, spans_network=False)
        ev = evaluate_plan(plan, cost)
        assert ev.makespan_s == pytest.approx((m + (pp - 1) / vp) * (pc.fwd_s + pc.bwd_s), rel=1e-9)


def test_policies_pad_steps_for_the_interleaved_rule():
    from dcpsim.policies import get_policy
    from dcpsim.workload import get_workload, sample_global_batch

    lengths = sample_global_batch(get_workload("github", min_len=256, max_len=32768), 64, np.random.default_rng(0))
    cost = CostModel.build("h100-sxm", "llama-13b", pp=4, dp_cp=8)
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=32768, pp=4, vp=2)
    for name in ("packing", "dynamic"):
        plan = get_policy(name).plan(lengths, lay, cost)
        assert microbatch_rule_violation(plan.n_steps, 4, 2) is None
        assert plan.meta.get("padding_steps", 0) >= 0
        topo = Topology(tp=1, pp=4, dp=4, cp=2, vp=2)
        rec = ClusterSimulator(cost, topo).simulate(plan)
        assert rec.timeline.makespan_s > 0


# ------------------------------------------------------------------ scale: the bound on distinct lengths
def test_bound_terms_equal_the_per_sequence_definition():
    """bound_terms (distinct lengths, attention-only W, t1 from the longest) equals the definition evaluated
    sequence by sequence on every size, inside and across the domain."""
    from dcpsim.cost.padding import per_rank_tokens
    from dcpsim.policies.bound import _span_options, bound_terms, dynamic_sizes, min_linear_s_per_token
    from dcpsim.policies.costs import split_parts

    rng = np.random.default_rng(5)
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=16384, pp=4)
    cost = CostModel.build("h100-sxm", "llama-13b", pp=4, dp_cp=8)
    L = np.concatenate([rng.integers(256, 60000, 40), [1000, 1000, 60000]])
    got = bound_terms(L, lay, cost)
    dyn = dynamic_sizes(lay)
    sizes = np.unique(np.concatenate([dyn, [lay.cp]]))
    ns, n = sizes.size, L.size
    bc = cost.batch_cost(np.tile(L, 2 * ns), np.arange(2 * ns * n), np.tile(np.repeat(sizes, n), 2),
                         np.repeat([False, True], ns * n))
    tok = per_rank_tokens(L[None, :], sizes[:, None])
    lo = split_parts(bc, cost.recompute)[0][: ns * n].reshape(ns, n) + min_linear_s_per_token(cost, 16384) * tok
    inside, across = _span_options(lay, sizes, dyn)
    t_in = np.where(inside[:, None], bc.total_s[: ns * n].reshape(ns, n), np.inf)
    t_out = np.where(across[:, None], bc.total_s[ns * n:].reshape(ns, n), np.inf)
    fits = tok <= 16384
    gpu = np.where(fits, lo * sizes[:, None], np.inf)
    per = np.where(fits, np.maximum(lo, np.minimum(t_in, t_out)), np.inf)
    for scope, allowed in (("any", np.ones(ns, bool)), ("dynamic", np.isin(sizes, dyn)), ("static", sizes == lay.cp)):
        want = (gpu[allowed].min(axis=0).sum() / 8, per[allowed].min(axis=0).max())
        assert got[scope] == pytest.approx(want, rel=1e-12)


def test_interleaving_holds_more_activations_on_the_first_stage():
    from dcpsim.pipeline import activations_in_flight
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import build_cost_model

    assert activations_in_flight(8, 1) == 8
    assert activations_in_flight(8, 2) == pytest.approx(8 * (1 + 7 / 16))  # Narayanan et al.: 1 + (p-1)/(p*v)
    mem = {}
    for vp in (1, 2):
        # pp 4: 10 layers per stage, two chunks of 5 (vp must divide a stage's layers)
        c = build_cost_model(config_from_dict({"cluster": {"gpus": 64}, "parallel": {"pp": 4, "cp": 2, "vp": vp}}))
        mem[vp] = c.peak_memory_bytes(np.array([0.0, 8192.0]))
    assert mem[2][0] == mem[1][0]  # model states unchanged
    assert mem[2][1] > mem[1][1]
    from dcpsim.model import MemorySettings, get_model, memory_per_gpu

    st = MemorySettings(tp=1, pp=4, dp=16, cp=1, recompute="full", microbatches_in_flight=activations_in_flight(4, 2))
    want = memory_per_gpu(get_model("llama-13b"), st, tokens_per_rank=8192).total_bytes
    assert mem[2][1] == pytest.approx(want, rel=1e-12)
