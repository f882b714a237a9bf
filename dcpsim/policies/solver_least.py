"""``dynamic-solver``'s join search passes over every cell: the least increase of joining any open group
(:meth:`_Least._least_increase_all`) and the cut test (:meth:`_Least._cut_none`), a mixin of
:class:`~dcpsim.policies.solver_placer._Placer` (it uses the placer's state). Times in seconds, rooms in
tokens per rank.
"""

from __future__ import annotations

import numpy as np


class _Least:
    """The passes of :class:`~dcpsim.policies.solver_placer._Placer`'s join search over every cell."""

    def _cut_none(self, trow: list[float], tokrow: list[int], fam: list[int], thr: float, cut: float) -> bool:
        """Whether :meth:`_search` at tolerance ``thr`` and ``cut`` passes every cell it visits by its first test
        (the cell's lowest listed group raises its step past ``thr``, and no parked group has room) and stops at
        a code above ``cut`` GPU-seconds: then it and the same search at any smaller tolerance return None with
        ``_cut`` set, calling no cell search (so nothing is parked), whatever else. Changes nothing."""
        by_code, S, sizes = self.buckets.by_code, self.S, self.sizes
        for code in fam:
            cells = by_code.get(code)
            if cells is None:
                continue
            add = trow[code]
            if sizes[code >> 1] * add > cut:
                return True
            tok = tokrow[code >> 1]
            for st, cell in cells.items():
                keys = cell[0]
                if not (keys and -keys[-1][0] + add - S[st] > thr and not (cell[1] and -cell[1][0][0] >= tok)):
                    return False
        return False

    def _least_increase_all(self, trow: list[float], tokrow: list[int], fam: list[int]) -> float:
        """Least makespan increase of joining any open group that can take the sequence (``inf`` if none)."""
        d0 = np.inf
        by_code, H, S, room, gmax, pp1 = self.buckets.by_code, self.height, self.S, self.g_room, self.gmax, self.pp - 1
        for code in fam:
            cells = by_code.get(code)
            if cells is None:
                continue
            tok, add = tokrow[code >> 1], trow[code]
            for st, cell in cells.items():
                s_k = S[st]
                lim = (s_k if s_k >= H else H) * (1 + 1e-12)
                keys = cell[0]
                if keys and room[keys[-1][1]] >= tok and not (cell[1] and -cell[1][0][0] >= tok):
                    # :meth:`_least_increase` where nothing comes back and the lowest group has room, inline
                    newt = -keys[-1][0] + add
                    sn = newt if newt > s_k else s_k
                    d = sn - s_k
                    if pp1 > 0:  # :meth:`_delta`
                        over = sn - gmax
                        d += pp1 * (over if over > 0.0 else 0.0)
                    v = np.inf
                    if newt <= lim:
                        v = d
                    elif d < self._excl:
                        self._excl = d
                else:
                    v = self._least_increase(cell, s_k, add, lim, tok)
                if v < d0:
                    d0 = v
                if d0 == 0.0:
                    return d0
        return d0

    def _least_increase(self, cell: list, s_k: float, add: float, lim: float, tok: int) -> float:
        """Least makespan increase of joining a group of one cell (``inf`` if none can take the sequence).

        The increase grows with the group's time, so it is that of the lowest group with token room
        (the groups passed on the way are parked).
        """
        room = self.g_room
        if cell[1] and -cell[1][0][0] >= tok:
            self.buckets.unpark(cell, tok, self.g_time, room)
        groups = cell[0]
        n = len(groups)
        pos = n - 1  # from the lowest group (the list's last entry) up
        while pos >= 0 and room[groups[pos][1]] < tok:
            pos -= 1
        out = np.inf
        if pos >= 0:
            t = -groups[pos][0]
            if t + add <= lim:
                out = self._delta(s_k, t + add)
            else:  # excluded by the height limit: the least such increase, for :meth:`_join_option`
                d = self._delta(s_k, t + add)
                if d < self._excl:
                    self._excl = d
        if pos < n - 1:
            self.buckets.park(cell, pos + 1, n, room)
        return out
