"""Sweep throughput: runs per minute of a 512-GPU configuration with -j 1 and -j 2.

    .venv/bin/python benchmarks/bench_sweep.py                  # 1,000 runs per setting
    .venv/bin/python benchmarks/bench_sweep.py --runs 100 --repeat 3

Configuration: Llama-13B on H100 SXM, 512 GPUs = TP 1 x PP 8 x CP 2 x DP 32,
GitHub workload, global batch 256 sequences (max 131072 tokens, M = 65536),
one iteration per run; half the runs packing, half dynamic; each run a
different seed (so every run is distinct). Reported per setting: wall time of
the whole sweep (pool start-up, parquet parts and all), runs per minute, and
the median and interquartile range of the per-run simulation time, the
median CPU time per run, and the machine's load average (the numbers are only
comparable on an otherwise idle machine). With
``--repeat`` the sweep is repeated and the median and range of runs per minute
are reported.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)

from dcpsim.run.sweep import SweepOptions, load_results, run_sweep, sweep_spec_from_dict

BASE = {
    "model": {"name": "llama-13b"},
    "hardware": {"gpu": "h100-sxm"},
    "cluster": {"gpus": 512},
    "parallel": {"tp": 1, "pp": 8, "cp": 2, "max_tokens_per_rank": 65536},
    "workload": {"name": "github", "gbs": 256, "max_len": 131072},
    "sim": {"iterations": 1},
}


def spec_for(runs: int, seed0: int = 0):
    half = runs // 2
    return sweep_spec_from_dict({
        "base": BASE,
        "sweep": {"name": f"bench-{runs}"},
        "axes": [{"policy": {"name": ["packing", "dynamic"]}, "sim": {"seed": list(range(seed0, seed0 + half))}}],
    })


def bench(runs: int, jobs: int, seed0: int) -> dict:
    spec = spec_for(runs, seed0)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = run_sweep(spec, Path(d) / "out", SweepOptions(jobs=jobs, progress=False, figures=False, compact=False))
        wall = time.perf_counter() - t0
        df = load_results(Path(d) / "out")
    per_run = df["wall_s"].to_numpy(float)
    cpu = df["cpu_s"].to_numpy(float)
    return {"jobs": jobs, "runs": res.n_done, "ok": res.counts.get("ok", 0), "wall_s": wall,
            "runs_per_min": 60.0 * res.n_done / wall, "batches": res.batches,
            "run_s_median": float(np.median(per_run)), "run_s_p25": float(np.percentile(per_run, 25)),
            "run_s_p75": float(np.percentile(per_run, 75)), "cpu_s_median": float(np.median(cpu)),
            "load_avg_1min_after": os.getloadavg()[0], "counts": res.counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args()
    check_result_path(args.json, "--json")
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "config": BASE, "runs": args.runs, "results": []}
    for j in (int(x) for x in args.jobs.split(",")):
        reps = [bench(args.runs, j, seed0=1000 * r) for r in range(args.repeat)]
        rpm = [r["runs_per_min"] for r in reps]
        summary = {"jobs": j, "runs_per_min_median": statistics.median(rpm), "runs_per_min_min": min(rpm),
                   "runs_per_min_max": max(rpm), "repeats": reps}
        out["results"].append(summary)
        r0 = reps[len(reps) // 2]
        print(f"-j {j}: {summary['runs_per_min_median']:.1f} runs/min (range {min(rpm):.1f}-{max(rpm):.1f}, "
              f"{args.repeat} repeat(s)); per run median {r0['run_s_median']:.3f} s "
              f"(IQR {r0['run_s_p25']:.3f}-{r0['run_s_p75']:.3f}); {r0['runs']} runs in {r0['wall_s']:.1f} s, "
              f"{r0['batches']} tasks; CPU per run median {r0['cpu_s_median']:.3f} s; "
              f"load average after {r0['load_avg_1min_after']:.1f}; {r0['counts']}", flush=True)
    save_result(args.json, out, indent=2)


if __name__ == "__main__":
    main()
