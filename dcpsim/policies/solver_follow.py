"""``dynamic-solver``'s placement of runs of equal sequences: the bulk path of :class:`~dcpsim.policies.solver_placer._Placer`.

The placer sorts sequences larger CP size first, then longest first, so sequences of one length come one
after another. After one of them joins a group without raising its step (the usual case), the next ones
of that length are placed here, provably as the per-sequence decision would place them
(:meth:`_Follow._follow` says why), at a few list operations each instead of a full search: the group
keeps taking them while it can, then its *twins* (groups of the same time and room) take them in order.
Where the placer does not track the height limit's effect, the run is one walk down the cell's sorted list
(:meth:`_Follow._walk`: the picks are its groups with room, in order; twins take one each in a tight loop) and
the list changes once at the end.
``tests/test_policy_scale.py`` checks the plans equal those of one full decision per sequence and those
of a scan of every group. Times in seconds.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heappush
from itertools import accumulate, repeat
from operator import itemgetter

import numpy as np

_INF = float("inf")
_TIME, _ID = itemgetter(0), itemgetter(1)  # a cell key's -time and group id (binary searches by one)


def _take(t: float, r: int, add: float, tok: int, floor: float, s_k: float, most: int) -> tuple[int, float, int]:
    """How many of ``most`` equal sequences (each adding ``add`` seconds and ``tok`` tokens) a group of time
    ``t`` and room ``r`` takes one after another while it has room and its new time stays within
    ``[floor, s_k]``; returns (that count, its time and room after them).

    The loop's definition: ``while c < most: nt = t + add; if not (r >= tok and floor <= nt <= s_k): break;
    t, r, c = nt, r - tok, c + 1``. The room allows ``r // tok`` of them; the new times only grow, so the floor
    is checked once and the height ends a prefix: the times are the same sums, added one after another in
    C (:func:`itertools.accumulate`), the end found by a binary search; a count capped by an estimate of the
    height's room goes on by the loop."""
    if tok <= 0 or most < 8:
        c = 0
        while c < most:
            nt = t + add
            if not (r >= tok and floor <= nt <= s_k):
                break
            t, r, c = nt, r - tok, c + 1
        return c, t, r
    cap = min(most, r // tok)
    if cap <= 0 or not (floor <= t + add <= s_k):
        return 0, t, r
    est = (s_k - t) / add if add > 0.0 else float(cap)
    n = cap if est >= cap else min(cap, int(est * (1 + 1e-9)) + 2)
    sums = list(accumulate(repeat(add, n), initial=t))  # sums[j]: the time after j of them
    c = bisect_right(sums, s_k, 1) - 1
    t, r = sums[c], r - c * tok
    while c < most:  # past the estimate (it was short): the loop from there
        nt = t + add
        if not (r >= tok and floor <= nt <= s_k):
            break
        t, r, c = nt, r - tok, c + 1
    return c, t, r


class _Follow:
    """The bulk path of :class:`~dcpsim.policies.solver_placer._Placer` (a mixin: it uses the placer's state)."""

    walk = True  # :meth:`_walk` where the height limit's effect is not tracked (False: :meth:`_follow`'s loop)
    # the shortcuts :meth:`_walk`'s lone first pick (:meth:`_settle_first`) and the join search's cut test
    # (:meth:`~dcpsim.policies.solver_placer._Placer._cut_none`); False: the general paths (the reference)
    fast = True

    def _follow(self, g: int, gmin: float, pos: int, u: int, k: int, listed: float) -> int:
        """The sequence at ``pos - 1`` has just joined group ``g`` adding nothing to its step (the zero-increase
        join search's pick): place the next sequences of the same length while each one's pick is provably
        a group of ``g``'s cell that adds nothing; return the position of the first one left to the full
        decision.

        Why it is the full decision: joins that add nothing change no step time, free rank or other cell,
        so the new-group and new-step options are those the first sequence had, and they lose to any such
        join by more than :func:`_better`'s tolerance (checked once, for every join time up to the step's
        height); the join search's codes, and its fewest GPU-seconds ``gmin``, stay those of the first
        sequence while ``g``'s cell holds a hit; so the pick is the larger (new time, -group) of ``g``'s
        cell's pick (:meth:`_fullest_in_cell`, exact) and the best of every other cell searched, which
        nothing here changes (computed once). A pick that raises its step, or lies outside ``g``'s cell,
        ends the run. ``g`` is still listed in its cell at time ``listed`` (its time before that join): its
        move is made here, once, with those of the sequences it takes next.
        """
        trow, tokrow = self._rows[0][u], self._rows[1][u]
        code, st = self.g_code[g], self.g_step[g]
        s_k = self.S[st]
        floor = self._others_lose(k, trow, s_k, gmin)
        if floor is None:
            self._move(g, code, st, listed)
            return pos
        if self.walk and not self.track:
            pos = self._walk(g, floor, pos, trow, tokrow, listed)
            if self._exhausted and pos < self._run_end[pos - 1]:  # the run goes on: in the other cell?
                pos = self._next_cell(code, gmin, pos, u, k)
            return pos
        return self._follow_run(g, floor, pos, (trow, tokrow), listed)

    def _follow_run(self, g: int, floor: float, pos: int, rows: tuple[list[float], list[int]], listed: float) -> int:
        """:meth:`_follow`'s run after its first join into ``g`` (``floor``: :meth:`_others_lose`'s bound; ``rows``:
        the run's time and token rows) as a loop of picks (placers that track the height limit's effect, or without
        :attr:`walk`); the position of the first sequence left."""
        (trow, tokrow), code, st = rows, self.g_code[g], self.g_step[g]
        s_k = self.S[st]
        add, tok = trow[code], tokrow[code >> 1]
        thr = 1e-9 * (self.gmax + 0.0)
        lim = max(s_k, self.height) * (1 + 1e-12)
        outside = self._outside  # the zero-increase search's best outside g's cell, which g's join left as it was
        g_time, g_room, gof = self.g_time, self.g_room, self.gof
        # listed: g's time in its cell's sorted list (moves are deferred while g keeps the picks)
        twins: list[int] = []  # the next picks, in order (see :meth:`_twins`)
        end = self._run_end[pos]  # the run of this length (and CP size) ends there
        block: list[int] = []  # exhausted groups of a twin run, their moves deferred (:meth:`_move_block`)
        in_block, t0 = False, 0.0  # t0: the time the twin run's groups had (and still have in the list)
        while True:
            # g takes the next ones while it has room and adds nothing (it stays the pick: its (new time, -id)
            # only grows); the same additions as one :meth:`_apply` after another, the step's height unchanged
            c, t, r = _take(g_time[g], g_room[g], add, tok, floor, s_k, end - pos)
            if c:
                gof += [g] * c
                g_time[g], g_room[g] = t, r
                pos += c
            if pos >= end:
                self._move_block(block, code, st, t0)
                self._move(g, code, st, listed)
                return pos
            # g can take no more. If it still has room and its next addition raises the step by no more than
            # the search's tolerance, g stays the join search's pick (one that raises its step): the full
            # decision's, not a twin's
            if r >= tok and s_k < t + add and self._raise(t + add, s_k) <= thr:
                if t + add <= lim:
                    self._move(g, code, st, listed)
                    return pos
                self.bit = True  # g would stay the pick without the height limit
            # else its next twin, else the cell's pick as the join search finds it
            if in_block:  # a pick with twins: it ends as they all do (moved together)
                block.append(g)
                n_twins = len(twins)
                done = self._fill_twins(twins, g, c, t0, (add, tok), (pos, end), block)
                if done is not None:
                    self._move_block(block, code, st, t0)
                    self._move(done, code, st, t0)
                    return end
                pos += c * n_twins
            else:
                self._move(g, code, st, listed)
            self._move_block(block, code, st, t0)
            block = []
            pick = self._cell_pick(code, st, (s_k, add, lim, tok, thr), outside, floor)
            if pick is None:
                return pos
            g, twins = pick
            listed = g_time[g]
            in_block, t0 = bool(twins), listed

    def _walk(self, g0: int, floor: float, pos: int, trow: list[float], tokrow: list[int],
              listed: float) -> int:
        """:meth:`_follow` as one walk down ``g0``'s cell's list (placers that do not track the height limit's
        effect, :meth:`~dcpsim.policies.solver_placer._Placer.unbounded_same`): the same picks, the list
        changed once at the end.

        Each pick of :meth:`_follow` is the cell's :meth:`_fullest_in_cell` pick: the highest listed group
        within the prefix (``s_k``, the added time, the height limit and the tolerance are those of the whole
        run, so the prefix's test is fixed), with room, then the lowest id among the groups with room whose new
        time rounds equal. A group that has taken what it can leaves the running for good (it has no room
        left, or its next addition raises the step: past the tolerance or the limit, else the run ends), and
        the groups passed without room keep none (the tokens are the run's); so the picks are the listed
        groups with room, walked down from the prefix's end, with no list change in between. Where the group
        below a pick's time has a new time that rounds equal to the pick's, the walk ends (the full decision
        takes that sequence). At the end the groups passed without room are parked, the picks' keys move to
        their new times (dropped below the least share, :meth:`_Buckets.move`), as the moves one after
        another leave the list (parking is where a group waits: no decision depends on it)."""
        code, st = self.g_code[g0], self.g_step[g0]
        s_k, H = self.S[st], self.height
        add, tok = trow[code], tokrow[code >> 1]
        thr = 1e-9 * (self.gmax + 0.0)
        lim = (s_k if s_k >= H else H) * (1 + 1e-12)
        end = self._run_end[pos]
        g_time, room = self.g_time, self.g_room
        t, r = g_time[g0], room[g0]
        if r >= tok and floor <= t + add <= s_k:  # :func:`_take` (its loop's first test fails: none)
            c, t, r = _take(t, r, add, tok, floor, s_k, end - pos)
            if c:
                self.gof += [g0] * c
                g_time[g0], room[g0] = t, r
                pos += c
        self._exhausted = False  # whether the cell is left with no pick (set by _walk_down)
        down = pos < end and not (r >= tok and s_k < t + add and t + add - s_k <= thr
                                  and self._stays(t + add, s_k, lim))
        newt = listed + add  # g0's listed entry within the prefix (the usual case): without a walk down, its move
        if self.fast and not down and newt <= lim and (newt <= s_k or self._raise(newt, s_k) <= thr):
            self._settle_first(code, st, g0, listed)
            return pos
        keys = self.buckets.by_code[code][st][0]  # (-time, group) ascending: the prefix of the times is a suffix
        x = (lim if lim < s_k + thr else s_k + thr) - add
        p = bisect_left(keys, -x, key=_TIME)
        if not ((p == 0 or (nt := add - keys[p - 1][0]) > lim or nt - s_k > thr)  # as in _fullest_in_cell
                and (p == len(keys) or add - keys[p][0] <= (s_k if s_k < lim else lim))):
            p = self._prefix_end(keys, p, s_k, add, lim, thr)
        passed: list[int] = []  # the positions passed without room
        hi = p  # the walked entries (each passed or picked) are those from p to hi - 1, and g0's
        if down:
            pos, hi = self._walk_down(keys, p, g0, (pos, end), (add, tok, floor, s_k, lim, thr), passed)
        self._settle_walk(code, st, (p, hi), (g0, listed, passed))
        return pos

    def _settle_first(self, code: int, st: int, g0: int, listed: float) -> None:
        """:meth:`_settle_walk` where the walk picked only ``g0`` (listed at time ``listed``, within the prefix): its
        entry moves to its new key, or is dropped below the least share (:meth:`_Buckets.move_block` of one)."""
        self.buckets.move_block(code, st, listed, self.g_time[g0], [g0], self.g_room[g0])

    def _next_cell(self, code: int, gmin: float, pos: int, u: int, k: int) -> int:
        """After :meth:`_walk` left its cell with no group to pick, the run's next sequence goes to the pick
        of the only other cell that had one (``_outside``, when the join search had two cells with a hit,
        ``_hits``), of the same code, if it adds nothing there and the new-group and new-step options lose to
        it (:meth:`_others_lose` on that cell's step); then the run goes on there (:meth:`_walk`, nothing
        outside that cell having a hit). Returns the position of the first sequence left.

        Why it is the full decision: the walk's joins added nothing, so every option but the first cell's
        is as the search found it: the codes before this one held no hit, this code's GPU-seconds stay the
        least (``gmin``), the codes after it within the tolerance held none, and the first cell holds no
        group with room within the prefix (each one it listed there was picked or passed without room, and a
        pick left with room raises its step past the tolerance or the limit). So the search's pick is that
        other cell's (unchanged), and whether it adds nothing decides as it did."""
        o_t, o_neg = self._outside
        if self._hits != 2 or o_t == -_INF or self.g_code[-o_neg] != code:
            return pos
        g = -o_neg
        st = self.g_step[g]
        s_k = self.S[st]
        trow, tokrow = self._rows[0][u], self._rows[1][u]
        floor = self._others_lose(k, trow, s_k, gmin) if o_t <= s_k else None
        if floor is None or o_t < floor:
            return pos
        listed = self.g_time[g]
        self.g_time[g] = o_t  # listed + trow[code]: the search's new time
        self.g_room[g] -= tokrow[code >> 1]
        self.gof.append(g)
        pos += 1
        self._outside, self._hits = (-_INF, 0), 1
        if pos >= self._run_end[pos - 1]:  # the run ends with it: the join's move (:meth:`_apply`)
            self._move(g, code, st, listed)
            return pos
        return self._walk(g, floor, pos, trow, tokrow, listed)

    def _stays(self, newt: float, s_k: float, lim: float) -> bool:
        """Whether a group with room whose next addition lifts its step to ``newt`` (within the tolerance of
        ``s_k``) stays the join search's pick: its increase (:meth:`_raise`) within the tolerance, under the
        limit (past it: the limit excluded it, ``bit``)."""
        if self._raise(newt, s_k) <= 1e-9 * (self.gmax + 0.0):
            if newt <= lim:
                return True
            self.bit = True
        return False

    def _walk_down(self, keys: list, p: int, g0: int, span: tuple[int, int], q: tuple,
                   passed: list[int]) -> tuple[int, int]:
        """The picks of :meth:`_walk` after the first group (``g0``, skipped): down the times of ``keys`` (on
        along the list) from the prefix's end ``p``, each listed group with room takes what it can of
        positions ``pos:end`` (``span``); ``q`` = (added time, tokens, floor, step height, limit, tolerance). Appends
        the positions passed without room to ``passed``; returns (the position of the first sequence left, the
        end of the positions walked past: from ``p`` to there every entry was passed, picked or is ``g0``'s)."""
        (pos, end), (add, tok, floor, s_k, lim, thr) = span, q
        o_t, o_neg = self._outside
        g_time, room, gof = self.g_time, self.g_room, self.gof
        tie_t = t_c = r_c = None  # tie_t: the last pick's -time whose next lower time's new time differs
        tie_hi = 0  # the last position of -time tie_t
        c_c = t_e = r_e = 0  # (t_c, r_c): the last pick's -time and room before it took c_c, ending at (t_e, r_e)
        n = len(keys)
        j = p
        while j < n and pos < end:  # (the run's end reached after twins: the walk ends there)
            ntq, g = keys[j]
            r = room[g]
            if r < tok or g == g0:
                if g != g0:
                    passed.append(j)
                j += 1
                continue
            newt = add - ntq
            # the pick must add nothing, reach the floor and beat the best outside the cell ((newt, -g) > it)
            if newt > s_k or newt < floor or newt < o_t or (newt == o_t and -g <= o_neg):
                break
            if ntq != tie_t:  # a lower time whose new time rounds equal: the full decision picks
                # the last entry of this time (j itself unless the next one has that time: a binary search)
                tie_hi = j if j + 1 == n or keys[j + 1][0] != ntq else bisect_right(keys, ntq, j + 2, key=_TIME) - 1
                if tie_hi + 1 < n and add - keys[tie_hi + 1][0] == newt:
                    break
                tie_t = ntq
            if ntq == t_c and r == r_c and end - pos >= c_c:  # a twin of the last pick: the same additions
                c, t, r = c_c, t_e, r_e
            else:
                t_c, r_c = ntq, r
                # :func:`_take`'s loop: its first step passes (the tests above); where its second fails, one
                nt, r1 = newt + add, r - tok
                if end - pos == 1 or not (r1 >= tok and floor <= nt <= s_k):
                    c, t, r = c_c, t_e, r_e = 1, newt, r1
                else:
                    c, t, r = c_c, t_e, r_e = _take(-ntq, r, add, tok, floor, s_k, end - pos)
            gof += [g] * c
            g_time[g], room[g] = t, r
            pos += c
            if pos >= end or (r >= tok and s_k < t + add and t + add - s_k <= thr and self._stays(t + add, s_k, lim)):
                return pos, j + 1
            if c == 1 and j < tie_hi:  # its twins (the entries after it of its time) take one each, as it did
                hi = tie_hi + 1 if newt > o_t else bisect_left(keys, -o_neg, j + 1, tie_hi + 1, key=_ID)
                # :meth:`_twins_down`, its usual case inline: twins of consecutive ids a to b - 1, all qualifying
                m = hi - j - 1 if hi - j - 1 < end - pos else end - pos
                if m and (b := (a := keys[j + 1][1]) + m) - 1 == keys[j + m][1] and not a <= g0 < b \
                        and room[a:b].count(r_c) == m:
                    g_time[a:b] = [t] * m
                    room[a:b] = [r] * m
                    gof += range(a, b)
                    j, pos = j + 1 + m, pos + m
                else:
                    j, pos = self._twins_down(keys, (j, hi), g0, (r_c, t, r), (pos, end))
            else:
                j += 1
        self._exhausted = j >= n and pos < end
        return pos, j

    def _twins_down(self, keys: list, span: tuple[int, int], g0: int, rooms: tuple,
                    seqs: tuple[int, int]) -> tuple[int, int]:
        """The twins of the pick at ``span[0]`` (time and room the same, each listed after it up to before
        ``span[1]``, the end of its time's entries that beat the best outside the cell) each take one sequence of
        positions ``pos:end`` (``seqs``) and end at the pick's time and room, as :meth:`_walk_down` would take them
        one by one (the same tests on the same numbers: a twin of the last pick takes what it took, and its
        next addition stays past the step). ``rooms`` = (room before, time after, room after). Stops at a
        group of another room or at ``g0``; returns (the position to look at next, the first sequence
        left).

        The twins are usually a range of consecutive ids (groups opened one after another with the same time and
        room keep them while they take the same sequences): where all of them qualify, their lists change by
        slices."""
        (j, hi), (r0, t1, r1), (pos, end) = span, rooms, seqs
        room, g_time, gof = self.g_room, self.g_time, self.gof
        m = hi - j - 1 if hi - j - 1 < end - pos else end - pos  # at most that many: one sequence each
        if m:
            a = keys[j + 1][1]  # the lowest id (the first twin)
            b = a + m
            if keys[j + m][1] == b - 1 and not a <= g0 < b and room[a:b].count(r0) == m:  # ids a to b - 1
                g_time[a:b] = [t1] * m
                room[a:b] = [r1] * m
                gof += range(a, b)
                return j + 1 + m, pos + m
        n0 = len(gof)  # the twins taken: keys[j + 1] to keys[j + n], one each of positions pos:pos + n, in order
        append = gof.append
        for _, g in keys[j + 1:j + 1 + m]:
            if g == g0 or room[g] != r0:
                break
            append(g)
            g_time[g] = t1
            room[g] = r1
        n = len(gof) - n0
        return j + 1 + n, pos + n

    def _settle_walk(self, code: int, st: int, span: tuple[int, int], walked: tuple) -> None:
        """The list changes of :meth:`_walk` in cell (code, step): the entries from the prefix's end to before
        ``hi`` (``span`` = (p, hi)) were walked past (``walked`` = (the first pick, its listed time, the positions
        passed without room)): the groups passed are parked, the picks (the first and every other walked entry)
        move to their new keys (dropped below the least share)."""
        (p, hi), (g0, listed, passed) = span, walked
        buckets, g_time, room = self.buckets, self.g_time, self.g_room
        cells = buckets.by_code[code]
        cell = cells[st]
        keys, heap, parked = cell[0], cell[1], buckets.parked
        least = buckets.min_tok[code >> 1]
        # g0 listed at a lower time than the walked entries (its key, listed, after the last of them)
        below = hi == 0 or (-listed, g0) > keys[hi - 1]
        if passed:
            for j in passed:
                neg_t, g = keys[j]
                heappush(heap, (-room[g], -neg_t, -g))
                parked.add(g)
            out = set(passed)
            picks = [g0] + [g for j, (_, g) in enumerate(keys[p:hi], p) if j not in out and g != g0]
            new = [(-g_time[g], g) for g in picks if room[g] >= least]
        else:  # the walked entries are the picks (g0's among them, or below them)
            new = [(-g_time[g], g) for _, g in keys[p:hi] if room[g] >= least]
            if below and room[g0] >= least:
                new.append((-g_time[g0], g0))
            picks = hi - p + below
        cell[2] -= (len(picks) if passed else picks) - len(new)
        if below:  # its entry: bisect_left(keys, (-listed, g0)), by time, then by id
            pos0 = bisect_left(keys, -listed, hi, key=_TIME)
            if pos0 < len(keys) and keys[pos0][1] < g0 and keys[pos0][0] == -listed:
                pos0 = bisect_left(keys, (-listed, g0), pos0 + 1)
            del keys[pos0]
        del keys[p:hi]
        new.sort()
        # the new keys in sorted runs, each run into its gap of the list at once
        a, n = 0, len(new)
        while a < n:
            at_ = bisect_left(keys, new[a])
            # the run: the new keys below the list's next entry (new is sorted: a binary search)
            b = bisect_left(new, keys[at_], a + 1, n) if at_ < len(keys) else n
            keys[at_:at_] = new[a:b]
            a = b
        if not cell[2]:
            del cells[st]
            if not cells:
                del buckets.by_code[code]

    def _raise(self, newt: float, s_k: float) -> float:
        """Makespan increase of a join that lifts a step of height ``s_k`` to ``newt > s_k`` (:meth:`_delta`)."""
        d = newt - s_k
        if self.pp > 1 and newt - self.gmax > 0.0:
            d += (self.pp - 1) * (newt - self.gmax)
        return d

    def _fill_twins(self, twins: list[int], g: int, c: int, t0: float, step: tuple[float, int],
                    at: tuple[int, int], block: list[int]) -> int | None:
        """Pick ``g`` (time ``t0`` before it took its ``c >= 1`` sequences, each adding ``step`` = (time,
        tokens)) has its twins (``twins``, last first: the same time and room): each takes ``c`` of
        positions ``pos:end`` (``at`` = (pos, end)) in turn, as ``g`` did (the same test on the same time and
        room, the same additions), and ends at ``g``'s time and room. The twins that end with the others join ``block``; the one that takes the run's last
        sequence (``c`` or fewer of them) is returned (its move is its own), None if the run goes on."""
        g_time, g_room, gof = self.g_time, self.g_room, self.gof
        t, r = g_time[g], g_room[g]
        (add, tok), (pos, end) = step, at
        rest = end - pos
        if rest > c * len(twins):  # every twin takes c, and the run goes on
            twins.reverse()
            if c == 1:
                gof += twins
                for tw in twins:
                    g_time[tw] = t
                    g_room[tw] = r
            else:
                for tw in twins:
                    gof += [tw] * c
                    g_time[tw] = t
                    g_room[tw] = r
            block.extend(twins)
            twins.clear()
            return None
        full = rest // c
        for _ in range(full - (full * c == rest)):
            tw = twins.pop()
            gof += [tw] * c
            g_time[tw], g_room[tw] = t, r
            pos += c
            block.append(tw)
        last = twins.pop()  # takes the rest: c of them, or fewer (the additions g made first)
        rem = end - pos
        gof += [last] * rem
        if rem == c:
            g_time[last], g_room[last] = t, r
        else:
            tl = t0
            for _ in range(rem):
                tl += add
            g_time[last], g_room[last] = tl, g_room[g] + (c - rem) * tok
        return last

    def _cell_pick(self, code: int, st: int, q: tuple, outside: tuple, floor: float) -> tuple[int, list[int]] | None:
        """The join search's pick in cell (code, step) (``q``: step height, added time, height limit, tokens,
        tolerance) and its twins; None unless it beats ``outside``, adds nothing and reaches ``floor``."""
        s_k, add, lim, tok, thr = q
        cell = self.buckets.by_code.get(code, {}).get(st)  # emptied and refilled: a new list
        if cell is None:
            return None
        hit = self._fullest_in_cell(cell, s_k, add, lim, tok, thr, (-np.inf, 0))
        if hit is None or hit[1] is None or hit[1] <= outside:
            return None
        newt, neg_g = hit[1]
        if newt > s_k or newt < floor:
            return None
        return -neg_g, self._twins(cell[0], -neg_g, add, newt, outside)

    def _twins(self, groups: list, g: int, add: float, newt: float, outside: tuple) -> list[int]:
        """Groups that follow pick ``g`` (new time ``newt``) in the join order, last first.

        ``g``'s twins sit right below it in its cell's list (same time and room, higher ids): each is as
        eligible as ``g`` was, and once ``g`` has taken what it can, the next pick is the first twin (and
        so on), unless another group reaches the same new time with a lower id: a group of another cell
        (``outside``), or of this cell at a different time whose new time rounds equal (ruled out when the
        nearest different times around the run give different new times). Groups of ``g``'s time above it
        have lower ids: they were not picked, so they lack room, and still do."""
        neg_t = -self.g_time[g]
        pos = bisect_left(groups, (neg_t, g))  # groups: (-time, id) ascending
        room = self.g_room
        r = room[g]
        up = bisect_left(groups, neg_t, 0, pos, key=_TIME)  # the first group of g's time (ids below g's before it)
        if up and not add - groups[up - 1][0] > newt:
            return []
        lo = bisect_right(groups, neg_t, pos + 1, key=_TIME)  # past the groups of g's time after it
        if lo < len(groups) and not add - groups[lo][0] < newt:
            return []
        # after g, ids ascending: each one while it has g's room and (newt, -id) beats ``outside``
        o_t, o_neg = outside
        out = []
        if newt > o_t:  # every one beats ``outside``
            for _, h in groups[pos + 1:lo]:
                if room[h] != r:
                    break
                out.append(h)
        else:
            for _, h in groups[pos + 1:lo]:
                if room[h] != r or not (newt == o_t and -h > o_neg):
                    break
                out.append(h)
        out.reverse()
        return out

    def _move_block(self, block: list[int], code: int, st: int, t0: float) -> None:
        """Move the exhausted groups of one twin run (ids ascending; listed at time ``t0``, contiguous; now
        all at one time and room) as one :meth:`_Buckets.move` each would."""
        if len(block) == 1:
            self._move(block[0], code, st, t0)
        elif block:
            self.buckets.move_block(code, st, t0, self.g_time[block[0]], block, self.g_room[block[0]])

    def _move(self, g: int, code: int, st: int, listed: float) -> None:
        """Bring group ``g``'s entry in its cell (time ``listed``) up to date after deferred joins."""
        if self.g_time[g] != listed:
            self.buckets.move(code, st, listed, self.g_time[g], g, self.g_room[g])

    def _others_lose(self, k: int, trow: list[float], s_k: float, gmin: float) -> float | None:
        """The least join time ``floor`` such that every new-group and the new-step option loses to any join
        that adds nothing to a step of height at most ``s_k``, takes ``gmin`` GPU-seconds and reaches at
        least ``floor`` (-inf: any); None if no such bound holds.

        An option loses (:func:`_better`) when its increase is above the tolerance for the largest such
        join time (the tolerance grows with it), or when it adds exactly nothing too and takes more
        GPU-seconds beyond the tolerance, or the same GPU-seconds and a time not above the join's (the
        fuller group wins, the join on a tie); so neither a new group nor
        :meth:`_new_step_option` replaces the join. The new-group options are those
        the placer kept for this sequence (``_new_opts``) (a join that adds nothing changes no free rank, step
        height or ``gmax``)."""
        pp1, gmax = self.pp - 1, self.gmax
        floor = -_INF
        for delta, gpu, neg_a1, _, _ in self._new_opts:  # gpu: c * a1
            a1 = -neg_a1
            if delta > 1e-9 * (gmax + a1 + s_k):
                continue  # a larger increase, whatever the join's time
            if delta != 0.0 or gpu < gmin * (1 - 1e-9):
                return None  # an increase within the tolerance of none, or fewer GPU-seconds
            if gpu <= gmin * (1 + 1e-9) and a1 > floor:
                floor = a1  # equal on both: the fuller (larger time) wins, the join on a tie
        a1 = float(trow[2 * k + self.span0[k]])
        over = a1 - gmax
        return floor if a1 + pp1 * (over if over > 0.0 else 0.0) > 1e-9 * (gmax + a1 + s_k) else None
