"""The Megatron-LM CI suite (experiments/megatron_ci): data integrity, the CI window rule, replay and CLI."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from dcpsim.published.megatron_ci import COMPARED, load_ci_suite, replay_ci

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "experiments" / "megatron_ci"


def test_suite_loads_with_hash_and_split() -> None:
    suite = load_ci_suite(CI)
    assert len(suite.rows) == 557
    h100_gpt = [r for r in suite.rows if r.raw["gpu"] == "H100" and r.raw["model_dir"] == "gpt"]
    assert len(h100_gpt) == 68
    held = {r.family for r in suite.rows if r.split == "held-out"}
    assert held == set(suite.meta["split"]["held_out_families"])
    assert sum(r.split == "held-out" for r in h100_gpt) == 23


def test_every_row_names_its_source() -> None:
    with (CI / "cases.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        assert r["golden_path"].startswith("tests/functional_tests/test_cases/") and len(r["golden_commit"]) == 40
        assert len(r["snapshot_commit"]) == 40 and math.isfinite(float(r["median_iteration_time_s"]))
        assert not r["flags_file"] or (CI / r["flags_file"]).is_file()
        if r["gpus"]:
            assert int(r["gpus"]) == int(r["nodes"]) * int(r["gpus_per_node"]) and r["recipe_path"]


def test_window_rule(load_script) -> None:
    mod = load_script(CI / "build_cases.py", "build_cases")
    series = {s: 1.0 for s in range(2, 51)} | {s: 2.0 for s in range(30, 38)} | {2: 9.0}
    med, window, steps, _ = mod.window_median(series)
    assert window == "30-45" and steps == list(range(30, 46)) and med == 1.5
    short = {s: float(s) for s in range(1, 21)}
    assert mod.window_median(short)[1:3] == ("5-20", list(range(5, 21)))
    sparse = {0: 5.0, 100: 1.0, 200: 2.0, 300: 3.0, 400: 4.0, 500: 9.0}  # no step inside 30-45: the first four after
    assert mod.window_median(sparse)[0] == 2.5
    assert mod.window_median({1: math.nan, 2: math.nan})[2] == []


@pytest.mark.slow
def test_replay_h100() -> None:
    res = replay_ci(suite_dir=CI, gpus=["H100"])
    done = [r for r in res.rows if r.status in COMPARED]
    assert len(done) >= 45
    assert all(r.simulated > 0 for r in done)
    for s in res.split_by_gpu():
        assert s["compared"] > 0


def test_replay_one_case_and_reasons() -> None:
    suite = load_ci_suite(CI)
    from dcpsim.published.megatron_ci import _run_row

    by_case = {(r.raw["case"], r.raw["gpu"]): r for r in suite.rows}
    ok = _run_row(by_case[("gpt3_mcore_te_tp2_pp2_cp2", "H100")], None)
    assert ok.status == "ok" and ok.simulated > 0 and math.isfinite(ok.error)
    moe = next(r for r in suite.rows if r.raw["model_dir"] == "moe" and r.raw["gpus"])
    assert _run_row(moe, None).reason.startswith("--")  # refused by flag name
    stale = next(r for r in suite.rows if not r.raw["gpus"] and r.raw["model_dir"] == "gpt")
    assert "GPU count unknown" in _run_row(stale, None).reason


def test_validate_megatron_ci_cli(tmp_path: Path, capsys) -> None:
    from dcpsim.cli import main

    out = tmp_path / "v"
    assert main(["validate", "--megatron-ci", "--gpu", "GB200", "--subset", "held-out", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "per GPU and split" in text
    for name in ("megatron_ci_validation.csv", "megatron_ci_validation.md", "megatron_ci_parity.png"):
        assert (out / name).is_file()


def test_validate_help_says_calibrated_and_out_apply_to_the_ci_suite() -> None:
    """--calibrated and --out act on --megatron-ci too (experiments/megatron_ci/README.md runs
    `dcpsim validate --megatron-ci --calibrated`); their help named --published alone."""
    import argparse

    from dcpsim.commands import validate

    sub = argparse.ArgumentParser().add_subparsers()
    validate.register(sub)
    helps = {a.dest: a.help for a in sub.choices["validate"]._actions}
    for dest in ("calibrated", "out"):
        assert "--megatron-ci" in helps[dest], (dest, helps[dest])
