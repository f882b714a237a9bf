"""Prediction bands, calibrated defaults, the published-MFU bound and the plan report."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dcpsim.published import bands


def _rows(errors, gpu="a100-sxm-80gb", precision="BF16", params=7e9, split="held-out"):
    return [{"row": i + 1, "model": f"m{i}", "gpu": gpu, "precision": precision,
             "precision_class": bands.precision_class(gpu, precision), "split": split, "source": f"src{i}",
             "log_error_out_of_sample": e, "params": params, "pp": 1, "cp": 1, "mfu_measured": 0.4 + 0.01 * i}
            for i, e in enumerate(errors)]


def test_conformal_quantiles_index_rule():
    e = np.sort(np.linspace(-0.1, 0.1, 10))
    lo, hi = bands.conformal_quantiles(e, 0.8)
    assert (lo, hi) == (e[0], e[-1])  # n = 10: floor(11 * 0.1) = 1st, ceil(11 * 0.9) = 10th
    e19 = np.sort(np.linspace(-0.2, 0.2, 19))
    assert bands.conformal_quantiles(e19, 0.8) == (e19[1], e19[17])
    assert all(math.isnan(v) for v in bands.conformal_quantiles(e[:8], 0.8))  # too few for 80%


def test_band_factors_and_refusals():
    errs = [-0.15, -0.1, -0.05, 0.0, 0.02, 0.05, 0.08, 0.1, 0.12, 0.2]
    t = bands.BandTable({"rows": _rows(errs)})
    b = t.band("a100-sxm-80gb-calibrated", "bf16", bands.BandQuery(7e9))
    # measured = predicted * exp(-e): the interval runs from exp(-max e) to exp(-min e)
    assert b.ok and b.n == 10 and b.lo == pytest.approx(math.exp(-0.2)) and b.hi == pytest.approx(math.exp(0.15))
    lo, hi = b.duration(100.0)
    assert lo == pytest.approx(100 * math.exp(-0.15)) and hi == pytest.approx(100 * math.exp(0.2))
    assert b.throughput(10.0) == pytest.approx((10 * b.lo, 10 * b.hi))
    # a datasheet profile, another precision, too few runs, an unseen model size: no band, with the reason
    assert not t.band("a100-sxm-80gb", "bf16", bands.BandQuery(7e9)).ok
    assert "not calibrated" in t.band("a100-sxm-80gb", "bf16", bands.BandQuery(7e9)).reason
    assert "only 0 validated" in t.band("a100-sxm-80gb-calibrated", "fp8", bands.BandQuery(7e9)).reason
    assert not bands.BandTable({"rows": _rows(errs[:5])}).band("a100-sxm-80gb-calibrated", "bf16", bands.BandQuery(7e9)).ok
    far = t.band("a100-sxm-80gb-calibrated", "bf16", bands.BandQuery(7e11))
    assert not far.ok and "within 10x" in far.reason
    assert not t.band("h200-sxm", "bf16", bands.BandQuery(7e9)).ok  # no calibrated profile, no runs


def test_coverage_is_leave_one_out():
    rng = np.random.default_rng(0)
    t = bands.BandTable({"rows": _rows(list(rng.normal(0.0, 0.1, 40)))})
    cov = t.coverage(0.8)
    assert cov["with_band"] == 40 and 0.6 <= cov["coverage"] <= 1.0
    # each row's band excludes the row itself: a lone outlier is never inside
    rows = _rows([0.0] * 20 + [1.0])
    c2 = bands.BandTable({"rows": rows}).coverage(0.8)
    assert [p["covered"] for p in c2["rows"] if p["row"] == 21] == [False]


def test_ci_rows_answer_small_models_and_leave_one_out_by_suite():
    """The CI suite's rows (tiny models, short steps) join the residual file: a tiny-model query rests on them,
    a large one on the published runs; leave-one-out excludes by (suite, row), so equal row ids of the two
    suites never shadow each other; coverage is reported per suite."""
    pub = _rows([0.05] * 12, params=7e9)
    ci = [dict(r, suite="megatron-ci", gated_mlp=False, recompute_mode="none/selective")
          for r in _rows(list(np.linspace(-0.3, 0.3, 12)), params=1e8)]
    t = bands.BandTable({"rows": pub + ci})
    small = t.band("a100-sxm-80gb-calibrated", "bf16", bands.BandQuery(1e8))
    assert small.ok and "12 validated" in small.basis and "CI steps" in small.basis and small.lo < 0.8 < 1.3 < small.hi
    big = t.band("a100-sxm-80gb-calibrated", "bf16", bands.BandQuery(7e9))
    assert big.ok and "CI" not in big.basis and big.lo == pytest.approx(math.exp(-0.05))
    # row 1 exists in both suites: excluding the CI one leaves the published one in the pool
    assert len(t.usable("a100-sxm-80gb", "16-bit", exclude=("megatron-ci", 1))) == 23
    assert len(t.usable("a100-sxm-80gb", "16-bit", exclude=1)) == 23  # a bare id is a published row
    cov = t.coverage(0.8, "held-out", suite="megatron-ci")
    assert cov["suite"] == "megatron-ci" and len(cov["rows"]) == 12 and cov["with_band"] == 12
    assert t.coverage(0.8)["suite"] == "published" and len(t.coverage(0.8)["rows"]) == 12
    assert bands.ci_coverage(t)["compared"] == 12
    # the caveat reads a CI row's own regime fields
    gated = t.band("a100-sxm-80gb-calibrated", "bf16", bands.BandQuery(1e8, gated_mlp=True))
    assert "gated" in gated.caveat
    assert [g["suite"] for g in t.groups()] == ["megatron-ci", "published"]


def test_best_mfu_names_its_row_and_source():
    t = bands.BandTable({"rows": _rows([0.0] * 10)})
    best = t.best_mfu("a100-sxm-80gb-calibrated", "fp16")
    assert best["row"] == 10 and best["mfu"] == pytest.approx(0.49) and best["source"] == "src9"
    other = t.best_mfu("h100-sxm", "bf16")  # no run on that GPU: the best on any GPU, flagged
    assert other["row"] == 10 and not other["same_gpu"]
    assert t.best_mfu("h100-sxm", "fp8") is None


def test_best_mfu_reads_a_datasheet_alias_as_its_gpu():
    """``<gpu>-datasheet`` is the same GPU: its best run is that GPU's, not any GPU's (plan's warning named
    H100's 55.6% as 'none on a100-sxm-80gb-datasheet' beside A100's published 52.0%)."""
    assert bands.base_gpu("a100-sxm-80gb-datasheet") == "a100-sxm-80gb"
    assert bands.base_gpu("h100-sxm-calibrated") == "h100-sxm" and bands.base_gpu("b200") == "b200"
    t = bands.BandTable({"rows": _rows([0.0] * 10)})
    best = t.best_mfu("a100-sxm-80gb-datasheet", "fp16")
    assert best["same_gpu"] and best["gpu"] == "a100-sxm-80gb" and best["row"] == 10


def test_shipped_residuals_are_dcpsims_own():
    """The shipped file was computed by dcpsim from the suite: measured values are the CSV's, each
    log error is ln(simulated / measured) of the stored simulation, held-out rows' out-of-sample error is
    the validation error, and the file names the commit that produced it."""
    from dcpsim.published.suite import load_suite

    data = json.loads(bands.bands_path().read_text())
    assert len(data["dcpsim_commit"]) == 40 and data["data_sha256"] == load_suite().data_sha256
    suite = {r.id: r for r in load_suite().rows}
    n = 0
    for r in data["rows"]:
        if bands.suite_of(r) != "published":
            continue
        assert r["measured_tokens_per_s_per_gpu"] == suite[r["row"]].measured
        if r["log_error_calibrated"] is None:
            continue
        assert r["log_error_calibrated"] == pytest.approx(
            math.log(r["simulated_tokens_per_s_per_gpu"] / r["measured_tokens_per_s_per_gpu"]))
        if r["split"] == "held-out":
            assert r["log_error_out_of_sample"] == r["log_error_calibrated"]
        else:
            assert r["out_of_sample_from"].startswith("refit without")
        n += 1
    assert n >= 60


def test_calibrated_default_and_datasheet_by_name():
    from dcpsim.hardware import get_profile
    from dcpsim.hardware.defaults import is_calibrated, profile_label, resolve_gpu

    assert resolve_gpu("h100-sxm") == "h100-sxm-calibrated"
    assert resolve_gpu("a100-sxm-80gb") == "a100-sxm-80gb-calibrated"
    assert resolve_gpu("h100-sxm-calibrated") == "h100-sxm-calibrated"
    assert resolve_gpu("h100-sxm-datasheet") == "h100-sxm-datasheet"  # resolving twice changes nothing
    assert resolve_gpu("h200-sxm") == "h200-sxm"  # no calibrated profile: the datasheet one, visibly
    assert get_profile("h100-sxm-datasheet").timing == get_profile("h100-sxm").timing
    assert is_calibrated("h100-sxm-calibrated") and not is_calibrated("h100-sxm")
    assert "calibrated" in profile_label("h100-sxm-calibrated") and "fit rows" in profile_label("h100-sxm-calibrated")
    assert "UNCALIBRATED" in profile_label("h200-sxm") and "upper bound" in profile_label("h200-sxm")
    assert "UNCALIBRATED" in profile_label("h100-sxm-datasheet")
    from dcpsim.hardware import list_profiles

    measured = [n for n in list_profiles() if get_profile(n).kind in ("measured", "mixed")]
    for n in measured:
        assert "measured kernel tables" in profile_label(n) and resolve_gpu(n) == n


def test_annotate_bands_and_mfu_warning():
    from dcpsim.planning.trust import annotate

    df = pd.DataFrame([
        {"gpu": "a100-sxm-80gb-calibrated", "gpus": 64, "policy": "packing", "status": "ok", "precision": "bf16",
         "pp": 1, "cp": 1, "tokens_per_s": 2e5, "tflops_per_gpu": 140.0, "gpu_hours": 1000.0,
         "effective_days": 1.0, "cost": 1500.0},
        {"gpu": "a100-sxm-80gb-datasheet", "gpus": 64, "policy": "packing", "status": "ok", "precision": "bf16",
         "pp": 1, "cp": 1, "tokens_per_s": 3e5, "tflops_per_gpu": 230.0, "gpu_hours": 700.0,
         "effective_days": 0.7, "cost": 1000.0},
        {"gpu": "h200-sxm", "gpus": 64, "policy": "packing", "status": "ok", "precision": "bf16",
         "pp": 1, "cp": 1, "tokens_per_s": 3e5, "tflops_per_gpu": 650.0, "gpu_hours": 700.0,
         "effective_days": 0.7, "cost": 1000.0}])
    warnings = annotate(df, "llama2-7b")
    cal, ds, h200 = df.to_dict("records")
    assert cal["band_runs"] >= bands.MIN_RUNS and cal["gpu_hours_band_lo"] < 1000 < cal["gpu_hours_band_hi"] * 1.5
    assert cal["cost_band_lo"] / cal["gpu_hours_band_lo"] == pytest.approx(1.5)
    assert not ds["band_basis"] and "not calibrated" in ds["band_reason"]
    # every validated A100 run is a plain-MLP GPT with full recompute: a gated-MLP model without it is flagged
    assert "gated MLP" in cal["band_caveat"] and "recompute" in cal["band_caveat"]
    assert not h200["band_basis"] and "UNCALIBRATED" in h200["profile_label"]
    # 230 TFLOPS of 312 = 74% is above every published A100 run: warned, naming the figure and source
    assert ds["above_published_mfu"] and not cal["above_published_mfu"]
    mfu_warn = [w for w in warnings if "BF16 peak" in w and "datasheet" in w]
    assert len(mfu_warn) == 1 and "a100-sxm-80gb-datasheet" in mfu_warn[0] and "row " in mfu_warn[0]
    assert f"{100 * ds['best_published_mfu']:.1f}% (published" in mfu_warn[0]
    # the H200 has no published run: held to the best on any GPU, and said so
    assert h200["above_published_mfu"] and any("none on h200-sxm" in w for w in warnings)
    assert any("compares calibrated profiles" in w for w in warnings)


def test_hardware_utilization_counts_recompute():
    assert bands.hardware_utilization(0.39, "full (uniform, every layer)") == pytest.approx(0.52)
    assert bands.hardware_utilization(0.39, "selective") == pytest.approx(0.39)
    assert bands.hardware_utilization(0.39, None) == pytest.approx(0.39)


def test_plan_report_and_bands_on_the_output(tmp_path, capsys):
    """`dcpsim plan --out DIR` writes plan.md and plan.png (only there); the text names the profile and the band."""
    from dcpsim.cli import main

    out = tmp_path / "report"
    args = ["plan", "--model", "llama2-7b", "--gpus", "a100-sxm-80gb:1.5,h200-sxm:3", "--sizes", "32", "--gbs", "64",
            "--tp", "1", "--pp", "1", "--mbs", "1", "--recompute", "none", "--precision", "bf16", "--policies",
            "packing", "--tokens", "1e11", "-j", "1", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "a100-sxm-80gb-calibrated: calibrated" in text and "h200-sxm: UNCALIBRATED" in text
    assert "compares calibrated profiles" in text  # mixed calibrated / uncalibrated rows are flagged
    assert "validated a100-sxm-80gb BF16/FP16 runs" in text  # the band and what it rests on
    md = (out / "plan.md").read_text()
    for part in ("## The chosen configuration", "80% interval", "### Where an iteration's time goes",
                 "### Goodput under failures", "## Profiles", "## Every GPU type"):
        assert part in md
    assert (out / "plan.png").stat().st_size > 10_000
    assert sorted(p.name for p in out.iterdir()) == [".dcpsim-manifest.json", "plan.md", "plan.png"]


def test_plan_report_without_a_band_says_so(tmp_path, capsys):
    """plan.md of a row with no band read 'Band: **none**: <why>. It covers the time model's ... error': 'It' was
    the band that is not there. It says the figures carry no interval and what a band would cover."""
    from dcpsim.cli import main

    out = tmp_path / "report"
    assert main(["plan", "--model", "llama2-7b", "--gpus", "h100-sxm-datasheet:2", "--sizes", "64", "--policies",
                 "packing", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    line = next(x for x in (out / "plan.md").read_text().splitlines() if x.startswith("Band: "))
    assert line.startswith("Band: **none**: profile h100-sxm-datasheet is not calibrated") and "It covers" not in line
    assert "The figures above carry no interval; a band would cover only the time model's" in line, line


def test_shipped_residuals_match_the_shipped_calibrated_profiles():
    """A refitted calibrated profile makes the shipped residuals stale: rebuild them (`dcpsim bands build`)."""
    from dcpsim.hardware.defaults import calibration_info

    data = json.loads(bands.bands_path().read_text())
    assert data["profiles"], "no calibrated profile in the residual file"
    for base, p in data["profiles"].items():
        info = calibration_info(p["profile"])
        assert info is not None and info["revision"]["git_commit"] == p["fitted_at"], (
            f"{p['profile']} was refitted after the residuals were computed: run `dcpsim bands build --out DIR` and "
            "copy DIR/bands.json to experiments/published_throughput/results/")
        assert sorted(info["fit_rows"]) == sorted(p["fit_rows"]), base


def test_sweep_reads_bare_gpu_names_as_calibrated(tmp_path):
    from dcpsim.commands.sweep import sweep_gpus, with_default_profiles
    from dcpsim.run.sweep import load_sweep_spec

    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nname = "t"\n[base]\nhardware.gpu = "h100-sxm"\n[[axes]]\n'
                 'hardware.gpu = ["a100-sxm-80gb", "h200-sxm", "h100-sxm-datasheet"]\n')
    spec = with_default_profiles(load_sweep_spec(f))
    assert spec.base.hardware.gpu == "h100-sxm-calibrated"
    assert sweep_gpus(spec) == ["h100-sxm-calibrated", "a100-sxm-80gb-calibrated", "h200-sxm", "h100-sxm-datasheet"]
    assert [r.config.hardware.gpu for r in spec.runs()] == sweep_gpus(spec)[1:]


@pytest.mark.parametrize("axis", ['{choices = ["a100-sxm-80gb", "h100-sxm"]}', '["a100-sxm-80gb", "h100-sxm"]'])
def test_sweep_reads_bare_gpu_names_of_a_random_axis_as_calibrated(tmp_path, axis):
    """A random axis `hardware.gpu = {choices = [...]}` (or a plain list) ran the uncalibrated datasheet profiles
    (118.9 against 110.1 TFLOPS/GPU for llama2-7b on one H100) and printed no profile line for them, where a grid
    axis of the same names runs the calibrated ones."""
    from dcpsim.commands.sweep import sweep_gpus, with_default_profiles
    from dcpsim.run.sweep import load_sweep_spec

    f = tmp_path / "s.toml"
    f.write_text(f'[sweep]\nname = "t"\n[base]\nhardware.gpu = "b200"\n[[axes]]\nmode = "random"\nsamples = 8\n'
                 f'seed = 5\nhardware.gpu = {axis}\n')
    raw = load_sweep_spec(f)
    spec = with_default_profiles(raw)
    assert sweep_gpus(spec) == ["b200", "a100-sxm-80gb-calibrated", "h100-sxm-calibrated"]
    drawn = [r.config.hardware.gpu for r in spec.runs()]
    assert set(drawn) == {"a100-sxm-80gb-calibrated", "h100-sxm-calibrated"}
    assert drawn == [g + "-calibrated" for g in (r.config.hardware.gpu for r in raw.runs())]  # the same draws


def test_simulate_prints_the_band_and_the_profile(tmp_path, capsys):
    from dcpsim.cli import main

    run = tmp_path / "run.toml"
    run.write_text('[model]\nname = "llama2-7b"\n[hardware]\ngpu = "a100-sxm-80gb"\n[cluster]\ngpus = 16\n'
                   '[parallel]\ntp = 1\npp = 1\ncp = 1\nrecompute = "full"\n'
                   '[workload]\nname = "fixed"\nseq_len = 4096\ngbs = 16\n[sim]\niterations = 1\n')
    assert main(["simulate", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["gpu"].endswith("calibrated") or "a100-sxm-80gb-calibrated" in out["profile"]
    t = out["trust"]
    lo, hi = t["tokens_per_s_band"]
    assert t["band_runs"] == 10 and lo < out["summary"]["tokens_per_s"] < hi * 1.2
    assert "gated MLP" in t["band_caveat"] and "recompute" not in t["band_caveat"]  # full recompute, like SC21
    run.write_text(run.read_text().replace('gpu = "a100-sxm-80gb"', 'gpu = "a100-sxm-80gb-datasheet"')
                   .replace('recompute = "full"', 'recompute = "none"'))
    assert main(["simulate", str(run)]) == 0
    text = capsys.readouterr().out
    assert "UNCALIBRATED" in text and "no 80% band: profile a100-sxm-80gb-datasheet is not calibrated" in text
    assert "above the best published" in text  # the datasheet A100 runs this 7B far above 52% of peak


@pytest.mark.parametrize("content,why", [("not json", "not readable JSON"), ("{}", "no list of residual rows"),
                                         ('{"rows": [1]}', "no list of residual rows")])
def test_bands_file_that_is_no_residual_file_is_one_line(tmp_path, capsys, content, why):
    """`dcpsim bands --file garbage.json` was a Python traceback (JSONDecodeError); `{}` printed '0 of 0 (nan%)'."""
    from dcpsim.cli import main

    f = tmp_path / "x.json"
    f.write_text(content)
    assert main(["bands", "--file", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dcpsim: error: --file: got") and why in err and "Traceback" not in err, err


@pytest.mark.parametrize("args,flag", [(["show", "--out", "x"], "--out"), (["build", "--file", "x.json"], "--file"),
                                       (["-j", "2"], "-j/--jobs")])
def test_bands_flags_of_the_other_action_are_refused(tmp_path, capsys, args, flag):
    """`dcpsim bands show --out DIR` wrote nothing and said nothing: the flag belongs to `build`."""
    from dcpsim.cli import main

    args = [str(tmp_path / a) if a == "x" else a for a in args]
    assert main(["bands", *args]) == 2
    assert capsys.readouterr().err.startswith(f"dcpsim: error: {flag}: got")
    assert not (tmp_path / "x").exists()


def test_simulate_warning_on_a_gpu_without_published_runs_says_the_bound_is_another_gpus():
    """`dcpsim simulate` on b200 warned "above the best published h100-sxm BF16 run", as if the bound were b200's
    own; `dcpsim plan` says "(none on b200; best on h100-sxm)". The simulate warning now says it too."""
    from dcpsim.planning.trust import run_trust
    from dcpsim.run.config import RunConfig

    cfg = RunConfig().with_updates({"hardware.gpu": "b200"})
    w = run_trust(cfg, {"tokens_per_s": 1e6, "tflops_per_gpu": 2000.0})["warning"]
    assert "none on b200" in w and "best on h100-sxm" in w, w
    same = run_trust(RunConfig(), {"tokens_per_s": 1e6, "tflops_per_gpu": 900.0})["warning"]
    assert "published h100-sxm BF16 run" in same and "none on" not in same, same
