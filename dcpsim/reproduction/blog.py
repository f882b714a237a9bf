"""The Dynamic-CP blog reproduction as data: specs, reference values, calibration.

Everything the experiment runs lives in a folder of plain files
(``experiments/dynamic_cp_blog/`` in the repository; see its README):

* ``experiment.toml`` -- datasets, policies, run sizes (``full``/``quick``),
  sensitivity axes and the calibration set-up;
* one :class:`~dcpsim.run.config.RunConfig` TOML per dataset (the primary
  configuration, with the *uncalibrated*, public-facts workload);
* ``published.toml`` -- the blog's figures, used only for comparison (and the
  two packing figures as the calibration target);
* ``calibration.toml`` -- fitted workload parameters, written by
  :mod:`dcpsim.reproduction.workload_fit` and only read here.

This module loads those files into a frozen :class:`BlogExperiment` and builds
the run configurations; :mod:`dcpsim.reproduction.runner` runs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.resources import data_dir, source_root
from dcpsim.run.config import RunConfig
from dcpsim.run.load import load_config

__all__ = [
    "DEFAULT_SPEC_DIR",
    "VARIANT_LABELS",
    "WORKLOAD_VARIANTS",
    "BlogExperiment",
    "Calibration",
    "FittedParameter",
    "Mode",
    "SensitivityAxis",
    "load_experiment",
    "read_calibration",
]

WORKLOAD_VARIANTS = ("public", "calibrated")
"""Workload variants in display order: the primary real-data one, then the secondary calibrated view."""

VARIANT_LABELS = {"public": "primary: real length data, uncalibrated",
                  "calibrated": "secondary: tail index fitted to the packing figure"}
"""Human-readable names of the workload variants (tables, figures)."""

DEFAULT_SPEC_DIR = data_dir("experiments") / "dynamic_cp_blog"
"""Where the specification lives: the checkout's ``experiments/``, or the wheel's copy (:mod:`dcpsim.resources`)."""


@dataclass(frozen=True)
class Mode:
    """Run size: ``seeds`` seeds (0..seeds-1), ``iterations`` global batches per seed; ``policies`` (empty: all)
    limits the main table to those policies (the quick mode leaves out the slowest)."""

    name: str
    seeds: int
    iterations: int
    sensitivity: bool
    sensitivity_seeds: int
    policies: tuple[str, ...] = ()


@dataclass(frozen=True)
class SensitivityAxis:
    """One-at-a-time sweep of one RunConfig field around the primary configuration.

    Attributes:
        name: short key (file names, table rows).
        label: axis label for plots.
        field: dotted RunConfig path (``cluster.gpus``), ``options.<policy>.<option>`` (one policy's option,
            see :meth:`BlogExperiment.config`), or several of them joined by ``+`` (each value is then a list
            with one entry per field).
        values: the values the field takes (file names resolved against the spec folder).
        ticks: tick labels for the plot, one per value.
        base: extra dotted-path updates applied at every point (e.g. ``cluster.gpus``).
        datasets: the datasets the axis applies to (empty: all).
    """

    name: str
    label: str
    field: str
    values: tuple[Any, ...]
    ticks: tuple[str, ...]
    base: tuple[tuple[str, Any], ...] = ()
    datasets: tuple[str, ...] = ()


@dataclass(frozen=True)
class FittedParameter:
    """One fitted workload parameter and the data it was fitted to (see calibration.toml)."""

    dataset: str
    parameter: str
    value: float
    public_value: float
    target_policy: str
    target_tflops: float
    fitted_tflops: float
    residual_tflops: float
    seeds: tuple[int, ...]
    iterations: int
    bounds: tuple[float, float]
    at_bound: bool
    config_hash: str
    note: str = ""


@dataclass(frozen=True)
class Calibration:
    """Contents of calibration.toml (empty when no fit has been run)."""

    fitted: dict[str, FittedParameter] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BlogExperiment:
    """The loaded experiment (immutable).

    Attributes:
        spec_dir: the folder the files were read from.
        name, title: identification.
        datasets: dataset name -> primary RunConfig (public-facts workload).
        policies: policies of the main table; ``baseline`` and ``headline`` among them.
        compared: policies whose results are set against the published Dynamic-CP figures
            (``headline`` first); the baseline is set against the published packing figures.
        published: dataset -> {"packing", "dynamic", "speedup"} reference values.
        tolerances: {"speedup_rel_tol", "tflops_rel_tol"} of the issue's targets.
        modes: "full" and "quick" run sizes.
        sensitivity_policies: policies run at each sensitivity point.
        axes: the sensitivity axes.
        calibration_setup: the [calibration] table of experiment.toml.
        calibration: the fitted values (may be empty).
        calibration_path: the file they are read from (and ``--recalibrate`` writes).
        calibration_workloads: dataset -> the workload table the calibration fits one field of
            (``[calibration.workloads]`` of experiment.toml; the secondary, calibrated view).
        policy_options: policy -> options it runs with (``[policy_options]`` of experiment.toml).
        consistency: the joint grid over the unpublished settings (``[consistency]``: ``gpus``, ``max_len``,
            ``baseline_cp_m`` lists, optional ``host_speed`` of the headline's planner; empty: none).
    """

    spec_dir: Path
    name: str
    title: str
    datasets: dict[str, RunConfig]
    policies: tuple[str, ...]
    baseline: str
    headline: str
    compared: tuple[str, ...]
    published: dict[str, dict[str, float]]
    tolerances: dict[str, float]
    modes: dict[str, Mode]
    sensitivity_policies: tuple[str, ...]
    axes: tuple[SensitivityAxis, ...]
    calibration_setup: dict[str, Any]
    calibration: Calibration
    calibration_path: Path
    calibration_workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    consistency: dict[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------- workloads
    def public_workload(self, dataset: str) -> dict[str, Any] | str:
        """The dataset's primary, uncalibrated workload (as in its run spec): real length data."""
        wl = self._cfg(dataset).workload.name
        return dict(wl) if isinstance(wl, dict) else wl

    def calibration_base(self, dataset: str) -> dict[str, Any]:
        """The workload table the calibration fits one field of (the secondary view's public-facts values)."""
        wl = self.calibration_workloads.get(dataset)
        if not isinstance(wl, dict):
            raise ConfigError(f"calibration.workloads.{dataset}", wl, "a distribution table (the calibration replaces one field)")
        return dict(wl)

    def workload(self, dataset: str, *, calibrated: bool) -> dict[str, Any] | str:
        """The workload used for ``dataset``: the primary real-data one, or the calibration table with its fitted field."""
        if not calibrated:
            return self.public_workload(dataset)
        wl = self.calibration_base(dataset)
        fp = self.calibration.fitted.get(dataset)
        if fp is not None:
            if fp.parameter not in wl:
                raise ConfigError(
                    f"calibration.{dataset}.parameter", fp.parameter, f"a field of the workload table {sorted(wl)}"
                )
            wl[fp.parameter] = fp.value
        return wl

    def is_calibrated(self, dataset: str) -> bool:
        return dataset in self.calibration.fitted and dataset in self.calibration_workloads

    # -------------------------------------------------------------- configs
    def config(
        self,
        dataset: str,
        policy: str,
        *,
        calibrated: bool,
        seed: int = 0,
        iterations: int = 1,
        updates: dict[str, Any] | None = None,
        workload: dict[str, Any] | None = None,
    ) -> RunConfig:
        """The RunConfig of one cell: the dataset's primary spec with policy, seed and updates applied.

        ``workload`` overrides the workload table (used by the calibration search). An update
        ``options.<policy>.<option>`` sets one option of that policy and is ignored for the others (the
        baseline's own bin capacity, the planner's host speed); ``a+b`` updates several fields at once
        from a list value.
        """
        opts = dict(self.policy_options.get(policy, {}))
        upd: dict[str, Any] = {
            "policy.name": policy,
            "sim.seed": int(seed),
            "sim.iterations": int(iterations),
            "workload.name": workload if workload is not None else self.workload(dataset, calibrated=calibrated),
        }
        for k, v in _expand(updates or {}).items():
            if k.startswith("options."):
                _, pol, key = k.split(".", 2)
                if pol == policy:
                    opts[key] = v
                continue
            upd[k] = self._resolve_value(k, v)
        upd["policy.options"] = opts
        return self._cfg(dataset).with_updates(upd)

    def _cfg(self, dataset: str) -> RunConfig:
        if dataset not in self.datasets:
            raise ConfigError("dataset", dataset, f"one of {sorted(self.datasets)}")
        return self.datasets[dataset]

    def _resolve_value(self, path: str, value: Any) -> Any:
        # Spec files named in the experiment are relative to the spec folder.
        if isinstance(value, str) and value.endswith(".toml"):
            p = self.spec_dir / value
            if not p.is_file():
                raise ConfigError(path, value, f"an existing file in {self.spec_dir}")
            return str(p)
        return value


def _expand(updates: dict[str, Any]) -> dict[str, Any]:
    """``{"a+b": [x, y]}`` -> ``{"a": x, "b": y}`` (several fields of one sensitivity value)."""
    out: dict[str, Any] = {}
    for k, v in updates.items():
        if "+" in k:
            keys = k.split("+")
            if not isinstance(v, (list, tuple)) or len(v) != len(keys):
                raise ConfigError(k, v, f"a list of {len(keys)} values, one per field")
            out.update(zip(keys, v, strict=True))
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------- loading
def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(what, str(path), "an existing TOML file (the experiment folder is experiments/dynamic_cp_blog)")
    from dcpsim.schema import read_toml

    return read_toml(path, what)


def _need(d: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(d, dict):
        raise ConfigError(where, d, "a table")
    if key not in d:
        raise ConfigError(f"{where}.{key}", None, "a value (missing)")
    v = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(v, kind) or isinstance(v, bool) and bool not in kinds:
        names = " or ".join({int: "an integer", float: "a number", str: "text", list: "a list", dict: "a table",
                             bool: "true or false"}.get(k, k.__name__) for k in kinds)
        raise ConfigError(f"{where}.{key}", v, names)
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(f"{where}.{key}", v, "a finite number")
    return v


def source_revision() -> dict[str, Any]:
    """The git commit of the dcpsim checkout and whether the code under dcpsim/ differs from it (``{}`` outside git)."""
    import subprocess

    root = source_root()
    if root is None:  # an installed wheel: no git checkout to name
        return {}
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "dcpsim"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_commit": head, "uncommitted_changes": bool(dirty)}


def read_calibration(path: Path) -> Calibration:
    """Read calibration.toml; a missing file means no fit (empty :class:`Calibration`)."""
    if not path.is_file():
        return Calibration()
    data = _read_toml(path, "calibration")
    fitted: dict[str, FittedParameter] = {}
    for ds, t in (data.get("fitted") or {}).items():
        where = f"calibration.fitted.{ds}"
        try:
            fitted[ds] = FittedParameter(
                dataset=ds,
                parameter=str(t["parameter"]),
                value=float(t["value"]),
                public_value=float(t["public_value"]),
                target_policy=str(t["target_policy"]),
                target_tflops=float(t["target_tflops"]),
                fitted_tflops=float(t["fitted_tflops"]),
                residual_tflops=float(t["residual_tflops"]),
                seeds=tuple(int(s) for s in t["seeds"]),
                iterations=int(t["iterations"]),
                bounds=(float(t["bounds"][0]), float(t["bounds"][1])),
                at_bound=bool(t["at_bound"]),
                config_hash=str(t["config_hash"]),
                note=str(t.get("note", "")),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ConfigError(where, t, f"a complete fitted-parameter table ({exc!r})", where=str(path)) from None
        if fitted[ds].target_policy not in ("packing", "packing-pr2959"):
            raise ConfigError(f"{where}.target_policy", fitted[ds].target_policy,
                              "'packing' or 'packing-pr2959' (only a packing baseline may be fitted)")
    return Calibration(fitted=fitted, meta=dict(data.get("meta") or {}))


def load_experiment(spec_dir: str | Path | None = None) -> BlogExperiment:
    """Load the experiment folder (default :data:`DEFAULT_SPEC_DIR`)."""
    d = Path(spec_dir) if spec_dir is not None else DEFAULT_SPEC_DIR
    if not d.is_dir():
        raise ConfigError("spec_dir", str(d), "the experiment folder (experiments/dynamic_cp_blog in a dcpsim checkout)")
    raw = _read_toml(d / "experiment.toml", "experiment")
    ex = _need(raw, "experiment", "experiment.toml", dict)
    policies, baseline, headline, compared = _experiment_policies(ex)
    datasets = {name: load_config(d / str(fname)) for name, fname in _need(raw, "datasets", "experiment.toml", dict).items()}
    if not datasets:
        raise ConfigError("datasets", {}, "at least one dataset")
    published, tolerances = _published(d, ex, datasets)
    modes = _modes(raw)
    sens = raw.get("sensitivity") or {}
    axes = _sensitivity_axes(sens)
    cal_setup = dict(raw.get("calibration") or {})
    cal_workloads = {str(k): dict(v) for k, v in (cal_setup.pop("workloads", None) or {}).items()}
    calibration_path = d / str(ex.get("calibration", "calibration.toml"))
    calibration = read_calibration(calibration_path)
    unknown = sorted(set(calibration.fitted) - set(datasets))
    if unknown:
        raise ConfigError("calibration.fitted", unknown, f"datasets of the experiment {sorted(datasets)}")
    return BlogExperiment(
        spec_dir=d,
        name=str(ex.get("name", d.name)),
        title=str(ex.get("title", "")),
        datasets=datasets,
        policies=policies,
        baseline=baseline,
        headline=headline,
        compared=compared,
        published=published,
        tolerances=tolerances,
        modes=modes,
        sensitivity_policies=tuple(sens.get("policies", [baseline, headline])),
        axes=tuple(axes),
        calibration_setup=cal_setup,
        calibration=calibration,
        calibration_path=calibration_path,
        calibration_workloads=cal_workloads,
        policy_options={str(k): dict(v) for k, v in (raw.get("policy_options") or {}).items()},
        consistency=_consistency(raw.get("consistency")),
    )


def _consistency(g: Any) -> dict[str, Any]:
    """``[consistency]``: non-empty lists ``gpus``, ``max_len`` (integers), ``baseline_cp_m`` ([CP, M] pairs) and
    optionally ``host_speed`` (the headline's planner host speed; default: the policy option's value)."""
    if not g:
        return {}
    out: dict[str, Any] = {}
    for key in ("gpus", "max_len"):
        v = _need(g, key, "consistency", list)
        if not v or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in v):
            raise ConfigError(f"consistency.{key}", v, "a non-empty list of positive integers")
        out[key] = [int(x) for x in v]
    pairs = _need(g, "baseline_cp_m", "consistency", list)
    if not pairs or any(not isinstance(p, list) or len(p) != 2 for p in pairs):
        raise ConfigError("consistency.baseline_cp_m", pairs, "a non-empty list of [CP, M] pairs")
    out["baseline_cp_m"] = [(int(a), int(b)) for a, b in pairs]
    hs = g.get("host_speed", [None])
    if not isinstance(hs, list) or not hs or any(x is not None and (not isinstance(x, (int, float)) or x <= 0) for x in hs):
        raise ConfigError("consistency.host_speed", hs, "a non-empty list of positive numbers (the headline's host_speed)")
    out["host_speed"] = [None if x is None else float(x) for x in hs]
    return out


def _experiment_policies(ex: dict) -> tuple[tuple[str, ...], str, str, tuple[str, ...]]:
    """(policies, baseline, headline, compared-to-published) of ``[experiment]``, cross-checked."""
    policies = tuple(_need(ex, "policies", "experiment", list))
    baseline = _need(ex, "baseline", "experiment", str)
    headline = _need(ex, "headline", "experiment", str)
    for key, pol in (("baseline", baseline), ("headline", headline)):
        if pol not in policies:
            raise ConfigError(f"experiment.{key}", pol, f"one of experiment.policies {list(policies)}")
    compared = tuple(ex.get("compared_to_published", [headline]))
    if headline not in compared:
        compared = (headline, *compared)
    for pol in compared:
        if pol not in policies or pol == baseline:
            raise ConfigError("experiment.compared_to_published", pol, f"a non-baseline policy of {list(policies)}")
    return policies, baseline, headline, compared


def _published(d: Path, ex: dict, datasets: dict) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The published figures per dataset (the reference, never an input) and the comparison tolerances."""
    pub_raw = _read_toml(d / _need(ex, "published", "experiment", str), "published")
    published: dict[str, dict[str, float]] = {}
    for ds in datasets:
        t = _need(pub_raw, ds, "published.toml", dict)
        published[ds] = {k: float(_need(t, k, f"published.{ds}", (int, float))) for k in ("packing", "dynamic", "speedup")}
    tol_t = _need(pub_raw, "targets", "published.toml", dict)
    tolerances = {k: float(_need(tol_t, k, "published.targets", (int, float))) for k in ("speedup_rel_tol", "tflops_rel_tol")}
    tolerances["packing_rel_tol"] = float(tol_t.get("packing_rel_tol", tolerances["tflops_rel_tol"]))
    return published, tolerances


def _modes(raw: dict) -> dict[str, Mode]:
    """``[modes.*]``: seeds and iterations (positive integers) per mode; full and quick must exist."""
    modes: dict[str, Mode] = {}
    for mname, m in _need(raw, "modes", "experiment.toml", dict).items():
        where = f"modes.{mname}"
        seeds = int(_need(m, "seeds", where, int))
        its = int(_need(m, "iterations", where, int))
        if seeds < 1 or its < 1:
            raise ConfigError(where, m, "seeds >= 1 and iterations >= 1")
        modes[mname] = Mode(
            name=mname,
            seeds=seeds,
            iterations=its,
            sensitivity=bool(m.get("sensitivity", False)),
            sensitivity_seeds=int(m.get("sensitivity_seeds", seeds)),
            policies=tuple(str(x) for x in m.get("policies", ())),
        )
    for need in ("full", "quick"):
        if need not in modes:
            raise ConfigError("modes", sorted(modes), f"a [modes.{need}] table")
    return modes


def _sensitivity_axes(sens: dict) -> list:
    """``[[sensitivity.axes]]``: one swept field each, with values and tick labels."""
    axes = []
    for i, a in enumerate(sens.get("axes") or []):
        where = f"sensitivity.axes[{i}]"
        values = tuple(_need(a, "values", where, list))
        ticks = tuple(str(t) for t in a.get("ticks", [str(v) for v in values]))
        if len(ticks) != len(values):
            raise ConfigError(f"{where}.ticks", list(ticks), f"{len(values)} labels, one per value")
        axes.append(
            SensitivityAxis(
                name=str(_need(a, "name", where, str)),
                label=str(a.get("label", a["name"])),
                field=str(_need(a, "field", where, str)),
                values=values,
                ticks=ticks,
                base=tuple(sorted((a.get("base") or {}).items())),
                datasets=tuple(str(x) for x in a.get("datasets", ())),
            )
        )
    return axes
