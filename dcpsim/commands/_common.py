"""Helpers shared by CLI sub-commands: typed flags, config flags, JSON output and rich tables.

Flags. Every numeric flag has a declared type with bounds (:func:`typed`,
:data:`POS_INT`, ...): ``--seed -1`` or ``--gpus 2.5`` is one line and exit
status 2, worded like a config error. Flags that set a run-config field are
*derived* from :class:`~dcpsim.run.config.RunConfig` with
:func:`add_config_flags` (type, bounds, choices, help and default come from
the field, so a flag cannot disagree with the config file), and every
command that builds a run config also takes ``--set section.field=VALUE``
(any field, TOML value syntax). :func:`config_from_args` applies them and
names the flag in errors.

Adding a validated config field and its flag: declare the field with its
bounds in dcpsim/run/config.py (``vp: int = Field(1, ge=1, description=...)``);
``--set parallel.vp=2`` works at once; for a dedicated flag add
``"parallel.vp"`` to the command's ``add_config_flags`` list (the flag is
``--vp``; :data:`FLAG_NAMES` overrides the name).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any, get_args

import numpy as np
from pydantic import Field

from dcpsim.errors import ConfigError
from dcpsim.serialize import to_jsonable

# ------------------------------------------------------------ typed flags
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


def typed(annotation: Any) -> Callable[[str], Any]:
    """An argparse ``type=`` that reads the text as a TOML value and checks it against ``annotation``.

    Errors become argparse errors (one line, exit status 2):
    ``argument --seed: got '-1'; expected an integer >= 0``.
    """
    from dcpsim.schema import check_value, describe, parse_text_value

    def convert(text: str) -> Any:
        try:
            return check_value(annotation, parse_text_value(text, annotation), "value")
        except ConfigError:
            raise argparse.ArgumentTypeError(f"got {text!r}; expected {describe(annotation)}") from None

    convert.__name__ = describe(annotation)
    convert.annotation = annotation  # type: ignore[attr-defined]  # read by the fuzz tests
    return convert


POS_INT = typed(PosInt)
NONNEG_INT = typed(NonNegInt)
POS_FLOAT = typed(PosFloat)
NONNEG_FLOAT = typed(NonNegFloat)
SEED = typed(Seed)

# ------------------------------------------------------------ config flags
# dotted config path -> flag, where the flag is not --<field name>
FLAG_NAMES: dict[str, str] = {
    "model.name": "--model",
    "hardware.gpu": "--gpu",
    "cluster.gpus": "--gpus",
    "workload.name": "--workload",
    "policy.name": "--policy",
    "sim.gpu_mtbf_h": "--mtbf-gpu-hours",
}
_CFG_DEST = "cfg:"


def config_field(path: str):
    """The pydantic FieldInfo of a dotted RunConfig path (ConfigError if there is none)."""
    from dcpsim.run.config import field_info

    return field_info(path)


def flag_name(path: str) -> str:
    return FLAG_NAMES.get(path, "--" + path.rsplit(".", 1)[-1].replace("_", "-"))


def add_config_flags(parser: argparse.ArgumentParser, paths: Sequence[str], *, set_flag: bool = True) -> None:
    """Add one flag per RunConfig field in ``paths`` (plus ``--set KEY=VALUE``), derived from the field.

    The flag's default is "the config's": None here, so the base config
    (file or defaults) keeps its value unless the flag is given.
    """
    from dcpsim.schema import describe

    for path in paths:
        info = config_field(path)
        choices = get_args(info.annotation) if str(info.annotation).startswith("typing.Literal") else None
        registry = (info.json_schema_extra or {}).get("registry") if isinstance(info.json_schema_extra, dict) else None
        if registry:  # a name chosen through a registry (dcpsim.registry): its names, built-ins first
            import importlib

            mod, _, attr = str(registry).partition(":")
            choices = tuple(getattr(importlib.import_module(mod), attr).names())
        default = info.get_default(call_default_factory=True)
        help_ = (f"{info.description or path} ({describe(info.annotation, info.metadata)}; "
                 f"config field {path}, default {default!r})")
        if choices:
            parser.add_argument(flag_name(path), dest=_CFG_DEST + path, default=None, choices=choices, help=help_)
        else:
            parser.add_argument(flag_name(path), dest=_CFG_DEST + path, default=None, metavar="VALUE", help=help_)
    if set_flag:
        parser.add_argument("--set", dest="set_fields", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                            help="set any run-config field (TOML value syntax), repeatable, "
                            "e.g. --set sim.noise_cv=0.05 --set policy.options.cap_delta=0.1")


def parse_set_item(item: str, flag: str = "--set") -> tuple[str, Any]:
    """``"parallel.cp=4"`` -> ``("parallel.cp", 4)``, the value read as the field's type would be in TOML."""
    from dcpsim.schema import parse_text_value

    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(flag, item, "SECTION.FIELD=VALUE (e.g. parallel.cp=4)")
    try:
        ann = config_field(key).annotation
    except ConfigError:
        ann = Any  # policy options and unknown keys: read as TOML (else the text); set_dotted names what is wrong
    return key, parse_text_value(text, ann)


