"""``dcpsim reproduce``: replay the Dynamic-CP blog's published results in simulation.

Runs experiments/dynamic_cp_blog (datasets x policies x seeds, plus the
sensitivity study in full mode), prints simulated vs published TFLOPS/GPU and
speedups, and writes tables and figures. Reads the stored calibration; only
``--recalibrate`` re-fits it (against the published *packing* figures only).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from dcpsim.commands._common import POS_INT, add_force, print_json, print_table, to_jsonable
from dcpsim.errors import ConfigError
from dcpsim.reproduction.blog import VARIANT_LABELS, WORKLOAD_VARIANTS, source_revision


def register(sub) -> None:
    p = sub.add_parser("reproduce", help="reproduce the Dynamic-CP blog's published results (TFLOPS, speedups)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="small run (the experiment's [modes.quick]: 3 seeds x 4 iterations in the shipped one, "
                        "primary workloads, no sensitivity): seconds on one core")
    p.add_argument("--out", default="dcpsim-reproduce", help="output folder (tables, figures, cells); default ./dcpsim-reproduce")
    p.add_argument("--spec", default=None, help="experiment folder (default: experiments/dynamic_cp_blog of this checkout)")
    p.add_argument("--jobs", type=POS_INT, default=1, help="worker processes (default 1)")
    p.add_argument("--seeds", type=POS_INT, default=None, help="seeds per cell (default: the mode's)")
    p.add_argument("--iterations", type=POS_INT, default=None, help="global batches per seed (default: the mode's)")
    p.add_argument("--no-sensitivity", action="store_true", help="skip the sensitivity study")
    p.add_argument("--sensitivity", action="store_true", help="run the sensitivity study even with --quick")
    p.add_argument("--calibrated", action="store_true",
                   help="also run the secondary, calibrated view (tail index fitted to the packing figure; "
                        "re-fit it first with --recalibrate when the time model changed)")
    p.add_argument("--recalibrate", action="store_true",
                   help="re-fit the workload parameter of each dataset to its published PACKING TFLOPS, "
                        "write calibration.toml into the experiment folder, then run")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_force(p)
    p.set_defaults(func=run)


def _progress(enabled: bool):
    from contextlib import nullcontext

    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=Console(stderr=True), transient=False)


def run(args: argparse.Namespace) -> int:
    from dcpsim.reproduction import load_experiment

    _check_args(args)
    exp = load_experiment(args.spec)
    show = not (args.json or args.no_progress)
    from dcpsim.outdir import check_out_dir

    out = check_out_dir(args.out, force=args.force)  # before any run: a bad or foreign --out fails fast
    if args.recalibrate:
        exp = _refit_workload(exp, args, show)
    res = _reproduce(exp, args, show)
    files = write_outputs(exp, res, out, plots=not args.no_plots)
    if args.json:
        print_json({"mode": res.mode, "wall_s": res.wall_s, "table": res.table, "sensitivity": res.sensitivity,
                    "consistency": res.consistency,
                    "calibration": res.calibration, "targets": res.targets, "files": files})
        return 0
    _print_result(exp, res)
    print(f"{len(res.cells)} runs in {res.wall_s:.1f} s; wrote {out}/")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if args.jobs < 1:
        raise ConfigError("--jobs", args.jobs, "a positive number of worker processes")
    for name in ("seeds", "iterations"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise ConfigError(f"--{name}", v, "a positive integer")


def _refit_workload(exp, args: argparse.Namespace, show: bool):
    """Re-fit each dataset's secondary-view parameter to its packing figure, write calibration.toml, reload."""
    from dcpsim.reproduction import load_experiment
    from dcpsim.reproduction.workload_fit import fit_dataset, write_calibration

    fits = {}
    with _progress(show) as prog:
        for ds in exp.datasets:
            task = prog.add_task(f"calibrating {ds}", total=None) if prog else None

            def tick(p: float, tf: float, task=task, prog=prog, ds=ds) -> None:
                if prog:
                    prog.update(task, advance=1, description=f"calibrating {ds}: {exp.calibration_setup.get('parameter')}={p:.4g} -> {tf:.1f} TFLOPS")

            fits[ds] = fit_dataset(exp, ds, on_eval=tick)
    write_calibration(exp.calibration_path, fits, exp)
    if not args.json:
        print(f"wrote {exp.calibration_path}", file=sys.stderr)
    return load_experiment(args.spec)


def _reproduce(exp, args: argparse.Namespace, show: bool):
    from dcpsim.reproduction import ReproduceOptions, reproduce

    sens = False if args.no_sensitivity else (True if args.sensitivity else None)
    with _progress(show) as prog:
        task = None

        def on_plan(n: int) -> None:
            nonlocal task
            if prog:
                task = prog.add_task("quick reproduction" if args.quick else "full reproduction", total=n)

        def on_done(row: dict[str, Any]) -> None:
            if prog and task is not None:
                prog.advance(task)

        opts = ReproduceOptions(quick=args.quick, sensitivity=sens, include_calibrated=True if args.calibrated else None,
                                seeds=args.seeds, iterations=args.iterations)
        return reproduce(exp, opts, jobs=args.jobs, on_plan=on_plan, on_done=on_done)


