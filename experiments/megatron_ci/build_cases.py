"""Build ``cases.csv`` and ``flags/`` of the Megatron-LM CI suite from a Megatron-LM git snapshot.

Run (needs a local clone or bare mirror of NVIDIA/Megatron-LM; nothing is downloaded)::

    python experiments/megatron_ci/build_cases.py --git-dir /path/to/Megatron-LM/.git \
        --commit d98e8a64ddf34856e74b24714e3bedb2f5a39553

Reads, at ``--commit`` only (``git show`` / ``git ls-tree`` / ``git log``):

* ``tests/functional_tests/test_cases/<model>/<case>/golden_values_<env>_<platform>.json``: the
  ``iteration-time`` series (platforms dgx_h100, dgx_a100, dgx_gb200; the first run's file, not ``_2nd``);
* ``.../<case>/model_config.yaml``: ``MODEL_ARGS`` (the run's flags), ``ENV_VARS``, ``TEST_TYPE``, ``METRICS``;
* ``tests/test_utils/recipes/{h100,gb200}/*.yaml``: ``spec.nodes`` x ``spec.gpus`` of the recipe listing the case.

and writes, beside this script, one CSV row per golden file (the facts: where from, which commit, the
CI-window median of the step time, GPU count, the layout read from the flags) and one argument-list file per
case directory (``flags/<model>__<case>.args``: the ``MODEL_ARGS`` as the CI's launcher passes them to
``pretrain_gpt.py``, one ``--flag [value]`` a line). The window rule is the CI's own
(``tests/functional_tests/python_test_utils/common.py``): over the finite steps of the series, steps 5-20 when
the last finite step is <= 25, else steps 30-45; if none falls inside, the first four finite steps at or after
the window's start. The median is taken over those steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shlex
import statistics
import subprocess
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CASES = "tests/functional_tests/test_cases"
RECIPES = "tests/test_utils/recipes"
PLATFORMS = {"dgx_h100": ("H100", "h100"), "dgx_a100": ("A100", "h100"), "dgx_gb200": ("GB200", "gb200")}
GOLDEN = re.compile(r"^golden_values_(dev|lts)_(dgx_h100|dgx_a100|dgx_gb200)\.json$")
COLUMNS = [
    "id", "model_dir", "case", "environment", "platform", "gpu", "nodes", "gpus_per_node", "gpus",
    "median_iteration_time_s", "window", "window_steps", "window_cv", "series_first_step", "series_last_step",
    "gated", "test_type", "num_layers", "hidden", "heads", "seq_len", "mbs", "gbs", "tp", "pp", "cp", "ep", "vp_layers",
    "dp", "microbatches", "env", "flags_file", "golden_path", "golden_commit", "config_path", "config_commit",
    "recipe_path", "recipe_lists_platform", "snapshot_commit",
]


def git(gd: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={gd}", *args], check=True, capture_output=True, text=True).stdout


def last_commits(gd: str, commit: str, prefix: str) -> dict[str, str]:
    """path -> the newest commit (at or before ``commit``) that changed it, for every path under ``prefix``."""
    out: dict[str, str] = {}
    cur = ""
    for line in git(gd, "log", "--format=@%H", "--name-only", commit, "--", prefix).splitlines():
        if line.startswith("@"):
            cur = line[1:]
        elif line.strip() and line not in out:
            out[line] = cur
    return out


def window_median(values: dict[int, float]) -> tuple[float, str, list[int], float]:
    """The CI's comparison value of an iteration-time series: median over its steady window (see module doc)."""
    finite = sorted(s for s, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v))
    if not finite:
        return math.nan, "", [], math.nan
    win = range(5, 21) if finite[-1] <= 25 else range(30, 46)
    steps = [s for s in finite if s in win] or [s for s in finite if s >= win.start][:4]
    if not steps:
        return math.nan, f"{win.start}-{win.stop - 1}", [], math.nan
    xs = [float(values[s]) for s in steps]
    mean = sum(xs) / len(xs)
    cv = statistics.pstdev(xs) / mean if mean > 0 else math.nan
    return float(statistics.median(xs)), f"{win.start}-{win.stop - 1}", steps, cv


