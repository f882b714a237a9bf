"""Megatron's run-time costs of dynamic CP (sim.dynamic_cp_padding, dynamic_cp_exchange, cp_switch_s) and the
sensitivity knob sim.microbatch_overhead_s: each switchable, each only where it applies."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.run.load import config_from_dict
from dcpsim.run.single import run_simulation

BASE = {
    "model": {"name": "llama-13b"},
    "hardware": {"gpu": "h100-sxm"},
    "cluster": {"gpus": 16},
    "parallel": {"tp": 1, "pp": 2, "cp": 2, "max_tokens_per_rank": 16384},
    "workload": {"name": {"type": "wikipedia_shape", "mean": 2000.0}, "gbs": 64, "min_len": 256, "max_len": 32768},
    "sim": {"iterations": 1, "seed": 3},
}


def run(policy: str, **sim):
    d = {**BASE, "policy": {"name": policy}, "sim": {**BASE["sim"], **sim}}
    return run_simulation(config_from_dict(d))


@pytest.mark.parametrize("policy", ["dynamic-pr2959", "dynamic"])
def test_padding_is_timed_not_counted(policy):
    off, on = run(policy), run(policy, dynamic_cp_padding=True)
    assert on.iterations["flops"].sum() == pytest.approx(off.iterations["flops"].sum(), rel=1e-12)
    ranks = 8  # DP x CP ranks per stage: 16 GPUs / PP 2
    assert all((np.asarray(p.lengths) % (2 * ranks) == 0).all() for p in on.plans)
    for p_on, p_off in zip(on.plans, off.plans, strict=True):  # the policy planned the padded samples
        assert p_on.counted_lengths is not None and (p_on.counted_lengths == p_off.lengths).all()
        assert (p_on.lengths >= p_on.counted_lengths).all() and (p_on.lengths - p_on.counted_lengths < 2 * ranks).all()


def test_runtime_costs_touch_only_dynamic_plans():
    base = run("packing")
    for kw in ({"dynamic_cp_padding": True}, {"dynamic_cp_exchange": "sync"}, {"cp_switch_s": 0.01}):
        assert run("packing", **kw).iterations["iteration_time_s"].sum() == base.iterations["iteration_time_s"].sum()


def test_exchange_and_switch_cost_time():
    t = {m: run("dynamic-pr2959", dynamic_cp_exchange=m).iterations["iteration_time_s"].sum()
         for m in ("none", "async", "sync")}
    assert t["none"] < t["async"] < t["sync"]
    plan = run("dynamic-pr2959").plans[0]
    sizes = [[g.size for g in s.groups] for s in plan.steps]
    assert len({tuple(x) for x in sizes}) > 1  # the plan changes CP sizes between microbatches
    sw = run("dynamic-pr2959", cp_switch_s=0.05).iterations["iteration_time_s"].sum()
    assert sw > t["none"] + 0.05


def test_microbatch_overhead_costs_every_policy():
    for pol in ("packing", "dynamic-pr2959"):
        a, b = run(pol), run(pol, microbatch_overhead_s=0.01)
        steps = len(a.plans[0].steps)
        assert b.iterations["iteration_time_s"].sum() >= a.iterations["iteration_time_s"].sum() + 0.01 * steps * (1 - 1e-9)


@pytest.mark.parametrize("bad", [{"dynamic_cp_exchange": "fast"}, {"cp_switch_s": -1.0}, {"microbatch_overhead_s": -0.1}])
def test_bad_values_are_config_errors(bad):
    with pytest.raises(ConfigError):
        config_from_dict({**BASE, "sim": {**BASE["sim"], **bad}})
