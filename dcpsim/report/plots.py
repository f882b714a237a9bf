"""Figures from sweep results: a general x/y/hue/col plot and the standard sweep figures.

Everything here works on the flat rows of a sweep, a pandas DataFrame (read
a sweep directory with :func:`dcpsim.run.sweep.load_results`; this module
reads no files and imports nothing from ``dcpsim.run``). Figures are
built with :class:`matplotlib.figure.Figure` directly (no pyplot state), in the
Okabe–Ito colour-blind-safe palette, with a distinct marker per series as
well, and axis labels that carry units. A path with a suffix (``.png``,
``.pdf``, ``.svg``) is written as given; a path without one is written as both
PNG and PDF.

Standard figures (:func:`standard_figures`, written by the ``sweep`` command
into ``DIR/figures`` when its axes make them meaningful):

* ``speedup_vs_gpus``, ``speedup_vs_workload``, ``speedup_vs_network``:
  speedup of each policy over ``packing`` (TFLOPS/GPU of the policy divided by
  TFLOPS/GPU of ``packing`` with every other swept value equal), averaged over
  the other axes, bars showing the range;
* ``time_breakdown``: where iteration time goes (stacked bars, one per policy
  and value of the first other axis);
* ``cp_mix``: the share of sequences trained at each CP size, per policy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError

# Okabe & Ito (2008) colour-blind-safe palette, most distinct colours first.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]

LABELS: dict[str, str] = {
    "gpus": "GPUs",
    "cluster.gpus": "GPUs",
    "tflops_per_gpu": "TFLOPS per GPU (model FLOPs, bf16)",
    "iteration_time_s": "iteration time (s)",
    "tokens_per_s": "throughput (tokens/s)",
    "mfu": "model FLOPs utilisation (fraction of peak)",
    "speedup": "speedup over packing (×)",
    "policy": "policy",
    "policy.name": "policy",
    "workload": "workload",
    "workload.name": "workload",
    "hardware.network_scale": "network bandwidth (× profile)",
    "network_scale": "network bandwidth (× profile)",
    "workload.gbs": "global batch (sequences)",
    "workload.max_len": "maximum length (tokens)",
    "parallel.cp": "static CP size",
    "parallel.max_tokens_per_rank": "tokens per rank per microbatch (M)",
    "wall_s": "simulation wall time (s)",
    "time_to_train_h": "time to train (hours)",
    "time_to_train_days": "time to train (days)",
    "effective_days": "time to train, failures included (days)",
    "effective_time_h": "time to train, failures included (hours)",
    "cost": "cost (price units: GPU-hours × price per GPU-hour)",
    "gpu_hours": "GPU-hours",
}

ALIASES: dict[str, tuple[str, ...]] = {
    "gpus": ("gpus", "cluster.gpus"),
    "policy": ("policy", "policy.name"),
    "workload": ("workload", "workload.name"),
    "network_scale": ("hardware.network_scale", "network_scale"),
    "network": ("hardware.network_scale", "network_scale"),
    "gpu": ("gpu", "hardware.gpu"),
    "model": ("model", "model.name"),
    "gbs": ("workload.gbs", "gbs"),
    "cp": ("parallel.cp", "cp"),
    "seed": ("sim.seed", "seed"),
}


def label_for(column: str) -> str:
    """Axis label (with units) for a column name."""
    if column in LABELS:
        return LABELS[column]
    base = column.rsplit(".", 1)[-1]
    for suffix, unit in (("_per_s", "(per s)"), ("_s", "(s)"), ("_bytes", "(bytes)"), ("_gib", "(GiB)"),
                         ("_frac", "(fraction)"), ("_h", "(hours)")):
        if base.endswith(suffix):
            return f"{base.removesuffix(suffix).replace('_', ' ')} {unit}"
    return base.replace("_", " ")


def resolve_column(df, name: str, field: str = "column") -> str:
    """The column of ``df`` that ``name`` refers to (exact, an alias, or a unique dotted-path suffix)."""
    if name in df.columns:
        return name
    for cand in ALIASES.get(name, ()):
        if cand in df.columns:
            return cand
    matches = [c for c in df.columns if c.endswith("." + name)]
    if len(matches) == 1:
        return matches[0]
    raise ConfigError(field, name, f"a column of the results (have: {sorted(map(str, df.columns))})")


def _load(data) -> Any:
    import pandas as pd

    if not isinstance(data, pd.DataFrame):
        raise ConfigError("results", str(data), "a DataFrame of results (read a sweep folder with "
                          "dcpsim.run.sweep.load_results)")
    df = data
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    return df.reset_index(drop=True)


def _is_numeric(series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _is_pow2_range(values: Sequence[float]) -> bool:
    v = [float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return len(v) >= 3 and min(v) > 0 and all(math.log2(x).is_integer() for x in v) and max(v) / min(v) >= 4


FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def figure_paths(out: str | Path) -> list[Path]:
    """The files :func:`save_figure` writes for ``out``: itself with a figure suffix, else ``out``.png and .pdf."""
    p = Path(out)
    return [p] if p.suffix.lower() in FIGURE_SUFFIXES else [p.with_name(p.name + ".png"), p.with_name(p.name + ".pdf")]


def save_figure(fig, out: str | Path) -> list[Path]:
    """Write ``fig`` to ``out`` (its suffix), or to ``out``.png and ``out``.pdf when it has none (atomically)."""
    from dcpsim.outdir import write_with

    paths = figure_paths(out)
    for q in paths:
        write_with(q, lambda t, q=q: fig.savefig(t, dpi=150, bbox_inches="tight", format=q.suffix[1:].lower()))
    return paths


def _new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.2, height: float = 3.8, sharey: bool = True):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
    return fig, axes


def _style(i: int) -> dict[str, Any]:
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def _ordered(values) -> list:
    vals = list(dict.fromkeys(v for v in values))
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=str)


def plot(
    data,
    x: str,
    y: str,
    hue: str | None = None,
    col: str | None = None,
    out: str | Path | None = None,
    *,
    title: str | None = None,
    baseline: float | None = None,
):
    """Plot ``y`` against ``x`` for each value of ``hue``, one panel per value of ``col``.

    ``data``: a DataFrame of sweep rows (only rows with ``status == "ok"``
    are used). Rows with equal (col, hue, x) are averaged;
    error bars show their range. A numeric ``x`` gives lines (log₂ axis when
    its values are powers of two spanning 4× or more); a categorical ``x`` gives grouped bars. ``baseline`` draws a
    horizontal reference line. Returns the Figure; writes it when ``out`` is given.
    """
    df = _load(data)
    xc, yc, hc, cc = _plot_columns(df, x, y, hue, col)
    panels = _ordered(df[cc]) if cc else [None]
    hues = _ordered(df[hc]) if hc else [None]
    ncols = min(len(panels), 4)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _new_figure(ncols, nrows)
    numeric_x = _is_numeric(df[xc])
    use_log = numeric_x and _is_pow2_range(df[xc].unique())
    keys = [k for k in (cc, hc, xc) if k]
    agg = df.groupby(keys, dropna=False)[yc].agg(["mean", "min", "max", "count"]).reset_index()
    xs_all = _ordered(df[xc])
    for pi, pv in enumerate(panels):
        ax = axes[pi // ncols][pi % ncols]
        sub = agg if cc is None else agg[agg[cc] == pv]
        for hi, hv in enumerate(hues):
            s = sub if hc is None else sub[sub[hc] == hv]
            if len(s):
                _draw_series(ax, s, xc, hi, len(hues), None if hc is None else str(hv), xs_all if not numeric_x else None)
        _x_axis(ax, df[xc], xs_all, numeric_x, use_log)
        if baseline is not None:
            ax.axhline(baseline, color="0.4", linestyle="--", linewidth=1)
        ax.set_xlabel(label_for(xc))
        if pi % ncols == 0:
            ax.set_ylabel(label_for(yc))
        if cc is not None:
            ax.set_title(f"{label_for(cc)} = {pv}", fontsize=10)
        ax.grid(True, alpha=0.3)
    for pi in range(len(panels), nrows * ncols):
        axes[pi // ncols][pi % ncols].set_visible(False)
    if hc is not None:
        axes[0][0].legend(title=label_for(hc), fontsize=8, title_fontsize=9)
    if title:
        fig.suptitle(title)
    if out is not None:
        save_figure(fig, out)
    return fig


def _plot_columns(df, x: str, y: str, hue: str | None, col: str | None) -> tuple[str, str, str | None, str | None]:
    """The DataFrame columns named by the x, y, hue and col arguments (y numeric); ConfigError naming the flag."""
    if not len(df):
        raise ConfigError("results", "no rows with status ok", "at least one successful run to plot")
    xc = resolve_column(df, x, "--x")
    yc = resolve_column(df, y, "--y")
    hc = resolve_column(df, hue, "--hue") if hue else None
    cc = resolve_column(df, col, "--col") if col else None
    if not _is_numeric(df[yc]):
        raise ConfigError("--y", y, "a numeric column")
    return xc, yc, hc, cc


def _draw_series(ax, s, xc: str, hi: int, n_hues: int, lab: str | None, categories: list | None) -> None:
    """One hue's aggregated rows: a line with range bars (numeric x) or grouped bars (``categories`` of x)."""
    st = _style(hi)
    if categories is None:
        s = s.sort_values(xc)
    yerr = np.vstack([s["mean"] - s["min"], s["max"] - s["mean"]]) if (s["count"] > 1).any() else None
    if categories is None:
        ax.errorbar(s[xc].to_numpy(float), s["mean"], yerr=yerr, label=lab, capsize=3, linewidth=1.6, markersize=6, **st)
        return
    width = 0.8 / max(1, n_hues)
    pos = {v: i for i, v in enumerate(categories)}
    xv = np.array([pos[v] for v in s[xc]]) - 0.4 + width * (hi + 0.5)
    ax.bar(xv, s["mean"], width=width, yerr=yerr, label=lab, color=st["color"], capsize=3, edgecolor="black", linewidth=0.5)


