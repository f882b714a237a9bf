"""``dynamic-solver``'s runs of equal sequences that raise one step: the *fill* path of
:class:`~dcpsim.policies.solver_placer._Placer`.

Where every rank is taken, the short sequences at the end of a placement fill the lowest step group by
group: one joins the lowest group and raises the step a little, the next ones of its length join that
group's twins (adding nothing), then the next lowest group is raised, and so on. Each such sequence costs a
full decision (the raising ones three passes over every cell), so the same decisions are made here while
only one cell (the raised group's) can change the answer (:meth:`_Fill._fill`). Times in seconds, rooms in
tokens per rank.
"""

from __future__ import annotations

_INF = float("inf")


class _Fill:
    """The fill path of :class:`~dcpsim.policies.solver_placer._Placer` (a mixin: it uses the placer's state)."""

    fill = True  # :meth:`_fill` after a join that raised its step (False: one full decision each, the reference)

    def _fill(self, g: int, pos: int, u: int, k: int) -> int:
        """The sequence at ``pos - 1`` (distinct length ``u``, size index ``k``) has just joined group ``g``
        raising its step without raising ``gmax``: place the next sequences of the same length while each
        one's full decision provably joins a group of ``g``'s cell C; return the position of the first one
        left to the full decision.

        Why it is the full decision, where (checked once) the placer does not track the height limit, no
        step has a free aligned slice of the size, no other code the sequence may join has a cell on C's
        step, and every other cell's least increase (fixed: nothing outside C changes here, only C's groups
        and step height move, and ``gmax`` stays, a raise past it ends the run) lies above the zero
        tolerance: for each next sequence the cells other than C hold no group within that tolerance, there
        is no new-group option, and the new step's increase is fixed. So the join search's pick is C's
        (:meth:`_fullest_in_cell` at the zero tolerance; its code's GPU-seconds the least with a hit); where
        it adds nothing that is the join. Where C holds none, the least increase is C's (the lowest group with
        room) if every other cell's least increase (fixed, computed once) lies above the tolerance of the
        search that follows, whose pick is then C's at that tolerance. Either join stands where the new
        step's increase is above :func:`_better`'s tolerance of it. A pick within the zero tolerance that
        raises its step, or any case outside these, ends the run.
        """
        if self.track or self._slots.get(self.sizes[k]):
            return pos
        trow, tokrow, fam = self._rows[0][u], self._rows[1][u], self._rows[2][u]
        code, st = self.g_code[g], self.g_step[g]
        by_code = self.buckets.by_code
        if any(c != code and st in by_code.get(c, ()) for c in fam):
            return pos
        add, tok = trow[code], tokrow[code >> 1]
        gmax, pp1, H, S = self.gmax, self.pp - 1, self.height, self.S
        thr0 = 1e-9 * (gmax + 0.0)
        d_other = self._least_other(trow, tokrow, fam, code, st)
        if not d_other > thr0:  # another cell may hold a group within the zero tolerance
            return pos
        a1 = trow[2 * k + self.span0[k]]
        over = a1 - gmax
        d_step = a1 + pp1 * (over if over > 0.0 else 0.0)
        end = self._run_end[pos - 1]
        fullest, apply = self._fullest_in_cell, self._apply
        gmin = float(self.sizes[code >> 1] * add)  # the join search's fewest GPU-seconds (C's code)
        nothing = (-_INF, 0)
        while pos < end:
            cell = by_code.get(code, {}).get(st)
            if cell is None:
                break
            s_k = S[st]
            lim = (s_k if s_k >= H else H) * (1 + 1e-12)
            hit = fullest(cell, s_k, add, lim, tok, thr0, nothing)
            if hit is not None:  # C's pick within the zero tolerance: the join search's
                if not hit[0] or not d_step > 1e-9 * (gmax + a1 + hit[1][0]):
                    break  # it raises the step (within the tolerance), or the new step may win: the full decision
                pos = self._fill_zero(-hit[1][1], pos, (u, k, end), gmin)
                continue
            pick = self._fill_raise(cell, s_k, (add, lim, tok), d_other, (d_step, a1))
            if pick is None:
                break
            apply(("join", pick), k, trow, tokrow)
            pos += 1
        self._was_cut = False
        return pos

    def _fill_zero(self, g: int, pos: int, run: tuple[int, int, int], gmin: float) -> int:
        """The sequence at ``pos`` joins group ``g`` adding nothing (``run`` = (its distinct length, size index,
        the run's end)); where the run goes on, as the run loop does: the join's move left to :meth:`_follow`
        (C the only cell with a hit, its code's GPU-seconds ``gmin``). Returns the next position."""
        u, k, end = run
        trow, tokrow = self._rows[0][u], self._rows[1][u]
        pos += 1
        if pos >= end:
            self._apply(("join", g), k, trow, tokrow)
            return pos
        listed = self.g_time[g]
        code = self.g_code[g]
        self.g_time[g] = listed + trow[code]
        self.g_room[g] -= tokrow[code >> 1]
        self.gof.append(g)
        self._outside, self._hits = (-_INF, 0), 1
        return self._follow(g, gmin, pos, u, k, listed)

    def _fill_raise(self, cell: list, s_k: float, q: tuple[float, float, int], d_other: float,
                    step: tuple[float, float]) -> int | None:
        """The group of cell C (step height ``s_k``; ``q`` = (added time, height limit, tokens)) that the full
        decision joins where C holds none within the zero tolerance: C's least increase ``d`` is the least of
        all where every other cell's (``d_other``) lies above the tolerance of the search at ``d``, whose pick
        is then C's; it stands where the new step's increase (``step`` = (increase, time)) is above ``d`` beyond
        :func:`_better`'s tolerance and the join raises no step past ``gmax``. None: the full decision."""
        (add, lim, tok), (d_step, a1) = q, step
        gmax = self.gmax
        self._excl = _INF
        d = self._least_increase(cell, s_k, add, lim, tok)  # C's least increase (the least of all, if it stands)
        if not d < _INF:
            return None
        thr = d + 1e-9 * (gmax + d)
        if not d_other > thr:
            return None
        hit = self._fullest_in_cell(cell, s_k, add, lim, tok, thr, (-_INF, 0))
        if hit is None or hit[1][0] > gmax or not d_step > d + 1e-9 * (gmax + a1 + hit[1][0]):
            return None
        return -hit[1][1]

    def _least_other(self, trow: list[float], tokrow: list[int], fam: list[int], code: int, st: int) -> float:
        """The least increase of joining a group of any cell but (``code``, ``st``) (``inf`` if none): the
        :meth:`_least_increase_all` pass over the cells with that one left out for the call (``code``'s cells
        in their order; the dict put back as it was). Where it returns zero early, the run ends anyway."""
        by_code = self.buckets.by_code
        self._excl = _INF
        cells = by_code.get(code)
        if cells is None:
            return self._least_increase_all(trow, tokrow, fam)
        by_code[code] = {s: cell for s, cell in cells.items() if s != st}
        try:
            return self._least_increase_all(trow, tokrow, fam)
        finally:
            by_code[code] = cells
