"""``dynamic``: Megatron-Core's ``default_dynamic_cp`` scheduler (REFERENCE §1, dev branch).

Written from the description in REFERENCE §1 ("Scheduler in today's code"):

* ``gpus_needed(L)``: the smallest power of two ``c ≥ min_cp`` whose group
  holds the sequence, counting its padding to a multiple of ``2c``.
* workload proxy of a sequence on ``c`` ranks: ``L²/c`` per rank (attention
  only, no constants). A rank's load is the sum over the packs it runs.
* The batch is sorted longest first and microbatches are built one at a time.
  The longest remaining sequence (length ``T``) opens a group of
  ``gpus_needed(T)`` ranks at rank 0; no rank's load may exceed
  ``cap = 1.05·T·M``.
* Every other sequence, in order, considers each CP size from
  ``gpus_needed`` upward (×2): joining an existing group of that size whose
  padded tokens stay ``≤ M`` per rank, or opening a group of that size on
  free ranks. Each option is scored by the resulting *maximum load over all
  ranks*; the smallest score under the cap wins, ties going to the first
  option in that order (smaller size first, existing groups in creation
  order before a new group). Sequences that fit nowhere wait for the next
  microbatch.
* Ranks left empty: double the smallest group (its sequences re-split over
  twice the ranks); failing that, one group over all ranks packed greedily
  from this microbatch's sequences, the rest waiting.

Where Megatron's own layout and ours differ: new groups take the lowest free
*aligned* slice (communicators exist only for aligned power-of-two slices,
REFERENCE §1), and after a doubling the groups are re-laid largest first from
rank 0, which keeps every slice aligned (Megatron shifts the groups behind the
doubled one instead; only the ranks' positions differ). When DP×CP is not a
power of two the "group over all ranks" is the largest aligned power of two,
and the remaining ranks idle.

Speed: the first option that keeps the maximum is found in a segment tree
per CP size (min tokens and min load per node, creation order), so placing a
sequence is logarithmic in the groups of the microbatch; only when every
option raises the maximum does it scan all groups with numpy. Free aligned
slices are found with bit operations on a Python integer, a microbatch stops
early once even the shortest remaining sequence cannot be placed, and the
doubling of small groups uses a heap and re-lays the groups once.
tests/test_policy_scale.py checks the plans equal those of a scan of every
group per sequence.
"""

from __future__ import annotations

import heapq

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.base import Policy
from dcpsim.policies.fit import dynamic_fit
from dcpsim.policies.plan import Group, Layout, Plan, Step


def lowest_free_slice(free: int, c: int, n_ranks: int, align_masks: dict[int, int]) -> int:
    """Start of the lowest aligned run of ``c`` free ranks in bitmask ``free`` (bit r = rank r free); -1 if none."""
    x = free
    s = 1
    while s < c:  # bit p stays set iff ranks p..p+2s-1 are free
        x &= x >> s
        s <<= 1
    x &= align_masks[c]
    if not x:
        return -1
    return (x & -x).bit_length() - 1


def align_masks_for(sizes, n_ranks: int) -> dict[int, int]:
    """Bitmask of the valid starts (multiples of c with start + c <= n_ranks) for every size."""
    out = {}
    for c in (int(x) for x in sizes):
        m = 0
        for s in range(0, n_ranks - c + 1, c):
            m |= 1 << s
        out[c] = m
    return out


class DynamicPolicy(Policy):
    """``dynamic``: Megatron's ``default_dynamic_cp`` (see the module docstring).

    Option ``cap_delta``: slack of the per-rank load cap ``(1 + cap_delta)·T·M``
    (Megatron: 0.05).
    """

    name = "dynamic"
    dynamic = True

    def __init__(self, cap_delta: float = 0.05) -> None:
        if not isinstance(cap_delta, (int, float)) or cap_delta < 0:
            raise ConfigError("policy.options.cap_delta", cap_delta, "a number >= 0")
        self.cap_delta = float(cap_delta)

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        sizes, need = dynamic_fit(lengths, layout)
        ctx = _Ctx(lengths, layout, sizes, need, self.cap_delta)
        order = np.lexsort((np.arange(lengths.size), -lengths))  # longest first, ties by id
        steps: list[Step] = []
        stats = {"doublings": 0, "full_group_fills": 0}
        while order.size:
            step, order = ctx.microbatch(order, stats)
            steps.append(step)
        hist: dict[int, int] = {}
        for st in steps:
            for g in st.groups:
                hist[g.size] = hist.get(g.size, 0) + 1
        meta = {"microbatches": len(steps), "groups_per_size": {str(c): v for c, v in sorted(hist.items())}, **stats}
        return Plan(self.name, layout, lengths, steps, True, meta=meta)


