"""``dcpsim plan``: search the layout per GPU type, size and policy; time, GPU-hours and cost to train N tokens."""

from __future__ import annotations

from typing import Any

from dcpsim.commands._common import (
    NONNEG_FLOAT,
    POS_FLOAT,
    POS_INT,
    SEED,
    add_config_flags,
    add_force,
    config_from_args,
    parse_int_list,
    print_json,
    print_table,
)

DEFAULTS: dict[str, Any] = {
    "model": "llama-13b", "tokens": "1T", "gpus": "h100-sxm:2.5", "sizes": "512,1024,2048,4096",
    "policies": "packing,dynamic", "seq_len": 4096, "gbs_tokens": "4M", "batch_scaling": "fixed", "seeds": 3,
    "top": 3, "simulate": 6, "checkpoint_s": 60.0, "restart_s": 600.0,
}


def register(sub) -> None:
    p = sub.add_parser("plan", help="capacity planning: best layouts, time, GPU-hours and cost per GPU type, size "
                                    "and policy (failures included)")
    d = DEFAULTS
    p.add_argument("--model", default=None, help=f"model name or spec .toml (default {d['model']})")
    p.add_argument("--tokens", default=None, help=f"training tokens, e.g. 2T, 300B, 1e12 (default {d['tokens']})")
    p.add_argument("--gpus", default=None, help=f"GPU:PRICE per GPU-hour, comma-separated (default {d['gpus']})")
    p.add_argument("--sizes", default=None, help=f"cluster sizes in GPUs (default {d['sizes']})")
    p.add_argument("--policies", default=None, help=f"policies to compare (default {d['policies']})")
    g = p.add_argument_group("data and batch")
    g.add_argument("--seq-len", type=POS_INT, default=None,
                   help=f"fixed-length pre-training windows of this many tokens (default {d['seq_len']} "
                        "unless --workload, --data or a --config workload is given)")
    g.add_argument("--documents", default=None, help="with --seq-len: per-document attention, documents from this "
                                                     "workload (default: attention over the whole window)")
    g.add_argument("--workload", default=None, help="variable-length workload preset or lengths file (long-context, SFT)")
    g.add_argument("--max-len", type=POS_INT, default=None, help="longest sequence of a variable-length workload "
                                                             "(default 131072)")
    g.add_argument("--data", default=None, help="named data preset (see dcpsim.planning.DATA_PRESETS), e.g. "
                                                "pretrain-4k, long-context-128k, sft-8k")
    g.add_argument("--gbs-tokens", default=None, help=f"global batch in tokens: 4M, 16M, 4194304 "
                                                      f"(default {d['gbs_tokens']}; K/M/G are powers of two)")
    g.add_argument("--gbs", type=POS_INT, default=None, help="global batch in sequences (instead of --gbs-tokens)")
    g.add_argument("--max-gbs-tokens", default=None, help="the largest batch known to converge; larger batches warn")
    g.add_argument("--batch-scaling", default=None, choices=["proportional", "fixed"],
                   help="fixed: the same batch at every size (default); proportional: grows with the GPU count")
    s = p.add_argument_group("layout search (comma lists narrow the search; one value forces it)")
    for name, what in (("tp", "tensor parallel"), ("pp", "pipeline stages"), ("vp", "virtual stages per pipeline "
                       "rank"), ("cp", "static context parallel"), ("mbs", "sequences per microbatch (fixed "
                       "windows)"), ("tokens-per-rank", "tokens per rank per microbatch (variable lengths)")):
        s.add_argument(f"--{name}", default=None, help=f"{what} (default: searched)")
    s.add_argument("--recompute", default=None, help="none,selective,full (default: searched)")
    s.add_argument("--precision", default=None, help="bf16,fp8 where the time model has it (default: searched)")
    s.add_argument("--top", type=POS_INT, default=None, help=f"layouts shown per size (default {d['top']})")
    s.add_argument("--simulate", type=POS_INT, default=None,
                   help=f"screened layouts simulated per size and policy (default {d['simulate']})")
    t = p.add_argument_group("time to train")
    t.add_argument("--deadline", default=None, help="e.g. 30d, 720h, 4w (plain number = days; default none)")
    t.add_argument("--iterations", type=POS_INT, default=None, help="simulated iterations per layout (default 1 for "
                                                                 "fixed windows, 2 otherwise)")
    t.add_argument("--seed", type=SEED, default=None)
    t.add_argument("--seeds", type=POS_INT, default=None, help=f"seeds for the spread of the best layouts (default "
                                                          f"{d['seeds']}; fixed windows without noise need one)")
    t.add_argument("--mtbf-gpu-hours", type=POS_FLOAT, default=None,
                   help="per-GPU mean time between failures in hours (default: from Llama 3, 54 d x 24 h x 16384 / 419)")
    t.add_argument("--checkpoint-s", type=NONNEG_FLOAT, default=None, help=f"seconds to write a checkpoint (default "
                                                                    f"{d['checkpoint_s']:g})")
    t.add_argument("--restart-s", type=NONNEG_FLOAT, default=None, help=f"seconds from a failure to training again "
                                                                 f"(default {d['restart_s']:g})")
    p.add_argument("--config", default=None, help="base run TOML for everything else (recompute, network, sim ...)")
    add_config_flags(p, [])  # --set section.field=VALUE on the base configuration
    p.add_argument("-j", "--jobs", type=POS_INT, default=None, help="worker processes (default 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--plot", default=None, help="write cost vs days (Pareto front highlighted) to this PNG/PDF")
    p.add_argument("--csv", default=None, help="write the best layout per GPU type, size and policy to this CSV")
    p.add_argument("--json", action="store_true")
    add_force(p)
    p.set_defaults(func=run)


