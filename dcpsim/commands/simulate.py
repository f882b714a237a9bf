"""``dcpsim simulate run.toml``: simulate one run (see :mod:`dcpsim.run.config` for the file).

``dcpsim simulate --megatron-args megatron_args.txt --gpus 8 --gpu h100-sxm`` (or ``--megatron-config
model_config.yaml``) simulates a Megatron-LM run from its own arguments (:mod:`dcpsim.export.reader`): every
flag is modelled, accepted with a stated approximation (printed), known not to change the step, or refused by
name. The GPU count and hardware profile are not Megatron arguments and are given here.

A bare GPU name (``hardware.gpu = "h100-sxm"``) means its calibrated profile where one exists
(:mod:`dcpsim.hardware.defaults`); ``h100-sxm-datasheet`` names the uncalibrated one. The output names the profile.
"""

from __future__ import annotations

from dcpsim.commands._common import (
    POS_INT,
    add_config_flags,
    add_force,
    config_from_args,
    print_json,
    print_table,
    profile_label,
    refuse_set_conflicts,
    to_jsonable,
    with_default_profile,
)


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one run described by a TOML file; print a summary table")
    p.add_argument("config", nargs="?", default=None,
                   help="run file (.toml); every field is optional, see dcpsim/run/config.py")
    p.add_argument("--megatron-args", default=None, metavar="FILE",
                   help="simulate a Megatron-LM run from its argument list (one --flag [value] per line, as in "
                   "dcpsim export's megatron_args.txt or a launch script's arguments); needs --gpus")
    p.add_argument("--megatron-config", default=None, metavar="YAML",
                   help="simulate a Megatron-LM functional test's model_config.yaml (MODEL_ARGS); needs --gpus")
    p.add_argument("--gpus", type=POS_INT, default=None, help="with --megatron-args/--megatron-config: GPUs in the run")
    p.add_argument("--gpu", default=None, help="with --megatron-args/--megatron-config: hardware profile "
                   "(default h100-sxm)")
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
    from dcpsim.outdir import check_distinct, check_out_dir, check_out_file
    from dcpsim.run.single import run_simulation

    refuse_set_conflicts(args, {"policy.name": ("--policy", args.policy), "cluster.gpus": ("--gpus", args.gpus),
                                "hardware.gpu": ("--gpu", args.gpu)})
    cfg, notes, batches = _base_config(args)
    if args.out:
        check_out_dir(args.out, force=args.force)
    if args.trace:
        check_out_file(args.trace, force=args.force, field="--trace")
    if args.out and args.trace:
        from pathlib import Path

        from dcpsim.sim.metrics import SimResult

        check_distinct({"--out": [Path(args.out) / f for f in SimResult.FILES], "--trace": [args.trace]})
    extra: dict = {}
    if args.policy is not None and args.policy != cfg.policy.name:
        extra = {"policy.name": args.policy, "policy.options": {}}
    cfg = config_from_args(args, cfg, extra=extra)
    cfg = with_default_profile(cfg)
    if batches is not None and len(batches) != cfg.sim.iterations:
        batches = None  # --iterations overrides the file's batch count: sample from it instead
    res = run_simulation(cfg, trace_path=args.trace, batches=batches)
    outputs = {k: str(v) for k, v in res.write(args.out).items()} if args.out else {}
    if args.trace:
        outputs["trace"] = str(args.trace)
    label = profile_label(cfg.hardware.gpu)
    from dcpsim.planning.trust import run_trust

    trust = run_trust(cfg, res.summary)
    if args.json:
        print_json({"profile": label, "trust": trust, "summary": res.summary, "iterations": to_jsonable(res.iterations.to_dict(orient="records")),
                    "meta": res.meta, "outputs": outputs})
        return 0
    s = res.summary
    print(f"profile {label}")
    rows = []
    for r in res.iterations.to_dict(orient="records"):
        rows.append({
            "iter": r["iteration"], "time_s": r["iteration_time_s"], "TFLOPS/GPU": r["tflops_per_gpu"],
            "tokens/s": r["tokens_per_s"], "MFU %": 100 * r["mfu"], "steps": r["steps"],
            **{k.removeprefix("frac_").replace("_", " ") + " %": 100 * r[k]
               for k in ("frac_compute", "frac_cp_comm", "frac_bubble", "frac_imbalance", "frac_grad_sync",
                         "frac_planning_stall")},
        })
    print_table(rows, title=f"{s['policy']} | {s['model']} on {s['gpus']} x {s['gpu']} (tp{s['tp']} pp{s['pp']} cp{s['cp']} "
                f"dp{s['dp']}) | {s['workload']}, gbs {s['gbs']} | {s.get('network', 'ideal')} network | config "
                f"{s['config_hash']}")
    engine = (f"{s['events']:,} events in {s['sim_wall_s']:.3f} s ({(s['events_per_s'] or 0):,.0f} events/s)"
              if s["events"] else f"simulated in {s['sim_wall_s']:.3f} s (fast engine, no event queue)"
              if s.get("simulated", True) else "not simulated (a bound, no schedule)")
    print(f"mean: {s['iteration_time_s']:.3f} s/iteration, {s['tflops_per_gpu']:.1f} TFLOPS/GPU, "
          f"{s['tokens_per_s']:,.0f} tokens/s, MFU {100 * s['mfu']:.1f}%  |  {engine}, "
          f"planning {s['planning_wall_s']:.3f} s, total {s['wall_s']:.2f} s")
    print("\n".join(filter(None, (trust["band_text"], trust["warning"]))))
    if "goodput_mean" in s:
        print(long_run_line(s, res.config))
    for k, v in outputs.items():
        print(f"{k}: {v}")
    for n in notes:
        print(f"note: {n}")
    return 0