def config_updates(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """(dotted updates, path -> flag) from the derived flags and ``--set`` items on ``args``."""
    from dcpsim.schema import parse_text_value

    updates: dict[str, Any] = {}
    names: dict[str, str] = {}
    for dest, text in vars(args).items():
        if dest.startswith(_CFG_DEST) and text is not None:
            path = dest[len(_CFG_DEST):]
            updates[path] = parse_text_value(text, config_field(path).annotation)
            names[path] = flag_name(path)
    for item in getattr(args, "set_fields", None) or []:
        key, value = parse_set_item(item)
        if key in updates and updates[key] != value:  # one field, two values: refuse rather than pick one
            raise ConfigError(f"--set {key}", value, f"agreement with {names[key]} {updates[key]!r} or only one of "
                                                     "them (they disagree)")
        updates[key] = value
        names[key] = f"--set {key}"
    return updates, names


def refuse_set_conflicts(args: argparse.Namespace, given: dict[str, tuple[str, Any]]) -> None:
    """A ``--set FIELD=VALUE`` that disagrees with a command's own flag for that field (``given``: field ->
    (flag, value), ``None`` values not given) is refused rather than one of them silently winning."""
    for item in getattr(args, "set_fields", None) or []:
        key, value = parse_set_item(item)
        flag, own = given.get(key, (None, None))
        if own is not None and value != own:
            raise ConfigError(f"--set {key}", value, f"agreement with {flag} {own!r} or only one of them (they disagree)")


def config_from_args(args: argparse.Namespace, base=None, extra: dict[str, Any] | None = None):
    """The RunConfig of ``base`` (default: all defaults) with the flags on ``args`` applied.

    ``extra`` holds further updates (already typed) applied first. Errors
    name the flag that set the field.
    """
    from dcpsim.run.config import RunConfig
    from dcpsim.run.load import check_config

    base = base if base is not None else RunConfig()
    updates, names = config_updates(args)
    merged = {**(extra or {}), **updates}
    return check_config(base.with_updates(merged, names=names) if merged else base, names=names)


def print_json(obj: Any) -> None:
    print(json.dumps(to_jsonable(obj), indent=2, sort_keys=False))


def fmt(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        a = abs(float(v))
        if a == 0:
            return "0"
        if a >= 1e6 or a < 1e-3:
            return f"{float(v):.4g}"
        return f"{float(v):,.3f}".rstrip("0").rstrip(".")
    return str(v)


TABLE_WIDTH = 100
"""Columns a table may take by default (``--wide``: as many as it needs)."""
_WIDE = {"on": False}


def set_wide(on: bool) -> None:
    """``--wide``: tables show every column at full width (the CLI sets this per command)."""
    _WIDE["on"] = bool(on)


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items())
    return fmt(v)


def _fit_columns(rows: list[dict], cols: list[str], width: int) -> tuple[list[str], list[str]]:
    """The leading columns that fit ``width`` (text columns may wrap to 24 characters); the rest."""
    used, keep = 1, []
    for i, c in enumerate(cols):
        cells = [_cell(r.get(c, "")) for r in rows]
        numeric = rows and isinstance(rows[0].get(c), (int, float, np.number)) and not isinstance(rows[0].get(c), bool)
        natural = max([len(str(c)), *(len(x) for x in cells)])
        need = (natural if numeric else min(natural, max(len(str(c)), 24))) + 3
        if i > 0 and used + need > width:
            return keep, cols[i:]
        keep.append(c)
        used += need
    return keep, []


def print_table(rows: list[dict], title: str | None = None, columns: list[str] | None = None) -> None:
    """Print dict rows as a rich table that fits :data:`TABLE_WIDTH` columns (plain text when not a terminal).

    Columns that do not fit are left out, named in a note (``--wide`` shows
    them, ``--json`` gives every value); put the important columns first.
    """
    from rich.console import Console
    from rich.table import Table

    cols = columns or (list(rows[0]) if rows else [])
    wide = _WIDE["on"]
    shown, hidden = (cols, []) if wide else _fit_columns(rows, cols, TABLE_WIDTH)
    table = Table(title=title, show_lines=False)
    for c in shown:
        table.add_column(c, justify="right" if rows and isinstance(rows[0].get(c), (int, float, np.number)) else "left")
    for r in rows:
        table.add_row(*[_cell(r.get(c, "")) for c in shown])
    Console(width=max(200, TABLE_WIDTH) if wide else TABLE_WIDTH).print(table)
    if hidden:
        import textwrap

        print(textwrap.fill(f"({len(hidden)} more column{'s' if len(hidden) > 1 else ''}: {', '.join(hidden)}; "
                            "--wide shows them, --json gives every value)", TABLE_WIDTH))


def parse_int_list(text: str, field: str) -> list[int]:
    """``"32768,4096"`` -> ``[32768, 4096]``: positive integers only (``2.5``, ``nan``, ``-1`` are refused)."""
    parts = [x.strip() for x in str(text).split(",")]
    vals = []
    for x in parts:
        if not x:
            continue
        try:
            v = int(x.replace("_", ""))
        except ValueError:
            try:
                f = float(x)  # 1e6 is a whole number; 2.5, nan and inf are not
            except ValueError:
                f = math.nan
            if not (math.isfinite(f) and f.is_integer() and abs(f) < 2**63):
                raise ConfigError(field, text, f"a comma-separated list of positive integers ({x!r} is not one)") from None
            v = int(f)
        vals.append(v)
    if not vals or any(v <= 0 for v in vals):
        raise ConfigError(field, text, "a non-empty comma-separated list of positive integers")
    return vals


def add_force(p) -> None:
    """The ``--force`` flag of every command that writes (see :mod:`dcpsim.outdir`)."""
    p.add_argument("--force", action="store_true",
                   help="write even where files dcpsim did not write are (they may be overwritten); "
                        "without it such a folder or file is refused before any work starts")


def with_default_profile(cfg):
    """``cfg`` with its GPU name read as the commands read it: the calibrated profile where one exists
    (:func:`dcpsim.hardware.defaults.resolve_gpu`)."""
    from dcpsim.hardware.defaults import resolve_gpu

    gpu = resolve_gpu(cfg.hardware.gpu)
    return cfg if gpu == cfg.hardware.gpu else cfg.with_updates({"hardware.gpu": gpu})


def profile_label(name: str) -> str:
    """Which profile, calibrated on what (or uncalibrated: an optimistic upper bound); one line."""
    from dcpsim.hardware.defaults import profile_label as label

    return label(name)
