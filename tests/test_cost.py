"""Cost model: closed forms, properties (hypothesis), vectorised path, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError, InfeasibleError

CM = CostModel.build("h100-sxm", "llama-13b", tp=1, pp=8, dp_cp=64, recompute="full")
CM_TP = CostModel.build("h100-sxm", "llama-13b", tp=2, pp=8, dp_cp=32, recompute="none")
lengths_st = st.lists(st.integers(min_value=1, max_value=70000), min_size=1, max_size=12)
cp_st = st.sampled_from([1, 2, 4, 8, 16])


@pytest.mark.parametrize("comm", ["p2p", "all_gather", "a2a"])
def test_cp1_has_no_cp_communication(comm):
    cm = CostModel.build("h100-sxm", "llama-13b", pp=8, cp_comm=comm)
    for span in (False, True):
        pc = cm.pack_cost([30000, 5000, 17], 1, spans_network=span, check_memory=False)
        assert pc.cp_fwd_exposed_s == 0 and pc.cp_bwd_exposed_s == 0 and pc.cp_comm_total_s == 0


def test_gemm_closed_form_single_doc():
    L = 8192
    pc = CM.pack_cost([L], 1, check_memory=False)
    prof, m = CM.profile, CM.model
    expect = sum(2.0 * L * n * k / float(prof.gemm_flops_per_s(L, n, k)) for _, n, k, _ in m.gemm_shapes(1))
    assert pc.gemm_fwd_s == pytest.approx(expect * CM.layers_per_stage, rel=1e-12)
    assert pc.gemm_bwd_s == pytest.approx(2 * pc.gemm_fwd_s, rel=1e-12)


def test_attention_closed_form_and_square_law():
    prof, m = CM.profile, CM.model
    for L in (1024, 16384, 40000):
        pc = CM.pack_cost([L], 1, check_memory=False)
        e = float(prof.attention_flops_per_s(L, direction="fwd", causal=True, head_dim=128))
        assert pc.attn_fwd_s == pytest.approx(2.0 * L * L * m.q_dim / e * CM.layers_per_stage, rel=1e-12)
    # past the measured range efficiency is held, so time grows exactly with L^2
    a = CM.pack_cost([20000], 1, check_memory=False).attn_fwd_s
    b = CM.pack_cost([40000], 1, check_memory=False).attn_fwd_s
    assert b / a == pytest.approx(4.0, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, cp=cp_st, extra=st.integers(min_value=1, max_value=50000), span=st.booleans())
def test_more_tokens_never_cost_less(lengths, cp, extra, span):
    base = CM.pack_cost(lengths, cp, spans_network=span, check_memory=False)
    more = CM.pack_cost(lengths + [extra], cp, spans_network=span, check_memory=False)
    longer = CM.pack_cost([lengths[0] + extra] + lengths[1:], cp, spans_network=span, check_memory=False)
    assert more.total_s >= base.total_s * (1 - 1e-12)
    assert longer.total_s >= base.total_s * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(min_value=2048, max_value=131072), cp=st.sampled_from([1, 2, 4]))
def test_splitting_a_long_document_lowers_per_rank_compute(L, cp):
    a = CM.pack_cost([L], cp, check_memory=False)
    b = CM.pack_cost([L], 2 * cp, check_memory=False)
    assert b.gemm_fwd_s + b.attn_fwd_s < a.gemm_fwd_s + a.attn_fwd_s
    assert b.attn_bwd_s < a.attn_bwd_s


def test_attention_grows_with_square_of_document():
    # Same token count, one long document vs. many short ones: the long one costs far more attention
    one = CM.pack_cost([32768], 1, check_memory=False)
    many = CM.pack_cost([1024] * 32, 1, check_memory=False)
    ratio = one.attn_fwd_s / many.attn_fwd_s
    e = CM.profile.attention_flops_per_s
    eff_gain = float(e(32768, direction="fwd", causal=True, head_dim=128) / e(1024, direction="fwd", causal=True, head_dim=128))
    # 32x the FLOPs, partly recovered by the better efficiency of the long kernel
    assert ratio == pytest.approx(32 / eff_gain, rel=1e-12)
    assert ratio > 10


def test_network_span_costs_more_and_ring_can_hide():
    short = [2048] * 8
    nv = CM.pack_cost(short, 8, spans_network=False, check_memory=False)
    net = CM.pack_cost(short, 8, spans_network=True, check_memory=False)
    assert net.cp_fwd_exposed_s > nv.cp_fwd_exposed_s >= 0
    # a long document hides its ring transfers behind attention over NVLink
    long = CM.pack_cost([131072], 8, spans_network=False, check_memory=False)
    assert long.cp_fwd_exposed_s == 0 and long.cp_comm_total_s > 0


def test_padding_to_2c_multiple():
    pc = CM.pack_cost([1001], 4, check_memory=False)
    assert pc.local_tokens == 1008 / 4


def test_tp_comm_present_only_with_tp():
    assert CM.pack_cost([4096], 1, check_memory=False).tp_fwd_s == 0
    assert CM_TP.pack_cost([4096], 1, check_memory=False).tp_fwd_s > 0


def test_recompute_modes():
    kw = dict(pp=8, dp_cp=64)
    full = CostModel.build("h100-sxm", "llama-13b", recompute="full", **kw).pack_cost([8192], 1, check_memory=False)
    sel = CostModel.build("h100-sxm", "llama-13b", recompute="selective", **kw).pack_cost([8192], 1, check_memory=False)
    none = CostModel.build("h100-sxm", "llama-13b", recompute="none", **kw).pack_cost([8192], 1, check_memory=False)
    assert none.recompute_s == 0
    assert sel.recompute_s == pytest.approx(sel.attn_fwd_s)
    assert full.recompute_s == pytest.approx(full.fwd_s - full.overhead_fwd_s - full.launch_fwd_s)  # the layers again


@settings(max_examples=20, deadline=None)
@given(packs=st.lists(st.tuples(lengths_st, cp_st, st.booleans()), min_size=1, max_size=6))
def test_batch_path_equals_scalar_path(packs):
    lens = np.concatenate([np.array(p[0]) for p in packs])
    pids = np.concatenate([np.full(len(p[0]), i) for i, p in enumerate(packs)])
    b = CM.batch_cost(lens, pids, [p[1] for p in packs], [p[2] for p in packs])
    for i, (ls, cp, span) in enumerate(packs):
        s = CM.pack_cost(ls, cp, spans_network=span, check_memory=False)
        assert b.total_s[i] == pytest.approx(s.total_s, rel=1e-12)
        assert b.peak_memory_bytes[i] == pytest.approx(s.peak_memory_bytes, rel=1e-12)


def test_memory_infeasible_is_typed():
    cm = CostModel.build("h100-sxm", "llama-13b", pp=1, dp_cp=1)
    with pytest.raises(InfeasibleError) as ei:
        cm.pack_cost([131072], 1)
    assert ei.value.kind == "memory"


def test_a2a_divisibility():
    cm = CostModel.build("h100-sxm", "llama-13b", pp=8, cp_comm="a2a")
    with pytest.raises(InfeasibleError, match="a2a"):
        cm.pack_cost([4096], 16, check_memory=False)  # 40 heads not divisible by 16
    cm.pack_cost([4096], 8, check_memory=False)  # 40 divisible by 8


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(pp=3), "pp"),
        (dict(tp=16), "tp"),
        (dict(cp_comm="ring"), "cp_comm"),
        (dict(recompute="some"), "recompute"),
        (dict(tp=0), "tp"),
    ],
)
def test_bad_configuration_names_field(kw, field):
    with pytest.raises(ConfigError) as ei:
        CostModel.build("h100-sxm", "llama-13b", **kw)
    assert ei.value.field == field


def test_bad_lengths():
    with pytest.raises(ConfigError, match="lengths"):
        CM.pack_cost([0, 5], 1)
    with pytest.raises(ConfigError, match="lengths"):
        CM.pack_cost([], 1)


@pytest.mark.parametrize("lengths, cp, field", [([4096.7], 1, "lengths"), ([np.nan], 1, "lengths"),
                                                ([np.inf], 1, "lengths"), (["4096"], 1, "lengths"),
                                                ([True], 1, "lengths"), ([4096], 2.5, "cp"), ([4096], "2", "cp")])
def test_pack_cost_refuses_fractional_or_non_numeric_input_naming_it(lengths, cp, field):
    """pack_cost cast lengths and cp to int64 first: [4096.7] was costed as 4096 tokens and cp=2.5 as cp=2
    without a word, and nan/inf ended in numpy's ValueError/OverflowError."""
    with pytest.raises(ConfigError) as ei:
        CM.pack_cost(lengths, cp)
    assert ei.value.field == field


