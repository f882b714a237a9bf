"""``dcpsim plan``: search the layout per GPU type, size and policy; time, GPU-hours and cost to train N tokens.

A bare GPU name in ``--gpus`` means its calibrated profile where one exists (``h100-sxm`` ->
``h100-sxm-calibrated``; ``h100-sxm-datasheet`` for the uncalibrated, optimistic one; see
:mod:`dcpsim.hardware.defaults`). Every figure carries an 80% prediction band from the validated runs
nearest to it, or says why it has none (:mod:`dcpsim.planning.trust`, :mod:`dcpsim.published.bands`), and a
row above the best published MFU of its GPU and precision carries a warning.
"""

from __future__ import annotations

from typing import Any

from dcpsim.commands._common import (
    POS_INT,
    add_config_flags,
    add_force,
    config_from_args,
    config_updates,
    parse_int_list,
    print_json,
    print_table,
)
from dcpsim.units import UNITS_HELP

DEFAULTS: dict[str, Any] = {
    "model": "llama-13b", "tokens": "1T", "gpus": "h100-sxm:2.5", "sizes": "512,1024,2048,4096",
    "policies": "packing,dynamic", "seq_len": 4096, "gbs_tokens": "4Mi", "batch_scaling": "fixed", "seeds": 3,
    "top": 3, "simulate": 6,
}
# run-config fields with a dedicated flag (derived from the field: --mtbf-gpu-hours, --checkpoint-s, ...)
CONFIG_FLAGS = ("sim.gpu_mtbf_h", "sim.checkpoint_s", "sim.restart_s", "sim.checkpoint_interval_s",
                "sim.long_run_seeds", "sim.network", "sim.seed")


def register(sub) -> None:
    p = sub.add_parser("plan", help="capacity planning: best layouts, time, GPU-hours and cost per GPU type, size "
                                    "and policy (failures included)")
    d = DEFAULTS
    p.add_argument("--model", default=None, help=f"model name or spec .toml (default {d['model']})")
    p.add_argument("--tokens", default=None, help=f"training tokens, e.g. 2T, 300B, 1e12 (default {d['tokens']}; "
                                                  f"{UNITS_HELP})")
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
    g.add_argument("--gbs-tokens", default=None, help=f"global batch in tokens: 4Mi, 16M, 4194304 "
                                                      f"(default {d['gbs_tokens']} = 4,194,304; {UNITS_HELP})")
    g.add_argument("--gbs", type=POS_INT, default=None, help="global batch in sequences (instead of --gbs-tokens)")
    g.add_argument("--max-gbs-tokens", default=None, help="the largest batch known to converge, in tokens; larger "
                                                          f"batches warn ({UNITS_HELP})")
    g.add_argument("--batch-scaling", default=None, choices=["proportional", "fixed"],
                   help="fixed: the same batch at every size (default); proportional: grows with the GPU count")
    s = p.add_argument_group("layout search (comma lists narrow the search; one value forces it)")
    for name, what in (("tp", "tensor parallel"), ("pp", "pipeline stages"), ("vp", "virtual stages per pipeline "
                       "rank"), ("cp", "static context parallel"), ("mbs", "sequences per microbatch (fixed "
                       "windows)"), ("tokens-per-rank", "tokens per rank per microbatch (variable lengths)")):
        s.add_argument(f"--{name}", default=None, help=f"{what} (default: searched)")
    s.add_argument("--recompute", default=None, help="none,selective,full (default: the --config's or --set "
                                                     "parallel.recompute when it states one, else searched)")
    s.add_argument("--precision", default=None, help="bf16,fp8 where the time model has it (default: the --config's "
                                                     "or --set parallel.precision when it states one, else searched)")
    s.add_argument("--top", type=POS_INT, default=None, help=f"layouts shown per size (default {d['top']})")
    s.add_argument("--simulate", type=POS_INT, default=None,
                   help=f"screened layouts simulated per size and policy (default {d['simulate']})")
    t = p.add_argument_group("time to train")
    t.add_argument("--deadline", default=None, help="e.g. 30d, 720h, 4w (plain number = days; default none)")
    t.add_argument("--iterations", type=POS_INT, default=None, help="simulated iterations per layout and seed (default "
                                                                 "1 for fixed windows, 2 otherwise)")
    t.add_argument("--seeds", type=POS_INT, default=None, help=f"seeds for the throughput spread of the best layouts "
                                                          f"(default {d['seeds']}; fixed windows without noise need one)")
    f = p.add_argument_group("failures, long run and network (run-config fields; also --set sim.FIELD=VALUE, e.g. "
                             "sim.long_run_hours=H for a fixed horizon instead of each row's planned duration, "
                             "sim.slow_gpu_per_day, sim.degraded_link_per_day)")
    add_config_flags(f, list(CONFIG_FLAGS), set_flag=False)
    p.add_argument("--config", default=None, help="base run TOML for everything else (model, network, failures, "
                   "sim ...); a parallel.recompute or parallel.precision it states is used, not searched (unless "
                   "--recompute/--precision); a layout, cluster.gpus, hardware.gpu or policy.name other than the "
                   "default is refused (the plan sets them: --tp ..., --sizes, --gpus, --policies)")
    add_config_flags(p, [])  # --set section.field=VALUE on the base configuration
    p.add_argument("-j", "--jobs", type=POS_INT, default=None, help="worker processes (default 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--plot", default=None, help="write cost vs days (Pareto front highlighted) to this PNG/PDF")
    p.add_argument("--csv", default=None, help="write the best layout per GPU type, size and policy to this CSV")
    p.add_argument("--out", default=None, metavar="DIR", help="write a one-page report into DIR: plan.md and plan.png "
                                                           "(cost vs days with the 80%% bands and Pareto fronts, the "
                                                           "chosen layout, where its time goes, goodput under failures)")
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


