"""Capacity planning: failure model, layout choice, Pareto front, recommendation, and a small real plan."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from dcpsim.errors import ConfigError
from dcpsim.planning import (
    FailureModel,
    choose_layout,
    llama3_gpu_mtbf_hours,
    pareto_front,
    parse_duration_days,
    parse_gpu_prices,
    plan_capacity,
    recommend,
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


def test_layout_choice():
    base = RunConfig()  # llama-13b, M = 65536, max_len = 131072, full recompute
    t, p, c = choose_layout(base, 512)
    assert (t, c) == (1, 2) and 40 % p == 0
    # the chosen PP fits memory and the next smaller one does not
    from dcpsim.cost import CostModel
    from dcpsim.model import get_model, memory_per_gpu

    m = get_model("llama-13b")
    limit = CostModel("h100-sxm", m).memory_limit_bytes

    def mem(pp: int) -> float:
        return memory_per_gpu(m, tokens_per_rank=65536, tp=1, pp=pp, dp=512 // (pp * 2), cp=2).total_bytes

    assert mem(p) <= limit and (p == 1 or mem(p // 2) > limit)
    # more memory per GPU never needs more stages
    assert choose_layout(base.with_updates({"hardware.gpu": "b200"}), 512)[1] <= p
    assert choose_layout(base, 512, tp=2, pp=8, cp=4) == (2, 8, 4)
    big = base.with_updates({"parallel.max_tokens_per_rank": 16384})
    assert choose_layout(big, 512)[2] == 8  # 131072 / 16384


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


def test_small_real_plan(tmp_path):
    base = RunConfig().with_updates({"workload.max_len": 16384, "parallel.max_tokens_per_rank": 8192,
                                     "workload.gbs": 32})
    plan = plan_capacity("llama-13b", "github", 1e11, {"h100-sxm": 2.0, "h200-sxm": 3.0}, [32, 64],
                         base=base, deadline_days=1e6, pp=4, jobs=1)
    df = plan.rows
    assert len(df) == 2 * 2 * 2 and (df["status"] == "ok").all(), df[["status", "reason"]]
    assert (df["cp"] == 2).all() and (df["dp"] == df["gpus"] // 8).all()
    assert (df["gbs"] == df["gpus"]).all()  # 32 sequences at 32 GPUs, grown in proportion
    assert np.allclose(df["time_to_train_h"], 1e11 / df["tokens_per_s"] / 3600)
    assert np.allclose(df["effective_time_h"], df["time_to_train_h"] / df["goodput"])
    assert np.allclose(df["gpu_hours"], df["gpus"] * df["effective_time_h"])
    assert np.allclose(df["cost"], df["gpu_hours"] * df["price_per_gpu_h"])
    smallest = df[df["gpus"] == 32]
    assert np.allclose(smallest["scaling_efficiency"], 1.0)
    assert df["pareto"].any() and df["meets_deadline"].all()
    assert plan.recommendation.startswith("Recommended")
    best = df[df["meets_deadline"]].sort_values(["cost", "effective_time_h"]).iloc[0]
    assert f"{int(best['gpus'])} x {best['gpu']} with {best['policy']}" in plan.recommendation
    d = json.loads(json.dumps(plan.to_dict()))
    assert len(d["rows"]) == 8 and d["request"]["failures"]["gpu_mtbf_h"] == pytest.approx(llama3_gpu_mtbf_hours())


def test_cli_plan(tmp_path, capsys):
    from dcpsim.cli import main

    run = tmp_path / "base.toml"
    run.write_text("[parallel]\nmax_tokens_per_rank = 8192\n[workload]\ngbs = 32\nmax_len = 16384\n")
    png = tmp_path / "plan.png"
    rc = main(["plan", "--config", str(run), "--gpus", "h100-sxm:2.5", "--sizes", "32,64", "--pp", "4",
               "--tokens", "1e11", "--deadline", "0.5h", "-j", "1", "--plot", str(png), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recommendation"].startswith("No configuration meets the 0.0208333-day deadline")
    assert png.stat().st_size > 1000
    assert not any(r["meets_deadline"] for r in out["rows"])
    assert all(math.isfinite(r["cost"]) for r in out["rows"])
    assert main(["plan", "--gpus", "h100-sxm", "--sizes", "32"]) == 2
