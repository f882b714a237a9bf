"""``dynamic-pr2959``'s fast structures: they make the code's decisions without its scans.

:func:`_long_blocks` takes the blocks of a run of long samples of one size at once, :class:`_NormalPool`
removes fillers in O(α), :class:`_TokenTable` finds the leftover bucket whose tokens end closest to the
target. ``tests/test_pr2959_scale.py`` checks each against the plain scan of :mod:`dcpsim.policies.pr2959`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort

import numpy as np

from dcpsim.padding import per_rank_tokens
from dcpsim.policies.pr2959_model import LONG_BWD_FACTOR

_BULK_MIN = 64  # _bulk_lowest and _bulk_deal: runs shorter than this hand over to the next rule
_KEY_SORT_MIN = 1 << 15  # stable_argsort: from this many values of a span of 2**16 or more, one sort of keys


def _sq(x: float) -> float:
    """``x²`` as numpy's ``x ** 2`` computes it (one rounded product)."""
    return x * x


def _np_sum(values: np.ndarray) -> float:
    """``float(values.sum())`` bit for bit: numpy adds fewer than 8 numbers left to right from 0.0 (its
    pairwise summation starts at 8), so a plain loop gives the same float without numpy's call cost."""
    if values.size >= 8:
        return float(values.sum())
    s = 0.0
    for v in values.tolist():
        s += v
    return s


