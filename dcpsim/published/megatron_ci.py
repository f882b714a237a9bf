"""The Megatron-LM CI suite: replay Megatron's functional-test step times through the simulator.

::

    from dcpsim.published.megatron_ci import replay_ci
    res = replay_ci()                 # every row of experiments/megatron_ci/cases.csv
    print(res.markdown())             # mean / worst |error| per group and per split, every row
    res.write("out/megatron_ci")      # CSV, Markdown, JSON, parity plot

Each row is one golden ``iteration-time`` series of a Megatron-LM functional test (see
``experiments/megatron_ci/README.md``). Its run is read from the case's own flags by the same reader as
``dcpsim simulate --megatron-args`` (:mod:`dcpsim.export.reader`) and simulated by
:func:`dcpsim.run.single.run_simulation`. Compared quantity: the step time, the median over the CI's window;
error = simulated / measured - 1 (negative: dcpsim predicts a shorter step). A row is ``ok``, ``memory``
(simulated, flagged by the memory model) or ``unexpressible`` (not simulated; the reason names the flag or the
missing fact). The fit / held-out split is declared in ``suite.toml`` by layout family.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError

SUITE_DIR_NAME = "experiments/megatron_ci"
GPU_PROFILES = {"H100": "h100-sxm", "A100": "a100-sxm-80gb", "GB200": "gb200"}
STATUS_OK, STATUS_MEMORY, STATUS_UNEXPRESSIBLE = "ok", "memory", "unexpressible"
COMPARED = (STATUS_OK, STATUS_MEMORY)
GPT_SCRIPT_FOLDERS = ("gpt", "moe")  # test_cases folders trained by pretrain_gpt.py (suite.toml [models])


def default_suite_dir() -> Path:
    from dcpsim.resources import data_dir

    return data_dir("experiments") / Path(SUITE_DIR_NAME).name


@dataclass
class CiRow:
    """One golden file of the suite (CSV fields verbatim in ``raw``), its layout family and split."""

    id: int
    raw: dict[str, str]
    family: str
    split: str
    folder: Path

    @property
    def measured(self) -> float:
        """Median step time over the CI's window, seconds."""
        return float(self.raw["median_iteration_time_s"])

    @property
    def group(self) -> str:
        r = self.raw
        nodes = f" {r['nodes']}x{r['gpus_per_node']}" if r["gpu"] == "GB200" and r["nodes"] else ""
        return f"{r['gpu']} {r['environment']}{nodes}"

    @property
    def layout(self) -> str:
        r = self.raw
        return f"TP{r['tp']} PP{r['pp']} CP{r['cp']} DP{r['dp'] or '?'}" + (" VP" if r["vp_layers"] else "")


def family_of(raw: dict[str, str]) -> str:
    """``TP{tp} PP{pp} CP{cp}`` plus `` VP`` with an interleaved pipeline (suite.toml's family rule)."""
    return f"TP{raw['tp']} PP{raw['pp']} CP{raw['cp']}" + (" VP" if raw["vp_layers"] else "")


@dataclass
class CiSuite:
    rows: list[CiRow]
    path: Path
    data_sha256: str
    meta: dict[str, Any] = field(default_factory=dict)


def load_ci_suite(suite_dir: str | Path | None = None) -> CiSuite:
    """Read ``suite.toml`` and ``cases.csv`` (hash checked); assign each row its family and split."""
    from dcpsim.schema import read_toml

    d = Path(suite_dir) if suite_dir is not None else default_suite_dir()
    meta_path = d / "suite.toml"
    if not meta_path.is_file():
        raise ConfigError("--megatron-ci-suite", str(d), f"a folder with suite.toml and cases.csv ({SUITE_DIR_NAME})")
    meta = read_toml(meta_path, "suite.toml")
    data = d / meta.get("data", "cases.csv")
    if not data.is_file():
        raise ConfigError("suite.toml data", str(data), "an existing CSV file")
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    if meta.get("data_sha256") and meta["data_sha256"] != sha:
        raise ConfigError("suite.toml data_sha256", meta["data_sha256"], f"the hash of {data.name} ({sha})")
    held = set(meta.get("split", {}).get("held_out_families", []))
    with data.open(newline="") as fh:
        raw_rows = list(csv.DictReader(fh))
    rows = []
    for raw in raw_rows:
        fam = family_of(raw)
        rows.append(CiRow(int(raw["id"]), raw, fam, "held-out" if fam in held else "fit", d))
    return CiSuite(rows, data, sha, meta)


