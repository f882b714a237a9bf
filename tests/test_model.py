"""Model specs, Megatron FLOPs accounting and memory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.model import MemorySettings, get_model, list_models, max_tokens_per_rank, memory_per_gpu


def test_specs_present():
    for n in ("llama2-7b", "llama-13b", "llama-70b"):
        assert n in list_models()
    m70 = get_model("llama-70b")
    assert m70.n_kv_heads == 8 and m70.n_heads == 64


def test_llama13b_flops_reference():
    # REFERENCE §2: 77.11 GFLOP per token (linear) + 1.2288e6 * L^2 per sequence
    m = get_model("llama-13b")
    assert m.linear_flops_per_token / 1e9 == pytest.approx(77.11, abs=0.005)
    assert m.attn_flops_coeff == pytest.approx(1.2288e6)
    assert m.n_params / 1e9 == pytest.approx(13.016, abs=0.001)
    lengths = np.array([4096, 1000, 131072])
    expect = 77.1096576e9 * lengths.sum() + 1.2288e6 * (lengths.astype(float) ** 2).sum()
    assert m.flops(lengths) == pytest.approx(expect, rel=1e-9)
    # attention share: ~6% at 4K, ~68% at 128K (REFERENCE §2)
    for L, share in ((4096, 0.06), (131072, 0.68)):
        a = m.attn_flops_coeff * L * L
        assert a / m.flops([L]) == pytest.approx(share, abs=0.01)


def test_gqa_reduces_qkv_flops():
    m = get_model("llama-70b")
    h = m.hidden
    assert m.linear_params_per_layer() == h * (m.q_dim + 2 * m.kv_dim) + m.q_dim * h + 3 * h * m.ffn_hidden
    assert m.kv_dim == m.q_dim // 8


def test_user_spec_file(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text('name = "tiny"\nn_layers = 2\nhidden = 64\nn_heads = 4\nhead_dim = 16\nffn_hidden = 128\nvocab = 100\n')
    m = get_model(f)
    assert m.n_kv_heads == 4 and m.n_layers == 2
    f.write_text('name = "bad"\nn_layers = 0\nhidden = 64\nn_heads = 4\nhead_dim = 16\nffn_hidden = 128\nvocab = 100\n')
    with pytest.raises(ConfigError, match="model.n_layers: got 0"):
        get_model(f)


def test_unknown_model():
    with pytest.raises(ConfigError, match="model: got 'gpt-17'"):
        get_model("gpt-17")


def test_memory_components_and_sharding():
    m = get_model("llama-13b")
    a = memory_per_gpu(m, MemorySettings(tp=1, pp=1, dp=1, cp=1), tokens_per_rank=0)
    b = memory_per_gpu(m, MemorySettings(tp=1, pp=1, dp=8, cp=1), tokens_per_rank=0)
    # REFERENCE §3: N*(6 + 12/(DP*CP)) / (TP*PP)
    n = m.n_params
    assert a.states_bytes == pytest.approx(n * 18, rel=0.01)
    assert b.states_bytes == pytest.approx(n * (6 + 12 / 8), rel=0.01)


def test_activation_per_token_matches_reference():
    m = get_model("llama-13b")
    st = MemorySettings(pp=1, recompute="none", microbatches_in_flight=1)
    one = memory_per_gpu(m, st, tokens_per_rank=1)
    zero = memory_per_gpu(m, st, tokens_per_rank=0)
    per_token_layer = (one.activations_bytes - zero.activations_bytes) / m.n_layers
    assert per_token_layer / 1024 == pytest.approx(161, abs=1)  # REFERENCE §3: 161 KiB


def test_recompute_order_and_tp_division():
    m = get_model("llama-13b")
    st = MemorySettings(pp=4, dp=8)
    full = memory_per_gpu(m, replace(st, recompute="full"), tokens_per_rank=8192).total_bytes
    sel = memory_per_gpu(m, replace(st, recompute="selective"), tokens_per_rank=8192).total_bytes
    none = memory_per_gpu(m, replace(st, recompute="none"), tokens_per_rank=8192).total_bytes
    assert full < sel <= none
    a1 = memory_per_gpu(m, replace(st, recompute="none", tp=1), tokens_per_rank=8192).activations_bytes
    a2 = memory_per_gpu(m, replace(st, recompute="none", tp=2), tokens_per_rank=8192).activations_bytes
    assert a2 == pytest.approx(a1 / 2)


def test_max_tokens_per_rank_fits_exactly():
    m = get_model("llama-13b")
    lim = 70 * 2**30
    st = MemorySettings(tp=1, pp=8, dp=8, cp=1, recompute="full")
    t = max_tokens_per_rank(m, st, memory_limit_bytes=lim)
    assert memory_per_gpu(m, st, tokens_per_rank=t).total_bytes <= lim
    assert memory_per_gpu(m, st, tokens_per_rank=t + 1).total_bytes > lim
    with pytest.raises(InfeasibleError, match="memory"):
        max_tokens_per_rank(get_model("llama-70b"), MemorySettings(tp=1, pp=1, dp=1), memory_limit_bytes=lim)


def test_inline_spec_from_dimensions():
    """A spec given as a table of dimensions (published rows; configs' model.name as a dict)."""
    from dcpsim.model import get_model
    from dcpsim.run.load import config_from_dict
    from dcpsim.run.single import build_cost_model

    dims = {"name": "gqa", "n_layers": 4, "hidden": 1024, "n_heads": 16, "n_kv_heads": 4, "ffn_hidden": 4096,
            "vocab": 50304, "gated_mlp": False}
    m = get_model(dims)
    assert m.head_dim == 64 and m.kv_dim == 256 and m.mlp_matrices == 2
    cfg = config_from_dict({"model": {"name": dims}, "parallel": {"pp": 2}, "cluster": {"gpus": 4}})
    assert build_cost_model(cfg).model == m
    with pytest.raises(ConfigError, match="model.head_dim"):
        get_model(dims | {"hidden": 1000, "n_heads": 16})
    with pytest.raises(ConfigError, match="model.n_kv_heads"):
        get_model(dims | {"n_kv_heads": 5})


def test_one_parameter_count_and_throughput_accounting():
    import numpy as np

    from dcpsim.model import params_per_gpu, stage_params
    from dcpsim.model.accounting import attention_flops, throughput

    m = get_model("llama-13b")
    assert stage_params(m, 1, [m.n_layers]).sum() == pytest.approx(m.n_params)
    sp = stage_params(m, 2, np.full(4, m.n_layers / 4))
    norms = (2 * m.n_layers + 1) * m.hidden  # RMSNorm weights are not split over TP
    assert sp.sum() == pytest.approx((m.n_params - norms) / 2 + norms)
    assert params_per_gpu(m, 2, 4) == pytest.approx(sp.max()) and sp.argmax() == 3  # head + norm on the last
    # Megatron's per-sequence attention FLOPs (fwd + 2x bwd GEMM-style) and the kernel count agree on the forward
    L = np.array([1000.0, 3000.0])
    assert attention_flops(L, m.q_dim).sum() * 3 * m.n_layers == pytest.approx(m.attn_flops_coeff * (L**2).sum())
    t = throughput(6e15, 4096, 2.0, 8, 1e15)
    assert t == pytest.approx({"tflops_per_gpu": 375.0, "tokens_per_s": 2048.0, "mfu": 0.375})
    assert np.isnan(throughput(1.0, 1, 0.0, 8, 1e15)["tflops_per_gpu"])


@pytest.mark.parametrize("bad", [[-5], [4096, float("nan")], [float("inf")]])
def test_flops_of_negative_or_non_finite_lengths_is_refused(bad):
    """ModelSpec.flops([-5]) (and CostModel.flops) returned -385517568000.0 FLOPs and [nan] nan, silently."""
    from dcpsim.errors import ConfigError
    from dcpsim.model import get_model

    with pytest.raises(ConfigError, match="lengths"):
        get_model("llama-13b").flops(bad)
    assert get_model("llama-13b").flops([]) == 0.0 and get_model("llama-13b").flops([0, 4096]) > 0