def _print_result(exp, res) -> None:
    for wl in WORKLOAD_VARIANTS:
        rows = [r for r in res.table if r["workload"] == wl]
        if rows:
            print_table(display_rows(rows), title=f"{exp.title} -- {VARIANT_LABELS[wl]} ({res.mode} run, {rows[0]['seeds']} seeds)")
            print_table(breakdown_rows(rows), title="Where the time goes (per iteration; microbatches per pipeline; % of tokens per CP size)")
    for ds, c in res.calibration.items():
        print(f"calibrated: {ds} {c['parameter']} = {c['value']:.4g} (public {c['public_value']:g}), fitted to {c['fitted_to']} only")
    if not res.calibration:
        print("no calibration stored: only the primary real-data workloads were run")
    for wl, t in res.targets.items():
        met = [k for k, v in t.items() if v]
        missed = [k for k, v in t.items() if not v]
        print(f"targets ({VARIANT_LABELS[wl]}): met {len(met)}/{len(t)}" + (f"; missed: {', '.join(missed)}" if missed else ""))
    if res.sensitivity:
        print_table(sensitivity_rows(exp, res.sensitivity), title=f"Sensitivity (speedup over {exp.baseline})")
    if res.consistency:
        print_table(consistency_rows(exp, res.consistency),
                    title="Joint grid of the unpublished settings vs all four published numbers (score <= 1: consistent)")


def _pct(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:+.1f}%"


def _num(x: Any, nd: int = 2) -> Any:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(float(x), nd)


def display_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The side-by-side table of the issue: dataset, policy, TFLOPS, published, speedup, published, errors."""
    out = []
    for r in rows:
        out.append({
            "dataset": r["dataset"],
            "policy": r["policy"],
            "TFLOPS/GPU": _num(r["tflops"], 1),
            "published TFLOPS": _num(r["published_tflops"], 2),
            "TFLOPS err": _pct(r["tflops_err"]),
            "speedup": _num(r["speedup"], 3),
            "seed range": f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f}" if math.isfinite(r["speedup_min"]) else "",
            "published speedup": _num(r["published_speedup"], 2),
            "speedup err": _pct(r["speedup_err"]),
            "mean CP": _num(r["mean_cp"], 2),
        })
    return out


def breakdown_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where an iteration's time goes (seconds, mean per iteration and GPU), microbatches per pipeline and the
    CP mix (share of tokens trained at each CP size)."""
    out = []
    for r in rows:
        share = r.get("cp_token_share") or {}
        out.append({
            "dataset": r["dataset"],
            "policy": r["policy"],
            "TFLOPS/GPU": _num(r["tflops"], 1),
            "iteration s": _num(r["iteration_time_s"], 2),
            "microbatches": _num(r["steps"], 1),
            "compute s": _num(r["compute_s"], 2),
            "bubble s": _num(r["bubble_s"], 2),
            "imbalance s": _num(r["imbalance_s"], 2),
            "planning stall s": _num(r["planning_stall_s"], 2),
            "planning s": _num(r["planning_time_s"], 2),
            "tokens at CP 1/2/4/8": " / ".join(f"{100 * share.get(c, 0.0):.0f}" for c in (1, 2, 4, 8)),
        })
    return out


