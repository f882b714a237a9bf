"""Sweep throughput of this tree against a baseline checkout: each tree's own ``bench_sweep.py``, alternating.

    .venv/bin/python benchmarks/bench_sweep_ab.py --baseline /path/to/old/checkout --rounds 2 --repeat 5 \\
        --json benchmarks/results/sweep/issue24_ab.json

Per round, ``bench_sweep.py --runs 120 --jobs 2 --repeat R`` runs in a fresh process for the old tree,
then for the new one (``PYTHONPATH`` = the tree, each tree's own script), on the same host back to back.
Reported per tree: median, minimum and maximum runs per minute over all its repeats (each repeat one
sweep of 120 runs in a temporary folder; the first of a process also starts the fork server), the median
CPU seconds per run, the host's CPU model and load. Target (issue 24): new >= 2x old runs/min.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)
from bench_plan_readme import commit_of, cpu_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="a checkout of the tree to compare with (the old code)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=120)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    trees = {"old": Path(a.baseline).resolve(), "new": Path(__file__).resolve().parents[1]}
    reps: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            for name, tree in trees.items():
                out = Path(d) / f"{name}-{i}.json"
                env = dict(os.environ, PYTHONPATH=str(tree))
                r = subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_sweep.py"), "--runs", str(a.runs),
                                    "--jobs", "2", "--repeat", str(a.repeat), "--json", str(out)], cwd=tree, env=env,
                                   capture_output=True, text=True, check=False)
                if r.returncode:
                    raise SystemExit(f"error: bench_sweep.py failed in {tree}: {r.stderr.strip()[-400:]}")
                got = json.loads(out.read_text())["results"][0]["repeats"]
                reps[name] += got
                print(f"{name} round {i + 1}: " + r.stdout.strip().splitlines()[-1][:160], flush=True)
    res = {"benchmark": f"bench_sweep.py --runs {a.runs} --jobs 2 --repeat {a.repeat}, {a.rounds} rounds per tree, "
                        "old and new alternating",
           "cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
           "commits": {k: commit_of(t) for k, t in trees.items()}}
    for name, rs in reps.items():
        rpm = [r["runs_per_min"] for r in rs]
        res[name] = {"runs_per_min": {"median": statistics.median(rpm), "min": min(rpm), "max": max(rpm)},
                     "cpu_s_per_run_median": statistics.median(r["cpu_s_median"] for r in rs),
                     "wall_s_per_sweep_median": statistics.median(r["wall_s"] for r in rs),
                     "load_after": [r["load_avg_1min_after"] for r in rs], "repeats": rs}
    res["speedup_runs_per_min_median"] = res["new"]["runs_per_min"]["median"] / res["old"]["runs_per_min"]["median"]
    for name in trees:
        m = res[name]["runs_per_min"]
        print(f"{name} ({res['commits'][name]}): {m['median']:.0f} runs/min (range {m['min']:.0f}-{m['max']:.0f}), "
              f"CPU per run {res[name]['cpu_s_per_run_median'] * 1e3:.1f} ms")
    print(f"speed-up {res['speedup_runs_per_min_median']:.2f}x (target 2x); CPU: {res['cpu']}")
    save_result(a.json, res, indent=2)


if __name__ == "__main__":
    main()
