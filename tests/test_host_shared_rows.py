"""host_ops(shared=True): one row per distinct virtual stage, equal to computing every stage on its own (the arrays the
simulator used to copy row by row), and the host runner reads the same values through the stage-to-row map."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.cost import host as host_mod
from dcpsim.cost.host import PassShape, StepFlags, host_ops
from dcpsim.hardware.host import HostCosts

X86 = HostCosts(cpu="x86", kernel_fwd_s=24e-6, kernel_bwd_s=35e-6, kernel_launch_s=6.5e-6, module_call_s=10e-6,
                collective_call_s=44e-6, sync_s=5e-6, microbatch_s=100e-6, param_tensor_s=6e-6, step_s=1e-3,
                graph_replay_s=6.5e-6, graph_kernel_s=0.9e-6)

CASES = [  # (stage layers, vp, flags)
    ([4, 4, 4, 4], 1, StepFlags(thd=True, dynamic_cp=True)),
    ([4, 4, 4, 4], 2, StepFlags(thd=True, dynamic_cp=True, overlap_p2p_comm=False)),
    ([3, 4, 4, 5, 4, 4], 2, StepFlags(deterministic=True)),
    ([2, 2, 2], 3, StepFlags(attention_mask_in_dataloader=False, timing_log_level=2)),
    ([8], 4, StepFlags(thd=True, dynamic_cp=True)),
]


def _shape(layers: list[int], vp: int, rng: np.random.Generator) -> PassShape:
    G = 9
    cps = rng.choice([1, 2, 4, 8], G)
    return PassShape(stage_layers=np.array(layers), vp=vp, tp=2, kernels_fwd=rng.uniform(10, 40, G),
                     kernels_bwd=rng.uniform(10, 60, G), collectives_fwd=rng.integers(0, 5, G).astype(float),
                     collectives_bwd=rng.integers(0, 5, G).astype(float), n_seqs=rng.integers(1, 4, G),
                     first_step=rng.random(G) < 0.5, cps=cps)


@pytest.mark.parametrize("layers,vp,flags", CASES)
def test_shared_rows_equal_every_stage_computed_alone(monkeypatch, layers, vp, flags):
    shape = _shape(layers, vp, np.random.default_rng(len(layers) * 10 + vp))
    shared, full = host_ops(shape, X86, flags, shared=True), host_ops(shape, X86, flags)
    with monkeypatch.context() as m:  # every virtual stage its own row: each computed alone
        m.setattr(host_mod, "_stage_key", lambda s, layers, V: s)
        alone = host_ops(shape, X86, flags, shared=True)
    V = len(layers) * vp
    assert alone.stage_row == tuple(range(V)) and len(set(shared.stage_row)) < V  # the case shares rows
    assert full.stage_row is None and full.host_s.shape == (V, 2, 9)
    for name in ("host_s", "kernels", "sync_before", "sync_after"):
        want = getattr(alone, name)
        assert np.array_equal(getattr(full, name), want)
        assert np.array_equal(getattr(shared, name)[list(shared.stage_row)], want)
        assert getattr(shared, name).shape[0] == len(set(shared.stage_row))
    # the runner on the shared rows gives the full arrays' results bit for bit
    rng = np.random.default_rng(1)
    fwd, bwd = rng.uniform(1e-4, 1e-3, (V, 9)), rng.uniform(1e-4, 1e-3, (V, 9))
    run_s, run_f = shared.runner(fwd, bwd), full.runner(fwd, bwd)
    for s in range(V):
        for d in (0, 1):
            free, ready = rng.uniform(0, 1e-3, 5), rng.uniform(0, 1e-3, 5)
            for x, y in zip(run_s(s, d, 2, 7, free, ready), run_f(s, d, 2, 7, free, ready), strict=True):
                assert np.array_equal(x, y)
            got, want = (o.run(s, d, 2, 7, free, ready, fwd[s, 2:7]) for o in (shared, full))
            assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
    order = rng.permutation(9)
    assert np.array_equal(shared.take_groups(order).full().host_s, full.take_groups(order).host_s)


def _record(policy: str, pp: int, hook=None, cp: int = 4):
    from dcpsim.run import RunConfig
    from dcpsim.run.single import _next_plan, _prepare

    cfg = RunConfig().with_updates({"cluster.gpus": 64, "parallel.pp": pp, "parallel.cp": cp, "parallel.tp": 1,
                                    "policy.name": policy, "workload.gbs": 128, "sim.iterations": 1, "sim.seed": 3,
                                    "sim.planning": "ignore", "sim.engine": "fast"})
    prepared = _prepare(cfg, None, None)
    plan, _ = _next_plan(prepared, 0)
    if hook is not None:
        hook(prepared.sim.durations)
    return prepared.sim.simulate(plan, validate=False)


@pytest.mark.parametrize("policy,pp", [("dynamic-pr2959", 4), ("packing", 8)])
def test_broadcast_transfers_equal_one_row_per_link(monkeypatch, policy, pp):
    """Every link alike: ``xfer_s`` is one read-only row broadcast, equal to a row computed per link (the links'
    arrays as distinct objects take that path), and the iteration's times equal bit for bit."""
    from dcpsim.sim import durations
    from dcpsim.sim.metrics import _alike_rows

    got = _record(policy, pp)
    link_groups = durations.DurationModel._link_groups
    with monkeypatch.context() as m:  # each link's arrays a distinct object: a row computed per link
        m.setattr(durations.DurationModel, "_link_groups",
                  lambda self, table: tuple((a.copy(), b.copy()) for a, b in link_groups(self, table)))
        m.setattr(durations.DurationModel, "_layout_memo", lambda self, kind, G, s, z, make: make())
        want = _record(policy, pp)
    x, y = got.work.xfer_s, want.work.xfer_s
    assert x.strides[0] == 0 and y.strides[0] != 0 and y.flags.writeable and not x.flags.writeable
    assert np.array_equal(x, y) and x.shape == y.shape
    assert _alike_rows(x) == _alike_rows(y) == _alike_rows(x, y) == ([0], [0] * (pp - 1))
    for name in ("start", "finish", "stage_end_s"):
        assert np.array_equal(getattr(got.timeline, name), getattr(want.timeline, name))
    assert got.iteration_time_s == want.iteration_time_s


