"""Settings travel whole: every cost-model setting reaches every derived cost model, and the simulator's
settings come from the configuration by field name (issue 20)."""

from __future__ import annotations

import ast
from dataclasses import MISSING, fields
from pathlib import Path

import numpy as np
import pytest

from dcpsim.cost import CostModel, CostSettings
from dcpsim.hardware import get_profile
from dcpsim.model import get_model
from dcpsim.run.config import RunConfig
from dcpsim.run.load import config_from_dict
from dcpsim.sim.settings import SimSettings

# One value per CostSettings field, each different from the field's default, so a derivation that
# re-built the settings and dropped a field would silently fall back to the default and be caught.
NON_DEFAULT = dict(tp=2, pp=4, dp_cp=8, cp_comm="all_gather", recompute="selective", memory_limit_bytes=60e9,
                   precision="fp8", tp_comm_overlap=True, first_stage_layers=8, last_stage_layers=8,
                   attention="unfused", microbatches_in_flight=5.0, cross_entropy="unfused", grad_bytes_per_param=2.0,
                   deterministic_fill=True,
                   rope_fusion=False, transformer_impl="local", attention_mask=False, test_mode_qk_checks=True)


def _full_settings() -> CostSettings:
    return CostSettings(get_profile("h100-sxm"), get_model("llama-13b"), **NON_DEFAULT)


def test_fixture_sets_every_cost_setting_away_from_its_default():
    """If a field is added to CostSettings, this fixture must set it too (else the carry test below is blind to it)."""
    for f in fields(CostSettings):
        if f.name in ("profile", "model"):
            continue
        assert f.name in NON_DEFAULT, f"NON_DEFAULT lacks CostSettings.{f.name}"
        assert f.default is not MISSING and NON_DEFAULT[f.name] != f.default, f.name


def _assert_carried(derived: CostModel, original: CostModel, replaced: set[str]) -> None:
    for f in fields(CostSettings):
        if f.name in replaced:
            continue
        assert getattr(derived.settings, f.name) is getattr(original.settings, f.name) or \
            getattr(derived.settings, f.name) == getattr(original.settings, f.name), f"{f.name} not carried"
    # what the settings decide, too
    assert derived.memory_limit_bytes == original.memory_limit_bytes
    assert derived.stage_layers.tolist() == original.stage_layers.tolist()
    if "dp_cp" not in replaced:  # DP x CP shards the optimizer state: it moves the memory figure
        np.testing.assert_array_equal(derived.peak_memory_bytes([4096.0], [4096.0**2]),
                                      original.peak_memory_bytes([4096.0], [4096.0**2]))


def test_network_scaled_cost_model_carries_every_setting():
    from dcpsim.sim.durations import DurationModel
    from dcpsim.sim.topology import Topology

    cost = CostModel(_full_settings())
    dm = DurationModel(cost, Topology(tp=2, pp=4, dp=4, cp=2))
    scaled = dm._cost_for(0.5)
    assert scaled is not cost and scaled.profile.name.endswith("@net0.5")
    _assert_carried(scaled, cost, {"profile"})
    # the profile keeps everything but its network bandwidths
    assert scaled.profile.hbm_bytes == cost.profile.hbm_bytes
    assert scaled.profile.timing == cost.profile.timing


def test_planning_dp_variant_carries_every_setting():
    from dcpsim.planning.space import _cached_cost

    cfg = config_from_dict({"model": {"name": "llama-13b"}, "cluster": {"gpus": 64},
                            "parallel": {"tp": 2, "pp": 4, "cp": 2, "recompute": "selective", "precision": "fp8",
                                         "cross_entropy": "unfused", "first_stage_layers": 8, "last_stage_layers": 8},
                            "sim": {"grad_reduce_bytes_per_param": 2, "tp_comm_overlap": True},
                            "step": {"deterministic": True}})
    from dcpsim.run.single import build_cost_model

    full = build_cost_model(cfg)
    other = _cached_cost(cfg, key=("test_settings: dp variant",), dp_cp=full.dp_cp * 2)
    assert other.dp_cp == full.dp_cp * 2
    _assert_carried(other, full, {"dp_cp"})
    assert other.grad_bytes_per_param == 2.0 and other.tp_comm_overlap and other.cross_entropy == "unfused"
    assert full.settings.deterministic_fill and other.settings.deterministic_fill


