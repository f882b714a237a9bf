"""The Megatron-LM one-GPU check (experiments/host/megatron_1gpu_check.py): its runs read from the committed
megatron_steps.json, each simulated run read from its own argument list, the [host] table rebuilt from a host
JSON the way the shipped profiles are built, and the comparison logic on synthetic values. No timing of this
machine enters any assertion (the simulation is deterministic; nothing is measured here)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "host" / "megatron_1gpu_check.py"


@pytest.fixture(scope="module")
def mc(load_script):
    return load_script(SCRIPT, "megatron_1gpu_check")


def test_runs_are_the_committed_json_with_the_declared_split(mc):
    runs = mc.measured_runs()
    raw = json.loads(mc.STEPS_JSON.read_text())
    assert {r.key for r in runs} == set(raw)
    for r in runs:
        assert r.median_s == raw[r.key]["median_s"] and r.args == raw[r.key]["args"]
        assert r.p25_s <= r.median_s <= r.p75_s
    split = {r.key: r.split for r in runs}
    assert split["timers0/a_mb8"] == split["timers0/d_mb8_24l"] == "in-sample (ratio)"
    for name in ("b1_mb1", "c_mb8_nosync", "e_h2048", "f_mb8_bf16"):
        assert split[f"timers0/{name}"] == "held-out"
    assert split["timers2/b1_mb1"] == "secondary (timers on)"


def test_each_run_is_read_from_its_own_arguments(mc):
    """One GPU, DP1: micro-batch 4 of 1,024-token fixed sequences, global batch / 4 microbatches; nothing
    refused; the logging and determinism flags as each run set them."""
    for r in mc.measured_runs():
        read = mc.read_run(r.args, "h100-sxm")
        cfg = read.config
        assert read.dropped == []
        a = dict(zip(r.args, r.args[1:] + [""], strict=True))
        assert cfg.cluster.gpus == 1 and cfg.parallel.tp == cfg.parallel.pp == cfg.parallel.cp == 1
        assert cfg.parallel.mbs == 4 and cfg.workload.seq_len == 1024 and cfg.workload.gbs == int(a["--global-batch-size"])
        assert cfg.parallel.attention == "unfused"  # --transformer-impl local
        st = cfg.step
        assert st.log_params_norm == ("--log-params-norm" in r.args)
        assert st.log_num_zeros_in_grad == ("--log-num-zeros-in-grad" in r.args)
        assert st.deterministic == ("--deterministic-mode" in r.args)
        assert st.timing_log_level == r.timing_log_level and st.log_interval == 1
        assert not st.grad_accumulation_fusion and st.transformer_impl == "local"
        assert any("--no-masked-softmax-fusion" in n for n in read.notes)  # the launcher's flag, read
    e = next(r for r in mc.measured_runs() if r.name == "e_h2048")
    cfg = mc.read_run(e.args, "h100-sxm").config
    assert cfg.workload.gbs // cfg.parallel.mbs == 4


def test_a_refused_flag_is_dropped_and_named(mc):
    args = mc.measured_runs()[0].args + ["--num-experts", "8"]
    read = mc.read_run(args, "h100-sxm")
    assert len(read.dropped) == 1 and read.dropped[0].startswith("--num-experts: mixture-of-experts")


def test_host_table_is_rebuilt_as_the_shipped_one(mc, tmp_path):
    """From the shipped profiles' host.json the rebuilt [host] table is h100-sxm's exactly; from host_vm2.json
    a layer pass is that machine's plain block times the same Megatron-LM ratio."""
    from dcpsim.hardware import get_profile

    bpp = mc._build_module()
    same = get_profile(str(mc.host_profile(tmp_path / "a", bpp.HOST_JSON)))
    assert same.host == get_profile("h100-sxm").host
    vm2 = get_profile(str(mc.host_profile(tmp_path / "b")))
    block = json.loads(mc.HOST_VM2.read_text())["kernels"]
    r = bpp.megatron_module_scale()[0]
    assert vm2.host.layer_fwd_s == pytest.approx(block["block_fwd_host_s"]["median_s"] * r, rel=1e-12)
    assert vm2.host.layer_fwd_s + vm2.host.layer_bwd_s == pytest.approx(block["block_fwd_bwd_host_s"]["median_s"] * r)
    assert "host_vm2.json" in vm2.sources["host.layer_fwd_s"]
    assert vm2.gemm_rows == get_profile("h100-sxm").gemm_rows  # device tables untouched


