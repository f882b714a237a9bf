"""Real-length workloads shipped with dcpsim: GitHub source-file proxy and the Wikipedia shape."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.workload import GithubCodeProxy, WikipediaShape, distribution_from_dict, get_workload
from dcpsim.workload.real import _table_mean, github_code_lengths, wikipedia_log_quantiles


def test_github_proxy_is_the_shipped_sample():
    arr = github_code_lengths()
    assert arr.size == 66329 and arr.min() >= 1
    assert arr.mean() == pytest.approx(2813.9, abs=0.1)  # measured on the reference file (data README)
    d = get_workload("github-proxy")
    assert isinstance(d, GithubCodeProxy) and d.to_dict() == {"type": "github_proxy"}
    assert distribution_from_dict({"type": "github_proxy"}) == d
    x = d.sample(1000, np.random.default_rng(0))
    assert np.isin(x, arr).all()
    # the launch script's filter keeps 62.8% of the files, mean 3,948 tokens (exact for a resampled sample)
    clipped = get_workload({"type": "github_proxy"}, min_len=256, max_len=131072)
    assert clipped.mean_estimate() == pytest.approx(arr[(arr >= 256) & (arr <= 131072)].mean())
    with pytest.raises(ConfigError):
        distribution_from_dict({"type": "github_proxy", "mean": 3})


def test_wikipedia_table_and_scaling():
    p, q = wikipedia_log_quantiles()
    assert p[0] == 0.0 and p[-1] == 1.0 and np.all(np.diff(p) > 0) and np.all(np.diff(q) >= 0)
    assert np.exp(q[-1]) == pytest.approx(1_823_777, rel=1e-5)  # the longest document
    assert _table_mean(p, q) == pytest.approx(1013.6, rel=0.01)  # the data's mean
    for mean in (525.0, 1050.0):
        d = distribution_from_dict({"type": "wikipedia_shape", "mean": mean})
        assert d == WikipediaShape(mean) and d.to_dict() == {"type": "wikipedia_shape", "mean": mean}
        x = d.sample(400_000, np.random.default_rng(1))
        assert x.mean() == pytest.approx(mean, rel=0.05)
        # the shape is kept: the median scales with the mean (data median 347 at mean 1014)
        assert np.median(x) == pytest.approx(347 * mean / 1013.6, rel=0.05)
        c = get_workload({"type": "wikipedia_shape", "mean": mean}, min_len=256, max_len=131072)
        kept = x[(x >= 256) & (x <= 131072)]
        assert c.mean_estimate() == pytest.approx(kept.mean(), rel=0.03)
    for bad in (0, -5, "x", float("inf")):
        with pytest.raises(ConfigError):
            WikipediaShape(bad)
