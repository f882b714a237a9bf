"""The dynamic policy's equal-length runs placed in bulk (a run joining one group, or opening one group each)
give the plans of choosing for every sequence (issue 24: the planner's fixed windows are one long run)."""

from __future__ import annotations

import numpy as np
import pytest
from policy_cases import cost_model

from dcpsim.policies import get_policy
from dcpsim.policies.plan import Layout


def _plan_rows(plan) -> tuple:
    steps = tuple(tuple((g.start, g.size, tuple(g.seq_ids)) for g in s.groups) for s in plan.steps)
    return steps, repr(sorted((k, v) for k, v in plan.meta.items() if "wall" not in k))  # host wall time aside


@pytest.mark.parametrize("seed", range(12))
def test_bulk_runs_give_the_per_sequence_plans(monkeypatch, seed):
    import dcpsim.policies.dynamic as dyn

    rng = np.random.default_rng(seed)
    dp = int(rng.choice([2, 4, 8, 16, 64]))
    cp = int(rng.choice([1, 2]))
    M = int(rng.choice([4096, 8192, 16384, 32768]))
    # a few lengths repeated many times (fixed windows are one length), plus some long ones
    base = rng.choice([512, 1024, 2048, 4096, 8192], size=int(rng.integers(1, 4)))
    lengths = np.concatenate([np.repeat(base, rng.integers(8, 200, size=base.size)),
                              rng.integers(256, 2 * M * cp, size=int(rng.integers(0, 6)))])
    rng.shuffle(lengths)
    lay = Layout(dp=dp, cp=cp, max_tokens_per_rank=M)
    cost = cost_model(1, 1, dp * cp)
    delta = float(rng.choice([0.0, 0.05, 0.2]))
    bulk = get_policy("dynamic", cap_delta=delta).plan(lengths, lay, cost, rng=np.random.default_rng(0))
    monkeypatch.setattr(dyn, "BULK_SAME", False)
    each = get_policy("dynamic", cap_delta=delta).plan(lengths, lay, cost, rng=np.random.default_rng(0))
    assert _plan_rows(bulk) == _plan_rows(each)


def test_fixed_windows_open_one_group_per_rank_in_bulk(monkeypatch):
    """Equal windows on a layout whose ranks take several of them: the same plan with and without the bulk
    paths (the first sequences open a group each, the rest join)."""
    import dcpsim.policies.dynamic as dyn

    lay = Layout(dp=32, cp=1, max_tokens_per_rank=4 * 4096)
    lengths = np.full(1024, 4096)
    cost = cost_model(1, 1, 32)
    bulk = get_policy("dynamic").plan(lengths, lay, cost, rng=np.random.default_rng(0))
    monkeypatch.setattr(dyn, "BULK_SAME", False)
    each = get_policy("dynamic").plan(lengths, lay, cost, rng=np.random.default_rng(0))
    assert _plan_rows(bulk) == _plan_rows(each) and len(bulk.steps) == 8


@pytest.mark.parametrize("seed", range(8))
def test_groups_opened_at_once_are_those_opened_one_by_one(monkeypatch, seed):
    """new_same's followers opening one group each, all at once (_open_many: the free slices in order, the tree's
    minima refreshed once), give the plans and the final microbatch state (groups, ranks, trees, search cursors)
    of one apply after another; runs of lengths that need CP 1, 2 or 4 on layouts with several microbatches."""
    import dcpsim.policies.dynamic as dyn

    rng = np.random.default_rng(100 + seed)
    dp = int(rng.choice([4, 8, 16, 32]))
    M = int(rng.choice([4096, 8192]))
    lens = rng.choice([M // 2, M, 2 * M, 3 * M], size=int(rng.integers(1, 4)))
    lengths = np.concatenate([np.repeat(lens, rng.integers(4, 120, size=lens.size)), rng.integers(256, 4 * M, size=3)])
    rng.shuffle(lengths)
    lay = Layout(dp=dp, cp=1, max_tokens_per_rank=M)
    cost = cost_model(1, 1, dp)
    states: dict[bool, list] = {True: [], False: []}
    fill = dyn._Ctx._fill_empty_ranks

    def spy(self, mb, *args):  # the microbatch as built, before its empty ranks are filled
        states[dyn.BULK_OPEN].append((bytes(mb.used), list(mb.cursor), mb.ng, list(mb.g_k), list(mb.g_start),
                                      [list(m) for m in mb.members], mb.g_tok[: mb.ng].tolist(),
                                      mb.g_load[: mb.ng].tolist(), [(t.tok, t.load, t.gid) for t in mb.trees],
                                      mb.n_free, mb.big, mb.cur_max))
        return fill(self, mb, *args)

    monkeypatch.setattr(dyn._Ctx, "_fill_empty_ranks", spy)
    plans = {}
    for bulk in (True, False):
        monkeypatch.setattr(dyn, "BULK_OPEN", bulk)
        plans[bulk] = get_policy("dynamic").plan(lengths, lay, cost, rng=np.random.default_rng(0))
    assert _plan_rows(plans[True]) == _plan_rows(plans[False])
    assert states[True] == states[False] and states[True]
