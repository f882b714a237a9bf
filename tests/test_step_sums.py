"""Per-rank reductions over the steps, cell by cell (dcpsim.sim.step_sums), equal the (steps, ranks) gathers bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.sim.step_sums import step_reduce, tiled_bases


def _tiling(rng: np.random.Generator, R: int, S: int, order: str):
    """Steps of aligned power-of-two groups tiling ``R`` ranks (group sizes up to ``R``): smallest groups growing
    (``coarse``: large groups first, as PR #2959's plans), shrinking, at random, or at random of 2 ranks and more
    (``large``); ``(step, start, size, gid)``."""
    top = int(np.log2(R))
    lows = {"coarse": np.linspace(top, 0, S), "fine": np.linspace(0, top, S),
            "large": rng.integers(1, top + 1, S)}.get(order, rng.integers(0, top + 1, S))
    step, start, size = [], [], []
    gid = np.empty((S, R), dtype=np.int64)
    for k in range(S):
        low, r = int(lows[k]), 0
        while r < R:
            c = 1 << int(rng.integers(low, min(low + 2, top) + 1))
            while r % c or r + c > R:
                c //= 2
            gid[k, r:r + c] = len(step)
            step.append(k)
            start.append(r)
            size.append(c)
            r += c
    return np.array(step), np.array(start), np.array(size), gid


@pytest.mark.parametrize("order", ["coarse", "fine", "random", "large"])
@pytest.mark.parametrize("seed", range(3))
def test_step_reduce_equals_the_gathered_reduction(order, seed):
    rng = np.random.default_rng(seed)
    R, S = 64, 9
    step, start, size, gid = _tiling(rng, R, S, order)
    bases = tiled_bases(step, start, size, gid)
    assert bases == [int(np.log2(size[step == k].min())) for k in range(S)]
    values = rng.random((3, step.size)) * 10.0 ** rng.integers(-6, 6, (3, step.size))  # magnitudes that round
    gathered = values[:, gid]  # (rows, S, R)
    assert step_reduce(values, gid, bases).tobytes() == gathered.sum(axis=1).tobytes()
    assert (step_reduce(values, gid, bases) / S).tobytes() == gathered.mean(axis=1).tobytes()
    assert step_reduce(values, gid, bases, np.maximum).tobytes() == gathered.max(axis=1).tobytes()


def test_tiled_bases_only_for_aligned_tilings():
    """A rank left out, overlapping groups, an unaligned or non-power-of-two group: the (steps, ranks) gathers."""
    R = 8

    def bases(step, start, size):
        step, start, size = np.array(step), np.array(start), np.array(size)
        gid = np.full((int(step.max()) + 1, R), -1)
        for g, (k, a, c) in enumerate(zip(step, start, size, strict=True)):
            gid[k, a:a + c] = g
        return tiled_bases(step, start, size, gid)

    assert bases([0, 0, 1], [0, 4, 0], [4, 4, 8]) == [2, 3]
    assert bases([0, 1], [0, 0], [4, 8]) is None  # ranks 4..7 left out of step 0
    assert bases([0, 0, 0, 1], [0, 4, 2, 0], [4, 4, 2, 8]) is None  # rank 2..3 in two groups
    assert bases([0, 0, 0, 1], [0, 2, 6, 0], [2, 4, 2, 8]) is None  # a group of 4 at rank 2
    assert bases([0, 0, 1], [0, 3, 0], [3, 5, 8]) is None  # sizes 3 and 5


@pytest.mark.parametrize("policy, vp", [("dynamic-pr2959", 1), ("dynamic-pr2959", 2), ("packing-balanced", 2)])
def test_rank_arrays_cell_by_cell_equal_the_gathers(policy, vp, monkeypatch):
    """rank_arrays of a plan whose steps tile the ranks: the same arrays, laid out alike, with the same means,
    as from the (steps, ranks) gathers."""
    import dcpsim.sim.metrics as metrics
    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    cfg = RunConfig().with_updates({"cluster.gpus": 256, "parallel.pp": 4, "parallel.cp": 8, "parallel.vp": vp,
                                    "workload.gbs": 1024, "policy.name": policy, "sim.iterations": 1})
    rec = run_simulation(cfg).records[0]
    t = rec.work.table
    assert metrics.tiled_bases(t.step, t.start, t.size, t.gid) is not None
    fast = metrics.rank_arrays(rec)
    monkeypatch.setattr(metrics, "tiled_bases", lambda *a: None)
    slow = metrics.rank_arrays(rec)
    for name, v in fast.items():
        assert v.strides == slow[name].strides and v.tobytes() == slow[name].tobytes(), name
        assert v.mean().tobytes() == slow[name].mean().tobytes(), name


def test_group_table_of_tiled_plans_equals_the_scatter(monkeypatch):
    """build_group_table's rank map of plans whose groups tile every step in order (a reshape of the members'
    groups) equals the general scatter's, and plans that do not (gaps, groups out of rank order) take the scatter."""
    import dcpsim.sim.graph as graph
    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    plans = []
    for policy, vp in (("dynamic-pr2959", 1), ("packing-balanced", 2), ("dynamic", 2)):
        cfg = RunConfig().with_updates({"cluster.gpus": 256, "parallel.pp": 4, "parallel.cp": 8, "parallel.vp": vp,
                                        "workload.gbs": 1024, "policy.name": policy, "sim.iterations": 1})
        plans.append(run_simulation(cfg).plans[0])
    tiled = []
    for plan in plans:
        a = plan.arrays()
        tiled.append(graph._tiles_in_order(a.step, a.start, a.size, plan.n_steps, plan.layout.ranks_per_stage))
        fast = graph.build_group_table(plan).gid
        with monkeypatch.context() as m:
            m.setattr(graph, "_tiles_in_order", lambda *args: False)
            slow = graph.build_group_table(plan).gid
        assert fast.dtype == slow.dtype and fast.shape == slow.shape and fast.tobytes() == slow.tobytes()
    assert tiled == [True, True, False]  # the dynamic plan of vp 2 leaves ranks out of some steps
    step, start, size = np.array([0, 0, 1]), np.array([4, 0, 0]), np.array([4, 4, 8])  # step 0's groups out of order
    assert not graph._tiles_in_order(step, start, size, 2, 8)
    assert graph._tiles_in_order(step, start[[1, 0, 2]], size, 2, 8)
    assert not graph._tiles_in_order(np.array([0, 0, 2]), np.array([0, 4, 0]), size, 2, 8)  # step 1 skipped
    assert not graph._tiles_in_order(step[[1, 0, 2]], np.array([0, 4, 0]), np.array([4, 8, 4]), 2, 8)  # past rank 7
    assert not graph._tiles_in_order(np.array([0, 1]), np.array([2, -2]), np.array([6, 10]), 2, 8)  # not from rank 0
