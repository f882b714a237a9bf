"""Closed-form checks of the time model's mechanisms: FP8, fixed costs, GEMM shape model, CP ring latency,
bucketed gradient/parameter overlap, TP communication overlap, uneven pipeline stages."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost import CostModel
from dcpsim.cost.fixed import KERNELS_BWD, KERNELS_FWD, KERNELS_MICROBATCH
from dcpsim.cost.settings import stage_layer_counts
from dcpsim.errors import ConfigError, ProfileError
from dcpsim.hardware import Timing, get_profile, load_profile, write_profile
from dcpsim.model import get_model
from dcpsim.sim.durations import stage_params
from dcpsim.sim.engine import grad_sync_end_s, param_gather_stall_s

TINY = {"name": "tiny", "n_layers": 12, "hidden": 512, "n_heads": 8, "n_kv_heads": 8, "ffn_hidden": 2048, "vocab": 32000}


def with_timing(name: str = "h100-sxm", **kw):
    p = get_profile(name)
    return replace(p, timing=replace(p.timing, **kw), _gemm={}, _attn={}, _coll={})


# ------------------------------------------------------------------ fixed costs
@pytest.mark.parametrize("o", [5e-6, 11e-6, 40e-6])
def test_launch_floor_is_kernel_count_times_per_kernel_time(o):
    prof = with_timing(per_kernel_overhead_s=o)
    cm = CostModel.build(prof, get_model(TINY), recompute="none")
    pc = cm.pack_cost([16], 1, check_memory=False)  # GPU work of 16 tokens is far below the host floor
    L = cm.layers_per_stage
    assert pc.fwd_s - pc.overhead_fwd_s == pytest.approx(L * KERNELS_FWD * o, rel=1e-12)
    assert pc.bwd_s - pc.overhead_bwd_s == pytest.approx(L * KERNELS_BWD * o, rel=1e-12)
    assert pc.overhead_fwd_s == pytest.approx(KERNELS_MICROBATCH * o)


def test_launch_floor_hidden_behind_long_kernels():
    cm = CostModel.build("h100-sxm", "llama-13b", pp=40, recompute="none")
    pc = cm.pack_cost([16384], 1, check_memory=False)
    assert pc.launch_fwd_s == 0 and pc.launch_bwd_s == 0


def test_no_timing_table_means_no_fixed_costs():
    prof = replace(get_profile("h100-sxm"), timing=Timing(), _gemm={}, _attn={}, _coll={})
    pc = CostModel.build(prof, get_model(TINY), recompute="none").pack_cost([16], 1, check_memory=False)
    assert pc.launch_fwd_s == pc.launch_bwd_s == pc.overhead_fwd_s == 0


# ------------------------------------------------------------------ FP8
def test_fp8_gemm_time_is_bf16_time_times_ratio_at_large_shapes():
    kw = dict(pp=40, recompute="none")
    bf = CostModel.build("h100-sxm", "llama-13b", **kw).pack_cost([16384], 1, check_memory=False)
    f8 = CostModel.build("h100-sxm", "llama-13b", precision="fp8", **kw).pack_cost([16384], 1, check_memory=False)
    prof = get_profile("h100-sxm")
    bf16_8192 = float(prof.gemm_flops_per_s(8192, 8192, 8192))
    ratio = bf16_8192 / 1e12 / prof.timing.fp8_gemm_best_tflops
    # the 8192^3 figures exactly (the FP8 anchor is twice the sustained BF16 one); Llama-13B's shapes (K >= 5120)
    # within the FP8 epilogue effect (below)
    assert float(prof.gemm_flops_per_s(8192, 8192, 8192, precision="fp8")) == pytest.approx(
        prof.timing.fp8_gemm_best_tflops * 1e12, rel=1e-12)
    assert prof.timing.fp8_gemm_best_tflops * 1e12 == pytest.approx(2 * bf16_8192, rel=1e-5)
    assert f8.gemm_fwd_s == pytest.approx(bf.gemm_fwd_s * ratio, rel=0.03)  # FP8 epilogue at K 5120 vs 8192: <= 4%
    assert f8.gemm_fwd_s >= bf.gemm_fwd_s * ratio
    assert f8.attn_fwd_s == bf.attn_fwd_s and f8.head_fwd_s == bf.head_fwd_s  # attention and output layer stay BF16
    # casts without TP, at HBM bandwidth: forward only proj and fc2 cast (+ transpose) their input, 4 B per
    # element (the norm writes QKV's and fc1's FP8 input); backward QKV and fc1 transpose that input (2 B) and
    # every GEMM casts + transposes its output gradient (4 B)
    m = get_model("llama-13b")
    sh = {name: (n, k) for name, n, k, _ in m.gemm_shapes(1)}
    bw, L = prof.hbm_bw_bytes_per_s, 1  # pp=40: one layer per stage
    fwd = 4.0 * (sh["proj"][1] + sh["fc2"][1])
    bwd = 2.0 * (sh["qkv"][1] + sh["fc1"][1]) + 4.0 * sum(n for n, _ in sh.values())
    assert f8.fp8_cast_fwd_s == pytest.approx(L * 16384 * fwd / bw, rel=1e-12)
    assert f8.fp8_cast_bwd_s == pytest.approx(L * 16384 * bwd / bw, rel=1e-12)
    assert bf.fp8_cast_fwd_s == 0
    # the norms write FP8 (1 B instead of 2) forward: 2h bytes per token less; their backward is unchanged
    assert bf.elementwise_fwd_s - f8.elementwise_fwd_s == pytest.approx(16384 * 2.0 * m.hidden / bw, rel=1e-9)
    assert f8.elementwise_bwd_s == bf.elementwise_bwd_s


def test_fp8_tp_all_gathers_move_one_byte_per_element_and_sp_casts_split():
    """With TP (sequence parallel) TE all-gathers FP8 (the norm's FP8 output forward, the FP8 output gradient
    backward); the reduce-scatters stay BF16. proj and fc2 then cast (3 B), transpose their input backward (2 B)
    and cast the output-gradient shard (3 B / TP) before transposing the gathered one (2 B)."""
    kw = dict(tp=8, pp=40, recompute="none")
    bf = CostModel.build("h100-sxm", "llama-13b", **kw).pack_cost([16384], 1, check_memory=False)
    f8 = CostModel.build("h100-sxm", "llama-13b", precision="fp8", **kw).pack_cost([16384], 1, check_memory=False)
    prof, m, s = get_profile("h100-sxm"), get_model("llama-13b"), 16384
    buf = s * m.hidden * 2.0
    ag, rs = (float(prof.collective_time_s(op, "nvlink", np.array([b]), 8)[0])
              for op, b in (("all_gather", buf / 2), ("reduce_scatter", buf)))
    assert f8.tp_fwd_s == pytest.approx(2 * ag + 2 * rs, rel=1e-12) and f8.tp_bwd_s == f8.tp_fwd_s
    assert f8.tp_fwd_s < bf.tp_fwd_s
    sh = {name: (n, k) for name, n, k, _ in m.gemm_shapes(8)}
    bw = prof.hbm_bw_bytes_per_s
    fwd = 3.0 * (sh["proj"][1] + sh["fc2"][1])
    bwd = (2.0 * sum(k for n, k in sh.values()) + 4.0 * (sh["qkv"][0] + sh["fc1"][0])
           + (3.0 / 8 + 2.0) * (sh["proj"][0] + sh["fc2"][0]))
    assert f8.fp8_cast_fwd_s == pytest.approx(s * fwd / bw, rel=1e-12)
    assert f8.fp8_cast_bwd_s == pytest.approx(s * bwd / bw, rel=1e-12)


def test_fp8_k_roll_off_doubles_the_prologue_epilogue_share():
    """FP8's main loop is twice as fast (peak ratio 2) while the epilogue is not: k_half doubles."""
    p = get_profile("h100-sxm")
    kh, k = p.timing.gemm_k_half, 2048
    one_wave = p.timing.sms * 128
    s_bf = float(p.gemm_shape_factor(one_wave, 256, k))
    s_f8 = float(p.gemm_shape_factor(one_wave, 256, k, precision="fp8"))
    r = p.timing.peak_fp8_flops / p.peak_bf16_flops  # 1979 / 989
    assert s_bf == pytest.approx(k / (k + kh)) and s_f8 == pytest.approx(k / (k + r * kh))


