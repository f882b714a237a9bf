"""One rank's step as host and device see it: a table and a two-lane figure (host issue, device run).

::

    from dcpsim.run.single import run_simulation
    from dcpsim.report.host import rank_step, plot_rank_step
    res = run_simulation(cfg)
    step = rank_step(res.records[0], stage=0, rank=0)
    print(step.summary())            # step, host busy, device busy, device idle
    plot_rank_step(step.frame(), "tiny_step.png")   # or dcpsim.report.get_plot("rank-step")

Reads a simulated iteration (:class:`~dcpsim.sim.metrics.IterationRecord`)
whose profile has a host model (:mod:`dcpsim.cost.host`): per op of the rank,
in its schedule order, when its host began issuing it and for how long, and
when the device ran it; then the stage's step end (gradient reduce-scatter,
and the step-end host timeline of optimizer, syncs and logging). Nothing here
changes a result: it lays out what the simulation computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dcpsim.errors import ConfigError


@dataclass
class RankStep:
    """One rank's ops (rows: seconds from the iteration's start) and its stage's step end."""

    rows: list[dict]
    stage: int
    rank: int
    bwd_end_s: float
    reduce_scatter_end_s: float
    stage_end_s: float
    makespan_s: float
    tail: list[dict] | None = None  # the step end's ops (dcpsim.cost.host.HostTimeline.breakdown), from rs end

    def summary(self) -> dict[str, float]:
        """Step time and where it went on this rank: host busy issuing ops, device busy running them
        (their device costs), and the device's idle time in the forward-backward part."""
        host = sum(r["host_s"] for r in self.rows)
        dev = sum(r["device_s"] for r in self.rows)
        fb = self.bwd_end_s
        return {"step_s": self.makespan_s, "forward_backward_s": fb, "host_busy_s": host, "device_busy_s": dev,
                "device_idle_s": max(0.0, fb - dev), "step_end_s": self.stage_end_s - fb,
                "host_bound_share": host / fb if fb > 0 else math.nan}

    def table(self) -> list[dict]:
        return [dict(r) for r in self.rows]

    def frame(self):
        """The step as one DataFrame, one row per bar :func:`plot_rank_step` draws (seconds from the iteration's
        start): the rank's ops (``part`` forward/backward), the stage's gradient reduce-scatter (``part``
        reduce-scatter), then the step end: its ops (``part`` step end) or, without them, one row spanning it
        (``part`` step end total). ``attrs`` holds the stage, the rank and :meth:`summary`."""
        import pandas as pd

        nan = math.nan
        rows = [{"part": r["direction"], **r} for r in self.rows]
        rows.append({"part": "reduce-scatter", "op": "grad reduce-scatter", "host_start_s": nan, "host_s": 0.0,
                     "device_start_s": self.bwd_end_s, "device_end_s": self.reduce_scatter_end_s,
                     "device_s": self.reduce_scatter_end_s - self.bwd_end_s})
        if self.tail:
            rows += [{"part": "step end", **r} for r in self.tail]
        else:
            rows.append({"part": "step end total", "op": "step end", "host_start_s": nan, "host_s": 0.0,
                         "device_start_s": self.reduce_scatter_end_s, "device_end_s": self.stage_end_s,
                         "device_s": self.stage_end_s - self.reduce_scatter_end_s})
        df = pd.DataFrame(rows)
        df.attrs.update({"stage": self.stage, "rank": self.rank, **self.summary()})
        return df


def rank_step(record, stage: int = 0, rank: int = 0, sim=None) -> RankStep:
    """The ops of stage rank ``rank`` of pipeline stage ``stage`` in ``record`` (an iteration simulated with
    a host model), in the rank's schedule order; with ``sim`` (the simulator that ran it) the step end's
    own ops too, placed after the stage's gradient reduce-scatter."""
    from dcpsim.pipeline import BWD, pipeline_schedule

    work, tl = record.work, record.timeline
    if getattr(work, "host", None) is None or tl.host_start is None:
        raise ConfigError("hardware.gpu", None, "a profile with a [host] table (the iteration has no host timeline)")
    table, host = work.table, work.host.full()
    pp = tl.bwd_end_s.size
    if not 0 <= stage < pp:
        raise ConfigError("stage", stage, f"a pipeline stage 0..{pp - 1}")
    if not 0 <= rank < table.ranks:
        raise ConfigError("rank", rank, f"a stage rank 0..{table.ranks - 1}")
    vp = work.vp
    sched = pipeline_schedule(pp, table.n_steps, vp)
    f, b, _ = work.virtual()
    dur = (f, b)
    rows = []
    for d, k, c in sched.orders[stage].tolist():
        g = int(table.gid[k, rank])
        if g < 0:
            continue
        s = c * pp + stage
        h = float(host.host_s[s, d, g])
        rows.append({"op": f"{'B' if d == BWD else 'F'}{k}" + (f".{c}" if vp > 1 else ""), "microbatch": int(k),
                     "chunk": int(c), "direction": "backward" if d == BWD else "forward",
                     "host_start_s": float(tl.host_start[s, d, g]), "host_s": h,
                     "device_start_s": float(tl.start[s, d, g]), "device_end_s": float(tl.finish[s, d, g]),
                     "device_s": float(dur[d][s, g]),
                     "sync": ("before " if host.sync_before[s, d, g] else "")
                     + ("after" if host.sync_after[s, d, g] else "")})
    tail = None
    if sim is not None and stage in sim.durations.step_end_inputs:
        t = sim.durations.step_end_timeline(stage, *sim.durations.step_end_inputs[stage])
        r0 = float(tl.reduce_scatter_end_s[stage])
        tail = [dict(r, device_start_s=r["device_start_s"] + r0, device_end_s=r["device_end_s"] + r0,
                     host_start_s=float(h) + r0) for r, h in zip(t.breakdown(), t.issue_start, strict=True)]
    return RankStep(rows, stage, rank, float(tl.bwd_end_s[stage]), float(tl.reduce_scatter_end_s[stage]),
                    float(tl.stage_end_s[stage]), float(tl.makespan_s), tail)


