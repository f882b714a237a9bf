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


@pytest.mark.parametrize("net_share", [0.0, 0.03, 0.5, 0.95, 1.0])
def test_pack_costs_terms_are_each_cells_pack_cost_in_its_class(net_share):
    """:func:`dcpsim.sim.packcosts.pack_costs` (classes costed on every pack or on their packs' documents, rows
    written with or without a mask): each cell's term is the row of its pack in its class's cost of every pack,
    bit for bit; local tokens and memory those of the group's last class."""
    from dcpsim.sim.durations import scale_network
    from dcpsim.sim.packcosts import TERMS, pack_costs

    rng = np.random.default_rng(int(net_share * 100))
    cost = CostModel.build("h100-sxm", "llama-13b", pp=4, dp_cp=64)
    models = {1.0: cost, 0.5: cost.derive(profile=scale_network(cost.profile, 0.5))}
    P, G, pp, n = 300, 310, 4, 6000
    lens = rng.integers(1, 40_000, n)
    pids = np.sort(np.concatenate([np.arange(P), rng.integers(0, P, n - P)]))
    cps = rng.choice([1, 2, 4, 8], P)
    spans = np.zeros((pp, G), dtype=bool)
    spans[:, :P] = rng.random((pp, P)) < net_share
    spans[:, :P] |= (rng.random(P) < net_share / 2)[None, :]  # some groups on the network on every stage
    factor = np.where(rng.random((pp, G)) < 0.3, 0.5, 1.0)
    per, local, mem, _ = pack_costs(models.__getitem__, lens, pids, cps, spans, factor, 1e9)
    full = {(f, net): models[f].batch_cost(lens, pids, cps, np.full(P, net)) for f in models for net in (False, True)}
    cls = [[(factor[p, g], True) if spans[p, g] else (1.0, False) for g in range(P)] for p in range(pp)]
    for name in TERMS:
        want = np.array([[getattr(full[cls[p][g]], name)[g] for g in range(P)] for p in range(pp)])
        got = np.asarray(per[name])
        assert got.shape == (pp, G) and not got[:, P:].any()
        assert got[:, :P].tobytes() == want.tobytes(), name
        assert all(per.stage(name, p).tobytes() == got[p].tobytes() for p in range(pp))
    order = [(1.0, False)] + [(f, True) for f in sorted({float(x) for x in factor[:, :P][spans[:, :P]]})]
    for g in range(P):
        last = [c for c in order if any(cls[p][g] == c for p in range(pp))][-1]
        assert local[g] == full[last].local_tokens[g] and mem[g] == full[last].peak_memory_bytes[g]


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_gemm_shape_factor_on_distinct_ascending_counts_equals_it_in_pieces(precision):
    """Over 4096 ascending token counts, mostly distinct (no sort: what a batch's distinct local token counts
    are) or half repeated (sorted and spread): the same floats as the factor on small pieces."""
    prof = CostModel.build("h100-sxm", "llama-13b").profile
    rng = np.random.default_rng(3)
    for m in (np.unique(rng.random(9000) * 60_000), np.sort(rng.choice(rng.random(3000) * 60_000, 9000))):
        got = prof.gemm_shape_factor(m, 5120, 13824, precision=precision)
        ref = np.concatenate([prof.gemm_shape_factor(m[i:i + 1000], 5120, 13824, precision=precision)
                              for i in range(0, m.size, 1000)])
        assert got.tobytes() == ref.tobytes()
