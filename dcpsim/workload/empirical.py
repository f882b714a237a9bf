"""The empirical length distribution: resampling observed lengths in tokens (split out of
:mod:`dcpsim.workload.distributions`, which re-exports every name here)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.workload.length_base import (
    LengthDistribution,
    _check_keys,
)
from dcpsim.workload.loaders import LENGTH_CAP, read_lengths  # files are read in loaders, never here

EMPIRICAL_INLINE_LIMIT: int = 4096
"""An :class:`Empirical` loaded from a file with more lengths than this is
serialised by reference (path + checksum) instead of inline."""
# --------------------------------------------------------------------------
# empirical
# --------------------------------------------------------------------------


def _as_length_array(values: Any, name: str, where: str) -> np.ndarray:
    """Validate a 1-D array of integer token counts in ``[1, LENGTH_CAP]`` -> int64."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ConfigError(name, f"array of shape {arr.shape}", "a 1-D array", where=where)
    if arr.size == 0:
        raise ConfigError(name, "an empty array", "at least one length", where=where)
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ConfigError(name, f"dtype {arr.dtype}", "integer token counts", where=where)
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{name}[{i}]", arr[i].item(), "an integer token count", where=where)
    lo_bad = arr < 1
    if lo_bad.any():
        i = int(np.flatnonzero(lo_bad)[0])
        raise ConfigError(f"{name}[{i}]", arr[i].item(), "a token count >= 1", where=where)
    hi_bad = arr > LENGTH_CAP
    if hi_bad.any():
        i = int(np.flatnonzero(hi_bad)[0])
        raise ConfigError(f"{name}[{i}]", arr[i].item(), f"<= {LENGTH_CAP} tokens", where=where)
    return arr.astype(np.int64)


@dataclass(frozen=True, eq=False)
class Empirical(LengthDistribution):
    """Resamples (with replacement, uniformly) from observed lengths.

    Attributes:
        lengths: observed lengths in tokens (1-D, integers ``>= 1``); stored as
            a read-only ``int64`` copy.
        source: free text naming where the lengths came from.
        path: the file they were read from, if any; lets :meth:`to_dict`
            refer to the file instead of inlining many lengths.
        column: the column/key read from ``path`` (``None``: the default).
    """

    lengths: np.ndarray
    source: str
    path: str | None = None
    column: str | None = None

    type_name: ClassVar[str] = "empirical"
    _digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = "Empirical"
        arr = _as_length_array(self.lengths, "lengths", where).copy()
        arr.flags.writeable = False
        object.__setattr__(self, "lengths", arr)
        if not isinstance(self.source, str):
            raise ConfigError("source", self.source, "a string naming the origin", where=where)
        if self.path is not None and not isinstance(self.path, str):
            object.__setattr__(self, "path", str(self.path))
        if self.column is not None and not isinstance(self.column, str):
            raise ConfigError("column", self.column, "a column name or None", where=where)
        object.__setattr__(self, "_digest", _digest(arr))

    def __repr__(self) -> str:
        return f"Empirical(n={self.lengths.size}, mean={self.lengths.mean():.1f}, source={self.source!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Empirical):
            return NotImplemented
        return (
            self.source == other.source
            and self.path == other.path
            and self.column == other.column
            and self._digest == other._digest
            and np.array_equal(self.lengths, other.lengths)
        )

    def __hash__(self) -> int:
        return hash((self.source, self.path, self.column, self._digest))

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the lengths as little-endian int64 (identifies the data)."""
        return self._digest

    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.lengths[rng.integers(0, self.lengths.size, size=n)]

    def mean_estimate(self) -> float:
        return float(self.lengths.mean())

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        s = np.sort(self.lengths)
        return np.searchsorted(s, np.asarray(x, dtype=np.float64), side="right") / s.size

    def to_dict(self) -> dict[str, Any]:
        """Inline lengths when few or not from a file; else path + checksum."""
        d: dict[str, Any] = {"type": self.type_name, "source": self.source}
        if self.path is None or self.lengths.size <= EMPIRICAL_INLINE_LIMIT:
            d["lengths"] = self.lengths.tolist()
            if self.path is not None:
                d["path"] = self.path
        else:
            d["path"] = self.path
            d["count"] = int(self.lengths.size)
            d["sha256"] = self._digest
        if self.column is not None:
            d["column"] = self.column
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Empirical:
        """Rebuild from inline ``lengths``, or re-read ``path`` and check ``sha256``."""
        where = "empirical"
        _check_keys(
            d,
            required=("source",),
            optional=("lengths", "path", "column", "count", "sha256"),
            where=where,
        )
        column = d.get("column")
        if "lengths" in d:
            return cls(np.asarray(d["lengths"]), d["source"], path=d.get("path"), column=column)
        if "path" not in d:
            raise ConfigError("lengths", None, "inline 'lengths' or a 'path' to read", where=where)
        arr = read_lengths(d["path"], column=column)
        out = cls(arr, d["source"], path=str(d["path"]), column=column)
        if "sha256" in d and d["sha256"] != out.sha256:
            raise ConfigError(
                "sha256",
                d["sha256"],
                f"the checksum of {d['path']} ({out.sha256}); the file changed",
                where=where,
            )
        return out


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr, dtype="<i8").tobytes()).hexdigest()