def _x_axis(ax, xcol, xs_all: list, numeric_x: bool, use_log: bool) -> None:
    """Category ticks for a categorical x; a log₂ axis with the values as ticks when asked."""
    if not numeric_x:
        ax.set_xticks(range(len(xs_all)), [str(v) for v in xs_all], rotation=20 if len(xs_all) > 4 else 0)
    elif use_log:
        ax.set_xscale("log", base=2)
        ticks = sorted(float(v) for v in xcol.unique())
        ax.set_xticks(ticks, [f"{v:g}" for v in ticks])


# ---------------------------------------------------------------- speedup
def speedup_table(df, *, baseline: str = "packing", metric: str = "tflops_per_gpu",
                  match: Sequence[str] | None = None):
    """Rows of ``df`` (status ok) with a ``speedup`` column: ``metric`` / ``metric`` of ``baseline`` at equal ``match`` values.

    ``match``: the columns that must be equal (default: every swept column,
    i.e. dotted names, plus gpus and workload, except the policy columns).
    Rows without a baseline partner are dropped.
    """
    df = _load(df)
    pc = resolve_column(df, "policy", "policy")
    mc = resolve_column(df, metric, "metric")
    if match is None:
        match = [c for c in df.columns if "." in str(c) and not str(c).startswith("policy.")]
        match += [c for c in ("gpus", "workload") if c in df.columns and c not in match]
    match = [m for m in match if m in df.columns and m != pc]
    base = df[df[pc] == baseline]
    if not len(base):
        return df.iloc[0:0].assign(speedup=[])
    key_cols = list(match)
    if key_cols:
        ref = base.groupby(key_cols, dropna=False)[mc].mean().rename("_ref").reset_index()
        out = df.merge(ref, on=key_cols, how="inner")
    else:
        out = df.assign(_ref=float(base[mc].mean()))
    out = out.assign(speedup=out[mc] / out["_ref"]).drop(columns="_ref")
    return out


