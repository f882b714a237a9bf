"""``dcpsim calibrate``: candidate profiles, knob checks, and (slow) a real fit on the A100 fit rows."""

from __future__ import annotations

import tomllib

import pytest

from dcpsim import cli
from dcpsim.errors import ConfigError
from dcpsim.published.calibrate import _ranges, check_knobs, dump_profile_toml, profile_folder, write_profile

timing = pytest.importorskip("dcpsim.hardware.profile")
HAS_TIMING = hasattr(timing, "TIMING_FIELDS")
needs_timing = pytest.mark.skipif(not HAS_TIMING, reason="profiles without [timing] knobs in this build")


def test_ranges_and_toml_round_trip(tmp_path):
    assert _ranges([1, 2, 3, 7, 9, 10]) == "1-3,7,9-10"
    data = {"name": "x", "n": 3, "device": {"a": 1.5}, "sources": {"timing.k": 'say "why"'}}
    assert tomllib.loads(dump_profile_toml(data)) == data


@needs_timing
def test_candidate_profile_loads_with_the_knob(tmp_path):
    from dcpsim.hardware import get_profile

    out = write_profile(profile_folder("h100-sxm"), tmp_path / "c", {"gemm_efficiency_scale": 0.8}, {})
    prof = get_profile(str(out))
    assert prof.timing.gemm_efficiency_scale == 0.8
    assert "timing.gemm_efficiency_scale" in tomllib.loads((out / "profile.toml").read_text())["sources"]


@needs_timing
def test_knob_rules_name_the_flag():
    with pytest.raises(ConfigError, match="--params"):
        check_knobs("h100-sxm", ["no_such_knob"])
    with pytest.raises(ConfigError, match="--params"):
        check_knobs("h100-sxm", ["gemm_efficiency_scale"] * 6)
    assert cli.main(["calibrate", "--gpu", "b200", "--no-folds"]) == 2  # no rows of that GPU in the suite
    assert cli.main(["calibrate", "--gpu", "h100-sxm", "--apply"]) == 2  # --apply needs --out


@needs_timing
@pytest.mark.slow
def test_fit_lowers_error_on_fit_and_held_out_rows(tmp_path):
    """A100 (10 rows, one family): fitting GEMM efficiency alone reduces the error of fit AND held-out rows."""
    from dcpsim.published.calibrate import calibrate, write_calibration

    res = calibrate("a100-sxm-80gb", params=["gemm_efficiency_scale"], iterations=1, folds=False)
    assert res.fit_error["mean_abs_error"] < res.fit_error_before["mean_abs_error"]
    assert res.held_out_error["mean_abs_error"] < res.held_out_error_before["mean_abs_error"]
    assert set(res.fit_rows).isdisjoint(res.held_out_rows)
    paths = write_calibration(res, tmp_path)
    text = (tmp_path / "a100-sxm-80gb-calibrated" / "profile.toml").read_text()
    assert res.data_sha256[:16] in text and all(p.exists() for p in paths)


def test_a_knob_on_its_bound_fails_the_calibration_by_name():
    import numpy as np

    from dcpsim.errors import DcpsimError
    from dcpsim.published.calibrate import DEFAULT_PARAMS, KNOBS, KnobAtBoundError, knobs_at_bound

    ps = [KNOBS["gemm_efficiency_scale"], KNOBS["iteration_overhead_s"], KNOBS["network_efficiency"]]
    x = np.array([ps[0].to_x(0.85), ps[1].to_x(0.0), ps[2].to_x(1.5)])
    bad = knobs_at_bound(ps, x)
    assert [(n, side) for n, side, _ in bad] == [("iteration_overhead_s", "lower"), ("network_efficiency", "upper")]
    err = KnobAtBoundError(bad)
    assert isinstance(err, DcpsimError) and "network_efficiency" in str(err) and "iteration_overhead_s" in str(err)
    assert knobs_at_bound(ps[:1], x[:1]) == []
    # the launch floor that sat at its bound is no knob any more: the host model replaces it
    assert "per_kernel_overhead_s" not in KNOBS
    assert all("per_kernel_overhead_s" not in v for v in DEFAULT_PARAMS.values())
