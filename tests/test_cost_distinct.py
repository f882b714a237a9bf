"""The cost model's per-distinct routes: :func:`dcpsim.cost.compute.distinct_pairs` against ``np.unique`` of the
pairs, and the document terms computed per distinct (length, CP size) against the per-document ones, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dcpsim.cost import CostModel, compute


def _unique_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pairs, inv = np.unique(np.stack([x, y], axis=1), axis=0, return_inverse=True)
    return pairs[:, 0], pairs[:, 1], inv.ravel()


@pytest.mark.parametrize("x_hi, y_vals", [(60_000, [1, 2, 4, 8]), (200, [8]), (3 * 10**9, [1, 2, 8192]),
                                          (5_000, [-3, 7, 2**40]), (50, [0, 1, 2, 3, 4, 5])])
def test_distinct_pairs_are_np_unique_of_the_pairs(x_hi, y_vals):
    """Table route (small ranges), sort route (x or y wide), one y, negative values: the same distinct pairs in
    the same order and the same inverse as ``np.unique`` of the pairs; None when the pairs are not fewer than
    half the entries."""
    rng = np.random.default_rng(x_hi)
    for n in (1, 7, 5000, 40_000):
        x = rng.choice(rng.integers(-x_hi // 7, x_hi, int(rng.integers(1, 900))), n)
        y = rng.choice(np.array(y_vals, dtype=np.int64), n)
        got = compute.distinct_pairs(x, y)
        want = _unique_pairs(x, y)
        if 2 * want[0].size >= n:
            assert got is None
            continue
        assert got is not None
        for a, b in zip(got, want, strict=True):
            assert a.dtype.kind == "i" and np.array_equal(a, b)
        assert got[0].dtype == got[1].dtype == np.int64
    assert compute.distinct_pairs(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)) is None


@pytest.mark.parametrize("settings", [dict(cp_comm="p2p"), dict(cp_comm="a2a", tp=1), dict(cp_comm="all_gather"),
                                      dict(attention="unfused")])
def test_doc_terms_per_distinct_pair_equal_the_per_document_terms(settings, monkeypatch):
    """``doc_terms`` above ``_DISTINCT_MIN`` documents (each distinct (length, CP size) padded and timed once, then
    spread) equals the per-document route bit for bit; so do ``batch_cost``'s every term."""
    cost = CostModel.build("h100-sxm", "llama-13b", pp=4, dp_cp=64, **settings)
    rng = np.random.default_rng(5)
    unfused = settings.get("attention") == "unfused"  # (CP 1 only; a Python loop per distinct length)
    sizes = [1] if unfused else [1, 2, 4, 8]
    n, npk = 9000, 700
    lengths = rng.choice(rng.integers(1, 70_000, 200 if unfused else 2500), n)
    pids = np.sort(rng.integers(0, npk, n))
    cp = rng.choice(sizes, npk)
    spans = rng.random(npk) < 0.4
    fast = cost.doc_terms(lengths, cp.take(pids))
    fast_bc = cost.batch_cost(lengths, pids, cp, spans)
    with monkeypatch.context() as m:
        m.setattr(compute, "_DISTINCT_MIN", 10**12)
        ref = cost.doc_terms(lengths, cp.take(pids))
        ref_bc = cost.batch_cost(lengths, pids, cp, spans)
    for a, b in zip(fast, ref, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    for f in dataclasses.fields(ref_bc):
        a, b = np.asarray(getattr(fast_bc, f.name)), np.asarray(getattr(ref_bc, f.name))
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f.name