PRECISIONS = ("bf16", "fp8")


def stated_parallel(args) -> dict[str, Any]:
    """``parallel.recompute`` / ``parallel.precision`` as the --config file or --set states them (not defaults)."""

    out: dict[str, Any] = {}
    if args.config:
        from dcpsim.schema import read_toml

        par = read_toml(args.config, "--config").get("parallel", {})
        out |= {k: par[k] for k in ("recompute", "precision") if isinstance(par, dict) and k in par}
    upd = config_updates(args)[0]
    out |= {k: upd[f"parallel.{k}"] for k in ("recompute", "precision") if f"parallel.{k}" in upd}
    return out


def build_space(args, stated: dict[str, Any] | None = None):
    """The search space of the flags; a recompute/precision the config states is forced (its flag must agree)."""
    from dcpsim.errors import ConfigError
    from dcpsim.planning import SearchSpace
    from dcpsim.planning.space import RECOMPUTE

    stated = stated or {}
    rec = _list(args.recompute, "--recompute", str)
    if rec and any(r not in RECOMPUTE for r in rec):
        raise ConfigError("--recompute", args.recompute, f"values from {RECOMPUTE}")
    prec = _list(args.precision, "--precision", str)
    if prec and any(x not in PRECISIONS for x in prec):
        raise ConfigError("--precision", args.precision, f"values from {PRECISIONS}")
    for flag, vals, key in (("--recompute", rec, "recompute"), ("--precision", prec, "precision")):
        if key in stated and vals is not None and vals != [stated[key]]:
            raise ConfigError(flag, ",".join(vals), f"agreement with the configuration's parallel.{key} = "
                              f"{stated[key]!r} or no {flag} (they disagree)")
    rec = rec if rec is not None else ([stated["recompute"]] if "recompute" in stated else None)
    prec = prec if prec is not None else ([stated["precision"]] if "precision" in stated else None)
    return SearchSpace(tp=_list(args.tp, "--tp"), pp=_list(args.pp, "--pp"), vp=_list(args.vp, "--vp"),
                       cp=_list(args.cp, "--cp"), mbs=_list(args.mbs, "--mbs"),
                       tokens_per_rank=_list(args.tokens_per_rank, "--tokens-per-rank"), recompute=rec,
                       precision=prec)


def _config_workload(args) -> str | None:
    """The workload name the --config file sets itself ('fixed', a preset, 'custom'), or None if it sets none."""
    if not args.config:
        return None
    from dcpsim.schema import read_toml

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


