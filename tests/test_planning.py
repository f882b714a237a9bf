"""Capacity planning: failure model, parsers, layout search (memory enforced), batch in tokens, the CLI's refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dcpsim.errors import ConfigError
from dcpsim.planning import (
    CapacityRequest,
    FailureModel,
    SearchSpace,
    llama3_gpu_mtbf_hours,
    make_data_spec,
    pareto_front,
    parse_duration_days,
    parse_gpu_prices,
    parse_token_count,
    plan_capacity,
    recommend,
    search_layouts,
)
from dcpsim.run.config import RunConfig


def test_llama3_mtbf_is_about_50700_gpu_hours():
    # the order of magnitude for the Llama 3 report
    assert llama3_gpu_mtbf_hours() == pytest.approx(50_700, rel=0.005)


def test_goodput_falls_with_scale_and_vanishes_when_failures_dominate():
    fm = FailureModel()
    g = [fm.goodput(n) for n in (512, 4096, 16384, 131072)]
    assert all(0 < x <= 1 for x in g) and g == sorted(g, reverse=True)
    assert FailureModel(gpu_mtbf_h=1.0).goodput(16384) == 0.0  # a failure every 0.2 s
    assert FailureModel(checkpoint_s=0.0, restart_s=0.0).goodput(4096) == pytest.approx(1.0)
    # Llama 3 scale: the job fails about every 3 hours
    assert fm.system_mtbf_s(16384) / 3600 == pytest.approx(54 * 24 / 419, rel=1e-9)


def test_young_interval_is_near_the_numerical_optimum():
    from scipy import optimize  # here, not at collection: each xdist worker collects this file

    fm = FailureModel(checkpoint_s=60.0, restart_s=300.0)
    n = 8192
    m = fm.system_mtbf_s(n)

    def waste(tau: float) -> float:  # wall time per unit of work, same model as FailureModel.goodput
        return (1 + fm.checkpoint_s / tau) / (1 - (fm.restart_s + (tau + fm.checkpoint_s) / 2) / m)

    best = optimize.minimize_scalar(waste, bounds=(1.0, m / 2), method="bounded").x
    assert fm.checkpoint_interval_s(n) == pytest.approx(best, rel=0.1)
    assert 1 / fm.goodput(n) == pytest.approx(waste(fm.checkpoint_interval_s(n)))
    assert 1 / fm.goodput(n) <= waste(best) * 1.001  # first-order optimum is essentially optimal


def test_parsers():
    assert parse_gpu_prices("h100-sxm:2.5, b200:5") == {"h100-sxm": 2.5, "b200": 5.0}
    for bad in ("h100-sxm", "h100-sxm:x", ":2", "a:-1", ""):
        with pytest.raises(ConfigError, match="--gpus"):
            parse_gpu_prices(bad)
    assert parse_duration_days("30d") == 30 and parse_duration_days("36h") == 1.5
    assert parse_duration_days("2w") == 14 and parse_duration_days("7") == 7
    for bad in ("soon", "-3d", "0"):
        with pytest.raises(ConfigError, match="--deadline"):
            parse_duration_days(bad)
    # one convention for every count flag: SI suffixes are powers of ten, Ki/Mi/Gi/Ti powers of two
    assert parse_token_count("4Mi") == 4_194_304 == parse_token_count("4194304") == 1024 * 4096
    assert parse_token_count("4M") == 4_000_000 and parse_token_count("16mi") == 16 * 2**20
    assert parse_token_count("512k") == 512_000 and parse_token_count("512Ki") == 2**19
    assert parse_token_count("2T", "--tokens") == 2 * 10**12 == parse_token_count("2000B") == parse_token_count("2000G")
    assert parse_token_count("1e12", "--tokens") == 10**12 and parse_token_count("1Ti") == 2**40
    for bad in ("many", "-4M", "0", "4X"):
        with pytest.raises(ConfigError, match="--gbs-tokens"):
            parse_token_count(bad)


def test_data_spec_batch_in_tokens():
    d = make_data_spec(seq_len=4096, gbs_tokens=parse_token_count("4Mi"))
    assert d.fixed and d.gbs == 1024 and d.gbs_tokens == 4 * 2**20
    u = d.config_updates()
    cfg = RunConfig().with_updates({**u, "cluster.gpus": 64, "parallel.pp": 1, "parallel.cp": 1})
    assert cfg.is_fixed and cfg.workload.seq_len == 4096 and cfg.workload.gbs == 1024
    v = make_data_spec(workload="github", max_len=16384, gbs_tokens=parse_token_count("1Mi"))
    assert not v.fixed and v.gbs == round(2**20 / v.mean_len) and 256 < v.mean_len < 16384
    with pytest.raises(ConfigError, match="--seq-len"):
        make_data_spec(seq_len=4096, workload="github")
    with pytest.raises(ConfigError, match="--gbs"):
        make_data_spec(seq_len=4096, gbs=8, gbs_tokens=4096)
    p = make_data_spec(preset="long-context-32k")
    assert p.max_len == 32768 and p.workload == "github"


def _small_base(gpu: str = "a100-sxm-80gb") -> RunConfig:
    return RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": gpu})


def test_search_ranks_by_simulation_and_every_layout_fits_memory():
    from dcpsim.planning.space import Candidate, check_candidate
    from dcpsim.run.single import build_cost_model

    data = make_data_spec(seq_len=4096, gbs=128)
    space = SearchSpace(tp=[1, 2], pp=[1, 2, 4], mbs=[1, 2])
    res = search_layouts(_small_base(), 64, data, policy="packing", space=space, simulate=3)
    ok = [r for r in res.rows if r["status"] == "ok"]
    assert len(ok) >= 3 and res.counts["fit"] >= 3
    tps = [r["tokens_per_s"] for r in ok]
    assert tps == sorted(tps, reverse=True)
    for r in ok:
        cand = Candidate(tp=r["tp"], pp=r["pp"], cp=r["cp"], tokens_per_rank=r["tokens_per_rank"],
                         recompute=r["recompute"], mbs=r["mbs"])
        ch = check_candidate(_small_base(), cand, 64, data, 128, {"policy.name": "packing", **data.config_updates()})
        cost = build_cost_model(ch.cfg)
        # the planner's memory figure is the simulator's cost model's figure, and it fits
        assert r["memory_gib"] * 2**30 == pytest.approx(float(cost.peak_memory_bytes([ch.cfg.max_tokens_per_rank])[0]))
        assert r["memory_gib"] <= r["memory_limit_gib"]
        assert r["peak_memory_gib"] <= r["memory_limit_gib"] + 1e-9
        assert r["iteration_time_s"] > 0 and "why" in r
        # the compute breakdown (cost model, fixed costs included) explains the simulated compute
        parts = sum(v for k, v in r.items() if k.startswith("part_") and k != "part_optimizer_s")
        assert parts == pytest.approx(r["compute_s"], rel=0.1)
    # the screen is the simulator's closed form for equal microbatches without pipeline (PP = 1)
    pp1 = [r for r in ok if r["pp"] == 1 and r["screen_time_s"] == r["screen_time_s"]]
    for r in pp1:
        assert r["screen_time_s"] == pytest.approx(r["iteration_time_s"], rel=0.02)


def test_forced_layout_over_memory_is_refused_with_the_figure():
    data = make_data_spec(seq_len=4096, gbs=64)
    res = search_layouts(RunConfig().with_updates({"model.name": "llama-70b", "hardware.gpu": "a100-sxm-80gb"}), 64,
                         data, policy="packing", space=SearchSpace(tp=[1], pp=[1], cp=[1], recompute=["full"]))
    assert not res.rows and res.reason.startswith("memory: needs") and "GiB per GPU > limit" in res.reason
    need = float(res.reason.split("needs ")[1].split(" GiB")[0])
    assert need > 100  # 70B states alone: 16 B/param unsharded weights+grads, far over 80 GB


def test_batch_smaller_than_dp_is_refused():
    data = make_data_spec(seq_len=4096, gbs=32)
    res = search_layouts(_small_base(), 64, data, policy="packing", space=SearchSpace(tp=[1], pp=[1], cp=[1]))
    assert not res.rows and "batch: 32 sequences per global batch < DP 64" in res.reason
    # the free search finds a layout with DP <= 32 instead
    free = search_layouts(_small_base(), 64, data, policy="packing", space=SearchSpace(pp=[1, 2], mbs=[1]),
                          simulate=2)
    assert free.best["status"] == "ok" and free.best["dp"] <= 32


def test_variable_length_search_both_policies():
    data = make_data_spec(workload="github", max_len=16384, gbs=64)
    base = RunConfig().with_updates({"model.name": "llama2-7b", "sim.iterations": 1})
    for pol in ("packing", "dynamic"):
        res = search_layouts(base, 32, data, policy=pol, space=SearchSpace(pp=[1, 2], tokens_per_rank=[8192, 16384]),
                             simulate=2)
        assert res.best["status"] == "ok" and res.counts["refined"] >= 1
        assert res.best["tokens_per_s"] > 0 and res.best["cp"] * res.best["tokens_per_rank"] >= 16384 or pol == "dynamic"


def _synthetic() -> pd.DataFrame:
    return pd.DataFrame({
        "gpu": ["a", "a", "a", "b"], "policy": ["p"] * 4, "gpus": [64, 128, 256, 64], "tp": 1, "pp": 4, "cp": 2,
        "dp": [8, 16, 32, 8], "status": ["ok"] * 4, "effective_time_h": [100.0, 60.0, 40.0, 120.0],
        "cost": [1000.0, 1100.0, 1300.0, 900.0], "goodput": 0.95, "price_per_gpu_h": [2.0] * 3 + [1.0],
        "tflops_per_gpu": 300.0,
    }).assign(effective_days=lambda d: d["effective_time_h"] / 24, gpu_hours=lambda d: d["cost"] / d["price_per_gpu_h"])


def test_pareto_and_recommendation():
    df = _synthetic()
    assert pareto_front(df).tolist() == [True, True, True, True]
    extra = df.loc[0].to_dict() | {"gpu": "c", "effective_time_h": 110.0, "cost": 1200.0, "effective_days": 110 / 24}
    df = pd.concat([df, pd.DataFrame([extra])], ignore_index=True)
    assert not pareto_front(df)[4]  # slower and dearer than row 0
    r = recommend(df, deadline_days=3.0)  # 72 h: rows 1 and 2 meet it; row 1 is cheaper
    assert "cheapest that meets the 3-day deadline" in r and "128 x a" in r
    r = recommend(df, deadline_days=1.0)
    assert r.startswith("No configuration meets") and "256 x a" in r
    assert "64 x b" in recommend(df)  # no deadline: cheapest overall


def test_small_real_plan():
    space = SearchSpace(tp=[1, 2], pp=[1, 2], mbs=[1])
    plan = plan_capacity(CapacityRequest("llama2-7b", None, 1e11, {"a100-sxm-80gb": 1.5, "h100-sxm": 2.5}, [32, 64],
                                         seq_len=4096, gbs=64, policies=["packing"], space=space, deadline_days=1e6,
                                         max_gbs_tokens=2**17), jobs=1)
    df = plan.rows
    assert len(df) == 2 * 2 and (df["status"] == "ok").all(), df[["status", "reason"]]
    assert (df["gbs"] == 64).all()  # the batch is the same at every size (fixed)
    assert np.allclose(df["time_to_train_h"], 1e11 / df["tokens_per_s"] / 3600)
    assert np.allclose(df["effective_time_h"], df["time_to_train_h"] / df["goodput"])
    assert np.allclose(df["gpu_hours"], df["gpus"] * df["effective_time_h"])
    assert np.allclose(df["cost"], df["gpu_hours"] * df["price_per_gpu_h"])
    assert (df["effective_days_min"] <= df["effective_days"]).all() and (df["effective_days"] <= df["effective_days_max"]).all()
    assert np.allclose(df["iterations"], np.ceil(1e11 / (64 * 4096)))
    assert df["pareto"].any() and df["meets_deadline"].all()
    assert df.groupby("gpu")["pareto_gpu"].any().all()  # every GPU type has its own front
    assert (df["pareto_gpu"] | ~df["pareto"]).all()  # on the overall front => on its GPU type's front
    assert plan.recommendation.startswith("Recommended")
    assert plan.warnings and "exceeds the declared convergence limit" in plan.warnings[0]
    lay = plan.layouts
    assert set(lay["rank"]) >= {1, 2} and (lay.groupby(["gpu", "gpus", "policy"])["rank"].min() == 1).all()
    d = json.loads(json.dumps(plan.to_dict()))
    assert len(d["rows"]) == 4 and d["request"]["failures"]["gpu_mtbf_h"] == pytest.approx(llama3_gpu_mtbf_hours())
    # without a deadline nothing claims to meet one
    plan2 = plan_capacity(CapacityRequest("llama2-7b", None, 1e11, {"a100-sxm-80gb": 1.5}, [32], seq_len=4096, gbs=64,
                                          policies=["packing"], space=space), jobs=1)
    assert plan2.rows["meets_deadline"].isna().all()


def test_cli_plan(tmp_path, capsys):
    from dcpsim.cli import main

    png = tmp_path / "plan.png"
    args = ["plan", "--model", "llama2-7b", "--gpus", "a100-sxm-80gb:1.5", "--sizes", "32,64", "--gbs", "64",
            "--tp", "1,2", "--pp", "1,2", "--mbs", "1", "--recompute", "none,full", "--precision", "bf16",
            "--policies", "packing", "--tokens", "1e11", "-j", "1"]
    rc = main(args + ["--deadline", "0.5h", "--plot", str(png), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recommendation"].startswith("No configuration meets the 0.0208333-day deadline")
    assert png.stat().st_size > 1000
    assert not any(r["meets_deadline"] for r in out["rows"]) and out["layouts"]
    assert all(math.isfinite(r["cost"]) for r in out["rows"])
    # the text output prints every input, defaults marked, and the top layouts with their breakdown
    assert main(args + ["--no-progress"]) == 0
    text = capsys.readouterr().out
    for label in ("model", "tokens", "data", "global batch", "batch scaling", "search recompute", "deadline",
                  "failures", "seeds", "base config"):
        assert f"  {label}" in text
    assert "fixed-length windows of 4096 tokens" in text and "* " in text or " *\n" in text
    assert "Top 3 layouts per size" in text and "why: vs" in text and "compute" in text
    assert main(["plan", "--gpus", "h100-sxm", "--sizes", "32"]) == 2


def test_cli_refusals(tmp_path, capsys):
    from dcpsim.cli import main

    # a forced layout that does not fit memory: refused, with the figure
    rc = main(["plan", "--model", "llama-70b", "--gpus", "a100-sxm-80gb:1", "--sizes", "64", "--tp", "1", "--pp", "1",
               "--cp", "1", "--recompute", "full", "--policies", "packing", "--gbs", "64", "-j", "1", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and "memory: needs" in err and "GiB per GPU > limit" in err
    # batch smaller than DP: refused
    rc = main(["plan", "--model", "llama2-7b", "--gpus", "a100-sxm-80gb:1", "--sizes", "64", "--tp", "1", "--pp", "1",
               "--cp", "1", "--policies", "packing", "--gbs", "32", "-j", "1", "--json"])
    assert rc == 2 and "< DP 64" in capsys.readouterr().err
    # an explicit --workload cannot silently disagree with the config's
    cfg = tmp_path / "base.toml"
    cfg.write_text('[workload]\nname = "github"\nmax_len = 16384\n')
    rc = main(["plan", "--config", str(cfg), "--workload", "wikipedia", "--gpus", "h100-sxm:2", "--sizes", "32"])
    assert rc == 2 and "--workload" in capsys.readouterr().err
    rc = main(["plan", "--config", str(cfg), "--seq-len", "4096", "--gpus", "h100-sxm:2", "--sizes", "32"])
    assert rc == 2 and "--seq-len" in capsys.readouterr().err
    # a config that states no workload leaves the data to the flags (no false disagreement)
    from dcpsim.commands.plan import _config_workload, build_data

    other = tmp_path / "net.toml"
    other.write_text("[hardware]\nnetwork_scale = 0.5\n")
    args = type("A", (), dict(config=str(other), workload="wikipedia", seq_len=None, data=None, gbs=64,
                              gbs_tokens=None, documents=None, max_len=8192))()
    assert _config_workload(args) is None and _config_workload(type("B", (), {"config": str(cfg)})()) == "github"
    assert build_data(args, None).workload == "wikipedia"


@pytest.mark.parametrize("tp,pp,vp,cp,launch", [(1, 2, 1, 1, None), (1, 2, 2, 1, None),
                                                 (2, 4, 2, 2, None), (4, 4, 2, 1, None),
                                                 (1, 4, 1, 2, None), (1, 4, 1, 2, "first_forward"),
                                                 (1, 4, 1, 2, "step_start"), (1, 8, 1, 1, "step_start")])
def test_screen_equals_the_simulator_for_equal_microbatches(tp, pp, vp, cp, launch):
    """Fixed windows: the closed form (the busiest rank's host/device timeline, bubble (PP-1)/VP, transfers, the
    sync rules) is within 1% of the simulation (``launch``: overlapped parameter all-gather with that
    sim.param_gather_launch). TP2 PP4 VP2 CP2 and TP4 PP4 VP2 are host-bound interleaved layouts (4.3% and 2.7%
    over with the earlier ``max(Σh, Σd)`` stage and host-inclusive bubble)."""
    from dcpsim.planning.screen import screen
    from dcpsim.planning.space import Candidate, check_candidate
    from dcpsim.run.single import run_simulation

    data = make_data_spec(seq_len=4096, gbs=64)
    flags = (("overlap_grad_sync", True),) + ((("overlap_param_gather", True),) if launch else ())
    cand = Candidate(tp=tp, pp=pp, vp=vp, cp=cp, tokens_per_rank=4096 // cp, recompute="none", mbs=1, flags=flags)
    extra = {"sim.param_gather_launch": launch} if launch else {}
    ch = check_candidate(_small_base("h100-sxm"), cand, 64, data, 64, {"policy.name": "packing",
                                                                        **data.config_updates(), **extra})
    assert ch.cfg is not None, ch.reason
    est = screen(ch.cfg, data, mbs=1, dynamic=False)["time_s"]
    assert est == pytest.approx(run_simulation(ch.cfg).summary["iteration_time_s"], rel=0.01)


def test_rank_timeline_skips_periods_exactly(monkeypatch):
    """The ranks' own timelines (the screen's compute term) with the repeated 1F1B periods added at their rate
    equal running every op, for host-bound, device-bound and mixed ranks, with and without interleaving; and
    never undercut the device's own time."""
    import dcpsim.planning.screen as screen_mod
    import dcpsim.planning.timeline as timeline_mod
    from dcpsim.planning.space import Candidate, check_candidate

    data = make_data_spec(seq_len=4096, gbs=64)
    common = {"policy.name": "packing", **data.config_updates()}
    for model, (tp, pp, vp, cp) in (("llama2-7b", (2, 4, 2, 2)), ("llama2-7b", (1, 8, 4, 1)),
                                    ("llama2-7b", (1, 4, 1, 2)), ("llama-13b-8l-v131072", (4, 4, 2, 1))):
        cand = Candidate(tp=tp, pp=pp, vp=vp, cp=cp, tokens_per_rank=4096 // cp, recompute="none", mbs=1)
        base = _small_base("h100-sxm").with_updates({"model.name": model})
        cfg = check_candidate(base, cand, 64, data, 64, common).cfg
        cost, mb, device, _ = screen_mod._device_stages(cfg, data, 1)
        ranks = screen_mod.rank_ops(cfg, cost, mb, 1)
        for m in (pp, 8 * pp, 96 * pp):
            monkeypatch.setattr(timeline_mod, "SKIP_RANK_PERIODS", True)
            skipped = screen_mod.rank_busy_s(ranks, m)
            monkeypatch.setattr(timeline_mod, "SKIP_RANK_PERIODS", False)
            every = screen_mod.rank_busy_s(ranks, m)
            assert skipped == pytest.approx(every, rel=1e-12, abs=0.0), (model, tp, pp, vp, cp, m)
            assert (every >= m * device * (1 - 1e-12)).all()


def test_cached_cost_model_is_the_simulators():
    """The search's cost models (one per layout, copied per DP) give the memory build_cost_model gives."""
    from dcpsim.planning.space import Candidate, _cached_cost, check_candidate
    from dcpsim.run.single import build_cost_model

    data = make_data_spec(seq_len=4096, gbs=512)
    common = {"policy.name": "packing", **data.config_updates()}
    for gpus, vp in ((64, 1), (128, 2), (512, 4), (64, 2)):
        cand = Candidate(tp=2, pp=2, vp=vp, cp=1, tokens_per_rank=4096, recompute="none", mbs=1)
        ch = check_candidate(_small_base(), cand, gpus, data, 512, common)
        cfg = ch.cfg
        a, b = _cached_cost(cfg), build_cost_model(cfg)
        assert a.dp_cp == b.dp_cp == cfg.dp
        assert a.peak_memory_bytes([4096])[0] == pytest.approx(b.peak_memory_bytes([4096])[0])
        assert a.describe() == b.describe()


def test_uneven_stages_and_non_power_of_two_pipelines():
    from dcpsim.planning.space import _pp_vp_options, uneven_stages

    assert (7, 7) in uneven_stages(126, 16)  # Llama 3 405B: 7 + 14 x 8 + 7
    assert all((126 - 2 * f) % 14 == 0 for f, _ in uneven_stages(126, 16))
    opts = _pp_vp_options(SearchSpace(), RunConfig().with_updates({"model.name": "llama2-7b"}))
    pps = {p for p, _, f, _ in opts if f == 0}
    assert {1, 2, 4, 8, 16, 32} <= pps



def test_forced_vp_is_kept():
    """`--pp 4 --vp 3` (32 layers: 4 x 3 does not divide them) planned PP4 with uneven stages and no VP at all, and
    `--vp 2` could pick a VP1 uneven layout: uneven first/last stages run without virtual stages, so a --vp without
    1 leaves them out."""
    from dcpsim.planning.space import _pp_vp_options

    base = RunConfig().with_updates({"model.name": "llama2-7b"})
    assert _pp_vp_options(SearchSpace(pp=[4], vp=[3]), base) == []
    assert {v for _, v, _, _ in _pp_vp_options(SearchSpace(pp=[4], vp=[2]), base)} == {2}
    assert (4, 1, 7, 7) in _pp_vp_options(SearchSpace(pp=[4], vp=[1, 2]), base)
    assert (4, 1, 7, 7) in _pp_vp_options(SearchSpace(pp=[4]), base)


def test_infeasible_reason_is_the_closest_miss():
    """FP8 forced on an A100: every micro-batch size that splits the batch fails on the precision, the others on
    the batch; the reason named the batch (misleading) instead of the missing FP8 figures."""
    data = make_data_spec(seq_len=4096, gbs=64)
    res = search_layouts(_small_base(), 64, data, policy="packing",
                         space=SearchSpace(tp=[1], pp=[1], cp=[1], mbs=[1, 4], precision=["fp8"]))
    assert not res.rows and "no FP8" in res.reason, res.reason


def test_dynamic_layouts_hold_the_longest_sequence():
    """`plan --sizes 8 --data long-context-128k --policies dynamic` said no layout can run: the search kept TP2 M16K
    (largest dynamic CP group 4 x 16K < 128K tokens), whose simulated seed drew no long sequence, and the plan's
    evaluation over more seeds then failed on capacity, though TP1 M16K (8 x 16K) holds every sequence."""
    data = make_data_spec(preset="long-context-128k", gbs_tokens=2**20)
    res = search_layouts(_small_base("a100-sxm-80gb-calibrated"), 8, data, policy="dynamic", simulate=3)
    ok = [r for r in res.rows if r["status"] == "ok"]
    assert ok
    for r in ok:
        ranks = 8 // (r["tp"] * r["pp"])
        assert (1 << (ranks.bit_length() - 1)) * r["tokens_per_rank"] >= data.longest, r["layout"]
    forced = search_layouts(_small_base(), 8, data, policy="dynamic", space=SearchSpace(tokens_per_rank=[4096]))
    assert not forced.rows and forced.reason.startswith("capacity: the longest sequence (131,072 tokens)")


# ------------------------------------------------------------------ issue 19, item 6: plan decides nothing silently
def test_bound_is_a_reference_never_the_pick():
    """`--policies bound` was recommended as the cheapest layout; a lower bound is not trainable."""
    from dcpsim.planning.capacity import check_policies

    space = SearchSpace(tp=[1], pp=[2], cp=[1], mbs=[1], recompute=["none"], precision=["bf16"])
    plan = plan_capacity(CapacityRequest("llama2-7b", None, 1e11, {"h100-sxm": 2.5}, [32], seq_len=4096, gbs=64,
                                         policies=["packing", "bound"], space=space), jobs=1)
    df = plan.rows.set_index("policy")
    assert df.loc["bound", "status"] == "ok" and not df.loc["bound", "trainable"] and df.loc["packing", "trainable"]
    assert df.loc["bound", "cost"] <= df.loc["packing", "cost"]  # the bound is cheaper: it used to be the pick
    assert not df.loc["bound", "pareto"] and not df.loc["bound", "pareto_gpu"] and df.loc["packing", "pareto"]
    assert "with packing" in plan.recommendation and "bound" not in plan.recommendation
    with pytest.raises(ConfigError, match="--policies.*trainable"):
        check_policies(["bound"])
    with pytest.raises(ConfigError, match="--policies: got 'nosuch'"):
        check_policies(["packing", "nosuch"])


@pytest.mark.parametrize("flags,field", [
    (["--data", "long-context-128k", "--seq-len", "4096"], "--seq-len"),
    (["--data", "sft-8k", "--workload", "github"], "--workload"),
    (["--gpus", "h100-sxm:1,h100-sxm:2"], "--gpus"),
    (["--gpus", "h100-sxm:1,h100-sxm:1"], "--gpus"),
    (["--gpus", "nosuch:1"], "--gpus"),  # was 'gpu: got ...' after the header
    (["--gpus", "h100-sxm:1,h100-sxm-calibrated:2"], "--gpus"),  # one profile twice: was refused after the header
    (["--precision", "fp4"], "--precision"),
    (["--documents", "nosuch"], "--documents"),
    (["--policies", "bound"], "--policies"),
    (["--policies", "packing,nosuch"], "--policies"),
    (["--max-len", "8192"], "--max-len"),  # fixed windows have no maximum length
    (["--data", "pretrain-4k", "--max-len", "8192"], "--max-len"),
    (["--tokens-per-rank", "8192"], "--tokens-per-rank"),  # fixed windows: --mbs sets it; was silently ignored
    (["--data", "sft-8k", "--mbs", "2"], "--mbs"),  # variable lengths: --tokens-per-rank; was silently ignored
])
def test_plan_refuses_inputs_it_would_ignore_or_misreport(flags, field, capsys):
    from dcpsim.cli import main

    assert main(["plan", "--no-progress", *flags]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"dcpsim: error: {field}: got") and "infeasible" not in err, err
    assert out == ""  # refused before the header and any work


@pytest.mark.parametrize("flag,name", [("--plot", "plan.png"), ("--csv", "plan.md")])
def test_plan_out_and_a_file_flag_may_not_write_one_file(tmp_path, capsys, flag, name):
    """`plan --out R --plot R/plan.png` wrote the --plot figure and then the report's plan.png over it (printing
    'wrote R/plan.png' twice); it is refused before any work, as --plot and --csv naming one file are."""
    from dcpsim.cli import main

    out = tmp_path / "R"
    assert main(["plan", "--no-progress", "--out", str(out), flag, str(out / name)]) == 2
    o, err = capsys.readouterr()
    assert err.startswith(f"dcpsim: error: {flag}: got") and "--out writes" in err and o == "", err
    assert not out.exists()


@pytest.mark.parametrize("item,flag", [("workload.gbs=128", "--gbs"), ("workload.name=github", "--workload"),
                                       ("cluster.gpus=64", "--sizes"), ("hardware.gpu=b200", "--gpus"),
                                       ("parallel.tp=2", "--tp"), ("policy.name=dynamic", "--policies")])
def test_plan_refuses_a_set_it_would_overwrite(item, flag, capsys):
    """`plan --set workload.gbs=128` (cluster.gpus, hardware.gpu, parallel.tp, policy.name, ...) ran and planned
    the flags' values instead: the plan sets those fields itself. Refused before the header, naming the flag."""
    from dcpsim.cli import main

    assert main(["plan", "--no-progress", "--set", item]) == 2
    out, err = capsys.readouterr()
    key, value = item.split("=")
    assert err.startswith(f"dcpsim: error: --set {key}: got '{value}'; expected ") and flag in err and out == "", err


def test_plan_header_shows_the_model_and_iterations_it_plans(capsys):
    """`plan --set model.name=llama-70b` (or a --config naming the model) planned llama-70b under a header that said
    'model llama-13b *' (the default); --set sim.iterations=2 was used but the header showed the default; --model
    and --set model.name that disagree are refused like every flag/--set pair."""
    import argparse

    from dcpsim.commands.plan import header, register
    from dcpsim.planning import make_data_spec
    from dcpsim.run.config import RunConfig

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["plan", "--set", "model.name=llama-70b", "--set", "sim.iterations=2"])
    lines = header(args, make_data_spec(seq_len=4096, gbs=1024), {}, RunConfig(), ("llama-70b", 1e12))
    assert "  model                  llama-70b" in lines, lines
    assert any(x.startswith("  simulated iterations   2") and not x.endswith("*") for x in lines), lines
    from dcpsim.cli import main

    assert main(["plan", "--no-progress", "--model", "llama2-7b", "--set", "model.name=llama-70b"]) == 2
    assert capsys.readouterr().err.startswith("dcpsim: error: --model: got 'llama2-7b'; expected agreement")


