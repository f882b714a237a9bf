"""The host knobs' fit on the Megatron-LM CI suite (issue 21): ``dcpsim calibrate`` runs it after the timing knobs.

Declared before any fit (:data:`dcpsim.published.fitting.DEFAULT_HOST_PARAMS`): ``host_module_scale`` and
``host_step_s`` per GPU profile (one CPU type each). Fitted on the CI suite's rows of that GPU whose split is
``fit`` (``experiments/megatron_ci/suite.toml``, whole layout families held out), the objective the squared log
error of the step time, by the same bounded Gauss-Newton as the timing knobs; the held-out rows are only
simulated. A knob on its bound is reported in ``at_bound`` and fails the calibration.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.published.fitting import (
    CI_GPU,
    DEFAULT_HOST_PARAMS,
    HOST_KNOBS,
    Param,
    gauss_newton,
    knobs_at_bound,
    profile_folder,
    write_profile,
)


@dataclass
class CiEvaluator:
    """Simulates Megatron-LM CI rows (:mod:`dcpsim.published.megatron_ci`) at host-knob values, the timing
    knobs ``fixed`` at their fitted values, through candidate profile folders (counts simulations)."""

    base: Path
    params: list[Param]
    workdir: Path
    gpu: str
    fixed: dict[str, float] = field(default_factory=dict)
    n_evals: int = 0
    cache: dict[tuple, Any] = field(default_factory=dict)
    on_row: Callable[[str], None] | None = None

    def values(self, x: np.ndarray) -> dict[str, float]:
        return {p.name: p.from_x(float(v)) for p, v in zip(self.params, x, strict=True)}

    def run(self, x: np.ndarray, rows: list) -> list:
        from dcpsim.published.megatron_ci import _run_row as _run_ci_row

        key_x = tuple(np.round(np.asarray(x, dtype=float), 12))
        todo = [r for r in rows if (key_x, r.id) not in self.cache]
        if todo:
            folder = write_profile(self.base, self.workdir / f"host{self.n_evals:04d}",
                                   {**self.fixed, **self.values(x)}, {})
            self.n_evals += 1
            for r in todo:
                self.cache[(key_x, r.id)] = _run_ci_row(r, {self.gpu: str(folder)})
                if self.on_row is not None:
                    self.on_row(f"host candidate {self.n_evals}, CI row {r.id}")
        return [self.cache[(key_x, r.id)] for r in rows]

    def log_ratio(self, x: np.ndarray, rows: list) -> np.ndarray:
        """log(simulated / measured step time) per CI row (NaN for rows not compared)."""
        from dcpsim.published.megatron_ci import STATUS_OK

        return np.array([math.log(r.simulated / r.row.measured) if r.status == STATUS_OK else math.nan
                         for r in self.run(x, rows)])


def _ci_errors(results: list) -> dict[str, Any]:
    from dcpsim.published.megatron_ci import STATUS_OK

    errs = [abs(r.error) for r in results if r.status == STATUS_OK]
    return {"rows": [r.row.id for r in results], "compared": len(errs),
            "mean_abs_error": float(np.mean(errs)) if errs else math.nan,
            "worst_abs_error": float(np.max(errs)) if errs else math.nan}


def check_host_knobs(names: list[str]) -> list[Param]:
    """Host knobs by name (:data:`HOST_KNOBS`); ConfigError naming an unknown one."""
    out = []
    for n in names:
        if n not in HOST_KNOBS:
            raise ConfigError("--host-params", n, f"host knobs among {sorted(HOST_KNOBS)}")
        out.append(HOST_KNOBS[n])
    return out


def _pct(v: float) -> str:
    return f"{v * 100:.1f}%" if isinstance(v, float) and math.isfinite(v) else "-"


def host_markdown(h: dict[str, Any]) -> list[str]:
    """The CALIBRATION.md section of a host fit (:func:`calibrate_host`'s result)."""
    how = ("Fitted jointly with the timing knobs (dcpsim.published.calibrate_joint: one objective, each suite's mean "
           "squared log error counting once) on the published fit rows and the CI suite's fit rows of this GPU"
           if h.get("mode") == "joint" else
           "Fitted after the timing knobs (held at their fitted values) on the CI suite's fit rows of this GPU")
    lines = ["", "## Host knobs on the Megatron-LM CI suite", "",
             f"{how} (experiments/megatron_ci/suite.toml, split by layout family; data sha256 "
             f"`{h['data_sha256'][:16]}`); objective: squared log error of the step time; "
             f"{h['n_profile_candidates']} candidate profiles.", "",
             "| knob | uncalibrated | fitted |", "|---|---:|---:|"]
    lines += [f"| {k} | {h['uncalibrated'][k]:.6g} | {h['fitted'][k]:.6g} |" for k in h["params"]]
    lines += ["", "| CI rows | n | mean abs error before | after | worst before | after |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, a, b in (("fit", h["fit_error_before"], h["fit_error"]),
                       ("held-out", h["held_out_error_before"], h["held_out_error"])):
        lines.append(f"| {name} | {b['compared']} | {_pct(a['mean_abs_error'])} | {_pct(b['mean_abs_error'])} | "
                     f"{_pct(a['worst_abs_error'])} | {_pct(b['worst_abs_error'])} |")
    if "published_fit_error" in h:
        f, o = h["published_fit_error"], h["published_held_out_error"]
        held = "" if h.get("mode") == "joint" else "; the tables above hold the host knobs at 1 and 0"
        lines += ["", f"The published suite's rows on the profile as written (timing and host knobs together{held}): "
                  "mean / worst |error| of tokens/s per GPU, fit "
                  f"rows {_pct(f['mean_abs_error'])} / {_pct(f['worst_abs_error'])} (n = {f['compared']}), held-out "
                  f"rows {_pct(o['mean_abs_error'])} / {_pct(o['worst_abs_error'])} (n = {o['compared']})."]
    return lines


def calibrate_host(gpu: str, fixed: dict[str, float], *, params: list[str] | None = None, iterations: int = 2,
                   ci_suite_dir: str | Path | None = None, workdir: Path | None = None,
                   on_row: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Fit the host knobs of ``gpu`` (:data:`DEFAULT_HOST_PARAMS`) on the Megatron-LM CI suite's fit rows of
    that GPU (suite.toml's split, by layout family), with the timing knobs held at ``fixed``; the held-out
    rows are only simulated. None when the GPU has no declared host knobs or no CI rows. The result's
    ``at_bound`` lists knobs on a bound (the caller fails the calibration)."""
    from dcpsim.published.megatron_ci import load_ci_suite, row_run

    names = params if params is not None else DEFAULT_HOST_PARAMS.get(gpu, [])
    if not names or gpu not in CI_GPU:
        return None
    knobs = check_host_knobs(names)
    suite = load_ci_suite(ci_suite_dir)
    rows = [r for r in suite.rows if r.raw["gpu"] == CI_GPU[gpu] and row_run(r)[0] is not None]
    fit = [r for r in rows if r.split == "fit"]
    held = [r for r in rows if r.split == "held-out"]
    if not fit:
        return None
    base = profile_folder(gpu)
    x0 = np.array([p.to_x(1.0 if p.name == "host_module_scale" else 0.0) for p in knobs])
    with tempfile.TemporaryDirectory(prefix="dcpsim-host-") as tmp:  # candidate profiles: removed afterwards
        ev = CiEvaluator(base, knobs, Path(workdir) if workdir else Path(tmp), gpu, dict(fixed), on_row=on_row)
        x, steps = gauss_newton(ev, fit, x0, iterations)
        before_fit, after_fit = ev.run(x0, fit), ev.run(x, fit)
        before_held, after_held = ev.run(x0, held), ev.run(x, held)
    return {"params": [p.name for p in knobs], "uncalibrated": ev.values(x0), "fitted": ev.values(x),
            "fit_rows": [r.id for r in fit], "held_out_rows": [r.id for r in held],
            "fit_error_before": _ci_errors(before_fit), "fit_error": _ci_errors(after_fit),
            "held_out_error_before": _ci_errors(before_held), "held_out_error": _ci_errors(after_held),
            "steps": steps, "data_sha256": suite.data_sha256, "n_profile_candidates": ev.n_evals,
            "at_bound": knobs_at_bound(knobs, x),
            "rows": [r.as_dict() for r in after_fit + after_held]}
