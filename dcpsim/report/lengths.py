"""Histogram figure of a sample of sequence lengths (an array, or a DataFrame with a ``length`` column).

matplotlib is imported lazily, and the figure is drawn on an Agg canvas
created directly (never through ``pyplot``), so plotting works without a
display and leaves the caller's matplotlib backend and pyplot state untouched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.workload.distributions import _as_length_array

__all__ = ["plot_length_histograms"]

_FORMATS = {".png": "png", ".pdf": "pdf"}


def plot_length_histograms(
    lengths: np.ndarray | Sequence[int],
    path: str | os.PathLike[str],
    title: str | None = None,
    *,
    bins_per_decade: int = 20,
) -> Path:
    """Write a two-panel histogram of sequence lengths.

    Left: number of sequences per length bin. Right: number of tokens per bin
    (each sequence weighted by its length), which shows where the training
    tokens actually sit. Bins are log-spaced (``bins_per_decade`` per factor
    of 10) and the x axes are logarithmic. Dashed lines mark the median and
    the 99th percentile of the sequence lengths.

    Args:
        lengths: sequence lengths in tokens (integers ``>= 1``).
        path: output file; ``.png`` or ``.pdf``. Missing parent folders are
            created.
        title: figure title (``None``: a summary line with count and mean).
        bins_per_decade: histogram resolution.

    Returns:
        The path written.
    """
    if hasattr(lengths, "columns"):  # a DataFrame of sequences
        lengths = lengths["length"].to_numpy()
    arr = _as_length_array(lengths, "lengths", "plot_length_histograms")
    out = Path(path)
    fmt = _FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise ConfigError("path", str(path), f"a file name ending in {sorted(_FORMATS)}")
    if isinstance(bins_per_decade, bool) or not isinstance(bins_per_decade, int) or (bins_per_decade < 1):
        raise ConfigError("bins_per_decade", bins_per_decade, "an integer >= 1")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lo, hi = float(arr.min()), float(arr.max())
    decades = max(np.log10(hi) - np.log10(lo), 1e-9)
    n_bins = max(int(np.ceil(decades * bins_per_decade)), 1)
    # bin edges half a token outside the extremes so integer lengths never sit on an edge
    edges = np.geomspace(max(lo - 0.5, 0.5), hi + 0.5, n_bins + 1)
    x = arr.astype(np.float64)
    median, p99 = np.percentile(x, [50.0, 99.0])

    fig = Figure(figsize=(11.0, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_count, ax_tok = fig.subplots(1, 2)
    ax_count.hist(x, bins=edges, color="tab:blue")
    ax_count.set_ylabel("sequences per bin (count)")
    ax_count.set_title("sequences")
    ax_tok.hist(x, bins=edges, weights=x, color="tab:orange")
    ax_tok.set_ylabel("tokens per bin (tokens)")
    ax_tok.set_title("tokens (length-weighted)")
    for ax in (ax_count, ax_tok):
        ax.set_xscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.axvline(median, color="k", linestyle="--", linewidth=1.0, label=f"median {median:,.0f}")
        ax.axvline(p99, color="tab:red", linestyle="--", linewidth=1.0, label=f"p99 {p99:,.0f}")
        ax.grid(True, which="major", alpha=0.3)
    ax_count.legend(loc="upper right", fontsize="small")
    if title is None:
        title = f"{arr.size:,} sequences, mean {x.mean():,.0f} tokens, total {int(arr.sum()):,} tokens"
    fig.suptitle(title)
    from dcpsim.outdir import write_with

    return write_with(out, lambda t: fig.savefig(t, format=fmt, dpi=150))
