"""``dynamic-pr2959``'s long-group filling by length class (:meth:`_Candidate.place_long`, outside safe mode).

Each long group, in placement order, takes normal samples one at a time: the first remaining sample of the
pool (largest first) whose forward FLOPs ``f`` are below ``x = fill_slack · room``, ``room`` falling by each
``f`` taken, while the code's limits hold. The pool's samples of one length share their FLOPs, so they form
a *class* (a run of the pool); the first remaining sample below ``x`` is the first remaining one of the
first class below ``x`` that still has samples, and a class gives its samples in pool order. The state is
then each class's remaining count, and :class:`ClassFiller` plays the rule with it two ways:

* one group at a time (:meth:`ClassFiller.scalar`): a search over the classes' FLOPs and a skip over the
  emptied classes (union-find); while the class of the last pick has samples below ``x`` they are taken in
  a row without a search (that class is where the next search would start);
* many groups at once (:meth:`ClassFiller.bulk`): every group of a chunk plays the rule against the
  chunk's starting classes, in rounds over numpy arrays (the same float operations, element by element).
  Another group's takings change a group's choices only by emptying a class it would take from (a class
  left non-empty, or emptied in a class the group would not take from, changes no "first class below
  x"), and the pool-size limit only by the count taken before it; so the chunk's groups are the rule's
  up to the first taking from a class already emptied (counted in group order) or past the pool-size
  limit, and only those groups are kept. The first round gives the groups that search from one class its
  samples in turn, then the next classes' (:func:`_park`: the rooms grow along a run of long samples of
  one size, so successive groups often search from the same few-sample class), which the same check
  keeps exact.

Chunks grow while they are kept whole; where classes run out at nearly every group, groups go one at a
time for a while (:func:`fill_long_groups`). Safe mode fills one sample at a time over the pool's positions
(:func:`fill_one_by_one`). ``tests/test_pr2959_fillers.py`` checks the takings against the code's rule over
its shrinking list, ``tests/test_pr2959_scale.py`` the plans against the scan of every sample.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from dcpsim.policies.pr2959_tables import _NormalPool, stable_argsort

_CHUNK_MIN, _CHUNK_MAX = 256, 8192  # groups per bulk try
_SCALAR_MIN, _SCALAR_MAX = 128, 2048  # groups one at a time after a bulk try kept few
_ROUNDS = 32  # a bulk try's rounds (a group taking more samples goes one at a time)
_CHECK_AT, _BULK_KEEP = 3, 8  # a bulk try checks its picks after this round; gives up below this many groups


class ClassFiller:
    """The pool as length classes and each class's remaining count; picks are recorded as class indices.

    ``pool``: ``(negf, lengths, starts)``, the pool's negated forward FLOPs (ascending) and tokens, in pool
    order, and the first position of each class (None: found here); per long
    group ``room`` (``c·τ − f``), ``lsum`` (its tokens so far) and ``cap`` (``M·c``); ``slack`` the
    code's ``fill_slack``; ``budget`` the pool-size limit (the code fills while more than it remain);
    ``flag_all``: the code's flag that lifts the token and pool-size limits.
    """

    def __init__(self, pool: tuple[np.ndarray, np.ndarray, np.ndarray | None], room: np.ndarray, lsum: np.ndarray,
                 cap: np.ndarray, slack: float, budget: float, flag_all: bool) -> None:
        negf, lengths, starts = pool
        n = negf.size
        if starts is None:
            change = (negf[1:] != negf[:-1]) | (lengths[1:] != lengths[:-1])
            starts = np.flatnonzero(np.concatenate([[True], change])) if n else np.zeros(0, dtype=np.int64)
        self.cstart = starts
        self.cneg_a, self.cL_a = negf[self.cstart], lengths[self.cstart].astype(np.int64)
        self.rem_a = np.diff(np.append(self.cstart, n)).astype(np.int64)  # remaining per class (bulk's copy)
        self.cneg, self.cL, self.rem = self.cneg_a.tolist(), self.cL_a.tolist(), self.rem_a.tolist()
        self.ncls = len(self.cneg)
        self.cnxt = list(range(self.ncls + 1))  # union-find: cnxt[c] == c while class c has samples
        self.last = self.ncls - 1  # the last class with samples (the smallest FLOPs left)
        self.room, self.lsum, self.cap = room, lsum, cap
        self.nslack = -slack
        self.budget, self.flag_all = budget, flag_all
        self.n_alive = n
        # the class of every sample taken, in order: arrays of the picks so far (their count ``done``, each in
        # rem_a), then ``picks`` (the groups one at a time since); per group, the picks up to it, likewise
        self._picks: list[np.ndarray] = []
        self.done = 0
        self.picks: list[int] = []
        self._ends: list[np.ndarray | list[int]] = []

    # ------------------------------------------------------------ one group at a time
    def scalar(self, a: int, b: int) -> None:
        """Groups ``a..b−1``, one group at a time (the code's loop on classes). A group searches from the first
        class with samples; while the class of its last pick still has samples below ``x`` it takes them in a
        row (the rule's next pick: that class is the search's start), else it searches on (bisect) past the
        emptied classes (union-find)."""
        cneg, cL, rem, cnxt, picks = self.cneg, self.cL, self.rem, self.cnxt, self.picks
        ends: list[int] = []
        self._ends.append(ends)
        base = self.done
        nslack, budget, flag_all, ncls = self.nslack, self.budget, self.flag_all, self.ncls
        n_alive, last = self.n_alive, self.last
        nfmin = cneg[last] if last >= 0 else -math.inf
        top = 0  # the first class with samples (ncls: none)
        while cnxt[top] != top:
            cnxt[top] = top = cnxt[cnxt[top]]
        cneg.append(-math.inf)  # a sentinel at ncls (cnxt[ncls] == ncls): below no x
        for room, lsum, cap in zip(self.room[a:b].tolist(), self.lsum[a:b].tolist(), self.cap[a:b].tolist(), strict=True):
            c = top  # classes before the last pick's have FLOPs >= x or are empty
            while flag_all or (n_alive > budget and lsum < cap):
                nx = room * nslack
                cn = cneg[c]
                if cn > nx and cnxt[c] == c:  # c has samples below x, and no class before it: a run of picks
                    r = rem[c]
                    cl = cL[c]
                    j = 1
                    room += cn
                    lsum += cl
                    while j < r and (flag_all or (n_alive - j > budget and lsum < cap)) and cn > room * nslack:
                        j += 1
                        room += cn
                        lsum += cl
                    picks += [c] * j
                    n_alive -= j
                    r = rem[c] = r - j
                else:
                    if nx >= nfmin:  # no sample left below x
                        break
                    c = bisect_right(cneg, nx, c, ncls)  # (the sentinel aside)
                    while cnxt[c] != c:
                        cnxt[c] = c = cnxt[cnxt[c]]  # path halving
                    if c >= ncls:
                        break
                    picks.append(c)
                    n_alive -= 1
                    r = rem[c] = rem[c] - 1
                    room += cneg[c]
                    lsum += cL[c]
                if not r:  # c emptied
                    top, last, nfmin = self._emptied(c, top, last, nfmin)
            ends.append(base + len(picks))
        cneg.pop()
        self.n_alive, self.last = n_alive, last

    def _emptied(self, c: int, top: int, last: int, nfmin: float) -> tuple[int, int, float]:
        """Class ``c`` has no sample left: it is skipped from now on; the first and the last classes with samples
        (``top``, ``last``) and the negated FLOPs of the last, ``nfmin``, after it."""
        cnxt = self.cnxt
        cnxt[c] = c + 1
        if c == last:
            while last >= 0 and cnxt[last] != last:
                last -= 1
            nfmin = self.cneg[last] if last >= 0 else -math.inf
        if c == top:
            while cnxt[top] != top:
                cnxt[top] = top = cnxt[cnxt[top]]
        return top, last, nfmin

    # ------------------------------------------------------------ many groups at once
    def bulk(self, a: int, b: int) -> int:
        """Groups ``a..b−1`` against the classes at ``a`` (see the module docstring); keeps the groups up to
        the first that another one's takings would change and returns how many it kept."""
        if self.picks:  # the picks one group at a time since the last try
            taken = np.asarray(self.picks, dtype=np.int64)
            self.rem_a -= np.bincount(taken, minlength=self.ncls)
            self._picks.append(taken)
            self.done += taken.size
            self.picks = []
        S = np.flatnonzero(self.rem_a > 0)
        C = b - a
        if not S.size or C <= 0:
            return 0
        negS, LS = self.cneg_a[S], self.cL_a[S]
        budget = None if self.flag_all else self.budget
        rounds = self._rounds(S, negS, LS, a, b, budget)
        if rounds is None:  # few groups kept: the next ones go one at a time
            return 0
        gs, ks, C = rounds
        if gs:
            g, k = _group_order(gs, ks, b - a)
            stop = min(C, _first_bad(g, k, self.rem_a[S], self.n_alive, budget))
            cls = S[k]
        else:
            g = cls = np.zeros(0, dtype=np.int64)
            stop = C
        self._keep(g, cls, stop)
        return stop

    def _rounds(self, S: np.ndarray, negS: np.ndarray, LS: np.ndarray, a: int, b: int,
                budget: float | None) -> tuple[list[np.ndarray], list[np.ndarray], int] | None:
        """:meth:`bulk`'s rounds: each group still taking picks the first class of ``S`` (negated FLOPs ``negS``,
        tokens ``LS``) below its ``x``; the groups and classes of each round, and the groups kept at most (``C``);
        None when the check after round ``_CHECK_AT`` leaves too few groups."""
        C = b - a
        # the groups still taking (ascending) and their rooms, tokens and caps, side by side
        act = np.arange(C)
        room, lsum, cap = self.room[a:b].copy(), self.lsum[a:b].copy(), self.cap[a:b]
        gs: list[np.ndarray] = []
        ks: list[np.ndarray] = []
        while act.size:
            if len(gs) >= _ROUNDS:  # groups taking many samples: the chunk ends before the first of them
                C = int(act[0])
                break
            if not self.flag_all:
                on = lsum < cap
                if not on.all():
                    act, room, lsum, cap = act[on], room[on], lsum[on], cap[on]
            k = np.searchsorted(negS, room * self.nslack, side="right")
            if not gs:  # first picks: the groups searching from one class share its samples (_park)
                k = _park(k, self.rem_a[S])
            on = k < S.size
            if not on.all():
                act, k, room, lsum, cap = act[on], k[on], room[on], lsum[on], cap[on]
            if not act.size:
                break
            gs.append(act)
            ks.append(k)
            room += negS[k]  # (arrays of this try's own)
            lsum += LS[k]
            if len(gs) == _CHECK_AT:  # a pick found bad now stays bad: the groups from the first are dropped
                C = min(C, _first_bad(*_group_order(gs, ks, b - a), self.rem_a[S], self.n_alive, budget))
                if C < max(_BULK_KEEP, (b - a) >> 3):
                    return None
                on = act < C
                if not on.all():
                    act, room, lsum, cap = act[on], room[on], lsum[on], cap[on]
        return gs, ks, C

    def _keep(self, g: np.ndarray, cls: np.ndarray, stop: int) -> None:
        """Record a bulk try's groups before ``stop`` (their picks ``cls`` by group ``g``, in order)."""
        keep = int(np.searchsorted(g, stop))  # the kept groups' picks: a prefix
        kept = cls[:keep]
        per = np.bincount(g[:keep], minlength=stop)
        self._ends.append(self.done + np.cumsum(per))
        self._picks.append(kept)
        self.done += keep
        self.n_alive -= keep
        if keep:
            used = np.bincount(kept, minlength=self.ncls)
            self.rem_a -= used
            touched = np.flatnonzero(used)
            rem, cnxt = self.rem, self.cnxt
            for c, r in zip(touched.tolist(), self.rem_a[touched].tolist(), strict=True):
                rem[c] = r
                if not r:
                    cnxt[c] = c + 1
            last = self.last
            while last >= 0 and cnxt[last] != last:
                last -= 1
            self.last = last

    def ends_array(self) -> np.ndarray:
        """Per group, in order: how many samples were taken up to it (int64)."""
        return np.concatenate([np.zeros(0, dtype=np.int64), *(np.asarray(e, dtype=np.int64) for e in self._ends)])

    @property
    def ends(self) -> list[int]:
        """:meth:`ends_array` as a list."""
        return self.ends_array().tolist()

    def positions(self) -> np.ndarray:
        """The pool position of every sample taken, in order: a class gives its samples in pool order."""
        cls = np.concatenate([*self._picks, np.asarray(self.picks, dtype=np.int64)]).astype(np.int64, copy=False)
        return self.cstart[cls] + _rank_in_class(cls) if cls.size else cls


def _park(k: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The first picks of a bulk try's groups (in group order; ``k``: each one's first class below its ``x``
    among the try's classes, ``count`` their samples; ``count.size``: none) when the groups that search from
    one class take its samples, then the next classes', in turn: the ``i``-th of them takes the ``i``-th
    sample from its class on.

    A guess that :meth:`ClassFiller.bulk`'s check makes exact: the classes the ``i``-th group passes over hold
    only samples ``0..i−1`` from its class on, each taken by one of the earlier groups of that class (so they
    are empty when it searches, whatever else was taken), and the check keeps a pick only while its class has
    a sample left; so each kept pick is the first class below ``x`` with a sample left, the rule's."""
    n = count.size
    if k.size < 2 or not n:
        return k
    i = _rank_in_class(k)
    if not i.any():
        return k
    cum = np.cumsum(count)
    kk = np.minimum(k, n - 1)
    unit = cum[kk] - count[kk] + i  # the sample the group takes, counted over the try's classes
    return np.where(k < n, np.searchsorted(cum, unit, side="right"), n)


def _group_order(gs: list[np.ndarray], ks: list[np.ndarray], n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """A bulk try's picks in group order: ``(group, class)`` of every pick, group after group, each group's picks
    in its rounds' order (``gs[r]``, ``ks[r]``: the groups, ascending, and classes picked in round ``r``).

    A group picks in rounds ``0 .. n − 1`` (a group left out of a round never comes back), so its round-``r``
    pick lands at its first position plus ``r``: the order of a stable sort by group, without a sort."""
    sizes = [x.size for x in gs]
    g = np.concatenate(gs)
    per = np.bincount(g, minlength=n_groups)
    first = np.cumsum(per) - per
    pos = first[g] + np.repeat(np.arange(len(gs)), sizes)
    k = np.empty_like(g)
    k[pos] = np.concatenate(ks)
    return np.repeat(np.arange(per.size), per), k


def _first_bad(g: np.ndarray, k: np.ndarray, count: np.ndarray, n_alive: int, budget: float | None) -> int:
    """The first group of a bulk try whose takings another group's (or the pool-size limit) would change: the
    group of the first pick, in group order (``g``, ``k``: :func:`_group_order`; ``k`` indexes ``count``, the
    samples each class had at the try's start), that finds its class emptied by the picks before it, or is
    made with no more than ``budget`` samples left (``n_alive`` before the first; None: no such limit).
    ``g.size`` groups past the last when none (a value no group reaches).

    Only a class picked more often than it has samples holds such a pick (its ``count + 1``-th pick): the
    picks of those classes alone are ranked (:func:`_rank_in_class`)."""
    stop = np.iinfo(np.int64).max
    if budget is not None:
        # the first pick i made with n_alive − i <= budget (the rounded guess set right by exact comparisons)
        i0 = max(0, math.ceil(n_alive - budget)) if math.isfinite(budget) else (0 if budget > 0 else g.size)
        while i0 > 0 and n_alive - (i0 - 1) <= budget:
            i0 -= 1
        while i0 < g.size and not n_alive - i0 <= budget:
            i0 += 1
        if i0 < g.size:
            stop = int(g[i0])
    over = np.bincount(k, minlength=count.size) > count
    if over.any():
        at = np.flatnonzero(over[k])  # the picks of those classes, in group order
        kc = k[at]
        bad = _rank_in_class(kc) >= count[kc]
        if bad.any():
            stop = min(stop, int(g[at[bad]].min()))
    return stop


def _rank_in_class(cls: np.ndarray) -> np.ndarray:
    """For each entry of ``cls`` (class indices, in taking order), how many earlier entries have its class."""
    by = stable_argsort(cls)
    sc = cls[by]
    idx = np.arange(sc.size)
    head = np.concatenate([[True], sc[1:] != sc[:-1]])
    rank = np.empty_like(by)
    rank[by] = idx - np.maximum.accumulate(np.where(head, idx, 0))
    return rank


def fill_long_groups(filler: ClassFiller, n_groups: int) -> None:
    """Every group, in order: bulk tries of growing chunks while they are kept whole; after a try that kept
    at least half its chunk, the group it stopped at one at a time; after one that kept less, the next
    groups one at a time (more of them after each such try in a row)."""
    g, chunk, scalar = 0, _CHUNK_MIN, _SCALAR_MIN
    while g < n_groups:
        b = min(n_groups, g + chunk)
        kept = filler.bulk(g, b)
        whole = g + kept == b
        g += kept
        if g >= n_groups:
            break
        if whole:
            chunk = min(2 * chunk, _CHUNK_MAX)
            scalar = _SCALAR_MIN
        elif kept and 2 * kept >= chunk:
            chunk = max(_CHUNK_MIN, kept)
            filler.scalar(g, g + 1)  # the group another one's takings changed, or one taking many samples
            g += 1
        else:
            chunk = _CHUNK_MIN
            filler.scalar(g, min(n_groups, g + scalar))
            g = min(n_groups, g + scalar)
            scalar = min(2 * scalar, _SCALAR_MAX)


def fill_one_by_one(cand, room_a: np.ndarray, tok_a: np.ndarray, cs_a: np.ndarray, flag_all: bool,
                     total_num: float) -> tuple[np.ndarray, list[int]]:
    """:meth:`_Candidate.place_long`'s filling of candidate ``cand`` one sample at a time (safe mode, where a
    sample can be skipped for its tokens, so a class is not taken in pool order): the pool positions taken,
    in order, and per group how many were taken up to it.

    One loop over the long samples with the pool's lists at hand: the search for the first remaining
    sample below the room and the removal (:class:`_NormalPool`'s pointers) are done here; the loop
    stops at once when the room is below the smallest sample left.
    """
    bt = cand.batch
    lists = None
    if cand._suffix is not None:
        ids, lens, negf = bt.order_lists()
        lists = ids[cand._suffix:], lens[cand._suffix:], negf[cand._suffix:]
    pool = _NormalPool(cand.normal, bt.f, bt.L, lists, bt.positions())
    negf, nxt, size, p_len, removed = pool.negf, pool.nxt, pool.size, pool.lengths, pool.removed
    n_alive = pool.n_alive
    slack, safe, M, u = cand.fill_slack, cand.safe, bt.M, bt.u
    li = cand._long_arr
    ends: list[int] = []
    # negated FLOPs throughout (nx = −x); a sentinel after the pool, below no x, spares the bound check
    nslack = -slack
    negf.append(-math.inf)
    last = size - 1  # the last remaining sample of the pool (the smallest) and its negated FLOPs
    nfmin = negf[last] if size else -math.inf
    ranks_a = cs_a * u
    pad_a = np.where(ranks_a > 1, 2 * ranks_a, 1)  # the padding rule (dcpsim.cost.padding)
    # each group's first search, over the whole pool (removed samples are skipped after it), for all at once
    first_a = np.searchsorted(-bt.f[pool.arr], room_a * nslack, side="right")
    for room, length_sum, tok, cap, ranks, pad, p in zip(room_a.tolist(), bt.L[li].tolist(), tok_a.tolist(),
                                                         (M * cs_a).tolist(), ranks_a.tolist(), pad_a.tolist(),
                                                         first_a.tolist(), strict=True):
        # p: position in the pool's fixed order (the code's index into its shrinking list); the first
        # search's answer is known, so it searches [p, hi) with hi = p, then the rest of the pool
        hi = p
        taken = False  # whether the last pass removed the sample at p
        while flag_all or (n_alive > total_num and length_sum < cap):
            nx = room * nslack
            if nx >= nfmin:  # no sample left below x (x <= 0 included): the code's search finds none
                break
            # first remaining normal sample (from p) with forward FLOPs < x; right after p is taken,
            # p + 1 when it remains and is below x (the search and the path halving would find it and
            # change nothing else)
            q = p + 1
            if taken and nxt[q] == q and negf[q] > nx:
                p = q
            else:
                p = bisect_right(negf, nx, p, hi)
                while nxt[p] != p:
                    nxt[p] = p = nxt[nxt[p]]  # path halving
                if p >= size:
                    break
            Lk = p_len[p]
            if safe:
                t = -(-Lk // pad) * pad // ranks
                if tok + t > M:
                    p += 1
                    taken = False
                    hi = size
                    continue
                tok += t
            nxt[p] = p + 1  # removed
            n_alive -= 1
            removed.append(p)
            taken = True
            hi = size
            room += negf[p]  # room − f
            length_sum += Lk
            if p == last:
                while last >= 0 and nxt[last] != last:
                    last -= 1
                nfmin = negf[last] if last >= 0 else -math.inf
        ends.append(len(removed))
    negf.pop()
    return np.asarray(removed, dtype=np.int64), ends