def test_fp8_on_a_profile_without_fp8_figures_is_one_error_naming_the_field():
    with pytest.raises(ConfigError) as ei:
        CostModel.build("a100-sxm-80gb", "llama-13b", pp=40, precision="fp8")
    assert ei.value.field == "parallel.precision" and "fp8" in str(ei.value) and "timing.peak_fp8_flops" in str(ei.value)
    with pytest.raises(ProfileError, match="timing.fp8_gemm_best_tflops"):
        get_profile("a100-sxm-80gb").gemm_flops_per_s(4096, 8192, 8192, precision="fp8")


def test_fp8_figures_from_public_sources():
    for name, peak in (("h100-sxm", 1979e12), ("h200-sxm", 1979e12), ("b200", 4500e12)):
        p = get_profile(name)
        assert p.timing.peak_fp8_flops == peak and p.sources["timing.peak_fp8_flops"]
        assert p.sources["timing.fp8_gemm_best_tflops"]
    assert not get_profile("a100-sxm-80gb").timing.has_fp8


# ------------------------------------------------------------------ GEMM shape model
def test_shape_factor_full_single_wave_is_the_k_roll_off():
    p = get_profile("h100-sxm")
    t = p.timing
    k = 4096
    one_wave = t.sms * 128  # 132 tiles of 128x256: one full wave
    assert float(p.gemm_shape_factor(one_wave, 256, k)) == pytest.approx(k / (k + t.gemm_k_half), rel=1e-12)
    # one tile more spills into a second, nearly empty wave: lower
    assert float(p.gemm_shape_factor(one_wave + 128, 256, k)) < float(p.gemm_shape_factor(one_wave, 256, k))


