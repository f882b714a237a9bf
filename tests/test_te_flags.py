"""Megatron-LM / Transformer Engine kernel paths read from a run's flags: the unfused RoPE (--no-rope-fusion), Transformer
Engine's unfused attention backend (its mask built every forward), and the dataloader's attention mask with the rest
of get_batch (copies, TP broadcasts, CP slicing). Counts from the sources named in dcpsim.cost.fixed / dcpsim.cost.host;
each flag changes the simulated time only when set, and survives export -> read back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dcpsim.cost import CostModel
from dcpsim.cost.compute import ROPE_UNFUSED_EXTRA_BYTES, elementwise_terms
from dcpsim.cost.fixed import (
    KERNELS_ROPE_UNFUSED,
    KERNELS_TE_UNFUSED_DATALOADER_MASK,
    KERNELS_TE_UNFUSED_MASK,
    kernels_per_layer,
)
from dcpsim.cost.host import PassShape, StepFlags, host_ops
from dcpsim.cost.host_calls import BATCH_TENSORS, BATCH_TENSORS_END_STAGE, CP_SLICE_KERNELS, get_batch_host_s
from dcpsim.errors import ConfigError
from dcpsim.export.megatron import megatron_args, resolve_policy
from dcpsim.export.reader import megatron_config, parse_flags, read_megatron, roundtrip_differences
from dcpsim.hardware import get_profile
from dcpsim.hardware.host import HostCosts
from dcpsim.model import get_model
from dcpsim.run.load import load_config
from dcpsim.run.single import cost_settings, run_simulation

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ROOT / "experiments" / "megatron_ci" / "flags"
TINY = {"name": "tiny", "n_layers": 12, "hidden": 512, "n_heads": 8, "n_kv_heads": 8, "ffn_hidden": 2048, "vocab": 32000}
X86 = HostCosts(cpu="x86", kernel_fwd_s=24e-6, kernel_bwd_s=35e-6, kernel_launch_s=6.5e-6, module_call_s=10e-6,
                collective_call_s=44e-6, sync_s=5e-6, microbatch_s=100e-6, param_tensor_s=6e-6, step_s=1e-3,
                graph_replay_s=6.5e-6, graph_kernel_s=0.9e-6)


def _settings(**kw):
    return CostModel.build(get_profile("h100-sxm"), get_model(TINY), recompute="none", **kw).settings


# ------------------------------------------------------------------ kernel counts per layer
def test_unfused_rope_adds_its_counted_kernels_and_bytes():
    """12 kernels per tensor forward and 7 backward where the fused RoPE launches 1 (q and k: +22, +12)."""
    assert KERNELS_ROPE_UNFUSED == (22, 12)
    fused, unfused = _settings(), _settings(rope_fusion=False)
    kf0, kb0 = kernels_per_layer(fused, np.array([1.0]))
    kf1, kb1 = kernels_per_layer(unfused, np.array([1.0]))
    assert (kf1 - kf0)[0] == 22 and (kb1 - kb0)[0] == 12
    s = np.array([4096.0])
    f0, b0 = elementwise_terms(fused, s)
    f1, b1 = elementwise_terms(unfused, s)
    elems = 4096.0 * (512 + 512)  # q_dim + kv_dim, tp 1
    bw = fused.profile.hbm_bw_bytes_per_s
    assert f1[0] - f0[0] == pytest.approx(ROPE_UNFUSED_EXTRA_BYTES[0] * elems / bw)
    assert b1[0] - b0[0] == pytest.approx(ROPE_UNFUSED_EXTRA_BYTES[1] * elems / bw)


def test_te_unfused_attention_builds_its_mask_and_local_does_not():
    """Transformer Engine's unfused backend: 10 kernels per forward for the causal mask, +1 OR with a dataloader mask;
    Megatron's local attention and flash attention: none; the backward is unchanged."""
    cp = np.array([1.0])
    te = kernels_per_layer(_settings(attention="unfused"), cp)
    te_nomask = kernels_per_layer(_settings(attention="unfused", attention_mask=False), cp)
    local = kernels_per_layer(_settings(attention="unfused", transformer_impl="local"), cp)
    assert (te[0] - local[0])[0] == KERNELS_TE_UNFUSED_MASK + KERNELS_TE_UNFUSED_DATALOADER_MASK == 11
    assert (te_nomask[0] - local[0])[0] == KERNELS_TE_UNFUSED_MASK
    assert te[1][0] == local[1][0] == te_nomask[1][0]
    flash = [kernels_per_layer(_settings(**kw), cp) for kw in
             ({}, {"transformer_impl": "local"}, {"attention_mask": False})]
    assert all(f[0][0] == flash[0][0][0] and f[1][0] == flash[0][1][0] for f in flash)


