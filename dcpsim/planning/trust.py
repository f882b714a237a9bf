"""How far a plan's figures can be trusted: the prediction band and the published-MFU bound of every row.

:func:`annotate` adds to a plan's rows (``CapacityPlan.rows``), per GPU type x size x policy:

* ``profile_label`` -- which profile, calibrated on what, or uncalibrated (an optimistic upper bound);
* the **prediction band** (:mod:`dcpsim.published.bands`: split conformal on the out-of-sample log errors of
  the nearest validated runs, same GPU and precision, similar model size and layout): ``band_level``,
  ``band_runs`` (how many runs it rests on), ``band_basis`` or ``band_reason`` (why there is none),
  ``band_caveat`` (where the query is outside the regime of those runs: MLP type, recompute), and
  ``<figure>_band_lo`` / ``_band_hi`` for ``tokens_per_s``, ``tflops_per_gpu``, ``gpu_hours``,
  ``effective_days`` and ``cost``. The band covers the time model's steady-state throughput error only;
  goodput under failures is the plan's own simulation (its spread is ``goodput_std``), not in the band.
* the **sanity bound**: ``best_published_mfu`` (the best measured utilization of a published run on that GPU
  and precision, with ``best_published_mfu_source``; hardware FLOPs, recomputed forwards counted, over the BF16
  peak, so a run without recompute is not held to a bound set by one with it) against the row's own
  ``hfu_predicted``, and ``above_published_mfu``; every row above it gets a warning that names the figure and
  its source. A GPU with no published run is held to the best on any GPU at that precision.
"""

from __future__ import annotations

import math
from typing import Any

BAND_FIGURES = {"tokens_per_s": "throughput", "tflops_per_gpu": "throughput", "gpu_hours": "duration",
                "effective_days": "duration", "cost": "duration"}


def annotate(df, model: Any, *, level: float | None = None) -> list[str]:
    """Add the band, profile and MFU-bound columns to ``df`` in place; return the MFU warnings."""
    from dcpsim.hardware import get_profile
    from dcpsim.hardware.defaults import is_calibrated, profile_label
    from dcpsim.published import bands
    from dcpsim.published.bands import base_gpu

    level = bands.LEVEL if level is None else level
    try:
        table = bands.load()
    except Exception as exc:  # noqa: BLE001 - the plan still prints, saying why it has no band
        table, why = None, f"no residual file ({exc})"
    from dcpsim.model import get_model

    spec = get_model(model)
    params = float(spec.n_params)
    cols: dict[str, list[Any]] = {k: [] for k in ("profile_label", "band_level", "band_runs", "band_basis",
                                                   "band_reason", "band_caveat", "best_published_mfu", "best_published_mfu_source",
                                                   "above_published_mfu", "mfu_predicted", "hfu_predicted")}
    for f in BAND_FIGURES:
        cols[f + "_band_lo"], cols[f + "_band_hi"] = [], []
    warnings: list[str] = []
    labels: dict[str, str] = {}
    for r in df.to_dict("records"):
        gpu = str(r["gpu"])
        if gpu not in labels:
            labels[gpu] = profile_label(gpu)
        cols["profile_label"].append(labels[gpu])
        prec = str(r.get("precision") or "bf16")
        ok = r.get("status") == "ok"
        if table is not None and ok:
            q = bands.BandQuery(params, pp=int(r.get("pp") or 1), cp=int(r.get("cp") or 1), gated_mlp=bool(spec.gated_mlp),
                                recompute=str(r.get("recompute") or "none"))
            b = table.band(gpu, prec, q, level=level)
        else:
            b = bands.Band(level=level, reason=why if table is None else "no prediction")
        cols["band_level"].append(level)
        cols["band_runs"].append(b.n if b.ok else 0)
        cols["band_basis"].append(b.basis if b.ok else "")
        cols["band_caveat"].append(b.caveat if b.ok else "")
        cols["band_reason"].append("" if b.ok else b.reason)
        for f, kind in BAND_FIGURES.items():
            v = r.get(f)
            v = float(v) if isinstance(v, (int, float)) and v is not None else math.nan
            lo, hi = (b.throughput(v) if kind == "throughput" else b.duration(v)) if math.isfinite(v) else (math.nan,) * 2
            cols[f + "_band_lo"].append(lo)
            cols[f + "_band_hi"].append(hi)
        best = table.best_mfu(gpu, prec) if table is not None else None
        tf = r.get("tflops_per_gpu")
        mfu = (float(tf) * 1e12 / get_profile(gpu).peak_bf16_flops
               if ok and isinstance(tf, (int, float)) and math.isfinite(float(tf)) else math.nan)
        hfu = bands.hardware_utilization(mfu, r.get("recompute"))
        cols["mfu_predicted"].append(mfu)
        cols["best_published_mfu"].append(best["mfu"] if best else math.nan)
        cols["best_published_mfu_source"].append(f"row {best['row']} ({best['model']}): {best['source']}" if best
                                                 else "")
        cols["hfu_predicted"].append(hfu)
        above = bool(best and math.isfinite(hfu) and hfu > best["mfu"])
        cols["above_published_mfu"].append(above)
        if above:
            where = (f"published {best['gpu']} {prec.upper()} run" if best["same_gpu"] else
                     f"published {prec.upper()} run on any GPU (none on {base_gpu(gpu)}; best on {best['gpu']})")
            warnings.append(
                f"warning: {int(r['gpus'])} x {gpu} {r.get('policy', '')} predicts {100 * hfu:.1f}% of the BF16 peak "
                f"(hardware FLOPs, recompute counted), above the best {where}: {100 * best['mfu']:.1f}% (published "
                f"suite row {best['row']}, {best['model']}, measured tokens/s x dcpsim's FLOPs per token; source: "
                f"{best['source']}). Treat this figure as optimistic.")
    for k, v in cols.items():
        df[k] = v
    ok = df["status"] == "ok"
    cal = sorted({g for g in df.loc[ok, "gpu"] if is_calibrated(str(g))})
    uncal = sorted({g for g in df.loc[ok, "gpu"] if not is_calibrated(str(g))})
    if cal and uncal:
        warnings.append(f"warning: this plan compares calibrated profiles ({', '.join(cal)}) with uncalibrated ones "
                        f"({', '.join(uncal)}: datasheet figures, an optimistic upper bound); the uncalibrated GPU "
                        "types will look faster and cheaper than they are.")
    return warnings


