"""The SimPy cluster simulator: closed forms, schedule invariants, determinism, conservation, traces, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.cost import CostModel, group_collective_time_s
from dcpsim.cost.padding import per_rank_tokens_int
from dcpsim.errors import ConfigError
from dcpsim.pipeline import BWD, FWD, pipeline_schedule, stage_order
from dcpsim.policies.plan import Group, Layout, Plan, Step
from dcpsim.run import config_from_dict
from dcpsim.run.single import build_cost_model, build_layout, run_simulation
from dcpsim.sim import (
    BREAKDOWN,
    ClusterSimulator,
    SimSettings,
    Topology,
    build_graph,
    build_group_table,
    rank_arrays,
    run_iteration,
)
from dcpsim.sim.durations import KERNELS_ITERATION, OPTIMIZER_BYTES_PER_PARAM


# ------------------------------------------------------------------ plan builders
def static_plan(lengths, layout: Layout, policy: str = "static-test") -> Plan:
    """Next-fit packing into bins of M·CP tokens, bins dealt to DP ranks (microbatch i, DP rank j: bin i·DP + j)."""
    c = layout.cp
    cap = layout.max_tokens_per_rank * c
    bins, cur, tok = [], [], 0
    for i, L in enumerate(lengths):
        padded = int(math.ceil(L / (2 * c)) * 2 * c) if c > 1 else int(L)
        if cur and tok + padded > cap:
            bins.append(cur)
            cur, tok = [], 0
        cur.append(i)
        tok += padded
    if cur:
        bins.append(cur)
    while len(bins) % layout.dp:
        bins.append([])
    steps = [Step([Group(d * c, c, bins[k * layout.dp + d]) for d in range(layout.dp)])
             for k in range(len(bins) // layout.dp)]
    return Plan(policy, layout, np.asarray(lengths, dtype=np.int64), steps, dynamic=False)


def dynamic_plan(lengths, layout: Layout) -> Plan:
    """A simple dynamic-CP plan: each long sequence gets the smallest power-of-two CP that holds it, on an
    aligned block of the first step with room; short ones are packed first-fit onto single ranks."""
    M, R = layout.max_tokens_per_rank, layout.ranks_per_stage
    lengths = np.asarray(lengths, dtype=np.int64)
    steps: list[list[Group]] = []
    used: list[np.ndarray] = []
    load: list[dict[int, int]] = []  # per step: single-rank group index -> tokens

    def cp_of(L: int) -> int:
        c = max(layout.min_cp, 1)
        while per_rank_tokens_int(L, c) > M:
            c *= 2
        return c

    def place(k: int, i: int, L: int, c: int) -> bool:
        """Join a single-rank group of step k with room, or open a group on a free aligned block of it."""
        if c == 1:
            for gi, t in load[k].items():
                if t + L <= M:
                    steps[k][gi].seq_ids.append(i)
                    load[k][gi] = t + L
                    return True
        for s in range(0, R, c):
            if not used[k][s:s + c].any():
                used[k][s:s + c] = True
                steps[k].append(Group(s, c, [i]))
                if c == 1:
                    load[k][len(steps[k]) - 1] = L
                return True
        return False

    for i in np.argsort(-lengths, kind="stable"):
        L, c = int(lengths[i]), cp_of(int(lengths[i]))
        if not any(place(k, int(i), L, c) for k in range(len(steps))):
            steps.append([Group(0, c, [int(i)])])
            used.append(np.zeros(R, dtype=bool))
            used[-1][:c] = True
            load.append({0: L} if c == 1 else {})
    return Plan("dynamic-test", layout, lengths, [Step(g) for g in steps], dynamic=True)


def equal_plan(layout: Layout, m: int, L: int) -> Plan:
    """Every group of every step holds one sequence of L tokens (static CP)."""
    c, dp = layout.cp, layout.dp
    steps = [Step([Group(d * c, c, [k * dp + d]) for d in range(dp)]) for k in range(m)]
    return Plan("equal", layout, np.full(m * dp, L, dtype=np.int64), steps, dynamic=False)


def cfg_for(**over) -> object:
    d: dict = {"sim": {"iterations": 1, "planning": "ignore", "host_timeline": False}}  # device mechanisms alone
    for path, v in over.items():
        sec, key = path.split("__")
        d.setdefault(sec, {})[key] = v
    return config_from_dict(d)


def github_batch(n: int, seed: int = 0, max_len: int = 131072) -> np.ndarray:
    from dcpsim.workload import get_workload, sample_global_batch

    return sample_global_batch(get_workload("github", min_len=256, max_len=max_len), n, np.random.default_rng(seed))


def _sim_for(cfg) -> tuple[ClusterSimulator, Layout, CostModel]:
    from dcpsim.run.single import build_simulator

    cost = build_cost_model(cfg)
    return build_simulator(cfg, cost), build_layout(cfg, cost), cost


# ------------------------------------------------------------------ closed forms
def _synthetic(pp: int, m: int, dp: int, tf: float, tb: float, x: float):
    lay = Layout(dp=dp, cp=1, max_tokens_per_rank=65536, pp=pp)
    plan = equal_plan(lay, m, 4096)
    sim = ClusterSimulator(CostModel.build("h100-sxm", "llama-13b", pp=pp, dp_cp=dp), Topology(tp=1, pp=pp, dp=dp, cp=1))
    table = build_group_table(plan)
    work = sim.durations.work(plan, table)
    work.fwd_s[:] = tf
    work.bwd_s[:] = tb
    work.xfer_s = np.full(work.xfer_s.shape, x)  # (a read-only broadcast row when every link is alike)
    graph = build_graph(table, pipeline_schedule(pp, table.n_steps), work.virtual()[2])
    return run_iteration(work, graph, sim.sync, overlap_grad_sync=False), sim


@settings(max_examples=40, deadline=None)
@given(pp=st.sampled_from([1, 2, 4, 5, 8]), m=st.integers(1, 12), dp=st.integers(1, 3),
       tf=st.floats(0.01, 2.0), tb=st.floats(0.01, 4.0))
def test_1f1b_equals_closed_form_without_transfers(pp, m, dp, tf, tb):
    tl, sim = _synthetic(pp, m, dp, tf, tb, 0.0)
    pipe = (m + pp - 1) * (tf + tb)
    assert tl.bwd_end_s.max() == pytest.approx(pipe, rel=1e-12)
    sync = sim.sync.reduce_scatter_s + sim.sync.optimizer_s + sim.sync.all_gather_s
    assert tl.makespan_s == pytest.approx(float(np.max(tl.bwd_end_s + sync)), rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(pp=st.sampled_from([2, 4, 8]), tf=st.floats(0.01, 2.0), tb=st.floats(0.01, 4.0), x=st.floats(1e-4, 0.5))
def test_single_microbatch_pipeline_with_transfers(pp, tf, tb, x):
    tl, _ = _synthetic(pp, 1, 2, tf, tb, x)
    assert tl.bwd_end_s[0] == pytest.approx(pp * (tf + tb) + 2 * (pp - 1) * x, rel=1e-12)


def _stage_params_independent(cost: CostModel, p: int) -> float:
    m = cost.model
    n = cost.layers_per_stage * (m.linear_params_per_layer() + 2 * m.hidden)
    if p == 0:
        n += m.vocab * m.hidden
    if p == cost.pp - 1:
        n += m.vocab * m.hidden + m.hidden
    return n


def test_run_simulation_matches_closed_form_with_real_costs():
    """Equal lengths, no noise: 1F1B with a heavier last stage (output layer), p2p transfers, grad sync."""
    pp, cp, dp, m, L = 4, 2, 4, 6, 16384
    cfg = cfg_for(cluster__gpus=pp * cp * dp, parallel__pp=pp, parallel__cp=cp, sim__overlap_grad_sync=False,
                  sim__overlap_param_gather=False)
    cost = build_cost_model(cfg)
    lay = build_layout(cfg, cost)
    res = run_simulation(cfg, plans=[equal_plan(lay, m, L)])
    it = res.iterations.iloc[0]
    # per-op costs straight from the cost model (one pack, within one NVLink domain)
    pc = cost.pack_cost([L], cp, spans_network=False)
    tf = np.full(pp, pc.fwd_s)
    tb = np.full(pp, pc.bwd_s)
    tf[0] += pc.embed_fwd_s
    tb[0] += pc.embed_bwd_s
    tf[-1] += pc.head_fwd_s
    tb[-1] += pc.head_bwd_s
    prof = cost.profile
    nbytes = pc.local_tokens * cost.model.hidden * 2.0
    # stage p occupies node p (8 GPUs), so every activation transfer leaves the NVLink domain
    x = float(prof.collective_time_s("sendrecv", "network", nbytes, 2))
    assert 2 * x <= (tf[-1] + tb[-1]) - (tf[0] + tb[0])  # the last stage is the bottleneck: no transfer stalls
    pipe = tf.sum() + tb.sum() + (m - 1) * (tf[-1] + tb[-1]) + 2 * (pp - 1) * x
    sync = []
    for p in range(pp):
        n = _stage_params_independent(cost, p)
        nb = math.ceil(n / max(40e6, 1e6 * dp * cp)) if p == 0 else 1  # Megatron buckets the first stage only
        rs = nb * float(group_collective_time_s(prof, "reduce_scatter", 4 * n / nb, dp * cp, domains=1))
        ag = nb * float(group_collective_time_s(prof, "all_gather", 2 * n / nb, dp * cp, domains=1))
        opt = (n / (dp * cp) * (OPTIMIZER_BYTES_PER_PARAM + 4) + 4 * n) / prof.hbm_bw_bytes_per_s
        sync.append(rs + ag + opt + KERNELS_ITERATION * prof.timing.per_kernel_overhead_s)
    rec = res.records[0]
    assert rec.timeline.bwd_end_s[0] == pytest.approx(pipe, rel=1e-12)
    expect = max(rec.timeline.bwd_end_s[p] + sync[p] for p in range(pp))
    assert it.iteration_time_s == pytest.approx(expect, rel=1e-12)
    assert rec.timeline.bwd_end_s[0] + sync[0] == pytest.approx(expect, rel=1e-12)
    # equal microbatches: the idle is all pipeline bubble, apart from waiting for the slowest stage's sync
    assert it.imbalance_s <= (max(sync) - min(sync)) + 1e-9
    assert it.tflops_per_gpu == pytest.approx(cost.model.flops(np.full(m * dp, L)) / (expect * pp * cp * dp * 1e12))


def test_pp1_ring_across_nodes_matches_pack_cost():
    """pp=1, cp=16 over two nodes: per-op time is the pack cost with the network ring; m ops back to back."""
    cfg = cfg_for(cluster__gpus=32, parallel__pp=1, parallel__cp=16, sim__overlap_grad_sync=False,
                  sim__overlap_param_gather=False)  # the all-gather after the optimizer, not in the first forward
    cost = build_cost_model(cfg)
    lay = build_layout(cfg, cost)
    m, L = 3, 65536
    # timing mechanics only: 13B on pp=1 does not fit in memory (the summary says so)
    res = run_simulation(cfg, plans=[equal_plan(lay, m, L)], allow_infeasible=True)
    assert res.summary["status"] == "infeasible" and "model states" in res.summary["reason"]
    pc = cost.pack_cost([L], 16, spans_network=True, check_memory=False)
    assert pc.cp_fwd_exposed_s + pc.cp_bwd_exposed_s > 0
    rec = res.records[0]
    one = pc.total_s + pc.head_fwd_s + pc.head_bwd_s + pc.embed_fwd_s + pc.embed_bwd_s  # pp=1: first and last stage
    assert rec.timeline.bwd_end_s[0] == pytest.approx(m * one, rel=1e-12)
    assert res.iterations.iloc[0].cp_comm_s == pytest.approx(m * (pc.cp_fwd_exposed_s + pc.cp_bwd_exposed_s), rel=1e-12)
    assert res.iterations.iloc[0].network_groups == m * 2  # every group of both DP ranks leaves its node


# ------------------------------------------------------------------ schedule invariants
def _check_timeline(rec, pp: int, vp: int = 1) -> None:
    """Every op starts exactly when its last dependency is met; each rank runs its ops in the schedule's order, one at a time."""
    w, tl = rec.work, rec.timeline
    gid, S, R = w.table.gid, w.table.n_steps, w.table.ranks
    f, b, x = w.virtual()
    V = pp * vp
    for p in range(pp):
        prev_fin = np.zeros(R)
        for d, k, c in stage_order(p, pp, S, vp).tolist():
            s = c * pp + p
            g_of_r = gid[k]
            for g in np.unique(g_of_r[g_of_r >= 0]):
                members = np.nonzero(g_of_r == g)[0]
                ready = prev_fin[members].max()
                if d == FWD and s > 0:
                    ready = max(ready, tl.finish[s - 1, FWD, g] + x[s - 1, g])
                if d == BWD and s < V - 1:
                    ready = max(ready, tl.finish[s + 1, BWD, g] + x[s, g])
                assert tl.start[s, d, g] == pytest.approx(ready, abs=1e-12)
                dur = f[s, g] if d == FWD else b[s, g]
                assert tl.finish[s, d, g] == pytest.approx(tl.start[s, d, g] + dur, abs=1e-12)
                prev_fin[members] = tl.finish[s, d, g]


