"""Fixed-length pre-training data (``workload.name = "fixed"``) and micro-batch size > 1."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import ConfigError
from dcpsim.run.load import config_from_dict
from dcpsim.run.single import build_cost_model, run_simulation
from dcpsim.workload import LogNormal
from dcpsim.workload.fixed import FixedLength, microbatches_per_replica


def fixed_cfg(*, gpus=16, tp=1, pp=4, cp=1, mbs=2, gbs=32, seq_len=4096, documents=None, recompute="none", **sim):
    return config_from_dict({
        "model": {"name": "llama-13b"}, "cluster": {"gpus": gpus},
        "parallel": {"tp": tp, "pp": pp, "cp": cp, "mbs": mbs, "recompute": recompute},
        "workload": {"name": "fixed", "seq_len": seq_len, "gbs": gbs, "documents": documents},
        "policy": {"name": "packing"},
        "sim": {"iterations": 1, "planning": "ignore", "host_timeline": False, **sim},  # device closed forms
    })


def test_full_window_windows_are_seq_len():
    lengths, win = FixedLength(2048).sample_windows(5, np.random.default_rng(0))
    assert lengths.tolist() == [2048] * 5 and win.tolist() == list(range(5))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_document_windows_tile_exactly(seed):
    fl = FixedLength(4096, LogNormal(mu=7.0, sigma=1.3))
    lengths, win = fl.sample_windows(12, np.random.default_rng(seed))
    assert (lengths >= 1).all() and np.all(np.diff(win) >= 0)
    assert np.bincount(win, weights=lengths).tolist() == [4096.0] * 12
    assert lengths.size > 12  # documents shorter than the window split it


def test_config_rules_name_the_field():
    with pytest.raises(ConfigError, match="workload.gbs"):
        fixed_cfg(gbs=30)  # dp=4, mbs=2: 30 is not a multiple of 8
    with pytest.raises(ConfigError, match="workload.seq_len"):
        config_from_dict({"workload": {"name": "fixed"}})
    with pytest.raises(ConfigError, match="parallel.mbs"):
        config_from_dict({"parallel": {"mbs": 2}})  # variable-length data has no micro-batch size
    with pytest.raises(ConfigError, match="parallel.mbs"):
        config_from_dict({"parallel": {"mbs": 0}})
    with pytest.raises(ConfigError, match="workload.gbs"):
        microbatches_per_replica(10, 4, 2)
    assert microbatches_per_replica(32, 4, 2) == 4


@pytest.mark.parametrize("documents", [None, {"type": "lognormal", "mu": 7.0, "sigma": 1.3}])
def test_microbatches_hold_mbs_windows(documents):
    """gbs / (dp * mbs) microbatches per DP rank, each exactly mbs * seq_len tokens."""
    cfg = fixed_cfg(documents=documents, cp=2, gpus=32)  # dp = 4
    res = run_simulation(cfg)
    plan = res.plans[0]
    assert plan.n_steps == 32 // (4 * 2)
    for st in plan.steps:
        assert len(st.groups) == 4
        for g in st.groups:
            assert int(plan.lengths[g.seq_ids].sum()) == 2 * 4096
    assert cfg.max_tokens_per_rank == 2 * 4096 // 2


def test_equal_microbatches_give_the_1f1b_closed_form():
    """mbs windows per microbatch, all equal: stage 0 ends its last backward at
    sum_p (tf+tb) + (m-1)(tf+tb)_last + 2(PP-1)x, i.e. (m+PP-1)(tf+tb) when the stages are equal
    (here the last stage is heavier by the output layer, and x is one activation transfer)."""
    pp, mbs, gbs, L = 4, 3, 24, 2048
    cfg = fixed_cfg(pp=pp, mbs=mbs, gbs=gbs, seq_len=L, gpus=8, recompute="full", overlap_grad_sync=False)  # dp = 2, one node
    m = gbs // (cfg.dp * mbs)
    res = run_simulation(cfg)
    cost = build_cost_model(cfg)
    pc = cost.pack_cost([L] * mbs, 1)
    tf = np.full(pp, pc.fwd_s)
    tb = np.full(pp, pc.bwd_s)
    tf[0] += pc.embed_fwd_s  # the embedding runs on the first stage
    tb[0] += pc.embed_bwd_s
    tf[-1] += pc.head_fwd_s
    tb[-1] += pc.head_bwd_s
    x = float(cost.profile.collective_time_s("sendrecv", "nvlink", pc.local_tokens * cost.model.hidden * 2.0, 2))
    assert 2 * x <= (tf[-1] + tb[-1]) - (tf[0] + tb[0])
    pipe = tf.sum() + tb.sum() + (m - 1) * (tf[-1] + tb[-1]) + 2 * (pp - 1) * x
    # Megatron's parameter all-gather (vp = 1, overlap): each stage's first forward waits for it on the
    # pipeline fill: stage 0's bucket chain, then every later stage's one bucket
    from dcpsim.sim.engine import param_gather_ends

    sync = res.records[0].sync
    first = param_gather_ends(np.zeros(1), tf[:1], float(sync.all_gather_bucket_s[0]), int(sync.buckets[0]))[0] - tf[0]
    assert res.records[0].timeline.bwd_end_s[0] == pytest.approx(pipe + first + sync.all_gather_s[1:].sum(), rel=1e-9)
    # Megatron-Core <= r0.8 (sim.param_gather_launch = "step_start"): every stage launches it at the step's
    # start; stage p's first forward starts at max(its input, t_p) (t_p: the stage's one bucket)
    res = run_simulation(fixed_cfg(pp=pp, mbs=mbs, gbs=gbs, seq_len=L, gpus=8, recompute="full",
                                   overlap_grad_sync=False, param_gather_launch="step_start"))
    end = first + tf[0]
    for p in range(1, pp):
        end = max(end + x, float(sync.all_gather_s[p])) + tf[p]
    delay = end - (tf.sum() + (pp - 1) * x)
    assert first <= delay < first + sync.all_gather_s[1:].sum()
    assert res.records[0].timeline.bwd_end_s[0] == pytest.approx(pipe + delay, rel=1e-9)
    # without overlap it runs after the optimizer step: the pipeline alone
    res = run_simulation(fixed_cfg(pp=pp, mbs=mbs, gbs=gbs, seq_len=L, gpus=8, recompute="full",
                                   overlap_grad_sync=False, overlap_param_gather=False))
    assert res.records[0].timeline.bwd_end_s[0] == pytest.approx(pipe, rel=1e-9)


def test_per_document_attention_is_cheaper_than_full_window():
    # a timing comparison: 13B on pp=1 does not fit in memory, which is not the point here
    full = run_simulation(fixed_cfg(pp=1, gpus=4, gbs=16, seq_len=16384), allow_infeasible=True)
    docs = run_simulation(fixed_cfg(pp=1, gpus=4, gbs=16, seq_len=16384, documents="wikipedia"), allow_infeasible=True)
    assert docs.summary["tokens_per_s"] > full.summary["tokens_per_s"]
    assert docs.summary["sequences"] > full.summary["sequences"] == 16


def test_per_document_needs_packing():
    cfg = fixed_cfg(documents="wikipedia").with_updates({"policy.name": "dynamic"})
    with pytest.raises(ConfigError, match="policy.name"):
        run_simulation(cfg)