def stable_argsort(a: np.ndarray) -> np.ndarray:
    """``np.argsort(a, kind="stable")`` of an integer array, index for index, by numpy's radix sort: one
    pass on 16-bit keys when the values span less than 2**16, two (low then high 16 bits, each stable)
    when less than 2**32 (from ``_KEY_SORT_MIN`` values: one sort of the distinct keys ``value·2^b + index``,
    numpy's SIMD sort, about 3x less CPU time here for a few more instructions); numpy's own stable sort
    otherwise."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu" or a.size < 2:
        return np.argsort(a, kind="stable")
    lo = int(a.min())
    span = int(a.max()) - lo
    if span >= 1 << 32:
        return np.argsort(a, kind="stable")
    if span >= 1 << 16 and a.size >= _KEY_SORT_MIN:  # one sort of distinct keys (value, index): no stability needed
        shift = int(a.size - 1).bit_length()  # (a span below 2**32 and fewer than 2**31 values: keys below 2**63)
        key = (a.astype(np.int64) - lo) << shift
        key |= np.arange(a.size)
        key.sort()
        key &= (1 << shift) - 1
        return key
    b = (a.astype(np.int64) - lo).astype(np.uint32)
    if span < 1 << 16:
        return np.argsort(b.astype(np.uint16), kind="stable")
    p = np.argsort((b & 0xFFFF).astype(np.uint16), kind="stable")
    return p[np.argsort((b[p] >> 16).astype(np.uint16), kind="stable")]


def _long_blocks(sizes: list[int] | np.ndarray, slots: int, per_slot: int) -> tuple[np.ndarray, int]:
    """Aligned block (index among the blocks of its size) of every long sample, and how many found none free.

    The code gives each long sample, in order, the first aligned block of ``c`` slots whose fullest
    slot has the most buckets left (``per_slot`` at the start), or the last block when none has one
    left. Over a run of samples of one size that rule visits, for ``v`` from the largest block minimum
    down to 0, every block whose minimum is at least ``v``, in index order (a block taken at level
    ``v`` drops to ``v − 1``, below the blocks still at ``v``), so a run is computed at once.
    """
    remain = np.full(slots, per_slot, dtype=np.int64)
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    overflow = 0
    sizes = np.asarray(sizes, dtype=np.int64)
    cuts = [0, *(np.flatnonzero(sizes[1:] != sizes[:-1]) + 1).tolist(), sizes.size] if sizes.size else [0]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):  # runs of one size
        cs, r = int(sizes[a]), b - a
        nb = slots // cs
        view = remain[: nb * cs].reshape(nb, cs)
        mins = view.min(axis=1)
        picks: list[np.ndarray] = []
        got, v = 0, int(mins.max())
        while v >= 0 and got < r:
            level = np.flatnonzero(mins >= v)[: r - got]
            picks.append(level)
            got += level.size
            v -= 1
        extra = r - got  # the code indexes the last block
        chosen = np.concatenate([*picks, np.full(extra, nb - 1, dtype=np.int64)])
        view -= np.bincount(chosen, minlength=nb)[:, None]
        out.append(chosen)
        overflow += extra
    return np.concatenate(out).astype(np.int64, copy=False), overflow


class _NormalPool:
    """The normal samples (largest first) long groups take fillers from: the code's list with ``pop(j)``,
    as a fixed order with a next-remaining pointer per position (union-find: ``nxt[p] == p`` while ``p``
    remains; a removal sets ``nxt[p] = p + 1``), so a removal costs O(α). :meth:`_Candidate.place_long`
    searches and removes on these lists itself.

    ``lists``: ``(ids, lengths, negf)`` of ``ids`` as Python lists when the caller has them (a slice of
    the batch's, made once for every candidate); ``positions``: a list ``[0, 1, 2, ...]`` at least one
    longer than ``ids`` when the caller has one (the pointers start as a copy of its head).
    """

    def __init__(self, ids: np.ndarray, f: np.ndarray, lengths: np.ndarray,
                 lists: tuple[list[int], list[int], list[float]] | None = None,
                 positions: list[int] | None = None) -> None:
        self.arr = ids
        if lists is None:
            lists = ids.tolist(), lengths[ids].tolist(), (-f[ids]).tolist()
        self.ids, self.lengths, self.negf = lists  # negf ascending: the samples are longest first
        n = len(ids)
        self.nxt = positions[:n + 1] if positions is not None and len(positions) > n else list(range(n + 1))
        self.n_alive = self.size = len(ids)
        self.removed: list[int] = []

    def alive(self) -> np.ndarray:
        """The remaining samples, in order."""
        return np.delete(self.arr, self.removed) if self.removed else self.arr


class _TokenTable:
    """Normal buckets by token count, for the code's leftover rule: the bucket with the smallest
    ``(tokens + L − T)²``, ties to the first in the code's one ranking by tokens (stable, made once).

    Distinct token counts sit in a sorted list; each keeps its buckets' ranks in a sorted list (a run's
    picks are a prefix of it).
    """

    def __init__(self, tokens: list[int] | np.ndarray, bucket: np.ndarray | None = None) -> None:
        arr = np.asarray(tokens, dtype=np.int64)
        rank = stable_argsort(arr) if bucket is None else bucket  # ``bucket``: a ranking made earlier (rank -> bucket)
        inverse = np.empty_like(rank)
        inverse[rank] = np.arange(rank.size)
        self.bucket = rank  # rank -> bucket (arrays: read for the few buckets moved)
        self.rank = inverse  # bucket -> rank
        by = rank if bucket is None else rank[stable_argsort(arr[rank])]  # by tokens, ties in rank order
        ranked = arr[by]
        first = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]])) if ranked.size else rank
        vals, count = ranked[first], np.diff(np.append(first, ranked.size))
        self.vals = vals.tolist()
        every = list(range(ranked.size)) if bucket is None else inverse[by].tolist()
        self.at: dict[int, list[int]] = {  # the ranks of each token count, ascending
            v: every[a:a + c] for v, a, c in zip(self.vals, first.tolist(), count.tolist(), strict=True)}

    def closest(self, Li: int, T: float, limit: int | None) -> int:
        """Bucket (among those with tokens ``<= limit``) whose tokens + ``Li`` end closest to ``T``; −1 if none.

        The score ``((tokens + Li) − T)²`` (the code's floats) falls up to the first token count ``j`` with
        ``tokens + Li >= T`` and rises from it, so its minimum is at ``j − 1`` or ``j``, or on a run of
        equal scores around them; the first-ranked bucket of those token counts wins.
        """
        tie = self.tie(Li, T, limit)
        if tie is None:
            return -1
        lo, hi, _ = tie
        vals = self.vals
        if lo == hi:
            return int(self.bucket[self.at[vals[lo]][0]])
        return int(self.bucket[min(self.at[vals[x]][0] for x in range(lo, hi + 1))])

    def tie(self, Li: int, T: float, limit: int | None) -> tuple[int, int, float] | None:
        """The positions ``lo..hi`` in ``vals`` of the token counts of least score (see :meth:`closest`) and
        that score; None when no bucket is within ``limit``."""
        vals = self.vals
        nf = len(vals) if limit is None else bisect_right(vals, limit)
        if nf == 0:
            return None
        j = bisect_left(vals, math.ceil(T) - Li, 0, nf)
        lo, hi = max(j - 1, 0), min(j, nf - 1)
        d_lo, d_hi = (vals[lo] + Li) - T, (vals[hi] + Li) - T
        best = min(d_lo * d_lo, d_hi * d_hi)
        if d_lo * d_lo != best:
            lo = hi
        elif d_hi * d_hi != best:
            hi = lo
        while lo > 0 and _sq((vals[lo - 1] + Li) - T) == best:
            lo -= 1
        while hi + 1 < nf and _sq((vals[hi + 1] + Li) - T) == best:
            hi += 1
        return lo, hi, best

    def run_picks(self, Li: int, T: float, limit: int | None, most: int) -> list[int]:
        """The buckets :meth:`closest` picks for up to ``most`` samples of ``Li`` tokens in a row (each
        moved by ``Li`` tokens before the next query), as far as provably the same: the buckets of the
        least-score token counts by rank, while a moved bucket's new count scores worse than them (so the
        next query's least-score counts and their first-ranked bucket are those left). Empty if none."""
        ranks = self.run_ranks(Li, T, limit, most)
        return self.bucket[ranks].tolist() if ranks else []

    def run_ranks(self, Li: int, T: float, limit: int | None, most: int) -> list[int]:
        """The ranks of :meth:`run_picks`' buckets, in its order (a list the caller must not change)."""
        tie = self.tie(Li, T, limit)
        if tie is None:
            return []
        lo, hi, best = tie
        vals = self.vals
        counts = vals[lo:hi + 1]
        if any(not _sq(((v + Li) + Li) - T) > best for v in counts):
            return []
        return sorted(r for v in counts for r in self.at[v])[:most] if hi > lo else self.at[counts[0]][:most]

    def move_run(self, picks: list[int], olds: list[int], Li: int) -> None:
        """:meth:`move` of each bucket of ``picks`` in turn, from its token count ``olds[j]`` to ``olds[j] + Li``
        (the buckets of :meth:`run_picks`: no bucket lands on a count a later one leaves, so every count's
        buckets leave before any arrives, in bulk; each count loses its first-ranked buckets)."""
        if picks:
            self.move_ranks(self.rank[picks].tolist(), olds, Li)

    def move_ranks(self, rks: list[int], olds: list[int], Li: int) -> None:
        """:meth:`move_run` of the buckets of ranks ``rks`` (:meth:`run_ranks`; ``olds``: their token counts)."""
        at, vals = self.at, self.vals
        by: dict[int, list[int]] = {}
        if not rks:
            return
        if olds[0] == olds[-1] and olds.count(olds[0]) == len(olds):  # the usual run: one token count
            by[olds[0]] = rks
        else:
            for rk, v in zip(rks, olds, strict=True):
                r = by.get(v)
                if r is None:
                    by[v] = [rk]
                else:
                    r.append(rk)
        for v, rs in by.items():
            ranks = at[v]
            if len(rs) == len(ranks):
                del at[v]
                del vals[bisect_left(vals, v)]
            else:
                del ranks[:len(rs)]  # its first-ranked ones
        for v, rs in by.items():
            w = v + Li
            dst = at.get(w)
            if dst is None:
                at[w] = sorted(rs)
                insort(vals, w)
            else:
                dst.extend(rs)
                dst.sort()  # two sorted runs: one merge

    def add(self, k: int, tokens: int) -> None:
        """A new bucket, ranked last."""
        self.rank = np.append(self.rank, self.bucket.size)
        self.bucket = np.append(self.bucket, k)
        self._push(int(self.rank[k]), tokens)

    def move(self, k: int, old: int, new: int) -> None:
        """Bucket ``k`` (the first-ranked of its token count ``old``) now holds ``new`` tokens."""
        ranks = self.at[old]
        del ranks[0]
        if not ranks:
            del self.at[old]
            del self.vals[bisect_left(self.vals, old)]
        self._push(int(self.rank[k]), new)

    def _push(self, r: int, tokens: int) -> None:
        if tokens not in self.at:
            self.at[tokens] = []
            insort(self.vals, tokens)
        insort(self.at[tokens], r)


def _bulk_deal(ks: np.ndarray, fks: np.ndarray, slots: list[np.ndarray], fsum: list[float], count: list[int],
               per_slot: int, places: list[np.ndarray] | None = None) -> int:
    """:meth:`_Candidate._deal_buckets`'s dealing in runs while provably its heap's; returns how many of the
    buckets ``ks`` (FLOPs ``fks``, ascending) it dealt (their slots appended to ``slots`` as arrays, in
    order, and to ``places``, when given, each one's count on its slot before it; ``fsum`` and ``count``
    updated).

    The next ``r`` buckets go to the ``r`` slots of lowest (FLOPs, index) among those not full, in
    that order, when every slot given one in the run ends above the next slot's FLOPs (so that slot is
    still the heap's least); one addition per bucket, as the heap loop adds. Stops at the first run
    shorter than ``_BULK_MIN`` (the heap loop goes on from the same state: the heap holds each slot
    not full at its current FLOPs, whatever the order of the updates).
    """
    n = ks.size
    f, cnt = np.asarray(fsum, dtype=np.float64), np.asarray(count, dtype=np.int64)
    pos = 0
    order = None  # the slots not full by (FLOPs, index), when the last run left it known
    while pos < n:
        if order is None:
            elig = np.flatnonzero(cnt < per_slot)
            order = elig[np.argsort(f[elig], kind="stable")]  # least FLOPs first, ties to the lowest slot
        k = min(order.size, n - pos)
        if k == 0:
            break
        e = order[:k]
        f_e = f[e]
        new = f_e + fks[pos:pos + k]
        good = np.ones(k, dtype=bool)
        good[1:] = np.minimum.accumulate(new)[:-1] > f_e[1:]
        bad = np.flatnonzero(~good)
        run = k if bad.size == 0 else int(bad[0])
        e = e[:run]
        f[e] = new[:run]
        if places is not None:
            places.append(cnt[e])  # the slots of a run are distinct
        cnt[e] += 1
        slots.append(e)
        pos += run
        if run < _BULK_MIN:
            break
        # every slot not full took one: their FLOPs were ascending along the order and so were the buckets',
        # so the new FLOPs are too (rounding is monotone); the next order is this one less the full slots
        order = _in_order(e[cnt[e] < per_slot], f) if run == order.size else None
    if pos:
        fsum[:], count[:] = f.tolist(), cnt.tolist()
    return pos


def _in_order(o: np.ndarray, f: np.ndarray) -> np.ndarray | None:
    """``o`` (indices whose values ``f[o]`` do not fall) with each run of equal values in ascending index: the
    order of ``np.argsort(f[sorted(o)], kind="stable")``; None when the values fall somewhere."""
    if o.size < 2:
        return o
    v = f[o]
    if (v[1:] < v[:-1]).any() or np.isnan(v).any():
        return None
    tie = v[1:] == v[:-1]
    if not (tie & (o[1:] < o[:-1])).any():
        return o
    run = np.concatenate([[0], np.cumsum(~tie)]).astype(np.int64)
    span = np.int64(int(o.max()) + 1)
    return np.sort(run * span + o) - run * span  # runs stay in place: each one's indices ascending


def _run_ends(lengths: np.ndarray, limits: np.ndarray | None) -> list[int]:
    """For each position, the end (exclusive) of its run of equal (length, limit) entries."""
    n = lengths.size
    change = lengths[1:] != lengths[:-1]
    if limits is not None:
        change |= limits[1:] != limits[:-1]
    ends = np.append(np.flatnonzero(change) + 1, n)
    return np.repeat(ends, np.diff(np.concatenate([[0], ends]))).tolist()


def _group_sums(bt, li: np.ndarray, cs_a: np.ndarray, tok_a: np.ndarray, fill: np.ndarray,
                ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per long group of :meth:`_Candidate.place_long` (long sample ``li[g]`` on ``cs_a[g]`` slots, own tokens
    per rank ``tok_a[g]``; fillers ``fill[ends[g−1]:ends[g]]``, in the order taken): the solver's forward
    FLOPs (the members' sum: left to right from 0.0 below 8 members, as numpy sums fewer than 8 numbers;
    numpy's sum from 8), backward estimate (3·f of the long sample + the fillers' backward, summed alike)
    and tokens per rank (``bt``: the :class:`_Batch`)."""
    ng = li.size
    begin = np.concatenate([[0], ends[:-1]]).astype(np.int64) if ng else ends
    nf = ends - begin
    ranks = np.repeat(cs_a * bt.u, nf)
    tsum = np.concatenate([[0], np.cumsum(per_rank_tokens(bt.L[fill], ranks))]).astype(np.int64)
    tokens = tok_a + (tsum[ends] - tsum[begin]) if ng else tok_a
    fwd = np.empty(ng)
    bsum = np.empty(ng)
    small = nf <= 6  # fewer than 8 members: sums one addition at a time
    if small.any():
        # the long sample, then its fillers, left to right: member j added to the groups that have one (adding
        # 0.0 to the others, as a sum over a zero-padded row would, changes no positive sum)
        fs, bs = bt.f[li], np.zeros(ng)
        fv, bv = bt.f[fill], bt.b[fill]
        for j in range(1, int(nf[small].max()) + 1):
            has = np.flatnonzero(small & (nf >= j))
            at = begin[has] + (j - 1)
            fs[has] += fv[at]
            bs[has] += bv[at]
        fwd[small], bsum[small] = fs[small], bs[small]
    for g, a, z in zip(np.flatnonzero(~small).tolist(), begin[~small].tolist(), ends[~small].tolist(), strict=True):
        fl = fill[a:z]  # 8 members or more: numpy's sums, as the code's
        fwd[g] = float(bt.f[np.concatenate([li[g:g + 1], fl])].sum())
        bsum[g] = _np_sum(bt.b[fl])
    return fwd, LONG_BWD_FACTOR * bt.f[li] + bsum, tokens


def _bulk_lowest(bf: np.ndarray, bl: np.ndarray, fs: np.ndarray, Ls: np.ndarray,
                 lims: np.ndarray) -> tuple[int, np.ndarray, np.ndarray | None]:
    """:meth:`_Candidate._lowest_flops_first`'s placements of the samples (FLOPs ``fs``, tokens ``Ls``, limits
    ``lims``) in runs while provably its decision; returns how many were placed, their buckets and the last
    order of the buckets it made (a hint for later sorts; None if none), ``bf`` and ``bl`` (the buckets'
    FLOPs and tokens) updated in place.

    The next ``k`` samples go to the ``k`` buckets of lowest (FLOPs, index) in that order when each
    of those buckets fits its sample (tokens ``<= lim``) and every bucket given one in the run ends
    above the next bucket's FLOPs (so that bucket is still the lowest that fits). The sums are the
    one-by-one rule's (one addition per sample, in order). Stops at the first run shorter than
    ``_BULK_MIN`` (:func:`_merge_runs` takes over from there, from the same state).
    """
    n, nb = fs.size, bf.size
    pos = 0
    placed: list[np.ndarray] = []
    order = None
    while pos < n:
        k = min(nb, n - pos)
        # lowest FLOPs first, ties to the lowest bucket (the first time, buckets opened largest first, then empty;
        # then from the last order, whose runs of equal FLOPs mostly stay together)
        order = _falling_order(bf) if order is None else stable_order(bf, order)
        e = order[:k]
        bf_e, bl_e = bf[e], bl[e]  # (read once)
        new = bf_e + fs[pos:pos + k]
        good = bl_e <= lims[pos:pos + k]
        good[1:] &= np.minimum.accumulate(new)[:-1] > bf_e[1:]
        bad = np.flatnonzero(~good)
        run = k if bad.size == 0 else int(bad[0])
        if run:
            e = e[:run]
            bf[e] = new[:run]
            bl[e] = bl_e[:run] + Ls[pos:pos + run]  # (the buckets of a run are distinct)
            placed.append(e)
            pos += run
        if run < _BULK_MIN:
            break
    return pos, (np.concatenate(placed) if placed else np.zeros(0, dtype=np.int64)), order


def stable_order(v: np.ndarray, hint: np.ndarray) -> np.ndarray:
    """``np.argsort(v, kind="stable")`` of a float array, index for index, sorting runs rather than values:
    ``hint`` (a permutation of ``v``'s indices, e.g. an earlier order of values that changed since) is cut
    into runs of equal values at rising indices, the runs are sorted by value (stable), and runs of one value
    are merged by index. Few runs (values with many ties that stay together) make it cheap; NaN: numpy's sort."""
    n = v.size
    h = v[hint]
    cut = np.empty(n, dtype=bool)
    cut[:1] = True
    np.not_equal(h[1:], h[:-1], out=cut[1:])  # (NaN: a run of its own)
    cut[1:] |= hint[1:] < hint[:-1]
    starts = np.flatnonzero(cut)
    if 2 * starts.size > n:  # runs too short to pay
        return np.argsort(v, kind="stable")
    rv = h[starts]
    if (rv != rv).any():  # NaN (each NaN starts a run of its own, so the runs' values show it)
        return np.argsort(v, kind="stable")
    by = np.argsort(rv, kind="stable")
    size = np.diff(np.append(starts, n))[by]
    out = hint[np.repeat(starts[by] - (np.cumsum(size) - size), size) + np.arange(n)]
    rv = rv[by]
    tie = rv[1:] == rv[:-1]  # runs of one value, side by side: their indices merged
    if tie.any():
        grp = np.concatenate([[0], np.cumsum(~tie)]).astype(np.int64)
        tied = np.zeros(by.size, dtype=bool)
        tied[1:] = tie
        tied[:-1] |= tie
        el = np.repeat(tied, size)
        key = np.repeat(grp, size)[el] * np.int64(n)
        merged = key + out[el]
        merged.sort()
        out[el] = merged - key  # each group keeps its place; within it, indices ascending
    return out


def _falling_order(v: np.ndarray) -> np.ndarray:
    """``np.argsort(v, kind="stable")``; for values that never rise along ``v`` without a sort: its runs of
    equal values, last run first, each in index order."""
    n = v.size
    if n < 2 or not (v[1:] <= v[:-1]).all():  # (NaN compares false: numpy's sort)
        return np.argsort(v, kind="stable")
    first = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))  # each run's first index
    size = np.diff(np.append(first, n))
    first, size = first[::-1], size[::-1]
    return np.repeat(first - (np.cumsum(size) - size), size) + np.arange(n)