def _check_data_flags(args) -> None:
    """Data flags that cannot act together are refused, never ignored: --data with --seq-len/--workload,
    --max-len with fixed windows, --documents naming no workload."""
    from dcpsim.errors import ConfigError
    from dcpsim.planning.inputs import DATA_PRESETS

    if args.data is not None:
        for flag, v in (("--seq-len", args.seq_len), ("--workload", args.workload)):
            if v is not None:
                raise ConfigError(flag, v, f"no {flag} with --data {args.data} (the preset sets the data: "
                                  f"{DATA_PRESETS[args.data].description if args.data in DATA_PRESETS else 'unknown'}"
                                  "); drop one of them")
    if args.documents is not None:
        from dcpsim.workload import get_workload

        try:
            get_workload(args.documents)
        except ConfigError as exc:
            raise ConfigError("--documents", args.documents, exc.expected) from None


def build_data(args, base):
    """The DataSpec from the flags and the config; explicit data flags must agree with the config's workload, and
    the layout flag of the other kind of data (--mbs: fixed windows, --tokens-per-rank: variable lengths) is
    refused, never ignored."""
    from dcpsim.errors import ConfigError

    _check_data_flags(args)
    spec = _data_spec(args, base)
    if args.max_len is not None and spec.fixed:
        raise ConfigError("--max-len", args.max_len, "only with variable-length data (--workload, a --data preset of "
                          f"variable lengths, or a --config workload); this plan uses {spec.describe()}")
    flag, value, kind = (("--tokens-per-rank", getattr(args, "tokens_per_rank", None), "variable-length data "
                          "(with fixed windows --mbs sets the tokens per rank)") if spec.fixed else
                         ("--mbs", getattr(args, "mbs", None), "fixed windows (with variable lengths "
                          "--tokens-per-rank sizes a microbatch)"))
    if value is not None:
        raise ConfigError(flag, value, f"only with {kind}; this plan uses {spec.describe()}")
    return spec


def _data_spec(args, base):
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


def sim_lines(base) -> dict[str, tuple[str, bool]]:
    """Header lines of the failure, long-run and network inputs: {label: (text, all at their defaults)}."""
    from dcpsim.run.config import RunConfig

    s, d = base.sim, RunConfig().sim

    def same(*names: str) -> bool:
        return all(getattr(s, n) == getattr(d, n) for n in names)

    iv = "Young's optimum" if s.checkpoint_interval_s == "young" else f"every {s.checkpoint_interval_s:g} s of work"
    src = " (Llama 3 report: 419 interruptions, 54 days, 16,384 GPUs)" if same("gpu_mtbf_h") else ""
    horizon = (f"{s.long_run_hours:g} h (a representative horizon)" if s.long_run_hours > 0
               else "each row's planned duration")
    eps = [f"slow GPU x{s.slow_gpu_slowdown:g} {s.slow_gpu_per_day:g}/day for {s.slow_gpu_episode_s:g} s"
           if s.slow_gpu_per_day > 0 else "",
           f"degraded link x{s.degraded_link_episode_scale:g} bandwidth {s.degraded_link_per_day:g}/day for "
           f"{s.degraded_link_episode_s:g} s" if s.degraded_link_per_day > 0 else ""]
    eps_text = "; ".join(e for e in eps if e) or "none"
    return {
        "failures": (f"GPU MTBF {s.gpu_mtbf_h:,.0f} h{src}, checkpoint {s.checkpoint_s:g} s, restart "
                     f"{s.restart_s:g} s, checkpoints {iv}",
                     same("gpu_mtbf_h", "checkpoint_s", "restart_s", "checkpoint_interval_s")),
        "long run": (f"{s.long_run_seeds} seeds over {horizon} (sim.long_run_seeds, sim.long_run_hours)",
                     same("long_run_seeds", "long_run_hours")),
        "slow episodes": (eps_text, same("slow_gpu_per_day", "degraded_link_per_day")),
        "network": (f"search on ideal (exact fast path); best layouts evaluated on {s.network}", same("network")),
    }


