"""``dcpsim examples [--out DIR]``: the shipped example files, usable as ``example:NAME`` or copied out."""

from __future__ import annotations

from dcpsim.commands._common import add_force, print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("examples", help="list the shipped example files (example:NAME), or write them into a folder",
                       description="Every example can be used by name wherever dcpsim is installed "
                       "(`dcpsim simulate example:default`, `dcpsim sweep example:example_sweep --out o`); "
                       "--out DIR writes copies to edit.")
    p.add_argument("--out", default=None, metavar="DIR", help="write the example files into DIR")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_force(p)
    p.set_defaults(func=run)


def _about(path) -> str:
    """The opening comment paragraph of an example file (what it is), its lines joined, cut before a command it
    quotes (a first line alone was cut mid-sentence: 'Example sweep: ... on H100 SXM,')."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if not s.startswith("#") or not s.lstrip("# ") or s.startswith("#  "):
            break  # end of the leading comment, its first paragraph, or an indented command line
        words.append(s.lstrip("# "))
    return " ".join(words).split(": `dcpsim")[0]


def run(args) -> int:
    from dcpsim.resources import EXAMPLE_PREFIX, examples

    found = examples()
    rows = [{"name": EXAMPLE_PREFIX + n, "file": p.name, "what": _about(p)} for n, p in found.items()]
    written: list[str] = []
    if args.out:
        from dcpsim.outdir import check_out_dir, write_bytes

        out = check_out_dir(args.out, force=args.force)
        written = [str(write_bytes(out / p.name, p.read_bytes())) for p in found.values()]
    if args.json:
        print_json({"examples": rows, "written": written})
        return 0
    print_table(rows, title="shipped examples (use the name anywhere a file is asked for)")
    if written:
        print(f"wrote {len(written)} files into {args.out}")
    else:
        print("e.g. dcpsim simulate example:default; dcpsim examples --out DIR writes copies to edit")
    return 0
