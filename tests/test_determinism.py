"""Megatron-LM --deterministic-mode's NaN fill of uninitialised allocations (dcpsim.cost.determinism): the counts,
their host and device prices, and that the flag changes a step only when it is set."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost import determinism
from dcpsim.cost.host import PassShape, StepFlags, checkpoint_host_s, host_ops, layer_pass_host
from dcpsim.cost.model import CostModel
from dcpsim.hardware.host import HostCosts

X86 = HostCosts(cpu="x86", kernel_fwd_s=24e-6, kernel_bwd_s=35e-6, kernel_launch_s=6.5e-6, module_call_s=10e-6,
                collective_call_s=44e-6, sync_s=5e-6, microbatch_s=100e-6, param_tensor_s=6e-6, step_s=1e-3,
                graph_replay_s=6.5e-6, graph_kernel_s=0.9e-6)


def _shape(**kw):
    base = dict(stage_layers=np.array([2, 2]), vp=1, tp=2, kernels_fwd=np.array([20.0]),
                kernels_bwd=np.array([30.0]), collectives_fwd=np.array([4.0]), collectives_bwd=np.array([4.0]))
    base.update(kw)
    return PassShape(**base)


def test_fill_counts_are_the_ones_counted_from_the_source():
    assert determinism.fills_per_layer("transformer_engine") == (19, 29)
    assert determinism.fills_per_layer("local") == (15, 14)
    assert determinism.FILLS_CHUNK_FWD == 2 and determinism.FILLS_P2P == (2, 1) and determinism.FILLS_HEAD == (1, 1)
    assert determinism.fills_per_layer("anything else") == determinism.fills_per_layer("transformer_engine")
    assert determinism.fill_host_s(10, 6.5e-6) == pytest.approx(65e-6)


@pytest.mark.parametrize("impl", ["transformer_engine", "local"])
def test_a_deterministic_layer_pass_issues_one_launch_per_fill(impl):
    plain = StepFlags(transformer_impl=impl)
    det = StepFlags(transformer_impl=impl, deterministic=True)
    n_f, n_b = determinism.fills_per_layer(impl)
    f, b, kf, kb = layer_pass_host(_shape(), X86, plain)
    df, db, dkf, dkb = layer_pass_host(_shape(), X86, det)
    assert df[0] - f[0] == pytest.approx(n_f * 6.5e-6) and db[0] - b[0] == pytest.approx(n_b * 6.5e-6)
    assert dkf[0] - kf[0] == n_f and dkb[0] - kb[0] == n_b
    # full recomputation repeats the forward's fills in the backward
    _, rb, _, rkb = layer_pass_host(_shape(recompute="full"), X86, det)
    # (plus CheckpointFunction's own calls per recomputed layer, dcpsim.cost.host_calls)
    assert rb[0] == pytest.approx(db[0] + df[0] + checkpoint_host_s(X86)) and rkb[0] == dkb[0] + dkf[0]
    # inside a CUDA graph a fill is a captured kernel
    g, _, _, _ = layer_pass_host(_shape(), X86, StepFlags(transformer_impl=impl, cuda_graphs="local"))
    dg, _, _, _ = layer_pass_host(_shape(), X86, replace(det, cuda_graphs="local"))
    assert dg[0] - g[0] == pytest.approx(n_f * 0.9e-6)


def test_host_ops_add_the_fills_per_layer_chunk_pipeline_buffer_and_logits_copy():
    """Two stages of two layers: per op the layers' fills, the chunk's two viewless tensors (forward), the pipeline
    buffers (2 forward, 1 backward), and on the last stage the logits' FP32 copy and its gradient."""
    plain, det = host_ops(_shape(), X86, StepFlags()), host_ops(_shape(), X86, StepFlags(deterministic=True))
    n_f, n_b = determinism.fills_per_layer("transformer_engine")
    la = 6.5e-6
    extra = det.host_s - plain.host_s
    fwd, bwd = (2 * n_f + 2 + 2) * la, (2 * n_b + 1) * la
    assert extra[0, 0, 0] == pytest.approx(fwd) and extra[0, 1, 0] == pytest.approx(bwd)
    assert extra[1, 0, 0] == pytest.approx(fwd + la) and extra[1, 1, 0] == pytest.approx(bwd + la)
    assert (det.sync_before == plain.sync_before).all() and (det.sync_after == plain.sync_after).all()
    one = _shape(stage_layers=np.array([2]))  # no pipeline: no buffers
    e1 = host_ops(one, X86, StepFlags(deterministic=True)).host_s - host_ops(one, X86, StepFlags()).host_s
    assert e1[0, 0, 0] == pytest.approx((2 * n_f + 2 + 1) * la) and e1[0, 1, 0] == pytest.approx((2 * n_b + 1) * la)


