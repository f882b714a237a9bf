"""The ``dcpsim`` command line: a thin layer that parses, calls the API and prints.

Each sub-command lives in ``dcpsim/commands/<name>.py`` and defines
``register(subparsers)`` (adds its parser and sets ``func``). Errors that
dcpsim raises on purpose are printed as one line without a traceback and give
exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from dcpsim.errors import DcpsimError, DcpsimWarning

# Sub-command modules and their one-line help, in the order of `dcpsim --help`. A command's module is
# imported only when that command runs (or its own --help is asked for): `dcpsim --help` imports none of them
# (nor numpy, pydantic or the config). tests/test_cli_foundation.py checks each line against the help the
# module's register() gives.
COMMANDS: dict[str, str] = {
    "demo": "simulate packing vs dynamic CP (and the solver, and the bound) on built-in defaults",
    "profiles": "list hardware profiles, or show one",
    "workload": "list workload presets, or show a workload's length statistics",
    "cost": "per-rank time and memory of one pack on one CP group",
    "schedule": "plan one global batch with a scheduling policy and summarise the plan",
    "simulate": "simulate one run described by a TOML file; print a summary table",
    "reproduce": "reproduce the Dynamic-CP blog's published results (TFLOPS, speedups)",
    "profile": "measure a hardware profile with torch on this machine (extra: profile)",
    "validate": "compare with published training runs (--published) or real layer timings (--profile)",
    "calibrate": "fit a profile's timing knobs on the published suite's fit rows",
    "bands": "prediction bands: validated runs per GPU, coverage on held-out rows, rebuild",
    "sweep": "run many configurations (grid / zip / random axes) into a resumable parquet dataset",
    "plot": "plot a sweep's results (y against x, by hue, one panel per col)",
    "plan": "capacity planning: best layouts, time, GPU-hours and cost per GPU type, size and policy (failures "
            "included)",
    "export": "write Megatron-LM arguments, launch template, lengths and expectations for a run",
    "examples": "list the shipped example files (example:NAME), or write them into a folder",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, non-zero exit
        self.exit(2, f"dcpsim: error: {message} (see '{self.prog} --help')\n")


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.exit(message=_version() + "\n")


def build_parser(only: str | None = "") -> argparse.ArgumentParser:
    """The ``dcpsim`` parser. ``only``: ``""`` registers every sub-command in full (imports all their
    modules); a command name registers that one in full and the others by name and help line only;
    ``None``: all by name and help only (enough for ``dcpsim --help``)."""
    parser = _Parser(prog="dcpsim", description="Simulate (dynamic) context parallelism for LLM training on variable-length data.")
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_line in COMMANDS.items():
        if only == "" or only == name:
            importlib.import_module(f"dcpsim.commands.{name}").register(sub)
            cmd = sub.choices[name]
            if not any("--wide" in a.option_strings for a in cmd._actions):
                cmd.add_argument("--wide", action="store_true",
                                 help="tables at full width, every column (default: fit 100 columns)")
        else:
            sub.add_parser(name, help=help_line)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The sub-command ``argv`` names (its first word that is not an option), if any."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dcpsim")
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """dcpsim's own warnings as one line (no file/line noise); others as Python formats them."""
    if issubclass(category, DcpsimWarning):
        return f"dcpsim: warning: {message}\n"
    return _default_formatwarning(message, category, filename, lineno, line)


_default_formatwarning = warnings.formatwarning


OUTPUT_FLAGS = ("out", "trace", "plot", "csv")
"""Flags naming where a command writes: an empty value is an error, not "do not write"."""


def _no_empty_paths(args: argparse.Namespace) -> None:
    from dcpsim.errors import ConfigError

    for name in OUTPUT_FLAGS:
        v = getattr(args, name, None)
        if isinstance(v, str) and not v.strip():
            raise ConfigError(f"--{name}", v, "a path (leave the flag out to write nothing)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # a Ctrl-C while the command's modules load (numpy, ...: the first ~0.2 s) is one line too
        parser = build_parser(_command_in(argv))
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("dcpsim: interrupted", file=sys.stderr)
        return 130
    from dcpsim.outdir import reset_forced

    reset_forced()
    if getattr(args, "wide", False):  # tables: every column (commands._common.print_table)
        importlib.import_module("dcpsim.commands._common").set_wide(True)
    elif "dcpsim.commands._common" in sys.modules:
        sys.modules["dcpsim.commands._common"].set_wide(False)
    warnings.formatwarning = _format_warning
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        _no_empty_paths(args)
        rc = args.func(args)
    except DcpsimError as exc:
        print("dcpsim: error: " + " ".join(str(exc).split()), file=sys.stderr)  # one line, whatever a parser said
        return 2
    except KeyboardInterrupt:
        print("dcpsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path the system refuses (name too long, permissions, ...): one line, not a traceback
        if exc.filename is None:
            raise
        print("dcpsim: error: " + os_error_line(exc), file=sys.stderr)
        return 2
    return int(rc or 0)


def os_error_line(exc: OSError) -> str:
    """``path: reason`` of an OSError, the path shortened to 80 characters, with a hint for over-long names."""
    import errno

    name = str(exc.filename)
    shown = name if len(name) <= 80 else name[:38] + "..." + name[-39:]
    hint = ""
    if exc.errno == errno.ENAMETOOLONG:
        hint = f" (the path has {len(name)} characters; each name in it may have at most 255 bytes)"
    return f"{shown}: {exc.strerror or type(exc).__name__}{hint}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