def test_transformer_impl_is_validated():
    with pytest.raises(ConfigError, match="step.transformer_impl"):
        _settings(transformer_impl="apex")


# ------------------------------------------------------------------ get_batch on the host
def test_get_batch_counts_copies_broadcasts_and_cp_slices():
    """pp = 1: 4 tensors (+ the mask) copied and broadcast; first/last stage: all copied, 2 (+ mask) broadcast;
    middle stages nothing; CP cuts each broadcast tensor (zeros, two fills, index_select); THD batches: not here."""
    one = np.array([1.0])
    copy, bc = X86.module_call_s + X86.kernel_launch_s, X86.collective_call_s
    gb = get_batch_host_s
    assert gb(X86, True, True, one)[0] == pytest.approx(5 * copy + 5 * bc)
    assert gb(X86, True, True, one, mask=False)[0] == pytest.approx(BATCH_TENSORS * (copy + bc))
    assert gb(X86, True, False, one)[0] == pytest.approx(5 * copy + 3 * bc)
    assert gb(X86, False, True, one, mask=False)[0] == pytest.approx(4 * copy + BATCH_TENSORS_END_STAGE * bc)
    assert gb(X86, False, False, one)[0] == 0.0
    cp = gb(X86, True, False, np.array([1.0, 2.0]))
    assert cp[1] - cp[0] == pytest.approx(3 * (X86.module_call_s + CP_SLICE_KERNELS * X86.kernel_launch_s))


def test_get_batch_lands_on_the_data_stages_forwards_only():
    shape = PassShape(stage_layers=np.array([3, 3, 3, 3]), vp=1, tp=2, kernels_fwd=np.array([16.0]),
                      kernels_bwd=np.array([24.0]), collectives_fwd=np.array([4.0]), collectives_bwd=np.array([4.0]))
    a = host_ops(shape, X86, StepFlags())
    b = host_ops(shape, X86, StepFlags(attention_mask_in_dataloader=False))
    d = a.host_s - b.host_s
    mask = X86.module_call_s + X86.kernel_launch_s + X86.collective_call_s
    assert d[0, 0, 0] == pytest.approx(mask) and d[3, 0, 0] == pytest.approx(mask)
    assert np.all(d[1:3] == 0.0) and np.all(d[:, 1] == 0.0)
    for packed in (StepFlags(packed=True), StepFlags(thd=True)):  # THD batches: get_batch's other path, not here
        p = host_ops(shape, X86, packed)
        assert p.host_s[0, 0, 0] < b.host_s[0, 0, 0]


# ------------------------------------------------------------------ flags -> settings -> time
def _run(name: str, gpus: int = 8):
    return read_megatron(FLAGS / f"gpt__{name}.args", gpus=gpus, gpu="h100-sxm")


def _t(cfg) -> float:
    return float(run_simulation(cfg, allow_infeasible=True).summary["iteration_time_s"])


def test_reader_maps_the_flags():
    rope = _run("gpt3_mcore_te_tp1_pp2_resume_torch_dist_rope_embeddings_interleaved_no_fusion")
    assert not rope.config.parallel.rope_fusion and rope.config.step.attention_mask_in_dataloader
    assert cost_settings(rope.config).rope_fusion is False
    nomask = _run("gpt3_mcore_te_tp2_pp2_resume_torch_dist_no_create_attention_mask_in_dataloader")
    assert not nomask.config.step.attention_mask_in_dataloader and nomask.config.parallel.rope_fusion
    assert cost_settings(nomask.config).attention_mask is False
    # --no-rope-fusion without RoPE embeddings (Megatron's default learned_absolute) changes nothing
    args = (FLAGS / "gpt__gpt3_mcore_te_tp2_pp2_resume_torch_dist.args").read_text() + "--no-rope-fusion\n"
    run = megatron_config(parse_flags(args.split()), gpus=8, gpu="h100-sxm")
    assert run.config.parallel.rope_fusion and any("no effect" in n for n in run.notes)


