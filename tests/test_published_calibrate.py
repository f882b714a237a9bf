"""``dcpsim calibrate``: candidate profiles, knob checks, and (slow) a real fit on the A100 fit rows."""

from __future__ import annotations

import tomllib
from pathlib import Path

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


@pytest.mark.parametrize("params", ["", ","])
def test_empty_params_is_refused(params, capsys):
    """`--params ''` ran the whole default calibration (about 30 s) as if the flag were absent."""
    assert cli.main(["calibrate", "--gpu", "h100-sxm", "--params", params, "--no-folds", "--no-host"]) == 2
    assert capsys.readouterr().err.startswith(f"dcpsim: error: --params: got {params!r}; expected at least one knob")


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
    text = (tmp_path / "a100-sxm-80gb-calibrated-local" / "profile.toml").read_text()
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


# ------------------------------------------------------------------ issue 19, item 3: shipped data is never written
def _fake_result(gpu: str = "h100-sxm"):
    """A CalibrationResult as calibrate() returns it (no simulation: only the writing is under test)."""
    from dcpsim.published.calibrate import CalibrationResult

    err = {"compared": 1, "mean_abs_error": 0.1, "worst_abs_error": 0.1}
    return CalibrationResult(gpu=gpu, params=["gemm_efficiency_scale"], uncalibrated={"gemm_efficiency_scale": 1.0},
                             fitted={"gemm_efficiency_scale": 0.9}, fit_rows=[1, 2], held_out_rows=[3],
                             fit_error=err, fit_error_before=err, held_out_error=err, held_out_error_before=err,
                             folds=[], fold_iterations=1, steps=[], data_sha256="ab" * 32,
                             revision={"git_commit": "0" * 40}, n_profile_candidates=1, wall_s=0.0)


@needs_timing
def test_apply_installs_a_new_named_profile_and_never_touches_the_shipped_one(tmp_path, monkeypatch):
    from dcpsim.hardware import get_profile, list_profiles
    from dcpsim.published.calibrate import write_calibration

    users = tmp_path / "user-profiles"
    monkeypatch.setenv("DCPSIM_PROFILES", str(users))
    shipped = profile_folder("h100-sxm") / "profile.toml"
    before = shipped.read_bytes()
    paths = write_calibration(_fake_result(), tmp_path / "out", apply=True)
    assert shipped.read_bytes() == before  # the public profile is unchanged
    assert all(profile_folder("h100-sxm") not in p.parents for p in paths)
    prof = get_profile("h100-sxm-calibrated-local")  # found by name in the user's folder
    assert prof.kind == "calibrated" and prof.timing.gemm_efficiency_scale == 0.9
    assert users in Path(prof.path).parents or Path(prof.path).parent == users
    assert get_profile("h100-sxm").kind == "public" and get_profile("h100-sxm").timing.gemm_efficiency_scale == 1.0
    assert "h100-sxm-calibrated-local" in list_profiles()
    assert (users / "h100-sxm-calibrated-local" / "CALIBRATION.md").is_file()
    assert get_profile(str(tmp_path / "out" / "h100-sxm-calibrated-local")).kind == "calibrated"


@needs_timing
def test_calibrate_refuses_shipped_names_and_folders(tmp_path, monkeypatch):
    from dcpsim.published.calibrate import write_calibration
    from dcpsim.resources import data_dir

    shipped = data_dir("profiles")
    with pytest.raises(ConfigError, match="--name.*shipped"):
        write_calibration(_fake_result(), tmp_path / "o", name="h100-sxm")
    with pytest.raises(ConfigError, match="--name.*shipped"):
        write_calibration(_fake_result(), tmp_path / "o", name="h100-sxm-calibrated")
    with pytest.raises(ConfigError, match="--out.*shipped"):
        write_calibration(_fake_result(), shipped / "h100-sxm")
    monkeypatch.setenv("DCPSIM_PROFILES", str(shipped))  # the "user" folder is the shipped one: refused
    with pytest.raises(ConfigError, match="--apply.*shipped"):
        write_calibration(_fake_result(), tmp_path / "o2", apply=True)
    assert not (shipped / "h100-sxm-calibrated-local").exists()
    # the CLI refuses before fitting (exit 2, no work)
    assert cli.main(["calibrate", "--gpu", "h100-sxm", "--out", str(tmp_path / "o3"), "--apply", "--no-folds"]) == 2
    assert cli.main(["calibrate", "--gpu", "h100-sxm", "--out", str(shipped), "--no-folds"]) == 2
    assert cli.main(["calibrate", "--gpu", "h100-sxm", "--name", "x"]) == 2  # --name needs --out


def test_shipped_calibrated_profiles_are_listed_as_calibrated():
    from dcpsim.hardware import get_profile

    assert get_profile("h100-sxm-calibrated").kind == "calibrated"
    assert get_profile("a100-sxm-80gb-calibrated").kind == "calibrated"
    assert get_profile("h100-sxm").kind == "public"


# ------------------------------------------------------------------ issue 21: host knobs on the Megatron-LM CI suite
def test_host_knobs_scale_the_framework_python_costs_of_the_base_profile():
    """host_module_scale multiplies the [host] costs that are framework Python and nothing else;
    host_step_s sets [host].step_s; each names its source; timing knobs stay in [timing]."""
    import tomllib

    from dcpsim.published.calibrate import HOST_SCALED, calibrated_profile_text, profile_folder

    base = profile_folder("h100-sxm")
    b = tomllib.loads((base / "profile.toml").read_text())
    t = tomllib.loads(calibrated_profile_text(base, {"host_module_scale": 2.0, "host_step_s": 0.004,
                                                     "gemm_efficiency_scale": 0.9}, {"host_step_s": "fit X"}))
    for k, v in b["host"].items():
        if k == "cpu":
            continue
        want = 0.004 if k == "step_s" else (2.0 * v if k in HOST_SCALED else v)
        assert t["host"][k] == pytest.approx(want), k
    assert t["sources"]["host.step_s"] == "fit X" and "host_module_scale 2" in t["sources"]["host.layer_fwd_s"]
    assert t["timing"]["gemm_efficiency_scale"] == 0.9 and "host_module_scale" not in t["timing"]


