"""Plan.validate (vectorised) names the same first broken invariant as a plain sequential check."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from dcpsim.cost import CostModel
from dcpsim.cost.padding import per_rank_tokens
from dcpsim.policies import Group, Layout, PlanError, Step, get_policy


def reference_error(plan) -> str | None:
    """The invariants checked one group at a time, in step order (the specification)."""
    n = len(plan.lengths)
    seen = np.zeros(n, dtype=np.int64)
    for k, st in enumerate(plan.steps):
        used = np.zeros(plan.layout.ranks_per_stage, dtype=bool)
        for g in st.groups:
            err = _group_error(plan, k, g, used)
            if err:
                return err
            np.add.at(seen, np.asarray(g.seq_ids, dtype=np.int64), 1)
    for i, reason in plan.dropped.items():
        if not 0 <= i < n:
            return f"dropped sequence id {i} out of range"
        seen[i] += 1
        if not reason:
            return f"dropped sequence {i} has no reason"
    bad = np.nonzero(seen != 1)[0]
    return f"sequence {int(bad[0])} is scheduled {int(seen[bad[0]])} times (expected exactly once)" if bad.size else None


def _group_error(plan, k: int, g, used: np.ndarray) -> str | None:
    lay, n, R = plan.layout, len(plan.lengths), plan.layout.ranks_per_stage
    a, c = g.start, g.size
    if c < 1 or a < 0 or a + c > R:
        return f"step {k}: group ranks [{a}, {a + c}) outside 0..{R}"
    if used[a:a + c].any():
        return f"step {k}: a rank in [{a}, {a + c}) is in two groups"
    used[a:a + c] = True
    if plan.dynamic and (c & (c - 1) or a % c):
        return f"step {k}: group [{a}, +{c}) is not an aligned power-of-two slice"
    if plan.dynamic and c < lay.min_cp:
        return f"step {k}: group size {c} < min_cp {lay.min_cp}"
    if not plan.dynamic and (c != lay.cp or a % lay.cp):
        return f"step {k}: static plan has group [{a}, +{c}) not of CP size {lay.cp}"
    ids = np.asarray(g.seq_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        return f"step {k}: sequence id out of range"
    tok = int(per_rank_tokens(plan.lengths[ids], c).sum())
    if tok > lay.max_tokens_per_rank:
        return f"step {k}: group [{a}, +{c}) holds {tok:.0f} tokens per rank > capacity {lay.max_tokens_per_rank}"
    return None


def _mutate(plan, rng):
    # new steps, groups and member lists (what a mutation edits; lengths are copied before an edit below), the
    # rest shared: a deep copy also copied the lazy bound's cost model, whose memos a long session fills
    # (4.5 s for this test in the whole suite against 1.6 s alone)
    p = copy.copy(plan)
    p.steps = [Step([Group(g.start, g.size, list(g.seq_ids)) for g in st.groups]) for st in plan.steps]
    groups = [g for st in p.steps for g in st.groups]
    g = groups[int(rng.integers(len(groups)))]
    what = int(rng.integers(7))
    if what == 0:
        g.start += int(rng.integers(1, 4))
    elif what == 1:
        g.size *= 2
    elif what == 2:
        g.start = -1
    elif what == 3 and g.seq_ids:
        g.seq_ids.append(g.seq_ids[0])
    elif what == 4:
        g.seq_ids.append(len(p.lengths) + 3)
    elif what == 5 and g.seq_ids:
        g.seq_ids.pop()
    else:
        p.lengths = p.lengths.copy()
        if g.seq_ids:
            p.lengths[g.seq_ids[0]] = p.layout.max_tokens_per_rank * g.size * 4
    return p


@pytest.mark.parametrize("policy", ["dynamic", pytest.param("packing", marks=pytest.mark.slow), "dynamic-solver"])
def test_validate_matches_the_sequential_check(policy):
    rng = np.random.default_rng(3)
    lay = Layout(dp=6, cp=2, max_tokens_per_rank=4096, pp=2, min_cp=1)
    cost = CostModel.build("h100-sxm", "llama-13b", pp=2, dp_cp=12)
    lengths = np.clip(rng.lognormal(np.log(1500), 1.2, 120), 1, 2 * 4096 - 4).astype(np.int64)
    plan = get_policy(policy).plan(lengths, lay, cost)
    assert reference_error(plan) is None
    broken = 0
    for _ in range(150):
        p = _mutate(plan, rng)
        want = reference_error(p)
        if want is None:
            p.check()
            continue
        broken += 1
        with pytest.raises(PlanError) as err:
            p.check()
        assert str(err.value) == want
    assert broken > 100
