"""Run configuration: defaults, validation errors that name the field, hashing, dotted updates."""

from __future__ import annotations

import pytest

from dcpsim.errors import ConfigError
from dcpsim.run import RunConfig, config_from_dict, load_config


def test_defaults_resolve():
    cfg = RunConfig()
    assert cfg.dp == cfg.cluster.gpus // (cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.cp)
    assert cfg.resolved()["derived"]["dp"] == cfg.dp
    assert len(cfg.config_hash()) == 12


@pytest.mark.parametrize(
    "d,field",
    [
        ({"parallel": {"cp": 3}}, "cluster.gpus"),
        ({"parallel": {"tp": 0}}, "parallel.tp"),
        ({"parallel": {"cpp": 2}}, "parallel.cpp"),
        ({"workload": {"min_len": 500, "max_len": 100}}, "workload.min_len"),
        ({"sim": {"planning": "later"}}, "sim.planning"),
    ],
)
def test_errors_name_the_field(d, field):
    with pytest.raises(ConfigError) as ei:
        config_from_dict(d)
    assert ei.value.field == field
    assert str(ei.value).startswith(field)


def test_hash_changes_with_any_field_and_not_otherwise():
    a, b = RunConfig(), RunConfig()
    assert a.config_hash() == b.config_hash()
    assert a.with_updates({"sim.seed": 1}).config_hash() != a.config_hash()
    assert a.with_updates({"parallel.cp": 4}).dp == a.dp // 2


def test_unknown_dotted_update_is_refused():
    with pytest.raises(ConfigError, match="parallel.nope"):
        RunConfig().with_updates({"parallel.nope": 1})


def test_load_config_names_file(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[parallel]\ntp = 'x'\n")
    with pytest.raises(ConfigError) as ei:
        load_config(f)
    assert "run.toml" in str(ei.value) and ei.value.field == "parallel.tp"
    with pytest.raises(ConfigError, match="an existing TOML file"):
        load_config(tmp_path / "missing.toml")


# ------------------------------------------------------------------ issue 19, item 5: bounded ranges
@pytest.mark.parametrize("path,value", [("hardware.network_scale", 1e-300), ("sim.degraded_link_scale", 1e-300),
                                        ("sim.degraded_link_episode_scale", 1e-300), ("sim.gpu_mtbf_h", 1e-300),
                                        ("sim.checkpoint_interval_s", 1e-300), ("sim.slow_gpu_episode_s", 1e-300),
                                        ("sim.degraded_link_episode_s", 1e-300), ("hardware.network_scale", 1e300)])
def test_extreme_values_are_refused_with_the_range(path, value):
    """--set hardware.network_scale=1e-300 printed a 300-digit time; every scale and duration has a bounded range."""
    from dcpsim.errors import ConfigError
    from dcpsim.run.config import RunConfig

    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        RunConfig().with_updates({path: value})


def test_cli_set_network_scale_tiny_exits_2(capsys):
    from pathlib import Path

    from dcpsim.cli import main

    example = Path(__file__).resolve().parents[1] / "examples" / "simulate_default.toml"
    assert main(["simulate", str(example), "--set", "hardware.network_scale=1e-300"]) == 2
    err = capsys.readouterr().err
    assert "hardware.network_scale" in err and "0.001" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("updates, field", [([("cluster.gpus", 64)], "updates"), (None, "updates"),
                                            ({3: 64}, "3"), ({("cluster", "gpus"): 64}, "('cluster', 'gpus')")])
def test_with_updates_refuses_a_non_mapping_or_a_non_text_path_naming_it(updates, field):
    """RunConfig().with_updates([('cluster.gpus', 64)]) raised "'list' object has no attribute 'items'" and
    {3: 64} "'int' object has no attribute 'split'" (bare AttributeErrors from inside)."""
    with pytest.raises(ConfigError) as ei:
        RunConfig().with_updates(updates)
    assert ei.value.field == field


@pytest.mark.parametrize("kw, field", [
    ({"batches": [[4096.5] * 8]}, "batches[0]"), ({"batches": [[float("nan")] * 8]}, "batches[0]"),
    ({"batches": [[float("inf")] * 8]}, "batches[0]"), ({"plans": []}, "plans"), ({"plans": [1]}, "plans")])
def test_run_simulation_checks_what_it_is_handed_beside_the_config(kw, field):
    """run_simulation cast given batches to int64: [4096.5] was simulated as 4096 tokens without a word and nan
    reached the lengths check as -9223372036854775808 (a numpy RuntimeWarning); plans=[] simulated nothing
    (iteration_time_s 0.0) and plans=[1] raised "'int' object has no attribute 'steps'"."""
    from dcpsim.run.single import run_simulation

    with pytest.raises(ConfigError) as ei:
        run_simulation(RunConfig(), **kw)
    assert ei.value.field == field


@pytest.mark.parametrize("cfg", ["example.toml", {"cluster": {"gpus": 64}}, None])
def test_run_simulation_refuses_a_config_that_is_not_a_run_config(cfg):
    """It raised "'str' object has no attribute 'parallel'"."""
    from dcpsim.run.single import run_simulation

    with pytest.raises(ConfigError, match="a RunConfig") as ei:
        run_simulation(cfg)
    assert ei.value.field == "cfg"


@pytest.mark.parametrize("kw, field", [({"trace_max_tracks": 0}, "trace_max_tracks"),
                                       ({"trace_max_tracks": 2.5}, "trace_max_tracks"),
                                       ({"config_hash": 5}, "config_hash")])
def test_run_simulation_refuses_a_clamped_track_count_or_a_non_text_hash(tmp_path, kw, field):
    """trace_max_tracks=0 (or -5) drew one track and 2.5 two, without a word; config_hash=5 was written as the
    run's hash (summary['config_hash'] == 5)."""
    from dcpsim.run.single import run_simulation

    with pytest.raises(ConfigError) as ei:
        run_simulation(RunConfig(), trace_path=tmp_path / "t.json", **kw)
    assert ei.value.field == field and not (tmp_path / "t.json").exists()