@pytest.mark.parametrize("update", [{"parallel.rope_fusion": False}, {"step.attention_mask_in_dataloader": False}])
def test_each_flag_changes_the_time_only_when_set(update):
    cfg = _run("gpt3_mcore_te_tp2_pp2_resume_torch_dist").config
    base = _t(cfg)
    assert _t(cfg.with_updates({k: (not v) for k, v in update.items()})) == base  # the default: unchanged
    changed = _t(cfg.with_updates(update))
    if "parallel.rope_fusion" in update:
        assert changed > base  # more kernels and bytes
    else:
        assert changed < base  # one copy and one broadcast fewer per microbatch on the data stages


def test_unfused_attention_mask_kernels_only_with_transformer_engine():
    # deterministic mode off: its fills differ between the implementations (dcpsim.cost.determinism)
    cfg = _run("gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files").config.with_updates({"step.deterministic": False})
    assert cfg.parallel.attention == "unfused" and cfg.step.transformer_impl == "transformer_engine"
    assert _t(cfg) > _t(cfg.with_updates({"step.transformer_impl": "local"}))
    flash = cfg.with_updates({"parallel.attention": "flash"})
    assert _t(flash) == _t(flash.with_updates({"step.transformer_impl": "local"}))


@pytest.mark.parametrize("update", [{"parallel.rope_fusion": False}, {"step.attention_mask_in_dataloader": False},
                                    {"parallel.rope_fusion": False, "step.attention_mask_in_dataloader": False}])
def test_export_round_trips_the_flags(update):
    """--no-rope-fusion round-trips; the export is a packed run, which always drops the dataloader mask (and the
    time model reads that setting for fixed-length runs only, so both values simulate alike)."""
    cfg = load_config(ROOT / "examples" / "simulate_default.toml").with_updates(update)
    policy, _ = resolve_policy(cfg, allow_approximate=True)
    args = megatron_args(cfg, policy=policy)
    assert ("--no-rope-fusion" in args) == (not cfg.parallel.rope_fusion)
    assert args.count("--no-create-attention-mask-in-dataloader") == 1
    back = megatron_config(parse_flags(args), gpus=cfg.cluster.gpus, gpu=cfg.hardware.gpu).config
    assert roundtrip_differences(cfg, back) == []
    assert not back.step.attention_mask_in_dataloader and cost_settings(cfg).attention_mask is False


def test_round_trip_still_compares_the_mask_of_fixed_runs():
    cfg = _run("gpt3_mcore_te_tp2_pp2_resume_torch_dist").config
    back = cfg.with_updates({"step.attention_mask_in_dataloader": False})
    assert roundtrip_differences(cfg, back) == ["step.attention_mask_in_dataloader: True -> False"]


def test_packed_runs_ignore_the_dataloader_mask():
    cfg = load_config(ROOT / "examples" / "simulate_default.toml").with_updates({"sim.iterations": 1})
    assert _t(cfg) == _t(cfg.with_updates({"step.attention_mask_in_dataloader": False}))


# ------------------------------------------------------------------ Transformer Engine's CP ring
@pytest.mark.parametrize("cp", [2, 4, 8])
def test_cp_ring_counts_its_fixed_and_per_step_kernels_and_nccl_ops(cp):
    """cp_comm p2p (TE AttnFuncWithCPAndKVP2P): forward 4 once + 3 per extra step and an isend/irecv pair; backward
    2 once + attention bwd, dQ, dK, dV per extra step and two pairs (K/V on, dK/dV back)."""
    from dcpsim.cost.fixed import KERNELS_RING_FIXED, NCCL_RING_STEP
    from dcpsim.cost.host import layer_collectives

    st = _settings()
    kf1, kb1 = kernels_per_layer(st, np.array([1.0]))
    kf, kb = kernels_per_layer(st, np.array([float(cp)]))
    assert KERNELS_RING_FIXED == (4, 2) and NCCL_RING_STEP == (2, 4)
    assert (kf - kf1)[0] == 4 + (cp - 1) * (3 + 2) and (kb - kb1)[0] == 2 + (cp - 1) * (6 + 4)
    cf, cb = layer_collectives(1, np.array([1.0, float(cp)]), "p2p")
    assert cf.tolist() == [0.0, 2.0 * (cp - 1)] and cb.tolist() == [0.0, 4.0 * (cp - 1)]
    cf2, _ = layer_collectives(2, np.array([float(cp)]), "p2p")
    assert cf2[0] == 4 + 2 * (cp - 1)  # sequence-parallel TP's four calls besides


