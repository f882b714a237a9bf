"""``dynamic-pr2959``'s leftover rounds without per-sample work equal the plain rule they replace.

The reference here is the code's leftover rule as a scan
(each sample to the bucket of least ``(tokens + L − T)²`` among those within the cap, ties to the first
in one ranking by tokens; none within the cap: an extra bucket).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from dcpsim.policies.pr2959_bulk import lightest_rounds, place_leftovers
from dcpsim.policies.pr2959_tables import stable_argsort


def _scan_leftovers(bl: list[int], Ls: list[int], T: float, limits: list[int] | None):
    """The code's leftover rule, one sample at a time over the buckets ranked once by tokens (stable)."""
    bl = list(bl)
    rank = list(np.argsort(np.array(bl, dtype=np.int64), kind="stable"))
    out = []
    for j, Li in enumerate(Ls):
        best, pick = math.inf, -1
        for k in rank:
            if limits is not None and bl[k] > limits[j]:
                continue
            s = ((bl[k] + Li) - T) ** 2
            if s < best:
                best, pick = s, int(k)
        if pick < 0:  # an extra bucket, ranked last
            bl.append(Li)
            rank.append(len(bl) - 1)
            out.append(len(bl) - 1)
        else:
            bl[pick] += Li
            out.append(pick)
    return out, bl


def _leftover_case(rng):
    """Buckets (token counts with ties) and leftovers (longest first, runs of one length), T on half tokens;
    most leftovers exceed T with every bucket (as real leftovers do), some buckets are light enough not to."""
    nb = int(rng.integers(1, 200))
    spread = int(rng.choice([1, 3, 20, 200]))
    base = int(rng.integers(0, 50))
    bl = (base + rng.integers(0, spread, nb)).astype(np.int64)
    n = int(rng.integers(1, 400))
    Ls = np.sort(rng.integers(1, int(rng.choice([3, 30, 300])), n))[::-1].astype(np.int64)
    T = float(rng.integers(0, 2 * (base + spread) + 2)) / 2
    if rng.random() < 0.7:  # real leftovers: more than T with the lightest bucket
        T = min(T, float(bl.min() + Ls.min()) - float(rng.choice([0.0, 0.5, 1.0])))
    return bl, Ls, T


def test_lightest_rounds_are_the_one_by_one_picks():
    """Each bucket the rounds give (ties of tokens across buckets, and of a moved bucket with the next
    one's count) is the one the scan of the code's rule picks, sample after sample; the buckets' tokens after
    are the scan's. The rounds place most samples of these cases, over several rounds in many."""
    rng = np.random.default_rng(22)
    placed = total = multi = 0
    for _ in range(400):
        bl, Ls, T = _leftover_case(rng)
        got = bl.copy()
        pos, picks = lightest_rounds(got, stable_argsort(bl), Ls, T)
        want, tokens = _scan_leftovers(bl.tolist(), Ls[:pos].tolist(), T, None)
        assert picks.tolist() == want
        assert got.tolist() == tokens
        placed += pos
        total += Ls.size
        multi += pos > bl.size
    assert placed > total // 2 and multi > 20, (placed, total, multi)


def test_place_leftovers_is_the_scan_of_the_codes_rule():
    """The whole leftover placement (rounds outside safe mode, then the token table; safe mode: caps per
    sample and extra buckets) equals the scan: the same bucket for every sample, the same tokens after."""
    rng = np.random.default_rng(23)
    extra = 0
    for _ in range(300):
        bl, Ls, T = _leftover_case(rng)
        safe = rng.random() < 0.3
        tok1 = (Ls + 1) // 2 if rng.random() < 0.5 else Ls.copy()  # tokens per rank of one slot
        cap = float(int(rng.integers(1, 3 * int(bl.max()) + 3))) if safe else math.inf
        bt = SimpleNamespace(L=Ls, tok1=tok1)
        left_a = np.arange(Ls.size)
        tokens, seq, dest = place_leftovers(bt, bl.copy(), left_a, T, cap)
        limits = (int(cap) - tok1).tolist() if safe else None
        want, want_tokens = _scan_leftovers(bl.tolist(), Ls.tolist(), T, limits)
        assert seq.tolist() == left_a.tolist()
        assert dest.tolist() == want
        assert tokens.tolist() == want_tokens
        extra += len(want_tokens) > bl.size
    assert extra > 10


