"""Prediction bands: how far a predicted throughput can be trusted, from dcpsim's own validation residuals.

What a band is. A predicted tokens/s per GPU ``p`` (and every figure derived from it: TFLOPS/GPU,
GPU-hours, days, cost) gets an interval at level ``1 - alpha`` (default 80%) from the **out-of-sample
log errors** ``e = ln(simulated / measured)`` of the published runs nearest to the query: split
conformal prediction on signed log errors (two one-sided quantiles, so a profile that is optimistic
on average gives an interval shifted below its prediction). With the ``n`` nearest errors sorted,
``e_lo`` is the ``floor((n + 1) * alpha / 2)``-th smallest and ``e_hi`` the
``ceil((n + 1) * (1 - alpha / 2))``-th; the measured value then lies in
``[p * exp(-e_hi), p * exp(-e_lo)]``. Fewer than :data:`MIN_RUNS` near runs (the smallest ``n`` for
which both indices exist at 80%), no validated run on the GPU, or a datasheet (uncalibrated) profile:
**no band**, and the reason is printed instead.

Which errors. Only errors of runs the calibrated profile did not see (cross-fitting, so the band is not
the fit's in-sample error):

* held-out rows (``suite.toml``'s split): the error of ``dcpsim validate --published --calibrated``,
  i.e. at the shipped calibrated profile, which never saw them;
* fit rows: the error at a refit **without** the row (the calibration's own procedure,
  :mod:`dcpsim.published.calibrate`, with the shipped calibration's knobs and iterations; a knob today's
  calibration no longer fits is held at the shipped value): leave one
  model family out where the GPU has two or more families, else leave one row out.

Which runs are near. Same GPU type (profile) and precision class (A100 FP16 and BF16 are one class: the
suite replays FP16 at the BF16 rate, the same tensor-core peak), then the :data:`NEAR_RUNS` nearest by
``|log10(params ratio)| + 0.25 * [pipeline parallel differs] + 0.25 * [context parallel differs]``.
A query whose model is more than :data:`MAX_SIZE_RATIO` times larger or smaller than every run of its
group gets no band (an unseen regime).

Coverage check (:func:`coverage`): every held-out row, its band built from the other rows exactly as a
query's would be (leave-one-out), is it inside? At 80% the target is 70-90% of the rows.

The residuals are computed by :func:`build` (``dcpsim bands build --out DIR``) and shipped as
``experiments/published_throughput/results/bands.json`` with the dcpsim commit that produced them;
nothing in it is typed in. The same file holds the best measured MFU per GPU and precision class
(:meth:`BandTable.best_mfu`): the measured tokens/s of a row times dcpsim's FLOPs per token over the BF16 peak
(``mfu_simulated * measured / simulated``), recomputed forwards counted as the GPU does them
(:func:`hardware_utilization`: x 4/3 with full recompute), for the sanity warning on predictions above it.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.published.bands_ci import ci_rows, precision_class

LEVEL = 0.8
"""Default interval level."""
MIN_RUNS = 9
"""Fewest near runs for a band: at 80% the two one-sided split-conformal quantiles need ``n >= 9``."""
NEAR_RUNS = 19
"""Runs a band rests on at most (the nearest of the group). 19: with ``n + 1`` a multiple of 10 the 80%
split-conformal interval's guaranteed coverage ``(hi_k - lo_k) / (n + 1)`` is exactly 80% (15 runs would give
87.5%: the interval is then the smallest to the largest error)."""
MAX_SIZE_RATIO = 10.0
"""A model more than this many times larger or smaller than every run of its group has no band."""
CALIBRATED_SUFFIX = "-calibrated"
FORMAT = 1


def bands_path() -> Path:
    """The shipped residual file (``experiments/published_throughput/results/bands.json``)."""
    from dcpsim.published.suite import default_suite_dir

    return default_suite_dir() / "results" / "bands.json"


def base_gpu(profile: str) -> str:
    """The base (datasheet) profile name of ``profile`` (``h100-sxm-calibrated`` and ``h100-sxm-datasheet``
    -> ``h100-sxm``)."""
    from dcpsim.hardware import datasheet_base

    name = Path(str(profile)).name
    return datasheet_base(name) or name.removesuffix(CALIBRATED_SUFFIX)


# ---------------------------------------------------------------- building the residual file
def _row_features(rc) -> dict[str, Any]:
    from dcpsim.model import get_model

    cfg = rc.config
    p = cfg.parallel
    return {"params": float(get_model(cfg.model.name).n_params), "tp": int(p.tp), "pp": int(p.pp),
            "cp": int(p.cp), "vp": int(getattr(p, "vp", 1) or 1)}


def _pool_evaluator(pool):
    """An :class:`~dcpsim.published.calibrate.Evaluator` whose rows run in ``pool`` (same results, in row order)."""
    from dcpsim.published.calibrate import Evaluator, write_profile
    from dcpsim.published.replay import _run_row
    from dcpsim.published.suite import RowConfig

    class PoolEvaluator(Evaluator):
        def run(self, x, rcs):
            if pool is None:
                return super().run(x, rcs)
            key_x = tuple(np.round(np.asarray(x, dtype=float), 12))
            todo = [rc for rc in rcs if (key_x, rc.row.id) not in self.cache]
            if todo:
                folder = write_profile(self.base, self.workdir / f"cand{self.n_evals:04d}", self.values(x), {})
                self.n_evals += 1
                jobs = [RowConfig(rc.row, rc.config.with_updates({"hardware.gpu": str(folder)}), None, rc.assumptions)
                        for rc in todo]
                for rc, res in zip(todo, pool.map(_run_row, jobs), strict=True):
                    self.cache[(key_x, rc.row.id)] = res
            return [self.cache[(key_x, rc.row.id)] for rc in rcs]

    return PoolEvaluator


def _cross_fit(gpu: str, calib: dict[str, Any], workdir: Path, pool=None) -> dict[int, tuple[float, str]]:
    """Out-of-fold log errors of ``gpu``'s fit rows: each row simulated at a refit that left it out."""
    from dcpsim.hardware import get_profile
    from dcpsim.published.calibrate import (
        _jacobian,
        _rows_for,
        check_knobs,
        gauss_newton,
        peak_capped,
        profile_folder,
    )
    from dcpsim.published.suite import load_suite

    Evaluator = _pool_evaluator(pool)

    from dcpsim.published.calibrate import KNOBS, write_profile

    suite = load_suite()
    names = [n for n in calib["params"] if n in KNOBS]
    # a launch floor cannot be held in a profile whose [host] table prices launches (issue 21: the host timeline
    # replaced per_kernel_overhead_s, which a profile with [host] must keep at 0)
    hosted = get_profile(gpu).host.enabled
    held = {n: float(v) for n, v in calib.get("fitted", {}).items()
            if n not in names and not (hosted and n == "per_kernel_overhead_s")}
    knobs = peak_capped(check_knobs(gpu, names), get_profile(gpu))  # the calibration's own bounds
    fit, _, _ = _rows_for(suite, gpu)
    base = profile_folder(gpu)
    if held:  # knobs today's calibration no longer fits stay at the shipped profile's values
        base = write_profile(base, workdir / "base", held, {k: "held at the calibrated value" for k in held})
    timing = get_profile(gpu).timing
    x0 = np.array([p.to_x(max(float(getattr(timing, p.name)), 0.0)) for p in knobs])
    ev = Evaluator(base, knobs, workdir)
    r0 = ev.log_ratio(x0, fit)
    J0 = _jacobian(ev, x0, fit, r0)
    families = sorted({rc.row.family for rc in fit})
    if len(families) >= 2:
        folds = [(f"refit without family {f}", np.array([rc.row.family != f for rc in fit])) for f in families]
    else:
        folds = [(f"refit without row {rc.row.id}", np.array([o.row.id != rc.row.id for o in fit])) for rc in fit]
    iterations = int(calib.get("fold_iterations") or len(calib.get("steps", [])) or 2)
    out: dict[int, tuple[float, str]] = {}
    for label, keep in folds:
        train = [rc for rc, k in zip(fit, keep, strict=True) if k]
        test = [rc for rc, k in zip(fit, keep, strict=True) if not k]
        xf, _ = gauss_newton(ev, train, x0, iterations, first=(r0[keep], J0[keep]))
        for rc, e in zip(test, ev.log_ratio(xf, test), strict=True):
            out[rc.row.id] = (float(e), label)
    return out