def test_plan_names_every_file_it_wrote(tmp_path, capsys):
    """`plan --csv F` wrote F without a 'wrote F' line (only --out's files and --plot were named), and --json's
    'written' left out --plot and --csv."""
    from dcpsim.cli import main

    small = ["plan", "--no-progress", "--model", "llama2-7b", "--gpus", "h100-sxm:2", "--sizes", "32", "--policies",
             "packing", "--tp", "1", "--pp", "1", "--cp", "1", "--mbs", "1", "--recompute", "none", "--seeds", "1",
             "--long-run-seeds", "1"]
    csv, png = tmp_path / "p.csv", tmp_path / "p.png"
    assert main([*small, "--csv", str(csv), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {csv}" in out and f"wrote {png}" in out and csv.is_file()
    assert main([*small, "--csv", str(csv), "--plot", str(png), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == [str(png), str(csv)]


def test_config_recompute_and_precision_are_used_not_searched(tmp_path, capsys):
    import argparse

    from dcpsim.cli import main
    from dcpsim.commands.plan import build_space, stated_parallel

    cfg = tmp_path / "run.toml"
    cfg.write_text('[parallel]\nrecompute = "selective"\n')
    args = argparse.Namespace(config=str(cfg), set_fields=[], recompute=None, precision=None, tp=None, pp=None,
                              vp=None, cp=None, mbs=None, tokens_per_rank=None)
    stated = stated_parallel(args)
    assert stated == {"recompute": "selective"}
    space = build_space(args, stated)
    assert space.recompute == ["selective"] and space.precision is None  # precision not stated: searched
    args.recompute = "selective,full"
    with pytest.raises(ConfigError, match="--recompute.*parallel.recompute = 'selective'"):
        build_space(args, stated)
    args.recompute = "full"
    with pytest.raises(ConfigError, match="--recompute"):
        build_space(args, stated)
    args.recompute = "selective"
    assert build_space(args, stated).recompute == ["selective"]
    assert main(["plan", "--no-progress", "--config", str(cfg), "--recompute", "full"]) == 2
    assert "--recompute" in capsys.readouterr().err


@pytest.mark.parametrize("body,field,flag", [
    ("[parallel]\ntp = 2\n", "parallel.tp", "--tp"), ("[cluster]\ngpus = 128\n", "cluster.gpus", "--sizes"),
    ('[hardware]\ngpu = "b200"\n', "hardware.gpu", "--gpus"), ('[policy]\nname = "packing"\n', "policy.name",
                                                                "--policies"),
    ("[workload]\ngbs = 128\n", "workload.gbs", "--gbs")])
def test_plan_refuses_a_config_field_it_would_overwrite(tmp_path, capsys, body, field, flag):
    """`plan --config FILE` with [parallel] tp = 2 (cluster.gpus, hardware.gpu, policy.name, or a workload field in
    a file naming no workload) planned the search's values, the file's ignored without a word: refused like --set."""
    from dcpsim.cli import main

    cfg = tmp_path / "run.toml"
    cfg.write_text(body)
    assert main(["plan", "--no-progress", "--config", str(cfg), "--sizes", "64"]) == 2
    out, err = capsys.readouterr()
    value = body.split("= ")[1].strip().strip('"')
    assert err.startswith(f"dcpsim: error: --config {field}: got ") and value in err and flag in err and out == "", err


def test_plan_refuses_a_gbs_flag_the_config_contradicts(tmp_path, capsys):
    from dcpsim.cli import main

    cfg = tmp_path / "run.toml"
    cfg.write_text('[workload]\nname = "github"\ngbs = 128\n')
    for extra in (["--gbs", "256"], ["--gbs-tokens", "4Mi"]):
        assert main(["plan", "--no-progress", "--config", str(cfg), "--sizes", "64", *extra]) == 2
        assert f"dcpsim: error: {extra[0]}: got " in capsys.readouterr().err


def test_plan_config_at_the_defaults_still_plans():
    """examples/simulate_default.toml writes every field out at its default: nothing of it is refused."""
    from pathlib import Path
    from types import SimpleNamespace

    from dcpsim.commands.plan import PLAN_OWNED
    from dcpsim.commands.plan_checks import check_config_fields
    from dcpsim.run.load import load_config

    path = str(Path(__file__).resolve().parents[1] / "examples" / "simulate_default.toml")
    check_config_fields(SimpleNamespace(config=path, gbs=None, gbs_tokens=None), load_config(path), PLAN_OWNED, True)


def test_plan_config_takes_example_names(capsys):
    """`plan --config example:default` loaded the run but then read the name as a path ("expected an existing TOML
    file"); the checks of the file's fields now read the example itself (here: its gbs against --gbs)."""
    from dcpsim.cli import main

    assert main(["plan", "--no-progress", "--config", "example:default", "--sizes", "64", "--gbs", "256"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dcpsim: error: --gbs: got ") and "existing TOML" not in err, err


@pytest.mark.parametrize("field, value, flag", [
    ("sizes", "64", "--sizes"), ("sizes", (64.5,), "--sizes"), ("tokens", "1T", "--tokens"),
    ("gpu_prices", {"h100-sxm": float("nan")}, "--gpus h100-sxm"), ("deadline_days", -1.0, "--deadline"),
    ("iterations", 0, "--iterations"), ("simulate", 0, "--simulate"), ("base", {"cluster": {"gpus": 64}}, "base"),
    ("policies", "packing", "--policies")])
def test_capacity_request_values_are_checked_before_they_are_read(field, value, flag):
    """plan_capacity read sizes='64' as the GPU counts 6 and 4 and (64.5,) as 64, costed a NaN price, took
    iterations=0 and simulate=0 for the defaults (1 simulated layout recorded as 0), and failed deep inside on
    tokens='1T' (TypeError) and a dict as base (AttributeError). Each is refused before any search."""
    from dcpsim.planning import CapacityRequest, plan_capacity

    runs = []
    req = CapacityRequest(**({"sizes": (64,), "policies": ("packing",), "seeds": 1, "simulate": 1} | {field: value}))
    with pytest.raises(ConfigError) as ei:
        plan_capacity(req, runner=lambda *a, **k: runs.append(a))
    assert ei.value.field == flag and not runs


def test_screen_first_batch_follows_a_rewritten_lengths_file(tmp_path):
    """The screen's first-batch cache was keyed by the lengths file's path: a file rewritten in the same
    process (a library user's second plan_capacity) was screened with the batch of its old content, while
    run_simulation (get_workload reads the file each time) simulated the new one."""
    import os

    from dcpsim.planning.inputs import DataSpec
    from dcpsim.planning.screen import first_batch

    f = tmp_path / "lengths.txt"
    f.write_text("\n".join(["1000"] * 50) + "\n")
    data = DataSpec(seq_len=None, workload=str(f), gbs=16, mean_len=1000.0, max_len=131072, min_len=256)
    assert set(first_batch(data, 16, 0).tolist()) == {1000}
    f.write_text("\n".join(["3000"] * 60) + "\n")
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))  # a new stamp even on a coarse clock
    assert set(first_batch(data, 16, 0).tolist()) == {3000}
