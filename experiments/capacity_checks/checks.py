"""Capacity-planning checks against published runs: Llama 2 GPU-hours and published Megatron/NeMo layouts.

    PYTHONPATH=. python experiments/capacity_checks/checks.py llama2      [--sizes 1024,2048] [-j 2]
    PYTHONPATH=. python experiments/capacity_checks/checks.py llama2-default [-j 2]   # `dcpsim plan` at its defaults
    PYTHONPATH=. python experiments/capacity_checks/checks.py published   [--rows 1-10] [-j 2]
    PYTHONPATH=. python experiments/capacity_checks/checks.py readme      # the figures into README.md

Writes ``results/llama2.{json,md}`` and ``results/published_layouts.{csv,md}`` beside this file.

**Llama 2** (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat
Models", Table 2, "Time (GPU hours)"): 7B 184,320, 13B 368,640, 70B 1,720,320
GPU-hours on A100-80GB, 2T tokens, 4,096-token context, global batch 4M tokens.
These are REFERENCE values the plan is compared to; nothing here reads them
into the plan. dcpsim's plan: ``plan_capacity`` for the model on A100-80GB
(profiles ``a100-sxm-80gb`` and ``a100-sxm-80gb-calibrated``, whose timing knobs
were fitted on the suite's A100 rows, not on Llama 2), 2·10^12 tokens, fixed 4,096-token windows,
global batch 4M tokens (1,024 sequences), static packing, the layout searched
by dcpsim, with the default failure model (per-GPU MTBF from the Llama 3
report, 60 s checkpoints, 600 s restarts). Assumed cluster sizes (the paper
does not give them): 1,024 and 2,048 GPUs (Llama 1's 65B ran on 2,048
A100-80GB); the size dcpsim picks is the one with the fewest GPU-hours. The
published runs also lost time to evaluation, data and restarts we do not
know; the ratio dcpsim / published is reported, not tuned.

**Published layouts** (``experiments/published_throughput``, every H100 and
A100 row): the row's model, GPU type, GPU count, global batch, micro-batch
and sequence length, precision and recompute become a run configuration
(:func:`dcpsim.published.row_config`); the published layout is simulated as
is, and dcpsim's layout search (same model, GPUs, batch, precision; static
packing) picks its own. Reported per row: both simulated tokens/s per GPU,
whether dcpsim's pick is at least as fast in simulation, whether it is the
published layout (TP, PP, CP, VP and micro-batch size equal), and why the
published layout was not picked when the search pruned it (memory model,
batch rule). Rows the simulator cannot express are listed with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# REFERENCE values (compared to, never used as inputs): Llama 2 paper, Table 2, GPU-hours
LLAMA2_GPU_HOURS = {"llama2-7b": 184_320, "llama-13b": 368_640, "llama-70b": 1_720_320}
LLAMA2_TOKENS = 2e12
LLAMA2_SEQ = 4096
LLAMA2_GBS_TOKENS = 4 * 2**20
LLAMA2_GPU = "a100-sxm-80gb"
# the public A100 profile, and its copy with the [timing] knobs fitted on the published suite's A100 fit rows
# (Narayanan et al. 2021; profiles/a100-sxm-80gb-calibrated/CALIBRATION.md): Llama 2 is not in that fit
LLAMA2_PROFILES = (LLAMA2_GPU, "a100-sxm-80gb-calibrated")


# ---------------------------------------------------------------- Llama 2
def llama2_check(model: str, sizes=(1024, 2048), jobs: int | None = 2, space=None,
                 gpu: str = LLAMA2_GPU) -> dict[str, Any]:
    """dcpsim's plan for one Llama 2 model and its GPU-hours against the paper's (see the module docstring)."""
    from dcpsim.planning import CapacityRequest, plan_capacity

    plan = plan_capacity(CapacityRequest(model, None, LLAMA2_TOKENS, {gpu: 1.0}, list(sizes), seq_len=LLAMA2_SEQ,
                                         gbs_tokens=LLAMA2_GBS_TOKENS, policies=["packing"], space=space), jobs=jobs)
    df = plan.rows
    ok = df[df["status"] == "ok"]
    ref = LLAMA2_GPU_HOURS[model]
    per_size = []
    for _, r in df.iterrows():
        d = {"gpus": int(r["gpus"]), "status": r["status"], "reason": r.get("reason", "")}
        if r["status"] == "ok":
            d |= {"layout": r["layout"], "dp": int(r["dp"]), "tflops_per_gpu": float(r["tflops_per_gpu"]),
                  "mfu": float(r["mfu"]), "tokens_per_s_per_gpu": float(r["tokens_per_s"]) / float(r["gpus"]),
                  "goodput": float(r["goodput"]), "days": float(r["effective_days"]),
                  "gpu_hours": float(r["gpu_hours"]), "gpu_hours_no_failures": float(r["time_to_train_h"] * r["gpus"]),
                  "ratio_to_published": float(r["gpu_hours"]) / ref}
        per_size.append(d)
    pick = ok.sort_values("gpu_hours").iloc[0] if len(ok) else None
    return {"model": model, "profile": gpu, "published_gpu_hours": ref, "sizes": per_size,
            "picked_gpus": None if pick is None else int(pick["gpus"]),
            "picked_layout": None if pick is None else pick["layout"],
            "gpu_hours": None if pick is None else float(pick["gpu_hours"]),
            "ratio": None if pick is None else float(pick["gpu_hours"]) / ref,
            "assumptions": plan.request}


def run_llama2(sizes, jobs) -> list[dict[str, Any]]:
    meta = provenance()  # the code the results come from: taken before the run
    out = [llama2_check(m, sizes, jobs, gpu=g) for g in LLAMA2_PROFILES for m in LLAMA2_GPU_HOURS]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "llama2.json").write_text(json.dumps({"meta": meta, "results": out}, indent=2, default=str))
    lines = ["# Llama 2 GPU-hours: dcpsim's plan vs the paper", "", f"dcpsim commit {meta['commit']}; "
             f"A100-80GB, 2T tokens, 4,096 context, 4M-token batch, failures included (see checks.py).", "",
             "Implied by the paper: tokens/s per GPU = 2e12 / (GPU-hours x 3600), failures and all.", "",
             "| profile | model | published GPU-h | dcpsim GPU-h | ratio | GPUs | layout | TFLOPS/GPU | MFU | goodput "
             "| tok/s/GPU dcpsim | tok/s/GPU paper |",
             "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in out:
        for s in r["sizes"]:
            if s["status"] != "ok":
                lines.append(f"| {r['profile']} | {r['model']} | {r['published_gpu_hours']:,} | - | - | {s['gpus']} | "
                             f"{s['reason'][:60]} | | | | | |")
                continue
            mark = " (picked)" if s["gpus"] == r["picked_gpus"] else ""
            lines.append(f"| {r['profile']} | {r['model']} | {r['published_gpu_hours']:,} | {s['gpu_hours']:,.0f} | "
                         f"{s['ratio_to_published']:.2f} | {s['gpus']}{mark} | {s['layout']} | "
                         f"{s['tflops_per_gpu']:.0f} | {s['mfu']:.1%} | {s['goodput']:.1%} | "
                         f"{s['tokens_per_s_per_gpu']:,.0f} | {LLAMA2_TOKENS / (r['published_gpu_hours'] * 3600):,.0f} |")
    (RESULTS / "llama2.md").write_text("\n".join(lines) + "\n")
    return out


def llama2_default(jobs: int | None = 2) -> list[dict[str, Any]]:
    """``dcpsim plan`` as a user runs it, only the request given (model, A100-80GB, 2T tokens, 4,096 context,
    4M-token batch); everything else at the command's defaults (sizes, policies, search, failures, and the bare GPU
    name read as its calibrated profile). The plan's chosen row (its recommendation: the cheapest) and its 80%
    band are compared to the paper's GPU-hours. Writes ``results/llama2_default.{json,md}`` and each plan's
    one-page report (``--out``) into ``results/report-<model>/``."""
    import contextlib
    import io

    from dcpsim.cli import main as cli

    meta = provenance()
    out = []
    for model, ref in LLAMA2_GPU_HOURS.items():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli(["plan", "--model", model, "--gpus", f"{LLAMA2_GPU}:1", "--tokens", "2T", "--seq-len",
                      str(LLAMA2_SEQ), "--gbs-tokens", "4Mi", "--json", "-j", str(jobs or 1),
                      "--out", str(RESULTS / f"report-{model}")])
        if rc != 0:
            raise SystemExit(f"dcpsim plan failed for {model} (exit {rc})")
        plan = json.loads(buf.getvalue())
        ok = [r for r in plan["rows"] if r["status"] == "ok"]
        pick = sorted([r for r in ok if r.get("trainable", True)], key=lambda r: (r["cost"], r["effective_time_h"]))[0]
        lo, hi = pick.get("gpu_hours_band_lo"), pick.get("gpu_hours_band_hi")
        out.append({"model": model, "published_gpu_hours": ref, "profile": pick["gpu"],
                    "profile_label": pick.get("profile_label"), "gpus": int(pick["gpus"]), "policy": pick["policy"],
                    "layout": pick["layout"], "gpu_hours": pick["gpu_hours"], "ratio": pick["gpu_hours"] / ref,
                    "band_lo": lo, "band_hi": hi, "band_runs": pick.get("band_runs"),
                    "band_basis": pick.get("band_basis") or pick.get("band_reason"),
                    "band_caveat": pick.get("band_caveat", ""),
                    "inside_band": lo is not None and hi is not None and lo <= ref <= hi,
                    "within_15pct": abs(pick["gpu_hours"] / ref - 1) <= 0.15,
                    "mfu": pick.get("mfu_predicted"), "best_published_mfu": pick.get("best_published_mfu"),
                    "goodput": pick["goodput"], "days": pick["effective_days"], "warnings": plan["warnings"],
                    "recommendation": plan["recommendation"], "rows": [
                        {k: r.get(k) for k in ("gpus", "policy", "layout", "gpu_hours", "gpu_hours_band_lo",
                                               "gpu_hours_band_hi", "effective_days", "status")} for r in plan["rows"]]})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "llama2_default.json").write_text(json.dumps({"meta": meta, "results": out}, indent=2, default=str))
    lines = ["# Llama 2 GPU-hours: default `dcpsim plan` vs the paper", "",
             f"dcpsim commit {meta['commit']}; `dcpsim plan --model M --gpus a100-sxm-80gb:1 --tokens 2T --seq-len 4096 "
             "--gbs-tokens 4Mi` (every other input at its default; the bare GPU name reads as "
             f"`{out[0]['profile']}`). The paper's GPU-hours are references, never inputs.", "",
             "| model | published GPU-h | dcpsim GPU-h | ratio | 80% band | inside | GPUs | policy | layout | MFU | "
             "goodput | band rests on |", "|---|---:|---:|---:|---|---|---:|---|---|---:|---:|---|"]
    caveats = {r["band_caveat"] for r in out if r.get("band_caveat")}
    for r in out:
        band = f"{r['band_lo']:,.0f}-{r['band_hi']:,.0f}" if r["band_lo"] is not None else "none"
        lines.append(f"| {r['model']} | {r['published_gpu_hours']:,} | {r['gpu_hours']:,.0f} | {r['ratio']:.2f} | "
                     f"{band} | {'yes' if r['inside_band'] else '**no**'} | {r['gpus']} | {r['policy']} | "
                     f"{r['layout']} | {100 * r['mfu']:.1f}% | {100 * r['goodput']:.1f}% | {r['band_basis']} |")
    lines += [""] + [f"Band caveat printed with the plan: {c}." for c in sorted(caveats)]
    lines += ["", "One-page reports (`--out`): " + ", ".join(f"[{r['model']}](report-{r['model']}/plan.md)" for r in out)]
    (RESULTS / "llama2_default.md").write_text("\n".join(lines) + "\n")
    return out


# ---------------------------------------------------------------- published layouts
def _same_layout(a: dict[str, Any], b: dict[str, Any], keys=("tp", "pp", "cp", "vp", "mbs")) -> bool:
    return all(int(a.get(k) or 1) == int(b.get(k) or 1) for k in keys)


def _published_candidate(cfg):
    from dcpsim.planning import Candidate
    from dcpsim.planning.space import OVERLAP_FLAGS, optional_field

    p = cfg.parallel
    flags = tuple((n, bool(getattr(getattr(cfg, optional_field(n).split(".")[0]), n))) for n in OVERLAP_FLAGS
                  if optional_field(n))
    prec = getattr(p, "precision", None)
    return Candidate(tp=p.tp, pp=p.pp, cp=p.cp, vp=int(getattr(p, "vp", 1) or 1), mbs=p.mbs,
                     tokens_per_rank=cfg.max_tokens_per_rank, recompute=p.recompute, precision=prec, flags=flags)


def published_row_check(row_id: int, simulate: int | None = None) -> dict[str, Any]:
    """Search the layout of one published row and compare with the published layout (both simulated)."""
    from dcpsim.errors import DcpsimError
    from dcpsim.planning import SearchSpace, make_data_spec, search_layouts
    from dcpsim.planning.search import DEFAULT_SIMULATE, search_updates
    from dcpsim.planning.space import check_candidate
    from dcpsim.published import load_suite, row_config
    from dcpsim.run.single import run_simulation

    row = load_suite().select([row_id])[0]
    rc = row_config(row)
    pub = {"tp": row.intval("tp"), "pp": row.intval("pp"), "cp": row.intval("cp", 1), "vp": row.intval("vp", 1) or 1,
           "mbs": row.intval("mbs", 1)}
    out: dict[str, Any] = {"row": row.id, "model": row.model, "gpu": row.gpu_name, "precision": row.precision,
                           "gpus": row.gpus, "gbs": int(row.raw["gbs"]), "seq_len": int(row.raw["seq_len"]),
                           "published_layout": row.layout + f" mbs{pub['mbs']}", "measured": row.measured}
    if rc.config is None:
        return out | {"status": "unexpressible", "reason": rc.reason}
    cfg = rc.config
    t0 = time.perf_counter()
    try:
        s = run_simulation(cfg, allow_infeasible=True).summary  # the published layout ran: a memory-model gap is not a refusal
    except DcpsimError as exc:
        return out | {"status": "unexpressible", "reason": f"simulator refused the published layout: {exc}"}
    out["published_sim"] = float(s["tokens_per_s"]) / row.gpus
    data = make_data_spec(seq_len=cfg.workload.seq_len, gbs=cfg.workload.gbs)
    prec = getattr(cfg.parallel, "precision", None)
    space = SearchSpace(precision=[prec] if prec is not None else None)
    common = search_updates(data, "packing", cfg.workload.gbs)
    why = check_candidate(cfg, _published_candidate(cfg), row.gpus, data, cfg.workload.gbs, common)
    out["published_pruned"] = why.reason
    res = search_layouts(cfg, row.gpus, data, policy="packing", space=space, simulate=simulate or DEFAULT_SIMULATE)
    best = res.best
    out["search_s"] = time.perf_counter() - t0
    if best is None or best["status"] != "ok":
        return out | {"status": "no layout", "reason": res.reason}
    out |= {"status": "ok", "picked_layout": best["layout"], "picked_sim": best["tokens_per_s"] / row.gpus,
            "speedup": best["tokens_per_s"] / row.gpus / out["published_sim"],
            "found_published": _same_layout(best, pub),
            "found_published_model_parallel": _same_layout(best, pub, ("tp", "pp", "cp", "vp")),
            "published_in_top": any(_same_layout(r, pub) for r in res.rows if r["status"] == "ok"),
            "counts": res.counts}
    out["at_least_as_fast"] = out["picked_sim"] >= out["published_sim"] * (1 - 1e-9)
    return out


def run_published(rows: list[int] | None, jobs: int) -> list[dict[str, Any]]:
    from concurrent.futures import ProcessPoolExecutor

    from dcpsim.published import load_suite

    meta = provenance()  # the code the results come from: taken before the run
    suite = load_suite()
    ids = [r.id for r in suite.rows if r.gpu_name.startswith(("H100", "A100"))]
    if rows:
        ids = [i for i in ids if i in set(rows)]
    out: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        for k, r in enumerate(ex.map(published_row_check, ids), start=1):
            out.append(r)
            sys.stderr.write(f"\rrows [{k}/{len(ids)}]")
    sys.stderr.write("\n")
    write_published(out, meta)
    return out


def summarize(out: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in out if r["status"] == "ok"]
    return {"rows": len(out), "compared": len(ok), "unexpressible": sum(r["status"] == "unexpressible" for r in out),
            "no_layout": sum(r["status"] == "no layout" for r in out),
            "at_least_as_fast": sum(bool(r.get("at_least_as_fast")) for r in ok),
            "published_fits_dcpsim": sum(not r.get("published_pruned") for r in ok),
            "at_least_as_fast_where_published_fits": sum(bool(r.get("at_least_as_fast")) for r in ok
                                                         if not r.get("published_pruned")),
            "found_published": sum(bool(r.get("found_published")) for r in ok),
            "found_published_tp_pp_cp_vp": sum(bool(r.get("found_published_model_parallel")) for r in ok),
            "published_in_simulated_top": sum(bool(r.get("published_in_top")) for r in ok),
            "published_pruned_by_dcpsim": sum(bool(r.get("published_pruned")) for r in ok),
            "median_speedup": float(sorted(r["speedup"] for r in ok)[len(ok) // 2]) if ok else math.nan}


def write_published(out: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    import pandas as pd

    RESULTS.mkdir(exist_ok=True)
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "counts"} for r in out])
    df.to_csv(RESULTS / "published_layouts.csv", index=False)
    s = summarize(out)
    lines = ["# Published layouts: dcpsim's search vs the published layout (both simulated)", "",
             f"dcpsim commit {meta['commit']}; every H100/A100 row of experiments/published_throughput.", "",
             f"- rows: {s['rows']}; compared: {s['compared']}; unexpressible: {s['unexpressible']}; "
             f"no layout found: {s['no_layout']}",
             f"- dcpsim's pick at least as fast in simulation as the published layout: {s['at_least_as_fast']}"
             f"/{s['compared']}; where the published layout fits dcpsim's memory model and batch rules: "
             f"{s['at_least_as_fast_where_published_fits']}/{s['published_fits_dcpsim']}",
             f"- dcpsim picks exactly the published layout (TP, PP, CP, VP, mbs): {s['found_published']}/{s['compared']}"
             f"; same TP, PP, CP and VP: {s['found_published_tp_pp_cp_vp']}/{s['compared']}"
             f"; published layout among the simulated top layouts: {s['published_in_simulated_top']}/{s['compared']}",
             f"- published layout pruned by dcpsim (its memory model or batch rule): {s['published_pruned_by_dcpsim']}",
             f"- median speedup of dcpsim's pick over the published layout (simulated): {s['median_speedup']:.3f}", "",
             "| row | model | GPUs | prec | published | sim tok/s/GPU | dcpsim pick | sim tok/s/GPU | x | same | note |",
             "|---:|---|---:|---|---|---:|---|---:|---:|---|---|"]
    for r in out:
        if r["status"] != "ok":
            lines.append(f"| {r['row']} | {r['model']} | {r['gpus']} | {r['precision']} | {r['published_layout']} | | "
                         f"| | | | {r['status']}: {str(r.get('reason', ''))[:80]} |")
            continue
        lines.append(f"| {r['row']} | {r['model']} | {r['gpus']} | {r['precision']} | {r['published_layout']} | "
                     f"{r['published_sim']:,.0f} | {r['picked_layout']} | {r['picked_sim']:,.0f} | "
                     f"{r['speedup']:.3f} | {'yes' if r['found_published'] else 'no'} | "
                     f"{str(r.get('published_pruned') or '')[:80]} |")
    (RESULTS / "published_layouts.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "published_layouts_summary.json").write_text(json.dumps({"meta": meta, "summary": s}, indent=2))


def update_readme() -> None:
    """Write the latest results' figures into README.md (the two "Result" paragraphs)."""
    import re

    R = RESULTS
    ll = json.loads((R / "llama2.json").read_text())
    commit = ll["meta"]["commit"]
    paras = []
    for prof in dict.fromkeys(r.get("profile", LLAMA2_GPU) for r in ll["results"]):
        rs = [r for r in ll["results"] if r.get("profile", LLAMA2_GPU) == prof]
        parts = [f"{r['model']} {r['gpu_hours']:,.0f} GPU-hours on {r['picked_gpus']} GPUs ({r['picked_layout']}), "
                 f"ratio {r['ratio']:.2f}" for r in rs]
        within = all(abs(r["ratio"] - 1) <= 0.25 for r in rs)
        paras.append(f"profile `{prof}`: " + "; ".join(parts) + ". Target ±25%: " + (
            "met." if within else "**not met**."))
    llama = f"(dcpsim {commit}) " + " — ".join(paras)
    s = json.loads((R / "published_layouts_summary.json").read_text())
    m = s["summary"]
    pub = (f"{m['compared']} of {m['rows']} rows compared (dcpsim {s['meta']['commit']}). dcpsim's pick is at least as fast in "
           f"simulation as the published layout in {m['at_least_as_fast']}/{m['compared']} rows, and in "
           f"{m['at_least_as_fast_where_published_fits']}/{m['published_fits_dcpsim']} of the rows whose published layout "
           f"fits dcpsim's memory model and batch rules ({m['published_pruned_by_dcpsim']} published layouts do not). It picks "
           f"exactly the published layout (TP, PP, CP, VP, micro-batch) in {m['found_published']}/{m['compared']} rows, the "
           f"same TP, PP, CP and VP in {m['found_published_tp_pp_cp_vp']}/{m['compared']}, and the published layout is among "
           f"its simulated top layouts in {m['published_in_simulated_top']}/{m['compared']}. Median simulated speedup of "
           f"its pick over the published layout: {m['median_speedup']:.3f}.")
    p = HERE / "README.md"
    t = p.read_text()
    t = re.sub(r"Result \(see `results/llama2.md` for the table with both sizes\): .*?\n\n",
               "Result (see `results/llama2.md` for the table with both sizes): " + llama + "\n\n", t, flags=re.S)
    t = re.sub(r"Result \(`results/published_layouts.md`, one line per row\): .*?\n\n",
               "Result (`results/published_layouts.md`, one line per row): " + pub + "\n\n", t, flags=re.S)
    p.write_text(t)


