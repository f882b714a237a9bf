"""Issue 13 scale target: one iteration, weak scaling (4 sequences per GPU), Llama-13B, every policy, fast path.

Run (each policy in a fresh process, so that its peak memory is its own)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_fast.py [--gpus 65536] [--policies packing,dynamic,...]
        [--engine fast] [--repeats 5] [--baseline /path/to/older/checkout] [--json out.json]

With ``--repeats`` each policy runs that many times (fresh processes; with ``--baseline`` the two trees
alternate, repeat by repeat, so both see the same load) and the rows give the median and min-max of the
CPU and wall seconds, the largest peak memory, the host's CPU model, and each tree's commit; the
iteration times of the two trees must be equal (printed when not).

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
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)
from bench_cli_help import cpu_model  # noqa: E402
from bench_shared_network import _commit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

POLICIES = ("packing", "packing-balanced", "dynamic", "dynamic-solver", "dynamic-pr2959", "packing-pr2959", "bound")


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


def _child(tree: Path, gpus: int, engine: str, policy: str) -> dict | str:
    """One run in a fresh process with ``tree`` first on the path (this script is the child: its folder
    holds no ``dcpsim``); the row, or the error's last line."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, __file__, "--gpus", str(gpus), "--engine", engine, "--child", policy],
                         capture_output=True, text=True, check=False, env=env)
    if out.returncode:
        return out.stderr.strip().splitlines()[-1] if out.stderr else str(out.returncode)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict]) -> dict:
    """Median and min-max of CPU and wall seconds over repeats, the largest peak memory."""
    r = dict(runs[0])
    for key in ("cpu_s", "wall_s", "planning_wall_s", "sim_wall_s"):
        xs = [x[key] for x in runs]
        r[key] = round(statistics.median(xs), 3)
        r[key.replace("_s", "") + "_min_s"], r[key.replace("_s", "") + "_max_s"] = round(min(xs), 3), round(max(xs), 3)
    r["cpu_runs_s"] = [x["cpu_s"] for x in runs]
    r["peak_rss_mb"] = max(x["peak_rss_mb"] for x in runs)
    r["repeats"] = len(runs)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=65536)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--engine", default="fast", choices=("fast", "events", "auto"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--baseline", help="an older checkout to run alternately with this one")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    if a.child:
        print(json.dumps(one(a.gpus, a.child, a.engine)))
        return
    trees = {"after": ROOT} if not a.baseline else {"before": Path(a.baseline).resolve(), "after": ROOT}
    policies = a.policies.split(",")
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(max(1, a.repeats)):
        for p in policies:
            for name, tree in trees.items():
                r = _child(tree, a.gpus, a.engine, p)
                if isinstance(r, str):
                    print(f"{name:6s} {p:16s} FAILED: {r}")
                    continue
                runs.setdefault((name, p), []).append(r)
    rows = []
    print(f"CPU: {cpu_model()}")
    print(f"{'tree':6s} {'policy':16s} {'cpu_s':>7s} {'(min-max)':>15s} {'wall_s':>7s} {'plan_s':>7s} {'sim_s':>7s} "
          f"{'peak_MB':>8s} {'steps':>6s} {'groups':>8s} {'TFLOPS':>7s}")
    for p in policies:
        for name, tree in trees.items():
            if (name, p) not in runs:
                continue
            r = _summary(runs[(name, p)])
            r.update(tree=name, commit=_commit(tree), cpu_model=cpu_model())
            rows.append(r)
            print(f"{name:6s} {p:16s} {r['cpu_s']:7.2f} {r['cpu_min_s']:7.2f}-{r['cpu_max_s']:<7.2f} {r['wall_s']:7.2f} "
                  f"{r['planning_wall_s']:7.2f} {r['sim_wall_s']:7.2f} {r['peak_rss_mb']:8.0f} {r['steps'] or 0:6.0f} "
                  f"{r['groups'] or 0:8.0f} {r['tflops_per_gpu']:7.1f}")
        its = {runs[(n, p)][0]["iteration_time_s"] for n in trees if (n, p) in runs}
        if len(its) > 1:
            print(f"       {p}: iteration times differ between the trees: {sorted(its)}")
    save_result(a.json, rows, indent=2)


if __name__ == "__main__":
    main()