@dataclass
class CiResult:
    row: CiRow
    status: str
    reason: str = ""
    simulated: float = math.nan  # step time, seconds
    notes: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> float:
        """simulated / measured - 1 on the step time (NaN when not simulated)."""
        return self.simulated / self.row.measured - 1.0 if math.isfinite(self.simulated) else math.nan

    def as_dict(self) -> dict[str, Any]:
        r = self.row.raw
        return {"row": self.row.id, "case": r["case"], "model_dir": r["model_dir"], "environment": r["environment"],
                "gpu": r["gpu"], "gpus": r["gpus"], "group": self.row.group, "family": self.row.family,
                "split": self.row.split, "layout": self.row.layout, "microbatches": r["microbatches"],
                "measured_s": self.row.measured, "simulated_s": self.simulated, "error": self.error,
                "window_cv": float(r["window_cv"]), "gated": r["gated"], "status": self.status, "reason": self.reason,
                "notes": "; ".join(self.notes), "golden_path": r["golden_path"], "golden_commit": r["golden_commit"]}


def row_run(row: CiRow, profiles: dict[str, str] | None = None):
    """The MegatronRun of a row (read from its flags file), or the reason it cannot be expressed."""
    from dcpsim.export.reader import read_megatron

    r = row.raw
    if r["model_dir"] not in GPT_SCRIPT_FOLDERS:
        return None, f"model folder {r['model_dir']!r} uses another training script (not pretrain_gpt.py)"
    if not r["gpus"]:
        return None, "GPU count unknown (no recipe lists this case at the snapshot)"
    if not r["flags_file"]:
        return None, "no model_config.yaml"
    gpu = GPU_PROFILES[r["gpu"]]
    gpu = (profiles or {}).get(gpu, gpu)
    try:
        return read_megatron(row.folder / r["flags_file"], gpus=int(r["gpus"]), gpu=gpu), ""
    except ConfigError as exc:
        lead = "a flag dcpsim can model ("
        if exc.expected.startswith(lead):  # a refused flag: name it and say why
            return None, f"{exc.field}: {exc.expected[len(lead):-1]}"
        return None, f"{exc.field} = {exc.value!r}: expected {exc.expected}"


def _run_row(row: CiRow, profiles: dict[str, str] | None) -> CiResult:
    from dcpsim.errors import DcpsimError
    from dcpsim.run.single import run_simulation

    run, reason = row_run(row, profiles)
    if run is None:
        return CiResult(row, STATUS_UNEXPRESSIBLE, reason)
    try:
        res = run_simulation(run.config, allow_infeasible=True)
    except DcpsimError as exc:
        return CiResult(row, STATUS_UNEXPRESSIBLE, f"simulator refused: {exc}", notes=run.notes)
    s = dict(res.summary)
    sim = float(s["iteration_time_s"])
    pad = sum(int(p.meta.get("padding_steps", 0) or 0) for p in res.plans)
    if pad:
        return CiResult(row, STATUS_UNEXPRESSIBLE, f"VP rule: microbatches per pipeline not a multiple of pp ({pad} "
                        "empty steps padded)", sim, run.notes, s)
    if s.get("packs_over_memory", 0):
        return CiResult(row, STATUS_MEMORY, f"memory model: {s.get('peak_memory_gib', math.nan):.1f} GiB per GPU over "
                        "the usable HBM (the real run fit)", sim, run.notes, s)
    return CiResult(row, STATUS_OK, "", sim, run.notes, s)


