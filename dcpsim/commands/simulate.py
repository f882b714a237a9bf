"""``dcpsim simulate run.toml``: simulate one run (see :mod:`dcpsim.run.config` for the file)."""

from __future__ import annotations

from dcpsim.commands._common import add_config_flags, add_force, config_from_args, print_json, print_table, to_jsonable


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one run described by a TOML file; print a summary table")
    p.add_argument("config", help="run file (.toml); every field is optional, see dcpsim/run/config.py")
    p.add_argument("--trace", default=None, metavar="TRACE.json",
                   help="write a Chrome/Perfetto trace of the simulated timeline (open in ui.perfetto.dev)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write iterations.parquet, ranks.parquet, config.json and summary.json into DIR")
    p.add_argument("--policy", default=None,
                   help="override policy.name (the file's policy.options are dropped when the name changes)")
    add_config_flags(p, ["sim.iterations", "sim.seed", "sim.network", "sim.long_run_hours", "sim.long_run_seeds",
                         "sim.gpu_mtbf_h"])
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.outdir import check_out_dir, check_out_file
    from dcpsim.run import load_config
    from dcpsim.run.single import run_simulation

    cfg = load_config(args.config)
    if args.out:
        check_out_dir(args.out, force=args.force)
    if args.trace:
        check_out_file(args.trace, force=args.force, field="--trace")
    extra: dict = {}
    if args.policy is not None and args.policy != cfg.policy.name:
        extra = {"policy.name": args.policy, "policy.options": {}}
    cfg = config_from_args(args, cfg, extra=extra)
    res = run_simulation(cfg, trace_path=args.trace)
    outputs = {k: str(v) for k, v in res.write(args.out).items()} if args.out else {}
    if args.trace:
        outputs["trace"] = str(args.trace)
    if args.json:
        print_json({"summary": res.summary, "iterations": to_jsonable(res.iterations.to_dict(orient="records")),
                    "meta": res.meta, "outputs": outputs})
        return 0
    s = res.summary
    rows = []
    for r in res.iterations.to_dict(orient="records"):
        rows.append({
            "iter": r["iteration"], "time_s": r["iteration_time_s"], "TFLOPS/GPU": r["tflops_per_gpu"],
            "tokens/s": r["tokens_per_s"], "MFU": r["mfu"], "steps": r["steps"],
            **{k.removeprefix("frac_").replace("_", " ") + " %": 100 * r[k]
               for k in ("frac_compute", "frac_cp_comm", "frac_bubble", "frac_imbalance", "frac_grad_sync",
                         "frac_planning_stall")},
        })
    print_table(rows, title=f"{s['policy']} | {s['model']} on {s['gpus']} x {s['gpu']} (tp{s['tp']} pp{s['pp']} cp{s['cp']} "
                f"dp{s['dp']}) | {s['workload']}, gbs {s['gbs']} | {s.get('network', 'ideal')} network | config "
                f"{s['config_hash']}")
    print(f"mean: {s['iteration_time_s']:.3f} s/iteration, {s['tflops_per_gpu']:.1f} TFLOPS/GPU, "
          f"{s['tokens_per_s']:,.0f} tokens/s, MFU {100 * s['mfu']:.1f}%  |  "
          f"{s['events']:,} events in {s['sim_wall_s']:.3f} s ({(s['events_per_s'] or 0):,.0f} events/s), "
          f"planning {s['planning_wall_s']:.3f} s, total {s['wall_s']:.2f} s")
    if "goodput_mean" in s:
        print(long_run_line(s, res.config))
    for k, v in outputs.items():
        print(f"{k}: {v}")
    return 0


def long_run_line(s: dict, config: dict) -> str:
    """The long-run mode's result in one line (goodput over the seeds, Young/Daly, failures, episode ratios)."""
    sim = config.get("sim", {})
    return (f"long run ({sim.get('long_run_hours', 0):g} h x {s['long_run_seeds']} seeds, {s.get('network', 'ideal')} "
            f"network): goodput {100 * s['goodput_mean']:.2f}% ± {100 * s['goodput_std']:.2f} "
            f"(min {100 * s['goodput_min']:.2f}%, max {100 * s['goodput_max']:.2f}%), Young/Daly "
            f"{100 * s['young_daly_goodput']:.2f}%, {s['failures_mean']:.1f} failures per run, checkpoint every "
            f"{s['checkpoint_every_iterations']} iterations, slow-GPU x{s['slow_gpu_ratio']:.3f}, degraded-link "
            f"x{s['degraded_link_ratio']:.3f}")
