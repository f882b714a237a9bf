"""Parse the logs of benchmarks/device/megatron_ci_1gpu.sh into one JSON of per-run step times.

Each run's ``elapsed time per iteration (ms)`` series is read from Megatron-LM's own log line; the first
``--skip`` iterations (start-up, torch.compile, loss-scale search) are dropped and the rest summarised as
median and 10th/25th/75th/90th percentiles. Usage::

    python benchmarks/device/megatron_ci_1gpu_parse.py LOGDIR [LOGDIR ...] --out FILE.json

A LOGDIR holds ``NAME.log`` and ``NAME.args`` per run (the script's ``$OUT/w``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

LINE = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|.*?elapsed time per iteration \(ms\): ([0-9.]+)")


def parse_log(path: Path, skip: int) -> dict:
    """Steady-state iteration times of one run (seconds)."""
    series = [(int(m[1]), float(m[3]) / 1e3) for m in LINE.finditer(path.read_text(errors="replace"))]
    kept = np.array([t for it, t in series if it > skip])
    out: dict = {"iterations_logged": len(series), "skipped_first": skip, "n": int(kept.size)}
    if kept.size:
        p10, p25, med, p75, p90 = np.percentile(kept, [10, 25, 50, 75, 90])
        out.update(median_s=med, p10_s=p10, p25_s=p25, p75_s=p75, p90_s=p90, mean_s=float(kept.mean()))
    args = path.with_suffix(".args")
    if args.exists():
        out["args"] = args.read_text().split()
    env = path.with_suffix(".env")
    if env.exists():  # environment switches of the run (DCPSIM_DET_FILL=0: deterministic NaN fill off)
        out["env"] = env.read_text().split()
    out["timing_log_level"] = 2 if "--timing-log-level 2" in (args.read_text() if args.exists() else "") else 0
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logdirs", nargs="+", type=Path)
    p.add_argument("--skip", type=int, default=10, help="iterations dropped at the start (default 10)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    runs = {}
    for d in a.logdirs:
        for log in sorted(d.glob("*.log")):
            if log.with_suffix(".args").exists():
                runs[f"{d.name}/{log.stem}"] = parse_log(log, a.skip)
    a.out.write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n")
    for k, r in runs.items():
        if "median_s" in r:
            print(f"{k:28s} n={r['n']:3d} median {r['median_s']*1e3:7.1f} ms  p25-p75 {r['p25_s']*1e3:6.1f}-{r['p75_s']*1e3:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
