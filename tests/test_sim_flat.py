"""The flat-array paths of the simulator give the per-group Python paths' results bit for bit (issue 24).

``Plan.arrays``/``packs``/``cp_histogram`` against loops over the steps' groups, and the metrics' per-rank
gather (``np.take`` of whole rows) against numpy's fancy index: the same values in the same memory layout
(the sums and means over the result add in the same order)."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.policies.plan import Group, Layout, Plan, Step, groups_per_size, steps_of_arrays
from dcpsim.sim.metrics import _by_rank
from tests.test_fastpath import random_dynamic_plan


@pytest.mark.parametrize("seed", range(6))
def test_plan_arrays_packs_and_histogram_equal_the_group_loops(seed):
    rng = np.random.default_rng(seed)
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=1 << 20)
    plan = random_dynamic_plan(rng.integers(1, 5000, int(rng.integers(1, 40))), lay, rng)
    groups = [g for st in plan.steps for g in st.groups]
    a = plan.arrays()
    assert a.step.tolist() == [k for k, st in enumerate(plan.steps) for _ in st.groups]
    assert a.start.tolist() == [g.start for g in groups] and a.size.tolist() == [g.size for g in groups]
    assert a.counts.tolist() == [len(g.seq_ids) for g in groups]
    assert a.ids.tolist() == [i for g in groups for i in g.seq_ids]
    lens, pids, cps, starts = plan.packs()
    assert lens.tolist() == [int(plan.lengths[i]) for g in groups for i in g.seq_ids]
    assert pids.tolist() == [j for j, g in enumerate(groups) for _ in g.seq_ids]
    ref: dict[int, int] = {}
    for g in groups:
        ref[g.size] = ref.get(g.size, 0) + len(g.seq_ids)
    assert list(plan.cp_histogram().items()) == sorted(ref.items())
    with pytest.raises(ValueError):
        a.start[0] = 1  # shared by the check, the group table and the durations: read-only


def test_cp_histogram_of_equals_a_loop():
    """cp_histogram_of (sizes as bins when they are small and not negative, else a sort) against a loop: the
    same sizes in ascending order, each with its sequences, as Python ints, zero counts kept."""
    from dcpsim.policies.plan import cp_histogram_of

    rng = np.random.default_rng(3)
    for t in range(300):
        n = int(rng.integers(0, 200))
        size = 2 ** rng.integers(0, 14, n) if t % 2 else rng.integers(-3 if t % 5 == 0 else 0, 50, n)
        if t % 7 == 0 and n:
            size[0] = 1 << 22
        counts = rng.integers(0, 9, n)
        ref: dict[int, int] = {}
        for c, k in zip(size.tolist(), counts.tolist(), strict=True):
            ref[c] = ref.get(c, 0) + k
        got = cp_histogram_of(size, counts)
        assert list(got.items()) == sorted(ref.items())
        assert all(type(c) is int and type(k) is int for c, k in got.items())



@pytest.mark.parametrize("seed", range(4))
def test_steps_of_arrays_are_the_plans_steps_until_edited(seed):
    """A plan of ``steps_of_arrays`` steps (groups made when read) equals the plan of the same steps as objects;
    untouched, its arrays are the ones it was made of; after an edit (a step appended, a step's groups
    replaced) its arrays follow the edit; a pickled copy is equal and reads the same arrays."""
    import pickle

    rng = np.random.default_rng(seed)
    lay = Layout(dp=4, cp=2, max_tokens_per_rank=1 << 20)
    ref = random_dynamic_plan(rng.integers(1, 5000, int(rng.integers(1, 40))), lay, rng)
    a = ref.arrays()
    plan = Plan(ref.policy, lay, ref.lengths, steps_of_arrays(a), True)
    assert plan.arrays() is a and plan.n_steps == ref.n_steps
    assert groups_per_size(plan.steps) == groups_per_size(ref.steps) and plan.cp_histogram() == ref.cp_histogram()
    copied = pickle.loads(pickle.dumps(plan))
    assert copied.arrays().ids.tolist() == a.ids.tolist()
    assert plan.steps == ref.steps and copied.steps == ref.steps  # the groups, made on this first read
    assert plan.arrays() is not a and plan.arrays().ids.tolist() == a.ids.tolist()
    fresh = Plan(ref.policy, lay, ref.lengths, steps_of_arrays(a), True)
    fresh.steps.append(Step([]))
    assert fresh.arrays().per_step.tolist() == [*a.per_step.tolist(), 0]
    edited = Plan(ref.policy, lay, ref.lengths, steps_of_arrays(a), True)
    edited.steps[0].groups = [Group(0, 1, [])]
    assert edited.arrays().start[0] == 0 and edited.arrays().counts[0] == 0 and edited.arrays().per_step[0] == 1


@pytest.mark.parametrize("lead,G,S,R", [(8, 101, 32, 64), (1, 5, 3, 1), (4, 7, 1, 9), (2, 3, 5, 1), (3, 50, 8, 2)])
def test_by_rank_equals_the_fancy_index_in_value_and_layout(lead, G, S, R):
    rng = np.random.default_rng(G * S + R)
    gid = rng.integers(-1, G, (S, R))
    for a in (rng.random((lead, G)), rng.random(G)):
        ref = np.concatenate([a, np.full(a.shape[:-1] + (1,), 0.5)], axis=-1)[..., np.where(gid < 0, G, gid)]
        got = _by_rank(a, gid, 0.5)
        assert got.shape == ref.shape and got.strides == ref.strides
        assert np.array_equal(got, ref)
        assert np.array_equal(got.sum(axis=-2), ref.sum(axis=-2)) and got.mean() == ref.mean()


@pytest.mark.parametrize("pp,vp,S", [(8, 1, 16), (4, 2, 16), (2, 1, 64)])
def test_balanced_pipeline_end_on_distinct_columns_equals_every_column(pp, vp, S):
    from dcpsim.sim.metrics import _balanced_end, balanced_pipeline_end

    rng = np.random.default_rng(pp * S)
    base = rng.random((2 * pp + pp, 300))
    cols = base[:, rng.integers(0, 300, 2048)]  # 2,048 ranks, at most 300 distinct
    f, b, x = cols[:pp], cols[pp:2 * pp], cols[2 * pp:3 * pp if vp > 1 else 3 * pp - 1]  # links: pp - 1, + wrap
    assert np.array_equal(balanced_pipeline_end(f, b, x, S, vp), _balanced_end(f, b, x, S, vp))


def test_equal_columns_groups_the_equal_columns():
    """metrics._equal_columns (checksums, each column checked against its group's first): every column maps to
    a bit-equal first column, the first columns are pairwise different (so as many as the distinct columns),
    and the balanced pipeline ends of the distinct columns, spread back, are those of every column."""
    from dcpsim.sim.metrics import _balanced_end, _equal_columns, balanced_pipeline_end

    rng = np.random.default_rng(4)
    for t in range(12):
        n, pp = 1024 + int(rng.integers(0, 600)), 4
        kinds = rng.random((2 * pp + pp - 1, int(rng.integers(1, 300))))
        cols = kinds[:, rng.integers(0, kinds.shape[1], n)]
        if t % 3 == 0:
            cols[:, :5] = -0.0  # zeros of both signs are different bits
            cols[0, 1] = 0.0
        if t % 3 == 1:  # columns 0 and 1 differ with the same checksum (bits + 3 on row 0, − 1 on row 1)
            bits = cols.view(np.uint64)
            bits[:, 1] = bits[:, 0]
            bits[0, 1] += np.uint64(3)
            bits[1, 1] -= np.uint64(1)
        f, b, x = cols[:pp], cols[pp:2 * pp], cols[2 * pp:]
        got = _equal_columns(f, b, x)
        distinct = {c.tobytes() for c in np.ascontiguousarray(cols.T)}
        if 4 * len(distinct) > 3 * n:
            assert got is None
            continue
        first, inv = got
        assert first.size == len(distinct) == len({cols[:, j].tobytes() for j in first.tolist()})
        assert np.array_equal(cols[:, first[inv]].view(np.uint64), cols.view(np.uint64))
        steps = int(rng.integers(32, 40))  # 2·pp·steps >= 256: balanced_pipeline_end reads the distinct columns
        assert np.array_equal(balanced_pipeline_end(f, b, x, steps), _balanced_end(f, b, x, steps, 1))