BULK_SAME = True  # tests: False chooses for every sequence of an equal-length run (the reference of the bulk paths)


class _Ctx:
    """Per-batch tables and the microbatch builder."""

    def __init__(self, lengths: np.ndarray, layout: Layout, sizes: np.ndarray, need: np.ndarray, delta: float) -> None:
        self.L = lengths
        self.layout = layout
        self.sizes = sizes
        self.size_list = [int(c) for c in sizes]
        self.ns = sizes.size
        self.need = need
        self.R = layout.ranks_per_stage
        self.M = layout.max_tokens_per_rank
        self.delta = delta
        Lf = lengths.astype(np.float64)
        # per sequence and size: padded tokens per rank and the L²/c proxy
        self.tok = per_rank_tokens(lengths[:, None], sizes[None, :])  # (n, ns)
        self.work = (Lf * Lf)[:, None] / sizes[None, :]  # (n, ns)
        self.align = align_masks_for(sizes, self.R)
        self.cmax = int(sizes[-1])

    def microbatch(self, order: np.ndarray, stats: dict) -> tuple[Step, np.ndarray]:
        """Build one microbatch from ``order`` (ids, longest first); return it and the waiting ids.

        Phases: the longest sequence opens the first group; every other one
        takes the option that raises the maximum rank load least (or waits);
        then empty ranks are filled (doubling groups, or one group over all ranks).
        """
        ids = order.tolist()
        mb = _Microbatch(self, ids[0])
        leftovers: list[int] = []
        shortest = int(self.L[ids[-1]])
        lens = self.L[order]
        # run_end[p]: one past the last position holding the same length as position p (lengths descend)
        change = np.flatnonzero(lens[1:] != lens[:-1]) + 1
        run_end = np.repeat(np.append(change, lens.size), np.diff(np.concatenate(([0], change, [lens.size]))))
        run_end = run_end.tolist()
        pos, n = 1, len(ids)
        while pos < n:
            i = ids[pos]
            if mb.full_for(int(self.L[i])):
                leftovers.append(i)
                if mb.full_for(shortest):  # nor can any shorter remaining sequence be placed
                    leftovers.extend(ids[pos + 1 :])
                    break
                pos += 1
                continue
            choice = mb.choose(i)
            pos += 1
            if choice is None:
                leftovers.append(i)
                continue
            mb.apply(choice, i)
            if mb.kept_max and run_end[pos - 1] > pos and BULK_SAME:
                same = mb.join_same if choice[0] == "join" else mb.new_same
                pos += same(choice[1], i, ids[pos : run_end[pos - 1]])
        return self._fill_empty_ranks(mb, order, ids, np.asarray(leftovers, dtype=np.int64), stats)

    def _fill_empty_ranks(self, mb: _Microbatch, order: np.ndarray, ids: list[int], left: np.ndarray,
                          stats: dict) -> tuple[Step, np.ndarray]:
        """Ranks left empty: double the smallest group while it fits; failing that, one group over all ranks.

        The doubled group is the first-created one of the smallest size (a heap
        keyed by (size, creation index)); groups are re-laid once at the end.
        """
        sizes_g = [self.size_list[int(x)] for x in mb.g_sidx[: mb.ng]]
        starts = list(mb.g_start)
        used = sum(sizes_g)
        heap = [(c, g) for g, c in enumerate(sizes_g)]
        heapq.heapify(heap)
        doubled = False
        while used < self.R:
            cmin, g = heap[0]
            if not (2 * cmin <= self.cmax and used + cmin <= self.R):
                stats["full_group_fills"] += 1
                return self._one_full_group(order, ids)
            sizes_g[g] = 2 * cmin
            heapq.heapreplace(heap, (2 * cmin, g))
            used += cmin
            stats["doublings"] += 1
            doubled = True
        if doubled:
            starts = self._relayout(sizes_g)
        groups = [Group(int(starts[g]), int(sizes_g[g]), mb.members[g]) for g in range(mb.ng)]
        groups.sort(key=lambda gr: gr.start)
        return Step(groups), left

    def _one_full_group(self, order: np.ndarray, ids: list[int]) -> tuple[Step, np.ndarray]:
        """One group over the largest aligned slice, packed greedily in order; the rest waits."""
        c = self.cmax
        tok_c = per_rank_tokens(self.L[order], c)
        sel, rest, used_tok = [], [], 0
        for i, t in zip(ids, tok_c.tolist(), strict=True):
            if used_tok + t <= self.M:
                sel.append(i)
                used_tok += t
            else:
                rest.append(i)
        return Step([Group(0, c, sel)]), np.asarray(rest, dtype=np.int64)

    def _relayout(self, sizes_g: list[int]) -> list[int]:
        """Starts of the groups placed largest first from rank 0 (aligned because sizes are powers of two)."""
        order = sorted(range(len(sizes_g)), key=lambda g: (-sizes_g[g], g))
        starts = [0] * len(sizes_g)
        pos = 0
        for g in order:
            starts[g] = pos
            pos += sizes_g[g]
        return starts


