"""``dynamic-solver``'s bulk paths stop where a guard says the full decision may differ: small batches built to
reach each guard (runs of equal lengths, times that land just past a step's height), compared with the
reference switches as the random cases of ``test_solver_fill.py``, ``test_solver_open.py`` and
``test_policy_scale.py`` are. Each case fails with its guard relaxed (checked by hand: the guard edited, the
case run, the edit reverted)."""

from __future__ import annotations

import numpy as np
from policy_cases import same_solver_plans

from dcpsim.policies import Layout


def _runs(*runs: tuple[int, int]) -> np.ndarray:
    """A batch of ``(length, count)`` runs."""
    return np.concatenate([np.full(n, length, dtype=np.int64) for length, n in runs])


def test_take_stops_at_the_step_height():
    """A run of tiny sequences fills a group up to its step's height (``_take``'s binary search over the
    running sums, 8 or more of them left): the first one past the height goes to the full decision, even
    where it would raise the step by under 0.1%."""
    from dcpsim.policies import solver_placer

    layout = Layout(dp=5, cp=1, max_tokens_per_rank=256, pp=1, gpus_per_domain=2)
    same_solver_plans([(layout, _runs((366, 6), (183, 10), (3, 9)))], [(solver_placer._Placer, "bulk", False)], [])


def test_walk_ends_where_the_best_outside_the_cell_ties():
    """Two of half the tallest length make a group as tall as the tallest one's, so a walk's pick can tie
    with the best group outside its cell (the same new time): the walk stops where the lower id is outside."""
    from dcpsim.policies import solver_placer

    layout = Layout(dp=5, cp=4, max_tokens_per_rank=1024, pp=2, gpus_per_domain=8)
    lengths = _runs((6154, 3), (3074, 29), (243, 9), (49, 13), (9, 3))
    same_solver_plans([(layout, lengths)], [(solver_placer._Placer, "bulk", False)], [])
