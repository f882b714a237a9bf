"""Figures of the Dynamic-CP blog reproduction (matplotlib, Agg backend, PNG), each a function of the
result table (a DataFrame or its rows) and the experiment.

Colours are the Okabe-Ito palette (distinguishable with the common forms of
colour-blindness); published values are drawn in black with their own marker
so they never depend on colour alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.reproduction.blog import BlogExperiment

__all__ = ["OKABE_ITO", "plot_all", "plot_breakdown", "plot_cp_mix", "plot_sensitivity", "plot_tflops"]

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
_PARTS = (
    ("compute_s", "compute"),
    ("cp_comm_s", "exposed CP comm"),
    ("bubble_s", "pipeline bubble"),
    ("imbalance_s", "imbalance idle"),
    ("sync_s", "grad sync + planning stall"),
)


def _records(df) -> list[dict[str, Any]]:
    """The rows of ``df`` (a DataFrame, or already a list of row dicts) as dicts."""
    return df.to_dict("records") if hasattr(df, "to_dict") else list(df)


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _variants(table: list[dict[str, Any]]) -> list[str]:
    return [w for w in ("public", "calibrated") if any(r["workload"] == w for r in table)]


def _label(wl: str) -> str:
    from dcpsim.reproduction.blog import VARIANT_LABELS

    return VARIANT_LABELS.get(wl, f"{wl} workload")


def plot_tflops(df, path: Path, *, exp: BlogExperiment) -> Path:
    """Grouped bars: simulated TFLOPS/GPU per dataset and policy; published values as black diamonds."""
    table = _records(df)
    plt = _plt()
    variants = _variants(table)
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 4.4), squeeze=False, sharey=True)
    datasets = list(exp.datasets)
    npol = len(exp.policies)
    width = 0.8 / npol
    for ax, wl in zip(axes[0], variants, strict=True):
        rows = {(r["dataset"], r["policy"]): r for r in table if r["workload"] == wl}
        for j, pol in enumerate(exp.policies):
            xs = np.arange(len(datasets)) + (j - (npol - 1) / 2) * width
            ys = [rows.get((ds, pol), {}).get("tflops", math.nan) for ds in datasets]
            ax.bar(xs, ys, width * 0.95, color=OKABE_ITO[j % len(OKABE_ITO)], label=pol)
            pub = [rows.get((ds, pol), {}).get("published_tflops") for ds in datasets]
            px = [x for x, p in zip(xs, pub, strict=True) if p is not None]
            py = [p for p in pub if p is not None]
            if px:
                ax.scatter(px, py, marker="D", s=36, facecolor="white", edgecolor="black", zorder=3,
                           label="published" if j == 0 or pol == exp.headline else None)
        ax.set_xticks(np.arange(len(datasets)), datasets)
        ax.set_title(_label(wl), fontsize=9)
        ax.set_xlabel("dataset")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("TFLOPS per GPU (Megatron accounting)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    fig.legend(uniq.values(), uniq.keys(), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    _save(fig, path)
    plt.close(fig)
    return path


def plot_breakdown(df, path: Path, *, exp: BlogExperiment) -> Path:
    """Stacked horizontal bars: where the time of one iteration goes, per dataset and policy (seconds per GPU)."""
    table = _records(df)
    plt = _plt()
    variants = _variants(table)
    wl = variants[0]
    rows = [r for r in table if r["workload"] == wl]
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(rows) + 1.4))
    labels = [f"{r['dataset']} / {r['policy']}" for r in rows]
    left = np.zeros(len(rows))
    for i, (key, name) in enumerate(_PARTS):
        if key == "sync_s":
            vals = np.array([r["grad_sync_s"] + r["planning_stall_s"] for r in rows])
        else:
            vals = np.array([r[key] for r in rows])
        ax.barh(np.arange(len(rows)), vals, left=left, color=OKABE_ITO[i], label=name,
                hatch="//" if key in ("bubble_s", "imbalance_s") else None, edgecolor="white", linewidth=0.3)
        left += vals
    ax.set_yticks(np.arange(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per iteration, mean over GPUs")
    ax.set_title(f"Where the time goes ({_label(wl)})", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def plot_cp_mix(df, path: Path, *, exp: BlogExperiment) -> Path:
    """Share of tokens trained at each CP size, per dataset and policy (the CP mix the policies chose)."""
    table = _records(df)
    plt = _plt()
    wl = _variants(table)[0]
    rows = [r for r in table if r["workload"] == wl and r.get("cp_token_share")]
    sizes = sorted({c for r in rows for c in r["cp_token_share"]})
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(rows) + 1.4))
    left = np.zeros(len(rows))
    for i, c in enumerate(sizes):
        vals = np.array([r["cp_token_share"].get(c, 0.0) for r in rows])
        ax.barh(np.arange(len(rows)), vals, left=left, color=OKABE_ITO[i % len(OKABE_ITO)], label=f"CP {c}",
                edgecolor="white", linewidth=0.3)
        left += vals
    ax.set_yticks(np.arange(len(rows)), [f"{r['dataset']} / {r['policy']}" for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of trained tokens")
    ax.set_title(f"CP sizes chosen ({_label(wl)})", fontsize=9)
    ax.legend(fontsize=8, ncol=min(len(sizes), 8), loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def plot_sensitivity(df, path: Path, *, exp: BlogExperiment) -> Path:
    """One panel per axis: simulated speedup over the baseline of each dynamic policy (bars: per-seed range).

    Colour = dataset, marker and line style = policy; the published speedups are dashed black-edged lines
    in the dataset's colour.
    """
    sens = _records(df)
    plt = _plt()
    axes_def = [a for a in exp.axes if any(r["axis"] == a.name for r in sens)]
    pols = [p for p in exp.sensitivity_policies if p != exp.baseline]
    n = len(axes_def)
    cols = min(3, n)
    nrows = math.ceil(n / cols)
    fig, axs = plt.subplots(nrows, cols, figsize=(4.8 * cols, 3.6 * nrows), squeeze=False)
    markers, styles = ("o", "^", "s", "D"), ("-", ":", "-.", "--")
    nlines = len(exp.datasets) * len(pols)
    for k, a in enumerate(axes_def):
        ax = axs[k // cols][k % cols]
        line = 0
        for i, ds in enumerate(exp.datasets):
            rows = {r["value"]: r for r in sens if r["axis"] == a.name and r["dataset"] == ds}
            col = OKABE_ITO[i % len(OKABE_ITO)]
            for j, pol in enumerate(pols):
                x = np.arange(len(a.ticks)) + (line - 0.5 * (nlines - 1)) * 0.06
                line += 1
                y = np.array([rows.get(t, {}).get(f"{pol}_speedup", math.nan) for t in a.ticks])
                lo = np.array([rows.get(t, {}).get(f"{pol}_speedup_min", math.nan) for t in a.ticks])
                hi = np.array([rows.get(t, {}).get(f"{pol}_speedup_max", math.nan) for t in a.ticks])
                ax.errorbar(x, y, yerr=[np.nan_to_num(y - lo), np.nan_to_num(hi - y)], color=col,
                            marker=markers[j % 4], linestyle=styles[j % 4], capsize=2, markersize=4,
                            label=f"{ds}: {pol}")
            ax.axhline(exp.published[ds]["speedup"], color=col, linestyle="--", linewidth=1.2,
                       label=f"{ds}: published {exp.published[ds]['speedup']:.2f}x")
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xticks(np.arange(len(a.ticks)), a.ticks)
        ax.set_xlabel(a.label, fontsize=8)
        ax.set_ylabel(f"speedup over {exp.baseline} (x)")
        ax.grid(alpha=0.3)
    for k in range(n, nrows * cols):
        axs[k // cols][k % cols].axis("off")
    handles, labels = max((axs[k // cols][k % cols].get_legend_handles_labels() for k in range(n)), key=lambda hl: len(hl[1]))
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8, frameon=False)
    fig.suptitle("Sensitivity of the speedup to the unpublished settings (one at a time; bars: per-seed range)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    _save(fig, path)
    plt.close(fig)
    return path


def _save(fig, path: Path) -> None:
    from dcpsim.outdir import write_with

    write_with(path, lambda t: fig.savefig(t, dpi=90, format=Path(path).suffix[1:].lower() or "png"))


def plot_all(exp: BlogExperiment, table: list[dict[str, Any]], sens: list[dict[str, Any]], out_dir: Path) -> dict[str, Path]:
    """Write every figure into ``out_dir``; returns name -> path."""
    paths = {
        "tflops": plot_tflops(table, out_dir / "tflops.png", exp=exp),
        "breakdown": plot_breakdown(table, out_dir / "breakdown.png", exp=exp),
        "cp_mix": plot_cp_mix(table, out_dir / "cp_mix.png", exp=exp),
    }
    if len(sens):
        paths["sensitivity"] = plot_sensitivity(sens, out_dir / "sensitivity.png", exp=exp)
    return paths