def test_gemm_rate_depends_on_m_n_and_k():
    p = get_profile("h100-sxm")
    base = float(p.gemm_flops_per_s(4096, 8192, 8192))
    assert float(p.gemm_flops_per_s(4096, 8192, 512)) < base  # small K
    assert float(p.gemm_flops_per_s(4096, 256, 8192)) < base  # small N
    assert float(p.gemm_flops_per_s(64, 8192, 8192)) < base  # small M (memory roofline)
    # the sustained rate the real H100's table gives an 8192^3 product (profiles/build_public_profiles.py)
    assert float(p.gemm_flops_per_s(8192, 8192, 8192)) == pytest.approx(p.timing.fp8_gemm_best_tflops / 2 * 1e12,
                                                                         rel=1e-5)
    grid = np.logspace(0, 6, 200)
    assert np.all(p.gemm_flops_per_s(grid, 5120, 5120) <= p.gemm_max_flops_per_s(5120, 5120) * (1 + 1e-12))


def test_small_m_gemm_is_memory_bound():
    p = get_profile("h100-sxm")
    m, n, k = 8, 8192, 8192
    bound = 2.0 * m * n * k * p.hbm_bw_bytes_per_s / (2.0 * (m * k + k * n) + 2.0 * m * n)
    assert float(p.gemm_flops_per_s(m, n, k)) == pytest.approx(bound, rel=1e-12)


