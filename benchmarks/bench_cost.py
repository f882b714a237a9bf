"""Benchmark: the vectorised cost path on 100,000 packs (target: well under 1 s)."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost import CostModel


@pytest.mark.benchmark
def test_batch_cost_100k_packs(benchmark):
    cm = CostModel.build("h100-sxm", "llama-13b", tp=1, pp=8, dp_cp=64)
    rng = np.random.default_rng(0)
    n_packs = 100_000
    docs = rng.integers(1, 12, n_packs)  # 1..11 documents per pack, ~600k documents
    pids = np.repeat(np.arange(n_packs), docs)
    lengths = np.minimum(rng.lognormal(6.5, 1.3, pids.size).astype(np.int64) + 1, 131072)
    cp = rng.choice([1, 2, 4, 8], n_packs)
    span = rng.random(n_packs) < 0.3
    out = benchmark(cm.batch_cost, lengths, pids, cp, span)
    assert len(out) == n_packs and np.isfinite(out.total_s).all()