def _get(args, name: str):
    v = getattr(args, name)
    return (DEFAULTS.get(name), True) if v is None else (v, False)


def _list(text: str | None, field: str, cast=int):
    if text is None:
        return None
    from dcpsim.errors import ConfigError

    if cast is int:
        return parse_int_list(text, field)
    vals = [x.strip() for x in str(text).split(",") if x.strip()]
    if not vals:
        raise ConfigError(field, text, "a non-empty comma-separated list")
    return vals


def build_space(args):
    from dcpsim.errors import ConfigError
    from dcpsim.planning import SearchSpace
    from dcpsim.planning.space import RECOMPUTE

    rec = _list(args.recompute, "--recompute", str)
    if rec and any(r not in RECOMPUTE for r in rec):
        raise ConfigError("--recompute", args.recompute, f"values from {RECOMPUTE}")
    return SearchSpace(tp=_list(args.tp, "--tp"), pp=_list(args.pp, "--pp"), vp=_list(args.vp, "--vp"),
                       cp=_list(args.cp, "--cp"), mbs=_list(args.mbs, "--mbs"),
                       tokens_per_rank=_list(args.tokens_per_rank, "--tokens-per-rank"), recompute=rec,
                       precision=_list(args.precision, "--precision", str))


def _config_workload(args) -> str | None:
    """The workload name the --config file sets itself ('fixed', a preset, 'custom'), or None if it sets none."""
    if not args.config:
        return None
    from dcpsim.validation import read_toml

    w = read_toml(args.config, "--config").get("workload", {})
    if "name" not in w:
        return None
    return w["name"] if isinstance(w["name"], str) else "custom"


def _check_agreement(args, cfg_name: str | None, base) -> None:
    """An explicit data flag may not silently override the data the --config file states."""
    from dcpsim.errors import ConfigError

    if cfg_name is None:
        return
    if args.workload is not None and args.workload != cfg_name:
        raise ConfigError("--workload", args.workload, f"the --config's workload ({cfg_name}) or no --workload "
                                                       "(they disagree)")
    if args.seq_len is not None and (cfg_name != "fixed" or base.workload.seq_len != args.seq_len):
        raise ConfigError("--seq-len", args.seq_len, f"agreement with the --config's workload ({cfg_name}, seq_len "
                                                     f"{base.workload.seq_len}) or no --seq-len (they disagree)")
    if args.data is not None:
        raise ConfigError("--data", args.data, f"no --data with a --config that sets its workload ({cfg_name})")