def _merge_runs(bf: np.ndarray, bl: np.ndarray, fs: np.ndarray, Ls: np.ndarray,
                lims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`_Candidate._lowest_flops_first`'s placements of the samples (FLOPs ``fs``, tokens ``Ls``, limits
    ``lims`` nondecreasing) one run of equal (FLOPs, tokens, limit) at a time; returns each sample's bucket
    (−1: none fits, a leftover), ``bf`` and ``bl`` (the buckets' FLOPs and tokens) updated in place.

    Each sample goes to the bucket of lowest (FLOPs, index) among those with tokens ``<= lim``. Over a run
    of ``r`` equal samples (FLOPs ``f``, tokens ``L``) bucket ``k`` is offered at the FLOPs ``bf_k``,
    ``bf_k + f``, ``(bf_k + f) + f``, ... (one addition per sample taken, as the one-by-one rule adds) for as
    long as its tokens stay ``<= lim`` (``(lim − bl_k) // L + 1`` times), and each sample takes the least
    offer left: the run takes the ``r`` least offers in (FLOPs, index, order) order, a merge of the
    buckets' rising offers. Offers above the ``r``-th least one found so far are never made.
    """
    n = fs.size
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or bf.size == 0:
        return out
    alive = np.flatnonzero(bl <= lims[-1])  # a bucket above the last limit takes nothing more
    change = (fs[1:] != fs[:-1]) | (Ls[1:] != Ls[:-1]) | (lims[1:] != lims[:-1])
    starts = np.concatenate([[0], np.flatnonzero(change) + 1, [n]]).tolist()
    within = _Eligible(alive, lims[starts[:-1]].tolist())
    for i, (a, z) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        f, L, lim, r = float(fs[a]), int(Ls[a]), int(lims[a]), z - a
        E = within.within(bl, lim, i)
        if E.size == 0:
            continue
        if r == 1:
            k = int(E[np.argmin(bf[E])])  # the first least: the lowest index among equal FLOPs
            out[a] = k
            bf[k] = bf[k] + f
            bl[k] += L
            continue
        cap = (lim - bl[E]) // L + 1  # offers per bucket
        key = bf[E]
        theta = math.inf  # the r-th least offer so far
        if E.size >= r:
            theta = np.partition(key, r - 1)[r - 1]
            if E.size > r:  # a bucket whose first offer is above theta makes none of the r least (theta stays so)
                near = key <= theta
                E, key, cap = E[near], key[near], cap[near]
        keys, ids, cols = [key], [E], [np.zeros(E.size, dtype=np.int64)]
        total = E.size
        j, sub, cur, capj = 1, E, key, cap
        while True:
            more = capj > j
            nxt = cur[more] + f
            keep = nxt <= theta
            if not keep.any():
                break
            sub, cur, capj = sub[more][keep], nxt[keep], capj[more][keep]
            keys.append(cur)
            ids.append(sub)
            cols.append(np.full(sub.size, j, dtype=np.int64))
            total += sub.size
            if total >= r:
                allk = np.concatenate(keys)
                theta = np.partition(allk, r - 1)[r - 1]
            j += 1
        offer, bucket, col = np.concatenate(keys), np.concatenate(ids), np.concatenate(cols)
        take = np.lexsort((col, bucket, offer))[:r]
        got = bucket[take]
        out[a:a + got.size] = got
        # a bucket's new FLOPs: its last offer taken plus f (its offers are taken in order); tokens: L per offer
        tk = take[np.lexsort((col[take], got))]  # the offers taken, by bucket then order
        gb = bucket[tk]
        brk = np.empty(gb.size, dtype=bool)  # each bucket's last offer taken
        brk[-1] = True
        np.not_equal(gb[1:], gb[:-1], out=brk[:-1])
        last = brk.nonzero()[0]
        hit = gb[last]
        bf[hit] = offer[tk[last]] + f
        taken = np.empty_like(last)  # offers taken per bucket
        taken[0] = last[0] + 1
        np.subtract(last[1:], last[:-1], out=taken[1:])
        bl[hit] += taken * L
    return out


_AHEAD = 8  # _Eligible: runs a shortlist serves


class _Eligible:
    """:func:`_merge_runs`' buckets within each run's token limit, read from a shortlist: every bucket of ``alive``
    (ascending) with tokens ``<= B``, ``B`` the limit of the run ``_AHEAD`` runs on (``lims``: each run's
    limit, nondecreasing). Tokens only grow, so a bucket left out stays above ``B``, and above every limit up to
    ``B``: the list's buckets within such a limit are all of ``alive``'s, in the same order. A run whose limit is
    above ``B`` makes the list again."""

    def __init__(self, alive: np.ndarray, lims: list[int]) -> None:
        self.alive, self.lims = alive, lims
        self.ids = alive[:0]
        self.bound = lims[0] - 1  # below the first limit: the first run makes the list

    def within(self, bl: np.ndarray, lim: int, i: int) -> np.ndarray:
        """The buckets of ``alive`` with tokens ``<= lim`` (ascending), for run ``i`` (limit ``lim``)."""
        if lim > self.bound:
            self.bound = self.lims[min(i + _AHEAD, len(self.lims) - 1)]
            self.ids = self.alive[bl[self.alive] <= self.bound]
        return self.ids[bl[self.ids] <= lim]


def _entry_members(seq: np.ndarray, dest: np.ndarray, nb: int, long_ids: np.ndarray, fillers: np.ndarray,
                   gends: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The members of the entries of ``codes`` (:meth:`_Candidate.steps`), entry after entry, and how many each
    has: bucket ``k`` (of ``nb``): the normal samples ``seq`` with ``dest == k``, in the order they joined;
    ``~g``: long group ``g``'s long sample ``long_ids[g]`` then its fillers ``fillers[gends[g−1]:gends[g]]``, in
    the order taken. Read from one array of every bucket's and group's members, one slice per entry."""
    dest = np.asarray(dest, dtype=np.int64)
    ng = len(long_ids)
    by = np.asarray(seq, dtype=np.int64)[stable_argsort(dest)]  # bucket after bucket
    ncnt = np.bincount(dest, minlength=nb)
    fill = np.asarray(fillers, dtype=np.int64)
    lcnt = 1 + np.diff(np.concatenate([[0], gends])).astype(np.int64) if ng else np.zeros(0, dtype=np.int64)
    lstart = np.cumsum(lcnt) - lcnt  # group after group: its long sample, then its fillers
    lflat = np.empty(ng + fill.size, dtype=np.int64)
    is_long = np.zeros(lflat.size, dtype=bool)
    is_long[lstart] = True
    lflat[is_long] = long_ids
    lflat[~is_long] = fill
    src = np.concatenate([by, lflat])
    first = np.concatenate([np.cumsum(ncnt) - ncnt, by.size + lstart])
    count = np.concatenate([ncnt, lcnt]).astype(np.int64)
    row = np.where(codes >= 0, codes, nb + ~codes)
    c, f = count[row], first[row]
    ends = np.cumsum(c)
    return src[np.repeat(f - (ends - c), c) + np.arange(int(ends[-1]) if ends.size else 0)], c
