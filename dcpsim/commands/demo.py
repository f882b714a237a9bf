"""``dcpsim demo``: the main job on built-in defaults (what ``make run`` runs)."""

from __future__ import annotations

import numpy as np

from dcpsim.commands._common import print_table


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the main job on built-in defaults")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.cost import CostModel

    cm = CostModel("h100-sxm", "llama-13b", tp=1, pp=8, dp_cp=64, recompute="full")
    lengths = [32768, 4096, 1024]
    rows = []
    for cp in (1, 2, 4, 8):
        for span in (False, True):
            if span and cp == 1:
                continue
            pc = cm.pack_cost(lengths, cp, spans_network=span, check_memory=False)
            rows.append({"cp": cp, "link": "network" if span else "nvlink", "fwd_ms": pc.fwd_s * 1e3, "bwd_ms": pc.bwd_s * 1e3,
                         "cp_exposed_ms": (pc.cp_fwd_exposed_s + pc.cp_bwd_exposed_s) * 1e3,
                         "gpu_ms": pc.total_s * cp * 1e3, "peak_gib": pc.peak_memory_bytes / 2**30})
    print_table(rows, title="Llama-13B on H100 (public profile), pack [32768, 4096, 1024], one of 8 pipeline stages")
    print("gpu_ms = per-rank time x CP size: the GPU-time a CP choice costs; dynamic CP picks per microbatch.")
    _ = np.random.default_rng(args.seed)
    return 0