def sensitivity_rows(exp, sens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Display rows of the sensitivity table: baseline TFLOPS, then each other policy's TFLOPS and speedup."""
    out = []
    for r in sens:
        d: dict[str, Any] = {"axis": r["axis"], "value": r["value"], "dataset": r["dataset"],
                             f"{exp.baseline} TFLOPS": _num(r.get(f"{exp.baseline}_tflops"), 1)}
        for pol in exp.sensitivity_policies:
            if pol == exp.baseline:
                continue
            d[f"{pol} TFLOPS"] = _num(r.get(f"{pol}_tflops"), 1)
            lo, hi = r.get(f"{pol}_speedup_min", math.nan), r.get(f"{pol}_speedup_max", math.nan)
            rng = f" ({lo:.2f}-{hi:.2f})" if math.isfinite(lo) else ""
            d[f"{pol} speedup"] = f"{r.get(f'{pol}_speedup', math.nan):.3f}{rng}"
        d["published"] = r["published_speedup"]
        d["status"] = r["status"]
        out.append(d)
    return out


def consistency_rows(exp, grid: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Display rows of the joint grid, nearest to the published numbers first."""
    out = []
    for r in sorted(grid, key=lambda r: (r["score"] if math.isfinite(r["score"]) else math.inf)):
        d: dict[str, Any] = {"GPUs": r["gpus"], "max len": r["max_len"],
                             "planner host": "" if r.get("host_speed") is None else f"{r['host_speed']:g}x",
                             "baseline CP x M": f"{r['baseline_cp']}x{r['baseline_m']}"}
        for ds in exp.datasets:
            d[f"{ds} packing"] = f"{_num(r[f'{ds}_packing'], 1)} ({_pct(r[f'{ds}_packing_err'])})"
            d[f"{ds} speedup"] = f"{_num(r[f'{ds}_speedup'], 2)} ({_pct(r[f'{ds}_speedup_err'])})"
        d["order"] = "ok" if r["order_ok"] else "reversed"
        d["score"] = _num(r["score"], 2)
        d["consistent"] = "yes" if r["consistent"] else "no"
        if r["status"] != "ok":
            d["consistent"] = f"no ({r['status'][:60]})"
        out.append(d)
    return out


def _markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(c.strip() for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    from dcpsim.outdir import write_with

    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]

    def _write(tmp: Path) -> None:
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols)
            w.writeheader()
            for r in rows:
                w.writerow({k: json.dumps(to_jsonable(v)) if isinstance(v, dict) else v for k, v in r.items()})

    write_with(path, _write)


def write_outputs(exp, res, out: Path, *, plots: bool = True) -> dict[str, str]:
    """summary.csv / summary.md / sensitivity.csv / cells.csv / result.json and the figures (atomic, :mod:`dcpsim.outdir`)."""
    from dcpsim.outdir import write_text
    files: dict[str, str] = {}
    _write_csv(out / "summary.csv", res.table)
    files["summary_csv"] = str(out / "summary.csv")
    src = source_revision()
    rev = f" dcpsim at commit {src['git_commit'][:10]}{' (with uncommitted changes)' if src['uncommitted_changes'] else ''}." if src else ""
    md = [f"# {exp.title}\n\n", f"{res.mode} run, {len(res.cells)} simulator runs, {res.wall_s:.0f} s.{rev}\n"]
    for wl in WORKLOAD_VARIANTS:
        rows = [r for r in res.table if r["workload"] == wl]
        if rows:
            md += [f"\n## {VARIANT_LABELS[wl]}\n\n", _markdown(display_rows(rows)),
                   "\nWhere the time goes (seconds per iteration, mean over GPUs; microbatches per pipeline; "
                   "% of tokens at CP 1/2/4/8):\n\n", _markdown(breakdown_rows(rows))]
    if res.calibration:
        md.append("\n## Calibration (read from calibration.toml, not re-fitted)\n\n")
        for ds, c in res.calibration.items():
            md.append(f"- {ds}: {c['parameter']} = {c['value']:.4g} (public value {c['public_value']:g}); fitted to "
                      f"{c['fitted_to']} only; residual {c['residual_tflops']:+.2f} TFLOPS.\n")
    for wl, t in res.targets.items():
        md.append(f"\n## Targets, {VARIANT_LABELS[wl]}\n\n")
        md += [f"- {k}: {'met' if v else 'MISSED'}\n" for k, v in t.items()]
    if res.sensitivity:
        _write_csv(out / "sensitivity.csv", res.sensitivity)
        files["sensitivity_csv"] = str(out / "sensitivity.csv")
        md.append(f"\n## Sensitivity (speedup over {exp.baseline}; one setting changed at a time)\n\n")
        md.append(_markdown(sensitivity_rows(exp, res.sensitivity)))
    if res.consistency:
        _write_csv(out / "consistency.csv", res.consistency)
        files["consistency_csv"] = str(out / "consistency.csv")
        md.append("\n## Joint grid of the unpublished settings (score = largest |error| / tolerance; <= 1 and the "
                  "order right: consistent with all four published numbers)\n\n")
        md.append(_markdown(consistency_rows(exp, res.consistency)))
    write_text(out / "summary.md", "".join(md))
    files["summary_md"] = str(out / "summary.md")
    _write_csv(out / "cells.csv", res.cells)
    files["cells_csv"] = str(out / "cells.csv")
    write_text(out / "result.json", json.dumps(to_jsonable({
        "experiment": exp.name, "mode": res.mode, "wall_s": res.wall_s, "source": source_revision(), "calibration": res.calibration,
        "targets": res.targets, "table": res.table, "sensitivity": res.sensitivity, "consistency": res.consistency,
        "primary_configs": {ds: cfg.resolved() for ds, cfg in exp.datasets.items()},
    }), indent=1))
    files["result_json"] = str(out / "result.json")
    if plots:
        from dcpsim.report.blog import plot_all

        figs = plot_all(exp, res.table, res.sensitivity, out)
        files.update({k: os.fspath(v) for k, v in figs.items()})
    return files