def test_host_knobs_are_declared_and_bounded():
    import numpy as np

    from dcpsim.errors import ConfigError
    from dcpsim.published.calibrate_host import check_host_knobs
    from dcpsim.published.fitting import DEFAULT_HOST_PARAMS, HOST_KNOBS, knobs_at_bound

    assert all(len(v) <= 2 and set(v) <= set(HOST_KNOBS) for v in DEFAULT_HOST_PARAMS.values())
    ps = check_host_knobs(["host_module_scale", "host_step_s"])
    assert [n for n, _, _ in knobs_at_bound(ps, np.array([ps[0].to_x(4.0), 0.01]))] == ["host_module_scale"]
    with pytest.raises(ConfigError, match="host-params"):
        check_host_knobs(["kernel_launch_s"])


@needs_timing
@pytest.mark.slow
def test_host_fit_on_ci_fit_rows_lowers_their_error():
    """The H100 host fit (about 15 s): only fit rows enter, and the fit lowers their error."""
    from dcpsim.published.calibrate_host import calibrate_host

    r = calibrate_host("h100-sxm", {}, iterations=1)
    assert r is not None and set(r["fit_rows"]).isdisjoint(r["held_out_rows"])
    assert r["fit_error"]["mean_abs_error"] < r["fit_error_before"]["mean_abs_error"]


@needs_timing
def test_rate_knobs_stop_below_the_peak(tmp_path):
    """A knob's upper end is cut where the profile would refuse the candidate (scaled rate above the peak): a fit
    step never lands on an unloadable profile, and a fit ending there counts as on its bound."""
    import math

    from dcpsim.hardware import get_profile
    from dcpsim.published.calibrate import peak_capped

    prof = get_profile("h100-sxm")
    knobs = peak_capped(check_knobs("h100-sxm", ["gemm_efficiency_scale", "fp8_gemm_efficiency_scale",
                                                 "attention_efficiency_scale", "network_efficiency"]), prof)
    by = {p.name: p for p in knobs}
    for name in ("gemm_efficiency_scale", "fp8_gemm_efficiency_scale", "attention_efficiency_scale"):
        out = write_profile(profile_folder("h100-sxm"), tmp_path / name, {name: by[name].hi}, {})
        get_profile(str(out))  # loads: the capped end is a valid candidate
    assert by["gemm_efficiency_scale"].hi < 1.6 and math.isclose(
        by["gemm_efficiency_scale"].hi, prof.peak_bf16_flops / max(r["tflops"] * 1e12 for r in prof.gemm_rows),
        rel_tol=1e-5)
    assert by["network_efficiency"].hi == 1.5  # not a rate of a kernel table: unchanged


# ------------------------------------------------------------------ issue 21: the joint fit (timing + host knobs)
def test_joint_fit_weighs_each_suite_once():
    from dcpsim.published.calibrate_joint import SUITE_WEIGHTS, suite_weights

    w = suite_weights(5, 63)
    assert SUITE_WEIGHTS == {"published": 1.0, "ci": 1.0}
    assert 5 * w["published"] ** 2 == pytest.approx(1.0) and 63 * w["ci"] ** 2 == pytest.approx(1.0)


@needs_timing
def test_joint_evaluator_runs_both_suites_on_one_candidate(tmp_path):
    """One published fit row and one CI fit row of the A100 through one candidate profile: weighted log errors, the
    host knob moving the CI step (longer with slower framework Python) and held-out rows never in the row lists."""
    import math

    import numpy as np

    from dcpsim.published.calibrate import _ci_rows, _rows_for, check_knobs
    from dcpsim.published.calibrate_joint import JointEvaluator, suite_weights
    from dcpsim.published.suite import load_suite

    fit, held, _ = _rows_for(load_suite(), "a100-sxm-80gb")
    hk, ci_fit, ci_held, _sha = _ci_rows("a100-sxm-80gb", True)
    assert all(r.split == "fit" for r in ci_fit) and all(r.split == "held-out" for r in ci_held)
    assert {rc.row.split for rc in fit} == {"fit"}
    knobs = check_knobs("a100-sxm-80gb", ["gemm_efficiency_scale"]) + hk
    rows = [fit[0], ci_fit[0]]
    w = suite_weights(1, 1)
    ev = JointEvaluator(profile_folder("a100-sxm-80gb"), knobs, tmp_path, "a100-sxm-80gb", w)
    x0 = np.array([0.0, 0.0, 0.0])  # gemm scale 1, host_module_scale 1, host_step_s 0
    r = ev.log_ratio(x0, rows)
    res = ev.run(x0, rows)
    assert r[0] == pytest.approx(math.log(res[0].simulated / res[0].row.measured))
    assert r[1] == pytest.approx(math.log(res[1].simulated / res[1].row.measured))
    slower = ev.run(np.array([0.0, math.log(2.0), 0.0]), rows[1:])[0]
    assert slower.simulated > res[1].simulated and ev.n_evals == 2


def test_joint_flag_is_parsed_and_bad_input_still_exits_2():
    assert cli.main(["calibrate", "--gpu", "b200", "--joint", "--no-folds"]) == 2