@pytest.mark.parametrize("engine", ["events", "fast"])
@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_schedule_invariants_hold(kind, engine):
    cfg = cfg_for(cluster__gpus=64, parallel__pp=4, parallel__cp=2, parallel__max_tokens_per_rank=16384,
                  sim__noise_cv=0.2, sim__straggler_fraction=0.05, sim__straggler_slowdown=1.5, sim__engine=engine,
                  sim__overlap_param_gather=False)  # first forwards without the all-gather wait (tests/test_network.py)
    sim, lay, _ = _sim_for(cfg)
    lengths = github_batch(96, seed=3, max_len=120000)
    plan = (static_plan if kind == "static" else dynamic_plan)(lengths, lay)
    rec = sim.simulate(plan, rng=np.random.default_rng(0))
    _check_timeline(rec, 4)
    if kind == "dynamic":
        assert len(np.unique(rec.work.table.size)) > 1  # groups of several CP sizes, regrouped between steps


def test_dynamic_regrouping_waits_for_all_members():
    """Step 0: four single-rank groups of unequal work; step 1: one group over all four waits for the slowest."""
    lay = Layout(dp=4, cp=1, max_tokens_per_rank=65536, pp=1)
    lengths = np.array([1000, 8000, 2000, 30000, 60000])
    plan = Plan("hand", lay, lengths, [Step([Group(r, 1, [r]) for r in range(4)]), Step([Group(0, 4, [4])])], dynamic=True)
    sim = ClusterSimulator(CostModel.build("h100-sxm", "llama-13b", pp=1, dp_cp=4), Topology(tp=1, pp=1, dp=4, cp=1))
    rec = sim.simulate(plan)
    tl = rec.timeline
    slowest = tl.finish[0, BWD, :4].max()
    assert slowest == pytest.approx(tl.finish[0, BWD, 3])
    assert tl.start[0, FWD, 4] == pytest.approx(slowest)
    ra = rank_arrays(rec)
    assert ra["imbalance_s"][0, 0] > 0 and ra["imbalance_s"][0, 3] == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ accounting