def header(args, data, space_desc: dict, base, request: tuple[str, float]) -> list[str]:
    """Every input of the plan (``request``: the model planned and the tokens), defaults marked, one line each."""
    model, tokens = request
    lines = ["dcpsim plan: inputs (* = default)"]

    def add(label: str, value, default: bool) -> None:
        lines.append(f"  {label:<22} {value}{' *' if default else ''}")

    add("model", model, args.model is None and not args.config and "model.name" not in config_updates(args)[0])
    for name in ("gpus", "sizes", "policies"):
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
    for label, (text, dflt) in sim_lines(base).items():
        add(label, text, dflt)
    iters = _iterations(args)
    add("simulated iterations", iters or "1 (fixed windows) / 2 (variable lengths)", iters is None)
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
    from pathlib import Path

    from dcpsim.outdir import check_distinct
    from dcpsim.report.plan_report import REPORT_MD, REPORT_PNG

    check_distinct({"--out": [Path(args.out) / f for f in (REPORT_MD, REPORT_PNG)] if args.out else [],
                    "--plot": [args.plot] if args.plot else [], "--csv": [args.csv] if args.csv else []})
    if args.out:
        from dcpsim.outdir import check_out_dir

        check_out_dir(args.out, force=args.force)


# run-config fields the plan sets itself (per GPU type, size, policy, layout and data): a --set of one would be
# silently overwritten, so it is refused, naming the flag that sets it
PLAN_OWNED = {"cluster.gpus": "--sizes", "hardware.gpu": "--gpus", "policy.name": "--policies",
              "workload.": "--seq-len, --workload, --data, --gbs or --gbs-tokens (or a --config workload)",
              "parallel.tp": "--tp", "parallel.pp": "--pp", "parallel.vp": "--vp", "parallel.cp": "--cp",
              "parallel.mbs": "--mbs", "parallel.max_tokens_per_rank": "--tokens-per-rank",
              "parallel.first_stage_layers": "--pp (uneven first/last stages are searched)",
              "parallel.last_stage_layers": "--pp (uneven first/last stages are searched)"}


def _check_sets(args) -> None:
    """--set of a field the plan sets itself, or a --set model.name that --model contradicts: refused."""
    from dcpsim.errors import ConfigError

    for item in getattr(args, "set_fields", None) or []:
        key, _, value = (x.strip() for x in item.partition("="))
        for owned, flag in PLAN_OWNED.items():
            if key == owned or (owned.endswith(".") and key.startswith(owned)):
                raise ConfigError(f"--set {key}", value, f"{flag} instead: plan sets {key} itself (per GPU type, "
                                                         "size, policy and layout), a --set of it would be ignored")
    given = config_updates(args)[0].get("model.name")
    if args.model is not None and given is not None and given != args.model:
        raise ConfigError("--model", args.model, f"agreement with --set model.name={given} or only one of them "
                                                 "(they disagree)")


def _iterations(args) -> int | None:
    """--iterations, or the --set/--config sim.iterations when given (they must agree)."""
    from dcpsim.errors import ConfigError

    given = config_updates(args)[0].get("sim.iterations")
    if args.iterations is not None and given is not None and given != args.iterations:
        raise ConfigError("--iterations", args.iterations, f"agreement with --set sim.iterations={given} or only one "
                                                           "of them (they disagree)")
    return args.iterations if args.iterations is not None else given


