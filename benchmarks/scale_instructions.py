"""Issue 24 on a loaded host: the instructions one iteration executes, counted by valgrind (not timed).

Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_instructions.py [--gpus 65536]
        [--policies packing,dynamic-pr2959] [--baseline /path/to/older/checkout] [--json out.json]
        [--part iteration|simulation]

CPU seconds on a shared 2-core machine move by 30-50% with the other processes' load; the number of
instructions a run executes does not (the same seed runs the same code path; the instruction count of
``valgrind --tool=cachegrind --cache-sim=no`` is its ``I refs``). For each tree and policy the script counts
two processes: imports and the 64-GPU warm-up run of :mod:`scale_fast` alone, then the same plus the run at
``--gpus``; the difference is one iteration (sampling, planning, durations, schedule evaluation, tables).
With ``--part simulation`` both processes also sample and plan the batch at ``--gpus`` (the run's own first
plan), and the second then simulates it (:meth:`~dcpsim.sim.simulator.ClusterSimulator.simulate`, the per-rank
accounting and the iteration row): the difference is the simulation side of the iteration alone.
The counts are of instructions, not time (a memory-bound numpy pass and an interpreter loop of the same
count differ in seconds), so the ratios between policies are an indication, not the CPU-time target.
Needs ``valgrind`` on the path; each count takes a minute or two (about 50x slower than a plain run).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)
from bench_cli_help import cpu_model  # noqa: E402
from bench_shared_network import _commit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def child(gpus: int, policy: str, run: bool, part: str = "iteration") -> None:
    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    def cfg(n: int) -> RunConfig:
        return RunConfig().with_updates({"cluster.gpus": n, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1,
                                         "policy.name": policy, "workload.gbs": 4 * n, "sim.iterations": 1,
                                         "sim.seed": 0, "sim.planning": "ignore", "sim.engine": "fast"})

    run_simulation(cfg(64))
    if part == "simulation":  # the batch planned in both processes; simulated in the counted one
        from dcpsim.run.single import _next_plan, _prepare
        from dcpsim.sim.metrics import iteration_row, rank_arrays

        prepared = _prepare(cfg(gpus), None, None)
        plan, _ = _next_plan(prepared, 0)
        if run:
            rec = prepared.sim.simulate(plan, validate=False)  # (as run_simulation: a policy checks its own plans)
            row = iteration_row(rec, gpus, prepared.cost.profile.peak_bf16_flops, rank_arrays(rec))
            print(repr(row["iteration_time_s"]))
    elif run:
        print(repr(run_simulation(cfg(gpus)).summary["iteration_time_s"]))


def count(tree: Path, gpus: int, policy: str, run: bool, part: str = "iteration") -> tuple[int, str]:
    """(instructions, the run's iteration time or '') of one child process under cachegrind."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
           __file__, "--gpus", str(gpus), "--child", policy, "--part", part] + (["--run"] if run else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd="/")
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if out.returncode or not m:
        raise SystemExit(f"error: {policy} in {tree}: {out.stderr.strip().splitlines()[-1:]}")
    return int(m.group(1).replace(",", "")), out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=65536)
    ap.add_argument("--policies", default="packing,dynamic-pr2959")
    ap.add_argument("--baseline", help="an older checkout to count as well")
    ap.add_argument("--json")
    ap.add_argument("--part", choices=("iteration", "simulation"), default="iteration",
                    help="count the whole iteration, or its simulation side alone (the plan made in both counts)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.gpus, a.child, a.run, a.part)
        return
    check_result_path(a.json, "--json")
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind is not on the path (this benchmark counts instructions with cachegrind)")
    trees = {"after": ROOT} if not a.baseline else {"before": Path(a.baseline).resolve(), "after": ROOT}
    rows = []
    print(f"CPU: {cpu_model()}")
    print(f"{'tree':6s} {'policy':16s} {a.part + ' Minstr':>17s} {'warm-up Minstr':>15s}  iteration_time_s")
    for p in a.policies.split(","):
        for name, tree in trees.items():
            base, _ = count(tree, a.gpus, p, False, a.part)
            total, it = count(tree, a.gpus, p, True, a.part)
            rows.append({"gpus": a.gpus, "policy": p, "tree": name, "commit": _commit(tree), "part": a.part,
                         "iteration_instructions": total - base, "warmup_instructions": base,
                         "iteration_time_s": float(it) if it else None, "cpu_model": cpu_model(),
                         "tool": "valgrind --tool=cachegrind --cache-sim=no (I refs)"})
            print(f"{name:6s} {p:16s} {(total - base) / 1e6:17,.0f} {base / 1e6:15,.0f}  {it}")
    save_result(a.json, rows, indent=2)


if __name__ == "__main__":
    main()