def _varying(df, name: str) -> str | None:
    try:
        c = resolve_column(df, name)
    except ConfigError:
        return None
    return c if df[c].nunique(dropna=True) >= 2 else None


# ---------------------------------------------------------------- breakdown and CP mix
def breakdown_columns(df) -> list[str]:
    """Columns that split iteration time into parts (``frac_*`` / ``*_frac`` fractions of iteration time)."""
    cols = [c for c in df.columns if isinstance(c, str) and "." not in c
            and (c.startswith("frac_") or c.endswith("_frac")) and _is_numeric(df[c])]
    return cols


def plot_time_breakdown(data, out: str | Path | None = None, *, by: str | None = None, title: str | None = None):
    """Stacked bars of the iteration-time fractions, one bar per policy (and per value of ``by``)."""
    df = _load(data)
    cols = breakdown_columns(df)
    if not cols:
        raise ConfigError("results", "no frac_* columns", "time-breakdown fractions in the simulator summary")
    pc = resolve_column(df, "policy", "policy")
    keys = [pc] + ([resolve_column(df, by, "by")] if by else [])
    g = df.groupby(keys, dropna=False)[cols].mean().reset_index()
    g = g.sort_values(keys[::-1]) if by else g
    labels = [" / ".join(str(r[k]) for k in keys) for _, r in g.iterrows()]
    fig, axes = _new_figure(width=max(5.0, 0.7 * len(g) + 2.5))
    ax = axes[0][0]
    bottom = np.zeros(len(g))
    hatches = ["", "//", "..", "xx", "\\\\", "oo", "--", "++"]
    for i, c in enumerate(cols):
        v = g[c].to_numpy(float)
        ax.bar(range(len(g)), v, bottom=bottom, color=PALETTE[i % len(PALETTE)], hatch=hatches[i // len(PALETTE) % 8],
               edgecolor="black", linewidth=0.4, label=c.removeprefix("frac_").removesuffix("_frac").replace("_", " "))
        bottom += v
    ax.set_xticks(range(len(g)), labels, rotation=30 if len(g) > 4 else 0, ha="right" if len(g) > 4 else "center")
    ax.set_ylabel("share of iteration time")
    ax.set_xlabel(" / ".join(label_for(k) for k in keys))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title)
    if out is not None:
        save_figure(fig, out)
    return fig


