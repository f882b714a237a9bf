"""Issue 24 target: the shared network (``sim.network = "shared"``, events engine) within 5x of the ideal fast path.

Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_shared_network.py [--gpus 16384] [--repeats 3]
        [--policy dynamic] [--baseline /path/to/older/checkout [--baseline-repeats 1 | --alternate]] [--json out.json]

Configuration: :func:`network_speedup.run`'s (Llama-13B, tp 1, pp 8, cp 8, 4 sequences per GPU, github
lengths up to 65,536, pods of 64 GPUs at 1:1, seed 0, one iteration). Each measurement runs in a fresh
process (after a 64-GPU warm-up run there, so imports are not counted) and takes that iteration's CPU
seconds (``time.process_time``: planning, durations, simulation), so a loaded shared machine inflates it
far less than wall time. The ideal fast path and the shared network are measured alternately,
``--repeats`` times each; reported: median and min-max of each, the ratio of the medians, the iteration
times (equal between trees when the solver's results are unchanged) and the host's CPU model.
``--baseline DIR``: the same measurements with ``DIR`` first on ``PYTHONPATH`` (an older checkout), in the
same invocation, for before/after figures on one host under one load.
``--alternate`` (with ``--baseline``): ``--repeats`` rounds, each measuring this tree then ``DIR`` (ideal, then
shared), so a load that drifts during the run (a shared host) weighs on both trees alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _results import check_result_path, save_result  # benchmarks/_results.py
from bench_cli_help import cpu_model

HERE = Path(__file__).resolve().parent
CHILD = r"""
import json, resource, sys, time
from dcpsim.run import RunConfig
from dcpsim.run.single import run_simulation
gpus, policy, network, engine = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def cfg(n):
    return RunConfig().with_updates({
        "cluster.gpus": n, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1, "policy.name": policy,
        "workload.gbs": 4 * n, "workload.max_len": 65536, "parallel.max_tokens_per_rank": 16384,
        "sim.iterations": 1, "sim.seed": 0, "sim.planning": "ignore", "sim.network": network,
        "sim.engine": engine, "hardware.pod_gpus": 64, "hardware.oversubscription": 1.0})
run_simulation(cfg(64))
c0 = time.process_time()
s = run_simulation(cfg(gpus)).summary
cpu = time.process_time() - c0
print(json.dumps({"cpu_s": cpu, "iteration_time_s": s["iteration_time_s"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(tree: Path, gpus: int, policy: str, network: str, engine: str) -> dict:
    """One iteration in a fresh process with ``tree`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    # cwd = the tree: ``python -c`` puts the current folder first on the path, ahead of PYTHONPATH
    out = subprocess.run([sys.executable, "-c", CHILD, str(gpus), policy, network, engine], env=env, check=True,
                         capture_output=True, text=True, cwd=tree).stdout
    return json.loads(out.strip().splitlines()[-1])


def stats(xs: list[float]) -> dict:
    """Median and spread, CPU seconds."""
    return {"median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3), "max_s": round(max(xs), 3),
            "runs": [round(x, 3) for x in xs]}


def _commit(tree: Path) -> str:
    """The checkout's commit (and ``+changes`` when its work tree differs), or ``unknown``."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bench(tree: Path, gpus: int, policy: str, repeats: int) -> dict:
    ideal, shared = [], []
    for _ in range(repeats):
        ideal.append(measure(tree, gpus, policy, "ideal", "fast"))
        shared.append(measure(tree, gpus, policy, "shared", "events"))
    return summarise(tree, ideal, shared)


def summarise(tree: Path, ideal: list[dict], shared: list[dict]) -> dict:
    """Median and spread of each path's measurements, their ratio, iteration times and peak memory."""
    i, s = stats([r["cpu_s"] for r in ideal]), stats([r["cpu_s"] for r in shared])
    return {"tree": str(tree), "commit": _commit(tree), "ideal_fast": i, "shared_events": s, "ratio": round(s["median_s"] / i["median_s"], 2),
            "iteration_time_s": {"ideal": ideal[0]["iteration_time_s"], "shared": shared[0]["iteration_time_s"]},
            "peak_rss_mb": {"ideal": round(max(r["peak_rss_mb"] for r in ideal), 1),
                            "shared": round(max(r["peak_rss_mb"] for r in shared), 1)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--policy", default="dynamic")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="an older checkout measured the same way, for before/after")
    ap.add_argument("--baseline-repeats", type=int, default=1, help="repeats for --baseline (default 1)")
    ap.add_argument("--alternate", action="store_true",
                    help="with --baseline: measure the two trees in turn, --repeats rounds of (after, before), so a "
                         "load that drifts during the run weighs on both alike")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    check_result_path(a.json)
    trees = [("after", HERE.parent)] + ([("before", Path(a.baseline).resolve())] if a.baseline else [])
    res: dict = {"cpu": cpu_model(), "gpus": a.gpus, "policy": a.policy, "repeats": a.repeats, "target_ratio": 5.0}
    if a.alternate and a.baseline:
        got: dict = {name: ([], []) for name, _ in trees}
        for _ in range(a.repeats):
            for name, tree in trees:
                got[name][0].append(measure(tree, a.gpus, a.policy, "ideal", "fast"))
                got[name][1].append(measure(tree, a.gpus, a.policy, "shared", "events"))
        res["alternated"] = True
    for name, tree in trees:
        if a.alternate and a.baseline:
            r = res[name] = summarise(tree, *got[name])
        else:
            r = res[name] = bench(tree, a.gpus, a.policy, a.repeats if name == "after" else a.baseline_repeats)
        print(f"{name}: ideal fast {r['ideal_fast']['median_s']:.2f} CPU s ({r['ideal_fast']['min_s']:.2f}-"
              f"{r['ideal_fast']['max_s']:.2f}), shared {r['shared_events']['median_s']:.2f} CPU s "
              f"({r['shared_events']['min_s']:.2f}-{r['shared_events']['max_s']:.2f}), ratio {r['ratio']:.2f}; "
              f"iteration {r['iteration_time_s']['shared']!r} s shared", flush=True)
    print(res["cpu"])
    save_result(a.json, res)


if __name__ == "__main__":
    main()
