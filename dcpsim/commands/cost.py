"""``dcpsim cost``: the cost-model breakdown of one pack on one CP group."""

from __future__ import annotations

from dcpsim.commands._common import parse_int_list, print_json, print_table
from dcpsim.cost import CP_COMM_TYPES, CostModel
from dcpsim.model import RECOMPUTE_MODES


def register(sub) -> None:
    p = sub.add_parser("cost", help="per-rank time and memory of one pack on one CP group")
    p.add_argument("--model", default="llama-13b", help="model name or spec .toml (default llama-13b)")
    p.add_argument("--gpu", default="h100-sxm", help="hardware profile name or folder (default h100-sxm)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (cost is for one stage)")
    p.add_argument("--cp", type=int, default=1, help="CP group size")
    p.add_argument("--dp-cp", type=int, default=None, help="ranks per stage sharing the optimizer (default: cp)")
    p.add_argument("--lengths", required=True, help="comma-separated sequence lengths in tokens, e.g. 32768,4096,1024")
    p.add_argument("--spans-network", action="store_true", help="the CP group leaves the NVLink domain")
    p.add_argument("--cp-comm", default="p2p", choices=CP_COMM_TYPES)
    p.add_argument("--recompute", default="full", choices=RECOMPUTE_MODES)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    lengths = parse_int_list(args.lengths, "--lengths")
    cm = CostModel(args.gpu, args.model, tp=args.tp, pp=args.pp, dp_cp=args.dp_cp or args.cp,
                   cp_comm=args.cp_comm, recompute=args.recompute)
    pc = cm.pack_cost(lengths, args.cp, spans_network=args.spans_network, check_memory=False)
    flops = cm.flops(lengths) / cm.pp  # counted FLOPs of this stage's share
    d = pc.as_dict()
    result = {
        "config": cm.describe() | {"cp": args.cp, "spans_network": args.spans_network, "lengths": lengths},
        "breakdown_s": {k: v for k, v in d.items() if k.endswith("_s")},
        "local_tokens": d["local_tokens"],
        "peak_memory_gib": d["peak_memory_bytes"] / 2**30,
        "memory_limit_gib": cm.memory_limit_bytes / 2**30,
        "fits_memory": bool(d["fits_memory"]),
        "counted_tflops_per_gpu": flops / args.cp / args.tp / pc.total_s / 1e12,
    }
    if args.json:
        print_json(result)
        return 0
    rows = [{"component": k.removesuffix("_s"), "time_ms": v * 1e3} for k, v in result["breakdown_s"].items()]
    print_table(rows, title=f"{cm.model.name} on {cm.profile.name}: tp={args.tp} pp={args.pp} cp={args.cp} "
                f"({'network' if args.spans_network else 'NVLink'}), {len(lengths)} sequences, per rank per stage")
    print(f"local tokens per rank: {d['local_tokens']:.0f}   peak memory: {result['peak_memory_gib']:.1f} GiB "
          f"(limit {result['memory_limit_gib']:.1f}, {'fits' if result['fits_memory'] else 'DOES NOT FIT'})   "
          f"counted TFLOPS/GPU (excl. head): {result['counted_tflops_per_gpu']:.1f}")
    return 0