class _SizeTree:
    """Groups of one CP size in creation order: a segment tree of (min tokens, min load) per node.

    Leaves are the groups' padded tokens per rank and L²/c loads (empty slots:
    ``EMPTY`` tokens, infinite load). Both only grow, so an update walks up
    while a parent's minimum changes. Queries prune a subtree when even its
    minimum cannot pass a test; since ``fl(a + w)`` is monotone in ``a`` the
    pruning makes the same floating-point comparisons as a scan would.
    """

    EMPTY = 1 << 62

    def __init__(self, capacity: int) -> None:
        cap = 1
        while cap < capacity:
            cap *= 2
        self.cap = cap
        self.tok = [self.EMPTY] * (2 * cap)
        self.load = [float("inf")] * (2 * cap)
        self.gid: list[int] = []  # slot -> global group index

    def set(self, slot: int, tok: int, load: float) -> None:
        """Leaf ``slot`` takes (tok, load); refresh the minima above it."""
        tk, ld = self.tok, self.load
        n = slot + self.cap
        tk[n], ld[n] = t, v = tok, load
        while n > 1:  # (t, v): the minima of node n, just written; its parent's are those and its sibling's
            s = n ^ 1
            if tk[s] < t:
                t = tk[s]
            if ld[s] < v:
                v = ld[s]
            n >>= 1
            if t == tk[n] and v == ld[n]:
                break
            tk[n], ld[n] = t, v

    def first_fit(self, t: int, w: float, room: int, limit: float) -> int:
        """Lowest slot with ``tok + t <= room`` and ``load + w <= limit``; -1 if none."""
        tk, ld, cap = self.tok, self.load, self.cap
        rt = room - t  # integers: tok + t <= room exactly when tok <= room - t
        if tk[1] > rt or ld[1] + w > limit:
            return -1
        stack = [1]  # nodes whose minima pass both tests, left child on top
        pop, push = stack.pop, stack.append
        while stack:
            n = pop()
            if n >= cap:
                return n - cap
            a = 2 * n
            b = a + 1
            if tk[b] <= rt and ld[b] + w <= limit:
                push(b)
            if tk[a] <= rt and ld[a] + w <= limit:
                push(a)
        return -1