def test_stable_order_is_numpys_stable_argsort():
    """Sorting runs of a hint (an earlier order, or any permutation) gives numpy's stable order index for index:
    many ties (one value in runs at rising and falling indices, equal values in different runs), zeros of
    both signs, infinities, NaN, one value and none."""
    from dcpsim.policies.pr2959_tables import stable_order

    rng = np.random.default_rng(25)
    merged = 0
    for _ in range(500):
        n = int(rng.integers(0, 2000))
        v = rng.choice(rng.choice([0.0, -0.0, 1.0, 2.5, 7.0, np.inf, -np.inf, 3e15], int(rng.integers(1, 8))), n)
        if n and rng.random() < 0.1:  # NaN (numpy sorts them last, by index)
            v[rng.integers(0, n, int(rng.integers(1, 4)))] = np.nan
        old = v.copy()
        if n and rng.random() < 0.7:  # the hint: the stable order of earlier values, some of them changed since
            old[rng.random(n) < rng.random()] += float(rng.choice([1.0, 2.5, -1.0]))
            hint = np.argsort(old, kind="stable")
        else:
            hint = rng.permutation(n)
        want = np.argsort(v, kind="stable")
        h = v[hint]
        merged += bool(((h[1:] == h[:-1]) & (hint[1:] < hint[:-1])).any())
        assert stable_order(v, hint).tolist() == want.tolist()
    assert merged > 100, merged


def test_spread_groups_counts_groups_at_different_positions():
    """The long groups at different list positions on their slots (the entries group after group, summarised
    by segment) are the ones the per-entry minimum and maximum (np.minimum.at / np.maximum.at) find."""
    from dcpsim.policies.pr2959_candidate import _spread_groups

    rng = np.random.default_rng(26)
    spread = 0
    for _ in range(300):
        widths = rng.choice([1, 2, 4, 8], int(rng.integers(0, 50)))
        gid = np.repeat(np.arange(widths.size), widths)
        pos = rng.integers(0, 3, gid.size) if rng.random() < 0.5 else np.repeat(rng.integers(0, 5, widths.size), widths)
        if gid.size and rng.random() < 0.5:
            pos[rng.integers(0, gid.size)] += 1
        lo = np.full(widths.size, np.iinfo(np.int64).max)
        hi = np.full(widths.size, -1)
        np.minimum.at(lo, gid, pos)
        np.maximum.at(hi, gid, pos)
        want = int(np.count_nonzero(lo != hi))
        spread += want
        assert _spread_groups(pos, np.cumsum(widths) - widths) == want
    assert spread > 500, spread


def test_add_in_order_equals_numpy_add_at():
    """add_in_order adds each cell's values one at a time in their order, as np.add.at: the same floats, bit for bit
    (full-mantissa values of mixed magnitudes, cells hit once, many times or not at all, empty index)."""
    from dcpsim.policies.pr2959_bulk import add_in_order

    rng = np.random.default_rng(5)
    for _ in range(200):
        n, m = int(rng.integers(1, 60)), int(rng.integers(0, 300))
        a = rng.random(n) * rng.choice([1.0, 1e13])
        idx = rng.integers(0, max(1, int(rng.integers(1, n + 1))), m).astype(np.int64)
        v = rng.random(m) * 10.0 ** rng.integers(-3, 14, m)
        want = a.copy()
        np.add.at(want, idx, v)
        got = a.copy()
        add_in_order(got, idx, v)
        assert got.tobytes() == want.tobytes()


def test_by_cell_equals_the_stable_sort():
    """_by_cell (ids read back in cell order from a table) gives ids[argsort(cell, stable)]: distinct cells, and
    repeated cells (the sort it falls back to), empty input."""
    from dcpsim.policies.pr2959_candidate import _by_cell

    rng = np.random.default_rng(9)
    for _ in range(200):
        n = int(rng.integers(0, 200))
        cell = rng.permutation(int(rng.integers(n, 3 * n + 2)))[:n] if rng.random() < 0.7 else rng.integers(0, 20, n)
        ids = rng.permutation(n + int(rng.integers(0, 50)))[:n].astype(np.int64)
        cell = np.asarray(cell, dtype=np.int64)
        assert _by_cell(ids, cell).tolist() == ids[np.argsort(cell, kind="stable")].tolist()
