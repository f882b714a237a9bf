"""Workloads from real length data shipped with dcpsim (``dcpsim/workload/data/``, origin in its README).

* :class:`GithubCodeProxy` (``{type = "github_proxy"}``, preset ``github-proxy``):
  resamples 66,329 real token lengths of source files from 45 popular public
  GitHub repositories -- a *proxy* for a GitHub code corpus, not the blog's file.
* :class:`WikipediaShape` (``{type = "wikipedia_shape", mean = ...}``): the
  shape of 1,000,000 real English Wikipedia lengths (quantiles of ``ln L`` at
  fine resolution) scaled so the *unclipped* mean is ``mean`` tokens. Used for
  CommonCrawl, for which only mean document sizes are public.

Both register themselves with :func:`~dcpsim.workload.distributions.distribution_from_dict`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, ClassVar

import numpy as np

import dcpsim.workload.distributions as _dist  # the module, not the package facade (no import cycle)
from dcpsim.errors import ConfigError
from dcpsim.workload.distributions import Empirical, LengthDistribution, _check_keys, _positive_real

__all__ = ["GithubCodeProxy", "WikipediaShape", "github_code_lengths", "wikipedia_log_quantiles"]

GITHUB_SOURCE = (
    "66,329 GPT-2-BPE token lengths of unique source files at the head of 45 popular public GitHub repositories "
    "(exact duplicates removed, files capped at 1 MB); a proxy for a GitHub code corpus, not the blog's data"
)
WIKIPEDIA_SOURCE = (
    "quantiles of ln(length) of 1,000,000 tokenised English Wikipedia documents (FlexSP, Hetu-Galvatron 'flexsp' "
    "branch, galvatron/datasets/wikipedia.txt, Apache-2.0)"
)


def _data(name: str):
    return resources.files("dcpsim.workload").joinpath("data", name)


@lru_cache(maxsize=1)
def github_code_lengths() -> np.ndarray:
    """The 66,329 GitHub source-file lengths (tokens, int64, read-only; file order)."""
    with _data("github_code_files_lengths.npy").open("rb") as fh:
        arr = np.load(fh).astype(np.int64)
    arr.flags.writeable = False
    return arr


@lru_cache(maxsize=1)
def wikipedia_log_quantiles() -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, ln tokens): the Wikipedia quantile table, probabilities from 0 to 1."""
    rows = np.loadtxt(_data("wikipedia_log_quantiles.txt").open("r"), comments="#")
    p, q = rows[:, 0].copy(), rows[:, 1].copy()
    p.flags.writeable = q.flags.writeable = False
    return p, q


def _table_mean(p: np.ndarray, q: np.ndarray) -> float:
    """Mean of ``exp(Q(u))``, ``u`` uniform, with ``Q`` linear between the table's points (tokens)."""
    dp, dq = np.diff(p), np.diff(q)
    e0, e1 = np.exp(q[:-1]), np.exp(q[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        seg = np.where(np.abs(dq) > 1e-12, (e1 - e0) / dq, e0)
    return float((dp * seg).sum())


@dataclass(frozen=True, eq=False)
class GithubCodeProxy(Empirical):
    """Resamples the shipped GitHub source-file lengths (see the module docstring).

    Build it with :meth:`load`; it serialises as ``{type = "github_proxy"}``.
    """

    type_name: ClassVar[str] = "github_proxy"

    @classmethod
    def load(cls) -> GithubCodeProxy:
        return cls(github_code_lengths(), GITHUB_SOURCE)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type_name}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GithubCodeProxy:
        _check_keys(d, required=(), optional=(), where=cls.type_name)
        return cls.load()


@dataclass(frozen=True)
class WikipediaShape(LengthDistribution):
    """The Wikipedia length shape scaled to an unclipped mean of ``mean`` tokens.

    A draw is ``exp(Q(u))·s``: ``u`` uniform, ``Q`` the shipped quantile table
    of ``ln L`` (linear between points), ``s = mean / mean(table)`` (the table's
    own mean is 1,013 tokens, the data's 1,014).
    """

    mean: float
    type_name: ClassVar[str] = "wikipedia_shape"
    _scale: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = _positive_real(self.mean, "mean", self.type_name)
        if not math.isfinite(m):
            raise ConfigError("mean", self.mean, "a finite mean length in tokens", where=self.type_name)
        object.__setattr__(self, "mean", m)
        p, q = wikipedia_log_quantiles()
        object.__setattr__(self, "_scale", m / _table_mean(p, q))

    def _sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        p, q = wikipedia_log_quantiles()
        return np.exp(np.interp(rng.random(n), p, q)) * self._scale

    def mean_estimate(self) -> float:
        return self.mean

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        p, q = wikipedia_log_quantiles()
        with np.errstate(divide="ignore"):
            lx = np.log(np.asarray(x, dtype=np.float64) / self._scale)
        return np.interp(lx, q, p, left=0.0, right=1.0)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type_name, "mean": self.mean}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WikipediaShape:
        _check_keys(d, required=("mean",), optional=(), where=cls.type_name)
        return cls(mean=d["mean"])


for _cls in (GithubCodeProxy, WikipediaShape):
    _dist._REGISTRY.setdefault(_cls.type_name, _cls)
