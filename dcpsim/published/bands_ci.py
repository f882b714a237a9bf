"""The Megatron-LM CI suite's rows in the band residual file (issue 23): short, host-bound steps of tiny models.

The published runs (:mod:`dcpsim.published.bands`) are all 1.7B parameters or more and GPU-bound; a plan for a
small model or a short step lies outside them and gets no band. The CI suite (``experiments/megatron_ci``,
:mod:`dcpsim.published.megatron_ci`) covers that regime on H100 and A100, so its rows join the residual file on
the same terms as the published ones:

* the quantity is the same: ``e = ln(simulated / measured)`` of tokens/s per GPU, which for a fixed batch is
  ``ln(measured step / simulated step)``;
* the errors are out of sample: a held-out row's (``suite.toml``'s split, whole layout families) at the shipped
  calibrated profile, which never saw it; a fit row's at a refit of the calibration's host knobs
  (:func:`dcpsim.published.calibrate_host.calibrate_host`'s knobs and procedure, the timing knobs held at their
  calibrated values) **without that row's layout family**;
* nearness is the same rule (GPU type, precision class, model size, PP and CP), so a tiny-model query is
  answered from CI rows and a large one from published runs: their sizes are more than ten times apart.

A GPU whose calibrated profile has no host fit (``calibration.json`` without ``host``) contributes no CI rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

SUITE = "megatron-ci"


def precision_class(gpu: str, precision: str) -> str:
    """``fp8`` or ``16-bit`` (BF16 and FP16 run at the same tensor-core rate on every profiled GPU)."""
    p = str(precision).lower()
    return "fp8" if p == "fp8" else "16-bit"


def ci_rows(profiles: dict[str, str], calibs: dict[str, dict[str, Any]], workdir: Path,
            progress: bool = False) -> list[dict[str, Any]]:
    """Residual-file rows of the CI suite for every GPU in ``profiles`` (base -> calibrated profile name) whose
    calibration (``calibs[base]``, its calibration.json) fitted host knobs."""
    from dcpsim.published.fitting import CI_GPU
    from dcpsim.published.megatron_ci import COMPARED, load_ci_suite, row_run

    suite = load_ci_suite()
    out: list[dict[str, Any]] = []
    for base, cal in sorted(profiles.items()):
        host = (calibs.get(base) or {}).get("host")
        if base not in CI_GPU or not host:
            continue
        if progress:
            import sys

            print(f"cross-fitting {base}'s host knobs on the Megatron-LM CI suite ...", file=sys.stderr, flush=True)
        # each row's flags read once: its model and layout (the profile only names the GPU)
        runs = {r.id: run for r in suite.rows if r.raw["gpu"] == CI_GPU[base] for run in [row_run(r)[0]]
                if run is not None}
        rows = [r for r in suite.rows if r.id in runs]
        oof = _cross_fit_host(base, calibs[base], rows, workdir / f"ci-{base}")
        shipped = _at_profile(rows, {base: cal})
        for r in rows:
            res = shipped[r.id]
            ok = res.status in COMPARED and math.isfinite(res.simulated)
            e_val = math.log(r.measured / res.simulated) if ok else math.nan
            if r.split == "held-out":
                e_oos, how = e_val, "held-out CI row at the shipped calibrated profile"
            else:
                e_oos, how = oof.get(r.id, (math.nan, "not cross-fitted"))
            out.append(_row_dict(r, res, base, runs[r.id], e_val, e_oos, how))
    return out


def _at_profile(rows: list, profiles: dict[str, str]) -> dict[int, Any]:
    from dcpsim.published.megatron_ci import _run_row

    return {r.id: _run_row(r, profiles) for r in rows}


def _cross_fit_host(base: str, calib: dict[str, Any], rows: list, workdir: Path) -> dict[int, tuple[float, str]]:
    """Out-of-fold log errors (of throughput) of ``base``'s CI fit rows: host knobs refitted without the row's
    layout family, from the calibration's starting point, iterations and held timing knobs."""
    from dcpsim.published.calibrate_host import CiEvaluator, check_host_knobs
    from dcpsim.published.fitting import gauss_newton, profile_folder

    host = calib["host"]
    knobs = check_host_knobs(list(host["params"]))
    fixed = {k: float(v) for k, v in (calib.get("fitted") or {}).items()}
    x0 = np.array([p.to_x(float(host["uncalibrated"][p.name])) for p in knobs])
    iterations = max(1, len(host.get("steps") or []) or 2)
    workdir.mkdir(parents=True, exist_ok=True)
    ev = CiEvaluator(profile_folder(base), knobs, workdir, base, fixed)
    fit = [r for r in rows if r.split == "fit"]
    out: dict[int, tuple[float, str]] = {}
    for fam in sorted({r.family for r in fit}):
        train = [r for r in fit if r.family != fam]
        test = [r for r in fit if r.family == fam]
        if not train:
            continue
        xf, _ = gauss_newton(ev, train, x0, iterations)
        for r, lr in zip(test, ev.log_ratio(xf, test), strict=True):
            out[r.id] = (-float(lr), f"host knobs refitted without CI family {fam}")
    return out


def _row_dict(r, res, base: str, run, e_val: float, e_oos: float, how: str) -> dict[str, Any]:
    from dcpsim.model import get_model

    p = run.config.parallel
    model = get_model(run.config.model.name)
    return {
        "suite": SUITE, "row": r.id, "model": r.raw["case"], "family": r.family, "split": r.split, "gpu": base,
        "precision": str(p.precision), "precision_class": precision_class(base, str(p.precision)),
        "source": f"{r.raw['golden_path']}@{r.raw['golden_commit']}", "status": res.status,
        "gpus": int(r.raw["gpus"]), "measured_step_s": r.measured, "simulated_step_s": res.simulated,
        "log_error_calibrated": e_val, "log_error_out_of_sample": e_oos, "out_of_sample_from": how,
        "mfu_measured": math.nan, "params": float(model.n_params), "tp": int(p.tp), "pp": int(p.pp),
        "cp": int(p.cp), "vp": int(getattr(p, "vp", 1) or 1), "recompute": str(p.recompute),
        "gated_mlp": bool(model.gated_mlp),
        "recompute_mode": "full" if str(p.recompute) == "full" else "none/selective",
    }