def run(args) -> int:
    from dcpsim.errors import InfeasibleError
    from dcpsim.planning import CapacityRequest, parse_duration_days, parse_token_count, plan_capacity
    from dcpsim.planning.capacity import space_description
    from dcpsim.run.load import load_config

    _check_outputs(args)
    _check_sets(args)
    if args.config:  # ``example:NAME`` and shipped paths: the file every reader below opens
        from dcpsim.resources import resolve_input

        args.config = str(resolve_input(args.config))

    from dcpsim.commands.plan_checks import check_config_fields

    loaded = load_config(args.config) if args.config else None
    check_config_fields(args, loaded, PLAN_OWNED, _config_workload(args) is not None)
    base = config_from_args(args, loaded)
    named = args.config or "model.name" in config_updates(args)[0]
    model = args.model if args.model is not None else (base.model.name if named else DEFAULTS["model"])
    tokens = float(parse_token_count(DEFAULTS["tokens"] if args.tokens is None else args.tokens, "--tokens"))
    from dcpsim.model import get_model

    get_model(model)  # a bad name or file is one line now, not a failure in every worker
    deadline = parse_duration_days(args.deadline)
    profiles = default_profiles(_get(args, "gpus")[0])  # a bad, unknown or repeated GPU type: one line, before the header
    data = build_data(args, base)
    space = build_space(args, stated_parallel(args))
    from dcpsim.planning.capacity import check_policies

    check_policies([x.strip() for x in _get(args, "policies")[0].split(",") if x.strip()])  # before the header
    max_gbs = parse_token_count(args.max_gbs_tokens, "--max-gbs-tokens") if args.max_gbs_tokens else None
    if not args.json:
        print("\n".join(header(args, data, space_description(space), base, (model, tokens))))
    request = CapacityRequest(
        model, None, tokens, profiles, parse_int_list(_get(args, "sizes")[0], "--sizes"), data=data,
        policies=[x.strip() for x in _get(args, "policies")[0].split(",") if x.strip()], deadline_days=deadline,
        space=space, base=base, batch_scaling=_get(args, "batch_scaling")[0], iterations=_iterations(args),
        seeds=_get(args, "seeds")[0], simulate=_get(args, "simulate")[0], max_gbs_tokens=max_gbs,
    )
    from dcpsim.policies.base import gc_paused

    with gc_paused():  # long-lived objects only (as in the workers, planning.capacity.run_task_group)
        plan = plan_capacity(request, jobs=args.jobs, progress=not args.no_progress and not args.json)
    df = plan.rows
    if not ((df["status"] == "ok") & df["trainable"]).any():
        reasons = [r for r in df["reason"] if r]
        raise InfeasibleError("layout", "no GPU type and size can run this plan: "
                              + (reasons[0] if reasons else "see the rows"))
    if args.plot:
        from dcpsim.report.plots import plot_cost_time

        plot_cost_time(df, args.plot, deadline=deadline, title=f"{model}: {tokens:.3g} tokens")
    if args.csv:
        from dcpsim.outdir import write_with

        write_with(args.csv, lambda t: df.to_csv(t, index=False))
    written = []
    if args.out:
        from dcpsim.report.plan_report import write_report

        written = write_report(plan, args.out, title=f"dcpsim plan: {model}, {tokens:.3g} tokens", deadline_days=deadline,
                               force=args.force)
    written = [str(p) for p in written] + [p for p in (args.plot, args.csv) if p]  # every file written, --csv too
    if args.json:
        print_json(plan.to_dict() | {"written": written})
        return 0
    _print_plan(plan, _get(args, "top")[0], model, tokens)
    for p in written:
        print(f"wrote {p}")
    return 0


def _pct(v) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, float) and v == v else ""


def _display_row(r: dict) -> dict:
    """One row of the printed table: status with its reason, goodput mean ± std (long run), spreads."""
    import math

    if r["status"] != "ok":
        r["status"] = f"{r['status']}: {str(r.get('reason', ''))[:90]}"
    if not r.get("trainable", True):  # the bound: a reference, never a pick
        r["policy"] = f"{r['policy']} (lower bound, reference)"
        r["meets_deadline"] = "-"
    lo, hi = r.get("effective_days_min"), r.get("effective_days_max")
    r["days_spread"] = f"{lo:.2f}-{hi:.2f}" if isinstance(lo, float) and math.isfinite(lo) else ""
    std = r.get("goodput_std")
    sim = isinstance(r.get("goodput_sim"), float) and r["goodput_sim"] == r["goodput_sim"]
    r["goodput_sim"] = f"{_pct(r['goodput'])} ± {100 * std:.1f}" if sim else "-"
    r["young_daly"] = _pct(r.get("goodput_young_daly")) or ("n/a" if r.get("goodput_young_daly_note") else "")
    r["failures"] = r.get("expected_failures")
    from dcpsim.planning.trust import band_text

    for col, fmt in (("gpu_hours", "{:,.0f}"), ("effective_days", "{:.1f}"), ("cost", "{:,.0f}")):
        v = r.get(col)
        if isinstance(v, float) and math.isfinite(v):
            band = band_text(r, col, fmt) if r.get("band_basis") else "no band"
            r[col + "_shown"] = f"{fmt.format(v)} ({band})"
    if r.get("meets_deadline") is None:
        r["meets_deadline"] = "-"
    return r


