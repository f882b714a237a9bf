"""``dcpsim schedule``: plan one sampled global batch with a policy and summarise the plan."""

from __future__ import annotations

from dcpsim.commands._common import (
    add_config_flags,
    add_force,
    config_from_args,
    parse_set_item,
    print_json,
    print_table,
    profile_label,
    refuse_set_conflicts,
    with_default_profile,
)
from dcpsim.errors import ConfigError

SCHEDULE_FIELDS = (
    "policy.name", "model.name", "hardware.gpu", "workload.name", "workload.gbs", "sim.seed", "workload.min_len",
    "workload.max_len", "cluster.gpus", "parallel.tp", "parallel.pp", "parallel.cp", "parallel.min_cp",
    "parallel.max_tokens_per_rank", "parallel.cp_comm", "parallel.recompute",
)


def register(sub) -> None:
    p = sub.add_parser("schedule", help="plan one global batch with a scheduling policy and summarise the plan",
                       description="Plan one sampled global batch. Every run-config flag defaults to the run "
                       "config's value (--config FILE, else dcpsim's defaults, see dcpsim/run/config.py).")
    p.add_argument("--config", default=None, metavar="RUN.toml", help="base run configuration (default: dcpsim's defaults)")
    add_config_flags(p, SCHEDULE_FIELDS)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="policy option (TOML value), repeatable, e.g. --option cap_delta=0.1 "
                   "(same as --set policy.options.KEY=VALUE)")
    p.add_argument("--list", action="store_true", help="list the policies and exit")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--out", default=None, help="write the plan as JSON (Plan.save) to this path")
    add_force(p)
    p.set_defaults(func=run)


def _options(items: list[str]) -> dict:
    """``--option KEY=VALUE`` items as ``policy.options.KEY`` updates."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--option", item, "KEY=VALUE")
        _, out[f"policy.options.{key.strip()}"] = parse_set_item(f"policy.options.{key.strip()}={value}", "--option")
    return out


def run(args) -> int:
    from dcpsim.policies import evaluate_plan, get_policy, list_policies
    from dcpsim.run import load_config
    from dcpsim.run.single import build_cost_model, build_layout, plan_batch, sample_batches
    from dcpsim.run.streams import NAMES, stream

    if args.list:
        rows = [{"policy": n} for n in list_policies()]
        print_json(rows) if args.json else print_table(rows, title="policies")
        return 0
    if args.out:
        from dcpsim.outdir import check_out_file

        check_out_file(args.out, force=args.force)
    base = load_config(args.config) if args.config else None
    # a bare GPU name reads its calibrated profile where one exists, as simulate reads it (the output names it)
    options = _options(args.option)
    refuse_set_conflicts(args, {k: (f"--option {k.removeprefix('policy.options.')}", v) for k, v in options.items()})
    cfg = with_default_profile(config_from_args(args, base, extra=options))
    p, w = cfg.parallel, cfg.workload
    cost = build_cost_model(cfg)
    layout = build_layout(cfg, cost)
    # the batch and the plan `dcpsim simulate` draws and makes first for this config (same streams, same padding)
    lengths = sample_batches(cfg, 1)[0]
    policy = get_policy(cfg.policy.name, **dict(cfg.policy.options))
    plan = plan_batch(policy, lengths, layout, cost, stream(cfg.sim.seed, NAMES.index("policy")), cfg)
    summary = summarize_plan(plan, cost, evaluate_plan)
    wname = w.name if isinstance(w.name, str) else "custom"
    summary["config"] = {
        "policy": cfg.policy.name, "options": policy.options(), "model": cost.model.name, "gpu": cost.profile.name,
        "workload": wname, "gbs": w.gbs, "seed": cfg.sim.seed, "min_len": w.min_len,
        "max_len": w.max_len, "gpus": cfg.cluster.gpus, "layout": layout.to_dict(), "cp_comm": p.cp_comm,
        "recompute": p.recompute, "config_hash": cfg.config_hash(),
    }
    if args.out:
        plan.save(args.out)
        summary["plan_path"] = args.out
    summary["config"]["profile"] = profile_label(cfg.hardware.gpu)
    if args.json:
        print_json(summary)
        return 0
    print(f"profile {summary['config']['profile']}")
    rows = [{"quantity": k, "value": v} for k, v in summary.items() if not isinstance(v, dict)]
    print_table(rows, title=f"{cfg.policy.name}: {w.gbs} x {wname} on {cfg.cluster.gpus} GPUs "
                f"(dp={cfg.dp} cp={p.cp} tp={p.tp} pp={p.pp}, M={cfg.max_tokens_per_rank})")
    hist = summary["cp_histogram"]
    if hist:
        print_table([{"cp": int(c), "sequences": v["sequences"], "groups": v["groups"]} for c, v in hist.items()],
                    title="CP sizes")
    if args.out:
        print(f"wrote {args.out}")
    return 0


def summarize_plan(plan, cost, evaluate) -> dict:
    """Flat summary of a plan: counts, CP histogram, modelled balance and time, bound (seconds)."""
    ev = evaluate(plan, cost)
    groups: dict[int, int] = {}
    for st in plan.steps:
        for g in st.groups:
            if g.seq_ids:
                groups[g.size] = groups.get(g.size, 0) + 1
    seqs = plan.cp_histogram()
    lb = plan.lower_bound_s
    dropped = sorted(plan.dropped)
    executable = plan.meta.get("executable", True)
    return {
        "microbatches": plan.n_steps,
        "sequences": int(plan.lengths.size),
        "tokens": int(plan.lengths.sum()),
        "sequences_dropped": len(dropped),
        "tokens_dropped": int(plan.lengths[dropped].sum()) if dropped else 0,
        "load_balance_max_over_mean": ev.load_balance if executable else None,
        "modelled_makespan_s": ev.makespan_s if executable else None,
        "lower_bound_s": lb,
        "makespan_over_bound": ev.makespan_s / lb if executable and lb else None,
        "planning_time_s": plan.planning_time_s,
        "max_step_s": float(ev.step_time_s.max()) if ev.step_time_s.size else 0.0,
        "peak_memory_gib": ev.peak_memory_bytes / 2**30,
        "fits_memory": ev.fits_memory,
        "cp_histogram": {int(c): {"sequences": int(seqs.get(c, 0)), "groups": int(groups.get(c, 0))} for c in sorted(seqs)},
    }