@pytest.mark.parametrize("policy,pp,cp", [("dynamic-pr2959", 4, 4), ("packing", 2, 16)])
def test_broadcast_spans_equal_one_row_per_stage(monkeypatch, policy, pp, cp):
    """Every stage alike: ``spans_network`` (and the network factors) one read-only row broadcast, costed on that
    row (:func:`dcpsim.sim.packcosts.pack_costs`), equal to a row computed per stage; the same durations."""
    from dcpsim.sim import durations

    got = _record(policy, pp, cp=cp)

    def alone(dm) -> None:  # no stage alike another: a row computed per stage, costed on every row
        monkeypatch.setattr(dm.network, "stage_class", lambda p: None)

    with monkeypatch.context() as m:
        m.setattr(durations.DurationModel, "_layout_memo", lambda self, kind, G, s, z, make: make())
        want = _record(policy, pp, alone, cp)
    x, y = got.work.spans_network, want.work.spans_network
    assert x.strides[0] == 0 and y.strides[0] != 0 and x.shape == y.shape == (pp, x.shape[1])
    assert np.array_equal(x, y) and x[0].any()  # some groups leave their NVLink domain
    for name in ("fwd_s", "bwd_s", "cp_fwd_s", "cp_bwd_s", "local_tokens", "peak_memory_bytes"):
        assert np.array_equal(getattr(got.work, name), getattr(want.work, name))
    for name in ("start", "finish", "stage_end_s"):
        assert np.array_equal(getattr(got.timeline, name), getattr(want.timeline, name))
    assert got.iteration_time_s == want.iteration_time_s
