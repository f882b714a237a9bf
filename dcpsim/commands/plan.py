"""``dcpsim plan``: time, GPU-hours and cost to train N tokens, per GPU type, size and policy."""

from __future__ import annotations

from dcpsim.commands._common import parse_int_list, print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("plan", help="capacity planning: time, GPU-hours, cost per GPU type, size and policy (failures included)")
    p.add_argument("--model", default="llama-13b", help="model name or spec .toml (default llama-13b)")
    p.add_argument("--workload", default="github", help="workload preset or lengths file (default github)")
    p.add_argument("--tokens", type=float, default=1e12, help="training tokens (default 1e12)")
    p.add_argument("--gpus", default="h100-sxm:2.5", help="GPU:PRICE per GPU-hour, comma-separated (default h100-sxm:2.5)")
    p.add_argument("--sizes", default="512,1024,2048,4096", help="cluster sizes in GPUs (default 512,1024,2048,4096)")
    p.add_argument("--policies", default="packing,dynamic", help="policies to compare (default packing,dynamic)")
    p.add_argument("--deadline", default=None, help="e.g. 30d, 720h, 4w (plain number = days)")
    p.add_argument("--tp", type=int, default=None, help="fix TP (default: chosen per size)")
    p.add_argument("--pp", type=int, default=None, help="fix PP (default: smallest that fits memory)")
    p.add_argument("--cp", type=int, default=None, help="fix static CP (default: smallest power of two with CP*M >= max length)")
    p.add_argument("--config", default=None, help="base run TOML for everything else (max length, M, recompute, ...)")
    p.add_argument("--gbs", type=int, default=None, help="global batch in sequences at the smallest size (default: the config's, 2048)")
    p.add_argument("--batch-scaling", default="proportional", choices=["proportional", "fixed"],
                   help="proportional: the global batch grows with the GPU count (default); fixed: the same at every size")
    p.add_argument("--iterations", type=int, default=None, help="simulated iterations per configuration (default 3)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--mtbf-gpu-hours", type=float, default=None,
                   help="per-GPU mean time between failures in hours (default: from Llama 3, 54 d x 24 h x 16384 / 419)")
    p.add_argument("--checkpoint-s", type=float, default=60.0, help="seconds to write a checkpoint (default 60)")
    p.add_argument("--restart-s", type=float, default=600.0, help="seconds from a failure to training again (default 600)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="worker processes for the simulations (default: all cores)")
    p.add_argument("--plot", default=None, help="write cost vs time (Pareto front highlighted) to this PNG/PDF")
    p.add_argument("--csv", default=None, help="write all rows to this CSV")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.planning import FailureModel, llama3_gpu_mtbf_hours, parse_duration_days, plan_capacity
    from dcpsim.run.config import load_config

    fm = FailureModel(gpu_mtbf_h=args.mtbf_gpu_hours or llama3_gpu_mtbf_hours(), checkpoint_s=args.checkpoint_s,
                      restart_s=args.restart_s)
    deadline = parse_duration_days(args.deadline)
    plan = plan_capacity(
        args.model, args.workload, args.tokens, args.gpus, parse_int_list(args.sizes, "--sizes"),
        policies=[x.strip() for x in args.policies.split(",") if x.strip()], deadline_days=deadline,
        tp=args.tp, pp=args.pp, cp=args.cp, base=load_config(args.config) if args.config else None,
        gbs=args.gbs, batch_scaling=args.batch_scaling, iterations=args.iterations, seed=args.seed, failures=fm, jobs=args.jobs,
    )
    if args.plot:
        from dcpsim.report.plots import plot_cost_time

        plot_cost_time(plan.rows, args.plot, deadline=deadline,
                       title=f"{args.model} on {args.workload}: {args.tokens:.3g} tokens")
    if args.csv:
        plan.rows.to_csv(args.csv, index=False)
    if args.json:
        print_json(plan.to_dict())
        return 0
    cols = ["gpu", "gpus", "policy", "tp", "pp", "cp", "dp", "gbs", "status", "tflops_per_gpu", "scaling_efficiency",
            "goodput", "effective_days", "gpu_hours", "cost", "pareto", "meets_deadline"]
    rows = plan.rows.to_dict("records")
    for r in rows:
        if r["status"] != "ok":
            r["status"] = f"{r['status']}: {str(r.get('reason', ''))[:60]}"
    print_table(rows, columns=[c for c in cols if c in plan.rows.columns],
                title=f"{args.model} on {args.workload}, {args.tokens:.3g} tokens (time and cost include failures)")
    print(plan.recommendation)
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