def _base_config(args):
    """The run of a TOML file, or of Megatron arguments (with the reader's notes)."""
    from dcpsim.errors import ConfigError
    from dcpsim.run import load_config

    meg = [f for f in (args.megatron_args, args.megatron_config) if f]
    if bool(args.config) + len(meg) != 1:
        raise ConfigError("config", args.config, "exactly one of a run file, --megatron-args or --megatron-config")
    if not meg:
        for flag, value, field in (("--gpus", args.gpus, "cluster.gpus"), ("--gpu", args.gpu, "hardware.gpu")):
            if value is not None:  # a run file's own value would be simulated, the flag silently dropped
                raise ConfigError(flag, value, f"no value with a run file (it sets {field}; override it with "
                                  f"--set {field}=...); {flag} is for --megatron-args/--megatron-config")
        return load_config(args.config), [], None
    from dcpsim.export.reader import megatron_config, read_args_file, read_config_yaml

    if args.gpus is None or args.gpus < 1:
        raise ConfigError("--gpus", args.gpus, "the GPU count of the Megatron run (not a Megatron argument)")
    if args.megatron_config:
        flags, env = read_config_yaml(args.megatron_config)
    else:
        flags, env = read_args_file(args.megatron_args), {}
    run = megatron_config(flags, gpus=args.gpus, gpu=args.gpu or "h100-sxm", env=env, where=meg[0])
    return run.config, [*run.notes, f"ignored (no effect on the step): {' '.join(run.ignored) or 'none'}"], run.batches


def long_run_line(s: dict, config: dict) -> str:
    """The long-run mode's result in one line (goodput over the seeds, Young/Daly, failures, episode ratios)."""
    sim = config.get("sim", {})
    yd = s["young_daly_goodput"]
    # the first-order formula's clamp (0 where a failure loses at least the job MTBF) is no figure
    yd = f"{100 * yd:.2f}%" if yd > 0 else ("n/a (restart + half a checkpoint segment >= the job MTBF: the "
                                            "first-order formula does not apply)")
    return (f"long run ({sim.get('long_run_hours', 0):g} h x {s['long_run_seeds']} seeds, {s.get('network', 'ideal')} "
            f"network): goodput {100 * s['goodput_mean']:.2f}% ± {100 * s['goodput_std']:.2f} "
            f"(min {100 * s['goodput_min']:.2f}%, max {100 * s['goodput_max']:.2f}%), Young/Daly "
            f"{yd}, {s['failures_mean']:.1f} failures per run, checkpoint every "
            f"{s['checkpoint_every_iterations']} iterations, slow-GPU x{s['slow_gpu_ratio']:.3f}, degraded-link "
            f"x{s['degraded_link_ratio']:.3f}")
