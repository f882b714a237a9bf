"""CPU seconds of the README's ``dcpsim plan`` example, this tree against a baseline checkout, alternating.

    .venv/bin/python benchmarks/bench_plan_readme.py --baseline /path/to/old/checkout --repeats 5 \\
        --json benchmarks/results/plan/readme_example_issue24.json

Each repeat runs the command below in a fresh process per tree (``PYTHONPATH`` = the tree), old and new
one after the other, and measures the user + system CPU time of that process and every process it
reaped (the fork server and, through it, the workers: ``dcpsim plan`` reaps them) and its wall time.
Reported per tree: median, minimum and maximum over the repeats, the host's CPU model and
load, the commits. The plans are compared too: the JSON outputs of the two trees, less the searches'
own CPU-time column, must be identical (``identical_outputs``).
Target (issue 24): <= 10 CPU s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)

COMMAND = ["plan", "--model", "llama-13b", "--seq-len", "4096", "--gbs-tokens", "4Mi", "--tokens", "1T",
           "--gpus", "h100-sxm:2.5,h200-sxm:3.5,b200:5.0", "--sizes", "512,1024,2048,4096", "--deadline", "30d",
           "-j", "2"]
TARGET_CPU_S = 10.0


def cpu_model() -> str:
    """The host CPU's model name (lscpu, else /proc/cpuinfo, else platform)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit_of(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       check=False)
    return r.stdout.strip() or "unknown"


def run_once(tree: Path, out_json: Path) -> dict:
    """One run of the command in ``tree``: CPU (user + sys, this child and what it reaped) and wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(out_json, "w") as f:
        r = subprocess.run([sys.executable, "-m", "dcpsim.cli", *COMMAND, "--no-progress", "--json"], cwd=tree,
                           env=env, stdout=f, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"error: the plan failed in {tree} (status {r.returncode}): {r.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu, "wall_s": wall, "load_1min_before": load}


def plan_without_timings(path: Path) -> dict:
    """The plan's JSON less the host-measured figures (each search's CPU seconds)."""

    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "search_cpu_s"}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    return strip(json.loads(path.read_text()))


def summary(runs: list[dict], key: str) -> dict:
    vals = [r[key] for r in runs]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="a checkout of the tree to compare with (the old code)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    trees = {"old": Path(a.baseline).resolve(), "new": Path(__file__).resolve().parents[1]}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    identical = True
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.repeats):
            for name, tree in trees.items():
                out = Path(d) / f"{name}-{i}.json"
                runs[name].append(run_once(tree, out))
                r = runs[name][-1]
                print(f"{name} #{i + 1}: {r['cpu_s']:.1f} CPU s, {r['wall_s']:.1f} s wall "
                      f"(load before {r['load_1min_before']:.1f})", flush=True)
            identical &= plan_without_timings(Path(d) / f"old-{i}.json") == plan_without_timings(Path(d) / f"new-{i}.json")
    res = {"command": "dcpsim " + " ".join(COMMAND),
           "measured_with": "resource.getrusage(RUSAGE_CHILDREN) around each run: user + sys of the CLI process and "
                            "every process it reaped (fork server, workers)",
           "cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
           "commits": {k: commit_of(t) for k, t in trees.items()}, "repeats": a.repeats,
           "identical_outputs": identical, "target_cpu_s": TARGET_CPU_S,
           **{name: {"cpu_s": summary(rs, "cpu_s"), "wall_s": summary(rs, "wall_s"), "runs": rs}
              for name, rs in runs.items()}}
    res["cpu_speedup_median"] = res["old"]["cpu_s"]["median"] / res["new"]["cpu_s"]["median"]
    for name in trees:
        c, w = res[name]["cpu_s"], res[name]["wall_s"]
        print(f"{name} ({res['commits'][name]}): CPU {c['median']:.1f} s (range {c['min']:.1f}-{c['max']:.1f}), "
              f"wall {w['median']:.1f} s (range {w['min']:.1f}-{w['max']:.1f})")
    print(f"CPU speed-up {res['cpu_speedup_median']:.2f}x; outputs identical: {identical}; CPU: {res['cpu']}")
    save_result(a.json, res, indent=2)


if __name__ == "__main__":
    main()