def cp_mix_column(df) -> str | None:
    """The summary column holding the CP-size histogram (JSON ``{cp size: count}``), if any."""
    for c in df.columns:
        if isinstance(c, str) and "." not in c and ("cp_hist" in c or c in ("cp_mix", "cp_sizes")):
            return c
    return None


def cp_mix_table(df):
    """Share of sequences (or whatever the histogram counts) at each CP size, per policy (mean over runs)."""
    import pandas as pd

    df = _load(df)
    hc = cp_mix_column(df)
    if hc is None:
        raise ConfigError("results", "no cp histogram column", "a cp_hist* column in the simulator summary")
    pc = resolve_column(df, "policy", "policy")
    recs = []
    for _, r in df.iterrows():
        h = r[hc]
        h = json.loads(h) if isinstance(h, str) else h
        if not isinstance(h, dict) or not h:
            continue
        tot = float(sum(h.values()))
        for k, v in h.items():
            recs.append({"policy": r[pc], "cp": int(float(k)), "share": float(v) / tot if tot else 0.0})
    if not recs:
        return pd.DataFrame(columns=["policy", "cp", "share"])
    t = pd.DataFrame(recs).groupby(["policy", "cp"])["share"].sum().unstack(fill_value=0.0)
    return t.div(t.sum(axis=1), axis=0)


def plot_cp_mix(data, out: str | Path | None = None, *, title: str | None = None):
    """Stacked bars: the share of sequences trained at each CP size, one bar per policy."""
    t = cp_mix_table(data)
    if not len(t):
        raise ConfigError("results", "empty cp histograms", "non-empty CP-size histograms")
    fig, axes = _new_figure(width=max(4.5, 1.0 * len(t) + 2.5))
    ax = axes[0][0]
    bottom = np.zeros(len(t))
    for i, cp in enumerate(sorted(t.columns)):
        v = t[cp].to_numpy(float)
        ax.bar(range(len(t)), v, bottom=bottom, color=PALETTE[i % len(PALETTE)], edgecolor="black", linewidth=0.4,
               label=f"CP {cp}")
        bottom += v
    ax.set_xticks(range(len(t)), [str(p) for p in t.index])
    ax.set_xlabel("policy")
    ax.set_ylabel("share of sequences")
    ax.legend(title="CP size", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title)
    if out is not None:
        save_figure(fig, out)
    return fig


