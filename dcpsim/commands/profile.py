"""``dcpsim profile --out profiles/NAME``: measure a hardware profile on this machine with torch.

Needs the ``profile`` extra (``pip install 'dcpsim[profile]'``). Full mode
measures GEMMs over 64..128K tokens, attention over 128..128K-token documents
and collectives over 4 KiB..1 GiB (meant for a GPU). ``--quick`` measures small
sizes (tokens 64..512, documents 32..512, messages 4 KiB..256 KiB) on the
model shrunk until hidden <= 512 (``--scale``), so a CPU profile takes seconds
(used in CI); after ``--time-limit`` seconds (default 60 with ``--quick``) each
remaining case is timed once, so a slow CPU finishes too. The folder is
written only once the profile loads.
"""

from __future__ import annotations

import shlex

from dcpsim.commands._common import (
    NONNEG_INT,
    POS_FLOAT,
    POS_INT,
    SEED,
    add_force,
    parse_int_list,
    print_json,
    print_table,
)


def register(sub) -> None:
    p = sub.add_parser("profile", help="measure a hardware profile with torch on this machine (extra: profile)")
    p.add_argument("--out", required=True, help="profile folder to write, e.g. profiles/my-h100")
    p.add_argument("--model", default="llama-13b", help="model whose layer shapes are measured (name or spec .toml)")
    p.add_argument("--scale", type=POS_INT, default=None,
                   help="divide hidden, heads, FFN and vocab by this (head dim kept); default 1, or the smallest "
                        "divisor giving hidden <= 512 with --quick")
    p.add_argument("--tp", type=POS_INT, default=1, help="measure the per-GPU shapes of a TP-sharded layer")
    p.add_argument("--quick", action="store_true", help="small sizes and a shrunk model (CPU, CI)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--base", default="auto",
                   help="profile to take unmeasurable values and network-tier rows from; 'auto' = the public profile of "
                        "the detected GPU (none on a CPU), 'none' = placeholders")
    p.add_argument("--tokens", default=None, help="GEMM token counts, comma-separated")
    p.add_argument("--seqlens", default=None, help="attention document lengths, comma-separated")
    p.add_argument("--sizes", default=None, help="collective message sizes in bytes, comma-separated")
    p.add_argument("--varlen-tokens", type=POS_INT, default=None, help="tokens of the packed varlen buffer")
    p.add_argument("--nproc", type=POS_INT, default=None, help="collective ranks (default: GPUs visible, 2 on a CPU)")
    p.add_argument("--no-collectives", action="store_true", help="copy the collective rows from --base instead")
    p.add_argument("--warmup", type=NONNEG_INT, default=None)
    p.add_argument("--min-repeats", type=POS_INT, default=None)
    p.add_argument("--max-repeats", type=POS_INT, default=None)
    p.add_argument("--threads", type=POS_INT, default=None, help="torch intra-op threads on a CPU (default: torch's; 1 with --quick)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--time-limit", type=POS_FLOAT, default=None,
                   help="seconds of kernel timing after which each remaining case is timed once (default 60 with "
                        "--quick, none otherwise)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run, _parser=p)


def command_line(args, name: str) -> str:
    """The command that reproduces ``args``: ``dcpsim NAME`` plus every option that differs from its default.

    Rebuilt from the parsed arguments (not ``sys.argv``) so that it is right
    however the CLI was entered (console script, ``python -m``, ``cli.main``).
    """
    parser = getattr(args, "_parser", None)
    parts = ["dcpsim", name]
    for action in getattr(parser, "_actions", []):
        if not action.option_strings or action.dest in ("help", "json"):
            continue
        v = getattr(args, action.dest, None)
        if v == action.default:
            continue
        opt = max(action.option_strings, key=len)
        parts += [opt] if action.nargs == 0 else [opt, str(v)]
    return " ".join(shlex.quote(x) for x in parts)


def run(args) -> int:
    from dcpsim.outdir import check_out_dir
    from dcpsim.profiling import ProfileOptions, resolve_model, run_profile

    check_out_dir(args.out, force=args.force)
    model, scale = resolve_model(args.model, args.scale, args.quick)
    ints = lambda s, f: tuple(parse_int_list(s, f)) if s else ()  # noqa: E731
    base = None if str(args.base).lower() == "none" else args.base
    opts = ProfileOptions.make(
        args.out, model, quick=args.quick, scale=scale, tp=args.tp, device=args.device, dtype=args.dtype, base=base,
        tokens=ints(args.tokens, "--tokens"), seqlens=ints(args.seqlens, "--seqlens"), sizes=ints(args.sizes, "--sizes"),
        varlen_tokens=args.varlen_tokens, nproc=args.nproc, collectives=not args.no_collectives, warmup=args.warmup,
        min_repeats=args.min_repeats, max_repeats=args.max_repeats, seed=args.seed, threads=args.threads,
        command=command_line(args, "profile"), time_limit_s=args.time_limit,
    )
    res = run_profile(opts, force=args.force)
    info = res.summary()
    if args.json:
        print_json(info)
        return 0
    print_table([{"field": k, "value": v} for k, v in res.profile.summary().items()],
                title=f"profile {res.profile.name} ({res.profile.kind}) written to {res.path}")
    print_table([{"part": k, "seconds": v} for k, v in res.seconds.items()], title="time taken")
    print(f"attention paths: dense {res.kernels['dense']}; varlen {res.kernels['varlen']}")
    return 0
