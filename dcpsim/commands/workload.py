"""``dcpsim workload list|show NAME``: length distributions and their statistics."""

from __future__ import annotations

import numpy as np

from dcpsim.commands._common import POS_INT, SEED, add_force, print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("workload", help="list workload presets, or show a workload's length statistics")
    p.add_argument("action", choices=["list", "show"])
    p.add_argument("name", nargs="?", help="preset name or a lengths file (txt/csv/parquet/jsonl)")
    p.add_argument("--samples", type=POS_INT, default=200_000,
                   help="sequences drawn for the statistics (default 200000; more than 2e7 needs --yes)")
    p.add_argument("--yes", action="store_true", help="confirm a draw above the size limit")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--min-len", type=POS_INT, default=None, help="drop sequences shorter than this")
    p.add_argument("--max-len", type=POS_INT, default=None, help="drop sequences longer than this")
    p.add_argument("--plot", default=None, help="write the count and token-weighted histograms to this PNG/PDF")
    p.add_argument("--json", action="store_true")
    add_force(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.errors import ConfigError
    from dcpsim.report.lengths import plot_length_histograms
    from dcpsim.workload import PRESETS, get_workload, list_workloads, summarize

    if args.action == "list":
        extra = [(f, v) for f, v in (("name", args.name), ("--plot", args.plot)) if v is not None]
        if extra:  # list takes neither: they would be dropped without a word
            raise ConfigError(extra[0][0], extra[0][1], f"nothing with 'list' (did you mean 'dcpsim workload show "
                              f"{args.name or 'NAME'}'?)")
        rows = [{"name": n, "description": PRESETS[n].description} for n in list_workloads()]
        print_json(rows) if args.json else print_table(rows, title="workload presets")
        return 0
    if not args.name:
        raise ConfigError("name", None, "a preset name or lengths file after 'show'")
    if args.samples <= 0:
        raise ConfigError("--samples", args.samples, "a positive integer")
    from dcpsim.limits import MAX_SAMPLES, SAMPLE_BYTES, require_confirmation

    require_confirmation(args.samples, MAX_SAMPLES, field="--samples", what="samples", bytes_each=SAMPLE_BYTES,
                         confirmed=args.yes)
    if args.plot:
        from dcpsim.outdir import check_out_file

        check_out_file(args.plot, force=args.force, field="--plot", suffixes=(".png", ".pdf"))
    dist = get_workload(args.name, min_len=args.min_len, max_len=args.max_len)
    lengths = dist.sample(args.samples, np.random.default_rng(args.seed))
    stats = summarize(lengths)
    info = {"workload": args.name, "distribution": dist.to_dict(), "samples": args.samples, "seed": args.seed, "stats": stats}
    if args.name in PRESETS:
        info["sources"] = PRESETS[args.name].sources
    if args.plot:
        plot_length_histograms(lengths, args.plot, title=f"{args.name} ({args.samples} samples, seed {args.seed})")
        info["plot"] = args.plot
    if args.json:
        print_json(info)
        return 0
    print_table([{"statistic": k, "value": v} for k, v in stats.items()], title=f"workload {args.name}: {args.samples} samples, seed {args.seed}")
    if "sources" in info:
        print(f"sources: {info['sources']}")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
