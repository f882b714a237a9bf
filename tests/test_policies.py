"""Scheduling policies: registry, invariants (hypothesis), Megatron behaviour, bound validity, MILP gaps, CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from policy_cases import cases, comparable, cost_model

from dcpsim.cli import main
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.policies import (
    Layout,
    Plan,
    Policy,
    SeqCosts,
    evaluate_plan,
    get_policy,
    list_policies,
    lower_bound_s,
    per_rank_tokens,
    pipeline_makespan_s,
    register_policy,
)
from dcpsim.policies import base as policy_base
from dcpsim.policies.base import dynamic_sizes
from dcpsim.policies.bound import bound_terms, profile_is_monotone

HEURISTICS = ["packing", "packing-balanced", "dynamic", "dynamic-solver"]
STATIC = {"packing", "packing-balanced"}
REL = 1e-9


def static_fits(lengths: np.ndarray, layout: Layout) -> bool:
    return bool((per_rank_tokens(lengths, layout.cp) <= layout.max_tokens_per_rank).all())


# ------------------------------------------------------------------ registry
def test_registry_lists_the_six_policies():
    assert list_policies()[:6] == ["packing", "packing-balanced", "dynamic", "dynamic-solver", "bound", "milp"]


def test_unknown_policy_and_option_name_what_is_known():
    with pytest.raises(ConfigError, match="dynamic-solver"):
        get_policy("no-such-policy")
    with pytest.raises(ConfigError, match="cap_delta"):
        get_policy("dynamic", not_an_option=1)
    with pytest.raises(ConfigError, match="too_long"):
        get_policy("packing", too_long="maybe")


def test_register_policy_and_duplicates(monkeypatch):
    monkeypatch.setattr(policy_base, "_REGISTRY", policy_base._REGISTRY.copy())

    class OneStep(Policy):
        name = "one-step"
        dynamic = True

        def _plan(self, lengths, layout, cost, rng):
            from dcpsim.policies import Group, Step

            c = layout.max_dynamic_cp
            return Plan(self.name, layout, lengths, [Step([Group(0, c, list(range(lengths.size)))])], True)

    register_policy("one-step", OneStep)
    assert "one-step" in list_policies()
    lay = Layout(dp=2, cp=2, max_tokens_per_rank=4096)
    plan = get_policy("one-step").plan(np.array([100, 200]), lay, cost_model(1, 1, 4))
    assert plan.n_steps == 1 and plan.lower_bound_s > 0 and plan.planning_time_s >= 0
    for name in ("one-step", "dynamic"):
        with pytest.raises(ConfigError, match="already registered"):
            register_policy(name, OneStep)
    with pytest.raises(ConfigError):
        register_policy("not-a-policy", dict)


def test_cost_model_must_match_layout():
    lay = Layout(dp=2, cp=2, max_tokens_per_rank=4096, pp=2)
    with pytest.raises(ConfigError, match="cost.pp"):
        get_policy("dynamic").plan(np.array([100]), lay, cost_model(1, 1, 4))
    with pytest.raises(ConfigError, match="lengths"):
        get_policy("dynamic").plan(np.array([100, 0]), lay, cost_model(1, 2, 4))


# ------------------------------------------------------ invariants (hypothesis)
# The default suite draws 20 cases per policy; the slow suite (CI's `make test-slow`) 100 more.
@pytest.mark.parametrize("name", HEURISTICS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_seqs=60))
def test_invariants_bound_and_determinism(name, case):
    _check_invariants(name, case)


@pytest.mark.slow
@pytest.mark.parametrize("name", HEURISTICS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_seqs=60))
def test_invariants_bound_and_determinism_deep(name, case):
    _check_invariants(name, case)


def _check_invariants(name, case):
    lengths, layout = case
    cost = cost_model(layout.tp, layout.pp, layout.ranks_per_stage)
    if name in STATIC and not static_fits(lengths, layout):
        with pytest.raises(InfeasibleError, match="capacity"):
            get_policy(name).plan(lengths, layout, cost)
        dropped = get_policy(name, too_long="drop").plan(lengths, layout, cost)
        assert set(dropped.dropped) == set(np.nonzero(per_rank_tokens(lengths, layout.cp) > layout.max_tokens_per_rank)[0])
        return
    plan = get_policy(name).plan(lengths, layout, cost)  # validates
    assert plan.dynamic == (name not in STATIC)
    if name not in STATIC:  # one sequence more than the largest aligned group holds
        with pytest.raises(InfeasibleError, match="capacity"):
            get_policy(name).plan(np.append(lengths, layout.max_dynamic_cp * layout.max_tokens_per_rank + 1), layout, cost)
    if name == "dynamic":
        b = get_policy("bound").plan(lengths, layout, cost)
        assert b.n_steps == 0 and len(b.dropped) == lengths.size
        assert b.lower_bound_s == pytest.approx(plan.lower_bound_s)
    assert not plan.dropped
    ids = sorted(i for s in plan.steps for g in s.groups for i in g.seq_ids)
    assert ids == list(range(lengths.size))
    # modelled planning time: deterministic, from the planner's work (sequences x sizes x candidate passes)
    assert plan.planning_time_s == get_policy(name).modelled_planning_s(lengths, layout, plan)
    assert (plan.planning_time_s > 0) == (lengths.size > 0) and plan.meta["planning_wall_s"] >= 0
    # the recorded bound is below the modelled iteration time, exact and additive
    ev = evaluate_plan(plan, cost)
    assert plan.lower_bound_s <= ev.makespan_s * (1 + REL) + 1e-12
    sizes = np.unique([g.size for s in plan.steps for g in s.groups] or [1])
    additive = lower_bound_s(lengths, layout, cost, standalone=False)
    assert additive <= plan.lower_bound_s * (1 + REL)
    assert additive <= SeqCosts(lengths, layout, cost, sizes).plan_makespan_s(plan) * (1 + REL) + 1e-12
    if plan.dynamic:
        assert lower_bound_s(lengths, layout, cost, scope="dynamic") <= ev.makespan_s * (1 + REL) + 1e-12
    else:
        assert lower_bound_s(lengths, layout, cost, scope="static") <= ev.makespan_s * (1 + REL) + 1e-12
    # deterministic; plain data
    again = get_policy(name).plan(lengths, layout, cost, rng=np.random.default_rng(1))
    assert comparable(again) == comparable(plan)
    assert comparable(Plan.from_dict(json.loads(json.dumps(plan.to_dict())))) == comparable(plan)


@pytest.mark.parametrize("name", HEURISTICS + ["bound", "milp"])
def test_too_long_sequence_is_infeasible(name):
    lay = Layout(dp=2, cp=2, max_tokens_per_rank=1000)
    cost = cost_model(1, 1, 4)
    with pytest.raises(InfeasibleError) as err:
        get_policy(name).plan(np.array([100, 4001, 50]), lay, cost)
    if name != "bound":
        assert err.value.kind == "capacity" and "sequence 1" in str(err.value)
    # padding counts: 3999 tokens on 4 ranks pad to 4000 = 4 x 1000 and fit; 4000 fits too, 4001 does not
    if name in STATIC:
        return
    get_policy(name).plan(np.array([3999, 4000]), lay, cost)


@pytest.mark.parametrize("name", list_policies())
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_an_infinite_or_nan_length_is_refused_not_planned(name, bad):
    """Policy.plan([4096, inf], ...) returned a plan for a sequence of -9223372036854775808 tokens: the lengths
    check compared inf with floor(inf) (equal) and cast it to int64 (a RuntimeWarning, no error)."""
    lay = Layout(dp=2, cp=2, max_tokens_per_rank=65536)
    with pytest.raises(ConfigError, match="lengths"):
        get_policy(name).plan(np.array([4096.0, bad]), lay, cost_model(1, 1, 4))


def test_bound_policy_is_not_executable():
    lay = Layout(dp=2, cp=2, max_tokens_per_rank=4096, pp=2)
    cost = cost_model(1, 2, 4)
    lengths = np.array([3000, 100, 12000, 700])
    plan = get_policy("bound").plan(lengths, lay, cost)
    assert plan.n_steps == 0 and set(plan.dropped) == {0, 1, 2, 3}
    assert plan.meta["executable"] is False
    assert plan.lower_bound_s == pytest.approx(lower_bound_s(lengths, lay, cost))
    b = plan.meta["bounds_s"]
    assert b["dynamic"] >= b["any"] - 1e-12 and b["static"] >= b["any"] - 1e-12
    dyn = get_policy("bound", scope="dynamic").plan(lengths, lay, cost)
    assert dyn.lower_bound_s == pytest.approx(b["dynamic"])


def test_pipeline_makespan():
    assert pipeline_makespan_s([], 4) == 0.0
    assert pipeline_makespan_s([1.0, 2.0, 3.0], 1) == pytest.approx(6.0)
    assert pipeline_makespan_s([1.0, 2.0, 3.0], 4) == pytest.approx(15.0)


def test_static_makespan_is_per_replica():
    # replica 0 runs 10 then 0, replica 1 runs 5 then 5: static replicas do not wait for each other
    from dcpsim.policies.costs import makespan_from_groups

    lay = Layout(dp=2, cp=1, max_tokens_per_rank=100, pp=1)
    args = (np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([1, 1, 1, 1]), np.array([10.0, 5.0, 0.0, 5.0]), 2, lay)
    assert makespan_from_groups(*args, dynamic=False)[0] == pytest.approx(10.0)
    assert makespan_from_groups(*args, dynamic=True)[0] == pytest.approx(15.0)


def test_bound_needs_monotone_profile_for_standalone_term():
    cost = cost_model(1, 1, 8)
    assert profile_is_monotone(cost.profile)
    rows = [dict(r) for r in cost.profile.gemm_rows]
    big = max(rows, key=lambda r: r["tokens"])
    big["tflops"] = big["tflops"] * 1e3  # a GEMM that gets faster in absolute time as it grows
    bent = dataclasses.replace(cost.profile, gemm_rows=rows)
    assert not profile_is_monotone(bent)
    lay = Layout(dp=8, cp=1, max_tokens_per_rank=65536)
    lengths = np.array([60000, 1000, 2000])
    t = bound_terms(lengths, lay, cost)
    assert t["monotone_profile"] and t["any"][1] > 0


# ---------------------------------------------------------- Megatron behaviour
def groups_of(plan: Plan) -> list[list[tuple[int, int, list[int]]]]:
    return [[(g.start, g.size, sorted(g.seq_ids)) for g in s.groups] for s in plan.steps]


def test_dynamic_join_or_open_and_fill_by_doubling():
    lay = Layout(dp=4, cp=1, max_tokens_per_rank=100)
    plan = get_policy("dynamic").plan(np.array([50, 60, 40]), lay, cost_model(1, 1, 4))
    # 60 opens rank 0; 50 cannot join (110 > 100 tokens) and opens rank 1; 40 could join either group but
    # that would raise the maximum load above 60², so it opens rank 2; rank 3 is empty, so the first
    # group of the smallest size (60's) doubles
    assert groups_of(plan) == [[(0, 2, [1]), (2, 1, [0]), (3, 1, [2])]]
    assert plan.meta["doublings"] == 1


def test_dynamic_leftovers_wait_for_the_next_microbatch():
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=100)
    plan = get_policy("dynamic").plan(np.array([100, 100, 100]), lay, cost_model(1, 1, 2))
    assert groups_of(plan) == [[(0, 1, [0]), (1, 1, [1])], [(0, 2, [2])]]


def test_dynamic_long_sequence_gets_enough_ranks_and_cap_applies():
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=1000)
    lengths = np.array([3000, 900, 900, 800, 100, 100])
    plan = get_policy("dynamic").plan(lengths, lay, cost_model(1, 1, 8))
    first = {g.start: g for g in plan.steps[0].groups}
    assert first[0].size >= 4 and 0 in first[0].seq_ids  # 3000 tokens need 4 ranks of 1000
    T, M = 3000, 1000
    for s in plan.steps[:1]:
        for g in s.groups:
            load = sum(int(lengths[i]) ** 2 / g.size for i in g.seq_ids)
            assert load <= 1.05 * T * M * (1 + 1e-12) or g.size >= 4


def test_packing_is_megatron_dp_balanced():
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=100)
    plan = get_policy("packing").plan(np.array([60, 30, 50, 20, 90]), lay, cost_model(1, 1, 2))
    # next-fit: [60,30] [50,20] [90]; 3 bins -> 4 by moving 20 off the last multi-sample bin; bin i*dp+j
    assert groups_of(plan) == [[(0, 1, [0, 1]), (1, 1, [2])], [(0, 1, [4]), (1, 1, [3])]]


def test_packing_pads_to_two_cp_and_adds_empty_bins_when_short_of_sequences():
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=10)
    plan = get_policy("packing").plan(np.array([19, 1]), lay, cost_model(1, 1, 8))
    # 19 pads to 20 = 2 ranks x 10 tokens: a bin of its own; 1 pads to 4 and goes next
    assert [g.seq_ids for g in plan.steps[0].groups] == [[0], [1], [], []]
    assert plan.meta["empty_bins"] == 2


# ----------------------------------------------------------- quality checks
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_solver_matches_or_beats_megatron_dynamic(seed):
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(2000), 1.6, 256), 64, 65536).astype(np.int64)  # long-tailed
    for dp, cp, pp in ((4, 2, 2), (8, 1, 1)):
        lay = Layout(dp=dp, cp=cp, max_tokens_per_rank=16384, pp=pp)
        cost = cost_model(1, pp, dp * cp)
        ms = {n: evaluate_plan(get_policy(n).plan(lengths, lay, cost), cost).makespan_s for n in ("dynamic", "dynamic-solver")}
        assert ms["dynamic-solver"] <= ms["dynamic"] * (1 + 1e-9)


def test_balanced_packing_not_worse_than_packing():
    rng = np.random.default_rng(5)
    lengths = np.clip(rng.lognormal(np.log(2000), 1.6, 256), 64, 16384).astype(np.int64)
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=16384, pp=2)
    cost = cost_model(1, 2, 8)
    a, b = (evaluate_plan(get_policy(n).plan(lengths, lay, cost), cost).makespan_s for n in ("packing", "packing-balanced"))
    assert b <= a * (1 + 1e-9)


# ---------------------------------------------------------------------- MILP
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 3])
def test_milp_between_heuristics_and_bound(seed):  # seeds 1 and 2 (the longest MILP solves) in the slow suite
    rng = np.random.default_rng(100 + seed)
    dp, cp, pp = [(2, 1, 1), (2, 2, 2), (4, 1, 1), (1, 4, 2)][seed]
    lay = Layout(dp=dp, cp=cp, max_tokens_per_rank=8192, pp=pp)
    cost = cost_model(1, pp, dp * cp)
    lengths = np.clip(rng.lognormal(np.log(3000), 1.0, 7), 64, cp * 8192 - 2 * cp).astype(np.int64)
    plans = {n: get_policy(n).plan(lengths, lay, cost) for n in HEURISTICS}
    K = max(p.n_steps for p in plans.values())
    for mode in ("dynamic", "static"):
        # the limit only guards against a hang: "optimal" must not depend on how fast this host is (seconds here)
        opt = get_policy("milp", mode=mode, max_steps=K, node_limit=None, time_limit_s=3600).plan(lengths, lay, cost)
        m = opt.meta
        assert m["status"] == "optimal"
        sizes = np.unique(np.r_[dynamic_sizes(lay), [cp]])
        sc = SeqCosts(lengths, lay, cost, sizes)
        assert sc.plan_makespan_s(opt) == pytest.approx(m["objective_s"], rel=1e-6)
        assert m["objective_s"] >= m["additive_lower_bound_s"] * (1 - 1e-9)
        assert evaluate_plan(opt, cost).makespan_s >= opt.lower_bound_s * (1 - 1e-9)
        for name, p in plans.items():
            if (mode == "static") == (name in STATIC):  # same plan family: the optimum is below the heuristic
                assert sc.plan_makespan_s(p) >= m["dual_bound_s"] * (1 - 1e-6), name


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(max_seqs=6, max_dp=2))
def test_milp_invariants_on_tiny_cases(case):
    lengths, layout = case
    cost = cost_model(layout.tp, layout.pp, layout.ranks_per_stage)
    # one step per sequence is always enough (every sequence fits the largest group), so the MILP is feasible
    steps = max(1, len(lengths))
    opt = get_policy("milp", max_steps=steps, node_limit=None, time_limit_s=3600).plan(lengths, layout, cost)  # validates
    assert opt.dynamic and not opt.dropped
    assert opt.meta["objective_s"] >= opt.meta["additive_lower_bound_s"] * (1 - 1e-9) - 1e-12
    assert evaluate_plan(opt, cost).makespan_s >= opt.lower_bound_s * (1 - 1e-9) - 1e-12
    again = get_policy("milp", max_steps=steps, node_limit=None, time_limit_s=3600).plan(lengths, layout, cost)
    assert again.meta["objective_s"] == pytest.approx(opt.meta["objective_s"], rel=1e-6, abs=1e-12)


def test_milp_budget_is_nodes_not_seconds():
    """The default budget counts branch-and-bound nodes, so a stopped solve is the same plan on any host."""
    rng = np.random.default_rng(102)
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=8192)
    cost = cost_model(1, 1, 2)
    lengths = np.clip(rng.lognormal(np.log(3000), 1.0, 6), 64, 8192).astype(np.int64)
    pol = get_policy("milp", node_limit=1)
    assert pol.time_limit_s is None and get_policy("milp").node_limit == 2000
    a, b = pol.plan(lengths, lay, cost), pol.plan(lengths, lay, cost)
    assert a.meta["status"] == "node limit (best found)" and a.meta["nodes"] == 1 and a.meta["node_limit"] == 1
    assert comparable(a) == comparable(b) and a.meta["objective_s"] == b.meta["objective_s"]
    assert a.meta["dual_bound_s"] <= a.meta["objective_s"]
    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(ConfigError, match="policy.options.node_limit"):
            get_policy("milp", node_limit=bad)


def test_milp_refuses_large_problems():
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=8192)
    # the fields a user sets, not the policy's argument names ("lengths: got '2048 sequences'" before)
    with pytest.raises(ConfigError, match=r"workload\.gbs: got '65 sequences'; expected at most 64.*max_sequences"):
        get_policy("milp").plan(np.full(65, 100), lay, cost_model(1, 1, 2))
    with pytest.raises(ConfigError, match=r"cluster\.gpus: got '32 ranks per stage.*max_ranks"):
        get_policy("milp").plan(np.full(4, 100), Layout(dp=32, cp=1, max_tokens_per_rank=8192), cost_model(1, 1, 32))


# ----------------------------------------------------------------------- CLI
def test_cli_schedule(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = main(["schedule", "--policy", "dynamic-solver", "--gbs", "64", "--gpus", "16", "--pp", "2", "--cp", "2",
               "--json", "--out", str(out)])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["microbatches"] >= 1 and d["sequences"] == 64 and d["tokens_dropped"] == 0
    assert d["makespan_over_bound"] >= 1 - 1e-9 and d["planning_time_s"] > 0
    assert sum(v["sequences"] for v in d["cp_histogram"].values()) == 64
    plan = Plan.load(out).check()
    assert plan.policy == "dynamic-solver" and plan.layout.dp == 4
    rc = main(["schedule", "--policy", "packing", "--gbs", "32", "--gpus", "16", "--pp", "2", "--cp", "2"])
    assert rc == 0 and "microbatches" in capsys.readouterr().out
    assert main(["schedule", "--gpus", "60"]) == 2
    assert "tp*pp*cp" in capsys.readouterr().err
    assert main(["schedule", "--policy", "nope"]) == 2


def test_cli_schedule_plans_the_batch_simulate_runs_first(tmp_path, capsys):
    """`dcpsim schedule` drew its batch from default_rng(seed), not the run's workload stream: with the same config
    and seed it planned a different batch than `dcpsim simulate` (default config, seed 0: 3,635,306 vs 3,571,847
    tokens) and refused workload.name = "fixed". Now the same batch and plan as simulate's first iteration."""
    run = tmp_path / "run.toml"
    run.write_text('[cluster]\ngpus = 16\n[parallel]\npp = 2\n[workload]\ngbs = 64\n[policy]\nname = "dynamic-solver"\n'
                   '[sim]\niterations = 1\nseed = 5\n')
    assert main(["schedule", "--config", str(run), "--json"]) == 0
    sched = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(run), "--json"]) == 0
    it = json.loads(capsys.readouterr().out)["iterations"][0]
    assert sched["tokens"] == it["tokens"] and sched["microbatches"] == it["steps"]
    assert main(["schedule", "--config", str(run), "--workload", "fixed", "--set", "workload.seq_len=2048",
                 "--policy", "packing", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 64 * 2048


def test_check_fits_counts_padding():
    from dcpsim.errors import InfeasibleError
    from dcpsim.policies import check_fits

    lay = Layout(dp=1, cp=4, max_tokens_per_rank=1001)  # largest dynamic group: 4 ranks, 4004 tokens unpadded
    check_fits(np.array([4000, 10]), lay)  # pads to 4000: 1000 tokens per rank
    with pytest.raises(InfeasibleError, match="sequence 0"):
        check_fits(np.array([4001, 10]), lay)  # under 4004 unpadded, but pads to 4008: 1002 per rank


def test_plan_packs_are_the_groups_in_order():
    """Plan.packs (flat, one pack per (step, group)) equals the per-group definition, empty groups included."""
    from dcpsim.policies import Group, Layout, Plan, Step

    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 5000, 40)
    layout = Layout(dp=4, cp=2, max_tokens_per_rank=1 << 20)
    ids = rng.permutation(40).tolist()
    steps = [Step([Group(0, 2, ids[:5]), Group(2, 2, []), Group(4, 4, ids[5:17])]),
             Step([Group(0, 8, ids[17:18])]), Step([Group(0, 4, ids[18:30]), Group(4, 4, ids[30:])])]
    lens, pids, cps, starts = Plan("x", layout, lengths, steps, True).packs()
    groups = [g for st in steps for g in st.groups]
    assert lens.tolist() == [int(lengths[i]) for g in groups for i in g.seq_ids]
    assert pids.tolist() == [p for p, g in enumerate(groups) for _ in g.seq_ids]
    assert cps.tolist() == [g.size for g in groups] and starts.tolist() == [g.start for g in groups]
    assert all(a.dtype == np.int64 for a in (lens, pids, cps, starts))
    empty = Plan("x", layout, lengths[:0], [], True).packs()
    assert all(a.size == 0 and a.dtype == np.int64 for a in empty)


def test_cli_schedule_and_cost_read_a_bare_gpu_name_as_simulate_does(capsys):
    """`schedule`/`cost --gpu h100-sxm` used the datasheet profile (documented as an optimistic upper bound) without
    saying so, while simulate, demo, plan and export read the same name as h100-sxm-calibrated: the same config gave
    another plan (default config: modelled makespan 39.1 s vs 42.3 s on the calibrated profile). Both now resolve
    the name as simulate does and name the profile."""
    assert main(["schedule", "--gbs", "64", "--gpus", "16", "--pp", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["gpu"] == "h100-sxm-calibrated" and "calibrated" in d["config"]["profile"]
    assert main(["schedule", "--gbs", "64", "--gpus", "16", "--pp", "2", "--gpu", "h100-sxm-datasheet", "--json"]) == 0
    assert "UNCALIBRATED" in json.loads(capsys.readouterr().out)["config"]["profile"]
    assert main(["cost", "--lengths", "4096", "--gpu", "b200"]) == 0
    assert "UNCALIBRATED" in capsys.readouterr().out
