"""``dynamic-solver``'s open groups by code and step (:class:`_Buckets`), the join candidates of
:class:`~dcpsim.policies.solver_placer._Placer`. Times in seconds, rooms in tokens per rank."""

from __future__ import annotations

from bisect import bisect_left
from heapq import heappop, heappush


class _Buckets:
    """Open groups by code and step: the join candidates.

    ``code`` = size index·2 + leaves-the-domain, so every group of a
    (code, step) *cell* adds the same time for a given sequence and shares
    its step's height. A cell is ``[groups, parked, count]``: ``groups``
    sorted by (time, -group id), so the fullest group below a height limit
    is found by a binary search; a group a query passes without token room
    for its sequence is *parked* out of that list into a heap by room
    (``parked``) until a query's tokens fit it again (sequences come longest
    first, so mostly it stays parked), and every query first brings back the
    parked groups with room for it: the list always holds every group with
    room for the current sequence, and few without. A group is dropped
    (closed) once its token room is below the smallest share any sequence has
    at its size.

    The list is kept in reverse: entries ``(-time, group id)`` ascending, so the
    longest (time, fewest id) come first and the shortest last. Joins, parks and
    walks change the list near its short end (the groups that still have time
    under their step), which is the list's tail: a Python list shifts only the
    entries after a change.
    """

    def __init__(self, min_tok: list[int]) -> None:
        self.by_code: dict[int, dict[int, list]] = {}
        self.min_tok = min_tok
        self.parked: set[int] = set()

    def _cell(self, code: int, step: int) -> list:
        """The cell (code, step), made empty where there is none."""
        cells = self.by_code.get(code)
        if cells is None:
            cells = self.by_code[code] = {}
        cell = cells.get(step)
        if cell is None:
            cell = cells[step] = [[], [], 0]
        return cell

    def add(self, code: int, step: int, time: float, g: int, room: int) -> None:
        if room >= self.min_tok[code >> 1]:
            cell = self._cell(code, step)
            keys, key = cell[0], (-time, g)
            at = bisect_left(keys, key)
            keys[at:at] = (key,)  # insort: a slice moves the entries after it in one memmove, insert one by one
            cell[2] += 1

    def add_block(self, code: int, step: int, time: float, ids: range, room: int) -> None:
        """:meth:`add` of each group of ``ids`` (consecutive, each above every listed id: their keys, of one
        time, sit next to each other), inserted as one slice."""
        if room >= self.min_tok[code >> 1]:
            cell = self._cell(code, step)
            keys = cell[0]
            block = [(-time, g) for g in ids]
            at = bisect_left(keys, block[0])  # every other key of this time has a lower id: before the block
            keys[at:at] = block
            cell[2] += len(block)

    def move(self, code: int, step: int, old: float, new: float, g: int, room: int) -> None:
        cells = self.by_code[code]
        cell = cells[step]
        if g in self.parked:
            self.parked.discard(g)  # its heap entry goes stale
        else:
            groups = cell[0]  # (its entry, usually one of the list's last few: the last two tested first)
            del groups[-1 if groups[-1][1] == g else -2 if groups[-2][1] == g else bisect_left(groups, (-old, g))]
            if cell[2] > 1 and room >= self.min_tok[code >> 1]:  # it stays in this cell: :meth:`add` there
                key = (-new, g)
                at = bisect_left(groups, key)
                groups[at:at] = (key,)  # (insort, as in :meth:`add`)
                return
        cell[2] -= 1
        if not cell[2]:
            del cells[step]
            if not cells:
                del self.by_code[code]
        self.add(code, step, new, g, room)

    def move_block(self, code: int, step: int, old: float, new: float, gs: list[int], room: int) -> None:
        """:meth:`move` of every group of ``gs`` (ids ascending, listed at ``old`` next to each other, none
        parked) to time ``new`` and ``room``, in one slice; the same lists, counts and cells as one move
        after another (the cell is not emptied between them unless they leave it for good)."""
        cells = self.by_code[code]
        cell = cells[step]
        groups = cell[0]
        lo = bisect_left(groups, (-old, gs[0]))
        hi = lo + len(gs)
        # the ends in place: the keys between them are those of gs (the caller's run of consecutive entries)
        if hi > len(groups) or groups[lo] != (-old, gs[0]) or groups[hi - 1] != (-old, gs[-1]):
            for g in gs:  # not one slice (never expected): one move each
                self.move(code, step, old, new, g, room)
            return
        del groups[lo:hi]
        if room >= self.min_tok[code >> 1]:
            keys = [(-new, g) for g in gs]
            p = bisect_left(groups, keys[0])
            if p == len(groups) or groups[p] > keys[-1]:
                groups[p:p] = keys
            else:
                for key in keys:
                    at = bisect_left(groups, key)
                    groups[at:at] = (key,)
        else:
            cell[2] -= len(gs)
            if not cell[2]:
                del cells[step]
                if not cells:
                    del self.by_code[code]

    def park(self, cell: list, lo: int, hi: int, g_room: list[int]) -> None:
        """Move the groups at positions ``lo`` to ``hi - 1`` of the cell's list to its heap by room."""
        groups, heap, parked = cell[0], cell[1], self.parked
        for neg_t, g in groups[lo:hi]:
            heappush(heap, (-g_room[g], -neg_t, -g))
            parked.add(g)
        del groups[lo:hi]

    def unpark(self, cell: list, tok: int, g_time: list[float], g_room: list[int]) -> None:
        """Bring back every parked group with room for ``tok`` tokens (skipping stale heap entries)."""
        heap = cell[1]
        while heap and -heap[0][0] >= tok:
            neg_room, t, neg_g = heappop(heap)
            g = -neg_g
            if g in self.parked and g_time[g] == t and g_room[g] == -neg_room:
                self.parked.discard(g)
                keys, key = cell[0], (-t, g)
                at = bisect_left(keys, key)
                keys[at:at] = (key,)