def build(*, progress: bool = False, jobs: int = 1) -> dict[str, Any]:
    """Replay the suite on the calibrated profiles, cross-fit the fit rows; the residual file's content.

    ``jobs`` > 1 simulates each candidate's rows in that many worker processes (same results)."""
    from dcpsim.hardware import get_profile
    from dcpsim.published.replay import COMPARED, calibrated_profiles, replay_suite, with_profile
    from dcpsim.published.suite import GPU_PROFILES, load_suite, row_config
    from dcpsim.reproduction.blog import source_revision

    rev = source_revision()  # the code the residuals come from: taken before the work
    profiles = calibrated_profiles()
    rep = replay_suite("all", profiles=profiles)
    suite = load_suite()
    calibs: dict[str, dict[str, Any]] = {}
    for base, cal in profiles.items():
        path = Path(str(get_profile(cal).path))
        folder = path.parent if path.suffix == ".toml" else path
        import json

        calibs[base] = json.loads((folder / "calibration.json").read_text())
    oof: dict[int, tuple[float, str]] = {}
    import contextlib
    from concurrent.futures import ProcessPoolExecutor

    with tempfile.TemporaryDirectory(prefix="dcpsim-bands-") as tmp, \
            (ProcessPoolExecutor(jobs) if jobs > 1 else contextlib.nullcontext()) as pool:
        for base, calib in sorted(calibs.items()):
            if progress:
                import sys

                print(f"cross-fitting {base} ...", file=sys.stderr, flush=True)
            oof.update(_cross_fit(base, calib, Path(tmp) / base, pool))
        ci = ci_rows(profiles, calibs, Path(tmp), progress=progress)
    rows = []
    for res in rep.rows:
        row = res.row
        base = GPU_PROFILES.get(row.gpu_name)
        rc = with_profile(row_config(row), profiles)
        ok = res.status in COMPARED and math.isfinite(res.simulated)
        e_val = math.log(res.simulated / row.measured) if ok else math.nan
        if row.split == "held-out":
            e_oos, how = e_val, "held-out row at the shipped calibrated profile"
        else:
            e_oos, how = oof.get(row.id, (math.nan, "not cross-fitted"))
        mfu_sim = float(res.summary.get("mfu", math.nan))
        d: dict[str, Any] = {
            "suite": "published", "row": row.id, "model": row.model, "family": row.family, "split": row.split, "gpu": base,
            "precision": row.precision, "precision_class": precision_class(base or "", row.precision),
            "source": row.raw.get("source", ""), "status": res.status, "gpus": row.gpus,
            "measured_tokens_per_s_per_gpu": row.measured, "simulated_tokens_per_s_per_gpu": res.simulated,
            "log_error_calibrated": e_val, "log_error_out_of_sample": e_oos, "out_of_sample_from": how,
            "mfu_measured": mfu_sim * row.measured / res.simulated if ok else math.nan,
            "recompute": str(row.raw.get("recompute", "")),
        }
        if rc.config is not None:
            d.update(_row_features(rc))
        rows.append(d)
    rows += ci
    return {
        "format": FORMAT,
        "what": "out-of-sample log errors ln(simulated/measured) of tokens/s per GPU of the published suite and of "
                "the Megatron-LM CI suite (suite = megatron-ci; dcpsim.published.bands_ci) on the calibrated "
                "profiles (dcpsim.published.bands); regenerate with `dcpsim bands build --out DIR`",
        "dcpsim_commit": rev.get("git_commit", "unknown"),
        "uncommitted_changes": rev.get("uncommitted_changes", None),
        "data_sha256": suite.data_sha256,
        "profiles": {b: {"profile": profiles[b], "fitted_at": c.get("revision", {}).get("git_commit", ""),
                         "fit_rows": c.get("fit_rows", []), "params": c.get("params", [])}
                     for b, c in calibs.items()},
        "rows": rows,
    }


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


