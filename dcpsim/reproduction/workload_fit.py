"""One-parameter workload calibration against the published *baseline* throughput.

The rule (issue 5, README of experiments/dynamic_cp_blog): the GitHub and
CommonCrawl length files behind the blog are not public, so each dataset's
length distribution starts from public facts. At most ONE parameter of that
distribution (named in experiment.toml, ``[calibration].parameter``; the mean
length stays at the Pile figure) may be fitted, and only against the
dataset's published **packing** TFLOPS/GPU. The Dynamic-CP TFLOPS and the
speedups are then predictions; nothing here reads them.

Method: ``f(p)`` = simulated packing TFLOPS/GPU at parameter value ``p``,
pooled over fixed seeds (common random numbers: every ``p`` sees the same
random streams, so ``f`` is a deterministic function of ``p``). A coarse grid
over the bounds finds a sign change of ``f(p) - target``; Brent's method then
refines it to ``xtol``. If several brackets exist the one nearest the public
value wins; if none exists the grid point with the smallest residual is kept
and the fit is flagged ``at_bound``/not bracketed. Every evaluation is stored
with the result so the response curve is on record.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize

from dcpsim.errors import ConfigError
from dcpsim.reproduction.blog import BlogExperiment, FittedParameter, source_revision
from dcpsim.reproduction.runner import CellSpec, pooled_tflops, run_cell
from dcpsim.serialize import toml_value as _toml_value

__all__ = ["CalibrationFit", "fit_dataset", "write_calibration"]


@dataclass
class CalibrationFit:
    """Result of fitting one dataset (see :func:`fit_dataset`)."""

    fitted: FittedParameter
    evaluations: list[tuple[float, float]] = field(default_factory=list)  # (parameter value, TFLOPS/GPU)
    bracketed: bool = False
    wall_s: float = 0.0
    tflops_se: float = float("nan")  # seed-to-seed standard error of the pooled TFLOPS at the fitted value
    value_se: float = float("nan")  # that error carried to the parameter through the local slope of the grid


def fit_dataset(
    exp: BlogExperiment,
    dataset: str,
    *,
    seeds: int | None = None,
    iterations: int | None = None,
    grid_points: int = 7,
    on_eval: Callable[[float, float], None] | None = None,
) -> CalibrationFit:
    """Fit the experiment's calibration parameter of ``dataset`` to its published packing TFLOPS.

    Args:
        exp: the loaded experiment (its ``calibration_setup`` names the parameter,
            bounds, seeds, iterations and ``xtol``).
        dataset: dataset key.
        seeds, iterations: override the set-up's run size (tests use fewer).
        grid_points: points of the coarse bracketing grid (log-spaced over the bounds).
        on_eval: called with (parameter value, TFLOPS/GPU) after each evaluation.

    Returns:
        The fit, with every evaluation made.
    """
    setup = exp.calibration_setup
    policy = str(setup.get("policy", exp.baseline))
    if policy != exp.baseline:
        raise ConfigError("calibration.policy", policy, f"the baseline policy '{exp.baseline}' (the rule: fit only the baseline)")
    param = str(setup.get("parameter", ""))
    public = exp.calibration_base(dataset)
    if param not in public or not isinstance(public[param], (int, float)):
        raise ConfigError("calibration.parameter", param, f"a numeric field of {dataset}'s workload table {sorted(public)}")
    if param in ("mean", "mu"):
        raise ConfigError("calibration.parameter", param, "a shape parameter (the mean stays at the public Pile figure)")
    lo, hi = (float(x) for x in setup.get("bounds", (0.0, 0.0)))
    if not (lo < hi):
        raise ConfigError("calibration.bounds", [lo, hi], "[low, high] with low < high")
    n_seeds = int(seeds if seeds is not None else setup.get("seeds", 4))
    n_its = int(iterations if iterations is not None else setup.get("iterations", 1))
    xtol = float(setup.get("xtol", 1e-3))
    target = exp.published[dataset][policy if policy in exp.published[dataset] else "packing"]
    seed_list = tuple(range(n_seeds))

    cache: dict[float, float] = {}
    cells: dict[float, list[dict[str, Any]]] = {}
    t0 = time.perf_counter()

    def f(p: float) -> float:
        key = round(float(p), 12)
        if key not in cache:
            wl = dict(public)
            wl[param] = float(p)
            rows = [
                run_cell(CellSpec(dataset=dataset, policy=policy, seed=s, config=exp.config(
                    dataset, policy, calibrated=False, seed=s, iterations=n_its, workload=wl)))
                for s in seed_list
            ]
            bad = [r for r in rows if r["status"] != "ok"]
            if bad:
                raise ConfigError(f"calibration.{param}", p, f"a value every seed can run ({bad[0]['reason']})")
            cache[key] = pooled_tflops(rows)
            cells[key] = rows
            if on_eval is not None:
                on_eval(float(p), cache[key])
        return cache[key]

    grid = np.geomspace(lo, hi, grid_points) if lo > 0 else np.linspace(lo, hi, grid_points)
    vals = [f(p) - target for p in grid]
    brackets = [(grid[i], grid[i + 1]) for i in range(len(grid) - 1) if vals[i] == 0 or vals[i] * vals[i + 1] < 0]
    public_value = float(public[param])
    if brackets:
        a, b = min(brackets, key=lambda ab: min(abs(ab[0] - public_value), abs(ab[1] - public_value)))
        if f(a) - target == 0:
            best = float(a)
        else:
            best = float(optimize.brentq(lambda p: f(p) - target, a, b, xtol=xtol))
        bracketed = True
    else:
        best = float(grid[int(np.argmin(np.abs(vals)))])
        bracketed = False
    fitted_tflops = f(best)
    at_bound = (not bracketed) and (math.isclose(best, lo) or math.isclose(best, hi))
    cfg = exp.config(dataset, policy, calibrated=False, seed=0, iterations=n_its, workload={**public, param: best})
    note = (
        f"{param} fitted by a {grid_points}-point grid + Brent search so that pooled simulated '{policy}' "
        f"TFLOPS/GPU over seeds 0..{n_seeds - 1} x {n_its} iteration(s) matches the published {policy} figure; "
        "nothing else was fitted."
    )
    if not bracketed:
        note += f" No value in [{lo}, {hi}] reaches the target: kept the closest grid point (residual reported)."
    fp = FittedParameter(
        dataset=dataset,
        parameter=param,
        value=best,
        public_value=public_value,
        target_policy=policy,
        target_tflops=float(target),
        fitted_tflops=float(fitted_tflops),
        residual_tflops=float(fitted_tflops - target),
        seeds=seed_list,
        iterations=n_its,
        bounds=(lo, hi),
        at_bound=bool(at_bound),
        config_hash=cfg.config_hash(),
        note=note,
    )
    evals = sorted(cache.items())
    se = pooled_se(cells[round(best, 12)])
    gx = np.asarray(grid, dtype=float)
    gy = np.asarray([cache[round(float(p), 12)] for p in grid])
    k = int(np.clip(np.searchsorted(gx, best), 1, len(gx) - 1))
    slope = (gy[k] - gy[k - 1]) / (gx[k] - gx[k - 1])
    value_se = abs(se / slope) if slope != 0 else float("inf")
    return CalibrationFit(fitted=fp, evaluations=evals, bracketed=bracketed, wall_s=time.perf_counter() - t0,
                          tflops_se=se, value_se=value_se)


def pooled_se(rows: list[dict[str, Any]]) -> float:
    """Standard error (TFLOPS/GPU) of the pooled throughput ``ΣF/(ΣT·G)`` over seeds (ratio estimator)."""
    f = np.array([r["flops"] for r in rows], dtype=float)
    t = np.array([r["time_s"] for r in rows], dtype=float)
    n = f.size
    if n < 2:
        return float("nan")
    ratio = f.sum() / t.sum()
    resid = f - ratio * t
    return float(np.sqrt(resid.var(ddof=1) / n) / t.mean() / (int(rows[0]["gpus"]) * 1e12))


def write_calibration(path: Path, fits: dict[str, CalibrationFit], exp: BlogExperiment) -> None:
    """Write calibration.toml: fitted values, what they were fitted to, and every evaluation."""
    lines = [
        "# Fitted workload parameters of the Dynamic-CP blog reproduction.",
        "# Written by `dcpsim reproduce --recalibrate` (dcpsim/reproduction/workload_fit.py); read, never",
        "# re-fitted, by `dcpsim reproduce`. Each dataset has exactly ONE fitted parameter, fitted only",
        "# to that dataset's published PACKING (baseline) TFLOPS/GPU. The Dynamic-CP TFLOPS and the",
        "# speedups are predictions and were not used.",
        "",
        "[meta]",
        f"written_at = {_toml_value(time.strftime('%Y-%m-%dT%H:%M:%S'))}",
        *[f"{k} = {_toml_value(v)}" for k, v in source_revision().items()],
        f"method = {_toml_value('coarse log-spaced grid over the bounds, then Brent root finding on pooled packing TFLOPS/GPU (common random numbers)')}",
        "",
    ]
    for ds, fit in fits.items():
        fp = fit.fitted
        lines += [
            f"[fitted.{ds}]",
            f"parameter = {_toml_value(fp.parameter)}",
            f"value = {_toml_value(round(fp.value, 6))}",
            f"public_value = {_toml_value(fp.public_value)}          # the uncalibrated (public-facts) value",
            f"public_workload = {_toml_value(exp.calibration_base(ds))}",
            f"target_policy = {_toml_value(fp.target_policy)}",
            f"target_tflops = {_toml_value(fp.target_tflops)}        # published packing TFLOPS/GPU (published.toml)",
            f"fitted_tflops = {_toml_value(round(fp.fitted_tflops, 4))}",
            f"residual_tflops = {_toml_value(round(fp.residual_tflops, 4))}",
            f"tflops_se = {_toml_value(round(fit.tflops_se, 3))}        # seed-to-seed standard error of fitted_tflops",
            f"value_se = {_toml_value(round(fit.value_se, 4))}         # tflops_se / local slope: how well the seeds pin the value",
            f"bracketed = {_toml_value(fit.bracketed)}",
            f"at_bound = {_toml_value(fp.at_bound)}",
            f"bounds = {_toml_value(list(fp.bounds))}",
            f"seeds = {_toml_value(list(fp.seeds))}",
            f"seed_count = {len(fp.seeds)}",
            f"iterations = {_toml_value(fp.iterations)}",
            f"config_hash = {_toml_value(fp.config_hash)}   # RunConfig of seed 0 at the fitted value",
            f"fit_wall_s = {_toml_value(round(fit.wall_s, 1))}",
            f"note = {_toml_value(fp.note)}",
            "# every evaluation of the search: [parameter value, pooled packing TFLOPS/GPU]",
            "evaluations = [",
            *[f"  [{_toml_value(round(p, 6))}, {_toml_value(round(t, 4))}]," for p, t in fit.evaluations],
            "]",
            "",
        ]
    from dcpsim.outdir import write_text

    # --recalibrate rewrites the experiment's own calibration.toml on purpose (an explicit request): force
    write_text(path, "\n".join(lines), force=True)
