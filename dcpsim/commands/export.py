"""``dcpsim export --config run.toml --out DIR``: what a Megatron-LM run of this configuration needs."""

from __future__ import annotations

from dcpsim.commands._common import (
    POS_INT,
    add_config_flags,
    add_force,
    config_from_args,
    print_json,
    profile_label,
    with_default_profile,
)


def register(sub) -> None:
    p = sub.add_parser("export", help="write Megatron-LM arguments, launch template, lengths and expectations for a run")
    p.add_argument("--config", required=True, help="run configuration TOML")
    add_config_flags(p, [])  # --set section.field=VALUE
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--allow-approximate", action="store_true",
                   help="export a policy Megatron lacks (packing-balanced, dynamic-solver, milp) as the closest Megatron scheduler")
    p.add_argument("--no-simulate", action="store_true", help="skip the simulation (no expected.json)")
    p.add_argument("--train-iters", type=POS_INT, default=None,
                   help="--train-iters of the exported run (default max(30, 3 x step.log_interval): three log lines)")
    p.add_argument("--gpus-per-node", type=POS_INT, default=None, help="for launch.sh (default: the hardware profile's)")
    p.add_argument("--json", action="store_true")
    add_force(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.export import export_megatron
    from dcpsim.run import load_config

    given = config_from_args(args, load_config(args.config))
    cfg = with_default_profile(given)  # the profile simulate reads for the same config (calibrated where one exists)
    exp = export_megatron(cfg if (args.set_fields or cfg is not given) else args.config, args.out, allow_approximate=args.allow_approximate,
                          simulate=not args.no_simulate, train_iters=args.train_iters,
                          gpus_per_node=args.gpus_per_node, force=args.force)
    info = {"policy": exp.policy, "scheduler": exp.scheduler, "approximate": exp.approximate,
            "files": exp.files, "notes": exp.notes,
            "expected": {k: v for k, v in (exp.expected or {}).items() if k in
                         ("iteration_time_s", "tflops_per_gpu", "tokens_per_s", "mfu", "config_hash")}}
    if args.json:
        print_json(info)
        return 0
    print(f"profile {profile_label(cfg.hardware.gpu)}")
    print(f"policy {exp.policy} -> --sequence-packing-scheduler {exp.scheduler}"
          + (" (approximation)" if exp.approximate else ""))
    for path in exp.files.values():
        print(f"  wrote {path}")
    e = info["expected"]
    if e:
        print(f"expected: iteration {e.get('iteration_time_s', float('nan')):.3f} s, "
              f"{e.get('tflops_per_gpu', float('nan')):.1f} TFLOPS/GPU, {e.get('tokens_per_s', float('nan')):,.0f} tokens/s")
    for n in exp.notes:
        print(f"note: {n}")
    return 0
