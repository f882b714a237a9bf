"""``dynamic-solver``'s join search passes over every cell: the least increase of joining any open group
(:meth:`_Least._least_increase_all`) and the cut test (:meth:`_Least._cut_none`), and the rare branches of one
cell's search (:meth:`_Least._park_from` and the like), a mixin of
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
                    over = sn - gmax
                    d = (sn - s_k) + pp1 * (over if over > 0.0 else 0.0)  # :meth:`_delta` (pp 1: adds 0.0)
                    if newt <= lim:
                        v = d
                    else:  # excluded by the height limit
                        v = np.inf
                        self._excl = d if d < self._excl else self._excl
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

    def _track_prefix(self, keys: list, p: int, s_k: float, q: tuple[float, float, float]) -> None:
        """(Tracking the height limit) ``bit`` where the entry before the prefix's end ``p`` is past the limit but
        within the tolerance without it: the prefix would go on (:meth:`_fullest_in_cell`'s first term)."""
        add, lim, thr = q
        if p > 0 and (nt := add - keys[p - 1][0]) > lim and nt - s_k <= thr and self._delta(s_k, nt) <= thr:
            self.bit = True

    def _park_from(self, cell: list, p: int, tok: int) -> int:
        """Park the groups without room for ``tok`` tokens listed from ``p`` on up to the first with room (the
        list from there moves down to ``p``); the list's new length."""
        keys, room = cell[0], self.g_room
        n, pos = len(keys), p
        while pos < n and room[keys[pos][1]] < tok:
            pos += 1
        self.buckets.park(cell, p, pos, room)
        return n - (pos - p)

    def _tie_gid(self, keys: list, pos: int, q: tuple[float, float, int], gid: int) -> int:
        """The lowest of ``gid`` and the ids with room for ``tok`` tokens listed from ``pos`` on while their new
        time (``q`` = (added time, new time, tokens)) rounds equal to the pick's."""
        (add, newt, tok), room, n = q, self.g_room, len(keys)
        while pos < n and add - keys[pos][0] == newt:
            if keys[pos][1] < gid and room[keys[pos][1]] >= tok:
                gid = keys[pos][1]
            pos += 1
        return gid
