"""Rank clocks of :func:`dcpsim.pipeline.group_times` kept per group, for plans whose every step tiles the ranks.

:func:`~dcpsim.pipeline.group_times` starts a group's op when the latest of its ranks is free (a maximum over
the stage's per-rank clocks, seconds). In general it keeps one clock per rank of each pipeline stage: after an
op, each rank of the op's groups takes its group's finish time (an ``R``-long copy per clock), and the next op
on the stage reduces the ranks of each of its groups again (pairwise maxima from the ranks up). When every
step's groups tile the ranks with aligned power-of-two slices (``0 .. R − 1``, in order, no gaps: dynamic CP's
and packing's plans), an op overwrites every clock of its stage, so the clocks are constant on each group of
the stage's last op. :class:`GroupClocks` keeps those per-group values only; the next op's groups read them
as they are (the same groups), by a take (each new group inside one old group), or from the old groups'
values spread over *cells* (aligned blocks of the old step's smallest group size) and pairwise maxima from
there up. They are maxima of the same values as the per-rank path's, and a maximum does not round (the
clocks are finite sums from ``+0.0``, never ``−0.0``), so every result is the same float64 bit for bit
(tested against the per-rank path on random plans, ``tests/test_group_times_paths.py``).

Cost per op and clock: ``O(groups + R/c)`` element operations for cells of ``c`` ranks, against ``O(R)``.
This module imports only numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def aligned_levels(start: np.ndarray, size: np.ndarray, n_ranks: int) -> np.ndarray | None:
    """Each group's level ``j`` (its size ``2^j``) when every group (first rank ``start``, ``size`` ranks) is an
    aligned power-of-two slice of ``n_ranks`` ranks (``start`` a multiple of ``size``, ``n_ranks`` too); else None."""
    if np.any(size & (size - 1)) or np.any(start & (size - 1)) or np.any(n_ranks & (size - 1)):
        return None  # (``x & (size − 1)`` is ``x mod size`` for a power-of-two size)
    return (np.frexp(size.astype(np.float64))[1] - 1).astype(np.int64)


def tiles_in_order(start: np.ndarray, size: np.ndarray, opens: np.ndarray, n_ranks: int) -> bool:
    """Whether groups (first rank ``start``, ``size`` ranks, in order; ``opens``: the groups that open a step, the
    first group among them) tile ranks ``0 .. n_ranks − 1`` step after step: each step's groups one after the
    other from rank 0, without gaps or overlaps, its last group ending at ``n_ranks``."""
    ends = start + size
    prev_end = np.zeros_like(ends)
    prev_end[1:] = ends[:-1]
    last = np.ones(start.size, dtype=bool)  # a group closing its step
    last[:-1] = opens[1:]
    return bool(np.all(np.where(opens, start == 0, start == prev_end)) and np.all(ends[last] == n_ranks))


def aligned_tiling(start: np.ndarray, size: np.ndarray, offset: np.ndarray, n_ranks: int) -> np.ndarray | None:
    """Each group's level ``j`` (its size ``2^j``) when every step's groups (``start``/``size`` per group, sorted by
    (step, start); step ``k`` holds groups ``offset[k] .. offset[k+1] − 1``) tile ranks ``0 .. n_ranks − 1`` in order
    (:func:`tiles_in_order`) with aligned power-of-two slices (:func:`aligned_levels`); else None."""
    off = np.asarray(offset)
    if n_ranks < 1 or start.size == 0 or off[0] != 0 or off[-1] != start.size or np.any(np.diff(off) < 1) \
            or np.any(size < 1):
        return None
    level = aligned_levels(start, size, n_ranks)
    if level is None:
        return None
    first = np.zeros(start.size, dtype=bool)
    first[off[:-1]] = True
    return level if tiles_in_order(start, size, first, n_ranks) else None


def op_arrays(V: int, G: int, offset: np.ndarray, n: int) -> list[np.ndarray | None]:
    """Four per-op arrays of :func:`~dcpsim.pipeline.group_times`, ``(V, 2, G)`` (virtual stage, direction, group),
    the first ``n`` allocated (the rest None): the cells of the groups in a step (``offset[0] .. offset[-1] − 1``)
    left to be written, since every op of the schedule writes all of its groups' cells (an array of zeros would
    be cleared first, a pass over it), the others zero."""
    out: list[np.ndarray | None] = [None] * 4
    a, z = int(offset[0]), int(offset[-1])
    for i in range(n):
        out[i] = x = np.empty((V, 2, G))
        x[..., :a] = 0.0
        x[..., z:] = 0.0
    return out


@dataclass
class GroupClocks:
    """Per pipeline rank (stage) ``p``: the step of its last op and its groups' clocks after it (device, and host
    with a host model: one ``(groups,)`` array each, seconds), for a plan of aligned tilings (:func:`aligned_tiling`).

    A step's *base* ``b`` is the level of its smallest group: each aligned block of ``2^b`` ranks (a *cell*)
    lies in one of its groups. The next op's groups read the previous op's values through the cells of its
    base (one value per cell) and the maxima of aligned blocks of cells above it (pairwise, level by level),
    in a buffer per base: level ``l ≥ b`` at ``2·(R >> b) − 2·(R >> l)``.
    """

    start: np.ndarray  # per group: first rank (groups sorted by (step, start))
    size: np.ndarray  # per group: ranks
    level: np.ndarray  # per group: log2(size)
    offset: np.ndarray  # step k holds groups offset[k] .. offset[k+1] - 1
    n_ranks: int
    n_clocks: int  # 1 (device) or 2 (device, host)
    pp: int
    last: list = field(default_factory=list)  # per stage: None or (step, clocks, (virtual stage, direction, a, z))

    def __post_init__(self) -> None:
        self.last = [None] * self.pp
        off, R = self.offset.tolist(), self.n_ranks
        self._cut = [(a, z) for a, z in zip(off[:-1], off[1:], strict=True)]
        self._base = [int(self.level[a:z].min()) for a, z in self._cut]
        self._top = [int(self.level[a:z].max()) for a, z in self._cut]
        tiling: dict[bytes, int] = {}
        self._tiling = [tiling.setdefault(self.start[a:z].tobytes(), len(tiling)) for a, z in self._cut]
        self._spread: dict[tuple[int, int], np.ndarray] = {}  # (step, cell) -> _spread_of (made on first use)
        self._index: dict[tuple[int, int], np.ndarray] = {}  # (base, step) -> each group's cell in the buffer
        self._buf: dict[int, np.ndarray] = {}  # base -> (clocks, 2·(R >> base)) buffer of cells and levels
        self._R = R

    def _spread_of(self, j: int, cell: int = 1) -> np.ndarray:
        """Step ``j``'s group of each block of ``cell`` ranks (a power of two at most its smallest group: blocks
        inside one group), ``(R / cell,)``."""
        sp = self._spread.get((j, cell))
        if sp is None:
            a, z = self._cut[j]
            sp = self._spread[(j, cell)] = np.repeat(np.arange(z - a), self.size[a:z] // cell)
        return sp

    def latest(self, p: int, k: int, n: int) -> tuple[np.ndarray, ...]:
        """Each of step ``k``'s ``n`` groups: the latest of its ranks' clocks on stage ``p``, one array per clock."""
        prev = self.last[p]
        if prev is None:
            return (np.zeros(n),) * self.n_clocks
        j, clocks, _ = prev
        if self._tiling[j] == self._tiling[k]:  # the same groups: the values themselves
            return clocks
        a, z = self._cut[k]
        b, uniform = self._base[j], self._base[j] == self._top[j]
        if self._top[k] <= b:  # each new group inside one old group
            lo = self.start[a:z] >> b if uniform else self._spread_of(j).take(self.start[a:z])
            return tuple(c.take(lo) for c in clocks)
        nb, R = self._R >> b, self._R
        buf = self._buf.get(b)
        if buf is None:
            buf = self._buf[b] = np.empty((self.n_clocks, 2 * nb))
        for c, row in zip(clocks, buf, strict=True):  # the base: one value per cell
            if uniform:
                row[:nb] = c
            else:
                np.take(c, self._spread_of(j, 1 << b), out=row[:nb], mode="clip")
        for lv in range(b + 1, self._top[k] + 1):  # maxima of aligned pairs, level by level
            lo, m = 2 * nb - 2 * (R >> (lv - 1)), R >> lv
            np.maximum(buf[:, lo:lo + 2 * m:2], buf[:, lo + 1:lo + 2 * m:2], out=buf[:, lo + 2 * m:lo + 3 * m])
        idx = self._index.get((b, k))
        if idx is None:
            lv = np.maximum(self.level[a:z], b)
            idx = self._index[(b, k)] = 2 * nb - 2 * (R >> lv) + (self.start[a:z] >> lv)
        return tuple(row.take(idx) for row in buf)

    def keep(self, p: int, k: int, clocks: tuple[np.ndarray, ...], cell: tuple[int, int, int, int]) -> None:
        """Stage ``p`` ran step ``k``'s op ``cell`` (virtual stage, direction, groups ``a:z``); its groups' clocks
        are now ``clocks`` (arrays not written to afterwards)."""
        self.last[p] = (k, clocks, cell)

    def ranks(self, p: int, values: np.ndarray) -> np.ndarray:
        """Per rank of stage ``p``, ``(R,)``: ``values`` of its last op's groups (``(groups,)``), spread over their
        ranks; zeros when the stage ran nothing."""
        if self.last[p] is None:
            return np.zeros(self.n_ranks)
        a, z = self._cut[self.last[p][0]]
        return values if z - a == self.n_ranks else values.take(self._spread_of(self.last[p][0]))

    def result(self, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rank_end, rank_last_start, rank_used)``, ``(pp, R)`` each, of :class:`~dcpsim.pipeline.GroupTimes`
        (``start``: the ops' starts, ``(pp·vp, 2, G)``)."""
        end, last_start = np.zeros((self.pp, self.n_ranks)), np.zeros((self.pp, self.n_ranks))
        used = np.zeros((self.pp, self.n_ranks), dtype=bool)
        for p, prev in enumerate(self.last):
            if prev is None:
                continue
            _, clocks, (s, d, a, z) = prev
            end[p] = self.ranks(p, clocks[0])
            last_start[p] = self.ranks(p, start[s, d, a:z])
            used[p] = True
        return end, last_start, used
