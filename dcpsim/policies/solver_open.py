"""``dynamic-solver``'s runs of equal sequences that each open a group: the *open* path of
:class:`~dcpsim.policies.solver_placer._Placer`.

Longest first, the long sequences of a placement each open a group on free ranks (no open group has room under
its step's height for them), and many come in runs of one length: at 65,536 GPUs (one iteration, Llama-13B,
pp 8, cp 8) about 8,700 of the full placement's 14,200 new groups open in runs of 29 or more. Each such
sequence costs a full decision (the new-group options, the join search's cut test, the comparisons); here the
same decisions are made where they provably open the next free aligned slice of the same step
(:meth:`_Open._open_run`). The free aligned slices of each step (:meth:`_Open._free_slots`) live here too. Times in
seconds.
"""

from __future__ import annotations

import numpy as np


class _Open:
    """The open path of :class:`~dcpsim.policies.solver_placer._Placer` and the free aligned slices the new-group
    options come from (a mixin: it uses the placer's state)."""

    opens = True  # :meth:`_open_run` after a decision that opened a group adding nothing (False: the reference)

    def _open_run(self, opt: tuple, pos: int, u: int, k: int) -> int:
        """The sequence at ``pos - 1`` (distinct length ``u``, size index ``k``) has just opened a group by its
        decision's first new-group option ``opt`` (the first open step with a free aligned slice of the size,
        adding nothing: its time ``a1`` at most the step's height), the option that won: open the next
        sequences of the same length each on the next free aligned slice of that step, while the decision is
        provably that; return the position of the first one left to the full decision.

        Why it is the full decision, where the placer does not track the height limit's effect: the opened
        groups (each of time ``a1``, on that step, in one cell) change no step height, ``gmax`` or other step's
        free ranks, so the next sequence's new-group options are the first one's (the step's next slice, where
        it leaves the domain as the first did: the same time) and so is the new-step option. Its joins are the
        first one's plus those into the opened groups, each raising the step by ``d`` (the new time
        ``a1 + a1``); where ``d > 2e-7·(gmax + a1)`` (or they have no room for it) none is a hit of the join
        searches at the zero or the cut tolerance (``1e-8·(gmax + a1)``), so those searches find what they found
        for the first sequence; and the least-increase search either finds it too (its threshold and hits
        unchanged) or returns a join whose increase exceeds ``1e-7·(gmax + a1)``, which the option beats by
        more than :func:`_better`'s tolerance (``1e-9·(gmax + a1 +`` its new time, at most ``gmax`` plus about
        twice its increase``)``). So the join the option beat, or one it beats, is compared with the same
        options in the same order, and the option wins again. A step without a free slice of the size, or whose
        next slice differs in leaving the domain, ends the run.
        """
        if self.track:
            return pos
        _, st, _, b = opt[4]
        trow, tokrow = self._rows[0][u], self._rows[1][u]
        a1, tok, s_k, gmax = trow[2 * k + b], tokrow[k], self.S[st], self.gmax
        if self.cap - tok >= tok and not self._delta(s_k, a1 + a1) > 2e-7 * (gmax + a1):
            return pos  # a join into an opened group may count: the full decision
        starts = self._free_run(st, self.sizes[k], b, self._run_end[pos - 1] - pos)
        if starts:
            self._open_block(st, k, b, starts, (trow, tokrow))
        # ``_was_cut`` stays: the last one's join search ends as the first one's did (the same searches' results),
        # so the next decision tries :meth:`_cut_none` first where the per-sequence path would
        return pos + len(starts)

    def _free_run(self, st: int, c: int, b: int, most: int) -> list[int]:
        """The starts of the groups that the loop ``while most and n_free[st]: start = _free_start(st, c); if
        start < 0 or _spans(start, c) != b: break; open a group of c ranks at start; most -= 1`` opens, found
        before any is opened, the cursor left where that loop's last :meth:`_free_start` leaves it.

        Opening a group only marks its own aligned slice, so each :meth:`_free_start` after one (from the
        cursor, at that slice) finds the lowest free aligned slice above it: the same search with the cursor
        set to the slice's end, on the ranks as they were."""
        cur, free_start = self.cursor[st], self._free_start
        used, R, row = self.used[st], self.R, self.span_rows[c]  # (the run's first slice had its span looked up)
        nf = self.n_free[st]
        starts: list[int] = []
        while len(starts) < most and nf:
            if c == 1:  # :meth:`_free_start` of a single rank inline: the first free one from the cursor
                s = starts[-1] + 1 if starts else cur.get(1, 0)
                f = used.find(0, s) if s < R else -1
                cur[1] = f if f >= 0 else max(s, R)
            else:
                if starts:  # the slice listed last counts as taken: search on from its end
                    cur[c] = starts[-1] + c
                f = free_start(st, c)
            if f < 0 or row[f // c] != b:  # (:meth:`_spans`)
                break
            starts.append(f)
            nf -= c
        return starts

    def _open_block(self, st: int, k: int, b: int, starts: list[int], rows: tuple) -> None:
        """:meth:`_open_group` of a group of size index ``k`` (leaving the domain: ``b``) at each of ``starts``
        (free aligned slices of step ``st``, ascending) in turn, in one pass: the same ids, lists, ranks taken and
        cell (their keys, of one time and consecutive ids, sit next to each other there: one slice)."""
        trow, tokrow = rows
        c, m, code = self.sizes[k], len(starts), 2 * k + b
        self._slots.clear()
        t_new = float(trow[code])
        room = self.cap - tokrow[k]
        g0 = len(self.g_step)
        self.g_step += [st] * m
        self.g_sidx += [k] * m
        self.g_code += [code] * m
        self.g_time += [t_new] * m
        self.g_room += [room] * m
        self.g_start += starts
        self.gof += range(g0, g0 + m)
        self.buckets.add_block(code, st, t_new, range(g0, g0 + m), room)
        used, one = self.used[st], b"\x01" * c
        for start in starts:
            used[start:start + c] = one
        self.n_free[st] -= c * m
        if not self.n_free[st]:
            self.open_steps.remove(st)

    def _free_start(self, kk: int, c: int) -> int:
        """Start of the lowest free aligned slice of ``c`` ranks on step ``kk`` (-1: none). Ranks are only
        taken, so it only moves up: the search goes on from the last answer for that size (each aligned
        slice passed once per step and size)."""
        cur = self.cursor[kk]
        s, used, R = cur.get(c, 0), self.used[kk], self.R
        if c == 1:  # the loop below for single ranks: the first free one from s (a C search)
            f = used.find(0, s) if s < R else -1
            cur[c] = f if f >= 0 else max(s, R)
            return f
        while s + c <= R:
            if used[s] == 0 and used.find(1, s, s + c) < 0:
                cur[c] = s
                return s
            s += c
        cur[c] = s
        return -1

    def _free_slots(self, c: int) -> list[tuple]:
        """Per open step with a free aligned slice of ``c`` ranks, in step order: (step, whether the lowest one
        leaves the domain, the new-group action there); kept in ``_slots`` until a group opens (only then are
        ranks taken)."""
        out = []
        cursor, used, R = self.cursor, self.used, self.R
        if c <= R and c not in self.span_rows:
            self._spans(0, c)  # every aligned start's span, kept in span_rows
        row = self.span_rows.get(c)
        for kk in self.open_steps:
            # :meth:`_free_start` inline for single ranks (the first free one from the cursor), else its first test
            # (the cursor's slice still free)
            cur, u = cursor[kk], used[kk]
            start = cur.get(c, 0)
            if c == 1:
                f = u.find(0, start) if start < R else -1
                cur[c], start = (f if f >= 0 else max(start, R)), f
            elif not (start + c <= R and u[start] == 0 and u.find(1, start, start + c) < 0):
                start = self._free_start(kk, c)
            if start < 0:
                continue
            b = row[start // c]  # :meth:`_spans`
            out.append((kk, b, ("new", kk, start, b)))
        return out

    def _spans(self, start: int, c: int) -> int:
        """1 if the group of ``c`` ranks at aligned ``start`` leaves the NVLink domain, else 0 (per size, every
        aligned start at once, on first use)."""
        row = self.span_rows.get(c)
        if row is None:
            starts = np.arange(0, self.R - c + 1, c, dtype=np.int64)
            row = self.span_rows[c] = np.asarray(self.layout.spans_network(starts, c), dtype=np.int64).tolist()
        return row[start // c]