def series(golden: dict) -> dict[int, float] | None:
    it = golden.get("iteration-time")
    if not isinstance(it, dict) or "values" not in it:
        return None
    vals = it["values"]
    if isinstance(vals, list):  # old format: start_step + i * step_interval
        start, step = int(it.get("start_step", 0)), int(it.get("step_interval", 1))
        return {start + i * step: (v if not isinstance(v, str) else math.nan) for i, v in enumerate(vals)}
    return {int(k): (v if not isinstance(v, str) else math.nan) for k, v in vals.items()}


def arg_lines(model_args: dict) -> list[str]:
    """MODEL_ARGS as the CI launcher turns them into arguments: ``true`` -> the bare flag, ``[a b]`` -> values."""
    lines = []
    for key, value in model_args.items():
        if value is True:
            lines.append(shlex.quote(str(key)))
        elif value is False:
            lines.append(shlex.join([str(key), "false"]))
        elif isinstance(value, list):
            lines.append(shlex.join([str(key), *(str(v) for v in value)]))
        elif isinstance(value, dict):
            lines.append(shlex.join([str(key), json.dumps(value, separators=(",", ":"))]))
        else:
            text = str(value).strip()
            if re.fullmatch(r"\[[^]]+\]", text):
                lines.append(shlex.join([str(key), *text[1:-1].split()]))
            else:
                lines.append(shlex.join([str(key), text]))
    return lines


def recipes(gd: str, commit: str) -> dict[tuple[str, str, str], tuple[int, int, str, bool]]:
    """(folder, model, case) -> (nodes, gpus per node, recipe path, platforms listed) from every recipe file."""
    out: dict[tuple[str, str, str], tuple[int, int, str, bool]] = {}
    for path in git(gd, "ls-tree", "-r", "--name-only", commit, RECIPES).split():
        folder = path.split("/")[-2]
        if folder not in ("h100", "gb200") or not path.endswith(".yaml"):
            continue
        doc = yaml.safe_load(git(gd, "show", f"{commit}:{path}"))
        spec = doc.get("spec", {}) if isinstance(doc, dict) else {}
        if not spec.get("model") or "nodes" not in spec or "gpus" not in spec:
            continue
        default_platform = spec.get("platforms")
        for entry in doc.get("products", []) or []:
            names = entry.get("test_case", [])
            plats = set()
            for prod in entry.get("products", []) or []:
                plats.update(prod.get("platforms", [default_platform]) or [default_platform])
            for name in names:
                for plat in plats:
                    out[(plat, spec["model"], name)] = (int(spec["nodes"]), int(spec["gpus"]), path, True)
                out.setdefault((folder, spec["model"], name), (int(spec["nodes"]), int(spec["gpus"]), path, False))
    return out