def test_old_profile_without_timing_loads_and_keeps_table_behaviour(tmp_path):
    p = replace(get_profile("h100-sxm"), timing=Timing(), _gemm={}, _attn={}, _coll={})
    write_profile(p, tmp_path / "old")
    text = (tmp_path / "old" / "profile.toml").read_text()
    assert "\n[timing]\n" not in text  # a format-1 profile as written before the timing table existed
    q = load_profile(tmp_path / "old")
    assert q.timing == Timing()
    row = q.gemm_rows[3]
    assert float(q.gemm_flops_per_s(row["tokens"], 5120, 5120)) == pytest.approx(row["tflops"] * 1e12)


def test_timing_value_without_source_is_an_error(tmp_path):
    write_profile(get_profile("h100-sxm"), tmp_path / "p")
    f = tmp_path / "p" / "profile.toml"
    f.write_text("\n".join(x for x in f.read_text().splitlines() if not x.startswith('"timing.sms"')))
    with pytest.raises(ProfileError, match="sources.timing.sms"):
        load_profile(tmp_path / "p")


# ------------------------------------------------------------------ CP ring latency, TP overlap
def test_ring_step_pays_at_least_nccl_base_plus_hop_latency():
    cm = CostModel.build("h100-sxm", get_model(TINY), recompute="none")
    pc = cm.pack_cost([64], 4, spans_network=True, check_memory=False)
    steps = 3 * cm.layers_per_stage
    assert pc.cp_comm_total_s >= steps * 2 * (8.4e-6 + 14e-6)  # fwd + bwd transfer per step, NCCL base + network hop


def test_tp_comm_overlap_exposes_one_chunk_when_gemms_are_longer():
    kw = dict(tp=8, pp=40, recompute="none")
    off = CostModel.build("h100-sxm", "llama-13b", **kw).pack_cost([32768], 1, check_memory=False)
    on = CostModel.build("h100-sxm", "llama-13b", tp_comm_overlap=True, **kw).pack_cost([32768], 1, check_memory=False)
    assert off.tp_fwd_s < off.gemm_fwd_s  # the GEMMs outlast the communication
    assert on.tp_fwd_s == pytest.approx(off.tp_fwd_s / 8, rel=1e-12)
    assert on.tp_bwd_s == pytest.approx(off.tp_bwd_s / 8, rel=1e-12)


# ------------------------------------------------------------------ overlap of gradient sync
def test_bucketed_reduce_scatter_exposes_exactly_the_last_bucket_when_compute_dominates():
    b0, b1, nb, tb = 10.0, 12.0, 5, 0.01
    assert grad_sync_end_s(b0, b1, nb * tb, tb, nb, True) == pytest.approx(b1 + tb)
    assert grad_sync_end_s(b0, b1, nb * tb, tb, nb, False) == pytest.approx(b1 + nb * tb)
    # communication longer than the backward: the chain of buckets from the first ready one
    assert grad_sync_end_s(b0, b1, nb * 1.0, 1.0, nb, True) == pytest.approx(b0 + (b1 - b0) / nb + nb * 1.0)


def test_bucketed_param_gather_exposes_the_first_bucket_when_forward_dominates():
    nb, tb = 4, 0.01
    assert param_gather_stall_s(nb * tb, tb, nb, 10.0, True) == pytest.approx(tb)
    assert param_gather_stall_s(nb * tb, tb, nb, 10.0, False) == pytest.approx(nb * tb)
    assert param_gather_stall_s(nb * 1.0, 1.0, nb, 0.0, True) == pytest.approx(nb * 1.0)


