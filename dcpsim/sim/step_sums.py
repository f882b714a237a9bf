"""Per stage rank, a reduction over the steps of per-group values, without a ``(steps, ranks)`` array.

:func:`dcpsim.sim.metrics.rank_arrays` adds up, per stage rank ``r``, the values of the groups that ``r``
belongs to, step after step (``Σ_k v[gid[k, r]]``, seconds or tokens), and takes their maximum (memory). The
general path gathers a ``(steps, ranks)`` array and reduces over its step axis; numpy's reduction over a
non-innermost axis adds the steps one after the other, first to last, per rank. When every step's groups
tile the ranks with aligned power-of-two slices (dynamic CP's and packing's plans), all ranks of an aligned
block of ``2^b`` ranks (a *cell*, ``b`` the level of the step's smallest group) share their group, so the
running totals are kept per cell of the finest step so far: one value per cell, split into finer cells
(a copy of the value) when a step with smaller groups comes. Each rank's total is the same sequence of
float64 additions as the general path's, so the same number bit for bit (tested against the general path).

Cost: ``Σ_k R / 2^{b_k'}`` element operations per row (``b_k'`` the smallest level of steps ``0..k``) against
``S·R`` for ``S`` steps of ``R`` ranks: plans whose early steps hold the large groups (PR #2959's) gain most.
"""

from __future__ import annotations

import numpy as np

from dcpsim.pipeline_tiling import aligned_levels


def tiled_bases(step: np.ndarray, start: np.ndarray, size: np.ndarray, gid: np.ndarray) -> list[int] | None:
    """Per step, the level ``b`` (``2^b`` ranks) of its smallest group, when every step's groups tile the stage's
    ranks with aligned power-of-two slices (``gid``: ``(steps, R)``, each rank's group per step, ``−1``: none);
    else None."""
    S, R = gid.shape
    if S == 0 or R == 0 or step.size == 0 or size.min() < 1 or gid.min() < 0 or step.min() < 0 or step.max() >= S:
        return None
    level = aligned_levels(start, size, R)
    if level is None:
        return None
    if not np.array_equal(np.bincount(step, weights=size, minlength=S), np.full(S, float(R))):
        return None  # every rank in some group (gid) and the sizes adding up to R: each rank in exactly one
    base = np.full(S, -1, dtype=np.int64)
    for lv in np.flatnonzero(np.bincount(level)).tolist():  # from the smallest level present up
        has = (np.bincount(step[level == lv], minlength=S) > 0) & (base < 0)
        base[has] = lv
    return base.tolist()


def step_reduce(values: np.ndarray, gid: np.ndarray, bases: list[int], ufunc: np.ufunc = np.add) -> np.ndarray:
    """Per row of ``values`` (``(rows, G)``, per group) and stage rank ``r``: ``ufunc`` over the steps ``k`` (first
    to last) of ``values[:, gid[k, r]]``, ``(rows, R)``, for a plan of :func:`tiled_bases` ``bases``."""
    level = bases[0]
    acc = np.take(values, gid[0, ::1 << level], axis=1)
    for k in range(1, len(bases)):
        if bases[k] < level:  # finer cells: each cell's value split over its halves, quarters, ...
            acc = np.repeat(acc, 1 << (level - bases[k]), axis=1)
            level = bases[k]
        ufunc(acc, np.take(values, gid[k, ::1 << level], axis=1), out=acc)
    return acc if level == 0 else np.repeat(acc, 1 << level, axis=1)