def build_data(args, base):
    """The DataSpec from the flags and the config; explicit data flags must agree with the config's workload."""
    from dcpsim.planning import make_data_spec, parse_token_count

    gbs_tokens = parse_token_count(args.gbs_tokens) if args.gbs_tokens is not None else None
    kw = dict(gbs=args.gbs, gbs_tokens=gbs_tokens, documents=args.documents)
    cfg_name = _config_workload(args)
    _check_agreement(args, cfg_name, base)
    if cfg_name is not None:
        w = base.workload
        if args.gbs is None and gbs_tokens is None:
            kw["gbs"] = w.gbs
        if cfg_name == "fixed":
            return make_data_spec(seq_len=w.seq_len, **kw | {"documents": args.documents or w.documents})
        return make_data_spec(workload=w.name, max_len=args.max_len or w.max_len, min_len=w.min_len, **kw)
    if args.data is not None:
        return make_data_spec(preset=args.data, max_len=args.max_len, **kw)
    if args.workload is not None:
        return make_data_spec(workload=args.workload, max_len=args.max_len, **kw)
    return make_data_spec(seq_len=args.seq_len or DEFAULTS["seq_len"], **kw)


def header(args, data, space_desc: dict, fm, tokens: float) -> list[str]:
    """Every input of the plan, defaults marked, one line each."""
    lines = ["dcpsim plan: inputs (* = default)"]

    def add(label: str, value, default: bool) -> None:
        lines.append(f"  {label:<22} {value}{' *' if default else ''}")

    for name in ("model", "gpus", "sizes", "policies"):
        v, dflt = _get(args, name)
        add(name, v, dflt)
    add("tokens", f"{tokens:.4g}", args.tokens is None)
    add("data", data.describe(), args.seq_len is None and args.workload is None and args.data is None
        and _config_workload(args) is None)
    add("global batch", f"{data.gbs:,} sequences = {data.gbs_tokens:,.0f} tokens",
        args.gbs is None and args.gbs_tokens is None)
    add("batch scaling", _get(args, "batch_scaling")[0], args.batch_scaling is None)
    add("max gbs tokens", args.max_gbs_tokens or "none", args.max_gbs_tokens is None)
    for k, v in space_desc.items():
        add(f"search {k}", v, isinstance(v, str) or k == "overlap_flags")
    add("deadline", args.deadline or "none", args.deadline is None)
    add("failures", f"GPU MTBF {fm.gpu_mtbf_h:,.0f} h, checkpoint {fm.checkpoint_s:g} s, restart {fm.restart_s:g} s",
        args.mtbf_gpu_hours is None and args.checkpoint_s is None and args.restart_s is None)
    add("simulated iterations", args.iterations or "1 (fixed windows) / 2 (variable lengths)", args.iterations is None)
    add("seeds", _get(args, "seeds")[0], args.seeds is None)
    add("simulated per search", _get(args, "simulate")[0], args.simulate is None)
    add("layouts shown", _get(args, "top")[0], args.top is None)
    add("worker processes", args.jobs or 2, args.jobs is None)
    add("base config", args.config or "RunConfig defaults (dcpsim/run/config.py)", args.config is None)
    return lines


def _check_outputs(args) -> None:
    """--plot and --csv are checked before any work (see dcpsim.outdir)."""
    from dcpsim.outdir import check_out_file
    from dcpsim.report.plots import FIGURE_SUFFIXES

    if args.plot:
        check_out_file(args.plot, force=args.force, field="--plot", suffixes=FIGURE_SUFFIXES)
    if args.csv:
        check_out_file(args.csv, force=args.force, field="--csv")


