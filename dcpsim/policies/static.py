"""Static CP: every sequence runs on the layout's ``cp`` ranks of one DP replica.

Group ``j`` of every step is DP replica ``j``: ranks ``[j·cp, (j+1)·cp)``.
Each replica gets the same number of microbatches (a replica may get an empty
one when the batch has too few sequences, see below).

* ``packing`` mirrors Megatron's ``dp_balanced`` scheduler (REFERENCE §1):
  next-fit in arrival order into bins of ``M·cp`` tokens; the bin count is
  brought up to a multiple of DP by moving single sequences off the last
  multi-sequence bins into new bins; bin ``i·DP + j`` is microbatch ``i`` of
  replica ``j``. No work balancing. Two details are ours: the capacity check
  counts each sequence's padding to a multiple of ``2·cp`` (what a rank really
  holds, and what :meth:`Plan.check` checks), and when the batch has fewer
  sequences than it needs bins, empty bins are added (``meta["empty_bins"]``).
* ``packing-balanced`` keeps static CP but balances modelled cost: it tries
  microbatch counts ``m`` from the capacity minimum upward (with PP, where
  more microbatches shrink the bubble, it keeps growing ``m`` while that
  helps), packs ``m·DP``
  bins by longest-processing-time first (each sequence, most expensive
  first, into the cheapest bin with token room; cost from
  :class:`~dcpsim.policies.costs.SeqCosts`), deals bins to replicas so that
  replica totals balance, and keeps the ``m`` with the smallest modelled
  iteration time (exact cost model).

Sequences longer than a ``cp``-rank group holds raise
:class:`~dcpsim.errors.InfeasibleError`, or are dropped with
``too_long="drop"``.
"""

from __future__ import annotations

import heapq

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.base import Policy, candidate_microbatch_counts
from dcpsim.policies.costs import SeqCosts, schedule_makespan_s
from dcpsim.policies.fit import raise_too_long
from dcpsim.policies.plan import Group, Layout, Plan, Step

TOO_LONG = ("error", "drop")


def _too_long(lengths: np.ndarray, layout: Layout, mode: str) -> tuple[np.ndarray, dict[int, str]]:
    """(ids to schedule, dropped) after handling sequences that exceed one static group."""
    tok = per_rank_tokens(lengths, layout.cp)
    bad = tok > layout.max_tokens_per_rank
    if not bad.any():
        return np.arange(lengths.size), {}
    if mode == "error":
        raise_too_long(lengths, bad, layout.cp, layout.max_tokens_per_rank, "static")
    reason = f"longer than a static CP group holds ({layout.cp} ranks x {layout.max_tokens_per_rank} tokens, padded)"
    return np.nonzero(~bad)[0], {int(i): reason for i in np.nonzero(bad)[0]}