@dataclass
class CiReplay:
    rows: list[CiResult]
    suite: CiSuite
    wall_s: float

    def stats(self, by: str = "group") -> list[dict[str, Any]]:
        """Mean and worst |error| (and the mean signed error) per ``by`` over compared rows."""
        errs: dict[str, list[float]] = {}
        counts: dict[str, dict[str, int]] = {}
        for r in self.rows:
            key = str(r.as_dict()[by])
            counts.setdefault(key, {}).setdefault(r.status, 0)
            counts[key][r.status] += 1
            if r.status in COMPARED:
                errs.setdefault(key, []).append(r.error)
        out = []
        for key in sorted(counts):
            e = errs.get(key, [])
            out.append({by: key, "compared": len(e),
                        "mean_abs_error": sum(abs(x) for x in e) / len(e) if e else math.nan,
                        "worst_abs_error": max((abs(x) for x in e), default=math.nan),
                        "mean_error": sum(e) / len(e) if e else math.nan,
                        "not_compared": sum(v for k, v in counts[key].items() if k not in COMPARED)})
        return out

    def split_by_gpu(self) -> list[dict[str, Any]]:
        """The split table per GPU (fit and held-out apart, each GPU apart)."""
        out = []
        for gpu in sorted({r.row.raw["gpu"] for r in self.rows}):
            sub = CiReplay([r for r in self.rows if r.row.raw["gpu"] == gpu], self.suite, 0.0)
            out += [{"gpu": gpu, **s} for s in sub.stats("split")]
        return out

    def overall(self) -> dict[str, Any]:
        e = [abs(r.error) for r in self.rows if r.status in COMPARED]
        return {"rows": len(self.rows), "compared": len(e),
                "memory": sum(r.status == STATUS_MEMORY for r in self.rows),
                "unexpressible": sum(r.status == STATUS_UNEXPRESSIBLE for r in self.rows),
                "mean_abs_error": sum(e) / len(e) if e else math.nan, "worst_abs_error": max(e, default=math.nan),
                "wall_s": self.wall_s, "data_sha256": self.suite.data_sha256,
                "snapshot": self.suite.meta.get("snapshot", "")}

    def reasons(self) -> list[dict[str, Any]]:
        """Why rows are not compared: reason -> count."""
        c: dict[str, int] = {}
        for r in self.rows:
            if r.status == STATUS_UNEXPRESSIBLE:
                c[r.reason] = c.get(r.reason, 0) + 1
        return [{"reason": k, "rows": v} for k, v in sorted(c.items(), key=lambda kv: -kv[1])]

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall(), "groups": self.stats("group"), "splits": self.split_by_gpu(),
                "not_compared": self.reasons(), "rows": [r.as_dict() for r in self.rows]}

    def markdown(self) -> str:
        o = self.overall()
        lines = ["# dcpsim against Megatron-LM's CI step times", "",
                 f"{o['snapshot']}; data sha256 `{o['data_sha256'][:16]}`: {o['rows']} rows, {o['compared']} compared "
                 f"({o['memory']} flagged by the memory model), {o['unexpressible']} not expressible. "
                 "Error = simulated / measured - 1 on the step time (median over the CI's window).", "",
                 "## Per group (GPU, environment, GB200 nodes x GPUs)", "",
                 "| group | compared | mean abs error | worst abs error | mean error | not compared |",
                 "|---|---:|---:|---:|---:|---:|"]
        for s in self.stats("group"):
            lines.append(f"| {s['group']} | {s['compared']} | {_pct(s['mean_abs_error'])} | {_pct(s['worst_abs_error'])} "
                         f"| {_pct(s['mean_error'], True)} | {s['not_compared']} |")
        lines += ["", "## Per split and GPU (split declared in suite.toml by layout family)", "",
                  "| GPU | split | compared | mean abs error | worst abs error | mean error |", "|---|---|---:|---:|---:|---:|"]
        for s in self.split_by_gpu():
            lines.append(f"| {s['gpu']} | {s['split']} | {s['compared']} | {_pct(s['mean_abs_error'])} | "
                         f"{_pct(s['worst_abs_error'])} | {_pct(s['mean_error'], True)} |")
        lines += ["", "## Not compared", "", "| reason | rows |", "|---|---:|"]
        lines += [f"| {x['reason']} | {x['rows']} |" for x in self.reasons()]
        lines += ["", "## Rows", "", "| row | case | env | GPU | GPUs | layout | µb | measured s | simulated s | error | split | status |",
                  "|---:|---|---|---|---:|---|---:|---:|---:|---:|---|---|"]
        for r in self.rows:
            if r.status not in COMPARED:
                continue
            d = r.as_dict()
            lines.append(f"| {d['row']} | {d['case']} | {d['environment']} | {d['gpu']} | {d['gpus']} | {d['layout']} | "
                         f"{d['microbatches']} | {d['measured_s']:.4f} | {d['simulated_s']:.4f} | {_pct(d['error'], True)} "
                         f"| {d['split']} | {d['status']} |")
        return "\n".join(lines) + "\n"

    def parity_plot(self, path: Path) -> Path:
        """Simulated vs measured step time, log axes, the +-10% band; fit filled, held-out open markers
        (:func:`dcpsim.report.published.parity_plot`)."""
        import pandas as pd

        from dcpsim.report.published import parity_plot

        df = pd.DataFrame([{"measured": r.row.measured, "simulated": r.simulated, "group": r.row.group,
                            "split": r.row.split} for r in self.rows if r.status in COMPARED],
                          columns=["measured", "simulated", "group", "split"])
        o = self.overall()
        return parity_plot(df, path, title=f"{o['compared']} rows: mean |err| {_pct(o['mean_abs_error'])}, "
                                           f"worst {_pct(o['worst_abs_error'])}",
                           xlabel="measured step time, s (Megatron-LM CI golden values)",
                           ylabel="simulated step time, s (dcpsim)", empty_range=(1e-3 / 1.5, 15.0))

    def write(self, out: str | Path) -> list[Path]:
        """CSV + Markdown + JSON + parity plot into ``out`` (atomic, :mod:`dcpsim.outdir`)."""
        from dcpsim.outdir import check_out_dir, write_text
        from dcpsim.serialize import to_jsonable

        out = check_out_dir(out)
        paths = [out / "megatron_ci_validation.csv", out / "megatron_ci_validation.md",
                 out / "megatron_ci_validation.json"]
        rows = [r.as_dict() for r in self.rows]
        cols = list(rows[0]) if rows else []
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        write_text(paths[0], buf.getvalue())
        write_text(paths[1], self.markdown())
        write_text(paths[2], json.dumps(to_jsonable(self.to_json()), indent=1))
        plot = self.parity_plot(out / "megatron_ci_parity.png")
        return [*paths, plot]


def _pct(v: float, signed: bool = False) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v * 100:+.1f}%" if signed else f"{v * 100:.1f}%"


def replay_ci(*, suite_dir: str | Path | None = None, gpus: list[str] | None = None, split: str | None = None,
              profiles: dict[str, str] | None = None) -> CiReplay:
    """Replay the suite's rows (optionally only GPUs in ``gpus``, e.g. ["H100"], or one ``split``)."""
    t0 = time.perf_counter()
    suite = load_ci_suite(suite_dir)
    rows = [r for r in suite.rows if (gpus is None or r.raw["gpu"] in gpus) and (split is None or r.split == split)]
    return CiReplay([_run_row(r, profiles) for r in rows], suite, time.perf_counter() - t0)