def provenance() -> dict[str, Any]:
    import subprocess

    try:
        commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    return {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    from dcpsim.published.suite import parse_ranges

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["llama2", "llama2-default", "published", "readme"])
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--rows", default=None, help="published row ids, e.g. 1-10,44")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    if a.what == "readme":
        update_readme()
        return 0
    if a.what == "llama2-default":
        for r in llama2_default(a.jobs):
            print(f"{r['model']}: {r['gpu_hours']:,.0f} GPU-hours (80% band {r['band_lo']}-{r['band_hi']}) vs published "
                  f"{r['published_gpu_hours']:,} -> ratio {r['ratio']:.2f}, inside band: {r['inside_band']} "
                  f"({r['gpus']} GPUs, {r['policy']}, {r['layout']})")
        return 0
    if a.what == "llama2":
        for r in run_llama2([int(x) for x in a.sizes.split(",")], a.jobs):
            print(f"{r['model']}: {r['gpu_hours']:,.0f} GPU-hours vs published {r['published_gpu_hours']:,} "
                  f"-> ratio {r['ratio']:.2f} ({r['picked_gpus']} GPUs, {r['picked_layout']})")
    else:
        out = run_published(parse_ranges(a.rows) if a.rows else None, a.jobs)
        print(json.dumps(summarize(out), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