def _steps_from_bins(bins: list[list[int]], layout: Layout) -> list[Step]:
    """Bin ``i·dp + j`` -> step ``i``, replica ``j``."""
    dp, cp = layout.dp, layout.cp
    return [
        Step([Group(j * cp, cp, [int(x) for x in bins[i * dp + j]]) for j in range(dp)]) for i in range(len(bins) // dp)
    ]


class PackingPolicy(Policy):
    """``packing``: Megatron's ``dp_balanced`` static-CP packing (the published baseline)."""

    name = "packing"
    dynamic = False

    def __init__(self, too_long: str = "error") -> None:
        if too_long not in TOO_LONG:
            raise ConfigError("policy.options.too_long", too_long, f"one of {TOO_LONG}")
        self.too_long = too_long

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        ids, dropped = _too_long(lengths, layout, self.too_long)
        cap = layout.max_tokens_per_rank  # per rank; a bin holds cap*cp tokens
        tok = per_rank_tokens(lengths[ids], layout.cp).tolist()
        bins: list[list[int]] = []
        cur: list[int] = []
        used = 0
        for i, t in zip(ids.tolist(), tok, strict=True):  # next-fit in arrival order
            if cur and used + t > cap:
                bins.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += t
        if cur:
            bins.append(cur)
        need = (-len(bins)) % layout.dp
        b = len(bins) - 1
        while need and b >= 0:  # split single sequences off the last multi-sequence bins
            if len(bins[b]) > 1:
                bins.append([bins[b].pop()])
                need -= 1
            else:
                b -= 1
        empty = need
        bins.extend([] for _ in range(need))
        return Plan(
            policy=self.name,
            layout=layout,
            lengths=lengths,
            steps=_steps_from_bins(bins, layout),
            dynamic=False,
            dropped=dropped,
            meta={"bins": len(bins), "empty_bins": empty},
        )


class BalancedPackingPolicy(Policy):
    """``packing-balanced``: static CP with cost-balanced bins (LPT) and a search over the microbatch count.

    Options: ``extra_microbatches`` (counts above the capacity minimum always
    tried; default 4; with PP the search continues ×1.25 while it improves),
    ``too_long``.
    """

    name = "packing-balanced"
    dynamic = False

    def __init__(self, extra_microbatches: int = 4, too_long: str = "error") -> None:
        if not isinstance(extra_microbatches, int) or extra_microbatches < 0:
            raise ConfigError("policy.options.extra_microbatches", extra_microbatches, "an integer >= 0")
        if too_long not in TOO_LONG:
            raise ConfigError("policy.options.too_long", too_long, f"one of {TOO_LONG}")
        self.extra_microbatches = extra_microbatches
        self.too_long = too_long

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        ids, dropped = _too_long(lengths, layout, self.too_long)
        dp, cap = layout.dp, layout.max_tokens_per_rank
        seq_len = np.asarray(lengths[ids], dtype=np.int64)
        sc = SeqCosts(seq_len, layout, cost, [layout.cp], distinct=_distinct_ints(seq_len))
        span = int(bool(layout.spans_network(0, layout.cp)))
        t = sc.time_s[0, span]
        tok = sc.tokens[0]
        order = _by_cost(sc, span)  # most expensive first, ties by id
        m0 = max(1, int(np.ceil(tok.sum() / (cap * dp))))
        # each candidate is scored on the same documents, in the same order (each bin's in placement order):
        # their padded lengths and attention are computed once, per distinct length
        docs_len = np.asarray(lengths, dtype=np.int64)[ids[order]]
        docs = _doc_terms(sc, order, layout.cp, cost)
        best: tuple[float, _Scored] | None = None
        tried = []
        worse = 0
        m_max = max(m0, -(-ids.size // dp))  # beyond this some bins stay empty
        for m in candidate_microbatch_counts(m0, m_max, self.extra_microbatches, layout.pp):
            if best is not None and m > m0 + self.extra_microbatches and worse >= 3:
                break
            assign = self._lpt_assign(order, t, tok, m * dp, cap)
            if assign is None:  # fragmentation: try more bins
                continue
            scored = _Scored(order, assign, t, m, dp)
            ms = scored.makespan_s(docs_len, docs, layout, cost)
            tried.append({"microbatches": m, "makespan_s": ms})
            if best is None or ms < best[0]:
                best, worse = (ms, scored), 0
            else:
                worse += 1
        if best is None:  # one sequence per bin always fits
            m = m_max
            best = (0.0, _Scored(order, self._lpt_assign(order, t, tok, m * dp, cap), t, m, dp))
        plan = Plan(self.name, layout, lengths, best[1].steps(ids, layout), False, dict(dropped))
        plan.meta = {"microbatches": plan.n_steps, "tried": tried}
        return plan

    @staticmethod
    def _lpt(order: np.ndarray, t: np.ndarray, tok: np.ndarray, n_bins: int, cap: int) -> list[list[int]] | None:
        """:meth:`_lpt_assign` as bins (each a list of sequence indices in placement order); None if a
        sequence fits nowhere."""
        assign = BalancedPackingPolicy._lpt_assign(order, t, tok, n_bins, cap)
        return None if assign is None else _bins_of(order, assign, n_bins)

    @staticmethod
    def _lpt_assign(order: np.ndarray, t: np.ndarray, tok: np.ndarray, n_bins: int, cap: int) -> np.ndarray | None:
        """The bin of each sequence of ``order`` (by position), longest-processing-time first into ``n_bins`` bins with a token cap; None if a sequence fits nowhere.

        Each sequence goes to the least-loaded bin with room for it (ties: the lowest bin). In bulk while
        that is provably the same decision: the next ``k`` sequences go to the ``k`` least-loaded bins in
        (load, bin) order when each of those bins has room for its sequence and every bin already given
        one in this run ends up loaded above the next bin's load (so it is still that bin's turn); a run
        shorter than ``_LPT_BULK_MIN`` hands the rest to :func:`_lpt_heap`, one sequence at a time.
        Loads are the same floating-point sums either way (one addition per sequence, in order).
        """
        seq = np.asarray(order, dtype=np.intp)
        n = seq.size
        ts, ks = t[seq].astype(np.float64), tok[seq].astype(np.int64)
        load = np.zeros(n_bins)
        room = np.full(n_bins, cap, dtype=np.int64)
        assign = np.empty(n, dtype=np.intp)
        by_load = np.arange(n_bins)  # the bins least loaded first, ties to the lowest bin (all loads are 0)
        sorted_load = load.copy()  # load[by_load]
        pos = 0
        while pos < n:
            k = min(n_bins, n - pos)
            e = by_load[:k]
            le = sorted_load[:k]
            new = le + ts[pos:pos + k]
            good = room[e] >= ks[pos:pos + k]
            good[1:] &= np.minimum.accumulate(new)[:-1] > le[1:]
            run = k if good.all() else int(np.argmin(good))  # up to the first sequence that is not bulk
            if run:
                e = e[:run]
                assign[pos:pos + run] = e
                load[e] = new[:run]
                room[e] -= ks[pos:pos + run]
                pos += run
            if run < _LPT_BULK_MIN and pos < n:  # short runs: one at a time from here
                if not _lpt_heap(ts, ks, pos, load.tolist(), room.tolist(), assign):
                    return None
                break
            if pos < n:  # load[by_load]: the run's new loads, then the others' as they were
                y = new if run == n_bins else np.concatenate((new[:run], sorted_load[run:]))
                by_load, sorted_load = _resort(by_load, y)
        return assign

    @staticmethod
    def _deal(bins: list[list[int]], t: np.ndarray, ids: np.ndarray, m: int, layout: Layout) -> list[Step]:
        """Give each replica ``m`` bins so replica totals balance (largest bin first to the lightest replica)."""
        dp = layout.dp
        cost_b = np.array([t[b].sum() if b else 0.0 for b in bins])
        order = np.lexsort((np.arange(len(bins)), -cost_b))
        ids_l = ids.tolist()
        same = not ids_l or ids_l[-1] == len(ids_l) - 1  # ids is increasing: nothing dropped, bin entries are ids
        heap = [(0.0, j) for j in range(dp)]  # (total, replica): the lightest replica with a free slot, lowest first
        count = [0] * dp
        per: list[list[list[int]]] = [[] for _ in range(dp)]
        for b, c in zip(order.tolist(), cost_b[order].tolist(), strict=True):
            total, j = heap[0]
            count[j] += 1
            if count[j] < m:
                heapq.heapreplace(heap, (total + c, j))
            else:
                heapq.heappop(heap)
            per[j].append(bins[b] if same else [ids_l[x] for x in bins[b]])
        cp = layout.cp
        return [Step([Group(j * cp, cp, per[j][k]) for j in range(dp)]) for k in range(m)]


def _distinct_ints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(x, return_index=True, return_inverse=True)`` of an int64 array, the same arrays; for
    non-negative values below ``4·x.size + 2**20`` by counting (a table over the values: no sort), else
    ``np.unique`` itself."""
    n = x.size
    if n == 0 or int(x.min()) < 0 or int(x.max()) >= 4 * n + 2**20:
        return np.unique(x, return_index=True, return_inverse=True)
    present = np.bincount(x) > 0
    u = np.flatnonzero(present)
    first = np.full(present.size, n, dtype=np.int64)
    np.minimum.at(first, x, np.arange(n))  # each value's first position
    return u, first[u], (np.cumsum(present) - 1)[x]


def _by_cost(sc: SeqCosts, span: int) -> np.ndarray:
    """``np.lexsort((np.arange(n), -t))`` of the table's times ``t = sc.time_s[0, span]`` (most expensive first,
    ties by position), the same permutation from the distinct lengths: ``t`` is ``sc.time_u[0, span]`` spread
    by ``sc.inv``, so each sequence's rank among the distinct times (equal times, equal rank) orders the
    sequences as ``-t`` does, and a stable sort of the ranks (16-bit where they fit: numpy sorts those by
    radix) keeps ties by position."""
    t_u = sc.time_u[0, span]
    if not sc.distinct_table or sc.inv.size == 0:
        return np.lexsort((np.arange(sc.inv.size), -sc.time_s[0, span]))
    _, rank = np.unique(-t_u, return_inverse=True)
    return _stable_order(rank.reshape(-1)[sc.inv], int(rank.max()) + 1)


def _doc_terms(sc: SeqCosts, order: np.ndarray, cp: int, cost) -> tuple:
    """``cost.doc_terms`` of the sequences in ``order`` on ``cp`` ranks each, the same numbers, computed per
    distinct length (every term is elementwise in the length) and spread."""
    if not sc.distinct_table or sc.inv.size == 0:
        return cost.doc_terms(sc.lengths[order], np.full(order.size, cp, dtype=np.int64))
    u = sc.distinct()[0]
    sel = sc.inv[order]
    return tuple(x[sel] for x in cost.doc_terms(u, np.full(u.size, cp, dtype=np.int64)))


def _bins_of(order: np.ndarray, assign: np.ndarray, n_bins: int) -> list[list[int]]:
    """Bins as lists of the entries of ``order``, each in placement order (``assign``: the bin of each position)."""
    flat = np.asarray(order, dtype=np.intp)[_stable_order(assign, n_bins)].tolist()
    ends = np.cumsum(np.bincount(assign, minlength=n_bins)).tolist()
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends, strict=True)]


class _Scored:
    """One candidate of :meth:`BalancedPackingPolicy._plan` from arrays: its bins (``assign``: the bin of each
    position of ``order``), their modelled costs (s) and how :meth:`BalancedPackingPolicy._deal` deals them, so
    that the candidate is scored and, when kept, laid out as steps without dealing it twice."""

    def __init__(self, order: np.ndarray, assign: np.ndarray, t: np.ndarray, m: int, dp: int) -> None:
        n_bins = m * dp
        self.m, self.dp, self.assign = m, dp, assign
        self.flat = np.asarray(order, dtype=np.intp)[_stable_order(assign, n_bins)]  # by bin, each in placement order
        self.counts = np.bincount(assign, minlength=n_bins)
        self.cost_b = _segment_sums(t[self.flat], self.counts)  # each bin's t[bin].sum(), as _deal sums it
        rep, slot = _deal_slots(self.cost_b, dp, m)
        self.bin_of_g = np.empty(n_bins, dtype=np.intp)  # group g = step·dp + replica runs this bin
        self.bin_of_g[slot * dp + rep] = np.arange(n_bins)

    def _by_group(self) -> np.ndarray:
        """Positions in ``flat`` group by group (step-major, replica within the step), each group's sequences in
        placement order (the bins' blocks of ``flat`` reordered)."""
        starts = np.cumsum(self.counts) - self.counts
        c = self.counts[self.bin_of_g]
        return np.repeat(starts[self.bin_of_g] - (np.cumsum(c) - c), c) + np.arange(self.flat.size)

    def makespan_s(self, docs_len: np.ndarray, docs: tuple, layout: Layout, cost) -> float:
        """Modelled iteration time (s) of the plan :meth:`steps` makes, from arrays: the packs of
        :func:`evaluate_plan` of that plan without building its groups. The documents are the sequences of
        ``order`` (``docs_len``, their :meth:`CostModel.doc_terms` ``docs``), each in the pack of its bin's
        group: each pack's sequences come in placement order, as in the plan."""
        n_bins = self.counts.size
        g_of_bin = np.empty(n_bins, dtype=np.int64)
        g_of_bin[self.bin_of_g] = np.arange(n_bins)
        g = np.arange(n_bins, dtype=np.int64)
        sizes, starts = np.full(n_bins, layout.cp, dtype=np.int64), (g % self.dp) * layout.cp
        bc = cost.batch_cost(docs_len, g_of_bin[self.assign], sizes, layout.spans_network(starts, sizes), docs=docs)
        return schedule_makespan_s(g // self.dp, starts, sizes, bc.fwd_s, bc.bwd_s, self.m, layout)  # evaluate_packs'

    def steps(self, ids: np.ndarray, layout: Layout) -> list[Step]:
        """The steps :meth:`BalancedPackingPolicy._deal` makes of these bins: step ``k`` of replica ``j`` runs the
        ``k``-th bin dealt to ``j``."""
        flat = np.asarray(ids)[self.flat[self._by_group()]].tolist()
        ends = np.cumsum(self.counts[self.bin_of_g]).tolist()
        packs = [flat[a:b] for a, b in zip([0] + ends[:-1], ends, strict=True)]
        dp, cp = self.dp, layout.cp
        return [Step([Group(j * cp, cp, packs[k * dp + j]) for j in range(dp)]) for k in range(self.m)]


def _segment_sums(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``x[a:b].sum()`` of each consecutive segment of ``x`` (``counts`` long; 0.0 when empty), bit for bit:
    the segments of one length are summed as the rows of one array (numpy sums each contiguous row as it
    sums a 1-D array, pairwise from the same blocks)."""
    out = np.zeros(counts.size)
    starts = np.cumsum(counts) - counts
    for c in np.unique(counts).tolist():
        if c:
            seg = np.flatnonzero(counts == c)
            out[seg] = x[starts[seg][:, None] + np.arange(c)].sum(axis=1)
    return out


def _resort(by: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(np.argsort(x, kind="stable"), its sorted x)`` (the indices by value, ties in index order) from ``by``,
    a permutation that was that order for earlier values, and ``y = x[by]`` (the same permutation, faster when
    few values moved: numpy's stable sort runs over the mostly sorted ``y`` in near-linear time). Entries of
    equal value come out in their order in ``by``, which need not be index order: runs of equal values are
    put back in index order."""
    p = np.argsort(y, kind="stable")
    out, s = by[p], y[p]
    if s.size and s[-1] != s[-1]:  # a NaN (sorted last, never equal to itself): the plain stable sort
        x = np.empty_like(y)
        x[by] = y
        out = np.argsort(x, kind="stable")
        return out, x[out]
    eq = s[1:] == s[:-1]
    if (eq & (out[1:] < out[:-1])).any():  # some run of equal values is out of index order
        tie = np.zeros(s.size, dtype=bool)
        tie[1:] = eq
        tie[:-1] |= eq
        pos = np.flatnonzero(tie)  # the positions in runs of equal values, runs in sorted order
        start = np.ones(pos.size, dtype=bool)
        start[1:] = ~eq[pos[1:] - 1]  # a run starts where its value differs from the one before
        key = np.cumsum(start) * np.int64(s.size) + out[pos]  # (run, index): sorting keeps the runs in place
        out[pos] = out[pos][np.argsort(key)]
    return out, s


def _stable_order(keys: np.ndarray, n: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of keys in ``[0, n)``; as 16-bit keys where they fit (numpy then
    sorts by radix; a stable order is unique, so the result is the same)."""
    return np.argsort(keys.astype(np.uint16) if n <= 1 << 16 else keys, kind="stable")


def _deal_slots(cost_b: np.ndarray, dp: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`BalancedPackingPolicy._deal`'s dealing as arrays: the replica of each bin and its place among
    that replica's bins (its step).

    Dealing is the LPT of :meth:`BalancedPackingPolicy._lpt_assign` with replicas for bins: each bin, most
    expensive first (ties by index), to the lightest replica with fewer than ``m`` bins (ties to the lowest),
    a bin taking one of a replica's ``m`` slots; the same decisions and the same float sums, in bulk.
    """
    n = cost_b.size
    order = np.lexsort((np.arange(n), -cost_b))
    assign = BalancedPackingPolicy._lpt_assign(order, cost_b, np.ones(n, dtype=np.int64), dp, m)
    rep = np.empty(n, dtype=np.int64)
    slot = np.empty(n, dtype=np.int64)
    rep[order] = assign
    by_rep = _stable_order(assign, dp)  # positions replica by replica, each replica's in dealing order
    counts = np.bincount(assign, minlength=dp)
    slot[order[by_rep]] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    return rep, slot


_LPT_BULK_MIN = 64  # BalancedPackingPolicy._lpt: bulk runs shorter than this hand over to the heap


def _lpt_heap(ts: np.ndarray, ks: np.ndarray, pos: int, load: list[float], room: list[int], assign: np.ndarray) -> bool:
    """:meth:`BalancedPackingPolicy._lpt` from position ``pos`` on, one sequence at a time (``ts``/``ks``: time
    and tokens in placement order; ``load``/``room`` per bin so far); writes ``assign``, False if a
    sequence fits nowhere.

    A heap of (load, bin) gives the least-loaded bin: entries without room are set aside and pushed back
    afterwards, and bins with less room than any sequence still to place are dropped for good (they
    could never be chosen again).
    """
    heap = [(ld, b) for b, ld in enumerate(load)]
    heapq.heapify(heap)
    t_l, k_l = ts.tolist(), ks.tolist()
    rest_min = np.minimum.accumulate(ks[::-1])[::-1].tolist()
    replace = heapq.heapreplace
    out = assign
    for p in range(pos, len(t_l)):
        need = k_l[p]
        if heap:
            ld, b = heap[0]
            if room[b] >= need:  # the least-loaded bin has room (the common case)
                room[b] -= need
                out[p] = b
                replace(heap, (ld + t_l[p], b))
                continue
        aside = []
        while heap and room[heap[0][1]] < need:
            e = heapq.heappop(heap)
            if room[e[1]] >= rest_min[p]:  # still useful for a later, smaller sequence
                aside.append(e)
        if not heap:
            return False
        ld, b = heap[0]
        room[b] -= need
        out[p] = b
        replace(heap, (ld + t_l[p], b))
        for e in aside:
            heapq.heappush(heap, e)
    return True


def window_plan(lengths: np.ndarray, windows: np.ndarray, mbs: int, layout: Layout, policy: str = "packing") -> Plan:
    """Static plan of fixed-length windows: ``mbs`` whole windows per microbatch, Megatron's order.

    ``lengths`` are attention blocks (documents cut at window boundaries) and
    ``windows`` the window of each (0..W-1, non-decreasing). Microbatch ``b``
    holds windows ``[b*mbs, (b+1)*mbs)``; bin ``i*dp + j`` is microbatch ``i``
    of replica ``j`` (as :class:`PackingPolicy`). W must be a multiple of
    ``dp*mbs``. With ``cp > 1`` each block is padded to a multiple of ``2*cp``
    (THD), so a rank may hold up to 2 tokens per block more than
    ``mbs*seq_len/cp``; the plan is therefore not checked against the layout's
    nominal capacity (memory is checked per pack from its real tokens).
    """
    windows = np.asarray(windows, dtype=np.int64)
    n_win = int(windows.max()) + 1 if windows.size else 0
    if n_win == 0 or n_win % (layout.dp * mbs):
        raise ConfigError("workload.gbs", n_win, f"a positive multiple of dp*mbs = {layout.dp}*{mbs}")
    bin_of = windows // mbs
    n_bins = n_win // mbs
    order = np.argsort(bin_of, kind="stable")
    bounds = np.searchsorted(bin_of[order], np.arange(n_bins + 1))
    bins = [order[bounds[b]:bounds[b + 1]].tolist() for b in range(n_bins)]
    return Plan(policy=policy, layout=layout, lengths=np.asarray(lengths, dtype=np.int64),
                steps=_steps_from_bins(bins, layout), dynamic=False,
                meta={"bins": n_bins, "windows": n_win, "mbs": int(mbs)})


class NaivePackingPolicy(Policy):
    """``packing-pr2959``: the static-CP packer of Megatron-LM pull request #2959, as the blog's baseline ran it.

    ``NaiveSequencePackingScheduler`` in ``megatron/core/pipeline_parallel/data_schedule.py`` at
    ``refs/pull/2959/head`` (3b309c6), the scheduler Megatron picks for ``--sft-sequence-packing`` without
    hybrid CP. It differs from today's ``dp_balanced`` (``packing``) in two ways this policy keeps:

    * after next-fit packing it appends its last pack a *second* time (the same list object, so moving
      samples off it below shrinks both entries): that pack's sequences are trained twice. Megatron
      counts FLOPs over the gathered sample lengths, each sample once, so the repeat costs time and no
      counted FLOPs (``Plan.repeats``, ``Plan.counted_lengths``);
    * bringing the pack count up to a multiple of DP walks back from the last pack and asserts it never
      reaches the first; that failure is an :class:`~dcpsim.errors.InfeasibleError` here.

    Packing: arrival order, a pack closes when the next sample's padded length (Megatron's SFT dataset
    pads to ``2·cp`` when ``cp > 1``) would take it over ``bin_tokens_per_rank × cp`` tokens. Pack
    ``i·DP + j`` is microbatch ``i`` of DP replica ``j`` (ranks ``[j·cp, (j+1)·cp)``).

    Options: ``bin_tokens_per_rank`` -- the baseline's own ``--max-seqlen-per-dp-cp-rank`` (M of its
    bins; default the layout's, which the dynamic policies use); ``too_long`` (``error`` | ``drop``) for a
    sample longer than one pack holds (the code would run it alone over capacity).
    """

    name = "packing-pr2959"
    dynamic = False

    def __init__(self, bin_tokens_per_rank: int | None = None, too_long: str = "error") -> None:
        if bin_tokens_per_rank is not None and (not isinstance(bin_tokens_per_rank, int)
                                                or isinstance(bin_tokens_per_rank, bool) or bin_tokens_per_rank < 1):
            raise ConfigError("policy.options.bin_tokens_per_rank", bin_tokens_per_rank, "a positive integer (tokens per rank)")
        if too_long not in TOO_LONG:
            raise ConfigError("policy.options.too_long", too_long, f"one of {TOO_LONG}")
        self.bin_tokens_per_rank = bin_tokens_per_rank
        self.too_long = too_long

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        from dataclasses import replace

        from dcpsim.errors import InfeasibleError

        if self.bin_tokens_per_rank is not None:
            layout = replace(layout, max_tokens_per_rank=int(self.bin_tokens_per_rank))
        ids, dropped = _too_long(lengths, layout, self.too_long)
        cp, dp = layout.cp, layout.dp
        cap = layout.max_tokens_per_rank * cp  # tokens of one pack (all cp ranks)
        padded = (per_rank_tokens(lengths[ids], cp) * cp).tolist()
        packs: list[list[int]] = []
        cur: list[int] = []
        used = 0
        for i, t in zip(ids.tolist(), padded, strict=True):
            if used + t <= cap:
                cur.append(i)
                used += t
            else:
                packs.append(cur)
                cur, used = [i], t
        if cur:
            packs.append(cur)
        if not packs:  # no sample (an empty batch, or every one dropped): the code has no last pack to repeat
            raise InfeasibleError("capacity", f"packing-pr2959: no sample to pack ({len(dropped)} dropped as too long, "
                                  f"{lengths.size} in the batch); Megatron's naive packer needs at least one")
        packs.append(packs[-1])  # the last pack once more: the same list, as in the code
        need = (-len(packs)) % dp
        k = len(packs) - 1
        while need:
            if k <= 0:
                raise InfeasibleError("capacity", f"packing-pr2959: {len(ids)} samples cannot fill a multiple of DP = {dp} packs "
                                      "(Megatron's naive packer fails its 'Not enough samples to move' assertion)")
            if len(packs[k]) > 1:
                packs.append([packs[k].pop()])
                need -= 1
            else:
                k -= 1
        last = _alias_index(packs)
        repeats = {int(i): 1 for i in packs[last]}
        plan = Plan(policy=self.name, layout=layout, lengths=lengths, steps=_steps_from_bins(packs, layout),
                    dynamic=False, dropped=dropped, meta={"bins": len(packs), "repeated_pack": last,
                                                          "repeated_sequences": len(repeats),
                                                          "bin_tokens_per_rank": layout.max_tokens_per_rank},
                    repeats=repeats, counted_lengths=np.asarray(lengths[ids], dtype=np.int64))
        return plan


def _alias_index(packs: list[list[int]]) -> int:
    """Index of the second entry of the pack the naive packer lists twice (the same list object)."""
    for k in range(1, len(packs)):
        if packs[k] is packs[k - 1]:
            return k
    raise AssertionError("no repeated pack")  # pragma: no cover - the packer always appends one