def test_breakdown_sums_to_iteration_time_and_conserves_work():
    cfg = cfg_for(cluster__gpus=64, sim__planning="stall", sim__iterations=2, sim__engine="events")
    cost = build_cost_model(cfg)
    lay = build_layout(cfg, cost)
    batches = [github_batch(256, seed=s) for s in (1, 2)]
    plans = [static_plan(b, lay) for b in batches]
    plans[1].planning_time_s = 0.25
    res = run_simulation(cfg, plans=plans)
    it, rk = res.iterations, res.ranks
    parts = it[list(BREAKDOWN)].sum(axis=1)
    assert np.allclose(parts, it.iteration_time_s, rtol=1e-12)
    assert np.allclose(rk[list(BREAKDOWN)].sum(axis=1), rk.iteration_time_s, rtol=1e-12)
    assert (rk[list(BREAKDOWN)] >= -1e-12).all().all()
    assert it.planning_stall_s.tolist() == [0.0, 0.25]
    for i, b in enumerate(batches):
        assert it.flops[i] == pytest.approx(cost.model.flops(b), rel=1e-12)
        assert it.sequences[i] == len(b) and it.tokens[i] == b.sum()
        # every sequence ran exactly once: stage-0 forwards over real groups cover each id once
        ids = np.concatenate([g.seq_ids for st in plans[i].steps for g in st.groups])
        assert np.array_equal(np.sort(ids), np.arange(len(b)))
    assert len(rk) == 2 * 64  # one row per stage rank (tp=1) per iteration
    s = res.summary
    assert s["tflops_per_gpu"] == pytest.approx(it.flops.sum() / (it.iteration_time_s.sum() * 64 * 1e12))
    assert s["mfu"] == pytest.approx(s["tflops_per_gpu"] * 1e12 / cost.profile.peak_bf16_flops)
    assert s["events"] == it.events.sum() > 0 and s["events_per_s"] > 0


