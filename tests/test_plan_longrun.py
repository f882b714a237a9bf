"""Capacity planning with the long-run fault simulation and both network modes; simulate and sweep with them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dcpsim.planning import CapacityRequest, FailureModel, SearchSpace, plan_capacity
from dcpsim.run.config import RunConfig

FORCED = SearchSpace(tp=[1], pp=[2], cp=[1], mbs=[1], recompute=["none"], precision=["bf16"])
SMALL = dict(seq_len=4096, gbs=64, policies=["packing"], space=FORCED)


def _plan(tokens: float = 1e12, base: RunConfig | None = None, runner=None, **kw):
    return plan_capacity(CapacityRequest("llama2-7b", None, tokens, {"h100-sxm": 2.5}, [32], base=base, **SMALL, **kw),
                         jobs=1, runner=runner)


@pytest.mark.slow  # a long-run plan with several seeds; CI runs it (make test-slow)
def test_plan_goodput_agrees_with_young_daly_within_the_seed_spread():
    """32 GPUs, 1T tokens (~2 weeks), a 320 h GPU MTBF: ~35 failures per run, 12 long runs, no slow episodes."""
    fm = FailureModel(gpu_mtbf_h=320.0, checkpoint_s=60.0, restart_s=600.0)
    plan = _plan(failures=fm, long_run_seeds=12)
    r = plan.rows.iloc[0]
    assert r["status"] == "ok" and r["network"] == "ideal" and r["goodput_source"].startswith("long-run simulation")
    assert r["long_run_horizon"] == "planned duration" and r["failures_per_run"] > 20
    assert r["long_run_horizon_h"] == pytest.approx(r["time_to_train_h"] / r["goodput_young_daly"], rel=1e-9)
    # the model's exact expectation within 3 standard errors; the first-order figure inside the spread of the runs
    stderr = r["goodput_std"] / np.sqrt(12)
    assert abs(r["goodput"] - r["goodput_renewal"]) <= 3 * stderr + 1e-3
    assert r["goodput_min"] <= r["goodput_young_daly"] <= r["goodput_max"]
    assert r["goodput_young_daly"] == pytest.approx(fm.goodput(32), abs=1e-3)  # one set of formulas
    # effective time at the simulated goodput, its spread and the analytic figures beside it
    assert r["effective_time_h"] == pytest.approx(r["time_to_train_h"] / r["goodput"])
    assert r["effective_days_min"] <= r["effective_days"] <= r["effective_days_max"]
    assert r["effective_days_std"] > 0 and r["cost_std"] > 0
    assert r["effective_days_young_daly"] == pytest.approx(r["time_to_train_h"] / r["goodput_young_daly"] / 24)
    assert r["expected_failures"] == pytest.approx(r["failures_sim"], rel=0.25)
    assert plan.request["failures"]["gpu_mtbf_h"] == 320.0 and plan.request["long_run"]["seeds"] == 12
    assert "simulated long runs; Young/Daly" in plan.recommendation
    # one seed, one result
    again = _plan(failures=fm, long_run_seeds=12)
    pd.testing.assert_frame_equal(plan.rows.drop(columns=["search_cpu_s"]), again.rows.drop(columns=["search_cpu_s"]))


def test_plan_evaluates_the_best_layout_on_the_shared_network_with_slow_episodes():
    base = RunConfig().with_updates({"sim.network": "shared", "sim.gpu_mtbf_h": 1000.0, "sim.long_run_seeds": 4,
                                     "sim.slow_gpu_per_day": 20.0, "sim.slow_gpu_slowdown": 2.0,
                                     "sim.long_run_hours": 48.0})
    plan = _plan(1e11, base=base)
    r = plan.rows.iloc[0]
    assert r["status"] == "ok", r["reason"]
    assert r["network"] == "shared" and r["search_network"] == "ideal" and plan.request["network"]["final"] == "shared"
    assert r["tokens_per_s_search"] > 0 and r["tokens_per_s"] > 0
    assert r["long_run_horizon_h"] == 48.0 and r["long_run_horizon"] == "sim.long_run_hours"
    assert r["slow_gpu_ratio"] > 1.0 and r["degraded_link_ratio"] == 1.0
    # slow episodes cost goodput the first-order failure formula does not see
    assert r["goodput"] < r["goodput_young_daly"]
    # the search itself stayed on the ideal network (its layouts table)
    assert (plan.layouts["status"] == "ok").all()


def test_a_runner_returning_summaries_still_gets_the_long_run():
    from dcpsim.run.single import run_simulation

    plan = _plan(1e11, runner=lambda cfg: run_simulation(cfg).summary)
    r = plan.rows.iloc[0]
    assert r["status"] == "ok" and r["goodput_source"].startswith("long-run simulation")
    assert r["long_run_sample_iterations"] == 1  # the summary's mean iteration stands for the sample
    # with episodes on, a plan to measure them on is needed: said in the row, not a traceback
    base = RunConfig().with_updates({"sim.slow_gpu_per_day": 1.0})
    r = _plan(1e11, base=base, runner=lambda cfg: run_simulation(cfg).summary).rows.iloc[0]
    assert r["status"] == "infeasible" and "episodes" in r["reason"]


def test_cli_plan_network_and_failure_flags(capsys):
    from dcpsim.cli import main

    args = ["plan", "--model", "llama2-7b", "--gpus", "h100-sxm:2.5", "--sizes", "32", "--gbs", "64", "--tp", "1",
            "--pp", "2", "--cp", "1", "--mbs", "1", "--recompute", "none", "--precision", "bf16", "--policies",
            "packing", "--tokens", "1e11", "-j", "1", "--no-progress"]
    rc = main(args + ["--network", "shared", "--mtbf-gpu-hours", "500", "--long-run-seeds", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    row = out["rows"][0]
    assert row["network"] == "shared" and row["long_run_seeds"] == 3 and row["goodput_std"] >= 0
    assert out["request"]["failures"]["gpu_mtbf_h"] == 500.0
    # the text output says which mode each figure used and prints the analytic check beside the simulation
    assert main(args + ["--set", "sim.network=shared"]) == 0
    text = capsys.readouterr().out
    assert "best layouts evaluated on shared" in text and "Young/Daly" in text and "goodput (sim)" in text
    assert "Llama 3 report" in text
    # one concept, one value: contradictory inputs are refused on one line
    assert main(args + ["--mtbf-gpu-hours", "500", "--set", "sim.gpu_mtbf_h=900"]) == 2
    err = capsys.readouterr().err
    assert "--set sim.gpu_mtbf_h" in err and "--mtbf-gpu-hours" in err and len(err.strip().splitlines()) == 1
    assert main(args + ["--iterations", "2", "--set", "sim.iterations=3"]) == 2
    assert "--iterations" in capsys.readouterr().err
    # an unknown network model is refused with status 2 naming the flag (argparse's choices or the registry's check)
    try:
        rc = main(args + ["--network", "lossy"])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and "--network" in err and "lossy" in err


def test_simulate_cli_shared_network_with_faults(tmp_path, capsys):
    from dcpsim.cli import main

    run = tmp_path / "run.toml"
    run.write_text('model.name = "llama-13b"\ncluster.gpus = 32\nparallel = {tp = 1, pp = 4, cp = 2, '
                   'max_tokens_per_rank = 8192}\nworkload = {name = "github", gbs = 32, max_len = 16384}\n'
                   'sim.iterations = 2\n')
    argv = ["simulate", str(run), "--set", "sim.long_run_hours=48", "--set", "sim.gpu_mtbf_h=100", "--set",
            "sim.long_run_seeds=4", "--json"]
    out = {}
    for net in ("ideal", "shared"):
        assert main(argv + ["--network", net]) == 0  # the flag derived from sim.network
        out[net] = json.loads(capsys.readouterr().out)["summary"]
        assert out[net]["network"] == net and 0 < out[net]["goodput_min"] <= out[net]["goodput_max"] < 1
    assert main(argv + ["--set", "sim.network=shared"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["goodput_mean"] == out["shared"]["goodput_mean"]
    assert main(argv[:-1] + ["--set", "sim.network=shared"]) == 0
    assert "long run (48 h x 4 seeds, shared network): goodput" in capsys.readouterr().out


def test_sweep_over_network_and_mtbf_has_the_goodput_columns(tmp_path):
    from dcpsim.run.sweep import SweepOptions, load_results, run_sweep, sweep_spec_from_dict

    spec = sweep_spec_from_dict({
        "base": {"model": {"name": "llama-13b"}, "cluster": {"gpus": 32},
                 "parallel": {"tp": 1, "pp": 4, "cp": 2, "max_tokens_per_rank": 8192},
                 "workload": {"name": "github", "gbs": 32, "max_len": 16384},
                 "sim": {"iterations": 1, "long_run_hours": 24.0, "long_run_seeds": 3}},
        "sweep": {"name": "net-faults"},
        "axes": [{"sim.network": ["ideal", "shared"], "sim.gpu_mtbf_h": [200.0, 2000.0]}],
    })
    run_sweep(spec, tmp_path / "a", SweepOptions(progress=False))
    df = load_results(tmp_path / "a")
    assert len(df) == 4 and (df["status"] == "ok").all(), df[["status", "reason"]]
    for c in ("goodput_mean", "goodput_std", "goodput_min", "goodput_max", "young_daly_goodput", "failures_mean"):
        assert df[c].notna().all(), c
    assert set(df["network"]) == {"ideal", "shared"}
    by = df.groupby("sim.gpu_mtbf_h")["young_daly_goodput"].mean()
    assert by[200.0] < by[2000.0]  # more failures, less goodput
    run_sweep(spec, tmp_path / "b", SweepOptions(progress=False))  # one seed, one result
    cols = ["sim.network", "sim.gpu_mtbf_h", "goodput_mean", "goodput_std", "tokens_per_s"]
    a = df[cols].sort_values(cols[:2]).reset_index(drop=True)
    b = load_results(tmp_path / "b")[cols].sort_values(cols[:2]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.slow
def test_variable_length_plan_on_the_shared_network_with_faults_and_episodes():
    """Long-context data, packing vs dynamic, 64 and 128 GPUs, shared network, slow GPUs and degraded links."""
    base = RunConfig().with_updates({"sim.network": "shared", "sim.gpu_mtbf_h": 2000.0, "sim.long_run_seeds": 6,
                                     "sim.slow_gpu_per_day": 4.0, "sim.degraded_link_per_day": 4.0,
                                     "sim.degraded_link_episode_scale": 0.1})
    plan = plan_capacity(CapacityRequest("llama-13b", "github", 2e10, {"h100-sxm": 2.5}, [64, 128],
                                         gbs=128, base=base.with_updates({"workload.max_len": 32768}),
                                         policies=["packing", "dynamic"], space=SearchSpace(tp=[1], pp=[2, 4]),
                                         seeds=2), jobs=1)
    ok = plan.rows[plan.rows["status"] == "ok"]
    assert len(ok) == 4, plan.rows[["status", "reason"]]
    assert (ok["network"] == "shared").all() and (ok["long_run_sample_iterations"] == 2 * 2).all()
    assert (ok["slow_gpu_ratio"] >= 1.0).all() and (ok["degraded_link_ratio"] >= 1.0).all()
    assert (ok["goodput_min"] <= ok["goodput"]).all() and (ok["goodput"] <= ok["goodput_max"]).all()
    assert (ok["effective_days_min"] <= ok["effective_days_max"]).all()


def test_api_failures_and_base_config_must_agree():
    from dcpsim.errors import ConfigError

    base = RunConfig().with_updates({"sim.gpu_mtbf_h": 1000.0})
    with pytest.raises(ConfigError, match="sim.gpu_mtbf_h"):
        _plan(1e11, base=base, failures=FailureModel(gpu_mtbf_h=2000.0))


def test_young_daly_where_the_first_order_formula_does_not_apply_is_no_figure(tmp_path, capsys):
    """512 GPUs at a GPU MTBF of 100 h: a job MTBF (0.20 h) no longer than restart + half a checkpoint segment.
    The formula's clamped 0 was printed as 'Young/Daly 0.0%' beside a simulated 34.7%; it is n/a with the reason
    in the text, plan.md and JSON (null plus goodput_young_daly_note); the simulated goodput is unchanged."""
    from dcpsim.cli import main

    argv = ["plan", "--no-progress", "--model", "llama2-7b", "--gpus", "h100-sxm:2", "--sizes", "512", "--policies",
            "packing", "--mtbf-gpu-hours", "100"]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["rows"][0]
    assert r["goodput_young_daly"] is None and r["goodput"] > 0.2, r
    assert r["goodput_young_daly_note"].startswith("n/a (job MTBF 0.20 h <= restart + half a checkpoint segment")
    assert main([*argv, "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    md = (tmp_path / "rep" / "plan.md").read_text()
    for text in (out, md):
        assert "Young/Daly n/a (job MTBF 0.20 h" in text and "Young/Daly 0.0%" not in text, text
