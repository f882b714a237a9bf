"""A length distribution as a user writes it: a pydantic discriminated union on ``type``.

``workload.name`` may be a table instead of a preset name::

    [workload.name]
    type = "lognormal_pareto"
    mean = 8192            # or mu = ...
    sigma = 1.2
    tail_start = 32768
    alpha = 1.5

Each ``type`` is one model below, with strict types and bounds; the table is
validated against the model its ``type`` names (errors name the key:
``workload.name.sigma: got nan; expected a finite number > 0 and <= 20``)
before :func:`~dcpsim.workload.distributions.distribution_from_dict` builds
the distribution (which keeps its own checks for direct Python use).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from dcpsim.choices import Clip
from dcpsim.errors import ConfigError
from dcpsim.schema import InputModel

LENGTH_MAX = 1 << 40  # tokens; far above any sequence (the loaders' own cap is lower)
Length = Annotated[int, Field(ge=1, le=LENGTH_MAX)]


class _LogNormalLike(InputModel):
    mu: float | None = Field(None, ge=-50, le=50, description="mean of ln(length) (or give mean)")
    mean: float | None = Field(None, gt=0, le=LENGTH_MAX, description="mean length in tokens (or give mu)")
    sigma: float = Field(gt=0, le=20, description="standard deviation of ln(length)")

    @model_validator(mode="after")
    def _mu_or_mean(self):
        if (self.mu is None) == (self.mean is None):
            raise ConfigError("mu", self.mu, "exactly one of mu and mean")
        return self


class LogNormalSpec(_LogNormalLike):
    type: Literal["lognormal"]


class LogNormalParetoSpec(_LogNormalLike):
    type: Literal["lognormal_pareto"]
    tail_start: float = Field(gt=0, le=LENGTH_MAX, description="length where the Pareto tail starts (tokens)")
    alpha: float = Field(gt=0, le=100, description="Pareto shape (> 1 for a finite mean)")


class ClippedSpec(InputModel):
    type: Literal["clipped"]
    base: DistributionSpec
    min_len: Length | None = None
    max_len: Length | None = None
    mode: Clip = "drop"


class MixtureSpec(InputModel):
    type: Literal["mixture"]
    components: list[DistributionSpec] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0, le=1e12)]] = Field(min_length=1)


class EmpiricalSpec(InputModel):
    type: Literal["empirical"]
    source: str = Field(min_length=1, description="where the lengths come from")
    lengths: Any = None  # a list or array of token counts: checked by Empirical (integer, >= 1, capped)
    path: str | None = Field(None, min_length=1)
    column: str | int | None = None
    count: int | None = Field(None, ge=0)
    sha256: str | None = None


class GithubProxySpec(InputModel):
    """The shipped GitHub code-file length sample (dcpsim/workload/real.py); no parameters."""

    type: Literal["github_proxy"]


class WikipediaShapeSpec(InputModel):
    """The real Wikipedia length shape rescaled to a mean (dcpsim/workload/real.py)."""

    type: Literal["wikipedia_shape"]
    mean: float = Field(gt=0, le=LENGTH_MAX, description="mean length in tokens the shape is rescaled to")


DistributionSpec = Annotated[
    Union[LogNormalSpec, LogNormalParetoSpec, ClippedSpec, MixtureSpec, EmpiricalSpec,  # noqa: UP007
          GithubProxySpec, WikipediaShapeSpec],
    Field(discriminator="type"),
]
ClippedSpec.model_rebuild()
MixtureSpec.model_rebuild()

DISTRIBUTION_TYPES: tuple[str, ...] = ("lognormal", "lognormal_pareto", "clipped", "mixture", "empirical",
                                       "github_proxy", "wikipedia_shape")
