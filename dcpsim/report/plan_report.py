"""``dcpsim plan --out DIR``: a one-page report a person can read (``plan.md`` + ``plan.png``).

The page holds: the request; the chosen configuration (the plan's recommendation: the cheapest that meets the
deadline, else the cheapest) with every figure's 80% band and what the band rests on; the profiles used
(calibrated, or uncalibrated = an optimistic upper bound); warnings (published-MFU bound, batch); where the
chosen layout's iteration time goes; goodput under failures; and every row. The figure has three panels:
cost against days per GPU type with the band of each point drawn as error bars and each GPU type's Pareto
front, the chosen layout's time per iteration by part, and the goodput of every row under failures.
Written through :mod:`dcpsim.outdir` (only into ``DIR``, atomically, only over files dcpsim wrote).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dcpsim.sim.metrics import BREAKDOWN

REPORT_MD = "plan.md"
REPORT_PNG = "plan.png"
PARTS = {"compute_s": "compute", "cp_comm_s": "CP communication (exposed)", "bubble_s": "pipeline bubble",
         "imbalance_s": "imbalance (waiting for other ranks)", "grad_sync_s": "gradient sync (exposed)",
         "planning_stall_s": "planning stall"}


def compute_parts(r) -> list[tuple[str, float]]:
    """The compute time of the busiest stage by cost-model part (``part_*_s`` of the screen: GEMM, attention,
    TP communication, elementwise, embedding and head, optimizer), seconds per iteration."""
    out = []
    for k, v in dict(r).items():
        if str(k).startswith("part_") and str(k).endswith("_s") and isinstance(v, float) and math.isfinite(v) and v > 0:
            out.append((str(k).removeprefix("part_").removesuffix("_s").replace("_", " "), v))
    return out


def _failure_text(f: Any) -> str:
    if not isinstance(f, dict):
        return str(f)
    iv = f.get("checkpoint_interval_s")
    return (f"GPU MTBF {_f(f.get('gpu_mtbf_h'))} h, checkpoint {_f(f.get('checkpoint_s'), '{:g}')} s, restart "
            f"{_f(f.get('restart_s'), '{:g}')} s, checkpoints "
            + ("at Young's interval" if iv == "young" else f"every {iv} s"))


def chosen_row(df, deadline_days: float | None = None):
    """The recommended row (same rule as :func:`dcpsim.planning.capacity.recommend`), or None."""
    ok = df[(df["status"] == "ok") & (df["trainable"] if "trainable" in df else True)]
    if not len(ok):
        return None
    if deadline_days is not None:
        meet = ok[ok["effective_days"] <= deadline_days]
        if len(meet):
            ok = meet
        else:
            return ok.sort_values(["effective_time_h", "cost"]).iloc[0]
    return ok.sort_values(["cost", "effective_time_h"]).iloc[0]


def young_daly_text(r: Any) -> str:
    """``97.0%``, or why the first-order figure does not apply (``n/a (job MTBF ...)``)."""
    yd = r.get("goodput_young_daly")
    return f"{100 * yd:.1f}%" if isinstance(yd, float) and yd == yd else str(r.get("goodput_young_daly_note") or "-")


def _band_line(r: dict) -> str:
    """What the chosen row's band rests on and what it covers, or that there is none and why."""
    what = ("the time model's steady-state throughput error (split conformal on the out-of-sample log errors of the "
            "nearest validated runs; `dcpsim bands`), not the failure model")
    if not r.get("band_basis"):
        return (f"Band: **none**: {str(r.get('band_reason', '')).rstrip('.')}. The figures above carry no interval; "
                f"a band would cover only {what}.")
    return (f"Band: {r['band_level']:.0%} prediction interval from {r['band_basis']}"
            + (f"; **{r['band_caveat']}**" if r.get("band_caveat") else "") + f". It covers {what}.")