# printed table: column header -> plan.rows column (or a display column of _display_row)
PRINTED = {"gpu": "gpu", "gpus": "gpus", "policy": "policy", "layout": "layout", "status": "status",
           "network": "network", "TFLOPS/GPU": "tflops_per_gpu", "goodput (sim)": "goodput_sim",
           "Young/Daly": "young_daly", "failures": "failures", "days (80%)": "effective_days_shown", "days range": "days_spread",
           "GPU-hours (80%)": "gpu_hours_shown", "cost (80%)": "cost_shown", "pareto": "pareto", "deadline": "meets_deadline"}


def _print_plan(plan, top: int, model: str, tokens: float) -> None:
    shown = {"days_spread", "goodput_sim", "young_daly", "failures", "effective_days_shown", "gpu_hours_shown",
             "cost_shown"}
    rows = [_display_row(r) for r in plan.rows.to_dict("records")]
    rows = [{h: r.get(c, "") for h, c in PRINTED.items() if c in plan.rows.columns or c in shown} for r in rows]
    print_table(rows, title=f"{model}, {tokens:.3g} tokens: best layout per GPU type, size and policy (failures "
                            "included)")
    print(NOTES)
    print("\n".join(trust_lines(plan.rows)))
    if plan.layouts is not None and len(plan.layouts):
        print(f"Top {top} layouts per size (simulated on the ideal network; seconds per iteration and where they go):")
        print("\n".join(layout_lines(plan.layouts, top)))
    for w in plan.warnings:
        print(w)
    print(plan.recommendation)


NOTES = ("network: the mode of the row's throughput (layouts are searched on ideal). goodput (sim): useful share of "
         "wall time, mean ± std over the simulated long runs (failures, checkpoint/restart, slow episodes; each over "
         "the row's planned duration); Young/Daly: the first-order analytic expectation of the same failure inputs "
         "(n/a where the job MTBF is no longer than restart + half a checkpoint segment: the formula does not apply). "
         "failures: expected failures (wall time / job MTBF). days: time to train / goodput (sim); days range: "
         "fastest seed at the best long run .. slowest at the worst. (80%): the prediction band of the figure (below).")


def trust_lines(df) -> list[str]:
    """Which profile each GPU type used and what each row's band rests on (or why it has none)."""
    out = ["Profiles (a bare GPU name means its calibrated profile; <gpu>-datasheet the uncalibrated one):"]
    for label in dict.fromkeys(df["profile_label"]) if "profile_label" in df else []:
        out.append(f"  {label}")
    out.append("Bands (80%: days, GPU-hours, cost, TFLOPS/GPU; split conformal on the out-of-sample errors of the "
               "nearest validated runs, dcpsim bands; failures' goodput not included):")
    seen: set[str] = set()
    for r in df.to_dict("records"):
        if r.get("status") != "ok":
            continue
        text = r.get("band_basis") or f"NO BAND: {r.get('band_reason', '')}"
        if r.get("band_caveat"):
            text += f"; {r['band_caveat']}"
        key = f"{r['gpu']}: {text}"
        if key not in seen:
            seen.add(key)
            out.append(f"  {key}")
    return out


def default_profiles(text: str) -> dict[str, float]:
    """``--gpus`` with each bare GPU name read as its calibrated profile where one exists
    (:func:`dcpsim.hardware.defaults.resolve_gpu`; ``<gpu>-datasheet`` keeps the uncalibrated one)."""
    from dcpsim.errors import ConfigError
    from dcpsim.hardware import get_profile
    from dcpsim.hardware.defaults import resolve_gpu
    from dcpsim.planning.inputs import parse_gpu_prices

    out: dict[str, float] = {}
    for name, price in parse_gpu_prices(text).items():
        prof = resolve_gpu(name)
        try:
            get_profile(prof)
        except ConfigError as exc:
            raise ConfigError("--gpus", name, exc.expected) from None
        if prof in out:
            raise ConfigError("--gpus", text, f"each GPU type once ({name} reads as {prof}, listed twice)")
        out[prof] = price
    return out


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
