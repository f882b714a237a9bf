"""Length-file load speed: ``read_lengths`` on the 1,000,000-line Wikipedia sample (target < 3 s).

Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_load.py [--file ../shared/data/wikipedia_lengths.txt]
        [--repeats 3] [--json out.json]

Reports the best and median wall and CPU seconds of ``dcpsim.workload.loaders.read_lengths`` over
``--repeats`` loads (the first load included: the file is read from the page cache after it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _results import check_result_path, save_result

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikipedia_lengths.txt"
TARGET_S = 3.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(DEFAULT))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    from dcpsim.workload.loaders import read_lengths

    wall, cpu, n = [], [], 0
    for _ in range(max(1, a.repeats)):
        w0, c0 = time.perf_counter(), time.process_time()
        n = read_lengths(a.file).size
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    out = {"file": a.file, "lines": int(n), "wall_s_best": min(wall), "wall_s_median": statistics.median(wall),
           "cpu_s_best": min(cpu), "target_s": TARGET_S, "meets_target": min(wall) < TARGET_S}
    print(f"{n:,} lengths: best {min(wall):.2f} s wall ({min(cpu):.2f} s CPU), median {statistics.median(wall):.2f} s; "
          f"target < {TARGET_S:g} s: {'met' if out['meets_target'] else 'MISSED'}")
    save_result(a.json, out)


if __name__ == "__main__":
    main()