def _f(v: Any, fmt: str = "{:,.0f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and v is not None and math.isfinite(float(v)) else "-"


def _band(r, fig: str, fmt: str = "{:,.0f}") -> str:
    lo, hi = r.get(fig + "_band_lo"), r.get(fig + "_band_hi")
    if isinstance(lo, float) and isinstance(hi, float) and math.isfinite(lo) and math.isfinite(hi):
        return f"{fmt.format(lo)}-{fmt.format(hi)}"
    return "no band"


def markdown(plan, *, title: str, deadline_days: float | None = None, png_name: str = REPORT_PNG) -> str:
    """The report page as Markdown."""
    df = plan.rows
    req = plan.request
    best = chosen_row(df, deadline_days)
    lines = [f"# {title}", "",
             f"Request: {req.get('model')}, {req.get('tokens', 0):.3g} tokens, {req.get('data', '')}, global batch "
             f"{req.get('gbs_tokens', 0):,.0f} tokens; GPU types {', '.join(f'{k} at {v:g}/GPU-hour' for k, v in req.get('gpu_prices', {}).items())}; "
             f"sizes {', '.join(str(s) for s in req.get('sizes', []))}; policies {', '.join(req.get('policies', []))}"
             + (f"; deadline {deadline_days:g} days" if deadline_days is not None else "") + ".", "",
             f"**Recommendation.** {plan.recommendation}", "", f"![plan]({png_name})", ""]
    if best is not None:
        r = best.to_dict()
        lines += ["## The chosen configuration", "",
                  "| figure | predicted | 80% interval |", "|---|---:|---|",
                  f"| GPUs | {int(r['gpus'])} x {r['gpu']} | |",
                  f"| layout | {r.get('layout', '')} (DP {int(r.get('dp', 0) or 0)}), policy {r['policy']} | |",
                  f"| tokens/s (cluster) | {_f(r.get('tokens_per_s'))} | {_band(r, 'tokens_per_s')} |",
                  f"| TFLOPS/GPU | {_f(r.get('tflops_per_gpu'), '{:.0f}')} | {_band(r, 'tflops_per_gpu', '{:.0f}')} |",
                  f"| MFU | {_f(100 * r.get('mfu_predicted', math.nan), '{:.1f}')}% | best published on this GPU and "
                  f"precision: {_f(100 * r.get('best_published_mfu', math.nan), '{:.1f}')}% |",
                  f"| days (with failures) | {_f(r.get('effective_days'), '{:.1f}')} | "
                  f"{_band(r, 'effective_days', '{:.1f}')} |",
                  f"| GPU-hours | {_f(r.get('gpu_hours'))} | {_band(r, 'gpu_hours')} |",
                  f"| cost | {_f(r.get('cost'))} | {_band(r, 'cost')} |",
                  f"| peak memory per GPU | {_f(r.get('peak_memory_gib'), '{:.1f}')} GiB | |", "",
                  _band_line(r), ""]
        lines += ["### Where an iteration's time goes", "", "| part | seconds per iteration | share |",
                  "|---|---:|---:|"]
        it = float(r.get("iteration_time_s") or math.nan)
        for k in BREAKDOWN:
            v = r.get(k)
            if isinstance(v, float) and math.isfinite(v) and v > 0:
                lines.append(f"| {PARTS.get(k, k)} | {v:.3f} | {100 * v / it:.1f}% |")
        lines += [f"| **iteration** | **{_f(it, '{:.3f}')}** | |", ""]
        parts = compute_parts(r)
        if parts:
            lines += ["Compute and fixed costs of the busiest stage by part (cost model, seconds per iteration): "
                      + ", ".join(f"{n} {v:.3f}" for n, v in parts) + ".", ""]
        lines += ["### Goodput under failures", "",
                  f"Simulated long runs ({int(r.get('long_run_seeds', 0) or 0)} seeds over the planned duration): "
                  f"goodput {_f(100 * r.get('goodput', math.nan), '{:.1f}')}% "
                  f"± {_f(100 * (r.get('goodput_std') or 0.0), '{:.1f}')} (Young/Daly "
                  f"{young_daly_text(r)}), expected failures "
                  f"{_f(r.get('expected_failures'), '{:.1f}')}; failure inputs: {_failure_text(req.get('failures', ''))}.", ""]
    lines += ["## Profiles", ""] + [f"- {lab}" for lab in dict.fromkeys(df.get("profile_label", []))] + [""]
    if plan.warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in plan.warnings] + [""]
    lines += ["## Every GPU type, size and policy (best layout each)", "",
              "| GPU | GPUs | policy | layout | TFLOPS/GPU | goodput | days | days 80% | GPU-hours | GPU-hours 80% | "
              "cost | cost 80% | Pareto (GPU) | band rests on |",
              "|---|---:|---|---|---:|---:|---:|---|---:|---|---:|---|---|---|"]
    for r in df.to_dict("records"):
        if r.get("status") != "ok":
            lines.append(f"| {r['gpu']} | {int(r['gpus'])} | {r['policy']} | {r.get('status')}: "
                         f"{str(r.get('reason', ''))[:80]} | | | | | | | | | | |")
            continue
        basis = f"{int(r['band_runs'])} runs" if r.get("band_basis") else f"no band: {r.get('band_reason', '')}"
        lines.append(f"| {r['gpu']} | {int(r['gpus'])} | {r['policy']} | {r.get('layout', '')} | "
                     f"{_f(r.get('tflops_per_gpu'))} | {_f(100 * r.get('goodput', math.nan), '{:.1f}')}% | "
                     f"{_f(r.get('effective_days'), '{:.1f}')} | {_band(r, 'effective_days', '{:.1f}')} | "
                     f"{_f(r.get('gpu_hours'))} | {_band(r, 'gpu_hours')} | {_f(r.get('cost'))} | {_band(r, 'cost')} | "
                     f"{'yes' if r.get('pareto_gpu') else ''} | {basis} |")
    return "\n".join(lines) + "\n"


