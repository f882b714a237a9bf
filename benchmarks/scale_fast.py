"""Issue 13 scale target: one iteration, weak scaling (4 sequences per GPU), Llama-13B, every policy, fast path.

Run (each policy in a fresh process, so that its peak memory is its own)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_fast.py [--gpus 65536] [--policies packing,dynamic,...]
        [--engine fast] [--json out.json]

Layout: tp 1, pp 8, cp 8 (dp = GPUs/64), H100, ``github`` lengths, gbs =
4 × GPUs sequences, one iteration, seed 0, ``planning = "ignore"``. For each
policy it reports the whole :func:`~dcpsim.run.single.run_simulation` wall
time and CPU time of the process (sampling, planning, durations, schedule evaluation, tables) after a
warm-up run at 64 GPUs in the same process (imports of pandas/scipy and the
profile curves, about 1.3–5 s on this machine, are not part of an
iteration), the planning and simulation parts, and the process's peak
resident memory (``ru_maxrss``, imports and warm-up included). Targets: ≤ 5 s and ≤ 1 GB at 65,536 GPUs.

``milp`` is left out by default: it is an exact solver for small batches (its
model grows with sequences × steps) and refuses batches this size by design.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)

POLICIES = ("packing", "packing-balanced", "dynamic", "dynamic-solver", "dynamic-pr2959", "bound")


def one(gpus: int, policy: str, engine: str) -> dict:
    import resource
    import time

    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    def cfg(n: int) -> RunConfig:
        return RunConfig().with_updates({"cluster.gpus": n, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1,
                                         "policy.name": policy, "workload.gbs": 4 * n, "sim.iterations": 1,
                                         "sim.seed": 0, "sim.planning": "ignore", "sim.engine": engine})

    run_simulation(cfg(64))  # imports (pandas, scipy) and profile curves: not part of one iteration
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_simulation(cfg(gpus))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary
    return {"gpus": gpus, "policy": policy, "engine": engine, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "planning_wall_s": round(s["planning_wall_s"], 3), "sim_wall_s": round(s["sim_wall_s"], 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "iteration_time_s": s["iteration_time_s"], "tflops_per_gpu": s["tflops_per_gpu"],
            "steps": s.get("steps"), "groups": s.get("groups")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=65536)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--engine", default="fast", choices=("fast", "events", "auto"))
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    if a.child:
        print(json.dumps(one(a.gpus, a.child, a.engine)))
        return
    rows = []
    print(f"{'policy':16s} {'wall_s':>7s} {'cpu_s':>7s} {'plan_s':>7s} {'sim_s':>7s} {'peak_MB':>8s} {'steps':>6s} {'groups':>8s} {'TFLOPS':>7s}")
    for p in a.policies.split(","):
        out = subprocess.run([sys.executable, __file__, "--gpus", str(a.gpus), "--engine", a.engine, "--child", p],
                             capture_output=True, text=True, check=False)
        if out.returncode:
            print(f"{p:16s} FAILED: {out.stderr.strip().splitlines()[-1] if out.stderr else out.returncode}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{p:16s} {r['wall_s']:7.2f} {r['cpu_s']:7.2f} {r['planning_wall_s']:7.2f} {r['sim_wall_s']:7.2f} {r['peak_rss_mb']:8.0f} "
              f"{r['steps'] or 0:6.0f} {r['groups'] or 0:8.0f} {r['tflops_per_gpu']:7.1f}")
    save_result(a.json, rows, indent=2)


if __name__ == "__main__":
    main()
