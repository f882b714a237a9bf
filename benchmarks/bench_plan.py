"""Speed of ``dcpsim plan``: a full layout search and a single size (targets: <= 60 s and <= 5 s on 2 cores).

    .venv/bin/python benchmarks/bench_plan.py                 # both, -j 2, progress bar on stderr
    .venv/bin/python benchmarks/bench_plan.py --only single
    .venv/bin/python -m pytest -m benchmark benchmarks/bench_plan.py

Full search: Llama-13B, fixed 4,096-token windows, global batch 4M tokens
(1,024 sequences), 1T tokens; 4 GPU types (A100-80GB, H100, H200, B200) x 6
sizes (256 ... 8,192) x 2 policies (packing, dynamic) = 48 searches, each
enumerating TP, PP, VP, CP, micro-batch size, recompute (and precision and
overlap flags where the run configuration has them), pruning by memory and
batch, screening in closed form and simulating the best layouts. Single size:
H100 x 1,024 GPUs x both policies. The wall time includes the worker pool's
start-up and everything the CLI does but printing; the machine's load average
is printed beside it (the figure is only meaningful on an otherwise idle
2-core machine).
"""

from __future__ import annotations

import argparse
import os
import time

import pytest

GPUS = {"a100-sxm-80gb": 1.5, "h100-sxm": 2.5, "h200-sxm": 3.5, "b200": 5.0}
SIZES = (256, 512, 1024, 2048, 4096, 8192)
TARGET_S = {"full": 60.0, "single": 5.0}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    import resource

    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_case(case: str, jobs: int = 2, progress: bool = True) -> tuple[float, object]:
    """(wall seconds, plan) of one benchmark case."""
    from dcpsim.planning import CapacityRequest, plan_capacity

    gpus = GPUS if case == "full" else {"h100-sxm": 2.5}
    sizes = SIZES if case == "full" else (1024,)
    t0 = time.perf_counter()
    plan = plan_capacity(CapacityRequest("llama-13b", None, 1e12, gpus, sizes, seq_len=4096, gbs_tokens=4 * 2**20,
                                         policies=("packing", "dynamic")), jobs=jobs, progress=progress)
    return time.perf_counter() - t0, plan


@pytest.mark.benchmark
@pytest.mark.parametrize("case", ["single", "full"])
def test_plan_search_speed(case):
    wall, plan = run_case(case, progress=False)
    assert (plan.rows["status"] == "ok").all()
    assert wall <= TARGET_S[case], f"{case}: {wall:.1f} s > {TARGET_S[case]} s (load {os.getloadavg()})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["full", "single"], default=None)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    a = ap.parse_args()
    for case in ([a.only] if a.only else ["single", "full"]):
        load = os.getloadavg()[0]
        cpu0 = cpu_seconds()
        wall, plan = run_case(case, a.jobs)
        cpu = cpu_seconds() - cpu0
        n = len(plan.rows)
        ok = int((plan.rows["status"] == "ok").sum())
        sims = int(plan.rows["layouts_simulated"].sum())
        cpu = max(cpu, float(plan.rows["search_cpu_s"].sum()))  # worker CPU (the pool's children may not be reaped)
        print(f"{case}: {n} searches ({ok} ok, {sims} layouts simulated) in {wall:.1f} s wall with -j {a.jobs}, "
              f"{cpu:.1f} CPU-s in the searches, i.e. about {cpu / 2:.1f} s on 2 idle cores (target {TARGET_S[case]:g} s; load average before {load:.1f}, cpus {os.cpu_count()})")


if __name__ == "__main__":
    main()