def test_offsets_accumulate_over_iterations():
    cfg = cfg_for(cluster__gpus=64, sim__iterations=3)
    lay = build_layout(cfg, build_cost_model(cfg))
    res = run_simulation(cfg, plans=[static_plan(github_batch(128, seed=s), lay) for s in range(3)])
    offs = [r.offset_s for r in res.records]
    assert offs[0] == 0 and offs[1] == pytest.approx(res.iterations.iteration_time_s[0])
    assert offs[2] == pytest.approx(res.iterations.iteration_time_s[:2].sum())


# ------------------------------------------------------------------ variability and determinism
def _noisy_cfg(seed: int, noise: bool):
    extra = dict(sim__noise_cv=0.1, sim__straggler_fraction=0.1, sim__straggler_slowdown=1.3,
                 sim__degraded_link_scale=0.5) if noise else {}
    return cfg_for(cluster__gpus=64, parallel__pp=2, parallel__cp=8, parallel__max_tokens_per_rank=16384,
                   sim__seed=seed, sim__iterations=2, **extra)


def _run_fixed(cfg):
    lay = build_layout(cfg, build_cost_model(cfg))
    return run_simulation(cfg, plans=[static_plan(github_batch(128, seed=s), lay) for s in (5, 6)])


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in ("sim_wall_s", "planning_time_s") if c in df])


