"""``dynamic-solver``'s placement: the greedy that puts each sequence where it raises the modelled time least.

:class:`_Placer` runs step 3 of :mod:`dcpsim.policies.solver` (longest first: join a group, open an aligned
group on free ranks, or open a step), with :class:`_Buckets` (groups indexed by free tokens, for the
least-increase search) and :class:`_Table` (per-sequence costs as Python lists). Times in seconds.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter

import numpy as np

from dcpsim.policies.costs import SeqCosts
from dcpsim.policies.plan import Layout, Plan, PlanArrays, steps_of_arrays
from dcpsim.policies.solver_buckets import _Buckets
from dcpsim.policies.solver_fill import _Fill
from dcpsim.policies.solver_follow import _Follow
from dcpsim.policies.solver_least import _Least
from dcpsim.policies.solver_open import _Open
from dcpsim.policies.solver_table import _Table, placement_order

_INF = float("inf")
_TIME = itemgetter(0)  # a cell key's -time: binary searches by time alone compare floats, not tuples


class _Placer(_Follow, _Least, _Fill, _Open):
    """Greedy placement of one candidate (fixed CP size per sequence); see step 3 of the module docstring.

    Per sequence (larger CP sizes first, then longest first) it compares three
    kinds of option: joining an open group (:meth:`_join_option`), a new
    group on free ranks of an open step (the lowest free aligned slice of each, :meth:`_free_slots`) and a new
    step (:meth:`_new_step_option`), then applies the best (:meth:`_apply`). After a join that adds
    nothing, the next sequences of the same length go through :meth:`_follow` (the same decisions, in bulk);
    after a join that raises its step, :meth:`_fill`; after the first new group won adding nothing,
    :meth:`_open_run`.
    """

    bulk = True  # place runs of equal sequences by :meth:`_follow` (False: one full decision each, the reference)
    track = False  # record whether the height limit changed a decision (:meth:`unbounded_same`; set by the caller)

    def __init__(self, sc: SeqCosts, layout: Layout, cap: int, need: np.ndarray, choice: np.ndarray, height: float,
                 table: _Table | None = None) -> None:
        self.height = height
        self.sc = sc
        self.layout = layout
        self.cap = cap
        self.need = need
        self.choice = choice
        self.R = layout.ranks_per_stage
        self.sizes = [int(c) for c in sc.sizes]
        self.pp = layout.pp
        self.span0 = [int(x) for x in layout.spans_network(np.zeros(len(self.sizes), dtype=np.int64), sc.sizes)]
        self.table = table

    def run(self, name: str, lengths: np.ndarray) -> Plan:
        tab = self.table if self.table is not None else _Table(lengths, self.sc, self.need)
        # larger CP groups first (aligned blocks before the ranks fragment), then longest first
        order = self._order(self.sc, tab)
        self._start()
        n, ids, choice = lengths.size, order.tolist(), self.choice.tolist()
        uid, (time_rows, tok_rows, fams) = tab.uid, self._family_rows(tab, ids, choice)
        pos = 0
        bulk = self.bulk and n > 0
        # per position, the end of its run of equal length and CP size
        run_end = self._run_end = self._run_ends(tab, order) if bulk else []
        # the state's lists and dicts (filled in place, never replaced during the run) and the options' methods, as
        # locals; the new-group options, their comparison (:func:`_better`) and :meth:`_apply` of a join inline
        g_time, g_room, g_code, g_step, gof, S = self.g_time, self.g_room, self.g_code, self.g_step, self.gof, self.S
        join_option, new_step_option, move = self._join_option, self._new_step_option, self.buckets.move
        by_code, parked, min_tok = self.buckets.by_code, self.buckets.parked, self.buckets.min_tok
        span0, pp1, sizes, slots_of, H = self.span0, self.pp - 1, self.sizes, self._slots, self.height
        while pos < n:
            i = ids[pos]
            u, k = uid[i], choice[i]
            trow, tokrow = time_rows[u], tok_rows[u]
            self.zero_join = False
            # each open step's new group of the sequence's size on its lowest free aligned slice (not past the
            # height), as an option (increase, GPU-seconds, -time, 1, action), in step order, kept as ``_new_opts``
            # (for :meth:`_others_lose` and :meth:`_settle`); the slots kept until a group opens
            c = sizes[k]
            slots = slots_of.get(c)
            slots = self._new_slots(c) if slots is None else slots
            self._new_opts = opts = []
            gmax = self.gmax
            for kk, b, act in slots:
                a1, s_k = trow[2 * k + b], S[kk]
                if a1 > (s_k if s_k >= H else H):
                    self.bit = True
                    continue
                sn = a1 if a1 > s_k else s_k
                over = sn - gmax
                opts.append(((sn - s_k) + pp1 * (over if over > 0.0 else 0.0), c * a1, -a1, 1, act))
            best = join_option(trow, tokrow, fams[u], opts[0] if opts and opts[0][0] == 0.0 else None)
            for opt in opts:  # compared in turn: ``best is None or _better(opt, best, gmax)``, inline
                if best is None or (opt[0] < best[0] - (tol := 1e-9 * (gmax + abs(opt[2]) + abs(best[2]))) or (
                        not opt[0] > best[0] + tol and (opt[1] < best[1] * (1 - 1e-9) or (
                            not opt[1] > best[1] * (1 + 1e-9) and (opt[2], opt[3]) < (best[2], best[3]))))):
                    best = opt
            # :meth:`_new_step_option`'s first test inline (a new step adds more than ``best``: the usual case)
            a1 = trow[2 * k + span0[k]]
            over = a1 - gmax
            d = a1 + pp1 * (over if over > 0.0 else 0.0)
            if best is None or not d > best[0] + 1e-9 * (gmax + a1 + abs(best[2])):
                best = new_step_option(trow, k, best)
            if self._pending is not None:
                self._settle(trow, k)
            act = best[4]
            pos += 1
            more = bulk and pos < n and run_end[pos - 1] > pos  # the next sequence has this length
            if act[0] != "join":  # :meth:`_apply`: a new group
                st, t_new = self._open_group(act, k, trow, tokrow)
            else:  # :meth:`_apply`: the join, inline
                g = act[1]
                code, listed, st = g_code[g], g_time[g], g_step[g]
                g_time[g] = t_new = listed + trow[code]
                g_room[g] = room = g_room[g] - tokrow[code >> 1]
                gof.append(g)
                # it adds nothing (the step keeps its height), and the next sequence has this length: the next ones
                # in bulk, the join's move in its cell left to them
                if more and self.zero_join and t_new <= S[st]:
                    pos = self._follow(g, best[1], pos, u, k, listed)
                    continue
                cell = by_code[code][st]
                if g in parked or cell[2] <= 1 or room < min_tok[k]:
                    move(code, st, listed, t_new, g, room)
                else:  # :meth:`_Buckets.move` where the group stays listed in its cell (the usual case), inline
                    keys = cell[0]  # (its entry, one of the list's last few: the last two tested first)
                    del keys[-1 if keys[-1][1] == g else -2 if keys[-2][1] == g else bisect_left(keys, (-listed, g))]
                    key = (-t_new, g)
                    at = bisect_left(keys, key)
                    keys[at:at] = (key,)
            if t_new > S[st]:
                S[st] = t_new
                self.gmax = t_new if t_new > self.gmax else self.gmax
            pos = self._after(best, opts, gmax, (pos, u, k)) if more else pos
        return self._plan(name, lengths, order)

    def _new_slots(self, c: int) -> list[tuple]:
        """:meth:`_free_slots` of size ``c``, kept in ``_slots`` (until a group opens)."""
        slots = self._slots[c] = self._free_slots(c)
        return slots

    def _family_rows(self, tab: _Table, ids: list[int], choice: list[int]) -> tuple[list, list, list]:
        """(time rows, token rows, join families) per distinct length, kept as ``_rows``: only the codes of chosen
        sizes ever hold groups (groups open at a sequence's chosen size), and of those only the spans some aligned
        slice of that size has: each distinct length's codes without the others (which the join searches pass
        over, finding no cell). Also :meth:`_first` of the first sequence of ``ids`` (the placement order)."""
        allowed = 0
        for kk in self._chosen():
            c = self.sizes[kk]
            if c <= self.R:
                self._spans(0, c)  # every aligned start's span, kept in span_rows
            spans = set(self.span_rows.get(c, ())) or {0, 1}
            for b in spans:
                allowed |= 1 << (2 * kk + b)
        fams = tab.fams.get(allowed)  # shared by the candidates with the same chosen sizes
        if fams is None:
            rows = [[c for c in row if allowed >> c & 1] for row in tab.fam_rows]
            fams = tab.fams[allowed] = list(map(rows.__getitem__, tab.fam_id))
        self._rows = (tab.time_rows, tab.tok_rows, fams)
        if ids:
            self._first(tab.time_rows[tab.uid[ids[0]]], choice[ids[0]])
        return self._rows

    def _after(self, best: tuple, opts: list[tuple], gmax: float, at: tuple[int, int, int]) -> int:
        """After the decision ``best`` (applied; ``opts``: its new-group options, ``gmax`` before it) for the
        sequence before position ``pos`` (``at`` = (pos, distinct length, size index)), whose run goes on: the
        next ones in bulk where a path applies (:meth:`_fill` after a join that raised its step but not
        ``gmax``, :meth:`_open_run` after the first new group won adding nothing); the next position."""
        pos, u, k = at
        act = best[4]
        if act[0] == "join":
            if best[0] > 0.0 and self.gmax == gmax and self.fill:
                return self._fill(act[1], pos, u, k)
        elif opts and best is opts[0] and best[0] == 0.0 and self.opens:
            return self._open_run(best, pos, u, k)
        return pos

    def _run_ends(self, tab: _Table, order: np.ndarray) -> list[int]:
        """Per position of ``order``, the end of its run of equal length and CP size."""
        key_u, key_k = tab.inv.take(order), self.choice.take(order)
        cut = np.flatnonzero((key_u[1:] != key_u[:-1]) | (key_k[1:] != key_k[:-1])) + 1
        ends = np.append(cut, order.size)
        out: list[int] = []
        for e, c in zip(ends.tolist(), np.diff(ends, prepend=0).tolist(), strict=True):
            out += [e] * c  # (a run's entries at once: faster than a chain of repeats)
        return out

    def unbounded_same(self) -> bool:
        """Whether :meth:`run` (done) made every decision that a placer of the same candidate without the
        height limit (``height = inf``) makes, so that its plan is that placer's.

        The height enters only as the limit of a join's new time (``lim``), the skip of a new group taller
        than it, and ``gmax``'s start value. ``bit`` records any option the limit excluded (a join within
        the search's tolerance but past ``lim``, a join adding less than the least increase found, a new
        group past the height; a join past it where no join was found unless the other options beat it
        for sure, :meth:`_settle`); without one, each decision is the one made without the limit. ``gmax``
        starts at the height (PP only) and then follows the tallest step, so it is the same after the first
        decision (which opens a step alone whatever ``gmax`` is) when that step is at least the height."""
        if not np.isfinite(self.height) or not self.S:
            return True
        return self.track and not self.bit and (self.pp == 1 or self.t_first >= self.height)

    def _first(self, trow: list[float], k: int) -> None:
        """The first sequence (time row ``trow``, size index ``k``) opens the first step alone (see
        :meth:`unbounded_same`): its time. Where that is below the height limit (PP), :meth:`unbounded_same`
        fails whatever the decisions: the placer stops tracking, taking the paths that do not (the same
        decisions, without the record)."""
        self.t_first = trow[2 * k + self.span0[k]]
        if self.pp > 1 and self.t_first < self.height:
            self.track = False

    def _settle(self, trow: list[float], k: int) -> None:
        """The decision just made had no join, and without the height limit it would have had one that
        raises the makespan by ``_pending``: keep ``bit`` clear only if the first option compared after that
        join (the first new group option kept, ``_new_opts``, else the new step) beats it whatever its
        GPU-seconds and time, so the comparisons go on as they went (:func:`_better`; the join's new time is
        at most ``gmax + _pending``)."""
        d_join, self._pending = self._pending, None
        if self._new_opts:
            d, _, neg_a1 = self._new_opts[0][:3]
            a1 = -neg_a1
        else:
            a1 = float(trow[2 * k + self.span0[k]])
            d = a1 + (self.pp - 1) * max(0.0, a1 - self.gmax)
        if not d < d_join - 1e-9 * (2 * self.gmax + a1 + 2 * d_join):
            self.bit = True

    def _chosen(self) -> list[int]:  # the size indices chosen, ascending: np.unique(choice) without a sort
        return np.flatnonzero(np.bincount(self.choice, minlength=len(self.sizes))).tolist()

    def _order(self, sc: SeqCosts, tab: _Table) -> np.ndarray:
        """The placement order (:func:`~dcpsim.policies.solver_table.placement_order`)."""
        return placement_order(sc, tab, self.choice, self.span0, self._chosen())

    # ------------------------------------------------------------ state
    def _start(self) -> None:
        H = self.height
        self.g_step: list[int] = []
        self.g_sidx: list[int] = []
        self.g_code: list[int] = []  # size index * 2 + leaves-the-domain
        self.g_time: list[float] = []
        self.g_room: list[int] = []  # tokens per rank still free under the cap
        self.g_start: list[int] = []
        # the group of each sequence placed, in placement order (every path places ``ids[pos:]`` in order, each
        # sequence once): a group's members are the sequences at its positions, in order (:meth:`_plan`)
        self.gof: list[int] = []
        self.S: list[float] = []  # step times
        self.used: list[bytearray] = []  # per step: used[r] == 1 once rank r is taken
        self.n_free: list[int] = []  # per step: ranks free
        self.cursor: list[dict[int, int]] = []  # per step and size: no aligned slice below it is free
        self.open_steps: list[int] = []  # steps with free ranks
        self._slots: dict[int, list[tuple]] = {}  # size -> :meth:`_free_slots`, until a group opens
        self.span_rows: dict[int, list[int]] = {}  # size -> leaves-the-domain per aligned start
        # no step grows past the target height H (unless a sequence alone is taller); steps may grow
        # to H before the (pp-1)·max term counts
        self.gmax = H if (self.pp > 1 and np.isfinite(H)) else 0.0
        self._pending: float | None = None  # see :meth:`_settle`
        self.bit = False  # whether the height limit ever excluded an option (see :meth:`unbounded_same`)
        self._was_cut = False  # the last decision's join search ended at the cut with nothing (:meth:`_join_option`)
        self.buckets = _Buckets(self.sc.min_tokens().tolist())

    def _delta(self, s_k: float, newt: float) -> float:
        """Increase of the modelled makespan when a step of height ``s_k`` gets a group of time ``newt``."""
        sn = newt if newt > s_k else s_k  # max(s_k, newt) without the call
        d = sn - s_k
        if self.pp > 1:
            over = sn - self.gmax
            d += (self.pp - 1) * (over if over > 0.0 else 0.0)
        return d

    # ---------------------------------------------------------- options
    def _join_option(self, trow: list[float], tokrow: list[int], fam: list[int], first: tuple | None = None):
        """The best open group to join: least makespan increase, then fewest GPU-seconds, then fullest
        (lowest id on ties); None where there is none, or where the first new group compared after it
        (``first``, an option that adds nothing) beats it for sure.

        Most sequences fit somewhere without raising a step: the search first assumes the least
        increase is 0 and keeps its answer if it found a group that adds exactly nothing; otherwise it
        computes the least increase over every open group and searches with that threshold.

        With ``first`` (time ``a1``, GPU-seconds ``g1``), the searches stop at the first code above
        ``g1·(1 + 2e-9)`` GPU-seconds while they have found nothing: :func:`_better` has ``first`` beat a
        join whose GPU-seconds exceed that (they are equal in increase or ``first`` adds less), or whose
        increase exceeds its tolerance ``1e-9·(gmax + a1 + new time)``; a join keeps ``first`` out only with
        an increase within about ``3e-9·gmax + 1e-9·a1`` (the least increase within that tolerance, the
        pick within ``1e-9·(gmax + d0)`` of it, its new time at most ``gmax`` plus its increase). So
        where the codes as cheap as ``first`` hold no group within ``1e-8·(gmax + a1)``, no join is
        returned: the comparisons then go on from ``first`` as they would after it beat the join.
        """
        thr0 = 1e-9 * (self.gmax + 0.0)
        cut = _INF if first is None else first[1] * (1 + 2e-9)
        # after a decision that ended so (the sequences that open groups come one after another), first the test
        # of :meth:`_cut_none`: where it holds, both searches below return None, changing nothing
        if (first is not None and self._was_cut and self.fast
                and self._cut_none(trow, tokrow, fam, 1e-8 * (self.gmax - first[2]), cut)):
            self._cut, self._outside, self._hits = True, (-_INF, 0), 0
            return None
        self._was_cut = False
        found = self._search(trow, tokrow, fam, thr0, cut)
        if self._cut:  # nothing within thr0 as cheap as ``first``: near zero, or ``first`` beats any join
            if self._search(trow, tokrow, fam, 1e-8 * (self.gmax - first[2]), cut) is None:
                self._was_cut = True
                return None
            found = self._search(trow, tokrow, fam, thr0)
        if found is not None and found[3]:
            self.zero_join = True
            return (0.0, found[0], -found[1], 0, ("join", -found[2]))
        self._excl = _INF
        d0 = self._least_increase_all(trow, tokrow, fam)
        if self._excl < d0:  # the height limit excluded a join that adds less (see :meth:`unbounded_same`)
            if not d0 < np.inf:
                self._pending = self._excl  # no join at all: settled by :meth:`_settle` against the others
                return None
            self.bit = True
        if not d0 < np.inf:
            return None
        if d0 != 0.0 or found is None:
            found = self._search(trow, tokrow, fam, d0 + 1e-9 * (self.gmax + d0))
        return (float(d0), found[0], -found[1], 0, ("join", -found[2]))

    def _search(self, trow: list[float], tokrow: list[int], fam: list[int], thr: float, cut: float = _INF):
        """Among groups whose increase is within ``thr``: the fewest GPU-seconds, then the fullest.

        Codes go by increasing GPU-seconds; the first with such a group sets the least, and only codes
        within the tolerance of it can hold the pick. Returns (GPU-seconds, new time, -group, whether a
        group found adds exactly nothing) or None. Keeps the best (new time, -group) of the cells other than
        the pick's as ``_outside`` and the number of cells with a hit as ``_hits`` (each cell's own pick is the same whatever it is compared with: a cell
        is asked for a pick that beats the other cells' best so far, and the larger of the two is the best).
        While nothing is found, a code above ``cut`` GPU-seconds ends the search (``_cut``: it did).
        """
        best = other = (-_INF, 0)  # (new time, -group): the best pick, and the best of the other cells
        gmin = top = _INF  # top: gmin * (1 + 1e-9)
        zero = self._cut = False
        hits = 0  # cells with a hit
        by_code = self.buckets.by_code
        sizes, S, H, room, track = self.sizes, self.S, self.height, self.g_room, self.track
        for code in fam:
            cells = by_code.get(code)
            if cells is None:
                continue
            add = trow[code]
            gpu = sizes[code >> 1] * add
            # (past top, top is finite: no cut) while nothing is found, a code above ``cut`` ends the search
            if gpu > top or gpu > cut and top == _INF:
                self._cut = top == _INF
                break
            tok = tokrow[code >> 1]
            for st, cell in cells.items():
                s_k = S[st]
                keys, heap = cell[0], cell[1]
                # the cell's lowest listed group raises its step past thr (its increase is at least its new
                # time less s_k), so every one does, and no parked one comes back: no hit, nothing to move
                if heap and -heap[0][0] >= tok:  # parked groups come back
                    self.buckets.unpark(cell, tok, self.g_time, room)
                elif keys and -keys[-1][0] + add - s_k > thr:
                    continue
                # :meth:`_fullest_in_cell` (asked to beat ``other``), inline: the prefix's end p (its usual answer
                # tested inline), the groups without room from there parked, then the pick at p
                lim = (s_k if s_k >= H else H) * (1 + 1e-12)
                n = len(keys)
                v = -((lim if lim < s_k + thr else s_k + thr) - add)
                # bisect_left(keys, v, key=_TIME): the suffix of -times at least v, usually of one entry or none
                p = n if n == 0 or keys[-1][0] < v else n - 1 if n == 1 or keys[-2][0] < v \
                    else bisect_left(keys, v, 0, n - 1, key=_TIME)
                p = p if ((p == 0 or (nt := add - keys[p - 1][0]) > lim or nt - s_k > thr) and (
                    p == n or (nb := add - keys[p][0]) <= lim and (nb <= s_k or self._raise(nb, s_k) <= thr))) \
                    else self._prefix_end(keys, p, s_k, add, lim, thr)
                if track:
                    self._track_prefix(keys, p, s_k, (add, lim, thr))
                n = self._park_from(cell, p, tok) if p < n and room[keys[p][1]] < tok else n
                if p == n:
                    continue  # no hit
                neg_t, gid = keys[p]
                newt = add - neg_t
                zero = zero or newt <= s_k
                gmin, top = (gpu, gpu * (1 + 1e-9)) if gpu < gmin else (gmin, top)
                hits += 1
                if newt < other[0]:
                    continue  # the cell's pick does not beat the other cells' best
                # the groups after it of the same time have higher ids (keys sort by (-time, id)): skip them at once
                p = bisect_right(keys, neg_t, p + 2, key=_TIME) if p + 1 < n and keys[p + 1][0] == neg_t else p + 1
                # a lower time whose new time rounds equal (rare): the lowest id with room among them
                gid = self._tie_gid(keys, p, (add, newt, tok), gid) if p < n and add - keys[p][0] == newt else gid
                pick = (newt, -gid)
                if pick > other:  # the cell's pick beats the other cells' best
                    best, other = (pick, best) if pick > best else (best, pick)
        self._outside, self._hits = other, hits
        if gmin == _INF:
            return None
        return (gmin, best[0], best[1], zero)  # (Python floats: the rows are lists of them)

    def _prefix_end(self, keys: list, p: int, s_k: float, add: float, lim: float, thr: float) -> int:
        """The start of the suffix of ``keys`` (a cell's (-time, group) ascending: times descending) whose groups
        are *within*: joining one (a new time ``newt = time + add``) stays under ``lim`` and raises the makespan
        by at most ``thr`` (by ``sn - s_k``, ``sn = max(s_k, newt)``, plus ``pp - 1`` times the excess of ``sn``
        over ``gmax``). From ``p``, a binary search's guess: moved down past the groups within, then up past
        those not within (a group whose new time is at most ``s_k`` and ``lim`` adds nothing: within)."""
        n = len(keys)
        pp1, gmax = self.pp - 1, self.gmax
        while p > 0:
            newt = add - keys[p - 1][0]
            if newt > lim:
                break
            sn = newt if newt > s_k else s_k
            d = sn - s_k
            if pp1 > 0 and sn - gmax > 0.0:
                d += pp1 * (sn - gmax)
            if not d <= thr:
                break
            p -= 1
        while p < n:
            newt = add - keys[p][0]
            if newt <= lim:
                if newt <= s_k:
                    break
                d = newt - s_k
                if pp1 > 0 and newt - gmax > 0.0:
                    d += pp1 * (newt - gmax)
                if d <= thr:
                    break
            p += 1
        return p

    def _fullest_in_cell(self, cell, s_k: float, add: float, lim: float, tok: int, thr: float, best: tuple):
        """A cell's groups with token room within ``thr``: (whether one adds nothing, the pick if it beats
        ``best`` by (new time, -group), else None); None if the cell has no such group. The groups passed
        without room are parked.

        The groups within ``thr`` are a suffix of the list (times descending; the increase grows with the
        time): its start comes from a binary search at ``s_k + thr`` (or ``lim``), checked against the full test
        on either side (past the height limit is never within; at most the step's height adds nothing).
        The pick is the highest group with room there, then the lowest id among the groups with room and
        the same new time (a new time can round equal for different times).
        """
        room = self.g_room
        heap = cell[1]
        if heap and -heap[0][0] >= tok:
            self.buckets.unpark(cell, tok, self.g_time, room)
        keys = cell[0]
        x = (lim if lim < s_k + thr else s_k + thr) - add
        n = len(keys)
        # keys[p:]: time at most x (bisect_left(keys, -x, key=_TIME); the suffix usually of one entry or none)
        p = n if n == 0 or keys[-1][0] < -x else n - 1 if n == 1 or keys[-2][0] < -x \
            else bisect_left(keys, -x, 0, n - 1, key=_TIME)
        # :meth:`_prefix_end`'s usual answer, p itself, tested inline (the entry before p is not within, its new
        # time past the limit or above s_k by more than thr, a sufficient test; the one at p is within)
        if not ((p == 0 or (nt := add - keys[p - 1][0]) > lim or nt - s_k > thr)
                and (p == n or (nb := add - keys[p][0]) <= lim and (nb <= s_k or self._raise(nb, s_k) <= thr))):
            p = self._prefix_end(keys, p, s_k, add, lim, thr)
        if self.track and p > 0 and (nt := add - keys[p - 1][0]) > lim and nt - s_k <= thr:  # (1st term)
            if self._delta(s_k, nt) <= thr:  # within without the limit: the suffix would go on
                self.bit = True
        pos = p
        while pos < n and room[keys[pos][1]] < tok:
            pos += 1
        if pos > p:
            self.buckets.park(cell, p, pos, room)  # the list from pos on moves down to p
            n -= pos - p
            pos = p
        if pos == n:
            return None
        neg_t, gid = keys[pos]
        newt = add - neg_t
        zero = newt <= s_k
        if newt < best[0]:
            return (zero, None)
        # the groups after it of the same time have higher ids (keys sort by (-time, id)): skip them at once
        pos = bisect_right(keys, neg_t, pos + 2, key=_TIME) if pos + 1 < n and keys[pos + 1][0] == neg_t else pos + 1
        while pos < n and add - keys[pos][0] == newt:
            if keys[pos][1] < gid and room[keys[pos][1]] >= tok:
                gid = keys[pos][1]
            pos += 1
        pick = (newt, -gid)
        return (zero, pick if pick > best else None)

    def _new_step_option(self, trow: list[float], k: int, best):
        """A new step holding only this sequence's group, if it beats ``best``."""
        c, pp1 = self.sizes[k], self.pp - 1
        a1 = float(trow[2 * k + self.span0[k]])
        over = a1 - self.gmax
        d = a1 + pp1 * (over if over > 0.0 else 0.0)
        if best is not None and d > best[0] + 1e-9 * (self.gmax + a1 + abs(best[2])):
            return best  # :func:`_better`'s larger-increase test, without building the option
        opt = (d, c * a1, -a1, 2, ("step",))
        if best is None or _better(opt, best, self.gmax):
            best = opt
        return best

    # ------------------------------------------------------------ apply
    def _apply(self, act: tuple, k: int, trow: list[float], tokrow: list[int]) -> None:
        if act[0] == "join":
            g = act[1]
            g_time, code = self.g_time, self.g_code[g]
            old = g_time[g]
            g_time[g] = t_new = old + trow[code]
            self.g_room[g] = room = self.g_room[g] - tokrow[self.g_sidx[g]]
            self.gof.append(g)
            st = self.g_step[g]
            self.buckets.move(code, st, old, t_new, g, room)
        else:
            st, t_new = self._open_group(act, k, trow, tokrow)
        if t_new > self.S[st]:
            self.S[st] = t_new
            if t_new > self.gmax:
                self.gmax = t_new

    def _open_group(self, act: tuple, k: int, trow: list[float], tokrow: list[int]) -> tuple[int, float]:
        """Open the group of ``act`` (on a new step for ``("step",)``); return its step and time."""
        c = self.sizes[k]
        self._slots.clear()  # ranks are taken: the free slices move
        if act[0] == "step":
            st = len(self.S)
            self.S.append(0.0)
            self.used.append(bytearray(self.R))
            self.n_free.append(self.R)
            self.cursor.append({})
            self.open_steps.append(st)
            start = self._free_start(st, c)
            b = self._spans(start, c)
        else:
            _, st, start, b = act
        t_new = float(trow[2 * k + b])
        g = len(self.g_step)
        self.g_step.append(st)
        self.g_sidx.append(k)
        self.g_code.append(2 * k + b)
        self.g_time.append(t_new)
        self.g_room.append(self.cap - tokrow[k])
        self.g_start.append(start)
        self.gof.append(g)
        self.buckets.add(2 * k + b, st, t_new, g, self.g_room[g])
        self.used[st][start : start + c] = b"\x01" * c
        self.n_free[st] -= c
        if not self.n_free[st]:
            self.open_steps.remove(st)
        return st, t_new

    def _plan(self, name: str, lengths: np.ndarray, seqs: np.ndarray) -> Plan:
        """The plan: longest steps first (any order has the same modelled makespan), each step's groups by
        first rank (distinct within a step), as :func:`steps_of_arrays` steps of the groups' arrays (so
        :meth:`Plan.arrays` costs nothing until a step's groups are read). ``seqs``: the sequences in placement
        order (``gof``'s positions); each group's members are its positions' sequences, in order (a stable sort
        of the positions by the group's rank in the plan, 16-bit where it fits: by radix)."""
        n_steps, ng = len(self.S), len(self.g_step)
        rank = np.empty(n_steps, dtype=np.int64)
        rank[sorted(range(n_steps), key=lambda s: (-self.S[s], s))] = np.arange(n_steps)
        step = rank[np.asarray(self.g_step, dtype=np.int64)] if ng else np.zeros(0, dtype=np.int64)
        start = np.asarray(self.g_start, dtype=np.int64)
        order = np.lexsort((start, step))
        gof = np.fromiter(self.gof, dtype=np.int64, count=len(self.gof))  # np.asarray(self.gof), in one C pass
        if gof.size != seqs.size:
            raise RuntimeError(f"placed {gof.size} of {seqs.size} sequences")  # every path places each one once
        grank = np.empty(ng, dtype=np.int64)
        grank[order] = np.arange(ng)
        key = grank.take(gof)
        ids = seqs.take(np.argsort(key.astype(np.uint16) if ng <= 1 << 16 else key, kind="stable"))
        counts = np.bincount(gof, minlength=ng)[order]
        a = PlanArrays(per_step=np.bincount(step, minlength=n_steps), step=step[order], start=start[order],
                       size=np.asarray(self.sizes, dtype=np.int64)[np.asarray(self.g_sidx, dtype=np.int64)][order]
                       if ng else np.zeros(0, dtype=np.int64), counts=counts, ids=ids)
        return Plan(name, self.layout, lengths, steps_of_arrays(a), True)


def _better(a: tuple, b: tuple, scale: float) -> bool:
    """Option ``a`` beats ``b``: smaller makespan increase, then fewer GPU-seconds, then fuller group, then kind."""
    tol = 1e-9 * (scale + abs(a[2]) + abs(b[2]))
    if a[0] < b[0] - tol:
        return True
    if a[0] > b[0] + tol:
        return False
    if a[1] < b[1] * (1 - 1e-9):
        return True
    if a[1] > b[1] * (1 + 1e-9):
        return False
    return (a[2], a[3]) < (b[2], b[3])
