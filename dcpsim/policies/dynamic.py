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
slices are found from a per-size cursor over a table of taken ranks (ranks are
only taken within a microbatch, so the lowest free slice only moves up), a microbatch stops
early once even the shortest remaining sequence cannot be placed, and the
doubling of small groups uses a heap and re-lays the groups once. The
per-sequence tables (tokens per rank, L²/c for every size) are kept per
distinct length, and a run of equal lengths is placed in bulk where the
decision is provably that of choosing for each (a run joining one group with
one tree update, or opening groups one each).
tests/test_policy_scale.py checks the plans equal those of a scan of every
group per sequence, tests/test_dynamic_bulk.py those of choosing for every
sequence.
"""

from __future__ import annotations

import heapq

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.base import Policy
from dcpsim.policies.fit import dynamic_fit, dynamic_sizes, smallest_fitting_size
from dcpsim.policies.plan import Group, Layout, Plan, Step, groups_per_size
from dcpsim.policies.size_tree import SizeTree as _SizeTree


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
        order = np.lexsort((np.arange(lengths.size), -lengths))  # longest first, ties by id
        ctx = _Ctx(lengths, layout, self.cap_delta, order)
        steps: list[Step] = []
        stats = {"doublings": 0, "full_group_fills": 0}
        while order.size:
            step, order = ctx.microbatch(order, stats)
            steps.append(step)
        meta = {"microbatches": len(steps), "groups_per_size": groups_per_size(steps), **stats}
        return Plan(self.name, layout, lengths, steps, True, meta=meta)


BULK_SAME = True  # tests: False chooses for every sequence of an equal-length run (the reference of the bulk paths)
BULK_OPEN = True  # tests: False opens new_same's groups one apply at a time (the reference of _open_many)


class _Ctx:
    """Per-batch tables and the microbatch builder.

    The tables are kept per *distinct* length (``u[i]``: the distinct length of sequence ``i``; a batch of
    262,144 sequences has some 14,000): padded tokens per rank and the L²/c proxy for every CP size, both as
    numpy arrays and as Python lists for the per-sequence loop (equal lengths have equal rows, so the numbers
    are those of a per-sequence table).
    """

    def __init__(self, lengths: np.ndarray, layout: Layout, delta: float, order: np.ndarray) -> None:
        """``order``: the sequence ids longest first (their distinct lengths are numbered in that order)."""
        self.L = lengths
        self.layout = layout
        self.R = layout.ranks_per_stage
        self.M = layout.max_tokens_per_rank
        self.delta = delta
        lens = lengths[order]
        first = np.ones(lens.size, dtype=bool)
        first[1:] = lens[1:] != lens[:-1]
        Lu = lens[first]  # distinct lengths, longest first
        u = np.empty(lens.size, dtype=np.int64)
        u[order] = np.cumsum(first) - 1
        sizes = dynamic_sizes(layout)
        need_u = smallest_fitting_size(Lu, sizes, self.M)
        if (need_u < 0).any():
            dynamic_fit(lengths, layout)  # raises InfeasibleError naming the longest sequence that fits nowhere
        self.sizes = sizes
        self.size_list = [int(c) for c in sizes]
        self.ns = sizes.size
        self.u = u
        self.Lu_list: list[int] = Lu.tolist()
        self.need_u = need_u
        self.need_list: list[int] = need_u.tolist()
        Lf = Lu.astype(np.float64)
        # per distinct length and size: padded tokens per rank and the L²/c proxy
        self.tok_u = per_rank_tokens(Lu[:, None], sizes[None, :])  # (n distinct, ns)
        self.work_u = (Lf * Lf)[:, None] / sizes[None, :]  # (n distinct, ns)
        self.tok_rows: list[list[int]] = self.tok_u.tolist()
        self.work_rows: list[list[float]] = self.work_u.tolist()
        self.cmax = int(sizes[-1])

    # per-sequence views of the tables (the reference scans in the tests read these)
    @property
    def need(self) -> np.ndarray:
        """Per sequence: index of the smallest CP size that holds it."""
        return self.need_u[self.u]

    @property
    def tok(self) -> np.ndarray:
        """Per sequence and size: padded tokens per rank, shape (n, ns)."""
        return self.tok_u[self.u]

    @property
    def work(self) -> np.ndarray:
        """Per sequence and size: the L²/c load proxy, shape (n, ns)."""
        return self.work_u[self.u]

    def microbatch(self, order: np.ndarray, stats: dict) -> tuple[Step, np.ndarray]:
        """Build one microbatch from ``order`` (ids, longest first); return it and the waiting ids.

        Phases: the longest sequence opens the first group; every other one
        takes the option that raises the maximum rank load least (or waits);
        then empty ranks are filled (doubling groups, or one group over all ranks).
        """
        ids = order.tolist()
        n = len(ids)
        uo = self.u[order]
        change = np.flatnonzero(uo[1:] != uo[:-1]) + 1  # runs of equal lengths (they descend)
        starts, ends = [0, *change.tolist()], [*change.tolist(), n]
        run_u = uo[starts].tolist()
        mb = _Microbatch(self, ids[0], run_u[0])
        leftovers: list[int] = []
        Lu = self.Lu_list
        shortest = Lu[run_u[-1]]
        bulk = BULK_SAME
        pos = 1
        for r, ui in enumerate(run_u):
            end = ends[r]
            length = Lu[ui]
            mb.ui = ui
            while pos < end:
                i = ids[pos]
                if mb.full_for(length):
                    leftovers.append(i)
                    if mb.full_for(shortest):  # nor can any shorter remaining sequence be placed
                        leftovers.extend(ids[pos + 1 :])
                        return self._fill_empty_ranks(mb, order, ids, np.asarray(leftovers, dtype=np.int64), stats)
                    pos += 1
                    continue
                choice = mb.choose(i)
                pos += 1
                if choice is None:
                    leftovers.append(i)
                elif bulk and mb.kept_max and end > pos:
                    if choice[0] == "join":
                        pos += mb.join_run(choice[1], i, ids, pos, end)
                    else:
                        mb.apply(choice, i)
                        pos += mb.new_same(choice[1], i, ids, pos, end)
                else:
                    mb.apply(choice, i)
        return self._fill_empty_ranks(mb, order, ids, np.asarray(leftovers, dtype=np.int64), stats)

    def _fill_empty_ranks(self, mb: _Microbatch, order: np.ndarray, ids: list[int], left: np.ndarray,
                          stats: dict) -> tuple[Step, np.ndarray]:
        """Ranks left empty: double the smallest group while it fits; failing that, one group over all ranks.

        The doubled group is the first-created one of the smallest size (a heap
        keyed by (size, creation index)); groups are re-laid once at the end.
        """
        sizes_g = [self.size_list[k] for k in mb.g_k]
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


class _Microbatch:
    """The groups of one microbatch under construction (one entry per group, at most R of them).

    Per-group arrays serve the rare "every option raises the maximum" scan;
    the common first-fit query goes through one :class:`_SizeTree` per CP size
    (logarithmic in the groups instead of a scan of all of them per sequence). A group's tokens and load as
    Python numbers are its tree leaf (the arrays hold the same values).
    """

    def __init__(self, ctx: _Ctx, first: int, ui: int) -> None:
        """``first``: the longest sequence (it opens the first group); ``ui``: its distinct-length index."""
        R = ctx.R
        self.ctx = ctx
        self.g_sidx = np.zeros(R, dtype=np.int64)
        self.g_load = np.zeros(R)  # L²/c proxy per rank
        self.g_tok = np.zeros(R, dtype=np.int64)  # tokens per rank (padded)
        self.g_k: list[int] = []  # group -> size index (g_sidx as Python ints)
        self.g_start: list[int] = []
        self.members: list[list[int]] = []
        self.ng = 0
        self.used = bytearray(R)  # rank r taken: used[r] == 1
        self.n_free = R
        self.cursor = [0] * ctx.ns  # per size index: no aligned slice below it is free (free ranks only go)
        self.trees = [_SizeTree(R // c) for c in ctx.size_list]
        self.g_slot: list[int] = []  # group -> slot in its size's tree
        self.BIG = float(4 * R + 4)  # option-order key: size index * BIG + position
        self.kept_max = False  # whether the last choose() kept the maximum load
        self.ui = ui  # distinct-length index of the sequence being placed (set by _Ctx.microbatch per run)
        k = ctx.need_list[ui]
        self.cur_max = ctx.work_rows[ui][k]
        self.cap = (1.0 + ctx.delta) * float(ctx.Lu_list[ui]) * ctx.M
        self.big = ctx.size_list[k]
        self.apply(("new", k), first)

    def first_free(self, k: int) -> int:
        """Start of the lowest aligned run of the size's ranks that are all free, for size index ``k`` (-1 if
        none). Ranks are only taken within a microbatch, so the answer only moves up: the search goes on from
        the last one (each aligned slice of a size is passed once per microbatch)."""
        c = self.ctx.size_list[k]
        s, used, R = self.cursor[k], self.used, self.ctx.R
        while s + c <= R:
            if used[s] == 0 and (c == 1 or used.find(1, s, s + c) < 0):
                self.cursor[k] = s
                return s
            s += c
        self.cursor[k] = s
        return -1

    @property
    def free(self) -> int:
        """The free ranks as a bitmask (bit r set: rank r free)."""
        return sum(1 << r for r, b in enumerate(self.used) if not b)

    def full_for(self, length: int) -> bool:
        """No free rank, and no group has room for ``length`` tokens even split perfectly over the largest group."""
        if self.n_free:
            return False
        min_tok = min([t.tok[1] for t in self.trees])  # the fullest group's tokens per rank
        return length > (self.ctx.M - min_tok) * self.big

    def choose(self, i: int):
        """("join", group) or ("new", size index) for sequence ``i``, or None if it must wait; ``kept_max``
        says whether the choice keeps the maximum load (then :meth:`join_run` or :meth:`new_same` may follow)."""
        choice = self._without_raise(i)
        self.kept_max = choice is not None
        return choice or self._least_raise(i)

    def _without_raise(self, i: int):
        """The first option in option order whose load stays within the current maximum (None if none).

        Option order: sizes ascending; within a size the existing groups in
        creation order, then a new group.
        """
        ctx = self.ctx
        ui = self.ui
        tok_row, work_row = ctx.tok_rows[ui], ctx.work_rows[ui]
        M, cur = ctx.M, self.cur_max
        for kk in range(ctx.need_list[ui], ctx.ns):
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
        ui = self.ui
        k0 = ctx.need_list[ui]
        gs = self.g_sidx[:ng]
        ok = (gs >= k0) & (self.g_tok[:ng] + ctx.tok_u[ui][gs] <= ctx.M)
        newv = self.g_load[:ng] + ctx.work_u[ui][gs]
        okc = ok & (newv <= self.cap)
        best_v, best_key, choice = np.inf, np.inf, None
        if okc.any():
            vv = np.where(okc, newv, np.inf)
            jv = float(vv.min())
            cand = np.where(vv == jv, gs * self.BIG + np.arange(self.ng), np.inf)
            g = int(np.argmin(cand))
            best_v, best_key, choice = jv, float(cand[g]), ("join", g)
        work_row = ctx.work_rows[ui]
        for kk in range(k0, ctx.ns):
            v = work_row[kk]
            if v > self.cap or self.first_free(kk) < 0:
                continue
            key = kk * self.BIG + 2 * ctx.R + 1  # after the existing groups of its size
            if v < best_v or (v == best_v and key < best_key):
                best_v, best_key, choice = v, key, ("new", kk)
        return choice

    def join_run(self, g: int, i: int, ids: list[int], pos: int, end: int) -> int:
        """Sequence ``i`` joins group ``g`` (chosen without raising the maximum), then its followers
        ``ids[pos:end]`` (the next sequences in order, all of ``i``'s length) join it too while it keeps
        passing that test; returns how many followers did. The group's tree is updated once.

        Provably what :meth:`choose` and :meth:`apply` would do for each follower: an option before ``g``
        (a smaller size, an earlier group of its size, a new group before it) failed for ``i`` and nothing it
        tests has changed (the maximum did not move, no group or rank changed but ``g``), so the first passing
        option is ``g`` as long as ``g`` passes: ``tok + t <= M`` (``k`` followers fit in tokens exactly when
        ``k <= (M - tok) // t``, integers) and ``load + w <= max`` (the same floating-point sums, one join after
        another). And a join that passes means the microbatch is not full for that length (:meth:`full_for`:
        the group has ``t ≥ L / big`` tokens of room).
        """
        ctx = self.ctx
        kk = self.g_k[g]
        tree = self.trees[kk]
        slot = self.g_slot[g]
        leaf = slot + tree.cap
        ui = self.ui
        t, w = ctx.tok_rows[ui][kk], ctx.work_rows[ui][kk]
        tok_g, load_g = tree.tok[leaf] + t, tree.load[leaf] + w
        cur = self.cur_max
        lim = min((ctx.M - tok_g) // t, end - pos)
        k = 0
        while k < lim:
            nxt = load_g + w
            if nxt > cur:
                break
            load_g = nxt
            k += 1
        tok_g += k * t
        mem = self.members[g]
        mem.append(i)
        if k:
            mem.extend(ids[pos : pos + k])
        self.g_tok[g], self.g_load[g] = tok_g, load_g
        tree.set(slot, tok_g, load_g)
        if load_g > cur:
            self.cur_max = load_g
        return k

    def new_same(self, kk: int, i: int, ids: list[int], pos: int, end: int) -> int:
        """Sequence ``i`` has just opened a group of size index ``kk`` without raising the maximum: the
        followers ``ids[pos:end]`` (the next sequences in order, all of ``i``'s length) each open one too while
        a slice of that size is free; or, when a follower passes the join test of the new group, they join it
        (:meth:`join_run`); returns how many followers were placed.

        Provably what :meth:`choose` would do for each, as in :meth:`join_run`: every option before the new
        group failed for ``i`` and still fails (no group but the new ones changed, the maximum did not move,
        free ranks only went), the new groups are all alike (one sequence of this length), so joining one
        passes for none when it does not for the first, and opening another is the next option (``w`` within
        the maximum, a free slice); a free rank means the microbatch is not full. When the join test passes,
        the new group is the first passing option (the ones before it still fail) and the microbatch is not
        full for that length (see :meth:`join_run`).
        """
        ctx = self.ctx
        ui = self.ui
        t, w = ctx.tok_rows[ui][kk], ctx.work_rows[ui][kk]
        if t <= ctx.M - t and w + w <= self.cur_max:  # the first follower joins the new group, and so on
            return 1 + self.join_run(self.ng - 1, ids[pos], ids, pos + 1, end)
        if not BULK_OPEN:
            k = 0
            new = ("new", kk)
            while pos + k < end and self.first_free(kk) >= 0:
                self.apply(new, ids[pos + k])
                k += 1
            return k
        return self._open_many(kk, ids[pos:end])

    def _open_many(self, kk: int, seqs: list[int]) -> int:
        """:meth:`apply` ``("new", kk)`` for each of ``seqs`` in order while a slice of that size is free, at once
        (returns how many opened a group): the lowest free aligned slices in order (taking one leaves the other
        slices of its size free: they are aligned, so they do not overlap), the groups' entries and the tree's
        leaves set together, its minima refreshed once (:meth:`_SizeTree.set_many`). The same state as one apply
        after another (the search cursor included); :data:`BULK_OPEN` off is that loop (the reference)."""
        if not seqs:
            return 0
        ctx = self.ctx
        c, R, used = ctx.size_list[kk], ctx.R, self.used
        s, want = self.cursor[kk], len(seqs)
        starts: list[int] = []
        while len(starts) < want:
            if c == 1:
                s = used.find(0, s)
                if s < 0:
                    s = R  # where first_free's scan stops
                    break
            else:
                while s + c <= R and not (used[s] == 0 and used.find(1, s, s + c) < 0):
                    s += c
                if s + c > R:
                    break
            starts.append(s)
            s += c
        k = len(starts)
        self.cursor[kk] = starts[-1] if k == want else s
        if not k:
            return 0
        ui = self.ui
        tok, load = ctx.tok_rows[ui][kk], ctx.work_rows[ui][kk]
        g0 = self.ng
        self.g_sidx[g0 : g0 + k], self.g_load[g0 : g0 + k], self.g_tok[g0 : g0 + k] = kk, load, tok
        self.g_k.extend([kk] * k)
        self.g_start.extend(starts)
        self.members.extend([i] for i in seqs[:k])
        self.ng += k
        one = b"\x01" * c
        for st in starts:
            used[st : st + c] = one
        self.n_free -= c * k
        if c > self.big:
            self.big = c
        tree = self.trees[kk]
        slot = len(tree.gid)
        tree.gid.extend(range(g0, g0 + k))
        self.g_slot.extend(range(slot, slot + k))
        tree.set_many(slot, k, tok, load)
        if load > self.cur_max:
            self.cur_max = load
        return k

    def apply(self, choice, i: int) -> None:
        """Add sequence ``i`` to a group (``join``) or open a group of a size index on the lowest free slice (``new``)."""
        ctx = self.ctx
        ui = self.ui
        if choice[0] == "join":
            g = choice[1]
            kk = self.g_k[g]
            tree = self.trees[kk]
            slot = self.g_slot[g]
            leaf = slot + tree.cap
            load = tree.load[leaf] + ctx.work_rows[ui][kk]  # Python floats: the same float64 sums as numpy's
            tok = tree.tok[leaf] + ctx.tok_rows[ui][kk]
            self.g_load[g], self.g_tok[g] = load, tok
            self.members[g].append(i)
            tree.set(slot, tok, load)
            if load > self.cur_max:
                self.cur_max = load
            return
        kk = choice[1]
        c = ctx.size_list[kk]
        start = self.first_free(kk)
        g = self.ng
        tok, load = ctx.tok_rows[ui][kk], ctx.work_rows[ui][kk]
        self.g_sidx[g], self.g_load[g], self.g_tok[g] = kk, load, tok
        self.g_k.append(kk)
        self.g_start.append(start)
        self.members.append([i])
        self.ng += 1
        self.used[start : start + c] = b"\x01" * c
        self.n_free -= c
        if c > self.big:
            self.big = c
        tree = self.trees[kk]
        slot = len(tree.gid)
        tree.gid.append(g)
        self.g_slot.append(slot)
        tree.set(slot, tok, load)
        if load > self.cur_max:
            self.cur_max = load