def test_same_seed_same_result_and_noise_only_where_enabled():
    a, b = _run_fixed(_noisy_cfg(1, True)), _run_fixed(_noisy_cfg(1, True))
    pd.testing.assert_frame_equal(_numeric(a.iterations), _numeric(b.iterations))
    pd.testing.assert_frame_equal(a.ranks, b.ranks)
    c = _run_fixed(_noisy_cfg(2, True))
    assert not np.allclose(a.iterations.iteration_time_s, c.iterations.iteration_time_s)
    # noise off: with the same batches the seed changes nothing
    q1, q2 = _run_fixed(_noisy_cfg(1, False)), _run_fixed(_noisy_cfg(2, False))
    pd.testing.assert_frame_equal(_numeric(q1.iterations), _numeric(q2.iterations))
    assert (a.iterations.iteration_time_s > q1.iterations.iteration_time_s).all()


def test_seed_changes_the_sampled_batches_only(monkeypatch):
    """With noise off and the workload sampled, two seeds give two batches (and nothing else random)."""
    import dcpsim.run.single as single

    class Static:
        def plan(self, lengths, layout, cost, rng=None):
            return static_plan(lengths, layout, "static-test")

    monkeypatch.setattr(single, "_get_policy", lambda cfg: Static())
    r1 = run_simulation(cfg_for(cluster__gpus=64, workload__gbs=128, sim__seed=1))
    r1b = run_simulation(cfg_for(cluster__gpus=64, workload__gbs=128, sim__seed=1))
    r2 = run_simulation(cfg_for(cluster__gpus=64, workload__gbs=128, sim__seed=2))
    assert r1.iterations.tokens[0] == r1b.iterations.tokens[0] != r2.iterations.tokens[0]
    assert r1.iterations.iteration_time_s[0] == r1b.iterations.iteration_time_s[0]


