"""Parity figure of a validation suite: simulated against measured throughput, log axes, the ±10% band."""

from __future__ import annotations

import math
from pathlib import Path


def parity_plot(df, path: Path, *, title: str = "", xlabel: str = "measured tokens/s per GPU (published)",
                ylabel: str = "simulated tokens/s per GPU (dcpsim)",
                empty_range: tuple[float, float] = (10.0, 1e5)) -> Path:
    """Simulated vs measured values from ``df`` (columns ``measured``, ``simulated``, ``group``, and either
    ``precision`` (one marker per precision) or ``split`` (``fit`` filled, ``held-out`` open markers); rows
    with a non-finite ``simulated`` are left out), one colour per group, log axes (``empty_range`` when no
    row is left); written as PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.0, 5.4))
    done = [r for r in df.to_dict("records") if math.isfinite(r["simulated"])]
    if done:
        lo = min(min(r["measured"], r["simulated"]) for r in done) / 1.5
        hi = max(max(r["measured"], r["simulated"]) for r in done) * 1.5
    else:
        lo, hi = empty_range
    x = np.geomspace(lo, hi, 50)
    ax.plot(x, x, color="black", lw=0.8)
    ax.fill_between(x, 0.9 * x, 1.1 * x, color="0.85", label="±10%")
    markers = {"bf16": "o", "fp8": "s", "fp16": "^"}
    groups = sorted({r["group"] for r in done})
    for i, g in enumerate(groups):
        rr = [r for r in done if r["group"] == g]
        if "split" not in df:
            ax.scatter([r["measured"] for r in rr], [r["simulated"] for r in rr], s=22, label=g,
                       marker=markers.get(rr[0]["precision"], "o"), color=f"C{i % 10}")
            continue
        for split, face in (("fit", f"C{i % 10}"), ("held-out", "none")):
            rs = [r for r in rr if r["split"] == split]
            if rs:
                ax.scatter([r["measured"] for r in rs], [r["simulated"] for r in rs], s=20, marker="o",
                           facecolors=face, edgecolors=f"C{i % 10}", label=f"{g} ({split})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7 if "split" not in df else 6, loc="upper left")
    fig.tight_layout()
    from dcpsim.outdir import write_with

    write_with(path, lambda t: fig.savefig(t, dpi=130, format="png"))
    plt.close(fig)
    return path
