"""Count the host ops of a PyTorch profiler chrome trace (``prof.export_chrome_trace``, ``.json`` or ``.json.gz``).

Per event name of the host categories (``cpu_op``, ``cuda_runtime``, ``user_annotation``): the number of events and
their summed duration. Used on the traces of Megatron-LM's ``--profile --use-pytorch-profiler`` step
(benchmarks/device/megatron_ci_1gpu.sh, runs ``j_prof_fill`` / ``k_prof_nofill``) to count the deterministic NaN
fills (``aten::fill_`` events with the fill on, less those with it off). Usage::

    python benchmarks/device/trace_op_counts.py TRACE --out counts.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict


def op_counts(trace: dict) -> dict:
    """``{category: {name: [count, summed duration in us]}}`` of the trace's complete (``ph == "X"``) events."""
    out: dict = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation", "kernel"):
            c = out[ev["cat"]][ev.get("name", "")]
            c[0] += 1
            c[1] += float(ev.get("dur", 0.0))
    return {cat: dict(sorted(v.items(), key=lambda kv: -kv[1][0])) for cat, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        counts = op_counts(json.load(f))
    with open(a.out, "w") as f:
        json.dump(counts, f, indent=1)
        f.write("\n")
    for cat, names in counts.items():
        print(cat, sum(v[0] for v in names.values()), "events;",
              ", ".join(f"{k} {v[0]}" for k, v in list(names.items())[:8]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
