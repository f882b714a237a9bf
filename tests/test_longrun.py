"""Long runs: failures from the MTBF model, checkpoint/restart, slow episodes; goodput against Young/Daly."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.sim.longrun import (
    Episodes,
    LongRun,
    long_run_summary,
    renewal_goodput,
    simulate_long_run,
    young_daly_goodput,
)

LLAMA3_MTBF_H = 54 * 24 * 16384 / 419


def test_without_failures_goodput_is_the_checkpoint_share():
    lr = LongRun(hours=48, gpu_mtbf_h=1e12, checkpoint_s=60, checkpoint_interval_s=600)
    r = simulate_long_run(np.full(3, 10.0), 1024, lr, np.random.default_rng(0))
    assert r["failures"] == 0 and r["checkpoint_every_iterations"] == 60
    assert r["goodput"] == pytest.approx(600 / 660, rel=1e-12)
    # slow episodes covering the run from its first minutes: every iteration 1.5x longer
    slow = LongRun(hours=48, gpu_mtbf_h=1e12, checkpoint_s=60, checkpoint_interval_s=600,
                   slow_gpu=Episodes(per_day=1e4, episode_s=1e9, ratio=1.5))
    r = simulate_long_run(np.full(3, 10.0), 1024, slow, np.random.default_rng(0))
    assert r["goodput"] == pytest.approx(600 / (900 + 60), rel=1e-3)


def test_goodput_matches_young_daly_within_the_seed_spread():
    """16,384 GPUs at the Llama 3 failure rate for 20 days: ~150 failures per run, 12 seeds."""
    lr = LongRun(hours=20 * 24, gpu_mtbf_h=LLAMA3_MTBF_H, checkpoint_s=60, restart_s=600)
    s = long_run_summary(np.full(4, 8.0), 16384, lr, seeds=12, seed=1)
    assert s["failures_mean"] > 100
    stderr = s["goodput_std"] / np.sqrt(12)
    # this model's exact expectation: within 3 standard errors of the mean
    assert abs(s["goodput_mean"] - s["renewal_goodput"]) <= 3 * stderr + 1e-3
    # the first-order Young/Daly figure: inside the spread of the runs
    assert s["goodput_min"] <= s["young_daly_goodput"] <= s["goodput_max"]
    assert s["young_daly_goodput"] == pytest.approx(young_daly_goodput(16384, lr, 8.0))
    assert renewal_goodput(16384, lr, 8.0) == pytest.approx(s["young_daly_goodput"], abs=0.02)


def test_one_seed_one_result_and_slowness_costs():
    lr = LongRun(hours=24 * 5, gpu_mtbf_h=LLAMA3_MTBF_H)
    a = long_run_summary(np.array([7.0, 9.0]), 8192, lr, seeds=4, seed=3)
    b = long_run_summary(np.array([7.0, 9.0]), 8192, lr, seeds=4, seed=3)
    assert a == b
    slow = LongRun(hours=24 * 5, gpu_mtbf_h=LLAMA3_MTBF_H, slow_gpu=Episodes(per_day=6, episode_s=7200, ratio=1.4),
                   degraded_link=Episodes(per_day=2, episode_s=3600, ratio=2.0))
    c = long_run_summary(np.array([7.0, 9.0]), 8192, slow, seeds=4, seed=3)
    assert c["goodput_mean"] < a["goodput_mean"]


def test_bad_long_run_settings_name_the_field():
    with pytest.raises(ConfigError, match="sim.gpu_mtbf_h"):
        LongRun(hours=1, gpu_mtbf_h=0)
    with pytest.raises(ConfigError, match="iteration times"):
        simulate_long_run(np.array([]), 8, LongRun(hours=1, gpu_mtbf_h=1), np.random.default_rng(0))


def test_run_simulation_reports_goodput():
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    cfg = config_from_dict({"cluster": {"gpus": 64}, "parallel": {"pp": 2, "cp": 2}, "workload": {"gbs": 64},
                            "sim": {"iterations": 2, "planning": "ignore", "long_run_hours": 240, "long_run_seeds": 3,
                                    "slow_gpu_per_day": 3, "slow_gpu_slowdown": 2.0}})
    s = run_simulation(cfg).summary
    assert 0 < s["goodput_min"] <= s["goodput_mean"] <= s["goodput_max"] < 1
    assert s["slow_gpu_ratio"] > 1.0 and s["degraded_link_ratio"] == 1.0  # no link episodes asked for
    assert s["long_run_seeds"] == 3


def test_simulate_long_run_line_gives_no_figure_where_young_daly_does_not_apply():
    """`dcpsim simulate example:default --set sim.long_run_hours=48 --set sim.gpu_mtbf_h=10` printed 'Young/Daly
    0.00%' beside a simulated 30.65%: the first-order formula's clamp. The line now says n/a and why; where the
    formula applies it prints the figure as before."""
    from dcpsim.commands.simulate import long_run_line

    s = {"long_run_seeds": 8, "goodput_mean": 0.3065, "goodput_std": 0.0184, "goodput_min": 0.28, "goodput_max": 0.34,
         "young_daly_goodput": 0.0, "failures_mean": 144.5, "checkpoint_every_iterations": 7, "slow_gpu_ratio": 1.0,
         "degraded_link_ratio": 1.0}
    line = long_run_line(s, {"sim": {"long_run_hours": 48}})
    assert "Young/Daly n/a (" in line and "0.00%" not in line.split("Young/Daly")[1].split(",")[0], line
    assert "Young/Daly 97.10%," in long_run_line(s | {"young_daly_goodput": 0.971}, {"sim": {"long_run_hours": 48}})
