"""Replay published runs through the simulator and compare tokens/s per GPU.

::

    from dcpsim.published import replay_suite
    res = replay_suite(subset="all")
    print(res.stats_table())        # mean / worst |error| per GPU x precision x source
    res.write("out/published")      # CSV, Markdown, parity plot, JSON

Every row goes through :func:`dcpsim.run.single.run_simulation` (what ``dcpsim
simulate`` runs) with the configuration :func:`~dcpsim.published.suite.row_config`
builds. A row is ``ok`` (simulated and compared), ``memory`` (simulated and
compared, but flagged: dcpsim's memory model says a microbatch does not fit
although the published run did), or ``unexpressible`` (with the reason; not
simulated, not averaged). Error is
``simulated / measured - 1`` on tokens/s per GPU.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.published.suite import Row, RowConfig, Suite, load_suite, row_config

QUICK_ROWS = [1, 12, 44, 72, 73]
"""The quick subset (small GPU counts, one row per source group that is expressible today)."""

STATUS_OK, STATUS_MEMORY, STATUS_UNEXPRESSIBLE = "ok", "memory", "unexpressible"
COMPARED = (STATUS_OK, STATUS_MEMORY)
"""Statuses whose error counts: a ``memory`` row is simulated and compared (the published run proves the
layout fits, so the flag marks a memory-model gap, reported beside the error, not a reason to skip it)."""


@dataclass
class RowResult:
    row: Row
    status: str
    reason: str = ""
    simulated: float = math.nan  # tokens/s per GPU
    assumptions: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def error(self) -> float:
        """simulated / measured - 1 (NaN when not simulated)."""
        return self.simulated / self.row.measured - 1.0 if math.isfinite(self.simulated) else math.nan

    def as_dict(self) -> dict[str, Any]:
        r = self.row
        s = self.summary
        return {
            "row": r.id, "model": r.model, "family": r.family, "split": r.split, "group": r.group,
            "gpu": r.gpu_name, "precision": r.precision, "source": r.source_group, "trust": r.trust,
            "gpus": r.gpus, "layout": r.layout, "gbs": int(r.raw["gbs"]), "mbs": r.intval("mbs", 1),
            "seq_len": int(r.raw["seq_len"]),
            "measured_tokens_per_s_per_gpu": r.measured, "simulated_tokens_per_s_per_gpu": self.simulated,
            "error": self.error, "status": self.status, "reason": self.reason,
            "iteration_time_s": s.get("iteration_time_s", math.nan), "mfu": s.get("mfu", math.nan),
            "peak_memory_gib": s.get("peak_memory_gib", math.nan),
            "assumptions": "; ".join(self.assumptions), "wall_s": self.wall_s,
        }


def with_profile(rc: RowConfig, profiles: dict[str, str] | None) -> RowConfig:
    """``rc`` with its hardware profile replaced per ``profiles`` (base name -> profile name or folder)."""
    if rc.config is None or not profiles or rc.config.hardware.gpu not in profiles:
        return rc
    gpu = profiles[rc.config.hardware.gpu]
    return RowConfig(rc.row, rc.config.with_updates({"hardware.gpu": gpu}), None, [*rc.assumptions, f"profile {gpu}"])


def calibrated_profiles(suffix: str = "-calibrated") -> dict[str, str]:
    """Base profile -> ``<base><suffix>`` for every shipped/known profile that has a calibrated twin."""
    from dcpsim.hardware import list_profiles

    names = set(list_profiles())
    return {n: n + suffix for n in names if n + suffix in names}


def _run_row(rc: RowConfig) -> RowResult:
    from dcpsim.errors import DcpsimError
    from dcpsim.run.single import run_simulation

    if rc.config is None:
        return RowResult(rc.row, STATUS_UNEXPRESSIBLE, rc.reason or "", assumptions=rc.assumptions)
    t0 = time.perf_counter()
    try:
        res = run_simulation(rc.config, allow_infeasible=True)  # a memory-model gap is reported, not refused
    except DcpsimError as exc:
        return RowResult(rc.row, STATUS_UNEXPRESSIBLE, f"simulator refused: {exc}", assumptions=rc.assumptions,
                         wall_s=time.perf_counter() - t0)
    s = res.summary
    sim = float(s["tokens_per_s"]) / rc.row.gpus
    pad = sum(int(p.meta.get("padding_steps", 0) or 0) for p in res.plans)
    if pad:
        return RowResult(rc.row, STATUS_UNEXPRESSIBLE, f"VP rule: microbatches per pipeline not a multiple of pp "
                         f"({pad} empty steps padded; Megatron refuses this layout)", sim, rc.assumptions, dict(s),
                         time.perf_counter() - t0)
    status, reason = STATUS_OK, ""
    if s.get("packs_over_memory", 0):
        cost_limit = rc.config.hardware.gpu
        status = STATUS_MEMORY
        reason = (f"memory model: {s.get('peak_memory_gib', math.nan):.1f} GiB per GPU > the usable HBM of "
                  f"{cost_limit} (the real run fit: a memory-model gap)")
    return RowResult(rc.row, status, reason, sim, rc.assumptions, dict(s), time.perf_counter() - t0)


@dataclass
class ReplayResult:
    rows: list[RowResult]
    suite: Suite
    wall_s: float
    subset: str

    def table(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.rows]

    def stats(self, by: str = "group", statuses: tuple[str, ...] = (STATUS_OK, STATUS_MEMORY)) -> list[dict[str, Any]]:
        """Mean and worst |error| per ``by`` (group, split, family...) over rows with these statuses."""
        out: dict[str, list[float]] = {}
        counts: dict[str, dict[str, int]] = {}
        for r in self.rows:
            d = r.as_dict()
            key = str(d[by])
            counts.setdefault(key, {}).setdefault(r.status, 0)
            counts[key][r.status] += 1
            if r.status in statuses:
                out.setdefault(key, []).append(abs(r.error))
        rows = []
        for key in sorted(counts):
            errs = out.get(key, [])
            rows.append({by: key, "compared": len(errs),
                         "mean_abs_error": sum(errs) / len(errs) if errs else math.nan,
                         "worst_abs_error": max(errs) if errs else math.nan,
                         "not_compared": sum(v for k, v in counts[key].items() if k not in statuses)})
        return rows

    def overall(self) -> dict[str, Any]:
        errs = [abs(r.error) for r in self.rows if r.status in COMPARED]
        return {"rows": len(self.rows), "compared": len(errs),
                "memory": sum(r.status == STATUS_MEMORY for r in self.rows),
                "unexpressible": sum(r.status == STATUS_UNEXPRESSIBLE for r in self.rows),
                "mean_abs_error": sum(errs) / len(errs) if errs else math.nan,
                "worst_abs_error": max(errs) if errs else math.nan, "wall_s": self.wall_s,
                "data_sha256": self.suite.data_sha256, "subset": self.subset}

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall(), "groups": self.stats("group"), "splits": self.stats("split"),
                "rows": self.table()}

    def write(self, out: str | Path) -> list[Path]:
        """CSV + Markdown + JSON + parity plot into ``out``, each written atomically (:mod:`dcpsim.outdir`)."""
        import pandas as pd

        from dcpsim.outdir import check_out_dir, write_text

        out = check_out_dir(out)
        df = pd.DataFrame(self.table())
        paths = [out / "published_validation.csv", out / "published_validation.md", out / "published_validation.json"]
        write_text(paths[0], df.to_csv(index=False))
        write_text(paths[1], self.markdown())
        from dcpsim.serialize import to_jsonable

        write_text(paths[2], json.dumps(to_jsonable(self.to_json()), indent=1))
        plot = out / "published_parity.png"
        self.parity_plot(plot)
        return [*paths, plot]

    def markdown(self) -> str:
        o = self.overall()
        lines = ["# dcpsim against published training throughput", "",
                 f"Data sha256 `{o['data_sha256'][:16]}`, subset `{self.subset}`: {o['rows']} rows, {o['compared']} "
                 f"compared ({o['memory']} of them flagged by the memory model), {o['unexpressible']} not expressible yet. "
                 "Error = simulated / measured - 1 on tokens/s per GPU.", "",
                 "## Per group (GPU x precision x source)", "",
                 "| group | compared | mean abs error | worst abs error | not compared |", "|---|---:|---:|---:|---:|"]
        for s in self.stats("group"):
            lines.append(f"| {s['group']} | {s['compared']} | {_pct(s['mean_abs_error'])} | {_pct(s['worst_abs_error'])} "
                         f"| {s['not_compared']} |")
        lines += ["", "## Per split", "", "| split | compared | mean abs error | worst abs error |", "|---|---:|---:|---:|"]
        for s in self.stats("split"):
            lines.append(f"| {s['split']} | {s['compared']} | {_pct(s['mean_abs_error'])} | {_pct(s['worst_abs_error'])} |")
        lines += ["", "## Rows", "", "| row | model | GPUs | layout | measured | simulated | error | status |",
                  "|---:|---|---:|---|---:|---:|---:|---|"]
        for r in self.rows:
            st = r.status if not r.reason else f"{r.status}: {r.reason}"
            lines.append(f"| {r.row.id} | {r.row.model} {r.row.precision.upper()} | {r.row.gpus} | {r.row.layout} | "
                         f"{r.row.measured:,.0f} | {_num(r.simulated)} | {_pct(r.error, signed=True)} | {st} |")
        return "\n".join(lines) + "\n"

    def parity_plot(self, path: Path) -> Path:
        """Simulated vs measured tokens/s per GPU (:func:`dcpsim.report.published.parity_plot`)."""
        import pandas as pd

        from dcpsim.report.published import parity_plot

        o = self.overall()
        df = pd.DataFrame([{"measured": r.row.measured, "simulated": r.simulated, "group": r.row.group,
                            "precision": r.row.precision} for r in self.rows],
                          columns=["measured", "simulated", "group", "precision"])
        title = f"{o['compared']} rows: mean |err| {_pct(o['mean_abs_error'])}, worst {_pct(o['worst_abs_error'])}"
        return parity_plot(df, path, title=title)


def _pct(v: float, signed: bool = False) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v * 100:+.1f}%" if signed else f"{v * 100:.1f}%"


def _num(v: float) -> str:
    return f"{v:,.0f}" if math.isfinite(v) else "-"


def subset_rows(suite: Suite, subset: str, rows: list[int] | None = None) -> list[Row]:
    from dcpsim.errors import ConfigError

    if rows is not None:
        return suite.select(rows)
    if subset == "quick":
        return suite.select(QUICK_ROWS)
    if subset == "all":
        return suite.select(None)
    if subset in ("fit", "held-out"):
        return [r for r in suite.rows if r.split == subset]
    raise ConfigError("--subset", subset, "quick, all, fit or held-out")


def replay_suite(subset: str = "all", *, suite_dir: str | Path | None = None, rows: list[int] | None = None,
                 profiles: dict[str, str] | None = None, progress: bool | None = False) -> ReplayResult:
    """Replay the rows of ``subset`` (``quick``, ``all``, ``fit``, ``held-out``; or explicit row ids).

    ``profiles`` replaces hardware profiles by base name (e.g. ``{"h100-sxm": "h100-sxm-calibrated"}``).
    ``progress``: draw a bar (None: only on a terminal, see :mod:`dcpsim.progress`).
    """
    from dcpsim.progress import ProgressDisplay

    t0 = time.perf_counter()
    suite = load_suite(suite_dir)
    chosen = subset_rows(suite, subset, rows)
    results = []
    with ProgressDisplay("replaying", len(chosen), progress) as bar:
        for r in chosen:
            results.append(_run_row(with_profile(row_config(r), profiles)))
            bar.advance(note=f"row {r.id}")
    return ReplayResult(results, suite, time.perf_counter() - t0, subset if rows is None else "rows")
