"""The base of every sequence-length distribution (:class:`LengthDistribution`) and the argument checks they share
(split out of :mod:`dcpsim.workload.distributions`, which re-exports every name here; lengths in tokens)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.workload.loaders import LENGTH_CAP  # files are read in loaders, never here

# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _real(value: Any, name: str, where: str) -> float:
    """``value`` as a finite float, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(name, value, "a finite real number", where=where)
    out = float(value)
    if not math.isfinite(out):
        raise ConfigError(name, value, "a finite real number", where=where)
    return out


def _positive_real(value: Any, name: str, where: str) -> float:
    out = _real(value, name, where)
    if out <= 0.0:
        raise ConfigError(name, value, "a finite number > 0", where=where)
    return out


def _length(value: Any, name: str, where: str) -> int:
    """``value`` as an int token count ``>= 1`` (integral floats accepted)."""
    if isinstance(value, bool):
        raise ConfigError(name, value, "an integer number of tokens >= 1", where=where)
    if isinstance(value, Integral):
        out = int(value)
    elif isinstance(value, Real) and math.isfinite(float(value)) and float(value).is_integer():
        out = int(value)
    else:
        raise ConfigError(name, value, "an integer number of tokens >= 1", where=where)
    if out < 1:
        raise ConfigError(name, value, "an integer number of tokens >= 1", where=where)
    return out


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral) or int(n) < 0:
        raise ConfigError("n", n, "a non-negative integer number of sequences")
    return int(n)


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ConfigError("rng", type(rng).__name__, "a numpy.random.Generator (np.random.default_rng(seed))")
    return rng


def _to_lengths(x: np.ndarray) -> np.ndarray:
    """Continuous draws (tokens, > 0) -> int64 token counts in [1, LENGTH_CAP]."""
    x = np.ceil(np.minimum(x, float(LENGTH_CAP)))
    return np.maximum(x, 1.0).astype(np.int64)


def _check_keys(d: Mapping[str, Any], required: Sequence[str], optional: Sequence[str], where: str) -> None:
    for key in required:
        if key not in d:
            raise ConfigError(key, None, f"a value (required by type '{where}')", where=where)
    allowed = {"type", *required, *optional}
    for key in d:
        if key not in allowed:
            raise ConfigError(key, d[key], f"no such key; allowed: {sorted(allowed)}", where=where)


# --------------------------------------------------------------------------
# base class
# --------------------------------------------------------------------------


class LengthDistribution(ABC):
    """A distribution of sequence lengths in tokens.

    Subclasses implement :meth:`_sample` (draws, possibly as floats) and
    :meth:`to_dict`; :meth:`sample` validates the arguments and converts the
    draws to ``int64`` token counts ``>= 1``.
    """

    type_name: ClassVar[str]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` independent sequence lengths.

        Args:
            n: number of sequences (``>= 0``).
            rng: the only source of randomness; the same generator state gives
                the same draws.

        Returns:
            ``int64`` array of shape ``(n,)``, lengths in tokens, each ``>= 1``.
        """
        n = _check_n(n)
        rng = _check_rng(rng)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        out = self._sample(n, rng)
        if out.dtype != np.int64:
            out = _to_lengths(np.asarray(out, dtype=np.float64))
        return out

    @abstractmethod
    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n >= 1`` draws: int64 token counts, or positive floats to round up."""

    def mean_estimate(self) -> float | None:
        """Expected length in tokens, or ``None`` when not known in closed form.

        For continuous laws this is the mean *before* rounding up to whole
        tokens (and ignoring :data:`LENGTH_CAP`); integer draws average at most
        one token more. ``math.inf`` when the mean does not exist.
        """
        return None

    def _cdf(self, x: np.ndarray) -> np.ndarray | None:
        """Continuous CDF ``P(X <= x)`` (x in tokens), or ``None`` if unavailable.

        Used to compute the mean of a :class:`Clipped` distribution.
        """
        return None

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-serialisable description with a ``"type"`` key."""

    @classmethod
    @abstractmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LengthDistribution:
        """Inverse of :meth:`to_dict` (``d["type"]`` already checked)."""