def band_text(r: dict[str, Any], figure: str, fmt: str = "{:,.0f}") -> str:
    """``"165,000-205,000"`` for a row's figure, or ``"no band"``."""
    lo, hi = r.get(figure + "_band_lo"), r.get(figure + "_band_hi")
    if isinstance(lo, float) and isinstance(hi, float) and math.isfinite(lo) and math.isfinite(hi):
        return f"{fmt.format(lo)}-{fmt.format(hi)}"
    return "no band"


def band_sentence(r: dict[str, Any]) -> str:
    """One sentence: the GPU-hours with their band and what it rests on (or why there is none)."""
    gh = r.get("gpu_hours")
    if not isinstance(gh, float) or not math.isfinite(gh):
        return ""
    if r.get("band_basis"):
        return (f"{gh:,.0f} GPU-hours, {r['band_level']:.0%} interval {band_text(r, 'gpu_hours')}, "
                f"from {r['band_basis']}" + (f"; {r['band_caveat']}" if r.get("band_caveat") else ""))
    return f"{gh:,.0f} GPU-hours; no {r['band_level']:.0%} band: {r.get('band_reason', '')}"


def run_trust(cfg, summary: dict[str, Any], *, level: float | None = None) -> dict[str, Any]:
    """The band and the published-utilization bound of one simulated run (``dcpsim simulate``): tokens/s and
    TFLOPS/GPU intervals, what they rest on (or why there is none), and a warning above the best published run."""
    from dcpsim.hardware import get_profile
    from dcpsim.model import get_model
    from dcpsim.published import bands
    from dcpsim.published.bands import base_gpu

    level = bands.LEVEL if level is None else level
    spec = get_model(cfg.model.name)
    try:
        table = bands.load()
    except Exception as exc:  # noqa: BLE001 - the run still prints, saying why it has no band
        return {"band": None, "band_text": f"no band: no residual file ({exc})", "warning": ""}
    p = cfg.parallel
    q = bands.BandQuery(float(spec.n_params), pp=int(p.pp), cp=int(p.cp), gated_mlp=bool(spec.gated_mlp),
                        recompute=str(p.recompute))
    b = table.band(cfg.hardware.gpu, p.precision, q, level=level)
    caveat = b.caveat
    if b.ok and cfg.workload.name != "fixed":
        caveat = "; ".join(x for x in (caveat, "the validated runs are fixed-length windows, this workload has "
                                               "variable lengths") if x)
    tps, tf = float(summary.get("tokens_per_s", math.nan)), float(summary.get("tflops_per_gpu", math.nan))
    out: dict[str, Any] = {"band_level": level, "band_runs": b.n if b.ok else 0, "band_basis": b.basis,
                           "band_reason": b.reason, "band_caveat": caveat if b.ok else "",
                           "tokens_per_s_band": list(b.throughput(tps)), "tflops_per_gpu_band": list(b.throughput(tf))}
    if b.ok:
        out["band_text"] = (f"{level:.0%} band: {b.throughput(tps)[0]:,.0f}-{b.throughput(tps)[1]:,.0f} tokens/s, "
                            f"{b.throughput(tf)[0]:.0f}-{b.throughput(tf)[1]:.0f} TFLOPS/GPU, from {b.basis}"
                            + (f"; {caveat}" if caveat else ""))
    else:
        out["band_text"] = f"no {level:.0%} band: {b.reason}"
    best = table.best_mfu(cfg.hardware.gpu, p.precision)
    hfu = bands.hardware_utilization(tf * 1e12 / get_profile(cfg.hardware.gpu).peak_bf16_flops, p.recompute)
    out["warning"] = ""
    if best and math.isfinite(hfu) and hfu > best["mfu"]:
        where = (f"published {best['gpu']} {p.precision.upper()} run" if best["same_gpu"] else f"published "
                 f"{p.precision.upper()} run on any GPU (none on {base_gpu(cfg.hardware.gpu)}; best on {best['gpu']})")
        out["warning"] = (f"warning: {100 * hfu:.1f}% of the BF16 peak (hardware FLOPs, recompute counted) is above the "
                          f"best {where}: {100 * best['mfu']:.1f}% (published "
                          f"suite row {best['row']}, {best['model']}; source: {best['source']}). Treat it as optimistic.")
    return out