def test_pack_cost_takes_whole_floats_and_numpy_integers_as_before():
    want = CM.pack_cost([4096, 1024], 2)
    assert CM.pack_cost(np.array([4096.0, 1024.0]), np.int64(2)) == want


def test_elementwise_term_is_memory_bound_closed_form():
    cm = CostModel.build("h100-sxm", "llama-13b", pp=40, recompute="none")
    pc = cm.pack_cost([4096, 4096], 1, check_memory=False)
    m = cm.model
    per_tok = 20 * m.hidden + 6 * m.ffn_hidden + 4 * (m.q_dim + m.kv_dim)
    assert pc.elementwise_fwd_s == pytest.approx(8192 * per_tok / cm.profile.hbm_bw_bytes_per_s, rel=1e-12)
    assert pc.elementwise_bwd_s == pytest.approx(2 * pc.elementwise_fwd_s)
    assert pc.fwd_s == pytest.approx(pc.gemm_fwd_s + pc.attn_fwd_s + pc.elementwise_fwd_s + pc.launch_fwd_s + pc.overhead_fwd_s)


def test_cost_cli_exits_2_when_the_pack_does_not_fit(capsys):
    """`dcpsim cost` printed 487.8 TFLOPS/GPU beside "DOES NOT FIT" and exited 0 (issue 19, item 5)."""
    import json

    from dcpsim.cli import main

    args = ["cost", "--model", "llama3-8b", "--pp", "1", "--cp", "1", "--lengths", "131072"]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert "infeasible (memory)" in err and "GiB" in err and "TFLOPS" not in out
    assert main(args + ["--json"]) == 2
    res = json.loads(capsys.readouterr().out)
    assert res["fits_memory"] is False and res["counted_tflops_per_gpu"] is None
    assert main(["cost", "--model", "llama3-8b", "--pp", "4", "--cp", "1", "--lengths", "4096"]) == 0
    assert "TFLOPS/GPU" in capsys.readouterr().out


def test_cost_cli_tflops_counts_the_timed_stage_without_the_head(capsys):
    """`dcpsim cost`'s counted TFLOPS (excl. head): the FLOPs of the layers the breakdown times (one stage,
    output layer out), not the whole model's FLOPs / pp (which carried a share of the head's 6*h*V per token)."""
    import json

    from dcpsim.cli import main
    from dcpsim.model import get_model

    lengths = [8192, 4096, 1024]
    assert main(["cost", "--model", "llama3-8b", "--pp", "4", "--cp", "2", "--lengths", "8192,4096,1024",
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    m = get_model("llama3-8b")
    layers = m.n_layers // 4
    stage = (6.0 * layers * m.linear_params_per_layer() * sum(lengths)
             + 6.0 * layers * m.q_dim * sum(L * L for L in lengths))
    expect = stage / (res["breakdown_s"]["total_s"] * 2 * 1e12)
    assert res["counted_tflops_per_gpu"] == pytest.approx(expect, rel=1e-9)