def test_step_flags_read_the_run_settings():
    from dcpsim.run.config import StepSection

    assert StepFlags.from_settings(StepSection()).deterministic is False
    f = StepFlags.from_settings(StepSection(deterministic=True, transformer_impl="local"))
    assert f.deterministic and f.transformer_impl == "local"


def test_fill_device_time_is_bytes_at_hbm_bandwidth_and_zero_without_the_flag():
    cost = CostModel.build("h100-sxm", "llama3-8b", tp=2)
    det = cost.derive(deterministic_fill=True)
    st = det.settings
    s = np.array([4096.0, 8192.0])
    f, b = determinism.fill_device_terms(st, s)
    bf, bb = determinism.fill_bytes_per_token_layer(st.model, 2)
    m = st.model
    assert bf == pytest.approx(2 * (6 * m.hidden + (2 * m.q_dim + 2 * m.kv_dim + 2 * m.ffn_hidden) / 2) + 2 * m.hidden)
    assert bb < bf
    assert f == pytest.approx(s * bf / st.profile.hbm_bw_bytes_per_s)
    z = determinism.fill_device_terms(cost.settings, s)
    assert (z[0] == 0).all() and (z[1] == 0).all()
    # the batch cost: element-wise and head time grow by the fills, nothing else moves
    lengths, ids, cp = np.array([4096, 8192]), np.array([0, 1]), np.array([1, 1])
    a, d = cost.batch_cost(lengths, ids, cp), det.batch_cost(lengths, ids, cp)
    L = cost.layers_per_stage
    assert d.elementwise_fwd_s - a.elementwise_fwd_s == pytest.approx(f * L)
    assert d.elementwise_bwd_s - a.elementwise_bwd_s == pytest.approx(b * L)
    hf, hb = determinism.fill_head_device_terms(st, s)
    assert d.head_fwd_s - a.head_fwd_s == pytest.approx(hf) and d.head_bwd_s - a.head_bwd_s == pytest.approx(hb)
    assert (d.gemm_fwd_s == a.gemm_fwd_s).all() and (d.attn_bwd_s == a.attn_bwd_s).all()


def test_unfused_attention_fills_its_dropout_over_the_scores():
    cost = CostModel.build("h100-sxm", "llama3-8b", attention="unfused", deterministic_fill=True)
    st = cost.settings
    s, sq = np.array([1024.0]), np.array([1024.0 ** 2])
    f0, b0 = determinism.fill_device_terms(st, s)
    f1, b1 = determinism.fill_device_terms(st, s, sq)
    scores = sq * st.model.n_heads / st.profile.hbm_bw_bytes_per_s
    assert f1 - f0 == pytest.approx(3 * scores) and b1 - b0 == pytest.approx(2 * scores)


def test_the_flag_lengthens_a_step_only_when_set():
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    def step(**kw):
        cfg = config_from_dict({"model": {"name": "llama3-8b"}, "hardware": {"gpu": "h100-sxm"}, "cluster": {"gpus": 8},
                                "parallel": {"tp": 2, "pp": 1, "cp": 1, "max_tokens_per_rank": 4096},
                                "workload": {"name": "fixed", "seq_len": 4096, "gbs": 8},
                                "policy": {"name": "packing"}, "step": {"log_interval": 1, **kw}})
        return run_simulation(cfg).summary["iteration_time_s"]

    base = step()
    assert step(deterministic=False) == base
    assert step(deterministic=True) > base
    assert step(transformer_impl="local") == base  # the implementation matters only through the fills