def test_comparison_logic_on_synthetic_values(mc):
    runs = [mc.Run("timers0/a_mb8", [], 1.0, 0.9, 1.1, 50, 0), mc.Run("timers0/d_mb8_24l", [], 2.0, 1.8, 2.2, 50, 0),
            mc.Run("timers0/b1_mb1", [], 0.1, 0.09, 0.12, 50, 0), mc.Run("timers2/b1_mb1", [], 0.1, 0.09, 0.12, 15, 2)]
    rows = mc.compare(runs, [{"step_s": 1.05}, {"step_s": 3.0}, {"step_s": 0.05}, {"step_s": 0.2}])
    assert [r["error"] for r in rows] == pytest.approx([0.05, 0.5, -0.5, 1.0])
    assert [r["in_quartiles"] for r in rows] == [True, False, False, False]
    ins, held = mc.stats(rows, "in-sample (ratio)"), mc.stats(rows, "held-out")
    assert ins["n"] == 2 and ins["mean_abs"] == pytest.approx(0.275) and ins["worst_abs"] == pytest.approx(0.5)
    assert held["n"] == 1 and held["mean_signed"] == pytest.approx(-0.5)
    assert mc.layer_pass_slope(rows) == pytest.approx((1.0 / 96, 1.95 / 96))
    assert math.isnan(mc.relative_error(1.0, 0.0)) and math.isnan(mc.relative_error(math.nan, 1.0))
    md = mc.table_markdown(rows, {"other": rows})
    assert "+50.0%" in md and "| held-out | 1 |" in md


def test_one_microbatch_step_is_simulated_with_its_breakdown(mc, tmp_path):
    """b1_mb1 (global batch 4 = one microbatch) on the rebuilt profile: one microbatch simulated, and the
    breakdown's step is the simulated step."""
    prof = str(mc.host_profile(tmp_path))
    run = next(r for r in mc.measured_runs() if r.key == "timers0/b1_mb1")
    out = mc.simulate(mc.read_run(run.args, prof).config, breakdown=True)
    assert out["microbatches"] == 1 and out["rank_step_s"] == pytest.approx(out["step_s"], rel=1e-9)
    assert "| F0 |" in out["table"] and "| B0 |" in out["table"] and "params norm" in out["table"]
    assert out["forward_backward_s"] + out["step_end_s"] <= out["step_s"] * (1 + 1e-9)


def test_shipped_ratio_is_the_solve_on_the_committed_runs(mc, tmp_path):
    """megatron_ratio.json holds, per plain-PyTorch host JSON, a ratio at which dcpsim's step grows per added layer
    pass (d_mb8_24l - a_mb8) as Megatron-LM's measured step did, and their mean: the solve's defining equation,
    re-simulated here on the current model. A time-model change that moves the layer's host price fails this until
    the ratio is solved again (``megatron_1gpu_check.py --solve``)."""
    import statistics

    shipped = json.loads((mc.MEASURED_DIR / "megatron_ratio.json").read_text())
    runs = {r.key: r for r in mc.measured_runs()}
    pair = [runs["timers0/a_mb8"], runs["timers0/d_mb8_24l"]]
    for s in shipped["solved"]:
        prof = str(mc.host_profile(tmp_path / s["host_json"], mc.MEASURED_DIR / s["host_json"], scale=s["ratio"]))
        rows = mc.compare(pair, [mc.simulate(mc.read_run(x.args, prof).config) for x in pair])
        measured, simulated = mc.layer_pass_slope(rows)
        assert simulated == pytest.approx(measured, rel=1e-3)
    assert shipped["ratio"] == pytest.approx(statistics.fmean(s["ratio"] for s in shipped["solved"]), rel=1e-12)
    assert {s["host_json"] for s in shipped["solved"]} == {"host_vm2.json", "host_vm2_repeat.json"}
