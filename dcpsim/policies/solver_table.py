"""``dynamic-solver``'s per-length rows (:class:`_Table`), shared by every candidate's
:class:`~dcpsim.policies.solver_placer._Placer`, and the placement order from them
(:func:`placement_order`). Times in seconds, tokens per rank."""

from __future__ import annotations

import numpy as np

from dcpsim.policies.costs import SeqCosts


class _Table:
    """Per distinct length, shared by every candidate: time row (column = size index·2 + span), token row,
    and the codes a sequence may join (size index at least its need) by increasing GPU-seconds.

    ``width``: where given, the rows hold the size indices below it only (a candidate chooses, per length, a
    size index at most the fastest one, so the caller's largest fastest index + 1 covers every group opened
    and every code read; a read past a row raises). The codes' order is the full rows' restricted to them
    (a stable sort by GPU-seconds)."""

    def __init__(self, lengths: np.ndarray, sc: SeqCosts, need: np.ndarray, width: int | None = None) -> None:
        _, first, inv = sc.distinct() if lengths is sc.lengths else np.unique(lengths, return_index=True,
                                                                              return_inverse=True)
        self.inv = np.asarray(inv, dtype=np.int64)  # each sequence's distinct index
        # each sequence's distinct index as Python ints, one object per distinct length (a gather of object
        # references: no int made per sequence)
        self.uid: list[int] = np.array(range(first.size), dtype=object).take(self.inv).tolist()
        if lengths is sc.lengths and sc.distinct_table:  # sc's own distinct lengths: its per-length table
            t = sc.time_u.reshape(-1, first.size).T  # (distinct, ns*2)
            tok = sc.tok_u.T
        else:
            t = sc.time_s.reshape(-1, lengths.size)[:, first].T
            tok = sc.tokens[:, first].T
        if width is not None:  # (the columns of the size indices below width)
            t, tok = t[:, :2 * width], tok[:, :width]
        self.time_rows: list[list[float]] = np.ascontiguousarray(t).tolist()  # (contiguous first: a faster read)
        self.tok_rows: list[list[int]] = tok.tolist()
        code_size = np.repeat(sc.sizes, 2)[:t.shape[1]]
        gpu = np.where(np.arange(t.shape[1])[None, :] // 2 >= need[first][:, None], code_size[None, :] * t, np.inf)
        by_gpu = np.argsort(gpu, axis=1, kind="stable")
        # the infinite (excluded) codes sort last: -1 there; lengths with the same codes in the same order share
        # one row (``fam_rows[fam_id[u]]``)
        # (the rows told apart as byte strings: np.unique of them, ids in the order of their bytes)
        key = np.where(np.isfinite(np.take_along_axis(gpu, by_gpu, axis=1)), by_gpu, -1).astype(np.int8)
        _, one, fam = np.unique(key.view(np.dtype((np.void, key.shape[1]))).reshape(-1), return_index=True,
                                return_inverse=True)
        self.fam_id: list[int] = fam.reshape(-1).tolist()
        self.fam_rows: list[list[int]] = [[c for c in row if c >= 0] for row in key[one].tolist()]
        # per set of chosen sizes (bit mask of codes), each length's codes of those sizes
        self.fams: dict[int, list[list[int]]] = {}
        # per size index, (the time table, its distinct lengths' time ranks) for :meth:`_Placer._order`
        self.ranks: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def placement_order(sc: SeqCosts, tab: _Table, choice: np.ndarray, span0: list[int], chosen: list[int]) -> np.ndarray:
    """The placement order ``np.lexsort((arange(n), -t, -choice))`` (``t``: each sequence's time at its
    chosen size index ``choice`` on its first aligned slice, ``sc.time_s[choice, span0[choice], i]``;
    ``chosen``: the size indices chosen, ascending), the same permutation from ranks:
    per chosen size, the ranks of the distinct lengths' times (equal times, equal rank; larger time, lower
    rank; kept in ``tab`` for the other candidates), a key per sequence of (size descending, that rank) counted
    from the largest size chosen, and a stable sort of the keys (16-bit where they fit: numpy sorts those by
    radix; a stable order is unique), where they do not fit renumbered densely first (the keys present, in
    order: the same sort)."""
    nu, n = sc.time_u.shape[2], choice.size
    if n == 0 or nu == 0:
        return np.zeros(0, dtype=np.int64)
    w = chosen[-1] + 1  # (the sizes above the largest chosen hold no sequence: no key counts them)
    ranks = np.zeros((w, nu), dtype=np.int64)
    for k in chosen:
        got = tab.ranks.get(k)
        if got is None or got[0] is not sc.time_u:
            r = np.unique(-sc.time_u[k, span0[k]], return_inverse=True)[1].reshape(-1)
            got = tab.ranks[k] = (sc.time_u, r)
        ranks[k] = got[1]
    # (gathers by take: ranks[choice, sc.inv] and dense[key], the same values)
    key = (w - 1 - choice) * nu + ranks.ravel().take(choice * nu + sc.inv)
    if w * nu <= 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    present = np.bincount(key, minlength=w * nu) > 0
    dense = np.cumsum(present) - 1
    top = int(dense[-1]) + 1
    key = dense.take(key)
    return np.argsort(key.astype(np.uint16) if top <= 1 << 16 else key, kind="stable")