def figure(plan, *, title: str, deadline_days: float | None = None):
    """Cost vs days with bands and Pareto fronts; the chosen layout's time by part; goodput per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dcpsim.report.plots import PALETTE, _ordered, _plain_log_ticks

    df = plan.rows
    d = df[df["status"] == "ok"]
    best = chosen_row(df, deadline_days)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.6, 1.0, 1.0]})
    ax = axes[0]
    for gi, g in enumerate(_ordered(d["gpu"])):
        s = d[d["gpu"] == g].sort_values("effective_days")
        col = PALETTE[gi % len(PALETTE)]
        x, y = s["effective_days"].to_numpy(float), s["cost"].to_numpy(float)
        has = s["band_basis"].astype(bool).to_numpy() if "band_basis" in s else [False] * len(s)
        labels: dict[tuple[float, float], list[str]] = {}
        for i in range(len(s)):
            r = s.iloc[i]
            if has[i]:
                ax.errorbar(x[i], y[i], xerr=[[x[i] - r["effective_days_band_lo"]], [r["effective_days_band_hi"] - x[i]]],
                            yerr=[[y[i] - r["cost_band_lo"]], [r["cost_band_hi"] - y[i]]], color=col, alpha=0.45,
                            capsize=2, linewidth=1)
            labels.setdefault((round(float(x[i]), 6), round(float(y[i]), 2)), []).append(
                f"{int(r['gpus'])} {r['policy']}")
        for (xi, yi), names in labels.items():  # one label per point (policies with the same figures share it)
            ax.annotate(", ".join(dict.fromkeys(names)), (xi, yi), fontsize=6, xytext=(3, 3), textcoords="offset points")
        from dcpsim.hardware.defaults import is_calibrated

        lab = g + ("" if is_calibrated(g) else " (UNCALIBRATED: optimistic)") + ("" if any(has) else ", no band")
        ax.scatter(x, y, color=col, s=22, zorder=3, label=lab)
        f = s[s["pareto_gpu"].astype(bool)] if "pareto_gpu" in s else s.iloc[0:0]
        if len(f):
            ax.plot(f["effective_days"], f["cost"], color=col, linewidth=2.0, alpha=0.7, label=f"{g} Pareto front")
    if best is not None:
        ax.scatter([best["effective_days"]], [best["cost"]], marker="*", s=260, facecolors="none", edgecolors="black",
                   zorder=4, label="chosen")
    if deadline_days is not None:
        ax.axvline(deadline_days, color="#D55E00", linestyle="--", linewidth=1.2, label="deadline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax)
    ax.set_xlabel("days to train (with failures)")
    ax.set_ylabel("cost")
    ax.set_title("cost vs days (bars: 80% band)", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, which="both", alpha=0.2)
    ax = axes[1]
    if best is not None:
        parts = [(PARTS.get(k, k), float(best.get(k, math.nan))) for k in BREAKDOWN]
        parts = [(n, v) for n, v in parts if math.isfinite(v) and v > 0]
        sub = [(f"  {n} (cost model)", v) for n, v in compute_parts(best)]
        names = [n for n, _ in parts + sub][::-1]
        ax.barh(names, [v for _, v in parts + sub][::-1],
                color=(["#56B4E9"] * len(sub) + ["#0072B2"] * len(parts)))
        ax.set_xlabel("s per iteration (light: compute by part, busiest stage)")
        ax.set_title(f"chosen: {int(best['gpus'])} x {best['gpu']}\n{best.get('layout', '')}", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
    ax = axes[2]
    labels = [f"{r['gpu'].removesuffix('-calibrated')} {int(r['gpus'])} {r['policy'][:4]}" for r in d.to_dict("records")]
    good = 100 * d["goodput"].to_numpy(float)
    std = 100 * d["goodput_std"].fillna(0.0).to_numpy(float) if "goodput_std" in d else None
    ax.barh(labels[::-1], good[::-1], xerr=None if std is None else std[::-1], color="#009E73", alpha=0.8)
    ax.set_xlim(max(0.0, float(min(good, default=90.0)) - 5.0), 100.0)
    ax.set_xlabel("goodput under failures, % (long runs ± std)")
    ax.set_title("goodput", fontsize=10)
    ax.tick_params(axis="y", labelsize=6)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def write_report(plan, out: str | Path, *, title: str, deadline_days: float | None = None,
                 force: bool = False) -> list[Path]:
    """``out/plan.md`` and ``out/plan.png`` (checked with :func:`dcpsim.outdir.check_out_dir` by the caller)."""
    import matplotlib.pyplot as plt

    from dcpsim.outdir import write_text, write_with

    out = Path(out)
    fig = figure(plan, title=title, deadline_days=deadline_days)
    try:
        png = write_with(out / REPORT_PNG, lambda t: fig.savefig(t, dpi=110, format="png"), force=force)
    finally:
        plt.close(fig)
    md = write_text(out / REPORT_MD, markdown(plan, title=title, deadline_days=deadline_days), force=force)
    return [md, png]