def test_overlap_in_the_simulator_hides_all_but_one_bucket():
    from dcpsim.run import config_from_dict
    from dcpsim.run.single import run_simulation

    base = {"model": {"name": "llama-13b"}, "cluster": {"gpus": 16}, "parallel": {"tp": 1, "pp": 1, "cp": 1},
            "workload": {"name": "fixed", "seq_len": 4096, "gbs": 64}, "policy": {"name": "packing"},
            "sim": {"grad_bucket_params": 50_000_000, "host_timeline": False}}  # the device's bucket mechanism alone
    times = {}
    for flags in ((False, False), (True, False), (True, True)):
        d = {**base, "sim": {**base["sim"], "overlap_grad_sync": flags[0], "overlap_param_gather": flags[1]}}
        res = run_simulation(config_from_dict(d), allow_infeasible=True)  # timing mechanics: 13B on pp=1 is over memory
        times[flags] = (res.iterations.iloc[0].iteration_time_s, res.records[0])
    rec = times[(False, False)][1]
    sync = rec.sync
    nb = int(sync.buckets[0])
    assert nb == math.ceil(sync.params_per_gpu[0] / 50e6) > 1
    t_none = times[(False, False)][0]
    # reduce-scatter overlapped: all but the last bucket hidden behind the last backward
    assert t_none - times[(True, False)][0] == pytest.approx((nb - 1) * sync.reduce_scatter_bucket_s[0], rel=1e-9)
    # parameter all-gather overlapped too: all but the first bucket hidden behind the next forward
    assert times[(True, False)][0] - times[(True, True)][0] == pytest.approx((nb - 1) * sync.all_gather_bucket_s[0], rel=1e-9)


# ------------------------------------------------------------------ uneven stages
def test_uneven_stages_sum_to_the_layers():
    s = stage_layer_counts(126, 16, 7, 7)  # Llama 3 405B on PP 16 (Megatron --decoder-first/last-pipeline-num-layers)
    assert s.sum() == 126 and s[0] == 7 and s[-1] == 7 and set(s[1:-1]) == {8}
    assert stage_layer_counts(40, 4).tolist() == [10, 10, 10, 10]
    assert stage_layer_counts(30, 4, 0, 3).tolist() == [9, 9, 9, 3]
    with pytest.raises(ConfigError, match="parallel.first_stage_layers"):
        stage_layer_counts(126, 16, 5, 0)  # 121 left on 15 stages
    with pytest.raises(ConfigError, match="pp"):
        stage_layer_counts(126, 16)


def test_uneven_stage_costs_and_params_scale_with_layers():
    m = {**TINY, "n_layers": 10}
    cm = CostModel.build("h100-sxm", get_model(m), pp=4, first_stage_layers=1, last_stage_layers=3, recompute="none")
    assert cm.stage_layers.tolist() == [1, 3, 3, 3] and cm.layers_per_stage == 3
    spec = get_model(m)
    assert stage_params(cm).sum() == pytest.approx(spec.n_params)  # embedding first, head + final norm last
    from dcpsim.sim.durations import DurationModel
    from dcpsim.sim.topology import Topology

    topo = Topology(tp=1, pp=4, dp=1, cp=1, gpus_per_node=8, nvlink_domain_gpus=8)
    dm = DurationModel(cm, topo)
    assert dm.stage_scale.tolist() == pytest.approx([1 / 3, 1, 1, 1])


# ------------------------------------------------------------------ unfused attention
def test_unfused_attention_closed_form():
    spec = get_model(TINY)
    cm = CostModel.build("a100-sxm-80gb", spec, recompute="none", attention="unfused")
    prof = cm.profile
    L = 2048
    pc = cm.pack_cost([L], 1, check_memory=False)
    h, d = spec.n_heads, spec.head_dim
    g = 2.0 * L * h * L * d
    t = g / float(prof.gemm_flops_per_s(L * h, L, d)) + g / float(prof.gemm_flops_per_s(L * h, d, L))
    per_layer_fwd = t + 9.0 * h * L * L / prof.hbm_bw_bytes_per_s
    per_layer_bwd = 2.0 * t + 11.0 * h * L * L / prof.hbm_bw_bytes_per_s
    assert pc.attn_fwd_s == pytest.approx(cm.layers_per_stage * per_layer_fwd, rel=1e-12)
    assert pc.attn_bwd_s == pytest.approx(cm.layers_per_stage * per_layer_bwd, rel=1e-12)
    flash = CostModel.build("a100-sxm-80gb", spec, recompute="none").pack_cost([L], 1, check_memory=False)
    assert pc.attn_fwd_s > flash.attn_fwd_s  # the full L x L scores and their memory traffic cost more


