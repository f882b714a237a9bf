"""``dcpsim validate``: check the model against reality, two ways.

``dcpsim validate --published [--subset quick|all|fit|held-out] [--rows 1,5] [--out DIR] [--json]``
replays the published Megatron-LM / NeMo runs of ``experiments/published_throughput``
through the simulator (the code path of ``dcpsim simulate``) and compares
tokens/s per GPU: a table per row, mean and worst |error| per GPU x
precision x source, rows not expressible yet listed with the reason; with
``--out`` it writes CSV, Markdown, JSON and a parity plot there.

``dcpsim validate --megatron-ci [--gpu H100] [--subset fit|held-out] [--out DIR] [--json]`` replays the
step times of Megatron-LM's own functional tests (``experiments/megatron_ci``): each case's flags read by
the Megatron argument reader, simulated, compared on the step time; the same tables (per group, per split)
and a parity plot. ``dcpsim validate`` with neither flag runs both suites.

``dcpsim validate --profile profiles/NAME``: time real layers and compare with the cost model.

Runs one transformer layer of the model (forward and backward) per pack on
this machine and compares with the cost model's prediction from the profile;
prints the error per pack and the mean and worst absolute error, and writes
them to ``<profile>/VALIDATION.md`` (``--out`` to write elsewhere). The model,
its scale and the dtype default to those the profile was measured with.
"""

from __future__ import annotations

