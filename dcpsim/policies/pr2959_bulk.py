"""``dynamic-pr2959``'s leftover placement (:func:`place_leftovers`): the samples no normal bucket took, each to
the bucket whose tokens end closest to the target.

Outside safe mode :func:`lightest_rounds` places them on the buckets of fewest tokens, many at a time, where
the one-by-one rule provably picks the same buckets; the rest go through :class:`~dcpsim.policies.pr2959_tables._TokenTable`
(runs of one length, then one sample at a time). ``tests/test_pr2959_bulk.py`` checks the rounds against the
table's one-by-one picks, ``tests/test_pr2959_scale.py`` the plans against the scan of every bucket.
"""

from __future__ import annotations

import math

import numpy as np

from dcpsim.policies.pr2959_fillers import _rank_in_class
from dcpsim.policies.pr2959_tables import _BULK_MIN, _run_ends, _TokenTable, stable_argsort

_EXACT = 2**26  # tokens below this: the leftover scores (tokens + L − T)² of distinct token counts are distinct


def lightest_rounds(bl: np.ndarray, bucket: np.ndarray, Ls: np.ndarray, T: float) -> tuple[int, np.ndarray]:
    """The leftover rule's buckets for the samples of ``Ls`` (tokens, in order) outside safe mode, in rounds
    while provably its picks; returns how many were placed and their buckets, ``bl`` (the buckets' tokens)
    updated in place. ``bucket``: the buckets in the rule's one ranking (rank → bucket).

    The rule gives each sample the bucket whose ``(tokens + L − T)²`` is least, ties to the lowest rank.
    Every bucket has more than ``T − L`` tokens for a leftover (none held ``T`` with it when it was left,
    and tokens only grow), so while the least token count plus ``L`` is at least ``ceil(T)`` the scores rise
    with the tokens and the pick is the bucket of fewest tokens, lowest rank first (distinct token counts
    below 2**26 give distinct scores). A round gives the next ``k`` samples the ``k`` buckets of lowest
    (tokens, rank), in that order, as far as every bucket given one ends above the next bucket's tokens.
    Stops at the first round shorter than ``_BULK_MIN`` (the one-by-one rule goes on from the same state).
    """
    n, nb = Ls.size, bl.size
    if not n or not nb or int(bl.max()) + int(Ls.max()) >= _EXACT or T >= _EXACT:
        return 0, np.zeros(0, dtype=np.int64)
    need = math.ceil(T)
    pos = 0
    placed: list[np.ndarray] = []
    order = bucket
    while pos < n:
        k = min(nb, n - pos)
        e = order[:k]
        old = bl[e]
        seg = Ls[pos:pos + k]
        new = old + seg
        good = old[0] + seg >= need  # the least count at the round's start: scores rise with the tokens
        good[1:] &= np.minimum.accumulate(new)[:-1] > old[1:]
        bad = np.flatnonzero(~good)
        run = k if bad.size == 0 else int(bad[0])
        if run:
            e = e[:run]
            bl[e] = new[:run]  # (the buckets of a round are distinct)
            placed.append(e)
            pos += run
        if run < _BULK_MIN or pos >= n:
            break
        order = bucket[stable_argsort(bl[bucket])]  # by tokens, ties in rank order
    return pos, (np.concatenate(placed) if placed else np.zeros(0, dtype=np.int64))


def place_leftovers(bt, bl0: np.ndarray, left_a: np.ndarray, T: float, cap: float) -> tuple[np.ndarray, ...]:
    """The code's leftover rule for the samples ``left_a`` (in order; ``bt``: the :class:`_Batch`) on buckets
    of ``bl0`` tokens: each to the bucket of least ``(tokens + L − T)²`` among those within ``cap`` tokens per
    rank, ties to the first in one ranking of the buckets by tokens (stable, made once); none within ``cap``
    (safe mode): an extra bucket, ranked last. Returns the buckets' tokens after, and the samples and their
    buckets in placing order.

    Outside safe mode :func:`lightest_rounds` first; then a table sorted by token count (a run of samples of
    one length takes the buckets :meth:`_TokenTable.run_ranks` proves the one-by-one queries would give).
    """
    nb = bl0.size
    bl = np.concatenate([bl0, np.zeros(left_a.size, dtype=np.int64)])  # room for safe mode's extra buckets
    n = left_a.size
    seq, dest = [], []  # arrays of the samples and their buckets, in order
    pos = 0
    ranking = stable_argsort(bl0)  # the code's one ranking by tokens
    if cap == math.inf:  # outside safe mode: rounds on the lightest buckets while provably the rule's
        pos, picks = lightest_rounds(bl[:nb], ranking, bt.L[left_a], T)
        seq.append(left_a[:pos])
        dest.append(picks)
    if pos < n:
        table = _TokenTable(bl[:nb], ranking if pos else None)  # (unmoved: the same ranking)
        Lp = bt.L[left_a].tolist()  # by position in ``left_a``
        limits = [None] * n if cap == math.inf else (int(cap) - bt.tok1[left_a]).tolist()
        end = _run_ends(bt.L[left_a], None if cap == math.inf else int(cap) - bt.tok1[left_a])
    while pos < n:
        limit, Li = limits[pos], Lp[pos]
        rks = table.run_ranks(Li, T, limit, end[pos] - pos) if end[pos] - pos > 1 else []
        if rks:  # a run of one length (so one FLOPs figure) to buckets of the table (run_picks' buckets)
            pk = table.bucket[rks]
            olds = bl[pk]
            bl[pk] = olds + Li
            table.move_ranks(rks, olds.tolist(), Li)
            seq.append(left_a[pos:pos + pk.size])
            dest.append(pk)
            pos += pk.size
            continue
        k = table.closest(Li, T, limit)
        if k < 0:  # safe mode: an extra bucket, ranked last
            k, nb = nb, nb + 1
            bl[k] = Li
            table.add(k, Li)
        else:
            b = int(bl[k]) + Li
            bl[k] = b
            table.move(k, b - Li, b)
        seq.append(left_a[pos:pos + 1])
        dest.append(np.array([k], dtype=np.int64))
        pos += 1
    return bl[:nb], np.concatenate(seq), np.concatenate(dest)


def add_in_order(a: np.ndarray, idx: np.ndarray, values: np.ndarray) -> None:
    """``np.add.at(a, idx, values)`` bit for bit (``a[idx[i]] += values[i]`` for each ``i`` in turn: every cell
    adds its values one at a time, in their order), as a few whole-array additions: the ``j``-th value of
    every cell in one, ``j = 0, 1, ...`` (numpy's ``add.at`` took a slow per-element path on these float
    arrays).
    """
    if idx.size == 0:
        return
    rank = _rank_in_class(idx)  # each value's place among its cell's
    if rank.any():
        for j in range(int(rank.max()) + 1):
            m = rank == j
            a[idx[m]] += values[m]  # (the cells of one layer are distinct)
        return
    a[idx] += values
