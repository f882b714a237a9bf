"""The torch profiler and validator on a CPU: machinery, formats and FLOP conventions (not accuracy)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from dcpsim import cli
from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError
from dcpsim.hardware import get_profile, load_profile
from dcpsim.hardware.profile import COLLECTIVE_OPS
from dcpsim.model import get_model
from dcpsim.profiling.build import ProfileOptions, quick_scale, run_profile, scale_model
from dcpsim.profiling.collectives import CollectiveSettings, aligned_bytes, run_collectives
from dcpsim.profiling.measure import ProfilingError, Timing, attention_flops
from dcpsim.profiling.validate import Pack, ValidationSettings, default_packs, run_validation

if importlib.util.find_spec("torch") is None:  # imported where a test uses it: not at collection
    pytest.skip("could not import 'torch'", allow_module_level=True)


# ------------------------------------------------------------- without torch
def test_cli_without_torch_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from dcpsim.cli import main\n"
        f"sys.exit(main(['profile', '--out', {str(tmp_path / 'p')!r}, '--quick']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install 'dcpsim[profile]'" in r.stderr
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------- small pieces
def test_scale_model_keeps_head_dim_and_checks_divisors():
    m = get_model("llama-13b")
    assert quick_scale(m) == 10
    s = scale_model(m, 10)
    assert (s.hidden, s.n_heads, s.n_kv_heads, s.head_dim) == (512, 4, 4, 128)
    assert s.ffn_hidden % 8 == 0 and abs(s.ffn_hidden - m.ffn_hidden / 10) <= 4
    assert scale_model(m, 1) is m
    with pytest.raises(ConfigError, match="--scale"):
        scale_model(m, 3)
    g = scale_model(get_model("llama-70b"), quick_scale(get_model("llama-70b")))  # GQA: 64 heads, 8 KV heads
    assert g.hidden <= 512 and g.n_heads % g.n_kv_heads == 0


def test_timing_statistics_and_timer():
    t = Timing.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert t.median_s == 3.0 and t.p10_s < 3.0 < t.p90_s and t.n == 5
    lo, hi = t.rate_range(6.0)
    assert lo == pytest.approx(6.0 / t.p90_s) and hi == pytest.approx(6.0 / t.p10_s)
    with pytest.raises(ProfilingError):
        Timing.from_samples([1.0, 0.0])
    from dcpsim.profiling.measure import Timer, detect_device

    timer = Timer(detect_device("cpu"), warmup=1, min_repeats=4, max_repeats=6, budget_s=0.001)
    tm = timer.time(lambda: time.sleep(0.003))
    assert tm.n == 4 and tm.median_s >= 0.003  # no upper bound: a loaded host may oversleep by any amount


def test_cuda_device_refused_on_cpu_build():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from dcpsim.profiling.measure import detect_device

    with pytest.raises(ConfigError, match="--device"):
        detect_device("cuda")


def test_attention_flops_match_cost_model_convention():
    # cost model: causal forward 2·L²·q per document, backward 2.5×
    m = get_model("llama-13b")
    L = 3000
    assert attention_flops([L], m.n_heads, m.head_dim, True) == pytest.approx(2.0 * L * L * m.q_dim)
    assert attention_flops([L, L], m.n_heads, m.head_dim, False, "bwd") == pytest.approx(2 * 2.5 * 4.0 * L * L * m.q_dim)


def test_packed_varlen_equals_block_diagonal_causal_attention():
    import torch

    from dcpsim.profiling.measure import AttentionKernels, MeasureContext, detect_device

    ctx = MeasureContext(detect_device("cpu"), dtype_name="fp32", seed=3)
    kern = AttentionKernels(ctx).select(2, 1, 16, 96, 32)  # GQA: 2 query heads share 1 KV head
    lengths = [40, 7, 49]
    T = sum(lengths)
    q, k, v = ctx.randn(T, 2, 16), ctx.randn(T, 1, 16), ctx.randn(T, 1, 16)
    cu, cu_list, mx = kern.cu_seqlens(lengths)
    got = kern.varlen(q, k, v, cu, cu_list, mx, True)
    doc = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(T)
    allowed = torch.from_numpy((doc[:, None] == doc[None, :]) & (pos[None, :] <= pos[:, None]))
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), attn_mask=allowed).transpose(0, 1)
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4)
    assert "per-document" in kern.varlen_name  # the CPU path


def test_attention_fallback_path_is_used_and_named():
    import torch

    from dcpsim.profiling.measure import _Ordered

    calls = []

    def picky(q, k, v, causal):
        if q.shape[0] > 8:
            raise RuntimeError("shape not supported")
        calls.append("picky")
        return q

    def generic(q, k, v, causal):
        calls.append("generic")
        return q

    run = _Ordered([("picky", picky), ("generic", generic)])
    small, big = torch.zeros(4, 2, 8), torch.zeros(16, 2, 8)
    run(small, small, small, True)
    assert run.last == "picky"
    run(big, big, big, True)
    run(big, big, big, True)  # the choice is remembered: picky is not retried
    assert run.last == "generic" and calls == ["picky", "generic", "generic"]
    with pytest.raises(ProfilingError, match="no attention path"):
        _Ordered([("picky", picky)])(big, big, big, False)


def test_collective_arguments_checked():
    assert aligned_bytes(1000, 3, 4) == 996
    assert aligned_bytes(5, 2, 4) == 8  # at least one element per rank
    with pytest.raises(ConfigError, match="--nproc"):
        run_collectives(CollectiveSettings(nproc=1, backend="gloo", sizes=[4096]))
    with pytest.raises(ConfigError, match="ops"):
        run_collectives(CollectiveSettings(nproc=2, backend="gloo", sizes=[4096], ops=["broadcast"]))


def test_profile_options_checked(tmp_path):
    m = scale_model(get_model("llama-13b"), 10)
    with pytest.raises(ConfigError, match="--tokens"):
        ProfileOptions.make(tmp_path, m, quick=True, tokens=(128, 64))
    with pytest.raises(ConfigError, match="--tp"):
        ProfileOptions.make(tmp_path, m, quick=True, tp=3)
    assert cli.main(["profile", "--out", str(tmp_path / "x"), "--quick", "--dtype", "bf16", "--scale", "7"]) == 2
    assert cli.main(["validate", "--profile", str(tmp_path / "missing")]) == 2


def test_default_packs_are_deterministic_and_exact():
    a = default_packs([1024, 4096], short=128, rng=np.random.default_rng(5))
    b = default_packs([1024, 4096], short=128, rng=np.random.default_rng(5))
    assert [p.lengths for p in a] == [p.lengths for p in b]
    assert all(p.tokens in (1024, 4096) for p in a)
    assert len({p.name for p in a}) == len(a)
    tailed = [p for p in a if p.name.startswith("long-tailed")]
    assert all(len(set(p.lengths)) > 2 and min(p.lengths) >= 32 for p in tailed)


# ------------------------------------------------------------- end to end on CPU
@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("prof") / "cpu-quick"
    t0 = time.perf_counter()
    # tiny sizes (any x86 CPU, bf16 emulated or not, in seconds); the default dtype (bf16) on purpose
    rc = cli.main(["profile", "--out", str(out), "--quick", "--tokens", "64,128,256", "--seqlens", "32,128,512",
                   "--sizes", "4096,65536", "--varlen-tokens", "512", "--min-repeats", "2", "--max-repeats", "3"])
    assert rc == 0
    return out, time.perf_counter() - t0


@pytest.mark.slow  # the quick CPU profile (torchrun collectives) costs ~15 s CPU: in make test-slow, which CI runs
def test_profile_quick_writes_a_loadable_measured_profile(cpu_profile):
    # no wall-clock assertion here: speed targets live in benchmarks, not unit tests (a loaded CI box is slow)
    out, _seconds = cpu_profile
    prof = load_profile(out)
    assert prof.kind == "measured" and prof.name == "cpu-quick"
    for key in ("device", "driver", "torch", "cuda", "nccl", "date", "command", "dtype", "model", "model_scale"):
        assert prof.measured.get(key), key
    assert prof.measured["command"].startswith("dcpsim profile")
    assert "hostname" not in prof.measured or prof.measured["hostname"] == "not recorded"
    # every row names a measurement (network rows: the measured rows, reused as a labelled placeholder)
    for r in prof.gemm_rows + prof.attention_rows:
        assert r["source"].startswith("measured: ") and "median of" in r["source"] and "p10-p90" in r["source"]
    for r in prof.collective_rows:
        assert r["source"].startswith("measured: " if r["tier"] == "nvlink" else "placeholder: ")
    m = scale_model(get_model("llama-13b"), 10)
    shapes = {(n, k) for _, n, k, _ in m.gemm_shapes(1)} | {(m.vocab, m.hidden)}
    assert {(r["n"], r["k"]) for r in prof.gemm_rows} == shapes
    assert sorted({r["tokens"] for r in prof.gemm_rows}) == [64, 128, 256]
    cases = {(r["direction"], r["causal"], r["layout"]) for r in prof.attention_rows}
    assert cases == {(d, c, lay) for d in ("fwd", "bwd") for c in (False, True) for lay in ("dense", "varlen")}
    assert {r["head_dim"] for r in prof.attention_rows} == {128}
    nv = [r for r in prof.collective_rows if r["tier"] == "nvlink"]
    assert {r["op"] for r in nv} == set(COLLECTIVE_OPS) and {r["ranks"] for r in nv} == {2}
    assert sorted({r["bytes"] for r in nv}) == [4096, 65536]
    assert all(math.isfinite(r["busbw_gb_per_s"]) and r["busbw_gb_per_s"] > 0 for r in nv)
    # placeholder peak: the best row, GEMM or attention, plus 1e-5 (so it stays above the 6-digit rows the CSV keeps)
    best = max(r["tflops"] for r in prof.gemm_rows + prof.attention_rows) * 1e12
    assert prof.hbm_bw_bytes_per_s > 0 and prof.peak_bf16_flops == pytest.approx(best, rel=3e-5)
    assert prof.peak_bf16_flops >= best


@pytest.mark.slow  # the quick CPU profile (torchrun collectives) costs ~15 s CPU: in make test-slow, which CI runs
def test_profile_round_trips_measured_times_through_the_cost_model(cpu_profile):
    """At a measured size, the cost model's attention and GEMM times equal the measured medians."""
    out, _ = cpu_profile
    prof = load_profile(out)
    raw = json.loads((out / "measurements.json").read_text())["records"]
    m = scale_model(get_model("llama-13b"), 10)
    cm = CostModel.build(prof, m, tp=1, pp=m.n_layers, recompute="none", memory_limit_bytes=1e30)
    rec = {(r["direction"], r["causal"], r["layout"], r["seqlen"]): r for r in raw if r["kind"] == "attention"}
    for L in (128, 512):
        n_docs = rec[("fwd", True, "varlen", L)]["n_docs"]
        pc = cm.pack_cost([L] * n_docs, 1, check_memory=False)
        assert pc.attn_fwd_s == pytest.approx(rec[("fwd", True, "varlen", L)]["timing"]["median_s"], rel=1e-4)
        assert pc.attn_bwd_s == pytest.approx(rec[("bwd", True, "varlen", L)]["timing"]["median_s"], rel=1e-4)
    gemm = {(r["n"], r["k"], r["tokens"]): r["fwd"]["median_s"] for r in raw if r["kind"] == "gemm"}
    pc = cm.pack_cost([256], 1, check_memory=False)
    want = sum(gemm[(n, k, 256)] for _, n, k, _ in m.gemm_shapes(1))
    assert pc.gemm_fwd_s == pytest.approx(want, rel=1e-4)


