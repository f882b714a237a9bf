"""Plain-JSON copies of results: the one place numpy values, paths and non-finite floats are made JSON-safe."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

__all__ = ["to_jsonable"]


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
