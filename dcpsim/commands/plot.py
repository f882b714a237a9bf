"""``dcpsim plot DIR --x gpus --y tflops_per_gpu --hue policy``: figures from a sweep's results."""

from __future__ import annotations

from pathlib import Path

from dcpsim.commands._common import add_force, print_json


def register(sub) -> None:
    p = sub.add_parser("plot", help="plot a sweep's results (y against x, by hue, one panel per col)")
    p.add_argument("dir", help="sweep output directory")
    p.add_argument("--x", default=None, help="column for the x axis, e.g. gpus, workload, hardware.network_scale")
    p.add_argument("--y", default="tflops_per_gpu", help="numeric column for the y axis (default tflops_per_gpu)")
    p.add_argument("--hue", default=None, help="one line/bar colour per value of this column, e.g. policy")
    p.add_argument("--col", default=None, help="one panel per value of this column, e.g. workload")
    p.add_argument("--out", default=None, help="figure file (.png/.pdf/.svg; other suffixes are refused), or a "
                   "folder to write <y>_vs_<x>.png and .pdf into (default DIR/figures); nothing is written outside it")
    p.add_argument("--title", default=None)
    p.add_argument("--standard", action="store_true", help="(re)write the standard sweep figures into DIR/figures")
    p.add_argument("--json", action="store_true")
    add_force(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from dcpsim.errors import ConfigError
    from dcpsim.report.plots import plot, save_figure, standard_figures
    from dcpsim.run.sweep import load_results

    d = Path(args.dir)
    if not d.is_dir():
        raise ConfigError("DIR", str(d), "a sweep output folder")
    if not (args.x or args.standard):
        raise ConfigError("--x", None, "a column for the x axis (or --standard for the standard figures)")
    seen: dict[str, str] = {}
    for flag, col in (("--x", args.x), ("--hue", args.hue), ("--col", args.col)):  # --x gpus --hue gpus: a traceback
        if col is not None and col in seen:
            raise ConfigError(flag, col, f"a column other than {seen[col]}'s (one column cannot group two ways)")
        if col is not None:
            seen[col] = flag
    target = _target(args, d)
    written: dict[str, object] = {}
    if args.standard:
        axes = None
        meta = d / "sweep.json"
        if meta.is_file():
            axes = [f for g in json.loads(meta.read_text()).get("axes", []) for f in g.get("fields", {})]
        written |= standard_figures(load_results(d), d / "figures", axes=axes)
    if args.x:
        results = load_results(d)
        if not len(results):
            raise ConfigError("results", str(d), "a sweep directory with results (results/part-*.parquet)")
        fig = plot(results, args.x, args.y, hue=args.hue, col=args.col, title=args.title)
        written[_name(args)] = [str(p) for p in save_figure(fig, target)]
    if args.json:
        print_json(written)
    else:
        for k, v in written.items():
            print(f"{k}: {', '.join(v) if isinstance(v, list) else v}")
    return 0


def _name(args) -> str:
    name = f"{args.y}_vs_{args.x}" + (f"_by_{args.hue}" if args.hue else "") + (f"_per_{args.col}" if args.col else "")
    return name.replace(".", "-").replace("/", "-")


def _target(args, d: Path) -> Path | None:
    """Where the ``--x`` figure goes, checked before anything is plotted (see :mod:`dcpsim.outdir`).

    ``--out`` with a file suffix is a file (``.png``, ``.pdf`` or ``.svg``; any
    other suffix is refused, never made into a folder); ``--out`` without one
    (or an existing folder) is a folder the figure is written into.
    """
    from dcpsim.outdir import check_out_dir, check_out_file
    from dcpsim.report.plots import FIGURE_SUFFIXES

    if args.standard:
        check_out_dir(d / "figures", force=args.force)
    if not args.x:
        return None
    out = Path(args.out) if args.out else d / "figures"
    if args.out and out.suffix and not out.is_dir():
        return check_out_file(out, force=args.force, suffixes=FIGURE_SUFFIXES)
    check_out_dir(out, force=args.force)
    return out / _name(args)