class _Microbatch:
    """The groups of one microbatch under construction (one entry per group, at most R of them).

    Per-group arrays serve the rare "every option raises the maximum" scan;
    the common first-fit query goes through one :class:`_SizeTree` per CP size
    (logarithmic in the groups instead of a scan of all of them per sequence).
    """

    def __init__(self, ctx: _Ctx, first: int) -> None:
        R = ctx.R
        self.ctx = ctx
        self.g_sidx = np.zeros(R, dtype=np.int64)
        self.g_load = np.zeros(R)  # L²/c proxy per rank
        self.g_tok = np.zeros(R, dtype=np.int64)  # tokens per rank (padded)
        self.g_start: list[int] = []
        self.members: list[list[int]] = []
        self.ng = 0
        self.free = (1 << R) - 1  # bit r set: rank r free
        self.slice_cache: list[int | None] = [None] * ctx.ns
        self.trees = [_SizeTree(R // c) for c in ctx.size_list]
        self.g_slot: list[int] = []  # group -> slot in its size's tree
        self.BIG = float(4 * R + 4)  # option-order key: size index * BIG + position
        self.kept_max = False  # whether the last choose() kept the maximum load
        self.rows: tuple = (-1, [], [])  # (sequence, tokens row, work row) of the last _without_raise
        k = int(ctx.need[first])
        self.cur_max = float(ctx.work[first, k])
        self.cap = (1.0 + ctx.delta) * float(ctx.L[first]) * ctx.M
        self.big = ctx.size_list[k]
        self.apply(("new", k), first)

    def first_free(self, k: int) -> int:
        """Lowest free aligned slice for size index ``k`` (-1 if none), cached until the free ranks change."""
        v = self.slice_cache[k]
        if v is None:
            v = lowest_free_slice(self.free, self.ctx.size_list[k], self.ctx.R, self.ctx.align)
            self.slice_cache[k] = v
        return v

    def full_for(self, length: int) -> bool:
        """No free rank, and no group has room for ``length`` tokens even split perfectly over the largest group."""
        if self.free:
            return False
        min_tok = min([t.tok[1] for t in self.trees])  # the fullest group's tokens per rank
        return length > (self.ctx.M - min_tok) * self.big

    def choose(self, i: int):
        """("join", group) or ("new", size index) for sequence ``i``, or None if it must wait; ``kept_max``
        says whether the choice keeps the maximum load (then :meth:`join_same` may follow)."""
        choice = self._without_raise(i)
        self.kept_max = choice is not None
        return choice or self._least_raise(i)

    def _without_raise(self, i: int):
        """The first option in option order whose load stays within the current maximum (None if none).

        Option order: sizes ascending; within a size the existing groups in
        creation order, then a new group.
        """
        ctx = self.ctx
        tok_row, work_row = ctx.tok[i].tolist(), ctx.work[i].tolist()
        self.rows = (i, tok_row, work_row)  # for apply()
        M, cur = ctx.M, self.cur_max
        for kk in range(int(ctx.need[i]), ctx.ns):
            tree = self.trees[kk]
            if tree.gid:
                slot = tree.first_fit(tok_row[kk], work_row[kk], M, cur)
                if slot >= 0:
                    return ("join", tree.gid[slot])
            if work_row[kk] <= cur and self.first_free(kk) >= 0:
                return ("new", kk)
        return None

    def _least_raise(self, i: int):
        """Every option raises the maximum: the smallest resulting maximum under the cap (None if none)."""
        ctx, ng = self.ctx, self.ng
        k0 = int(ctx.need[i])
        gs = self.g_sidx[:ng]
        ok = (gs >= k0) & (self.g_tok[:ng] + ctx.tok[i][gs] <= ctx.M)
        newv = self.g_load[:ng] + ctx.work[i][gs]
        okc = ok & (newv <= self.cap)
        best_v, best_key, choice = np.inf, np.inf, None
        if okc.any():
            vv = np.where(okc, newv, np.inf)
            jv = float(vv.min())
            cand = np.where(vv == jv, gs * self.BIG + np.arange(self.ng), np.inf)
            g = int(np.argmin(cand))
            best_v, best_key, choice = jv, float(cand[g]), ("join", g)
        work_row = ctx.work[i]
        for kk in range(k0, ctx.ns):
            v = float(work_row[kk])
            if v > self.cap or self.first_free(kk) < 0:
                continue
            key = kk * self.BIG + 2 * ctx.R + 1  # after the existing groups of its size
            if v < best_v or (v == best_v and key < best_key):
                best_v, best_key, choice = v, key, ("new", kk)
        return choice

    def join_same(self, g: int, i: int, followers: list[int]) -> int:
        """Sequence ``i`` has just joined group ``g`` without raising the maximum: the ``followers`` (the next
        sequences in order, all of ``i``'s length) join it too while it keeps passing that test; returns how
        many did.

        Provably what :meth:`choose` would do for each: an option before ``g`` (a smaller size, an earlier
        group of its size, a new group before it) failed for ``i`` and nothing it tests has changed (the
        maximum did not move, no group or rank changed but ``g``), so the first passing option is ``g``
        as long as ``g`` passes (``tok + t <= M`` and ``load + w <= max``, the same floating-point sums
        as one :meth:`apply` after another). And a join that passes means the microbatch is not full for
        that length (:meth:`full_for`: the group has ``t ≥ L / big`` tokens of room).
        """
        ctx = self.ctx
        kk = int(self.g_sidx[g])
        t, w = int(ctx.tok[i, kk]), float(ctx.work[i, kk])
        tok_g, load_g = int(self.g_tok[g]), float(self.g_load[g])
        M, cur = ctx.M, self.cur_max
        k = 0
        for _ in followers:
            if tok_g + t > M or load_g + w > cur:
                break
            tok_g += t
            load_g += w
            k += 1
        if k:
            self.members[g].extend(followers[:k])
            self.g_tok[g], self.g_load[g] = tok_g, load_g
            self.trees[kk].set(self.g_slot[g], tok_g, load_g)
        return k

    def new_same(self, kk: int, i: int, followers: list[int]) -> int:
        """Sequence ``i`` has just opened a group of size index ``kk`` without raising the maximum: the
        ``followers`` (the next sequences in order, all of ``i``'s length) each open one too while a slice of
        that size is free, unless they would join the new group; returns how many did.

        Provably what :meth:`choose` would do for each, as in :meth:`join_same`: every option before the new
        group failed for ``i`` and still fails (no group but the new ones changed, the maximum did not move,
        free ranks only went), the new groups are all alike (one sequence of this length), so joining one
        passes for none when it does not for the first, and opening another is the next option (``w`` within
        the maximum, a free slice); a free rank means the microbatch is not full.
        """
        ctx = self.ctx
        t, w = int(ctx.tok[i, kk]), float(ctx.work[i, kk])
        if t <= ctx.M - t and w + w <= self.cur_max:  # a follower would join the new group: the usual path
            return 0
        k = 0
        for j in followers:
            if self.first_free(kk) < 0:
                break
            self.apply(("new", kk), j)
            k += 1
        return k

    def apply(self, choice, i: int) -> None:
        """Add sequence ``i`` to a group (``join``) or open a group of a size index on the lowest free slice (``new``)."""
        ctx = self.ctx
        if choice[0] == "join":
            g = choice[1]
            kk = int(self.g_sidx[g])
            ri, tok_row, work_row = self.rows
            if ri == i:  # the rows as Python numbers: the same float64 sums as numpy's
                load = float(self.g_load[g]) + work_row[kk]
                tok = int(self.g_tok[g]) + tok_row[kk]
                self.g_load[g], self.g_tok[g] = load, tok
            else:
                self.g_load[g] += ctx.work[i, kk]
                self.g_tok[g] += ctx.tok[i, kk]
                load, tok = float(self.g_load[g]), int(self.g_tok[g])
            self.members[g].append(i)
            self.trees[kk].set(self.g_slot[g], tok, load)
            if load > self.cur_max:
                self.cur_max = load
            return
        else:
            kk = choice[1]
            c = ctx.size_list[kk]
            start = self.first_free(kk)
            g = self.ng
            self.g_sidx[g], self.g_load[g], self.g_tok[g] = kk, ctx.work[i, kk], ctx.tok[i, kk]
            self.g_start.append(start)
            self.members.append([i])
            self.ng += 1
            self.free &= ~(((1 << c) - 1) << start)
            self.slice_cache = [None] * ctx.ns
            load = float(ctx.work[i, kk])
            self.big = max(self.big, c)
            tree = self.trees[kk]
            slot = len(tree.gid)
            tree.gid.append(g)
            self.g_slot.append(slot)
        self.trees[kk].set(slot, int(self.g_tok[g]), load)
        self.cur_max = max(self.cur_max, load)