def test_derive_validates_and_carries():
    cost = CostModel(_full_settings())
    _assert_carried(cost.derive(dp_cp=16), cost, {"dp_cp"})
    from dcpsim.errors import ConfigError

    with pytest.raises(ConfigError, match="dp_cp"):
        cost.derive(dp_cp=0)


def test_cost_settings_are_built_in_one_place():
    """CostSettings(...) is called only where settings are made from scratch (CostModel.build and the run
    configuration's cost_settings); every variant is dataclasses.replace (CostModel.derive)."""
    root = Path(__file__).resolve().parents[1] / "dcpsim"
    callers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "CostSettings":
                callers.add(str(path.relative_to(root)))
    assert callers == {"cost/model.py", "run/single.py"}


def test_sim_settings_fields_all_come_from_the_config():
    from dcpsim.run.single import sim_settings

    names = set(RunConfig.model_fields["sim"].annotation.model_fields)
    missing = [f.name for f in fields(SimSettings) if f.name not in names]
    assert not missing, f"SimSettings fields with no sim.* config field: {missing}"
    cfg = config_from_dict({"sim": {"noise_cv": 0.25, "grad_bucket_params": 1234, "cp_switch_s": 0.5,
                                    "network": "shared", "planning": "stall"}})
    s = sim_settings(cfg)
    for f in fields(SimSettings):
        assert getattr(s, f.name) == getattr(cfg.sim, f.name), f.name


def test_grad_reduce_bytes_peak_memory_does_not_depend_on_network_scale():
    """Regression (issue 20): DurationModel's network-scaled cost model dropped grad_bytes_per_param, so with
    sim.grad_reduce_bytes_per_param = 2 llama2-7b on 16 GPUs at cp 16 (a CP ring leaving the NVLink domain)
    reported 42.76 GiB peak at network_scale 0.5 and 30.20 GiB at 1.0."""
    from dcpsim.run.single import run_simulation

    peaks = []
    for scale in (1.0, 0.5):
        cfg = config_from_dict({
            "model": {"name": "llama2-7b"}, "hardware": {"gpu": "h100-sxm", "network_scale": scale},
            "cluster": {"gpus": 16}, "parallel": {"tp": 1, "pp": 1, "cp": 16, "max_tokens_per_rank": 16384},
            "workload": {"name": "github", "gbs": 16, "min_len": 256, "max_len": 65536},
            "policy": {"name": "packing"}, "sim": {"iterations": 1, "grad_reduce_bytes_per_param": 2}})
        res = run_simulation(cfg)
        peaks.append(res.summary["peak_memory_gib"])
        assert res.records[0].work.spans_network.any()  # the case that takes the scaled cost model
    assert peaks[0] == peaks[1]
    assert peaks[0] < 35.0  # BF16 gradients: not the 4-byte buffer the dropped setting fell back to


def test_simulator_variant_carries_cost_model_settings_and_host_flags():
    """Long runs measure slow-GPU and degraded-link ratios on variants of the run's simulator: they keep its
    cost model, host flags and settings (unless replaced), and none of its sampled faults."""
    from dataclasses import replace

    from dcpsim.run.single import build_simulator

    cfg = config_from_dict({"sim": {"noise_cv": 0.1, "network": "shared", "straggler_fraction": 0.5,
                                    "straggler_slowdown": 2.0}})
    sim = build_simulator(cfg)
    assert sim.durations.faults.straggler_gpus.size
    v = sim.variant(settings=replace(sim.settings, network="ideal"))
    assert v.cost is sim.cost and v.host_flags is sim.host_flags and v.durations.host_flags == sim.durations.host_flags
    assert v.settings == replace(sim.settings, network="ideal")
    assert v.durations.faults is None and v.topology == sim.topology