def test_stragglers_and_slow_network_slow_things_down():
    cfg = cfg_for(cluster__gpus=64, parallel__pp=2, parallel__cp=16, parallel__max_tokens_per_rank=8192)
    lay = build_layout(cfg, build_cost_model(cfg))
    plan = static_plan(github_batch(256, seed=9), lay)
    assert plan.n_steps > 1

    def t(**over):
        return run_simulation(cfg.with_updates(over), plans=[plan]).iterations.iteration_time_s[0]

    base = t()
    assert t(**{"sim.straggler_fraction": 0.05, "sim.straggler_slowdown": 2.0}) > base
    assert t(**{"hardware.network_scale": 0.25}) > base
    assert t(**{"hardware.pod_gpus": 8, "hardware.oversubscription": 4.0}) > base
    assert t(**{"hardware.nvlink_domain_gpus": 72}) < base  # NVL72: the cp16 rings stay on NVLink


def test_degraded_link_hits_only_groups_that_touch_it():
    topo = Topology(tp=1, pp=2, dp=2, cp=16, degraded_gpu=5, degraded_link_scale=0.25)
    f = topo.group_network_factor(0, np.array([0, 16]), np.array([16, 16]))
    assert f.tolist() == [0.25, 1.0]
    assert topo.stage_dp_group(0)[2] == 0.25 and topo.stage_dp_group(1)[2] == 1.0
    cross, fac = topo.p2p_links(0)
    assert cross.all() and fac[5] == 0.25 and (np.delete(fac, 5) == 1.0).all()


def test_megatron_rank_order_and_spans():
    topo = Topology(tp=2, pp=2, dp=2, cp=4)  # 32 GPUs, 8 per domain
    assert topo.gpu_id(1, 3, 1) == 1 + 2 * 3 + 2 * 8 * 1
    # stage rank 0..3 with tp2 covers GPUs 0..7 (one node); a cp8 group covers two nodes
    assert topo.group_spans_network(0, np.array([0, 4, 0]), np.array([4, 4, 8])).tolist() == [False, False, True]
    assert topo.stage_dp_group(0)[:2] == (8, 2)


# ------------------------------------------------------------------ results, trace, bound, errors
def test_write_and_trace_schema(tmp_path):
    cfg = cfg_for(cluster__gpus=64, sim__iterations=2)
    lay = build_layout(cfg, build_cost_model(cfg))
    plans = [dynamic_plan(github_batch(128, seed=s), lay) for s in (1, 2)]
    plans[1].planning_time_s = 500.0  # longer than iteration 0: stalls iteration 1 under planning = "hidden"
    cfg = cfg.with_updates({"sim.planning": "hidden"})
    trace = tmp_path / "t" / "trace.json"
    res = run_simulation(cfg, plans=plans, trace_path=trace)
    paths = res.write(tmp_path / "out")
    assert pd.read_parquet(paths["iterations"]).shape[0] == 2
    assert pd.read_parquet(paths["ranks"]).shape[0] == 2 * 64
    conf = json.loads(paths["config"].read_text())
    assert conf["config_hash"] == cfg.config_hash() and conf["config"]["cluster"]["gpus"] == 64
    assert json.loads(paths["summary"].read_text())["summary"]["events"] == res.summary["events"]
    doc = json.loads(trace.read_text())
    _check_chrome_trace(doc, max_tracks=64)
    stall = res.iterations.planning_stall_s
    assert stall[0] == 0 and stall[1] == pytest.approx(500.0 - res.iterations.iteration_time_s[0])
    assert any(e.get("cat") == "planning_stall" for e in doc["traceEvents"])