# ---------------------------------------------------------------- capacity planning
def _plain_log_ticks(ax) -> None:
    """Log axes labelled 1, 2, 5, 10, 20, ... in plain numbers (no 10^x, no overlapping minor labels)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fmt = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(NullFormatter())


def plot_cost_time(df, out: str | Path | None = None, *, time_col: str = "effective_days",
                   cost_col: str = "cost", deadline: float | None = None, title: str | None = None):
    """Cost against time to train, one colour per GPU type and one marker per policy; the Pareto front highlighted.

    With a ``pareto_gpu`` column each GPU type's own front is drawn as a wide translucent line in its colour.

    ``df``: capacity-planning rows (see :mod:`dcpsim.planning`) with ``gpu``,
    ``policy``, ``gpus``, ``pareto`` and the two columns. ``deadline`` (same
    unit as ``time_col``) draws a vertical line.
    """
    d = df[df["status"] == "ok"] if "status" in df.columns else df
    fig, axes = _new_figure(width=6.5, height=4.5)
    ax = axes[0][0]
    gpus_types = _ordered(d["gpu"])
    policies = _ordered(d["policy"])
    for gi, g in enumerate(gpus_types):
        for pi, p in enumerate(policies):
            s = d[(d["gpu"] == g) & (d["policy"] == p)].sort_values("gpus")
            if not len(s):
                continue
            ax.plot(s[time_col], s[cost_col], color=PALETTE[gi % len(PALETTE)], marker=MARKERS[pi % len(MARKERS)],
                    linestyle=["-", "--", ":", "-."][pi % 4], linewidth=1.0, markersize=6, label=f"{g} / {p}")
            for _, r in s.iterrows():
                ax.annotate(str(int(r["gpus"])), (r[time_col], r[cost_col]), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
    if "pareto_gpu" in d.columns:  # each GPU type's own cost-vs-time front, in its colour
        for gi, g in enumerate(gpus_types):
            f = d[(d["gpu"] == g) & d["pareto_gpu"].astype(bool)].sort_values(time_col)
            if len(f) > 1:
                ax.plot(f[time_col], f[cost_col], color=PALETTE[gi % len(PALETTE)], linewidth=4.0, alpha=0.25,
                        zorder=0, solid_capstyle="round")
    if "pareto" in d.columns and d["pareto"].any():
        f = d[d["pareto"]].sort_values(time_col)
        ax.plot(f[time_col], f[cost_col], color="black", linewidth=2.2, alpha=0.35, zorder=0, label="Pareto front")
        ax.scatter(f[time_col], f[cost_col], s=120, facecolors="none", edgecolors="black", linewidths=1.2, zorder=3)
    if deadline is not None:
        ax.axvline(deadline, color="#D55E00", linestyle="--", linewidth=1.2, label="deadline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax)
    ax.set_xlabel(label_for(time_col))
    ax.set_ylabel(label_for(cost_col))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="GPU / policy (labels: GPUs)",
              title_fontsize=8)
    if title:
        ax.set_title(title)
    if out is not None:
        save_figure(fig, out)
    return fig


# ---------------------------------------------------------------- standard figures
def standard_figures(df, out_dir: str | Path, axes: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the standard figures that the sweep's axes make meaningful.

    Returns ``{figure name: [written paths] or "skipped: reason"}``. ``axes``
    are the swept columns (dotted names); speedups compare rows equal in all
    of them except the policy.
    """
    out = Path(out_dir)
    res: dict[str, Any] = {}
    d = _load(df)
    if not len(d):
        return {"all": "skipped: no successful runs"}
    pcol = _varying(d, "policy")
    match = None
    if axes is not None:
        match = [a for a in axes if a in d.columns and not a.startswith("policy.")]

    has_base = pcol is not None and "packing" in set(d[pcol])
    sp = speedup_table(d, match=match) if has_base else None
    for name, key in (("speedup_vs_gpus", "gpus"), ("speedup_vs_workload", "workload"),
                      ("speedup_vs_network", "network_scale")):
        xc = _varying(d, key)
        if not has_base:
            res[name] = "skipped: needs a policy axis that includes packing"
        elif xc is None:
            res[name] = f"skipped: {key} is not swept"
        elif sp is None or not len(sp[sp[pcol] != "packing"]):
            res[name] = "skipped: no runs pair with a packing run"
        else:
            others = sp[sp[pcol] != "packing"]
            col = _varying(others, "workload") if key != "workload" else None
            fig = plot(others, xc, "speedup", hue=pcol, col=col, baseline=1.0,
                       title=f"speedup over packing (TFLOPS/GPU ratio) vs {label_for(xc)}")
            res[name] = [str(p) for p in save_figure(fig, out / name)]
    if breakdown_columns(d):
        by = None
        for cand in ("gpus", "workload", "network_scale"):
            c = _varying(d, cand)
            if c is not None and d[c].nunique() <= 8:
                by = c
                break
        fig = plot_time_breakdown(d, by=by, title="iteration-time breakdown")
        res["time_breakdown"] = [str(p) for p in save_figure(fig, out / "time_breakdown")]
    else:
        res["time_breakdown"] = "skipped: the summary has no frac_* time-breakdown columns"
    if cp_mix_column(d) is not None and len(cp_mix_table(d)):
        fig = plot_cp_mix(d, title="CP-size mix")
        res["cp_mix"] = [str(p) for p in save_figure(fig, out / "cp_mix")]
    else:
        res["cp_mix"] = "skipped: the summary has no CP-size histogram column"
    return res
