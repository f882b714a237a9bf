"""Parse the logs of benchmarks/device/megatron_ci_1gpu.sh into one JSON of per-run step times.

Each run's ``elapsed time per iteration (ms)`` series is read from Megatron-LM's own log line; the first
``--skip`` iterations (start-up, torch.compile, loss-scale search) are dropped and the rest summarised as
median and 10th/25th/75th/90th percentiles. Usage::

    python benchmarks/device/megatron_ci_1gpu_parse.py LOGDIR [LOGDIR ...] --out FILE.json

A LOGDIR holds ``NAME.log`` and ``NAME.args`` per run (the script's ``$OUT/w``). A run with ``NAME.fill`` beside it
(``DCPSIM_DET_FILL=alt``: the deterministic NaN fill switched on and off inside the run) is also split into the
iterations that ran wholly with the fill on and wholly with it off (``alt_split``), with the difference of the two
states as a difference of medians and as a window-paired estimate (``_differences``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from pathlib import Path

import numpy as np

LINE = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|.*?elapsed time per iteration \(ms\): ([0-9.]+)")
STAMPED = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration\s+(\d+)/\s*\d+ \|.*?"
                     r"elapsed time per iteration \(ms\): ([0-9.]+)")


def _summary(times) -> dict:
    """Count, median, 10th/25th/75th/90th percentiles and mean of iteration times (seconds); the count alone
    when there are none."""
    a = np.asarray(times, dtype=np.float64)
    if not a.size:
        return {"n": 0}
    p10, p25, med, p75, p90 = np.percentile(a, [10, 25, 50, 75, 90])
    return {"n": int(a.size), "median_s": float(med), "p10_s": float(p10), "p25_s": float(p25), "p75_s": float(p75),
            "p90_s": float(p90), "mean_s": float(a.mean())}


def alt_split(log_text: str, fill_lines: list[str], skip: int) -> dict:
    """Split a run whose NaN fill was switched during the run into fill-on and fill-off iterations.

    ``fill_lines`` are the switch log's lines, ``DATE TIME STATE [PID]``; each iteration spans the time from the
    previous iteration's log line to its own, and counts only when one state held all that time. Lines with a pid
    are kept for the first pid only (the training process switches first; compile workers log their own); a log
    without pids cannot tell the processes apart and is reported with ``"pids": false``.
    """
    events = []
    for line in fill_lines:
        f = line.split()
        if len(f) >= 3:
            events.append((dt.datetime.fromisoformat(f"{f[0]} {f[1]}"), int(f[2]), f[3] if len(f) > 3 else None))
    pids = bool(events) and events[0][2] is not None
    if pids:
        events = [e for e in events if e[2] == events[0][2]]
    events.sort()
    its = [(int(m[2]), dt.datetime.fromisoformat(m[1]), float(m[3]) / 1e3) for m in STAMPED.finditer(log_text)]
    split: dict[int, list[float]] = {0: [], 1: []}
    windows: list[tuple[int, list[float]]] = []  # runs of consecutive whole iterations of one state
    mixed = 0
    for (_, t0, _), (it, t1, sec) in zip(its, its[1:], strict=False):
        if it <= skip:
            continue
        before = [s for t, s, _ in events if t <= t0]
        states = set(before[-1:] + [s for t, s, _ in events if t0 < t < t1])
        if len(states) == 1:
            state = states.pop()
            split[state].append(sec)
            if windows and windows[-1][0] == state:
                windows[-1][1].append(sec)
            else:
                windows.append((state, [sec]))
        else:
            mixed += 1
    return {"pids": pids, "fill_on": _summary(split[1]), "fill_off": _summary(split[0]), "mixed_dropped": mixed,
            "on_minus_off_s": _differences(split[1], split[0], windows)}


def _differences(on: list[float], off: list[float], windows: list[tuple[int, list[float]]]) -> dict:
    """Fill-on minus fill-off step time (seconds), two ways. ``medians``: difference of the two states' medians,
    with a bootstrap 95% interval (4,000 resamples of each state's iterations, seed 0). ``window_paired``: each
    window (a run of whole iterations of one state) whose two neighbours are of the other state gives its median
    less the mean of theirs (sign turned for fill-off windows), so drift slower than a window cancels; reported
    as the count, mean, median and standard error of those differences."""
    out: dict = {}
    if on and off:
        a, b = np.asarray(on), np.asarray(off)
        rng = np.random.default_rng(0)
        boot = (np.median(rng.choice(a, (4000, a.size)), axis=1) - np.median(rng.choice(b, (4000, b.size)), axis=1))
        lo, hi = np.percentile(boot, [2.5, 97.5])
        out["medians"] = {"diff_s": float(np.median(a) - np.median(b)), "ci95_s": [float(lo), float(hi)]}
    meds = [(state, float(np.median(t))) for state, t in windows]
    d = np.asarray([(m - (meds[i - 1][1] + meds[i + 1][1]) / 2) * (1 if state else -1)
                    for i, (state, m) in enumerate(meds[1:-1], 1)
                    if meds[i - 1][0] != state and meds[i + 1][0] != state])
    if d.size:
        out["window_paired"] = {"n": int(d.size), "mean_s": float(d.mean()), "median_s": float(np.median(d)),
                                "se_s": float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else None}
    return out


def parse_log(path: Path, skip: int) -> dict:
    """Steady-state iteration times of one run (seconds)."""
    series = [(int(m[1]), float(m[3]) / 1e3) for m in LINE.finditer(path.read_text(errors="replace"))]
    out: dict = {"iterations_logged": len(series), "skipped_first": skip,
                 **_summary([t for it, t in series if it > skip])}
    args = path.with_suffix(".args")
    if args.exists():
        out["args"] = args.read_text().split()
    env = path.with_suffix(".env")
    if env.exists():  # environment switches of the run (DCPSIM_DET_FILL=0: deterministic NaN fill off)
        out["env"] = env.read_text().split()
    fill = path.with_suffix(".fill")
    if fill.exists():
        out["alt"] = alt_split(path.read_text(errors="replace"), fill.read_text().splitlines(), skip)
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
