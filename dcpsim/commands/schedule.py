"""``dcpsim schedule``: plan one sampled global batch with a policy and summarise the plan."""

from __future__ import annotations

import json

import numpy as np

from dcpsim.commands._common import print_json, print_table
from dcpsim.errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("schedule", help="plan one global batch with a scheduling policy and summarise the plan")
    p.add_argument("--policy", default="dynamic", help="policy name (see --list; default dynamic)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="policy option (JSON value), repeatable, e.g. --option max_extra_microbatches=8")
    p.add_argument("--list", action="store_true", help="list the policies and exit")
    p.add_argument("--model", default="llama-13b", help="model name or spec .toml (default llama-13b)")
    p.add_argument("--gpu", default="h100-sxm", help="hardware profile name or folder (default h100-sxm)")
    p.add_argument("--workload", default="github", help="workload preset or lengths file (default github)")
    p.add_argument("--gbs", type=int, default=2048, help="sequences per global batch (default 2048)")
    p.add_argument("--seed", type=int, default=0, help="seed of the batch draw (default 0)")
    p.add_argument("--min-len", type=int, default=256, help="drop sequences shorter than this (default 256)")
    p.add_argument("--max-len", type=int, default=131072, help="drop sequences longer than this (default 131072)")
    p.add_argument("--gpus", type=int, default=64, help="total GPUs = tp*pp*dp*cp (default 64)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--pp", type=int, default=8, help="pipeline-parallel size (default 8)")
    p.add_argument("--cp", type=int, default=8, help="static CP size; dynamic CP goes up to dp*cp (default 8)")
    p.add_argument("--min-cp", type=int, default=1, help="smallest dynamic CP size (power of two, default 1)")
    p.add_argument("--max-tokens-per-rank", type=int, default=65536,
                   help="Megatron --max-seqlen-per-dp-cp-rank: tokens per rank per microbatch (default 65536)")
    p.add_argument("--cp-comm", default="p2p", choices=["p2p", "all_gather", "a2a"])
    p.add_argument("--recompute", default="full", choices=["none", "selective", "full"])
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--out", default=None, help="write the plan as JSON (Plan.save) to this path")
    p.set_defaults(func=run)


def _options(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--option", item, "KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run(args) -> int:
    from dcpsim.cost import CostModel
    from dcpsim.policies import Layout, evaluate_plan, get_policy, list_policies
    from dcpsim.workload import get_workload, sample_global_batch

    if args.list:
        rows = [{"policy": n} for n in list_policies()]
        print_json(rows) if args.json else print_table(rows, title="policies")
        return 0
    for name in ("gpus", "tp", "pp", "cp", "gbs", "max_tokens_per_rank", "min_cp"):
        v = getattr(args, name)
        if v < 1:
            raise ConfigError(f"--{name.replace('_', '-')}", v, "a positive integer")
    per = args.tp * args.pp * args.cp
    if args.gpus % per:
        raise ConfigError("--gpus", args.gpus, f"a multiple of tp*pp*cp ({args.tp}*{args.pp}*{args.cp} = {per})")
    dp = args.gpus // per
    layout = Layout(dp=dp, cp=args.cp, max_tokens_per_rank=args.max_tokens_per_rank, tp=args.tp, pp=args.pp,
                    min_cp=args.min_cp)
    cost = CostModel(args.gpu, args.model, tp=args.tp, pp=args.pp, dp_cp=dp * args.cp, cp_comm=args.cp_comm,
                     recompute=args.recompute)
    layout = Layout(**{**layout.to_dict(), "gpus_per_domain": cost.profile.nvlink_domain_gpus})
    dist = get_workload(args.workload, min_len=args.min_len, max_len=args.max_len)
    lengths = sample_global_batch(dist, args.gbs, np.random.default_rng(args.seed))
    policy = get_policy(args.policy, **_options(args.option))
    plan = policy.plan(lengths, layout, cost)
    summary = summarize_plan(plan, cost, evaluate_plan)
    summary["config"] = {
        "policy": args.policy, "options": policy.options(), "model": cost.model.name, "gpu": cost.profile.name,
        "workload": args.workload, "gbs": args.gbs, "seed": args.seed, "min_len": args.min_len,
        "max_len": args.max_len, "gpus": args.gpus, "layout": layout.to_dict(), "cp_comm": args.cp_comm,
        "recompute": args.recompute,
    }
    if args.out:
        plan.save(args.out)
        summary["plan_path"] = args.out
    if args.json:
        print_json(summary)
        return 0
    rows = [{"quantity": k, "value": v} for k, v in summary.items() if not isinstance(v, dict)]
    print_table(rows, title=f"{args.policy}: {args.gbs} x {args.workload} on {args.gpus} GPUs "
                f"(dp={dp} cp={args.cp} tp={args.tp} pp={args.pp}, M={args.max_tokens_per_rank})")
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
