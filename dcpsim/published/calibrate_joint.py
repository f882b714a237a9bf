"""The joint fit of ``dcpsim calibrate`` (issue 21): timing and host knobs in one objective over both suites' fit rows.

The sequential calibration fits the timing knobs on the published runs' fit rows with the host knobs at their
uncalibrated values, then the host knobs on the Megatron-LM CI suite's fit rows with the timing knobs held
(:mod:`dcpsim.published.calibrate_host`). Each knob set moves the other suite's rows too (the host knobs move
the published steps a little; the GEMM and attention rates move the CI steps), so the sequential result is
not the least-squares point of either. The joint fit solves one problem instead.

Declared before any fit (2026-11-27):

* knobs: the GPU type's timing knobs (:data:`dcpsim.published.calibrate.DEFAULT_PARAMS`) and its host knobs
  (:data:`dcpsim.published.fitting.DEFAULT_HOST_PARAMS`), each with its declared range;
* rows: the published suite's rows of that GPU whose split is ``fit`` (its ``suite.toml``) and the CI suite's
  rows of that GPU whose split is ``fit`` (``experiments/megatron_ci/suite.toml``, by layout family); held-out
  rows of either suite never enter;
* objective: each suite weighs the same, the mean squared log error of its fit rows
  (``log(simulated / measured)`` of tokens/s per GPU for the published runs, of the step time for the CI
  rows), summed over the two suites: a row's residual is weighted by ``1/sqrt(n)`` of its suite
  (:data:`SUITE_WEIGHTS` scales a suite further; both 1);
* method: the same bounded Gauss-Newton (:func:`dcpsim.published.fitting.gauss_newton`) from the uncalibrated
  point (timing knobs at the profile's values, ``host_module_scale`` 1, ``host_step_s`` 0); a knob on its
  bound fails the calibration by name.

Not the default: compared with the sequential fit on both suites' held-out rows (H100 and A100, 2026-11-27,
experiments/published_throughput/README.md) it was no better (published held-out H100 10.3% against 10.2%, A100
5.0% against 4.8%; CI held-out equal within 0.1%), so ``dcpsim calibrate`` fits in sequence unless ``--joint``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.published.fitting import Param, write_profile

SUITE_WEIGHTS = {"published": 1.0, "ci": 1.0}  # declared before any fit: the two suites weigh the same


@dataclass
class JointEvaluator:
    """Simulates published rows (:class:`~dcpsim.published.suite.RowConfig`) and CI rows
    (:class:`~dcpsim.published.megatron_ci.CiRow`) at timing + host knob values through one candidate profile
    folder per point; :meth:`log_ratio` returns each row's log error times its suite's weight."""

    base: Path
    params: list[Param]
    workdir: Path
    gpu: str
    weights: dict[str, float]  # per suite: the weight of one row's residual
    n_evals: int = 0
    cache: dict[tuple, Any] = field(default_factory=dict)
    folders: dict[tuple, Path] = field(default_factory=dict)
    on_row: Callable[[str], None] | None = None

    def values(self, x: np.ndarray) -> dict[str, float]:
        return {p.name: p.from_x(float(v)) for p, v in zip(self.params, x, strict=True)}

    @staticmethod
    def suite_of(row: Any) -> str:
        return "published" if hasattr(row, "config") else "ci"

    @staticmethod
    def _id(row: Any) -> tuple[str, int]:
        return (JointEvaluator.suite_of(row), row.row.id if hasattr(row, "config") else row.id)

    def _folder(self, key_x: tuple, x: np.ndarray) -> Path:
        if key_x not in self.folders:
            self.folders[key_x] = write_profile(self.base, self.workdir / f"joint{self.n_evals:04d}", self.values(x), {})
            self.n_evals += 1
        return self.folders[key_x]

    def run(self, x: np.ndarray, rows: list) -> list:
        from dcpsim.published.megatron_ci import _run_row as _run_ci_row
        from dcpsim.published.replay import _run_row
        from dcpsim.published.suite import RowConfig

        key_x = tuple(np.round(np.asarray(x, dtype=float), 12))
        for r in rows:
            k = (key_x, self._id(r))
            if k in self.cache:
                continue
            folder = self._folder(key_x, x)
            if self.suite_of(r) == "published":
                cfg = r.config.with_updates({"hardware.gpu": str(folder)})
                self.cache[k] = _run_row(RowConfig(r.row, cfg, None, r.assumptions))
            else:
                self.cache[k] = _run_ci_row(r, {self.gpu: str(folder)})
            if self.on_row is not None:
                self.on_row(f"joint candidate {self.n_evals}, {k[1][0]} row {k[1][1]}")
        return [self.cache[(key_x, self._id(r))] for r in rows]

    def log_ratio(self, x: np.ndarray, rows: list) -> np.ndarray:
        """Weighted log(simulated / measured) per row (NaN for rows not compared)."""
        from dcpsim.published.megatron_ci import STATUS_OK
        from dcpsim.published.replay import COMPARED

        out = []
        for row, res in zip(rows, self.run(x, rows), strict=True):
            suite = self.suite_of(row)
            ok = res.status in COMPARED if suite == "published" else res.status == STATUS_OK
            out.append(self.weights[suite] * math.log(res.simulated / res.row.measured) if ok else math.nan)
        return np.array(out)


def suite_weights(n_published: int, n_ci: int) -> dict[str, float]:
    """Per-row residual weights: each suite's mean squared log error counts once (times :data:`SUITE_WEIGHTS`)."""
    return {"published": math.sqrt(SUITE_WEIGHTS["published"] / max(n_published, 1)),
            "ci": math.sqrt(SUITE_WEIGHTS["ci"] / max(n_ci, 1))}
