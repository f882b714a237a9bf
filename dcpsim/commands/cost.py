"""``dcpsim cost``: the cost-model breakdown of one pack on one CP group.

A pack that does not fit in memory exits with status 2 and the reason (no throughput is printed for it;
``--json`` still writes the breakdown with ``fits_memory: false`` and ``counted_tflops_per_gpu: null``)."""

from __future__ import annotations

from dcpsim.commands._common import (
    POS_INT,
    add_config_flags,
    config_from_args,
    config_updates,
    parse_int_list,
    print_json,
    print_table,
    profile_label,
    with_default_profile,
)


def register(sub) -> None:
    p = sub.add_parser("cost", help="per-rank time and memory of one pack on one CP group")
    p.add_argument("--config", default=None, metavar="RUN.toml", help="base run configuration (default: dcpsim's defaults)")
    add_config_flags(p, ["model.name", "hardware.gpu", "parallel.tp", "parallel.pp", "parallel.cp",
                         "parallel.cp_comm", "parallel.recompute"])
    p.add_argument("--dp-cp", type=POS_INT, default=None,
                   help="ranks per stage sharing the optimizer (default: cp, the CP group alone)")
    p.add_argument("--lengths", required=True, help="comma-separated sequence lengths in tokens, e.g. 32768,4096,1024")
    p.add_argument("--spans-network", action="store_true", help="the CP group leaves the NVLink domain")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.model.accounting import tflops_per_gpu
    from dcpsim.run import RunConfig, load_config
    from dcpsim.run.single import build_cost_model

    lengths = parse_int_list(args.lengths, "--lengths")
    # a bare GPU name reads its calibrated profile where one exists, as in simulate/plan/demo (the output names it)
    cfg = with_default_profile(_config(args, load_config(args.config) if args.config else RunConfig()))
    p = cfg.parallel
    if args.dp_cp is not None and args.dp_cp < p.cp:  # the CP group's ranks are among those sharing the optimizer
        from dcpsim.errors import ConfigError

        raise ConfigError("--dp-cp", args.dp_cp, f">= --cp ({p.cp}): the ranks per stage sharing the optimizer "
                          "(DP x CP) include the pack's CP group")
    cm = build_cost_model(cfg, dp_cp=p.cp if args.dp_cp is None else args.dp_cp)
    pc = cm.pack_cost(lengths, p.cp, spans_network=args.spans_network, check_memory=False)
    flops = _stage_flops(cm, lengths)
    d = pc.as_dict()
    result = {
        "config": cm.describe() | {"cp": p.cp, "spans_network": args.spans_network, "lengths": lengths},
        "breakdown_s": {k: v for k, v in d.items() if k.endswith("_s")},
        "local_tokens": d["local_tokens"],
        "peak_memory_gib": d["peak_memory_bytes"] / 2**30,
        "memory_limit_gib": cm.memory_limit_bytes / 2**30,
        "fits_memory": bool(d["fits_memory"]),
        "counted_tflops_per_gpu": tflops_per_gpu(flops, pc.total_s, p.cp * p.tp),
    }
    fits = result["fits_memory"]
    if not fits:  # no throughput for a pack that cannot run: the figure would read as valid
        result["counted_tflops_per_gpu"] = None
    if args.json:
        print_json(result | {"profile": profile_label(cfg.hardware.gpu)})
    else:
        print(f"profile {profile_label(cfg.hardware.gpu)}")
        rows = [{"component": k.removesuffix("_s"), "time_ms": v * 1e3} for k, v in result["breakdown_s"].items()]
        print_table(rows, title=f"{cm.model.name} on {cm.profile.name}: tp={p.tp} pp={p.pp} cp={p.cp} "
                    f"({'network' if args.spans_network else 'NVLink'}), {len(lengths)} sequences, per rank per stage")
        if fits:
            print(f"local tokens per rank: {d['local_tokens']:.0f}   peak memory: {result['peak_memory_gib']:.1f} GiB "
                  f"(limit {result['memory_limit_gib']:.1f}, fits)   "
                  f"counted TFLOPS/GPU (excl. head): {result['counted_tflops_per_gpu']:.1f}")
    if not fits:  # exit status 2 with the reason (the JSON above still says fits_memory: false)
        from dcpsim.errors import InfeasibleError

        raise InfeasibleError("memory", f"the pack needs {result['peak_memory_gib']:.1f} GiB per GPU > "
                              f"{result['memory_limit_gib']:.1f} GiB usable on {cm.profile.name} "
                              f"({d['local_tokens']:.0f} local tokens per rank; raise --cp, --tp or --pp, or shorten "
                              "--lengths)")
    return 0


def _stage_flops(cm, lengths) -> float:
    """Counted FLOPs of the stage the breakdown times: its ``layers_per_stage`` blocks, without the output
    layer (the breakdown's fwd/bwd/total leave ``head_*`` out)."""
    m = cm.model
    head = 6.0 * m.hidden * m.vocab * float(sum(lengths))
    return (cm.flops(lengths) - head) * cm.layers_per_stage / m.n_layers


def _config(args, base):
    """The run config of the flags; cluster.gpus (no part of one group's cost) follows tp*pp*cp."""
    updates, _ = config_updates(args)
    p = base.parallel
    sizes = [updates.get(f"parallel.{k}", getattr(p, k)) for k in ("tp", "pp", "cp")]
    extra = {}
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes):
        extra = {"cluster.gpus": sizes[0] * sizes[1] * sizes[2], "workload.gbs": max(base.workload.gbs, 1)}
    return config_from_args(args, base, extra=extra)