def test_unfused_attention_refuses_context_parallelism():
    cm = CostModel.build("h100-sxm", get_model(TINY), recompute="none", attention="unfused")
    with pytest.raises(ConfigError, match="parallel.attention"):
        cm.pack_cost([4096], 2, check_memory=False)
    with pytest.raises(ConfigError, match="parallel.attention"):
        CostModel.build("h100-sxm", get_model(TINY), attention="sdpa")


def test_cli_fp8_on_a100_is_one_line_exit_2_and_cost_honours_precision(capsys):
    from dcpsim import cli

    rc = cli.main(["cost", "--gpu", "a100-sxm-80gb", "--set", "parallel.precision=fp8", "--lengths", "4096"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "parallel.precision" in err and "fp8" in err
    outs = {}
    for prec in ("bf16", "fp8"):
        assert cli.main(["cost", "--pp", "40", "--set", f"parallel.precision={prec}", "--lengths", "4096", "--json"]) == 0
        outs[prec] = json.loads(capsys.readouterr().out)
    assert outs["fp8"]["config"]["precision"] == "fp8"
    assert outs["fp8"]["breakdown_s"]["gemm_fwd_s"] < 0.6 * outs["bf16"]["breakdown_s"]["gemm_fwd_s"]
    assert outs["fp8"]["breakdown_s"]["fp8_cast_fwd_s"] > 0


def test_unfused_cross_entropy_adds_its_logit_passes():
    kw = dict(pp=32, recompute="none")
    fused = CostModel.build("h100-sxm", "llama3-8b", **kw).pack_cost([4096], 1, check_memory=False)
    unf = CostModel.build("h100-sxm", "llama3-8b", cross_entropy="unfused", **kw).pack_cost([4096], 1, check_memory=False)
    m, bw = get_model("llama3-8b"), get_profile("h100-sxm").hbm_bw_bytes_per_s
    logits = 4096 * m.vocab
    assert unf.head_fwd_s - fused.head_fwd_s == pytest.approx((38 - 4) * logits / bw, rel=1e-9)
    assert unf.head_bwd_s - fused.head_bwd_s == pytest.approx((14 - 4) * logits / bw, rel=1e-9)
    assert unf.fwd_s == fused.fwd_s  # only the last stage's head changes


def test_gemm_k_half_is_the_machine_balance():
    for name in ("h100-sxm", "a100-sxm-80gb", "b200", "h200-sxm"):
        p = get_profile(name)
        assert p.timing.gemm_k_half == pytest.approx(p.peak_bf16_flops / p.hbm_bw_bytes_per_s)


def test_fp8_backward_gemms_pay_split_accumulation():
    """TE runs dgrad/wgrad FP8 GEMMs with split accumulation: backward = 2 x forward x the profile's factor."""
    kw = dict(pp=40, recompute="none")
    prof = get_profile("h100-sxm")
    assert prof.timing.fp8_split_accumulation_factor > 1.0
    f8 = CostModel.build(prof, "llama-13b", precision="fp8", **kw).pack_cost([8192], 1, check_memory=False)
    bf = CostModel.build(prof, "llama-13b", **kw).pack_cost([8192], 1, check_memory=False)
    assert f8.gemm_bwd_s == pytest.approx(2.0 * prof.timing.fp8_split_accumulation_factor * f8.gemm_fwd_s, rel=1e-12)
    assert bf.gemm_bwd_s == pytest.approx(2.0 * bf.gemm_fwd_s, rel=1e-12)
    assert get_profile("b200").timing.fp8_split_accumulation_factor == 1.0
