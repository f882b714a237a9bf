"""The held-out host check (experiments/host/heldout_check.py): the comparison logic on the committed
H100 measurements (profiles/h100-sxm-measured/host.json, host_check.json) and a regression guard on its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "host" / "heldout_check.py"

# Regression guards, NOT targets: the held-out mean |error| per column with the shipped h100-sxm profile was
# 18% (eager step), 16% (graphed step), 26% (microbatch host issue), 24% (microbatch device) when this test was
# written, and 18% / 8% / 27% / 15% (signed +16% / -4% / +27% / -15%) once a layer pass was priced as the
# measured block's pass (experiments/host/README.md; the held-out machine's host was faster than the one the
# [host] table was measured on). A change to the time model that pushes a column past its guard must say why
# (and move the guard with the new table), not slip through.
GUARD_MEAN_ABS = {"eager_step_s": 0.25, "graphed_step_s": 0.25, "micro_host_s": 0.35, "micro_device_s": 0.35}
# The in-sample microbatch host issue (the tiny GPT the [host] table was measured on) is -3% since a layer pass
# costs the measured block's pass (it was -38% when the pass was priced at Megatron-Core's kernel count): the
# guard keeps the layer pass priced from what was measured.
GUARD_IN_SAMPLE_MICRO_HOST = 0.10


@pytest.fixture(scope="module")
def hc(load_script):
    return load_script(SCRIPT, "heldout_check")


@pytest.fixture(scope="module")
def compared(hc):
    rows = hc.measured_rows()
    sims = [hc.simulate(r["shape"]) for r in rows]
    return [{**c, "sim": s} for c, s in zip(hc.compare(rows, sims), sims, strict=True)]


def test_measured_rows_are_the_committed_json(hc):
    """One in-sample row (host.json's tiny GPT) and the 8 held-out rows, medians read as stored."""
    rows = hc.measured_rows()
    assert [r["split"] for r in rows] == ["in-sample"] + ["held-out"] * 8
    raw = json.loads((hc.MEASURED_DIR / "host_check.json").read_text())["rows"]
    for row, r in zip(rows[1:], raw, strict=True):
        assert row["shape"].layers == r["shape"]["layers"] and row["shape"].seq == r["shape"]["seq"]
        assert row["measured_eager_step_s"] == r["eager_step_s"]["median_s"]
        assert row["measured_micro_host_s"] == r["micro_issue_host_s"]["median_s"]
    tiny = json.loads((hc.MEASURED_DIR / "host.json").read_text())["tiny_gpt"]
    assert rows[0]["measured_graphed_step_s"] == tiny["graphed_step_s"]["median_s"]


def test_error_is_computed_from_simulated_and_measured(hc):
    """Synthetic values: the signed relative error per column, and the statistics over the held-out split only."""
    assert hc.relative_error(1.5, 1.0) == pytest.approx(0.5)
    assert hc.relative_error(0.75, 1.0) == pytest.approx(-0.25)
    assert math.isnan(hc.relative_error(1.0, 0.0)) and math.isnan(hc.relative_error(math.nan, 1.0))
    shape = hc.Shape(1, 64, 1, 8, 1, 1, 100)
    rows = [{"split": s, "shape": shape, **{f"measured_{k}": 2.0 for k, _, _ in hc.COLUMNS}}
            for s in ("in-sample", "held-out", "held-out")]
    sims = [{k: 10.0 for k, _, _ in hc.COLUMNS}, {k: 3.0 for k, _, _ in hc.COLUMNS},
            {k: 1.0 for k, _, _ in hc.COLUMNS}]
    out = hc.compare(rows, sims)
    assert out[1]["error_eager_step_s"] == pytest.approx(0.5) and out[2]["error_micro_host_s"] == pytest.approx(-0.5)
    st = hc.stats(out)
    assert st["graphed_step_s"]["n"] == 2  # the in-sample row (+400%) is not in the held-out figures
    assert st["graphed_step_s"]["mean_abs"] == pytest.approx(0.5) and st["graphed_step_s"]["mean_signed"] == 0.0
    assert hc.stats(out, "in-sample")["eager_step_s"]["worst_abs"] == pytest.approx(4.0)


def test_simulated_run_is_the_measured_shape(hc, compared):
    """Each simulation runs the measured microbatch count, and its model has the measured parameter count
    within 3% (learned positions, biases and LayerNorm biases are not in dcpsim's spec)."""
    from dcpsim.model import get_model

    raw = [json.loads((hc.MEASURED_DIR / "host.json").read_text())["tiny_gpt"]]
    raw += json.loads((hc.MEASURED_DIR / "host_check.json").read_text())["rows"]
    for row, r in zip(compared, raw, strict=True):
        cfg = hc.run_config(row["shape"], hc.DEFAULT_PROFILE, "none")
        assert get_model(cfg.model.name).n_params == pytest.approx(r["parameters"], rel=0.03)
        assert cfg.cluster.gpus == 1 and cfg.parallel.mbs == r["shape"]["micro_batch"]
        assert row["sim"]["microbatches_simulated"] == r["shape"]["microbatches"]


def test_held_out_errors_stay_under_the_regression_guard(hc, compared):
    st = hc.stats(compared)
    for key, guard in GUARD_MEAN_ABS.items():
        assert st[key]["n"] == 8
        assert st[key]["mean_abs"] < guard, f"{key}: held-out mean |error| {st[key]['mean_abs']:.1%} >= {guard:.0%}"
    ins = [r for r in compared if r["split"] == "in-sample"]
    assert len(ins) == 1 and abs(ins[0]["error_micro_host_s"]) < GUARD_IN_SAMPLE_MICRO_HOST
    # CUDA graphs must make the simulated step no slower, and faster where the eager step is host-bound
    for r in compared:
        assert r["simulated_graphed_step_s"] <= r["simulated_eager_step_s"] * (1 + 1e-9)


def test_measured_device_profile_variant_keeps_the_measured_tables(hc, tmp_path):
    """The --measured-device-tables variant: h100-sxm-measured's kernel tables, h100-sxm's [host] table."""
    from dcpsim.hardware import get_profile

    prof = get_profile(str(hc.measured_device_profile(tmp_path)))
    dev, base = get_profile(str(hc.MEASURED_DIR)), get_profile(hc.DEFAULT_PROFILE)
    assert prof.host == base.host and prof.host.enabled and prof.timing.per_kernel_overhead_s == 0.0
    assert prof.gemm_rows == dev.gemm_rows and prof.attention_rows == dev.attention_rows
    assert prof.gemm_rows != base.gemm_rows


def test_other_machine_rows(hc, tmp_path):
    """--measured profiles/h200-sxm-measured: host.json's tiny GPT is split "other-machine" (no [host] figure came
    from that machine), its host_check.json rows held out; a folder without host_check.json gives host.json's row."""
    folder = hc.ROOT / "profiles" / "h200-sxm-measured"
    rows = hc.measured_rows(folder)
    assert [r["split"] for r in rows] == ["other-machine"] + ["held-out"] * 8
    tiny = json.loads((folder / "host.json").read_text())["tiny_gpt"]
    assert rows[0]["measured_eager_step_s"] == tiny["eager_step_s"]["median_s"]
    assert rows[0]["shape"] == hc.Shape(**tiny["shape"])
    (tmp_path / "host.json").write_text((folder / "host.json").read_text())
    assert [r["split"] for r in hc.measured_rows(tmp_path)] == ["other-machine"]


def test_measured_device_profile_takes_the_folders_tables(hc, tmp_path):
    from dcpsim.hardware import get_profile

    folder = hc.ROOT / "profiles" / "h200-sxm-measured"
    prof = get_profile(str(hc.measured_device_profile(tmp_path, "h200-sxm", folder)))
    dev, host = get_profile(str(folder)), get_profile("h200-sxm")
    assert prof.name == "h200-sxm-measured-with-host"
    assert prof.gemm_rows == dev.gemm_rows and prof.attention_rows == dev.attention_rows
    assert prof.host == host.host and prof.timing.per_kernel_overhead_s == 0.0


def test_measured_folder_is_checked(hc, tmp_path, capsys):
    with pytest.raises(SystemExit):
        hc.main(["--measured", str(tmp_path)])
    assert "--measured" in capsys.readouterr().err