def write(data: dict[str, Any], out: str | Path, *, force: bool = False) -> list[Path]:
    """``out/bands.json`` and ``out/bands.md`` (coverage and groups), through :mod:`dcpsim.outdir`."""
    from dcpsim.outdir import check_out_dir, write_json, write_text

    out = Path(out)
    check_out_dir(out, force=force)
    table = BandTable(data)
    return [write_json(out / "bands.json", _json_safe(data), force=force),
            write_text(out / "bands.md", table.markdown(), force=force)]


# ---------------------------------------------------------------- reading and querying
@dataclass(frozen=True)
class Band:
    """A prediction interval as factors on throughput (``lo <= 1 <= hi`` typically), or why there is none."""

    lo: float = math.nan  # measured/predicted tokens/s, lower end
    hi: float = math.nan  # upper end
    n: int = 0  # runs it rests on
    level: float = LEVEL
    basis: str = ""  # "24 validated H100 BF16 runs (out-of-sample), nearest GPT-7.1B .. GPT-175B"
    reason: str = ""  # why there is no band
    caveat: str = ""  # where the query differs from every run the band rests on

    @property
    def ok(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def throughput(self, value: float) -> tuple[float, float]:
        """Interval of a throughput-like figure (tokens/s, TFLOPS/GPU)."""
        return (value * self.lo, value * self.hi) if self.ok else (math.nan, math.nan)

    def duration(self, value: float) -> tuple[float, float]:
        """Interval of a figure inversely proportional to throughput (GPU-hours, days, cost)."""
        return (value / self.hi, value / self.lo) if self.ok else (math.nan, math.nan)

    def describe(self) -> str:
        if not self.ok:
            return f"no {self.level:.0%} band: {self.reason}"
        return f"{self.level:.0%} band from {self.basis}" + (f"; {self.caveat}" if self.caveat else "")


@dataclass(frozen=True)
class BandQuery:
    """The run a band is asked for: its model's parameters, pipeline and CP sizes, and (when known) whether its
    MLP is gated and its recompute mode (these two do not change the interval; see :meth:`BandTable.band`)."""

    params: float
    pp: int = 1
    cp: int = 1
    gated_mlp: bool | None = None
    recompute: str | None = None


@dataclass
class BandTable:
    """The residual file, queried."""

    data: dict[str, Any]
    rows: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.rows = [r for r in self.data.get("rows", []) if r.get("gpu")]

    def usable(self, gpu: str, pclass: str, exclude: int | tuple[str, int] | None = None,
               suite: str | None = None) -> list[dict[str, Any]]:
        """Rows with an out-of-sample error of ``gpu`` and precision class ``pclass`` (of ``suite`` only, when
        given), without the row ``exclude`` (``(suite, row)``; a bare row id is a published row)."""
        ex = ("published", exclude) if isinstance(exclude, int) else exclude
        return [r for r in self.rows if r["gpu"] == gpu and r["precision_class"] == pclass and row_key(r) != ex
                and (suite is None or suite_of(r) == suite)
                and _finite(r.get("log_error_out_of_sample")) and _finite(r.get("params"))]

    def band(self, profile: str, precision: str, query: BandQuery, *, level: float = LEVEL,
             exclude: int | tuple[str, int] | None = None) -> Band:
        """The interval for a prediction made with ``profile`` at ``precision`` for the run ``query`` describes;
        ``exclude``: a row left out (leave-one-out coverage), ``(suite, row id)`` or a published row's id.

        The runs it rests on come from one suite, published runs or the Megatron-LM CI suite's short steps
        (:mod:`dcpsim.published.bands_ci`): the one with more runs within :data:`MAX_SIZE_RATIO` of the query's
        size (published runs on a tie).

        ``query.gated_mlp`` and ``query.recompute`` (the MLP type and recompute mode, when known) do not change
        the interval; where no run it rests on shares them, :attr:`Band.caveat` says so (a regime the runs did
        not cover: the interval may be too narrow there)."""
        params, pp, cp = query.params, query.pp, query.cp
        name = Path(str(profile)).name
        gpu = base_gpu(name)
        pclass = precision_class(gpu, precision)
        if not name.endswith(CALIBRATED_SUFFIX):
            return Band(level=level, reason=f"profile {name} is not calibrated (datasheet figures: an optimistic "
                                            "upper bound, not validated)")
        pool = self.usable(gpu, pclass, exclude)
        what = f"{gpu} {'FP8' if pclass == 'fp8' else 'BF16/FP16'}"
        if len(pool) < MIN_RUNS:
            return Band(level=level, n=len(pool), reason=f"only {len(pool)} validated {what} runs (a band needs "
                                                         f"{MIN_RUNS})")
        sizes = np.array([r["params"] for r in pool])
        ratio = float(np.min(np.maximum(sizes / params, params / sizes)))
        if ratio > MAX_SIZE_RATIO:
            return Band(level=level, n=0, reason=f"no validated {what} run within {MAX_SIZE_RATIO:g}x of "
                                                 f"{params / 1e9:.3g}B parameters (nearest {ratio:.0f}x away)")
        # one suite: the one with the most runs within MAX_SIZE_RATIO of the query, published runs on a tie (a
        # tiny model's host-bound CI step and a large model's GPU-bound published run do not share their errors)
        near_size = [suite_of(r) for r in pool if max(r["params"] / params, params / r["params"]) <= MAX_SIZE_RATIO]
        chosen = max(sorted(set(near_size)), key=lambda su: (near_size.count(su), su == "published"))
        pool = [r for r in pool if suite_of(r) == chosen]
        if len(pool) < MIN_RUNS:
            return Band(level=level, n=len(pool), reason=f"only {len(pool)} validated {what} runs in the suite "
                                                         f"nearest this model ({chosen}; a band needs {MIN_RUNS})")
        dist = [abs(math.log10(r["params"] / params)) + 0.25 * ((r["pp"] > 1) != (pp > 1))
                + 0.25 * ((r["cp"] > 1) != (cp > 1)) for r in pool]
        order = sorted(range(len(pool)), key=lambda i: (dist[i], suite_of(pool[i]), pool[i]["row"]))
        near = [pool[i] for i in order[:NEAR_RUNS]]
        e = np.sort([r["log_error_out_of_sample"] for r in near])
        lo_e, hi_e = conformal_quantiles(e, level)
        if not (math.isfinite(lo_e) and math.isfinite(hi_e)):
            return Band(level=level, n=len(near), reason=f"{len(near)} runs are too few for a {level:.0%} band")
        models = sorted({r["params"] for r in near})
        n_ci = sum(1 for r in near if suite_of(r) != "published")
        kind = ("runs" if not n_ci else "Megatron-LM CI steps" if n_ci == len(near)
                else f"runs ({n_ci} of them Megatron-LM CI steps)")
        basis = (f"{len(near)} validated {what} {kind} (out-of-sample errors; models "
                 f"{models[0] / 1e9:.3g}B-{models[-1] / 1e9:.3g}B)")
        return Band(lo=math.exp(-hi_e), hi=math.exp(-lo_e), n=len(near), level=level, basis=basis,
                    caveat=self._caveat(near, query.gated_mlp, query.recompute))

    def _caveat(self, near: list[dict[str, Any]], gated_mlp: bool | None, recompute: str | None) -> str:
        feats = row_regimes()

        def regime(r: dict[str, Any], what: str):
            if suite_of(r) != "published":  # CI rows carry their own (bands_ci)
                return r.get("gated_mlp" if what == "gated_mlp" else "recompute_mode")
            return feats.get(r["row"], {}).get(what)

        out = []
        if gated_mlp is not None:
            have = {regime(r, "gated_mlp") for r in near}
            if have and gated_mlp not in have:
                out.append(f"none of them has a {'gated' if gated_mlp else 'plain'} MLP like this model")
        if recompute is not None:
            mode = "full" if str(recompute).startswith("full") else "none/selective"
            have = {regime(r, "recompute") for r in near}
            if have and mode not in have:
                out.append(f"all of them {'recompute fully' if mode != 'full' else 'skip full recompute'}, this "
                           f"layout {'does' if mode == 'full' else 'does not'}")
        return ("outside the validated regime: " + "; ".join(out) + " (the interval may be too narrow)") if out else ""

    def best_mfu(self, profile: str, precision: str) -> dict[str, Any] | None:
        """The best measured utilization of the group with its row and source: hardware FLOPs (recomputed
        forwards counted, :func:`hardware_utilization`) over the BF16 peak.

        A GPU with no published run gets the best of any GPU at that precision (``same_gpu`` False): MFU is
        relative to each GPU's own peak, and no published run anywhere reached more."""
        gpu = base_gpu(profile)
        pclass = precision_class(gpu, precision)
        same = [r for r in self.rows if r["precision_class"] == pclass and _finite(r.get("mfu_measured"))]
        cand = [r for r in same if r["gpu"] == gpu]
        if not cand and not same:
            return None
        best = max(cand or same, key=lambda r: (hardware_utilization(r["mfu_measured"], r.get("recompute")), -r["row"]))
        return {"mfu": hardware_utilization(best["mfu_measured"], best.get("recompute")), "row": best["row"],
                "model": best["model"], "source": best["source"], "gpu": best["gpu"], "precision_class": pclass,
                "same_gpu": bool(cand), "recompute": best.get("recompute", "")}

    def coverage(self, level: float = LEVEL, split: str = "held-out", suite: str = "published") -> dict[str, Any]:
        """Leave-one-out coverage: each row of ``suite`` and ``split`` inside the band built from the other rows
        (of both suites, as a query's would be)?"""
        per: list[dict[str, Any]] = []
        for r in self.rows:
            if (split != "all" and r["split"] != split) or suite_of(r) != suite \
                    or not _finite(r.get("log_error_out_of_sample")) or not _finite(r.get("params")):
                continue
            b = self.band(r["gpu"] + CALIBRATED_SUFFIX, r["precision"], BandQuery(r["params"], pp=r["pp"], cp=r["cp"]),
                          level=level, exclude=row_key(r))
            ratio = math.exp(-r["log_error_out_of_sample"])  # measured / predicted
            per.append({"row": r["row"], "model": r["model"], "gpu": r["gpu"], "precision": r["precision"],
                        "split": r["split"], "measured_over_predicted": ratio, "band_lo": b.lo, "band_hi": b.hi,
                        "n": b.n, "covered": (b.lo <= ratio <= b.hi) if b.ok else None, "reason": b.reason})
        with_band = [p for p in per if p["covered"] is not None]
        hits = sum(1 for p in with_band if p["covered"])
        return {"level": level, "split": split, "suite": suite, "rows": per, "with_band": len(with_band),
                "covered": hits, "coverage": hits / len(with_band) if with_band else math.nan,
                "without_band": len(per) - len(with_band)}

    def groups(self, level: float = LEVEL) -> list[dict[str, Any]]:
        """One line per suite, GPU and precision class: runs, out-of-sample error spread, best measured MFU."""
        out = []
        for suite, gpu, pclass in sorted({(suite_of(r), r["gpu"], r["precision_class"]) for r in self.rows}):
            pool = self.usable(gpu, pclass, suite=suite)
            e = np.sort([r["log_error_out_of_sample"] for r in pool])
            lo_e, hi_e = conformal_quantiles(e, level) if len(e) else (math.nan, math.nan)
            mfu = self.best_mfu(gpu, "fp8" if pclass == "fp8" else "bf16")
            out.append({"suite": suite, "gpu": gpu, "precision": pclass, "runs": len(pool),
                        "band_all_runs": f"{math.exp(-hi_e):.3f}-{math.exp(-lo_e):.3f}" if math.isfinite(lo_e)
                        and math.isfinite(hi_e) else "none",
                        "mean_abs_log_error": float(np.mean(np.abs(e))) if len(e) else math.nan,
                        "best_mfu": f"{mfu['mfu']:.1%} (row {mfu['row']}, {mfu['model']})" if mfu else ""})
        return out

    def markdown(self, level: float = LEVEL) -> str:
        d = self.data
        lines = [f"# Prediction bands: residuals and coverage (dcpsim {str(d.get('dcpsim_commit', ''))[:7]})", "",
                 "Out-of-sample log errors of tokens/s per GPU on the calibrated profiles, published runs and "
                 "Megatron-LM CI steps (`dcpsim.published.bands`, `dcpsim.published.bands_ci`; regenerate with "
                 "`dcpsim bands build --out DIR`).", "",
                 f"| suite | GPU | precision | runs | {level:.0%} band over all runs (measured/predicted) | "
                 "mean abs log error | best measured MFU |", "|---|---|---|---:|---|---:|---|"]
        for g in self.groups(level):
            lines.append(f"| {g['suite']} | {g['gpu']} | {g['precision']} | {g['runs']} | {g['band_all_runs']} | "
                         f"{g['mean_abs_log_error']:.3f} | {g['best_mfu']} |")
        suites = ["published"] + (["megatron-ci"] if any(suite_of(r) == "megatron-ci" for r in self.rows) else [])
        for suite in suites:
            for split in ("held-out", "all"):
                cov = self.coverage(level, split, suite)
                lines += ["", f"## Coverage, {suite} {split} rows (leave-one-out)", "",
                          f"{cov['covered']} of {cov['with_band']} rows inside their {level:.0%} band "
                          f"({_pct(cov['coverage'])}); {cov['without_band']} rows without a band.", ""]
                if split == "held-out":
                    lines += ["| row | model | GPU | precision | measured/predicted | band | runs | inside |",
                              "|---:|---|---|---|---:|---|---:|---|"]
                    for p in cov["rows"]:
                        band = f"{p['band_lo']:.3f}-{p['band_hi']:.3f}" if p["covered"] is not None else p["reason"]
                        inside = {True: "yes", False: "**no**", None: "-"}[p["covered"]]
                        lines.append(f"| {p['row']} | {p['model']} | {p['gpu']} | {p['precision']} | "
                                     f"{p['measured_over_predicted']:.3f} | {band} | {p['n']} | {inside} |")
        return "\n".join(lines) + "\n"


def ci_coverage(table: BandTable, level: float = LEVEL, split: str = "held-out") -> dict[str, Any]:
    """Coverage on the Megatron-LM CI suite's ``split`` rows: each CI row of the residual file
    (:mod:`dcpsim.published.bands_ci`: its out-of-sample error) inside the band built from the other rows of
    both suites, leave-one-out, as :meth:`BandTable.coverage`; rows without a band are counted by reason."""
    cov = table.coverage(level, split, suite="megatron-ci")
    reasons: dict[str, int] = {}
    for p in cov["rows"]:
        if p["covered"] is None:
            key = re.sub(r"within [\d.]+x of [\d.e+]+B parameters", "near this model's size",
                         p["reason"].split(" (nearest")[0])
            reasons[key] = reasons.get(key, 0) + 1
    return {**cov, "compared": len(cov["rows"]), "no_band_reasons": reasons}


def suite_of(r: dict[str, Any]) -> str:
    """The suite a residual row comes from (``published`` for files written before the CI suite joined)."""
    return str(r.get("suite") or "published")


def row_key(r: dict[str, Any]) -> tuple[str, int]:
    """A residual row's identity across both suites: ``(suite, row id)``."""
    return suite_of(r), int(r["row"])


_REGIMES: dict[int, dict[str, Any]] = {}


def row_regimes() -> dict[int, dict[str, Any]]:
    """Per suite row: gated MLP or not, full recompute or not (facts of the suite, read once per process)."""
    if not _REGIMES:
        from dcpsim.model import get_model
        from dcpsim.published.suite import load_suite, row_config

        for row in load_suite().rows:
            rc = row_config(row)
            if rc.config is None:
                continue
            _REGIMES[row.id] = {"gated_mlp": bool(get_model(rc.config.model.name).gated_mlp),
                                "recompute": "full" if rc.config.parallel.recompute == "full" else "none/selective"}
    return _REGIMES


def recompute_factor(recompute: Any) -> float:
    """FLOPs the GPU does per model FLOP: 4/3 with full recompute (one more forward on the 3 units of forward
    and backward), else 1 (selective recompute redoes only the attention core: not counted)."""
    return 4.0 / 3.0 if str(recompute or "").strip().lower().startswith("full") else 1.0


def hardware_utilization(mfu: float, recompute: Any) -> float:
    """Model FLOPs utilization -> hardware FLOPs utilization (what the GPU computed, recompute included; the
    way Narayanan et al. 2021 report their 52% on A100): a bound that does not penalise a run for skipping
    recompute."""
    return float(mfu) * recompute_factor(recompute)


def conformal_quantiles(sorted_errors, level: float) -> tuple[float, float]:
    """Split-conformal lower and upper quantiles of sorted signed errors (NaN where ``n`` is too small)."""
    e = np.asarray(sorted_errors, dtype=float)
    n = len(e)
    alpha = 1.0 - level
    lo_k = math.floor((n + 1) * alpha / 2 + 1e-9)  # 1e-9: 1 - 0.8 is not exactly 0.2 in binary
    hi_k = math.ceil((n + 1) * (1 - alpha / 2) - 1e-9)
    if lo_k < 1 or hi_k > n:
        return math.nan, math.nan
    return float(e[lo_k - 1]), float(e[hi_k - 1])


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(float(v))


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%" if math.isfinite(v) else "n/a"


_TABLE: dict[str, BandTable] = {}


def load(path: str | Path | None = None) -> BandTable:
    """The residual file (default: the shipped one), read once per process."""
    import json

    p = Path(path) if path is not None else bands_path()
    key = str(p)
    if key not in _TABLE:
        expected = "the residual file from `dcpsim bands build` (shipped in experiments/published_throughput/results/)"
        if not p.is_file():
            raise ConfigError("bands file", str(p), expected)
        try:
            data = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError("bands file", str(p), f"{expected}; it is not readable JSON ({exc})") from None
        rows = data.get("rows") if isinstance(data, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ConfigError("bands file", str(p), f"{expected}; it has no list of residual rows ('rows')")
        _TABLE[key] = BandTable(data)
    return _TABLE[key]
