"""Issue 24 target: ``dcpsim --help`` in <= 0.3 s (CPU seconds of the whole process, interpreter start included).

Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_cli_help.py [--repeats 15] [--json out.json]

Each repeat runs ``python -m dcpsim.cli --help`` in a fresh process and takes its user + system CPU time
(``resource.RUSAGE_CHILDREN``, so a loaded shared machine does not inflate it the way wall time would);
prints the median, the spread (min-max) and the host's CPU model. ``python -c pass`` is measured the same
way as the floor (interpreter and site start-up).
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import subprocess
import sys

from _results import check_result_path, save_result  # benchmarks/_results.py


def cpu_model() -> str:
    """The host's CPU model (``lscpu``'s "Model name"), or the platform's processor string."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def child_cpu_s(argv: list[str]) -> float:
    """CPU seconds (user + system) of one child process running ``argv``."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def summary(xs: list[float]) -> dict:
    """Median and spread of repeated CPU times, seconds."""
    return {"median_s": round(statistics.median(xs), 4), "min_s": round(min(xs), 4), "max_s": round(max(xs), 4),
            "repeats": len(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    check_result_path(a.json)
    child_cpu_s([sys.executable, "-m", "dcpsim.cli", "--help"])  # warm the file cache
    help_s = [child_cpu_s([sys.executable, "-m", "dcpsim.cli", "--help"]) for _ in range(a.repeats)]
    floor_s = [child_cpu_s([sys.executable, "-c", "pass"]) for _ in range(a.repeats)]
    res = {"cpu": cpu_model(), "python": platform.python_version(), "help": summary(help_s),
           "python_start": summary(floor_s), "target_s": 0.3}
    print(f"dcpsim --help: median {res['help']['median_s']:.3f} CPU s (min {res['help']['min_s']:.3f}, max "
          f"{res['help']['max_s']:.3f}, {a.repeats} runs); python -c pass {res['python_start']['median_s']:.3f} s; "
          f"{res['cpu']}")
    save_result(a.json, res)


if __name__ == "__main__":
    main()