def test_full_recompute_prices_the_checkpoint_wrapper_per_layer():
    """CheckpointFunction per recomputed layer: 20 dispatcher calls (RNG states, saved tensors, grad modes, detached
    inputs) and 2 entries (the Function, the nested backward); none when CUDA graphs replay the layer."""
    from dcpsim.cost.host import checkpoint_host_s, layer_pass_host

    shape = PassShape(stage_layers=np.array([2]), vp=1, tp=1, kernels_fwd=np.array([12.0]),
                      kernels_bwd=np.array([20.0]), collectives_fwd=np.array([0.0]), collectives_bwd=np.array([0.0]))
    f, b, _, _ = layer_pass_host(shape, X86, StepFlags())
    _, rb, _, _ = layer_pass_host(replace(shape, recompute="full"), X86, StepFlags())
    assert checkpoint_host_s(X86) == pytest.approx(20 * X86.kernel_launch_s + 2 * X86.module_call_s)
    assert rb[0] - b[0] - f[0] == pytest.approx(checkpoint_host_s(X86))
    g = StepFlags(cuda_graphs="local")
    gf, gb, _, _ = layer_pass_host(shape, X86, g)
    _, grb, _, _ = layer_pass_host(replace(shape, recompute="full"), X86, g)
    assert grb[0] == pytest.approx(gb[0] + gf[0])


# ------------------------------------------------------------------ --qk-layernorm
def test_qk_norms_add_two_norm_kernels_and_their_bytes():
    """--qk-layernorm (model.qk_layernorm): a norm over the queries and one over the keys, +2 kernels forward and +4
    backward (input gradient and weight-gradient reduction each), 4 B per q/k element forward, twice backward."""
    from dcpsim.cost.fixed import KERNELS_QK_NORM

    plain, qk = _settings(), CostModel.build(get_profile("h100-sxm"), get_model({**TINY, "qk_layernorm": True}),
                                             recompute="none").settings
    assert not plain.qk_norms and qk.qk_norms and KERNELS_QK_NORM == (2, 4)
    kf0, kb0 = kernels_per_layer(plain, np.array([1.0]))
    kf1, kb1 = kernels_per_layer(qk, np.array([1.0]))
    assert (kf1 - kf0)[0] == 2 and (kb1 - kb0)[0] == 4
    s = np.array([4096.0])
    (f0, b0), (f1, b1) = elementwise_terms(plain, s), elementwise_terms(qk, s)
    per = 4096.0 * 4.0 * (512 + 512) / plain.profile.hbm_bw_bytes_per_s
    assert f1[0] - f0[0] == pytest.approx(per) and b1[0] - b0[0] == pytest.approx(2 * per)
    # --test-mode's q/k checks imply the norms (Megatron runs them only with --qk-layernorm)
    assert replace(plain, test_mode_qk_checks=True).qk_norms


def test_qk_layernorm_is_read_priced_and_exported():
    run = _run("gpt3_mcore_te_tp4_pp1_resume_torch_dist_qk_layernorm_test_mode")
    assert run.config.model.name["qk_layernorm"] and run.config.step.test_mode_qk_checks
    cfg = _run("gpt3_mcore_te_tp4_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce").config
    spec = dict(cfg.model.name)
    assert not spec["qk_layernorm"]
    assert _t(cfg.with_updates({"model.name": {**spec, "qk_layernorm": True}})) > _t(cfg)
    base = load_config(ROOT / "examples" / "simulate_default.toml")
    for upd in ({}, {"step.test_mode_qk_checks": True}):
        c = base.with_updates(upd)
        args = megatron_args(c, policy=resolve_policy(c, allow_approximate=True)[0])
        assert args.count("--qk-layernorm") == (1 if upd else 0)
        back = megatron_config(parse_flags(args), gpus=c.cluster.gpus, gpu=c.hardware.gpu).config
        assert roundtrip_differences(c, back) == []
