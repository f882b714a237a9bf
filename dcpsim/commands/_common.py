"""Helpers shared by CLI sub-commands: JSON output and rich tables."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "__fspath__"):
        return str(obj)
    return obj


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


def print_table(rows: list[dict], title: str | None = None, columns: list[str] | None = None) -> None:
    """Print dict rows as a rich table (plain text when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    cols = columns or (list(rows[0]) if rows else [])
    table = Table(title=title, show_lines=False)
    for c in cols:
        table.add_column(c, justify="right" if rows and isinstance(rows[0].get(c), (int, float, np.number)) else "left")
    for r in rows:
        table.add_row(*[fmt(r.get(c, "")) for c in cols])
    Console(width=200).print(table)


def parse_int_list(text: str, field: str) -> list[int]:
    try:
        vals = [int(float(x)) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(field, text, "a comma-separated list of integers") from None
    if not vals or any(v <= 0 for v in vals):
        raise ConfigError(field, text, "a non-empty comma-separated list of positive integers")
    return vals
