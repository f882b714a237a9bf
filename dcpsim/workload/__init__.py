"""Sequence-length workloads for variable-length LLM training.

What is here (all lengths in tokens):

* distributions -- :class:`LengthDistribution` and its frozen, validated
  subclasses :class:`LogNormal`, :class:`LogNormalPareto` (log-normal body +
  Pareto tail), :class:`Clipped`, :class:`Mixture`, :class:`Empirical`;
  ``to_dict()`` / :func:`distribution_from_dict` (de)serialise them;
  :func:`lognormal_from_mean` and :func:`lognormal_pareto_from_mean` set ``mu``
  from a mean length.
* presets -- :data:`PRESETS` (``wikipedia``, ``commoncrawl``, ``github``, each
  with the origin of every parameter), :func:`get_workload` (preset name,
  lengths file, dict or distribution, optionally clipped) and
  :func:`list_workloads`.
* loaders -- :func:`read_lengths` for plain text, CSV, Parquet and JSON lines.
* statistics -- :func:`sample_global_batch`, :func:`summarize`,
  :func:`fit_lognormal_pareto`, :func:`hill_alpha`.
* plots -- :func:`dcpsim.report.lengths.plot_length_histograms`.

Example::

    import numpy as np
    from dcpsim.workload import get_workload, sample_global_batch, summarize

    dist = get_workload("github", max_len=131072)
    lengths = sample_global_batch(dist, 512, np.random.default_rng(0))
    print(summarize(lengths)["token_share_above_16384"])

All randomness comes from the ``numpy.random.Generator`` the caller passes.
"""

from dcpsim.workload.distributions import (
    LENGTH_CAP,
    Clipped,
    Empirical,
    LengthDistribution,
    LogNormal,
    LogNormalPareto,
    Mixture,
    distribution_from_dict,
    lognormal_from_mean,
    lognormal_pareto_from_mean,
)
from dcpsim.workload.loaders import LENGTH_KEYS, SUPPORTED_SUFFIXES, read_lengths
from dcpsim.workload.presets import PRESETS, Preset, get_workload, list_workloads
from dcpsim.workload.real import GithubCodeProxy, WikipediaShape
from dcpsim.workload.stats import (
    DEFAULT_THRESHOLDS,
    fit_lognormal_pareto,
    hill_alpha,
    sample_global_batch,
    summarize,
)

__all__ = [
    "DEFAULT_THRESHOLDS",
    "LENGTH_CAP",
    "LENGTH_KEYS",
    "PRESETS",
    "SUPPORTED_SUFFIXES",
    "Clipped",
    "Empirical",
    "GithubCodeProxy",
    "LengthDistribution",
    "LogNormal",
    "LogNormalPareto",
    "Mixture",
    "Preset",
    "WikipediaShape",
    "distribution_from_dict",
    "fit_lognormal_pareto",
    "get_workload",
    "hill_alpha",
    "list_workloads",
    "lognormal_from_mean",
    "lognormal_pareto_from_mean",
    "read_lengths",
    "sample_global_batch",
    "summarize",
]
