"""``dcpsim demo``: the main job on built-in defaults (what ``make run`` runs).

Simulates the default run (:class:`~dcpsim.run.config.RunConfig` defaults:
Llama-13B on 64 H100s, tp1 pp8 cp2, GitHub-like lengths, global batch 2048)
(on the calibrated H100 profile, ``h100-sxm-calibrated``; see :mod:`dcpsim.hardware.defaults`)
with static CP (``packing``, Megatron's baseline), Megatron's ``dynamic`` CP
scheduler and our cost-model ``dynamic-solver``, on the same sampled batches,
and prints a comparison with the speedup over packing and the proven lower
bound (``bound``: no schedule can beat it) for scale.

``dynamic`` runs with Megatron dev's default capacity for dynamic CP,
``--max-seqlen-per-dp-cp-rank`` = ceil(seq_length / (DP·CP)) (``megatron/training/arguments.py`` at dev d48bd6b, ``validate_args``;
16,384 tokens per rank at the default 131,072-token maximum and 8 DP×CP ranks), so the demo shows
what dev's scheduler does out of the box; ``packing`` keeps the configuration's M (its static-CP bins
must hold the longest sequence) and ``dynamic-solver`` the same M as packing.
"""

from __future__ import annotations

from dcpsim.commands._common import (
    POS_INT,
    SEED,
    add_force,
    print_json,
    print_table,
    profile_label,
    with_default_profile,
)

POLICIES = ("packing", "dynamic", "dynamic-solver", "bound")
# The blog's headline for Llama-13B on GitHub data (REFERENCE §1); GPU type, count and layout were not
# published, so this is context for the reader, not a target.
BLOG_REFERENCE = "blog: Llama-13B, GitHub, gbs 2048: 195.88 -> 289.32 TFLOPS/GPU (1.48x); GPUs and layout unpublished"


def register(sub) -> None:
    p = sub.add_parser("demo", help="simulate packing vs dynamic CP (and the solver, and the bound) on built-in defaults")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the sampled global batches")
    p.add_argument("--iterations", type=POS_INT, default=3, help="iterations per policy (each a fresh global batch)")
    p.add_argument("--trace", default=None, metavar="PREFIX",
                   help="also write PREFIX-<policy>.json Chrome/Perfetto traces")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run)


def dev_default_m(cfg) -> int:
    """Megatron dev's default ``--max-seqlen-per-dp-cp-rank``: ceil(seq_length / (DP·CP)) tokens per rank."""
    return -(-int(cfg.workload.max_len) // int(cfg.dp * cfg.parallel.cp))


def run(args) -> int:
    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    base = with_default_profile(RunConfig().with_updates({"sim.seed": args.seed, "sim.iterations": args.iterations}))
    label = profile_label(base.hardware.gpu)
    if args.trace:
        import os

        from dcpsim.outdir import check_out_file

        if args.trace.endswith(("/", os.sep)) or os.path.isdir(args.trace):  # 'tr/' wrote tr/-packing.json ... (names that start with '-')
            from dcpsim.errors import ConfigError

            raise ConfigError("--trace", args.trace, "a file-name prefix (PREFIX-<policy>.json), not a folder: e.g. "
                              f"{os.path.join(args.trace, 'demo')}")
        for name in POLICIES:
            check_out_file(f"{args.trace}-{name}.json", force=args.force, field="--trace")
    from dcpsim.progress import ProgressDisplay

    rows, results = [], {}
    m_dev = dev_default_m(base)
    bar = ProgressDisplay("simulating", len(POLICIES), False if args.json else None).__enter__()
    for name in POLICIES:
        bar.advance(0, note=name)
        upd = {"policy.name": name}
        if name == "dynamic":
            upd["parallel.max_tokens_per_rank"] = m_dev
        cfg = base.with_updates(upd)
        trace = f"{args.trace}-{name}.json" if args.trace else None
        res = run_simulation(cfg, trace_path=trace)
        bar.advance()
        results[name] = res
        s = res.summary
        rows.append({
            "policy": name + (" (lower bound)" if name == "bound" else ""),
            "iter_s": s["iteration_time_s"],
            "TFLOPS/GPU": s["tflops_per_gpu"],
            "tokens/s": s["tokens_per_s"],
            "MFU %": 100 * s["mfu"],
            "steps": s.get("steps", 0),
            "mean cp": s.get("mean_cp", float("nan")),
            "compute %": 100 * s["frac_compute"],
            "cp comm %": 100 * s["frac_cp_comm"],
            "bubble %": 100 * s["frac_bubble"],
            "imbalance %": 100 * s["frac_imbalance"],
            "grad sync %": 100 * s["frac_grad_sync"],
            "sim wall s": s["wall_s"],
        })
    bar.__exit__(None, None, None)
    ref = rows[0]["TFLOPS/GPU"]
    for r in rows:
        r["speedup"] = r["TFLOPS/GPU"] / ref
    s0 = results[POLICIES[0]].summary
    if args.json:
        print_json({"profile": label, "rows": rows, "summaries": {k: v.summary for k, v in results.items()}, "reference": BLOG_REFERENCE})
        return 0
    print(f"profile {label}")
    print_table(rows, title=f"{s0['model']} on {s0['gpus']} x {s0['gpu']} (tp{s0['tp']} pp{s0['pp']} cp{s0['cp']} "
                f"dp{s0['dp']}), {s0['workload']} lengths, gbs {s0['gbs']}, {args.iterations} iteration(s), seed {args.seed}")
    sp = {r["policy"]: r["speedup"] for r in rows}
    print(f"speedup over packing: dynamic {sp['dynamic']:.3f}x, dynamic-solver {sp['dynamic-solver']:.3f}x "
          f"(same batches; FLOPs counted the Megatron way); no schedule beats {sp['bound (lower bound)']:.3f}x (bound).")
    print(f"dynamic: Megatron dev's default M = ceil({base.workload.max_len} / (DP x CP = {base.dp * base.parallel.cp})) "
          f"= {m_dev} tokens per rank; packing and dynamic-solver: M = {base.max_tokens_per_rank}.")
    print(f"reference only, {BLOG_REFERENCE}.")
    print("Time shares are per GPU and sum to 100% with planning stall; see `dcpsim simulate --help` for one run in detail.")
    return 0