@pytest.mark.slow  # the quick CPU profile (torchrun collectives) costs ~15 s CPU: in make test-slow, which CI runs
def test_validate_cli_writes_error_table(cpu_profile, capsys):
    out, _ = cpu_profile
    capsys.readouterr()
    rc = cli.main(["validate", "--profile", str(out), "--quick", "--pack-tokens", "512", "--repeats", "3", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["rows"]) == 6
    errs = [r["error"] for r in res["rows"]]
    assert all(math.isfinite(e) for e in errs)
    assert res["mean_abs_error"] == pytest.approx(np.mean(np.abs(errs)))
    assert res["worst_abs_error"] == pytest.approx(np.max(np.abs(errs)))
    md = (out / "VALIDATION.md").read_text()
    assert "mean |error|" in md and res["meta"]["device"] in md and "dcpsim validate" in md
    assert md.count("\n| ") == 1 + 6  # header + one row per pack


@pytest.mark.slow  # the quick CPU profile (torchrun collectives) costs ~15 s CPU: in make test-slow, which CI runs
def test_validation_predictions_are_the_cost_model(cpu_profile, tmp_path):
    out, _ = cpu_profile
    m = scale_model(get_model("llama-13b"), 10)
    packs = [Pack("mix", (300, 100, 112)), Pack("one", (512,))]
    res = run_validation(out, m, ValidationSettings(pack_tokens=[], short=128, packs=packs, warmup=1, min_repeats=2,
                                                    max_repeats=2, budget_s=0.0, out=tmp_path / "V.md"))
    cm = CostModel.build(load_profile(out), m, tp=1, pp=m.n_layers, recompute="none", memory_limit_bytes=1e30)
    for pk, row in zip(packs, res.rows, strict=True):
        pc = cm.pack_cost(list(pk.lengths), 1, check_memory=False)
        assert row["predicted_s"] == pytest.approx(pc.total_s)  # every priced term, element-wise ops included
        assert row["measured_s"] > 0 and row["measured_p10_s"] <= row["measured_s"] <= row["measured_p90_s"]
        assert row["error"] == pytest.approx(row["predicted_s"] / row["measured_s"] - 1)
    assert (tmp_path / "V.md").is_file() and res.path == tmp_path / "V.md"


def test_mixed_profile_takes_unmeasurable_values_from_base(tmp_path):
    m = scale_model(get_model("llama-13b"), 10)
    opts = ProfileOptions.make(tmp_path / "mixed", m, quick=True, scale=10, base="h100-sxm", collectives=False,
                               tokens=(64, 128), seqlens=(32, 64), varlen_tokens=128, copy_bytes=4 << 20,
                               min_repeats=2, max_repeats=2)
    res = run_profile(opts, show_progress=False)
    prof, base = res.profile, get_profile("h100-sxm")
    assert prof.kind == "mixed"
    assert prof.peak_bf16_flops == base.peak_bf16_flops and prof.nic_bw_bytes_per_s == base.nic_bw_bytes_per_s
    assert prof.sources["peak_bf16_flops"].startswith("from base profile h100-sxm")
    assert prof.sources["hbm_bw_bytes_per_s"].startswith("measured: ")
    assert len(prof.collective_rows) == len(base.collective_rows)
    assert all(r["source"].startswith("from base profile h100-sxm") for r in prof.collective_rows)
    assert all(r["source"].startswith("measured: ") for r in prof.gemm_rows + prof.attention_rows)
    # timing: FP8 figures, shape model and launch floor from the base; calibration scales start at 1
    assert prof.timing.sms == base.timing.sms and prof.timing.peak_fp8_flops == base.timing.peak_fp8_flops
    assert prof.timing.per_kernel_overhead_s == base.timing.per_kernel_overhead_s
    assert prof.timing.gemm_efficiency_scale == 1.0
    assert prof.sources["timing.sms"].startswith("from base profile h100-sxm")
    # Transformer Engine's FP8 split accumulation is the GPU's (a public source), not a calibration: kept
    assert base.timing.fp8_split_accumulation_factor != 1.0
    assert prof.timing.fp8_split_accumulation_factor == base.timing.fp8_split_accumulation_factor
    assert prof.sources["timing.fp8_split_accumulation_factor"].startswith("from base profile h100-sxm")
    assert load_profile(res.path).timing == prof.timing


# ------------------------------------------------------------- issue 19, item 4: any CPU, no self-refusal, no bad folder
def test_placeholder_peak_covers_attention_faster_than_gemm():
    """On a CPU without bf16 instructions the (emulated) GEMMs can be slower than attention: the placeholder peak
    is the fastest measured kernel of either kind, so the profile never refuses its own rows."""
    from dcpsim.profiling.build import _device_values
    from dcpsim.profiling.measure import detect_device

    gemm = [{"tflops": 0.0074}]
    attn = [{"tflops": 0.0546}]
    coll = [{"op": "sendrecv", "tier": "nvlink", "busbw_gb_per_s": 3.0, "source": "measured: x"}]
    opts = ProfileOptions.make("x", scale_model(get_model("llama-13b"), 10), quick=True)
    values, sources = _device_values(detect_device("cpu"), None, gemm, attn, coll, 2, opts)
    assert values["peak_bf16_flops"] >= 0.0546e12
    assert "GEMM or attention" in sources["peak_bf16_flops"]


def test_a_profile_that_would_not_load_is_never_written(tmp_path):
    from dcpsim.errors import ProfileError
    from dcpsim.profiling.build import write_checked_profile

    good = get_profile("h100-sxm")
    from dataclasses import replace

    bad = replace(good, peak_bf16_flops=1e12)  # every row is above this peak: load_profile refuses it
    out = tmp_path / "p"
    with pytest.raises(ProfileError, match="tflops"):
        write_checked_profile(bad, out, {"measurements.json": "{}"})
    assert not out.exists() or not any(out.iterdir())
    prof = write_checked_profile(replace(good, name="p"), out, {"measurements.json": "{}"})
    assert prof.name == "p" and (out / "measurements.json").is_file()


def test_timer_deadline_bounds_the_repeats():
    from dcpsim.profiling.measure import Timer, detect_device

    timer = Timer(detect_device("cpu"), warmup=1, min_repeats=5, max_repeats=9, budget_s=10.0, deadline=0.0)
    tm = timer.time(lambda: sum(range(200)))
    assert tm.n == 1 and timer.cut == 1  # past the deadline: one timed call
    free = Timer(detect_device("cpu"), warmup=1, min_repeats=5, max_repeats=9, budget_s=10.0)
    assert free.time(lambda: sum(range(200))).n == 9 and free.cut == 0
    with pytest.raises(ConfigError, match="--time-limit"):
        ProfileOptions.make("x", scale_model(get_model("llama-13b"), 10), quick=True, time_limit_s=-1.0)
    assert ProfileOptions.make("x", scale_model(get_model("llama-13b"), 10), quick=True).time_limit_s == 60.0


def test_time_limit_cuts_every_case_to_one_repeat_and_says_so(tmp_path):
    """A run past its time limit still finishes with every case measured (once) and records that it was cut."""
    m = scale_model(get_model("llama-13b"), 10)
    opts = ProfileOptions.make(tmp_path / "cut", m, quick=True, scale=10, base="h100-sxm", collectives=False,
                               tokens=(64, 128), seqlens=(32, 64), varlen_tokens=128, copy_bytes=4 << 20,
                               min_repeats=3, max_repeats=3, time_limit_s=1e-9)
    res = run_profile(opts, show_progress=False)
    assert res.profile.measured["time_limit"].startswith("1e-09 s reached")
    raw = json.loads((tmp_path / "cut" / "measurements.json").read_text())["records"]
    timed = [r for r in raw if r["kind"] in ("gemm", "attention")]
    assert timed and all((r.get("timing") or r.get("fwd"))["n"] == 1 for r in timed)
    assert load_profile(res.path).name == "cut"