from dcpsim.commands._common import POS_INT, SEED, add_force, parse_int_list, print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare with published training runs (--published) or real layer timings (--profile)")
    p.add_argument("--published", action="store_true", help="replay the published-throughput suite")
    p.add_argument("--megatron-ci", action="store_true",
                   help="replay Megatron-LM's CI step times (experiments/megatron_ci); with neither this nor "
                   "--published/--profile, both suites run")
    p.add_argument("--gpu", default=None, help="--megatron-ci: only rows of these GPUs (H100, A100, GB200; comma-separated)")
    p.add_argument("--subset", default="all", choices=["quick", "all", "fit", "held-out"],
                   help="--published: which rows (default all)")
    p.add_argument("--rows", default=None, help="--published: explicit row ids, comma-separated (overrides --subset)")
    p.add_argument("--suite", default=None, help="--published: suite folder (default experiments/published_throughput)")
    p.add_argument("--calibrated", action="store_true",
                   help="--published and --megatron-ci: use each GPU's calibrated profile (<name>-calibrated, from "
                   "dcpsim calibrate) where one exists")
    p.add_argument("--profile", default=None, help="profile folder (or shipped name) whose predictions are checked")
    p.add_argument("--model", default=None, help="model name or spec .toml (default: the one the profile measured, else llama-13b)")
    p.add_argument("--scale", type=POS_INT, default=None, help="model shrink factor (default: the profile's)")
    p.add_argument("--quick", action="store_true", help="small packs and few repeats (CPU, CI)")
    p.add_argument("--pack-tokens", default=None, help="pack sizes in tokens, comma-separated (default 16384,65536; quick 1024)")
    p.add_argument("--short", type=POS_INT, default=None, help="short document length (default 512; quick 128)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp16", "fp32"], help="default: the profile's")
    p.add_argument("--repeats", type=POS_INT, default=None, help="maximum timed repeats per pack")
    p.add_argument("--threads", type=POS_INT, default=None, help="torch intra-op threads on a CPU (default: the profile's)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--out", default=None, help="--published / --megatron-ci: folder for CSV/Markdown/JSON/plot; "
                   "--profile: Markdown file (default <profile>/VALIDATION.md)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run, _parser=p)


def run(args) -> int:
    from dcpsim.errors import ConfigError

    if args.profile:
        if args.published or args.megatron_ci:
            raise ConfigError("--profile", args.profile, "alone (not with --published or --megatron-ci)")
        return run_profile(args)
    both = not args.published and not args.megatron_ci
    if args.out:
        from dcpsim.outdir import check_out_dir

        check_out_dir(args.out, force=args.force)  # before any replay
    if both and args.json:
        raise ConfigError("--json", True, "with one suite (--published or --megatron-ci)")
    rc = run_published(args) if args.published or both else 0
    return run_megatron_ci(args) if args.megatron_ci or both else rc


def run_megatron_ci(args) -> int:
    """Replay the Megatron-LM CI suite; print the per-group and per-split error tables."""
    from dcpsim.errors import ConfigError
    from dcpsim.published.megatron_ci import GPU_PROFILES, replay_ci

    gpus = [g.strip() for g in args.gpu.split(",")] if args.gpu else None
    for g in gpus or []:
        if g not in GPU_PROFILES:
            raise ConfigError("--gpu", g, f"one of {sorted(GPU_PROFILES)}")
    split = args.subset if args.subset in ("fit", "held-out") else None
    profiles = None
    if args.calibrated:
        from dcpsim.published.replay import calibrated_profiles

        profiles = calibrated_profiles()
    res = replay_ci(gpus=gpus, split=split, profiles=profiles)
    written = res.write(args.out) if args.out else []
    if args.json:
        print_json(res.to_json() | {"written": [str(p) for p in written]})
        return 0
    print_table(_pct_rows(res.stats("group")), title="Megatron-LM CI step time: |error| per group (GPU, environment, GB200 nodes)")
    print_table(_pct_rows(res.split_by_gpu()), title="Megatron-LM CI: |error| per GPU and split (suite.toml, by layout family)")
    print_table(res.reasons(), title="Megatron-LM CI rows not compared")
    o = res.overall()
    print(f"Megatron-LM CI: {o['compared']} of {o['rows']} rows compared, {o['unexpressible']} not expressible; mean "
          f"|error| {o['mean_abs_error']:.1%}, worst {o['worst_abs_error']:.1%} (error = simulated / measured - 1 on "
          f"the step time); {o['wall_s']:.1f} s")
    for p in written:
        print(f"wrote {p}")
    return 0


def run_published(args) -> int:
    """Replay the published suite; print the per-row table and the per-group error table."""
    from dcpsim.published import replay_suite

    # each row once (1,1 replayed row 1 twice and counted it twice in the mean); an empty --rows is refused
    rows = list(dict.fromkeys(parse_int_list(args.rows, "--rows"))) if args.rows is not None else None
    profiles = None
    if args.calibrated:
        from dcpsim.published.replay import calibrated_profiles

        profiles = calibrated_profiles()
    res = replay_suite(args.subset, suite_dir=args.suite, rows=rows, profiles=profiles,
                       progress=False if args.json else None)
    written = res.write(args.out) if args.out else []
    if args.json:
        print_json(res.to_json() | {"profiles": profiles, "written": [str(p) for p in written]})
        return 0
    if args.calibrated:
        print(f"calibrated profiles: {profiles or 'none found'}")
    table = [{"row": d["row"], "model": d["model"], "prec": d["precision"], "GPUs": d["gpus"], "layout": d["layout"],
              "measured": d["measured_tokens_per_s_per_gpu"], "simulated": d["simulated_tokens_per_s_per_gpu"],
              "error_%": d["error"] * 100, "status": d["status"], "reason": d["reason"]}
             for d in res.table()]
    print_table(table, title="tokens/s per GPU: published vs dcpsim")
    print_table(_pct_rows(res.stats("group")), title="|error| per GPU x precision x source")
    print_table(_pct_rows(res.stats("split")), title="|error| per split (fit / held-out, as declared in suite.toml)")
    o = res.overall()
    print(f"{o['compared']} of {o['rows']} rows compared ({o['memory']} flagged by the memory model), "
          f"{o['unexpressible']} not expressible yet; mean |error| {o['mean_abs_error']:.1%}, "
          f"worst {o['worst_abs_error']:.1%}; {o['wall_s']:.1f} s")
    for p in written:
        print(f"wrote {p}")
    return 0


def _pct_rows(stats: list[dict]) -> list[dict]:
    return [{k: (v * 100 if k.endswith("_error") else v) for k, v in s.items()} for s in stats]


def run_profile(args) -> int:
    from dcpsim.commands.profile import command_line
    from dcpsim.errors import ConfigError
    from dcpsim.hardware import get_profile
    from dcpsim.outdir import check_out_file
    from dcpsim.profiling import resolve_model, run_validation
    from dcpsim.profiling.validate import ValidationSettings, validation_target

    prof = get_profile(args.profile)
    target = validation_target(prof, args.out)
    if target is not None:
        check_out_file(target, force=args.force, field="--out")
    model_name = args.model or prof.measured.get("model", "llama-13b")
    scale = args.scale
    if scale is None and args.model is None and "model_scale" in prof.measured:
        try:
            scale = int(prof.measured.get("model_scale", "1"))
        except ValueError:
            raise ConfigError("measured.model_scale", prof.measured.get("model_scale"), "an integer", where=str(prof.path)) from None
    model, _ = resolve_model(model_name, scale, args.quick)
    pack_tokens = parse_int_list(args.pack_tokens, "--pack-tokens") if args.pack_tokens else ([1024] if args.quick else [16384, 65536])
    short = args.short or (128 if args.quick else 512)
    if short <= 0:
        raise ConfigError("--short", short, "a positive token count")
    kw = dict(warmup=1, min_repeats=3, max_repeats=8, budget_s=0.3) if args.quick else dict(
        warmup=3, min_repeats=5, max_repeats=20, budget_s=3.0)
    if args.repeats is not None:
        if args.repeats < 1:
            raise ConfigError("--repeats", args.repeats, "a positive integer")
        kw.update(max_repeats=args.repeats, min_repeats=min(kw["min_repeats"], args.repeats))
    settings = ValidationSettings(pack_tokens=pack_tokens, short=short, device=args.device, dtype=args.dtype,
                                  seed=args.seed, command=command_line(args, "validate"), out=args.out,
                                  threads=args.threads, **kw)
    res = run_validation(prof, model, settings)
    if args.json:
        print_json(res.summary() | {"rows": res.rows})
        return 0
    rows = [{"pack": r["pack"], "docs": r["docs"], "tokens": r["tokens"], "measured_ms": r["measured_s"] * 1e3,
             "predicted_ms": r["predicted_s"] * 1e3, "error_%": r["error"] * 100, "fwd_err_%": r["error_fwd"] * 100,
             "bwd_err_%": r["error_bwd"] * 100} for r in res.rows]
    print_table(rows, title=f"{res.meta['model']} layer on {res.meta['device']} vs profile {res.meta['profile']}")
    print(f"mean |error| {res.mean_abs_error:.1%}   worst |error| {res.worst_abs_error:.1%}"
          + (f"   written to {res.path}" if res.path else ""))
    for n in res.notes:
        print(f"note: {n}")
    return 0
