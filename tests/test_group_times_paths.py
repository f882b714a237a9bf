"""group_times' fast paths give the general paths' numbers bit for bit.

:func:`dcpsim.pipeline.group_times` takes a group's latest rank from a tree of pairwise maxima when the groups
are aligned power-of-two slices (else a reduceat over the step's bounds), and runs the host rule through
:meth:`HostOps.runner` (the same operations as :func:`dcpsim.cost.host.issue`, less the ones that give their
input back). These tests run random plans both ways and compare the bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

import dcpsim.pipeline as pipeline
from dcpsim.cost.host import HostOps, OpCosts, issue


def _random_groups(rng: np.random.Generator, R: int, S: int, gaps: bool, top: int = 4):
    """Aligned power-of-two groups (sizes below ``2^top``) tiling each step's ranks (some left out when ``gaps``),
    sorted by (step, start)."""
    step, start, size = [], [], []
    for k in range(S):
        r = 0
        while r < R:
            c = 1 << int(rng.integers(0, top))
            while r % c or r + c > R:
                c //= 2
            if not (gaps and rng.random() < 0.2):
                step.append(k)
                start.append(r)
                size.append(c)
            r += c
    return np.array(step), np.array(start), np.array(size)


def _host(rng: np.random.Generator, V: int, G: int, before: float = 0.5, after: float = 0.3,
          low: int = 0) -> HostOps:
    """Random host ops: syncs before/after with these chances (0 and 1: none and all), kernels from ``low``."""
    kernels = rng.integers(low, 6, (V, 2, G)).astype(float)  # from 0: some below 1, floored
    return HostOps(rng.random((V, 2, G)) * 0.3, kernels, rng.random((V, 2, G)) < before,
                   rng.random((V, 2, G)) < after, 0.002)


@pytest.mark.parametrize("seed", range(6))
def test_tree_of_maxima_equals_reduceat(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    pp, vp = (2, 2) if seed % 2 else (3, 1)
    R, S = 16, 4
    step, start, size = _random_groups(rng, R, S, gaps=seed % 3 == 0)
    G, V = step.size, pp * vp
    f, b, x = rng.random((V, G)), rng.random((V, G)), rng.random((V - 1, G)) * 0.1
    sched = pipeline.pipeline_schedule(pp, S, vp)
    groups = pipeline.StepGroups.from_arrays(step, start, size, S, R)
    assert pipeline._tree_index(groups) is not None
    host = _host(rng, V, G)
    monkeypatch.setattr(pipeline, "aligned_tiling", lambda *a: None)  # per-rank clocks (tilings: test below)
    fast = pipeline.group_times(sched, groups, f, b, x, host=host)
    monkeypatch.setattr(pipeline, "_tree_index", lambda g: None)  # every step by its reduceat
    slow = pipeline.group_times(sched, pipeline.StepGroups.from_arrays(step, start, size, S, R), f, b, x, host=host)
    for name in ("start", "finish", "rank_end", "rank_last_start", "rank_used", "host_start", "host_end"):
        assert getattr(fast, name).tobytes() == getattr(slow, name).tobytes(), name


def _tilings(rng: np.random.Generator, R: int, S: int):
    """Per step an aligned power-of-two tiling of ``R`` ranks: mixed sizes, one size (from single ranks to all of
    them), or a repeat of an earlier step's tiling; as sorted (step, start, size) arrays."""
    tilings: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(S):
        kind = rng.integers(0, 3)
        if kind == 0 or not tilings:
            _, st, sz = _random_groups(rng, R, 1, gaps=False, top=int(rng.integers(1, 6)))
        elif kind == 1:
            c = 1 << int(rng.integers(0, int(np.log2(R)) + 1))
            st, sz = np.arange(0, R, c), np.full(R // c, c)
        else:
            st, sz = tilings[int(rng.integers(0, len(tilings)))]
        tilings.append((st, sz))
    step = np.concatenate([np.full(st.size, k) for k, (st, _) in enumerate(tilings)])
    return step, np.concatenate([t[0] for t in tilings]), np.concatenate([t[1] for t in tilings])


@pytest.mark.parametrize("seed", range(12))
def test_group_clocks_equal_rank_clocks(seed, monkeypatch):
    """Plans whose steps tile the ranks keep per-group clocks (dcpsim.pipeline_tiling): every result equals the
    per-rank path's bit for bit, with and without a host, with and without transfers, 1F1B and interleaved."""
    rng = np.random.default_rng(100 + seed)
    pp, vp = ((2, 2), (3, 1), (4, 1), (2, 3))[seed % 4]
    R, S = (16, 32)[seed % 2], pp * int(rng.integers(2, 4))
    step, start, size = _tilings(rng, R, S)
    G, V = step.size, pp * vp
    f, b = rng.random((V, G)), rng.random((V, G))
    x = rng.random((V - 1, G)) * 0.1 if seed % 3 else None
    host = _host(rng, V, G) if seed % 2 == 0 else None
    sched = pipeline.pipeline_schedule(pp, S, vp)
    level = pipeline.aligned_tiling(start, size, pipeline.StepGroups.from_arrays(step, start, size, S, R).offset, R)
    assert level is not None and level.tolist() == np.log2(size).astype(int).tolist()
    gate = lambda s, ready, dur: ready + 2.0 * dur  # noqa: E731 - a first-forward wait (the parameter all-gather)
    fast = pipeline.group_times(sched, pipeline.StepGroups.from_arrays(step, start, size, S, R), f, b, x, gate, host=host)
    monkeypatch.setattr(pipeline, "aligned_tiling", lambda *a: None)  # per-rank clocks
    slow = pipeline.group_times(sched, pipeline.StepGroups.from_arrays(step, start, size, S, R), f, b, x, gate, host=host)
    for name in ("start", "finish", "rank_end", "rank_last_start", "rank_used", "host_start", "host_end"):
        assert np.asarray(getattr(fast, name)).tobytes() == np.asarray(getattr(slow, name)).tobytes(), name


def test_aligned_tiling_only_for_aligned_tilings():
    """Gaps, overlaps, unaligned or non-power-of-two groups, and an empty step keep the per-rank clocks."""
    def level(step, start, size, S=2, R=8):
        groups = pipeline.StepGroups.from_arrays(step, start, size, S, R)
        return pipeline.aligned_tiling(groups.start, groups.size, groups.offset, R)

    assert level([0, 0, 1], [0, 4, 0], [4, 4, 8]).tolist() == [2, 2, 3]
    assert level([0, 1], [0, 0], [4, 8]) is None  # ranks 4..7 left out in step 0
    assert level([0, 0, 1], [0, 2, 0], [4, 4, 8]) is None  # overlapping groups
    assert level([0, 0, 0, 1], [0, 2, 6, 0], [2, 4, 2, 8]) is None  # a group of 4 at rank 2
    assert level([0, 0, 1], [0, 3, 0], [3, 5, 8]) is None  # sizes 3 and 5
    assert level([0, 0], [0, 4], [4, 4]) is None  # step 1 has no groups
    assert level([0, 0, 1, 1], [0, 8, 0, 8], [8, 4, 8, 4], R=12) is None  # 12 ranks: not a multiple of 8


@pytest.mark.parametrize("before, after, low", [(0.0, 0.0, 1), (0.5, 0.3, 0), (1.0, 1.0, 1), (0.5, 1.0, 0)])
def test_host_runner_equals_issue(before, after, low):
    rng = np.random.default_rng(7)
    V, G = 3, 200
    host = _host(rng, V, G, before, after, low)
    fwd, bwd = rng.random((V, G)), rng.random((V, G))
    run = host.runner(fwd, bwd)
    for s in range(V):
        for d, dur in enumerate((fwd, bwd)):
            a, z = 13, 170
            host_free, ready = rng.random(z - a), rng.random(z - a)
            ops = OpCosts(host.host_s[s, d, a:z], dur[s, a:z], host.kernels[s, d, a:z], host.sync_before[s, d, a:z],
                          host.sync_after[s, d, a:z])
            H, start, end, after = issue(host_free, ready, ready, ops, host.sync_s)
            keep = (host_free.copy(), ready.copy())
            for n_out in (0, 2, 3):  # no arrays to write into, the device start and host free after, and the issue start
                outs = tuple(np.full(z - a, np.nan) for _ in range(n_out))
                got = run(s, d, a, z, host_free, ready, outs)
                for want, have in zip((start, end, after, H), got, strict=True):
                    assert np.asarray(want).tobytes() == np.asarray(have).tobytes()
                for o, have in zip(outs, (got[0], got[2], got[3]), strict=False):
                    assert o.tobytes() == np.asarray(have).tobytes()  # written into the given array
                assert (host_free.tobytes(), ready.tobytes()) == (keep[0].tobytes(), keep[1].tobytes())  # inputs kept


def test_rank_arrays_of_alike_stages_equal_every_stage(monkeypatch):
    """rank_arrays gathers stages (and links) of bit-equal durations once: the same arrays, laid out alike, as
    with every stage gathered."""
    import dcpsim.sim.metrics as metrics
    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    cfg = RunConfig().with_updates({"cluster.gpus": 64, "parallel.pp": 8, "parallel.cp": 2, "workload.gbs": 256,
                                    "policy.name": "dynamic", "sim.iterations": 1})
    rec = run_simulation(cfg).records[0]
    assert len(metrics._alike_rows(rec.work.fwd_s, rec.work.bwd_s)[0]) < 8  # some stages alike
    fast = metrics.rank_arrays(rec)
    monkeypatch.setattr(metrics, "_alike_rows", lambda *a: (list(range(a[0].shape[0])), list(range(a[0].shape[0]))))
    slow = metrics.rank_arrays(rec)
    for name, v in fast.items():
        assert v.strides == slow[name].strides and v.tobytes() == slow[name].tobytes(), name
        assert v.mean().tobytes() == slow[name].mean().tobytes(), name


@pytest.mark.parametrize("gaps", [False, True])
def test_every_op_cell_written(gaps, monkeypatch):
    """group_times' per-op arrays start uninitialised (dcpsim.pipeline_tiling.op_arrays): here NaN-filled, and no
    NaN is left in any result (every op writes all of its groups' cells; groups in no step are zeroed)."""
    import dcpsim.pipeline_tiling as tiling

    class _NaNEmpty:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(shape, *a, **k):
            return np.full(shape, np.nan)

    monkeypatch.setattr(tiling, "np", _NaNEmpty())
    rng = np.random.default_rng(5)
    pp, R, S = 3, 8, 4
    step, start, size = _random_groups(rng, R, S, gaps=gaps)
    step = np.r_[step, S]  # a group past the last step: in no op, zero
    start, size = np.r_[start, 0], np.r_[size, R]
    G = step.size
    f, b, x = rng.random((pp, G)), rng.random((pp, G)), rng.random((pp - 1, G))
    gt = pipeline.group_times(pipeline.pipeline_schedule(pp, S), pipeline.StepGroups.from_arrays(step, start, size, S, R),
                              f, b, x, host=_host(rng, pp, G))
    for name in ("start", "finish", "host_start", "host_end"):
        v = getattr(gt, name)
        assert not np.isnan(v).any() and (v[..., -1] == 0.0).all(), name
