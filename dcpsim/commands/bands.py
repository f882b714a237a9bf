"""``dcpsim bands``: the prediction bands' residuals, their coverage on held-out rows, and how to rebuild them.

``dcpsim bands`` prints the groups (GPU x precision), how many validated runs each has, the best measured
MFU and the leave-one-out coverage of the 80% band on the held-out rows of the published suite;
``dcpsim bands build --out DIR`` recomputes the residual file from the suite (a replay on the calibrated
profiles plus a cross-fit of every fit row; a few minutes) and writes ``DIR/bands.json`` and
``DIR/bands.md``: copy ``bands.json`` to ``experiments/published_throughput/results/`` to ship it.
See :mod:`dcpsim.published.bands`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dcpsim.commands._common import POS_INT, add_force, print_json, print_table, typed

LEVEL = typed(Annotated[float, Field(gt=0.0, lt=1.0)])


def register(sub) -> None:
    p = sub.add_parser("bands", help="prediction bands: validated runs per GPU, coverage on held-out rows, rebuild")
    p.add_argument("action", nargs="?", choices=["show", "build"], default="show")
    p.add_argument("--out", default=None, help="build: folder for bands.json and bands.md")
    p.add_argument("--file", default=None, help="show: a residual file (default: the shipped one)")
    p.add_argument("--level", type=LEVEL, default=None, help="interval level, between 0 and 1 (default 0.8)")
    p.add_argument("--megatron-ci", action="store_true",
                   help="also report the Megatron-LM CI suite's held-out coverage when the residual file has no CI "
                        "rows (it is reported whenever it has them: their residuals are in the file, see "
                        "dcpsim.published.bands_ci)")
    p.add_argument("-j", "--jobs", type=POS_INT, default=1, help="build: worker processes (default 1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from dcpsim.errors import ConfigError
    from dcpsim.published import bands

    level = bands.LEVEL if args.level is None else args.level
    for flag, value, action in (("--out", args.out, "build"), ("--file", args.file, "show"),
                                ("-j/--jobs", args.jobs if args.jobs != 1 else None, "build")):
        if value is not None and args.action != action:  # refused, never silently ignored
            raise ConfigError(flag, value, f"no {flag} with `dcpsim bands {args.action}` (it is for `dcpsim bands "
                                           f"{action}`)")
    if args.action == "build":
        if not args.out:
            raise ConfigError("--out", None, "a folder for bands.json (build)")
        from dcpsim.outdir import check_out_dir

        check_out_dir(args.out, force=args.force)
        data = bands.build(progress=not args.json, jobs=args.jobs)
        written = bands.write(data, args.out, force=args.force)
        table = bands.BandTable(data)
    else:
        try:
            table = bands.load(args.file)
        except ConfigError as exc:
            if args.file is None:
                raise
            raise ConfigError("--file", args.file, exc.expected) from None
        written = []
    cov = table.coverage(level)
    ci = bands.ci_coverage(table, level)  # the CI suite's rows are in the residual file (bands_ci)
    if not ci["compared"] and not args.megatron_ci:
        ci = None
    if args.json:
        print_json({"groups": table.groups(level), "coverage": cov, "megatron_ci_coverage": ci,
                    "dcpsim_commit": table.data.get("dcpsim_commit"), "written": [str(p) for p in written]})
        return 0
    print_table(table.groups(level), title=f"validated runs per GPU and precision (out-of-sample residuals, dcpsim "
                                           f"{str(table.data.get('dcpsim_commit', ''))[:7]})")
    print(f"held-out rows inside their {level:.0%} band (leave-one-out): {cov['covered']} of {cov['with_band']}"
          + (f" ({100 * cov['coverage']:.1f}%)" if cov["with_band"] else "") + f"; {cov['without_band']} without a band")
    if ci is not None:
        print(f"Megatron-LM CI suite, held-out rows: {ci['compared']} compared, {ci['with_band']} with a band, "
              f"{ci['covered']} inside it" + (f" ({100 * ci['coverage']:.1f}%)" if ci["with_band"] else "")
              + "; without a band: " + ("; ".join(f"{n} x {r}" for r, n in ci["no_band_reasons"].items()) or "none"))
    for p in written:
        print(f"wrote {p}")
    return 0