def plot_rank_step(df, path: str | Path, title: str = "") -> Path:
    """Two lanes over the step: the host issuing each op, the device running it; then the step end.

    ``df``: :meth:`RankStep.frame` (columns ``part``, ``host_start_s``, ``host_s``, ``device_start_s``,
    ``device_end_s``, ``device_s``; ``attrs`` give the default title). Registered as ``rank-step`` in
    :data:`dcpsim.report.PLOTS`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dcpsim.outdir import write_with

    fig, ax = plt.subplots(figsize=(9.0, 2.6))
    colors = {"forward": "C0", "backward": "C1"}
    rows = df.to_dict("records")
    for r in (r for r in rows if r["part"] in colors):
        c = colors[r["part"]]
        ax.broken_barh([(r["host_start_s"] * 1e3, r["host_s"] * 1e3)], (1.1, 0.8), facecolors=c, edgecolor="white",
                       linewidth=0.3)
        span = (r["device_start_s"] * 1e3, (r["device_end_s"] - r["device_start_s"]) * 1e3)
        ax.broken_barh([span], (0.1, 0.8), facecolors=c, alpha=0.3, edgecolor="white", linewidth=0.3)
        ax.broken_barh([(span[0], r["device_s"] * 1e3)], (0.1, 0.8), facecolors=c, edgecolor="white", linewidth=0.3)
    for r in (r for r in rows if r["part"] == "reduce-scatter"):
        ax.broken_barh([(r["device_start_s"] * 1e3, r["device_s"] * 1e3)], (0.1, 0.8), facecolors="0.45")
    for r in rows:
        if r["part"] == "step end":
            ax.broken_barh([(r["host_start_s"] * 1e3, r["host_s"] * 1e3)], (1.1, 0.8), facecolors="0.75",
                           edgecolor="0.3", linewidth=0.4)
            if r["device_s"] > 0:
                ax.broken_barh([(r["device_start_s"] * 1e3, r["device_s"] * 1e3)], (0.1, 0.8), facecolors="0.75",
                               edgecolor="0.3", linewidth=0.4)
        elif r["part"] == "step end total":
            ax.broken_barh([(r["device_start_s"] * 1e3, r["device_s"] * 1e3)], (0.1, 1.8), facecolors="0.75",
                           edgecolor="0.4", linewidth=0.5)
    ax.set_yticks([0.5, 1.5], ["device", "host"])
    ax.set_xlabel("ms from the step's start")
    s = df.attrs
    ax.set_title(title or (f"stage {s['stage']} rank {s['rank']}: step {s['step_s'] * 1e3:.1f} ms, host busy "
                           f"{s['host_busy_s'] * 1e3:.1f} ms, device busy {s['device_busy_s'] * 1e3:.1f} ms "
                           "(light: the device waits for the host)"), fontsize=9)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="C0", label="forward"), Patch(color="C1", label="backward"),
                       Patch(color="0.45", label="grad reduce-scatter"),
                       Patch(color="0.75", label="step end: grad checks, norms, optimizer, logging")],
              fontsize=7, loc="upper right", ncol=3)
    ax.set_ylim(0, 2.6)
    fig.tight_layout()
    path = Path(path)
    write_with(path, lambda t: fig.savefig(t, dpi=130, format="png"))
    plt.close(fig)
    return path


def step_table_markdown(step: RankStep) -> str:
    """The rank's ops and the summary as Markdown (milliseconds)."""
    s = step.summary()
    lines = ["| op | host issue start ms | host ms | device start ms | device end ms | device ms | sync |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in step.rows:
        lines.append(f"| {r['op']} | {r['host_start_s'] * 1e3:.3f} | {r['host_s'] * 1e3:.3f} | "
                     f"{r['device_start_s'] * 1e3:.3f} | {r['device_end_s'] * 1e3:.3f} | {r['device_s'] * 1e3:.3f} "
                     f"| {r['sync']} |")
    if step.tail:
        lines += ["", "Step end (after the gradient reduce-scatter):", "",
                  "| op | host ms | device ms | device start ms | device end ms | sync |", "|---|---:|---:|---:|---:|---|"]
        lines += [f"| {r['op']} | {r['host_s'] * 1e3:.3f} | {r['device_s'] * 1e3:.3f} | {r['device_start_s'] * 1e3:.3f} "
                  f"| {r['device_end_s'] * 1e3:.3f} | {r['sync']} |" for r in step.tail]
    lines += ["", "| step ms | forward-backward ms | host busy ms | device busy ms | device idle ms | step end ms |",
              "|---:|---:|---:|---:|---:|---:|",
              f"| {s['step_s'] * 1e3:.2f} | {s['forward_backward_s'] * 1e3:.2f} | {s['host_busy_s'] * 1e3:.2f} | "
              f"{s['device_busy_s'] * 1e3:.2f} | {s['device_idle_s'] * 1e3:.2f} | {s['step_end_s'] * 1e3:.2f} |"]
    return "\n".join(lines) + "\n"
