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

# One line per sub-command module; order is the order of `dcpsim --help`.
COMMANDS = [
    "demo",
    "profiles",
    "workload",
    "cost",
    "schedule",
    "simulate",
    "reproduce",
    "profile",
    "validate",
    "calibrate",
    "sweep",
    "plot",
    "plan",
    "export",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, non-zero exit
        self.exit(2, f"dcpsim: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dcpsim", description="Simulate (dynamic) context parallelism for LLM training on variable-length data.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"dcpsim.commands.{name}").register(sub)
    return parser


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
    from dcpsim.outdir import reset_forced

    parser = build_parser()
    args = parser.parse_args(argv)
    reset_forced()
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
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
