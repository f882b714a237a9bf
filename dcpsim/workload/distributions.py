"""Sequence-length distributions.

Every distribution describes the length of one training sequence (one
document) in **tokens**. Draws are integers ``>= 1`` of dtype ``int64``.

Continuous laws (log-normal, spliced log-normal/Pareto) are turned into token
counts by rounding *up*: a draw ``x > 0`` becomes ``L = ceil(x)``, so that
``P(L <= k) = F(k)`` for every integer ``k`` (``F`` the continuous CDF), and
no draw is ever 0. Continuous draws are also capped at :data:`LENGTH_CAP`
tokens before conversion, purely as an overflow guard (``LENGTH_CAP ** 2``
still fits in ``int64``, so downstream code may square lengths safely); a
heavy Pareto tail reaches the cap with a probability of order ``1e-9``.

Every distribution is a frozen dataclass that validates itself in
``__post_init__`` and raises :class:`~dcpsim.errors.ConfigError` on bad input.
``to_dict()`` gives a JSON- and TOML-serialisable description (no ``None``
values, a ``"type"`` key), and :func:`distribution_from_dict` rebuilds an
equal object from it.

All randomness comes from the :class:`numpy.random.Generator` passed to
:meth:`LengthDistribution.sample`; the module holds no random state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from dcpsim.choices import CLIP_MODES
from dcpsim.errors import ConfigError
from dcpsim.workload.empirical import (  # noqa: F401  (re-exported: these names stay importable from here)
    EMPIRICAL_INLINE_LIMIT,
    Empirical,
    _as_length_array,
    _digest,
)
from dcpsim.workload.length_base import (  # noqa: F401  (re-exported: these names stay importable from here)
    LengthDistribution,
    _check_keys,
    _check_n,
    _check_rng,
    _length,
    _positive_real,
    _real,
    _to_lengths,
)
from dcpsim.workload.loaders import LENGTH_CAP  # files are read in loaders, never here


# scipy (~1 s to import) only where a distribution needs it: fixed windows, empirical tables and uniform
# draws never do, so `dcpsim plan`'s workers and the CLI do not pay for it
def _ndtr(x):
    from scipy.special import ndtr

    return ndtr(x)


def _brentq(*args, **kwargs):
    from scipy.optimize import brentq

    return brentq(*args, **kwargs)


def _quad(*args, **kwargs):
    from scipy.integrate import quad

    return quad(*args, **kwargs)


__all__ = [
    "LENGTH_CAP",
    "Clipped",
    "Empirical",
    "LengthDistribution",
    "LogNormal",
    "LogNormalPareto",
    "Mixture",
    "distribution_from_dict",
    "lognormal_from_mean",
    "lognormal_pareto_from_mean",
]


ClipMode = Literal["drop", "truncate"]

# --------------------------------------------------------------------------
# log-normal
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class LogNormal(LengthDistribution):
    """Log-normal lengths: ``ln(X) ~ Normal(mu, sigma**2)``, X in tokens.

    Attributes:
        mu: mean of ``ln(X)`` (natural log of tokens).
        sigma: standard deviation of ``ln(X)``, ``> 0``.

    The median is ``exp(mu)`` tokens and the mean ``exp(mu + sigma**2 / 2)``.
    See :func:`lognormal_from_mean` to set ``mu`` from a mean length.
    """

    mu: float
    sigma: float

    type_name: ClassVar[str] = "lognormal"

    def __post_init__(self) -> None:
        where = "LogNormal"
        object.__setattr__(self, "mu", _real(self.mu, "mu", where))
        object.__setattr__(self, "sigma", _positive_real(self.sigma, "sigma", where))

    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.lognormal(self.mu, self.sigma, size=n)

    def mean_estimate(self) -> float:
        return math.exp(self.mu + 0.5 * self.sigma**2)

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 0.0)) - self.mu) / self.sigma
        return _ndtr(z)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type_name, "mu": self.mu, "sigma": self.sigma}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogNormal:
        """Accepts ``{mu, sigma}`` or ``{mean, sigma}`` (see :func:`lognormal_from_mean`)."""
        if "mean" in d and "mu" not in d:
            _check_keys(d, required=("mean", "sigma"), optional=(), where=cls.type_name)
            return lognormal_from_mean(d["mean"], d["sigma"])
        _check_keys(d, required=("mu", "sigma"), optional=(), where=cls.type_name)
        return cls(mu=d["mu"], sigma=d["sigma"])


def lognormal_from_mean(mean: float, sigma: float) -> LogNormal:
    """Log-normal with the given mean length, Megatron's mock-data convention.

    ``mu = ln(mean) - sigma**2 / 2``, so that ``E[X] = mean``.

    Args:
        mean: mean sequence length in tokens, ``> 0``.
        sigma: standard deviation of ``ln(X)``, ``> 0``.
    """
    where = "lognormal_from_mean"
    mean = _positive_real(mean, "mean", where)
    sigma = _positive_real(sigma, "sigma", where)
    return LogNormal(mu=math.log(mean) - 0.5 * sigma**2, sigma=sigma)


# --------------------------------------------------------------------------
# spliced log-normal body + Pareto tail
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class LogNormalPareto(LengthDistribution):
    """Log-normal body spliced with a Pareto tail.

    Below ``tail_start`` the density is that of ``LogNormal(mu, sigma)``; the
    probability mass that log-normal puts above ``tail_start``
    (``p_tail = 1 - Phi((ln(tail_start) - mu) / sigma)``) is instead spread
    as a Pareto law with scale ``x_m = tail_start`` and shape ``alpha``:
    ``P(X > x | X > tail_start) = (tail_start / x) ** alpha``.

    Attributes:
        mu: mean of ``ln(X)`` of the log-normal body (ln tokens).
        sigma: standard deviation of ``ln(X)`` of the body, ``> 0``.
        tail_start: where the Pareto tail starts, in tokens, ``> 0``.
        alpha: Pareto tail index, ``> 0``; smaller is heavier. The mean is
            infinite when ``alpha <= 1``, the variance when ``alpha <= 2``.
    """

    mu: float
    sigma: float
    tail_start: float
    alpha: float

    type_name: ClassVar[str] = "lognormal_pareto"

    def __post_init__(self) -> None:
        where = "LogNormalPareto"
        object.__setattr__(self, "mu", _real(self.mu, "mu", where))
        object.__setattr__(self, "sigma", _positive_real(self.sigma, "sigma", where))
        object.__setattr__(self, "tail_start", _positive_real(self.tail_start, "tail_start", where))
        object.__setattr__(self, "alpha", _positive_real(self.alpha, "alpha", where))

    @property
    def tail_probability(self) -> float:
        """Share of sequences drawn from the Pareto tail (``X > tail_start``)."""
        return float(_ndtr((self.mu - math.log(self.tail_start)) / self.sigma))

    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        # Draw the log-normal; every draw that lands above tail_start is
        # replaced by a Pareto draw (inverse CDF: x_m * U^(-1/alpha), U in (0, 1]).
        x = rng.lognormal(self.mu, self.sigma, size=n)
        tail = x > self.tail_start
        k = int(np.count_nonzero(tail))
        if k:
            u = 1.0 - rng.random(k)
            x[tail] = self.tail_start * u ** (-1.0 / self.alpha)
        return x

    def mean_estimate(self) -> float:
        if self.alpha <= 1.0:
            return math.inf
        body_mean = math.exp(self.mu + 0.5 * self.sigma**2)
        # E[X; X <= t] for the log-normal: E[X] * Phi((ln t - mu - sigma^2) / sigma)
        body_part = body_mean * float(_ndtr((math.log(self.tail_start) - self.mu - self.sigma**2) / self.sigma))
        tail_mean = self.alpha * self.tail_start / (self.alpha - 1.0)
        return body_part + self.tail_probability * tail_mean

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore"):
            body = _ndtr((np.log(np.maximum(x, 0.0)) - self.mu) / self.sigma)
        ratio = self.tail_start / np.maximum(x, self.tail_start)
        tail = 1.0 - self.tail_probability * ratio**self.alpha
        return np.where(x <= self.tail_start, body, tail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type_name,
            "mu": self.mu,
            "sigma": self.sigma,
            "tail_start": self.tail_start,
            "alpha": self.alpha,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogNormalPareto:
        """Accepts ``{mu, ...}`` or ``{mean, ...}`` (see :func:`lognormal_pareto_from_mean`)."""
        rest = ("sigma", "tail_start", "alpha")
        if "mean" in d and "mu" not in d:
            _check_keys(d, required=("mean", *rest), optional=(), where=cls.type_name)
            return lognormal_pareto_from_mean(d["mean"], d["sigma"], d["tail_start"], d["alpha"])
        _check_keys(d, required=("mu", *rest), optional=(), where=cls.type_name)
        return cls(mu=d["mu"], sigma=d["sigma"], tail_start=d["tail_start"], alpha=d["alpha"])


def lognormal_pareto_from_mean(mean: float, sigma: float, tail_start: float, alpha: float) -> LogNormalPareto:
    """Spliced log-normal/Pareto with the given shape, ``mu`` solved for a mean.

    Args:
        mean: target mean sequence length in tokens (see
            :meth:`LengthDistribution.mean_estimate`), ``> 0``.
        sigma: body log standard deviation, ``> 0``.
        tail_start: Pareto scale in tokens, ``> 0``.
        alpha: Pareto index, ``> 1`` (otherwise the mean is infinite).

    The mean is strictly increasing in ``mu``, so the root is unique.
    """
    where = "lognormal_pareto_from_mean"
    mean = _positive_real(mean, "mean", where)
    alpha_f = _positive_real(alpha, "alpha", where)
    if alpha_f <= 1.0:
        raise ConfigError("alpha", alpha, "> 1 so that the mean is finite", where=where)
    probe = LogNormalPareto(mu=0.0, sigma=sigma, tail_start=tail_start, alpha=alpha_f)

    def gap(mu: float) -> float:
        d = LogNormalPareto(mu=mu, sigma=probe.sigma, tail_start=probe.tail_start, alpha=alpha_f)
        return math.log(d.mean_estimate()) - math.log(mean)

    lo, hi = math.log(mean) - 50.0, math.log(mean) + 10.0
    if not (gap(lo) < 0.0 < gap(hi)):
        raise ConfigError("mean", mean, f"a mean reachable with sigma={sigma}, tail_start={tail_start}", where=where)
    mu = _brentq(gap, lo, hi, xtol=1e-12)
    return LogNormalPareto(mu=mu, sigma=probe.sigma, tail_start=probe.tail_start, alpha=alpha_f)


# --------------------------------------------------------------------------
# clipping
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Clipped(LengthDistribution):
    """A base distribution restricted to ``[min_len, max_len]`` tokens.

    Attributes:
        base: the distribution being clipped.
        min_len: smallest allowed length in tokens (``None``: no lower bound).
        max_len: largest allowed length in tokens (``None``: no upper bound).
        mode: ``"drop"`` rejects draws outside the range and draws again, as a
            data loader that filters documents does (the result is the base
            law *conditioned* on the range); ``"truncate"`` clamps them to the
            nearest bound (mass piles up at the bounds).
    """

    base: LengthDistribution
    min_len: int | None = None
    max_len: int | None = None
    mode: ClipMode = "drop"

    type_name: ClassVar[str] = "clipped"

    #: drop mode gives up after this many consecutive batches without a keeper
    _MAX_EMPTY_ROUNDS: ClassVar[int] = 64
    #: drop mode gives up when the acceptance rate is measured below this
    _MIN_ACCEPTANCE: ClassVar[float] = 1e-6
    #: ... or when finishing would take more candidate draws than this (about a minute and more of drawing),
    #: judged once 10M draws have measured the rate
    _MAX_DRAWS: ClassVar[int] = 1_000_000_000

    def __post_init__(self) -> None:
        where = "Clipped"
        if not isinstance(self.base, LengthDistribution):
            raise ConfigError("base", self.base, "a LengthDistribution", where=where)
        if self.min_len is not None:
            object.__setattr__(self, "min_len", _length(self.min_len, "min_len", where))
        if self.max_len is not None:
            object.__setattr__(self, "max_len", _length(self.max_len, "max_len", where))
        if self.min_len is not None and self.max_len is not None and self.max_len < self.min_len:
            raise ConfigError("max_len", self.max_len, f">= min_len ({self.min_len})", where=where)
        if self.mode not in CLIP_MODES:
            raise ConfigError("mode", self.mode, "'drop' or 'truncate'", where=where)

    @property
    def _lo(self) -> int:
        return 1 if self.min_len is None else self.min_len

    @property
    def _hi(self) -> int:
        return LENGTH_CAP if self.max_len is None else self.max_len

    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.mode == "truncate":
            return np.clip(self.base.sample(n, rng), self._lo, self._hi)
        return self._sample_drop(n, rng)

    def _sample_drop(self, n: int, rng: np.random.Generator) -> np.ndarray:
        # Rejection sampling in vectorised batches: each round draws enough
        # candidates to finish with high probability at the observed
        # acceptance rate, keeps the ones in range, in draw order.
        lo, hi = self._lo, self._hi
        out = np.empty(n, dtype=np.int64)
        filled = drawn = accepted = empty_rounds = 0
        seen_lo, seen_hi = LENGTH_CAP + 1, 0
        batch = n
        while filled < n:
            cand = self.base.sample(batch, rng)
            if cand.size:
                seen_lo, seen_hi = min(seen_lo, int(cand.min())), max(seen_hi, int(cand.max()))
            keep = cand[(cand >= lo) & (cand <= hi)]
            drawn += batch
            accepted += keep.size
            take = min(keep.size, n - filled)
            out[filled : filled + take] = keep[:take]
            filled += take
            if filled == n:
                break
            empty_rounds = empty_rounds + 1 if keep.size == 0 else 0
            rate = accepted / drawn
            need = n - filled
            too_slow = drawn >= 10_000_000 and (rate == 0.0 or drawn + need / rate > self._MAX_DRAWS)
            if (empty_rounds >= self._MAX_EMPTY_ROUNDS or (drawn >= 1_000_000 and rate < self._MIN_ACCEPTANCE)
                    or too_slow):
                raise ConfigError("min_len/max_len", f"{lo}..{hi}", self._unreachable(drawn, accepted, seen_lo, seen_hi))
            if rate > 0.0:
                batch = int(min(max(need / rate * 1.1 + 16, 64), 4 * n + 1_000_000))
            else:
                batch = min(batch * 4, 4 * n + 1_000_000)
        return out

    def _unreachable(self, drawn: int, accepted: int, seen_lo: int, seen_hi: int) -> str:
        """Why drop-clipping gave up, in the user's words (what the lengths were, what to change)."""
        lo, hi = self._lo, self._hi
        if seen_hi < lo:
            where = f"all below min_len {lo} (the longest is {seen_hi:,})"
        elif seen_lo > hi:
            where = f"all above max_len {hi} (the shortest is {seen_lo:,})"
        else:
            where = f"between {seen_lo:,} and {seen_hi:,}"
        share = "none" if accepted == 0 else f"only {accepted:,}"
        return (f"a length range that holds the workload's sequences: {share} of {drawn:,} drawn lengths fell in "
                f"[{lo:,}, {hi:,}]; they are {where}. Lower min_len / raise max_len, or set clip = \"truncate\" to "
                "clamp lengths into the range")

    def mean_estimate(self) -> float | None:
        """Mean of the clipped law in tokens (see the base class for rounding).

        Exact for an :class:`Empirical` base; numerical integration of the
        base CDF for continuous bases; ``None`` if the base has neither.
        """
        lo, hi = self._lo, self._hi
        if isinstance(self.base, Empirical):
            x = self.base.lengths
            if self.mode == "truncate":
                return float(np.clip(x, lo, hi).mean())
            kept = x[(x >= lo) & (x <= hi)]
            return float(kept.mean()) if kept.size else None
        if self.base._cdf(np.array([1.0])) is None:
            return None
        lo_f = 0.0 if self.min_len is None else float(self.min_len)
        hi_f = float(hi)
        cdf = self.base._cdf
        if self.mode == "truncate":
            # E[clamp(X, lo, hi)] = lo + integral_lo^hi P(X > x) dx
            return lo_f + _integrate_positive(lambda x: 1.0 - cdf(x), lo_f, hi_f)
        f_lo, f_hi = float(cdf(np.array([lo_f]))[0]), float(cdf(np.array([hi_f]))[0])
        mass = f_hi - f_lo
        if mass <= 0.0:
            return None
        # E[X | lo < X <= hi] = lo + integral_lo^hi (F(hi) - F(x)) dx / (F(hi) - F(lo))
        return lo_f + _integrate_positive(lambda x: f_hi - cdf(x), lo_f, hi_f) / mass

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type_name, "base": self.base.to_dict()}
        if self.min_len is not None:
            d["min_len"] = self.min_len
        if self.max_len is not None:
            d["max_len"] = self.max_len
        d["mode"] = self.mode
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Clipped:
        _check_keys(d, required=("base",), optional=("min_len", "max_len", "mode"), where="clipped")
        return cls(
            base=distribution_from_dict(d["base"]),
            min_len=d.get("min_len"),
            max_len=d.get("max_len"),
            mode=d.get("mode", "drop"),
        )