def run(args) -> int:
    from dcpsim.errors import InfeasibleError
    from dcpsim.planning import (
        FailureModel,
        llama3_gpu_mtbf_hours,
        parse_duration_days,
        parse_token_count,
        plan_capacity,
    )
    from dcpsim.planning.capacity import space_description
    from dcpsim.run.config import load_config

    _check_outputs(args)

    base = config_from_args(args, load_config(args.config) if args.config else None) if (
        args.config or args.set_fields) else None
    model = args.model if args.model is not None else (base.model.name if base is not None else DEFAULTS["model"])
    tokens = float(parse_token_count(DEFAULTS["tokens"] if args.tokens is None else args.tokens, "--tokens", binary=False))
    from dcpsim.model import get_model

    get_model(model)  # a bad name or file is one line now, not a failure in every worker
    fm = FailureModel(gpu_mtbf_h=llama3_gpu_mtbf_hours() if args.mtbf_gpu_hours is None else args.mtbf_gpu_hours,
                      checkpoint_s=_get(args, "checkpoint_s")[0], restart_s=_get(args, "restart_s")[0])
    deadline = parse_duration_days(args.deadline)
    data = build_data(args, base)
    space = build_space(args)
    max_gbs = parse_token_count(args.max_gbs_tokens, "--max-gbs-tokens") if args.max_gbs_tokens else None
    if not args.json:
        print("\n".join(header(args, data, space_description(space), fm, tokens)))
    plan = plan_capacity(
        model, None, tokens, _get(args, "gpus")[0], parse_int_list(_get(args, "sizes")[0], "--sizes"), data=data,
        policies=[x.strip() for x in _get(args, "policies")[0].split(",") if x.strip()], deadline_days=deadline,
        space=space, base=base, batch_scaling=_get(args, "batch_scaling")[0], iterations=args.iterations,
        seed=args.seed, seeds=_get(args, "seeds")[0], failures=fm, simulate=_get(args, "simulate")[0],
        max_gbs_tokens=max_gbs, jobs=args.jobs, progress=not args.no_progress and not args.json,
    )
    df = plan.rows
    if not (df["status"] == "ok").any():
        reasons = [r for r in df["reason"] if r]
        raise InfeasibleError("layout", "no GPU type and size can run this plan: "
                              + (reasons[0] if reasons else "see the rows"))
    if args.plot:
        from dcpsim.report.plots import plot_cost_time

        plot_cost_time(df, args.plot, deadline=deadline, title=f"{model}: {tokens:.3g} tokens")
    if args.csv:
        from dcpsim.outdir import write_with

        write_with(args.csv, lambda t: df.to_csv(t, index=False))
    if args.json:
        print_json(plan.to_dict())
        return 0
    _print_plan(plan, _get(args, "top")[0], model, tokens)
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def _print_plan(plan, top: int, model: str, tokens: float) -> None:
    import math

    cols = ["gpu", "gpus", "policy", "layout", "status", "tflops_per_gpu", "goodput", "effective_days", "days_spread",
            "gpu_hours", "cost", "pareto", "meets_deadline"]
    rows = plan.rows.to_dict("records")
    for r in rows:
        if r["status"] != "ok":
            r["status"] = f"{r['status']}: {str(r.get('reason', ''))[:90]}"
        lo, hi = r.get("effective_days_min"), r.get("effective_days_max")
        r["days_spread"] = f"{lo:.2f}-{hi:.2f}" if isinstance(lo, float) and math.isfinite(lo) else ""
        if r.get("meets_deadline") is None:
            r["meets_deadline"] = "-"
    print_table(rows, columns=[c for c in cols if c in plan.rows.columns or c == "days_spread"],
                title=f"{model}, {tokens:.3g} tokens: best layout per GPU type, size and policy (failures included)")
    if plan.layouts is not None and len(plan.layouts):
        print(f"Top {top} layouts per size (simulated; seconds per iteration and where they go):")
        print("\n".join(layout_lines(plan.layouts, top)))
    for w in plan.warnings:
        print(w)
    print(plan.recommendation)


def _shown(v) -> bool:
    return isinstance(v, float) and v == v and abs(v) > 5e-4


def layout_lines(layouts, top: int) -> list[str]:
    """The top simulated layouts of every search as indented text: time, throughput, memory, breakdown, why."""
    from dcpsim.sim import BREAKDOWN

    skip = {"iteration_time_s", "screen_time_s", "tokens_per_s"}
    extra = [c for c in layouts.columns if c.endswith("_s") and c not in BREAKDOWN and c not in skip]
    out: list[str] = []
    for (gpu, gpus, pol), g in layouts.groupby(["gpu", "gpus", "policy"], sort=False):
        out.append(f"  {gpus} x {gpu}, {pol}:")
        for _, r in g[(g["rank"] <= top) & (g["status"] == "ok")].iterrows():
            parts = ", ".join(f"{k.removesuffix('_s')} {r[k]:.3f}" for k in (*BREAKDOWN, *extra)
                              if not k.startswith("part_") and _shown(r.get(k)))
            comp = ", ".join(f"{k.removeprefix('part_').removesuffix('_s')} {r[k]:.3f}" for k in extra
                             if k.startswith("part_") and _shown(r.get(k)))
            out.append(f"    {int(r['rank'])}. {r['layout']} (DP {int(r['dp'])}): {r['iteration_time_s']:.3f} s, "
                       f"{r['tflops_per_gpu']:.0f} TFLOPS/GPU, {r['memory_gib']:.1f} GiB")
            out.append(f"       {parts}")
            if comp:
                out.append(f"       compute and fixed costs (cost model, busiest stage): {comp}")
            out.append(f"       why: {r.get('why', '')}")
    return out
