"""How the simulator's wall time grows with the cluster: one iteration of Llama-13B, gbs 2048.

Run (one core, as the issue asks)::

    taskset -c 0 .venv/bin/python benchmarks/scale_sim.py [--repeats 5] [--gpus 512,1024,...] [--json out.json]

For each GPU count (tp1 pp8 cp8, dp = GPUs/64) and policy (``packing``,
``dynamic``), runs :func:`~dcpsim.run.single.run_simulation` ``repeats``
times (same seed) and prints the median and the spread (min–max) of:

* ``wall_s``: the whole run (sampling, planning, durations, SimPy, tables);
* ``plan_s``: the policy's planning alone;
* ``sim_s``: the simulator alone (durations + graph + SimPy events);
* ``events`` and ``events/s`` (of ``sim_s``), recorded in every run's metadata.

With a fixed global batch of 2048 sequences, clusters of 512+ GPUs (tp1 pp8
cp8) give each DP rank a single microbatch, so the work per iteration barely
grows with the cluster; ``--weak`` scales the batch with the cluster (2048
sequences per 512 GPUs) to load the simulator with many more group ops.

Targets (issue 4): ``wall_s`` < 2 s at 4,096 GPUs and < 10 s at 16,384 GPUs,
growing no faster than the GPU count.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)

GPUS = (512, 1024, 2048, 4096, 8192, 16384)
POLICIES = ("packing", "dynamic")


def config(gpus: int, policy: str, gbs: int = 2048):
    from dcpsim.run import RunConfig

    return RunConfig().with_updates({"cluster.gpus": gpus, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1,
                                     "policy.name": policy, "workload.gbs": gbs, "sim.iterations": 1, "sim.seed": 0,
                                     "sim.engine": "events"})


def measure(gpus: int, policy: str, repeats: int, weak: bool = False) -> dict:
    from dcpsim.run.single import run_simulation

    gbs = 2048 * gpus // 512 if weak else 2048
    cfg = config(gpus, policy, gbs)
    run_simulation(cfg)  # warm caches (profile curves, imports)
    walls, plans, sims, evs = [], [], [], []
    s = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = run_simulation(cfg)
        walls.append(time.perf_counter() - t0)
        s = res.summary
        plans.append(s["planning_wall_s"])
        sims.append(s["sim_wall_s"])
        evs.append(s["events"])
    assert s is not None
    return {
        "gpus": gpus, "policy": policy, "gbs": gbs, "repeats": repeats,
        "wall_s_median": statistics.median(walls), "wall_s_min": min(walls), "wall_s_max": max(walls),
        "plan_s_median": statistics.median(plans), "sim_s_median": statistics.median(sims),
        "sim_s_min": min(sims), "sim_s_max": max(sims),
        "events": evs[0], "events_per_s": evs[0] / statistics.median(sims),
        "steps": s["steps"], "groups": s["groups"], "iteration_time_s": s["iteration_time_s"],
        "tflops_per_gpu": s["tflops_per_gpu"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gpus", default=",".join(map(str, GPUS)))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--weak", action="store_true",
                    help="weak scaling: gbs = 2048 x GPUs/512 (4 sequences per GPU) instead of a fixed 2048")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    a = ap.parse_args(argv)
    check_result_path(a.json, "--json")
    rows = [measure(int(g), p, a.repeats, a.weak) for p in a.policies.split(",") for g in a.gpus.split(",")]
    hdr = (f"{'policy':8} {'GPUs':>6} {'gbs':>6} {'wall_s med [min-max]':>24} {'plan_s':>8} {'sim_s med [min-max]':>24} "
           f"{'events':>8} {'events/s':>10} {'steps':>5} {'groups':>6} {'T_iter_s':>9} {'TFLOPS':>7}")
    print(hdr)
    for r in rows:
        print(f"{r['policy']:8} {r['gpus']:>6} {r['gbs']:>6} {r['wall_s_median']:>8.3f} [{r['wall_s_min']:.3f}-{r['wall_s_max']:.3f}] "
              f"{r['plan_s_median']:>8.3f} {r['sim_s_median']:>8.4f} [{r['sim_s_min']:.4f}-{r['sim_s_max']:.4f}] "
              f"{r['events']:>8} {r['events_per_s']:>10.0f} {r['steps']:>5.0f} {r['groups']:>6.0f} "
              f"{r['iteration_time_s']:>9.3f} {r['tflops_per_gpu']:>7.1f}")
    for p in a.policies.split(","):
        pr = [r for r in rows if r["policy"] == p]
        if len(pr) > 1:
            g = pr[-1]["gpus"] / pr[0]["gpus"]
            w = pr[-1]["wall_s_median"] / pr[0]["wall_s_median"]
            sm = pr[-1]["sim_s_median"] / pr[0]["sim_s_median"]
            print(f"{p}: GPUs x{g:.0f} -> wall x{w:.2f} ({'within' if w <= g else 'FASTER THAN'} linear), "
                  f"simulator alone x{sm:.2f} ({'within' if sm <= g else 'FASTER THAN'} linear)")
    save_result(a.json, rows, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