def to_int(v, default: int | None = None) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def build(gd: str, commit: str) -> list[dict]:
    files = git(gd, "ls-tree", "-r", "--name-only", commit, CASES).split("\n")
    changed = last_commits(gd, commit, CASES)
    rec = recipes(gd, commit)
    rows: list[dict] = []
    flags_dir = HERE / "flags"
    flags_dir.mkdir(exist_ok=True)
    for path in sorted(files):
        m = GOLDEN.match(path.rsplit("/", 1)[-1])
        if not m:
            continue
        env, platform = m.groups()
        parts = path.split("/")
        model_dir, case = parts[-3], parts[-2]
        try:
            golden = json.loads(git(gd, "show", f"{commit}:{path}"))
        except json.JSONDecodeError:  # a few golden files are empty
            continue
        vals = series(golden) if isinstance(golden, dict) else None
        if not vals:
            continue
        median, window, steps, cv = window_median(vals)
        if not steps:
            continue
        cfg_path = f"{CASES}/{model_dir}/{case}/model_config.yaml"
        try:
            cfg = yaml.safe_load(git(gd, "show", f"{commit}:{cfg_path}"))
        except subprocess.CalledProcessError:
            cfg = None
        margs = (cfg or {}).get("MODEL_ARGS") or {}
        gpu, folder = PLATFORMS[platform]
        r = rec.get((platform, model_dir, case)) or rec.get((folder, model_dir, case))
        nodes, gpn, rpath, listed = r if r else (None, None, "", False)
        flags_file = ""
        if margs:
            flags_file = f"flags/{model_dir}__{case}.args"
            (HERE / flags_file).write_text("\n".join(arg_lines(margs)) + "\n")
        tp = to_int(margs.get("--tensor-model-parallel-size"), 1)
        pp = to_int(margs.get("--pipeline-model-parallel-size"), 1)
        cp = to_int(margs.get("--context-parallel-size"), 1)
        ep = to_int(margs.get("--expert-model-parallel-size"), 1)
        gpus = nodes * gpn if nodes else None
        dp = gpus // (tp * pp * cp) if gpus and tp and pp and cp and gpus % (tp * pp * cp) == 0 else None
        mbs, gbs = to_int(margs.get("--micro-batch-size")), to_int(margs.get("--global-batch-size"))
        micro = gbs // (mbs * dp) if dp and mbs and gbs and gbs % (mbs * dp) == 0 else None
        metrics = (cfg or {}).get("METRICS")
        rows.append({
            "model_dir": model_dir, "case": case, "environment": env, "platform": platform, "gpu": gpu,
            "nodes": nodes or "", "gpus_per_node": gpn or "", "gpus": gpus or "",
            "median_iteration_time_s": f"{median:.5f}", "window": window,
            "window_steps": f"{steps[0]}-{steps[-1]} ({len(steps)})", "window_cv": f"{cv:.4f}",
            "series_first_step": min(vals), "series_last_step": max(vals),
            "gated": "yes" if isinstance(metrics, list) and "iteration-time" in metrics else "no",
            "test_type": str((cfg or {}).get("TEST_TYPE", "")).strip(),
            "num_layers": margs.get("--num-layers", ""), "hidden": margs.get("--hidden-size", ""),
            "heads": margs.get("--num-attention-heads", ""), "seq_len": margs.get("--seq-length", ""),
            "mbs": mbs or "", "gbs": gbs or "", "tp": tp, "pp": pp, "cp": cp, "ep": ep,
            "vp_layers": margs.get("--num-layers-per-virtual-pipeline-stage", ""), "dp": dp or "",
            "microbatches": micro or "",
            "env": json.dumps({str(k): str(v) for k, v in ((cfg or {}).get("ENV_VARS") or {}).items()},
                              separators=(",", ":")),
            "flags_file": flags_file, "golden_path": path, "golden_commit": changed.get(path, ""),
            "config_path": cfg_path if cfg else "", "config_commit": changed.get(cfg_path, "") if cfg else "",
            "recipe_path": rpath, "recipe_lists_platform": "yes" if listed else "no", "snapshot_commit": commit,
        })
    rows.sort(key=lambda r: (r["platform"], r["model_dir"], r["case"], r["environment"]))
    for i, r in enumerate(rows, start=1):
        r["id"] = i
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", required=True, help="Megatron-LM .git folder (or bare mirror)")
    ap.add_argument("--commit", required=True, help="snapshot commit (40 hex digits)")
    args = ap.parse_args()
    rows = build(args.git_dir, args.commit)
    with (HERE / "cases.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    by = {}
    for r in rows:
        by[r["platform"]] = by.get(r["platform"], 0) + 1
    print(f"wrote {len(rows)} rows to {HERE / 'cases.csv'}: {by}")


if __name__ == "__main__":
    main()
