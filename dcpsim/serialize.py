"""Serialising results, written once: plain-JSON copies (numpy values, paths, non-finite floats) and TOML values."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

__all__ = ["to_jsonable", "toml_value"]


def to_jsonable(obj: Any, *, nonfinite_as_null: bool = True) -> Any:
    """A copy of ``obj`` that :func:`json.dumps` writes as strict JSON.

    Dict keys become strings; tuples, lists and arrays become lists; numpy
    scalars become Python numbers; paths become strings. ``nan``/``inf``
    become ``null`` (strict JSON has no such numbers), unless
    ``nonfinite_as_null=False`` (for hashing values as they are).
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, nonfinite_as_null=nonfinite_as_null) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        obj = obj.tolist()
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, nonfinite_as_null=nonfinite_as_null) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if nonfinite_as_null and isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


def toml_value(v: Any) -> str:
    """``v`` as a TOML value: booleans, integers, floats (round-trip ``repr``), strings, lists and inline tables."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")
