"""Held-out check data for the host model: tiny-GPT steps of other shapes than the one the host
parameters were taken from (profiles/h100-sxm-measured/host.json: 12 layers, hidden 512, micro-batch 4).

Run on a lent GPU:  python benchmarks/device/host_check.py --out DIR   -> DIR/host_check.json
Each row: the shape, eager step time, CUDA-graph step time, host issue time and device time per microbatch
(dcpsim.profiling.host._tiny_gpt). Compare with the simulator's prediction for the same shape
(experiments/host/). These rows are not used to set any parameter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dcpsim.profiling import host  # noqa: E402

SHAPES = [  # (layers, hidden, heads, seq, micro_batch, microbatches)
    (4, 512, 8, 1024, 4, 4),
    (24, 512, 8, 1024, 4, 4),
    (12, 512, 8, 1024, 1, 8),
    (12, 512, 8, 2048, 4, 4),
    (12, 1024, 16, 1024, 4, 4),
    (12, 2048, 16, 1024, 2, 4),
    (24, 2048, 16, 2048, 2, 4),
    (8, 4096, 32, 2048, 1, 4),
]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    torch = host.require_torch()
    info = host.detect_device(None)
    d = host._Dev(torch, info)
    dtype = torch.bfloat16 if d.cuda else torch.float32
    base = host.HostOptions(repeats=11, steps=5)
    shapes = SHAPES[:1] if a.quick else SHAPES
    rows = []
    t0 = time.perf_counter()
    for layers, hidden, heads, seq, mbs, micro in shapes:
        o = replace(base, layers=layers, hidden=hidden, heads=heads, seq=seq, micro_batch=mbs, microbatches=micro)
        if a.quick:
            o = replace(o.shrunk(), layers=layers)
        try:
            r = host._tiny_gpt(torch, d, o, dtype)
        except Exception as e:  # noqa: BLE001 - one shape failing (memory) keeps the others
            r = {"shape": {"layers": layers, "hidden": hidden}, "error": f"{type(e).__name__}: {e}"}
        rows.append(r)
        if d.cuda:
            torch.cuda.empty_cache()
        print(layers, hidden, seq, mbs, micro, {k: v.get("median_s") for k, v in r.items() if isinstance(v, dict)
                                                and "median_s" in v}, flush=True)
    out = {"measured": {**info.metadata(), "host_cpu": host._cpu_name(),
                        "date": time.strftime("%Y-%m-%d", time.gmtime())},
           "rows": rows, "wall_s": time.perf_counter() - t0}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "host_check.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
