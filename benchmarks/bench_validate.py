"""Issue 21 target: ``dcpsim validate`` (both suites: the 81 published runs and Megatron-LM's CI rows) in < 2 minutes.

Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_validate.py [--repeats 1] [--json out.json]

Each repeat runs ``python -m dcpsim.cli validate --out TMP`` in a fresh process (interpreter start, both replays,
the tables and both parity figures) and takes its wall time and its user + system CPU time
(``resource.RUSAGE_CHILDREN``: on a loaded shared machine the CPU time is the steadier figure); prints the
median of each, the host's CPU model and whether the median wall time is under the target.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import check_result_path, save_result  # benchmarks/_results.py
from bench_cli_help import cpu_model

TARGET_S = 120.0


def run_once(out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``dcpsim validate --out out`` in a child process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dcpsim.cli", "validate", "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    check_result_path(a.json)
    walls, cpus = [], []
    with tempfile.TemporaryDirectory(prefix="dcpsim-bench-validate-") as tmp:
        for i in range(a.repeats):
            w, c = run_once(Path(tmp) / f"run{i}")
            walls.append(w)
            cpus.append(c)
    res = {"cpu": cpu_model(), "python": platform.python_version(), "repeats": a.repeats,
           "wall_median_s": round(statistics.median(walls), 2), "cpu_median_s": round(statistics.median(cpus), 2),
           "wall_s": [round(w, 2) for w in walls], "target_s": TARGET_S}
    res["under_target"] = res["wall_median_s"] < TARGET_S
    print(f"dcpsim validate (both suites): median {res['wall_median_s']:.1f} s wall, {res['cpu_median_s']:.1f} CPU s "
          f"({a.repeats} runs); target < {TARGET_S:.0f} s: {'met' if res['under_target'] else 'NOT met'}; {res['cpu']}")
    save_result(a.json, res)


if __name__ == "__main__":
    main()