def _check_chrome_trace(doc: dict, max_tracks: int) -> None:
    assert set(doc) >= {"traceEvents", "displayTimeUnit"} and doc["displayTimeUnit"] in ("ms", "ns")
    evs = doc["traceEvents"]
    assert isinstance(evs, list) and evs
    tracks, named = set(), set()
    it_pid = next(e["pid"] for e in evs if e["name"] == "process_name" and e["args"]["name"] == "iterations")
    n_x = 0
    for e in evs:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            n_x += 1
            assert isinstance(e["cat"], str)
            assert isinstance(e["ts"], (int, float)) and math.isfinite(e["ts"]) and e["ts"] >= 0
            assert isinstance(e["dur"], (int, float)) and math.isfinite(e["dur"]) and e["dur"] >= 0
            assert isinstance(e.get("args", {}), dict)
            tracks.add((e["pid"], e["tid"]))
        else:
            assert e["name"] in ("process_name", "thread_name", "process_sort_index") and isinstance(e["args"], dict)
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
    assert n_x > 0
    assert tracks <= named  # every track is named
    rank_tracks = {t for t in tracks if t[0] != it_pid}
    assert 0 < len(rank_tracks) <= max_tracks
    assert tracks - rank_tracks <= {(it_pid, 0), (it_pid, 1)}  # iterations and planning stalls
    # ops on a rank's track never overlap (viewers need proper nesting)
    for t in rank_tracks:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs if e["ph"] == "X" and (e["pid"], e["tid"]) == t)
        assert all(b0 <= a1 + 1e-6 for (_, b0), (a1, _) in zip(spans[:-1], spans[1:], strict=True))


def test_static_and_dynamic_at_16k_gpus(tmp_path):
    cfg = cfg_for(cluster__gpus=16384, parallel__pp=8, parallel__cp=8)
    lay = build_layout(cfg, build_cost_model(cfg))
    lengths = github_batch(2048, seed=0)
    out = {}
    for kind, fn in (("static", static_plan), ("dynamic", dynamic_plan)):
        trace = tmp_path / f"{kind}.json"
        res = run_simulation(cfg, plans=[fn(lengths, lay)], trace_path=trace)
        assert res.summary["gpus"] == 16384 and res.iterations.sequences[0] == 2048
        assert len(res.ranks) == 16384
        doc = json.loads(trace.read_text())
        _check_chrome_trace(doc, max_tracks=64)
        out[kind] = res.summary
    assert out["dynamic"]["max_cp"] < out["static"]["max_cp"] or out["dynamic"]["mean_cp"] < 8


def test_bound_plan_is_reported_not_simulated():
    cfg = cfg_for(cluster__gpus=64)
    lay = build_layout(cfg, build_cost_model(cfg))
    lengths = github_batch(64, seed=4)
    bound = Plan("bound", lay, lengths, [], dynamic=True, dropped={i: "bound: not scheduled" for i in range(64)},
                 lower_bound_s=1.5)
    res = run_simulation(cfg, plans=[bound])
    row = res.iterations.iloc[0]
    assert not row.simulated and row.iteration_time_s == 1.5 and np.isnan(row.compute_s)
    assert row.tflops_per_gpu == pytest.approx(build_cost_model(cfg).model.flops(lengths) / (1.5 * 64e12))
    assert res.summary["tflops_per_gpu"] == pytest.approx(row.tflops_per_gpu) and np.isnan(res.summary["frac_bubble"])
    assert len(res.ranks) == 0
    with pytest.raises(ConfigError, match="policy.name"):
        run_simulation(cfg, plans=[Plan("none", lay, lengths, [], dynamic=True)])


def test_mismatched_layout_and_bad_options_name_the_field():
    cfg = cfg_for(cluster__gpus=64)
    sim, lay, _ = _sim_for(cfg)
    other = Layout(dp=4, cp=1, max_tokens_per_rank=65536, pp=8)  # 4 ranks per stage, the cluster has 8
    with pytest.raises(ConfigError, match="plan.layout"):
        sim.simulate(equal_plan(other, 1, 1024))
    with pytest.raises(ConfigError, match="sim.planning"):
        SimSettings(planning="later")
    with pytest.raises(ConfigError, match="hardware.nvlink_domain_gpus"):
        config_from_dict({"hardware": {"nvlink_domain_gpus": -1}})


