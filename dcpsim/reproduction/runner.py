"""Run the Dynamic-CP blog reproduction: cells, pooling, the comparison table, sensitivity.

A *cell* is one simulator run (dataset, policy, seed, variant). Cells of the
same (dataset, variant) share seeds across policies, so every policy trains the
same global batches (paired comparison). Throughput is pooled over seeds the
way Megatron reports it: total counted FLOPs over total time,
``Σ F / (Σ T · GPUs · 1e12)``; a speedup is the ratio of pooled throughputs
(FLOPs are equal across policies on the same batches, so it is the inverse
ratio of total iteration time).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dcpsim.errors import DcpsimError, InfeasibleError
from dcpsim.model.accounting import tflops_per_gpu
from dcpsim.reproduction.blog import VARIANT_LABELS, WORKLOAD_VARIANTS, BlogExperiment
from dcpsim.run.config import RunConfig
from dcpsim.run.pool import cap_jobs

__all__ = [
    "BREAKDOWN_PARTS",
    "VARIANT_LABELS",
    "WORKLOAD_VARIANTS",
    "CellSpec",
    "ReproduceResult",
    "main_cells",
    "main_table",
    "pooled_tflops",
    "reproduce",
    "run_cell",
    "run_cells",
    "consistency_cells",
    "consistency_table",
    "sensitivity_cells",
    "sensitivity_table",
]

BREAKDOWN_PARTS = ("compute_s", "cp_comm_s", "bubble_s", "imbalance_s", "grad_sync_s", "planning_stall_s")
"""Where the time goes, per GPU, seconds per iteration (the simulator's accounting; they sum to the iteration time)."""


@dataclass(frozen=True)
class CellSpec:
    """One simulator run of the experiment.

    Attributes:
        dataset, policy, seed: what is run.
        config: the full RunConfig.
        workload: ``"public"`` (the primary, uncalibrated real-data workload) or ``"calibrated"``
            (the secondary view: a tail index fitted to the packing figure).
        axis, value: sensitivity axis name and tick label (``"primary"``, ``""`` for the main table).
    """

    dataset: str
    policy: str
    seed: int
    config: RunConfig
    workload: str = "public"
    axis: str = "primary"
    value: str = ""


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Run one cell; a flat row (``status`` ok | infeasible | error, never raises a dcpsim error)."""
    from dcpsim.run.single import run_simulation

    row: dict[str, Any] = {
        "dataset": spec.dataset,
        "policy": spec.policy,
        "seed": spec.seed,
        "workload": spec.workload,
        "axis": spec.axis,
        "value": spec.value,
        "config_hash": spec.config.config_hash(),
        "gpus": spec.config.cluster.gpus,
    }
    t0 = time.perf_counter()
    try:
        res = run_simulation(spec.config)
    except InfeasibleError as exc:
        row.update(status="infeasible", reason=str(exc), wall_s=time.perf_counter() - t0)
        return row
    except DcpsimError as exc:
        row.update(status="error", reason=str(exc), wall_s=time.perf_counter() - t0)
        return row
    it = res.iterations
    s = res.summary
    row.update(
        status="ok",
        reason="",
        wall_s=time.perf_counter() - t0,
        iterations=int(len(it)),
        flops=float(it["flops"].sum()),
        time_s=float(it["iteration_time_s"].sum()),
        tflops_per_gpu=float(s["tflops_per_gpu"]),
        tokens=int(it["tokens"].sum()),
        steps=float(s.get("steps", float("nan"))),
        mean_cp=float(s.get("mean_cp", float("nan"))),
        planning_time_s=float(s.get("planning_time_s", float("nan"))),
        dropped=int(s.get("dropped", 0) or 0),
    )
    for k in BREAKDOWN_PARTS:
        row[k] = float(s.get(k, float("nan"))) * len(it)  # seconds summed over iterations
    # CP-size mix: sequences and tokens trained at each CP size
    seqs: dict[int, int] = {}
    toks: dict[int, float] = {}
    for plan in res.plans:
        lens = np.asarray(plan.lengths)
        for st in plan.steps:
            for g in st.groups:
                ids = np.asarray(g.seq_ids, dtype=np.int64)
                seqs[g.size] = seqs.get(g.size, 0) + int(ids.size)
                toks[g.size] = toks.get(g.size, 0.0) + float(lens[ids].sum()) if ids.size else toks.get(g.size, 0.0)
    for c, n in seqs.items():
        row[f"cp{c}_seqs"] = n
        row[f"cp{c}_tokens"] = toks.get(c, 0.0)
    return row


def pooled_tflops(rows: Iterable[dict[str, Any]]) -> float:
    """Σ FLOPs / (Σ time · GPUs · 1e12) over ok rows (all with the same GPU count)."""
    rows = [r for r in rows if r.get("status") == "ok"]
    if not rows:
        return float("nan")
    gpus = {int(r["gpus"]) for r in rows}
    if len(gpus) != 1:
        raise ValueError(f"pooling rows with different GPU counts {sorted(gpus)}")
    t = sum(r["time_s"] for r in rows)
    return tflops_per_gpu(sum(r["flops"] for r in rows), t, gpus.pop())


def _worker(spec: CellSpec) -> dict[str, Any]:
    return run_cell(spec)


def run_cells(
    specs: list[CellSpec],
    *,
    jobs: int = 1,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run cells (in order with ``jobs=1``, else in a process pool); rows in the order of ``specs``."""
    if jobs <= 1 or len(specs) <= 1:
        out = []
        for sp in specs:
            r = run_cell(sp)
            out.append(r)
            if on_done:
                on_done(r)
        return out
    return _run_pooled(specs, jobs, on_done)


def _run_pooled(specs: list[CellSpec], jobs: int, on_done: Callable[[dict[str, Any]], None] | None,
                attempts: int = 2, fn: Callable[[CellSpec], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Cells in a :func:`dcpsim.run.pool.worker_pool`; a cell whose worker dies is retried, then a ``failed`` row.

    A retry runs each lost cell alone in its own one-worker pool, so a cell that only waited in a pool
    that another cell's death broke is not charged with that death. ``fn`` runs one cell in the worker
    (default :func:`run_cell`; tests pass one that kills its worker).
    """
    from dcpsim.run.pool import retry_alone

    fn = fn or _worker
    rows: list[dict[str, Any] | None] = [None] * len(specs)
    # Longest cells first keeps the pool busy to the end (dynamic-solver and big clusters are slow).
    order = sorted(range(len(specs)), key=lambda i: -_expected_cost(specs[i]))
    rounds: list[tuple[list[int], int]] = [(order, jobs)]
    retries: list[int] = []

    def give_up(lost, exc) -> None:
        for i in lost:
            rows[i] = _lost_row(specs[i], exc)
            if on_done:
                on_done(rows[i])

    attempt = 1
    while rounds:
        retries.clear()
        for cells, workers in rounds:
            for i, exc in _pool_round(specs, cells, workers, fn, rows, on_done):
                retry_alone([i], attempt, exc, resubmit=lambda j, _n: retries.append(j), give_up=give_up,
                            attempts=attempts)
        rounds = [([i], 1) for i in sorted(retries, key=lambda i: -_expected_cost(specs[i]))]
        attempt += 1
    return [r for r in rows if r is not None]


def _pool_round(specs: list[CellSpec], cells: list[int], workers: int, fn: Callable[[CellSpec], dict[str, Any]],
                rows: list[dict[str, Any] | None],
                on_done: Callable[[dict[str, Any]], None] | None) -> list[tuple[int, BaseException]]:
    """Run ``cells`` in one pool of ``workers``, filling ``rows``; returns the cells lost to a dead worker, each
    with the exception."""
    from concurrent.futures import as_completed

    from dcpsim.run.pool import is_worker_death, worker_pool

    lost: list[tuple[int, BaseException]] = []
    pool = worker_pool(workers)
    try:
        futs = {pool.submit(fn, specs[i]): i for i in cells}
        for fut in as_completed(futs):
            i = futs[fut]
            try:
                rows[i] = fut.result()
            except Exception as exc:
                if not is_worker_death(exc):
                    raise
                lost.append((i, exc))
                continue
            if on_done:
                on_done(rows[i])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return lost


def _lost_row(spec: CellSpec, exc: BaseException) -> dict[str, Any]:
    return {"dataset": spec.dataset, "policy": spec.policy, "seed": spec.seed, "workload": spec.workload,
            "axis": spec.axis, "value": spec.value, "config_hash": spec.config.config_hash(),
            "gpus": spec.config.cluster.gpus, "status": "failed", "wall_s": float("nan"),
            "reason": f"worker process died ({type(exc).__name__}: {exc})"}


def _expected_cost(spec: CellSpec) -> float:
    c = spec.config
    return c.cluster.gpus * c.sim.iterations * (4.0 if "solver" in spec.policy else 1.0)


# ------------------------------------------------------------------ the cells
def main_cells(exp: BlogExperiment, *, seeds: int, iterations: int, workloads: Iterable[str],
               policies: Iterable[str] | None = None) -> list[CellSpec]:
    """Cells of the main table: every dataset x policy (default all) x seed, for each workload variant."""
    out = []
    pols = [p for p in exp.policies if not policies or p in set(policies)]
    for wl in workloads:
        for ds in exp.datasets:
            if wl == "calibrated" and not exp.is_calibrated(ds):
                continue
            for pol in pols:
                for s in range(seeds):
                    cfg = exp.config(ds, pol, calibrated=(wl == "calibrated"), seed=s, iterations=iterations)
                    out.append(CellSpec(dataset=ds, policy=pol, seed=s, config=cfg, workload=wl))
    return out


def sensitivity_cells(exp: BlogExperiment, *, seeds: int, iterations: int, workload: str) -> list[CellSpec]:
    """Cells of the one-at-a-time sensitivity study (policies of ``[sensitivity]``)."""
    out = []
    for ax in exp.axes:
        for val, tick in zip(ax.values, ax.ticks, strict=True):
            upd = dict(ax.base)
            upd[ax.field] = val
            for ds in exp.datasets:
                if ax.datasets and ds not in ax.datasets:
                    continue
                cal = workload == "calibrated" and exp.is_calibrated(ds)
                for pol in exp.sensitivity_policies:
                    for s in range(seeds):
                        cfg = exp.config(ds, pol, calibrated=cal, seed=s, iterations=iterations, updates=upd)
                        out.append(CellSpec(dataset=ds, policy=pol, seed=s, config=cfg,
                                            workload="calibrated" if cal else "public", axis=ax.name, value=tick))
    return out


# ------------------------------------------------------------------ the tables
def _group(rows: list[dict[str, Any]], *keys: str) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def _paired_speedups(cell_rows: list[dict[str, Any]], base_rows: list[dict[str, Any]]) -> np.ndarray:
    """Per-seed speedups (same seed, same batches): base time / policy time."""
    bt = {r["seed"]: r["time_s"] for r in base_rows if r["status"] == "ok"}
    return np.array([bt[r["seed"]] / r["time_s"] for r in cell_rows if r["status"] == "ok" and r["seed"] in bt and r["time_s"] > 0])


def _rel_err(sim: float, pub: float | None) -> float:
    if pub is None or not math.isfinite(sim):
        return float("nan")
    return (sim - pub) / pub


def main_table(exp: BlogExperiment, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload variant, dataset, policy): simulated vs published, errors, breakdown, CP mix."""
    table = []
    by = _group([r for r in rows if r["axis"] == "primary"], "workload", "dataset", "policy")
    for wl in WORKLOAD_VARIANTS:
        for ds in exp.datasets:
            base_rows = by.get((wl, ds, exp.baseline), [])
            base = pooled_tflops(base_rows)
            for pol in exp.policies:
                cell = by.get((wl, ds, pol))
                if not cell:
                    continue
                ok = [r for r in cell if r["status"] == "ok"]
                tf = pooled_tflops(cell)
                pub = exp.published[ds]
                pub_tf = pub["packing"] if pol == exp.baseline else pub["dynamic"] if pol in exp.compared else None
                pub_sp = 1.0 if pol == exp.baseline else pub["speedup"] if pol in exp.compared else None
                sp = tf / base if math.isfinite(base) and base > 0 else float("nan")
                per_seed = _paired_speedups(cell, base_rows)
                row: dict[str, Any] = {
                    "workload": wl,
                    "dataset": ds,
                    "policy": pol,
                    "tflops": tf,
                    "published_tflops": pub_tf,
                    "tflops_err": _rel_err(tf, pub_tf),
                    "speedup": sp,
                    "published_speedup": pub_sp,
                    "speedup_err": _rel_err(sp, pub_sp),
                    "speedup_min": float(per_seed.min()) if per_seed.size else float("nan"),
                    "speedup_max": float(per_seed.max()) if per_seed.size else float("nan"),
                    "seeds": len(ok),
                    "failed": len(cell) - len(ok),
                    "iteration_time_s": sum(r["time_s"] for r in ok) / max(sum(r["iterations"] for r in ok), 1),
                    "mean_cp": float(np.mean([r["mean_cp"] for r in ok])) if ok else float("nan"),
                    "steps": float(np.mean([r["steps"] for r in ok])) if ok else float("nan"),
                    "planning_time_s": float(np.mean([r["planning_time_s"] for r in ok])) if ok else float("nan"),
                }
                n_it = max(sum(r["iterations"] for r in ok), 1)
                for k in BREAKDOWN_PARTS:
                    row[k] = sum(r[k] for r in ok) / n_it
                tot_tok = sum(r["tokens"] for r in ok)
                sizes = sorted({int(k[2:].split("_")[0]) for r in ok for k in r if k.startswith("cp") and k.endswith("_tokens")})
                row["cp_token_share"] = {c: sum(r.get(f"cp{c}_tokens", 0.0) for r in ok) / tot_tok for c in sizes} if tot_tok else {}
                tot_seq = sum(sum(r.get(f"cp{c}_seqs", 0) for c in sizes) for r in ok)
                row["cp_seq_share"] = {c: sum(r.get(f"cp{c}_seqs", 0) for r in ok) / tot_seq for c in sizes} if tot_seq else {}
                if any(r["status"] != "ok" for r in cell):
                    row["reason"] = next(r["reason"] for r in cell if r["status"] != "ok")
                table.append(row)
    return table


def sensitivity_table(exp: BlogExperiment, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (axis, value, dataset): pooled TFLOPS of each sensitivity policy and its speedup over the baseline.

    ``speedup`` is the headline policy's; ``<policy>_speedup`` (and ``_min``/``_max``, the per-seed range) every
    non-baseline policy's.
    """
    out = []
    by = _group([r for r in rows if r["axis"] != "primary"], "axis", "value", "dataset", "policy")
    for ax in exp.axes:
        for tick in ax.ticks:
            for ds in exp.datasets:
                base_rows = by.get((ax.name, tick, ds, exp.baseline), [])
                if not base_rows:
                    continue
                b = pooled_tflops(base_rows)
                row: dict[str, Any] = {"axis": ax.name, "label": ax.label, "value": tick, "dataset": ds,
                                       f"{exp.baseline}_tflops": b}
                bad = [r for r in base_rows if r["status"] != "ok"]
                for pol in exp.sensitivity_policies:
                    if pol == exp.baseline:
                        continue
                    pr = by.get((ax.name, tick, ds, pol), [])
                    bad += [r for r in pr if r["status"] != "ok"]
                    h = pooled_tflops(pr)
                    ps = _paired_speedups(pr, base_rows)
                    row[f"{pol}_tflops"] = h
                    row[f"{pol}_speedup"] = h / b if b > 0 and math.isfinite(b) else float("nan")
                    row[f"{pol}_speedup_min"] = float(ps.min()) if ps.size else float("nan")
                    row[f"{pol}_speedup_max"] = float(ps.max()) if ps.size else float("nan")
                row["speedup"] = row.get(f"{exp.headline}_speedup", float("nan"))
                row["published_speedup"] = exp.published[ds]["speedup"]
                row["status"] = "ok" if not bad else bad[0]["status"]
                row["reason"] = bad[0]["reason"] if bad else ""
                out.append(row)
    return out


# ------------------------------------------------------------------ consistency grid
def consistency_cells(exp: BlogExperiment, *, seeds: int, iterations: int) -> list[CellSpec]:
    """Cells of the joint grid over the unpublished settings (``[consistency]`` of experiment.toml).

    The headline policy runs once per (GPU count, length filter) -- the baseline's CP and M do not touch it --
    and the baseline once per (GPU count, length filter, baseline CP x M); :func:`consistency_table` pairs them.
    """
    g = exp.consistency
    if not g:
        return []
    out = []
    for gpus in g["gpus"]:
        for max_len in g["max_len"]:
            point = {"cluster.gpus": gpus, "workload.max_len": max_len}
            for ds in exp.datasets:
                for s in range(seeds):
                    for hs in g["host_speed"]:
                        upd = {**point, f"options.{exp.headline}.host_speed": hs} if hs is not None else point
                        cfg = exp.config(ds, exp.headline, calibrated=False, seed=s, iterations=iterations, updates=upd)
                        out.append(CellSpec(dataset=ds, policy=exp.headline, seed=s, config=cfg, axis="consistency",
                                            value=f"{gpus}|{max_len}|-|{hs}"))
                    for cp, m in g["baseline_cp_m"]:
                        upd = {**point, "parallel.cp": cp, f"options.{exp.baseline}.bin_tokens_per_rank": m}
                        cfg = exp.config(ds, exp.baseline, calibrated=False, seed=s, iterations=iterations, updates=upd)
                        out.append(CellSpec(dataset=ds, policy=exp.baseline, seed=s, config=cfg, axis="consistency",
                                            value=f"{gpus}|{max_len}|{cp}x{m}"))
    return out


def consistency_table(exp: BlogExperiment, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per joint setting: each dataset's packing TFLOPS and headline speedup, their errors against the
    four published numbers, and ``score`` = the largest |error| / tolerance (<= 1: consistent with all four)."""
    g = exp.consistency
    if not g:
        return []
    by = _group([r for r in rows if r["axis"] == "consistency"], "value", "dataset", "policy")
    tol_sp, tol_pk = exp.tolerances["speedup_rel_tol"], exp.tolerances["packing_rel_tol"]
    out = []
    for gpus, max_len, hs, (cp, m) in itertools.product(g["gpus"], g["max_len"], g["host_speed"], g["baseline_cp_m"]):
        row: dict[str, Any] = {"gpus": gpus, "max_len": max_len, "host_speed": hs, "baseline_cp": cp, "baseline_m": m}
        errs, sp = [], {}
        bad = ""
        for ds in exp.datasets:
            head = by.get((f"{gpus}|{max_len}|-|{hs}", ds, exp.headline), [])
            base = by.get((f"{gpus}|{max_len}|{cp}x{m}", ds, exp.baseline), [])
            failed = [r for r in head + base if r["status"] != "ok"]
            if failed and not bad:
                bad = f"{failed[0]['policy']}: {failed[0]['reason']}"
            b, h = pooled_tflops(base), pooled_tflops(head)
            pub = exp.published[ds]
            sp[ds] = h / b if b > 0 else float("nan")
            e_pk, e_sp = _rel_err(b, pub["packing"]), _rel_err(sp[ds], pub["speedup"])
            row.update({f"{ds}_packing": b, f"{ds}_packing_err": e_pk, f"{ds}_dynamic": h,
                        f"{ds}_speedup": sp[ds], f"{ds}_speedup_err": e_sp})
            errs += [abs(e_pk) / tol_pk, abs(e_sp) / tol_sp]
        names = list(exp.datasets)
        pa, pb = (exp.published[d]["speedup"] for d in names)
        row["order_ok"] = bool((sp[names[0]] - sp[names[1]]) * (pa - pb) > 0)
        row["score"] = max(errs) if all(math.isfinite(e) for e in errs) else float("nan")
        row["consistent"] = bool(row["order_ok"] and row["score"] <= 1.0)
        row["status"] = "ok" if not bad else bad
        out.append(row)
    return out


# ------------------------------------------------------------------ one call
@dataclass
class ReproduceResult:
    """Everything ``dcpsim reproduce`` produced (rows are plain dicts)."""

    mode: str
    cells: list[dict[str, Any]]
    table: list[dict[str, Any]]
    sensitivity: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)
    targets: dict[str, Any] = field(default_factory=dict)
    consistency: list[dict[str, Any]] = field(default_factory=list)


def targets_met(exp: BlogExperiment, table: list[dict[str, Any]], workload: str) -> dict[str, Any]:
    """The issue's targets for one workload variant, for each policy compared with the published Dynamic-CP.

    Keys ``<policy>: <dataset> speedup within <speedup_rel_tol>``, ``<dataset> packing TFLOPS within
    <packing_rel_tol>`` (the baseline, shared by every policy) and ``<policy>: dataset order`` (GitHub's
    speedup above CommonCrawl's, as published).
    """
    tol_sp, tol_pk = exp.tolerances["speedup_rel_tol"], exp.tolerances["packing_rel_tol"]
    out: dict[str, Any] = {}
    rows = {(r["dataset"], r["policy"]): r for r in table if r["workload"] == workload}
    for ds in exp.datasets:
        b = rows.get((ds, exp.baseline))
        if b is not None:
            out[f"{ds} packing TFLOPS within {tol_pk:.0%}"] = bool(abs(b["tflops_err"]) <= tol_pk)
    for pol in exp.compared:
        sp = {}
        for ds in exp.datasets:
            r = rows.get((ds, pol))
            if r is None or rows.get((ds, exp.baseline)) is None:
                continue
            sp[ds] = r["speedup"]
            out[f"{pol}: {ds} speedup within {tol_sp:.0%}"] = bool(abs(r["speedup_err"]) <= tol_sp)
        if len(sp) == len(exp.datasets) == 2:
            (a, pa), (b_, pb) = ((d, exp.published[d]["speedup"]) for d in exp.datasets)
            out[f"{pol}: dataset order"] = bool((sp[a] - sp[b_]) * (pa - pb) > 0)
    return out


@dataclass(frozen=True)
class ReproduceOptions:
    """Which reproduction to run (derive a variant with ``dataclasses.replace``).

    ``quick``: use ``[modes.quick]`` (default ``[modes.full]``). ``sensitivity``: run the sensitivity study
    (default: the mode's setting). ``include_calibrated``: also run the secondary, calibrated view (default
    False: ``--calibrated``); the primary, uncalibrated real-data workloads always run. ``seeds``,
    ``iterations``: override the mode's run size (tests).
    """

    quick: bool = False
    sensitivity: bool | None = None
    include_calibrated: bool | None = None
    seeds: int | None = None
    iterations: int | None = None


def reproduce(
    exp: BlogExperiment,
    options: ReproduceOptions = ReproduceOptions(),
    *,
    jobs: int = 1,
    on_plan: Callable[[int], None] | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> ReproduceResult:
    """Run the experiment (never re-fits: reads the stored calibration).

    Args:
        exp: the loaded experiment.
        options: mode, sensitivity study, calibrated view, run size (:class:`ReproduceOptions`).
        jobs: worker processes (1 = in this process).
        on_plan: called once with the number of cells before running.
        on_done: called with each finished cell row.
    """
    quick, sensitivity, include_calibrated = options.quick, options.sensitivity, options.include_calibrated
    seeds, iterations = options.seeds, options.iterations
    t0 = time.perf_counter()
    mode = exp.modes["quick" if quick else "full"]
    n_seeds = seeds or mode.seeds
    n_its = iterations or mode.iterations
    any_cal = any(exp.is_calibrated(ds) for ds in exp.datasets)
    if include_calibrated is None:
        include_calibrated = False
    wls = ["public"] + (["calibrated"] if include_calibrated and any_cal else [])
    cells = main_cells(exp, seeds=n_seeds, iterations=n_its, workloads=wls, policies=mode.policies or None)
    do_sens = mode.sensitivity if sensitivity is None else sensitivity
    if do_sens:
        cells += sensitivity_cells(exp, seeds=min(mode.sensitivity_seeds, n_seeds), iterations=n_its, workload="public")
        cells += consistency_cells(exp, seeds=min(mode.sensitivity_seeds, n_seeds), iterations=n_its)
    if on_plan:
        on_plan(len(cells))
    rows = run_cells(cells, jobs=cap_jobs(jobs, "--jobs"), on_done=on_done)
    table = main_table(exp, rows)
    sens = sensitivity_table(exp, rows) if do_sens else []
    grid = consistency_table(exp, rows) if do_sens else []
    cal = {
        ds: {"parameter": fp.parameter, "value": fp.value, "public_value": fp.public_value,
             "fitted_to": f"{fp.target_policy} TFLOPS/GPU = {fp.target_tflops}", "residual_tflops": fp.residual_tflops,
             "seeds": list(fp.seeds), "iterations": fp.iterations}
        for ds, fp in exp.calibration.fitted.items()
    }
    targets = {wl: targets_met(exp, table, wl) for wl in wls}
    return ReproduceResult(mode=mode.name, cells=rows, table=table, sensitivity=sens,
                           wall_s=time.perf_counter() - t0, calibration=cal, targets=targets, consistency=grid)
