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


def _random_groups(rng: np.random.Generator, R: int, S: int, gaps: bool):
    """Aligned power-of-two groups tiling each step's ranks (some left out when ``gaps``), sorted by (step, start)."""
    step, start, size = [], [], []
    for k in range(S):
        r = 0
        while r < R:
            c = 1 << int(rng.integers(0, 4))
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
    fast = pipeline.group_times(sched, groups, f, b, x, host=host)
    monkeypatch.setattr(pipeline, "_tree_index", lambda g: None)  # every step by its reduceat
    slow = pipeline.group_times(sched, pipeline.StepGroups.from_arrays(step, start, size, S, R), f, b, x, host=host)
    for name in ("start", "finish", "rank_end", "rank_last_start", "rank_used", "host_start", "host_end"):
        assert getattr(fast, name).tobytes() == getattr(slow, name).tobytes(), name


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
            outs = (np.empty(z - a), np.empty(z - a))
            got = run(s, d, a, z, host_free, ready, outs)
            for want, have in zip((start, end, after, H), got, strict=True):
                assert np.asarray(want).tobytes() == np.asarray(have).tobytes()


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
