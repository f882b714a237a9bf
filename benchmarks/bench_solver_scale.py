"""Planning time of ``dynamic-solver`` on a weak-scaling batch (4 sequences per GPU), the placement at scale.

Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_solver_scale.py [--gpus 1024,4096,16384,65536]
        [--policy dynamic-solver] [--json out.json]

Layout as ``scale_fast.py``: Llama-13B on H100, tp 1, pp 8, cp 8 (dp = GPUs/64, so R = GPUs/8 ranks per
stage), ``github`` lengths, gbs = 4 × GPUs sequences, seed 0. Each size plans once in a fresh process and
reports the wall and CPU time of ``Policy.plan`` (the planner's own work; the lower bound is not
evaluated), the steps, groups and the modelled makespan. The growth exponent between consecutive sizes
is ``log(t2/t1)/log(n2/n1)`` of the CPU times (less disturbed by a busy machine than wall time): 1 is
linear in the batch.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)


def one(gpus: int, policy: str) -> dict:
    import time

    import numpy as np

    from dcpsim.policies import evaluate_plan, get_policy
    from dcpsim.run import RunConfig
    from dcpsim.run.single import build_cost_model, build_layout
    from dcpsim.workload import get_workload

    cfg = RunConfig().with_updates({"cluster.gpus": gpus, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1,
                                    "policy.name": policy, "workload.gbs": 4 * gpus})
    cost = build_cost_model(cfg)
    layout = build_layout(cfg, cost)
    lengths = get_workload(cfg.workload.name).sample(cfg.workload.gbs, np.random.default_rng(0))
    t0, c0 = time.perf_counter(), time.process_time()
    plan = get_policy(policy).plan(lengths, layout, cost)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"gpus": gpus, "ranks_per_stage": layout.ranks_per_stage, "sequences": int(lengths.size), "policy": policy,
            "plan_wall_s": round(wall, 3), "plan_cpu_s": round(cpu, 3), "steps": plan.n_steps,
            "groups": sum(len(s.groups) for s in plan.steps),
            "modelled_makespan_s": round(evaluate_plan(plan, cost).makespan_s, 6)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1024,4096,16384,65536")
    ap.add_argument("--policy", default="dynamic-solver")
    ap.add_argument("--json")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    if a.one:
        print(json.dumps(one(a.one, a.policy)))
        return
    rows = []
    for g in (int(x) for x in a.gpus.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(g), "--policy", a.policy],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if rows:
            p = rows[-1]
            r["growth_exponent"] = round(math.log(r["plan_cpu_s"] / p["plan_cpu_s"]) / math.log(r["sequences"] / p["sequences"]), 2)
        rows.append(r)
        print(json.dumps(r), flush=True)
    save_result(a.json, rows, indent=1)


if __name__ == "__main__":
    main()