def test_simulate_cli(tmp_path, capsys):
    from dcpsim.cli import main

    run = tmp_path / "run.toml"
    run.write_text('[cluster]\ngpus = 64\n[workload]\ngbs = 128\n[policy]\nname = "packing"\n')
    out = tmp_path / "out"
    rc = main(["simulate", str(run), "--out", str(out), "--trace", str(tmp_path / "tr.json"), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["policy"] == "packing" and doc["summary"]["tflops_per_gpu"] > 0
    assert (out / "iterations.parquet").is_file() and (tmp_path / "tr.json").is_file()
    assert main(["simulate", str(run), "--iterations", "0"]) == 2


def test_nvlink_span_one_rule_for_policies_and_sim():
    """dp 12, pp 2, domain 8: ranks [0, 8) are GPUs 0-7 on stage 0 (one domain) but 12-19 on stage 1 (two)."""
    from dcpsim.policies import Layout

    lay = Layout(dp=12, cp=1, max_tokens_per_rank=1024, pp=2, gpus_per_domain=8)
    topo = Topology(tp=1, pp=2, dp=12, cp=1, nvlink_domain_gpus=8)
    assert not topo.group_spans_network(0, 0, 8) and topo.group_spans_network(1, 0, 8)
    for stage in (0, 1):
        assert bool(lay.spans_network(0, 8, stage=stage)) == bool(topo.group_spans_network(stage, 0, 8))
    assert bool(lay.spans_network(0, 8))  # the policies' view: it leaves a domain on some stage
    # every aligned slice, several shapes: the policies' view is the OR of the sim's per-stage answers
    for tp, dp, cp, pp in ((1, 12, 1, 2), (2, 3, 2, 4), (1, 6, 2, 3), (4, 5, 1, 2)):
        lay = Layout(dp=dp, cp=cp, max_tokens_per_rank=1024, tp=tp, pp=pp, gpus_per_domain=8)
        topo = Topology(tp=tp, pp=pp, dp=dp, cp=cp, nvlink_domain_gpus=8)
        R = dp * cp
        for c in (1, 2, 4, 8):
            starts = np.arange(0, R - c + 1, c)
            per_stage = np.array([topo.group_spans_network(p, starts, c) for p in range(pp)])
            assert (lay.spans_network(starts, c) == per_stage.any(axis=0)).all()


def test_layout_memo_of_a_reused_simulator_gives_fresh_results():
    """A simulator keeps what depends on the group layout alone (CP spans and factors, pipeline links, host ops)
    per layout, read-only: simulating plans again on it (a sweep task's runs) gives what a fresh simulator
    gives, with pods, a degraded link and stragglers (factors below the network scale), static and dynamic."""
    from dcpsim.run.single import _prepare

    cfg = config_from_dict({"cluster": {"gpus": 64}, "parallel": {"tp": 1, "pp": 4, "cp": 2, "max_tokens_per_rank": 16384},
                            "hardware": {"nvlink_domain_gpus": 4, "pod_gpus": 16, "oversubscription": 2.0},
                            "workload": {"name": "github", "gbs": 64, "max_len": 32768},
                            "sim": {"degraded_link_scale": 0.5, "straggler_fraction": 0.1, "straggler_slowdown": 1.5}})
    plans = [_prepare(cfg.with_updates({"sim.seed": s, "policy.name": p}), None, None) for s in (1, 2) for p in
             ("packing", "dynamic")]
    plans = [r.policy.plan(r.dist.sample(64, r.streams["workload"]), r.layout, r.cost) for r in plans]
    shared = _prepare(cfg, None, None).sim
    for plan in plans + plans:  # the second pass from the memo
        fresh = _prepare(cfg, None, None).sim.simulate(plan)
        again = shared.simulate(plan)
        for name in ("fwd_s", "bwd_s", "xfer_s", "spans_network", "p2p_network_alone_s", "p2p_nvlink_s"):
            assert np.array_equal(getattr(again.work, name), getattr(fresh.work, name)), name
        for name in ("host_s", "kernels", "sync_before", "sync_after"):  # the host ops (kept per CP sizes, flags)
            assert np.array_equal(getattr(again.work.host, name), getattr(fresh.work.host, name)), name
        assert again.timeline.makespan_s == fresh.timeline.makespan_s
        assert not again.work.spans_network.flags.writeable and not again.work.host.host_s.flags.writeable
    assert len(shared.durations._by_layout) <= 3 * len(plans)