def _integrate_positive(g: Callable[[np.ndarray], np.ndarray], lo: float, hi: float) -> float:
    """``integral_lo^hi g(x) dx`` for ``0 <= lo < hi``; done in ``ln x`` for heavy tails."""
    if hi <= lo:
        return 0.0

    def scalar(x: float) -> float:
        return float(g(np.array([x]))[0])

    total = 0.0
    if lo < 1.0:
        total += _quad(scalar, lo, min(1.0, hi), limit=200)[0]
        lo = 1.0
    if hi > lo:
        total += _quad(lambda u: scalar(math.exp(u)) * math.exp(u), math.log(lo), math.log(hi), limit=400)[0]
    return total


# --------------------------------------------------------------------------
# mixture
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Mixture(LengthDistribution):
    """A finite mixture: each sequence comes from component ``i`` with prob. ``w_i``.

    Attributes:
        components: the component distributions (a non-empty tuple).
        weights: non-negative mixing weights, one per component; normalised
            to sum to 1 on construction.
    """

    components: tuple[LengthDistribution, ...]
    weights: tuple[float, ...]

    type_name: ClassVar[str] = "mixture"

    def __post_init__(self) -> None:
        where = "Mixture"
        comps = self.components
        if isinstance(comps, LengthDistribution) or not isinstance(comps, Sequence) or not comps:
            raise ConfigError("components", comps, "a non-empty sequence of LengthDistribution", where=where)
        for i, c in enumerate(comps):
            if not isinstance(c, LengthDistribution):
                raise ConfigError(f"components[{i}]", c, "a LengthDistribution", where=where)
        weights = self.weights
        if isinstance(weights, str | bytes) or not isinstance(weights, Sequence | np.ndarray):
            raise ConfigError("weights", weights, "a sequence of numbers", where=where)
        if len(weights) != len(comps):
            raise ConfigError("weights", list(weights), f"{len(comps)} weights, one per component", where=where)
        w = [_real(x, f"weights[{i}]", where) for i, x in enumerate(weights)]
        if any(x < 0.0 for x in w) or sum(w) <= 0.0:
            raise ConfigError("weights", w, "non-negative numbers with a positive sum", where=where)
        total = math.fsum(w)
        object.__setattr__(self, "components", tuple(comps))
        object.__setattr__(self, "weights", tuple(x / total for x in w))

    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        which = rng.choice(len(self.components), size=n, p=np.asarray(self.weights))
        out = np.empty(n, dtype=np.int64)
        for i, comp in enumerate(self.components):
            idx = np.flatnonzero(which == i)
            if idx.size:
                out[idx] = comp.sample(idx.size, rng)
        return out

    def mean_estimate(self) -> float | None:
        means = [c.mean_estimate() for c in self.components]
        if any(m is None for m in means):
            return None
        return math.fsum(w * m for w, m in zip(self.weights, means, strict=True) if w > 0.0)

    def _cdf(self, x: np.ndarray) -> np.ndarray | None:
        parts = [c._cdf(x) for c in self.components]
        if any(p is None for p in parts):
            return None
        return sum(w * p for w, p in zip(self.weights, parts, strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type_name,
            "components": [c.to_dict() for c in self.components],
            "weights": list(self.weights),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mixture:
        _check_keys(d, required=("components", "weights"), optional=(), where="mixture")
        comps = d["components"]
        if isinstance(comps, Mapping) or not isinstance(comps, Sequence):
            raise ConfigError("components", comps, "a list of distribution tables", where="mixture")
        return cls(
            components=tuple(distribution_from_dict(c) for c in comps),
            weights=d["weights"],
        )


# --------------------------------------------------------------------------
# (de)serialisation
# --------------------------------------------------------------------------

_REGISTRY: dict[str, type[LengthDistribution]] = {
    cls.type_name: cls for cls in (LogNormal, LogNormalPareto, Clipped, Mixture, Empirical)
}


def distribution_from_dict(d: Mapping[str, Any]) -> LengthDistribution:
    """Build a distribution from its :meth:`~LengthDistribution.to_dict` form.

    Args:
        d: a mapping with a ``"type"`` key (one of ``lognormal``,
            ``lognormal_pareto``, ``clipped``, ``mixture``, ``empirical``) and
            that type's parameters. ``lognormal`` and ``lognormal_pareto``
            also accept ``mean`` in place of ``mu``.

    Raises:
        ConfigError: unknown type, missing or unexpected key, or a bad value.
    """
    if not isinstance(d, Mapping):
        raise ConfigError("distribution", d, "a table/dict with a 'type' key")
    check_distribution_table(d, "")
    kind = d.get("type")
    cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ConfigError("type", kind, f"one of {sorted(_REGISTRY)}")
    return cls.from_dict(d)


def check_distribution_table(d: Mapping[str, Any], field: str) -> None:
    """Validate a distribution table against its ``type``'s model (:mod:`dcpsim.workload.spec`).

    Raises :class:`ConfigError` naming ``<field>.<key>`` (``workload.name.sigma``).
    """
    from dcpsim.schema import check_value
    from dcpsim.workload.spec import DISTRIBUTION_TYPES, DistributionSpec

    kind = d.get("type") if isinstance(d, Mapping) else None
    if kind in DISTRIBUTION_TYPES:
        check_value(DistributionSpec, dict(d), field)
        return
    if not isinstance(kind, str) or kind not in _REGISTRY:  # a registered type checks its own table
        raise ConfigError(f"{field}.type" if field else "type", kind,
                          "one of " + ", ".join(f'"{t}"' for t in sorted(_REGISTRY)))
