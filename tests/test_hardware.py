"""Hardware profiles: shipped profiles load, validation names file/field/value, interpolation."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from dcpsim.errors import ConfigError, ProfileError
from dcpsim.hardware import Curve, bus_factor, get_profile, list_profiles, load_profile, write_profile

SHIPPED = ["a100-sxm-80gb", "b200", "gb200", "h100-sxm", "h200-sxm"]


def test_shipped_profiles_load_and_name_origins():
    names = list_profiles()
    for n in SHIPPED:
        assert n in names
        p = get_profile(n)
        assert p.name == n
        for r in p.gemm_rows + p.attention_rows + p.collective_rows:
            assert r["source"].strip()
        for key in ("peak_bf16_flops", "hbm_bytes", "nvlink_bw_bytes_per_s", "nic_bw_bytes_per_s"):
            assert p.sources[key]


def test_h100_figures_match_reference():
    p = get_profile("h100-sxm")
    assert p.peak_bf16_flops == 989e12
    assert p.hbm_bytes == 81559 * 2**20  # "80 GB" as NVML reports it: 81,559 MiB (79.6 GiB), not 80e9 B
    # FA3 forward causal at 4K is a table point: exact
    assert p.attention_flops_per_s(4096, direction="fwd", causal=True, head_dim=128) == pytest.approx(579e12)
    # H200 all-reduce 64 MiB table point
    assert p.busbw_bytes_per_s("all_reduce", "nvlink", 64 * 2**20) == pytest.approx(347e9)


def test_interpolation_is_log_log_between_points():
    c = Curve.from_points([100, 10000], [1.0, 100.0])
    # log-log line through (100,1) and (10000,100): y = x/100
    assert c(1000) == pytest.approx(10.0)
    assert c(3162.2776601683795) == pytest.approx(31.622776601683793)


def test_extrapolation_above_holds_last_value():
    c = Curve.from_points([100, 1000], [5.0, 50.0])
    assert c(1e6) == pytest.approx(50.0)


def test_extrapolation_below_time_floor_vs_efficiency_hold():
    t = Curve.from_points([100, 1000], [5.0, 50.0], below="time", power=1.0)
    # time at size 10 equals time at size 100: throughput scales with size
    assert 10 / t(10) == pytest.approx(100 / t(100))
    e = Curve.from_points([100, 1000], [5.0, 50.0], below="efficiency")
    assert e(10) == pytest.approx(5.0)


def test_below_range_collective_time_is_latency_floor():
    p = get_profile("h100-sxm")
    small = p.collective_time_s("all_gather", "nvlink", 16, 8)
    smallest_row = min(r["bytes"] for r in p.collective_rows if r["op"] == "all_gather" and r["tier"] == "nvlink")
    assert small == pytest.approx(p.collective_time_s("all_gather", "nvlink", smallest_row, 8))


def test_bus_factor():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert bus_factor("sendrecv", 2) == 1.0


def test_collective_time_monotone_in_size():
    p = get_profile("h100-sxm")
    sizes = np.logspace(3, 10, 40)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"):
        for tier in ("nvlink", "network"):
            t = p.collective_time_s(op, tier, sizes, 8)
            assert np.all(np.diff(t) >= -1e-15), (op, tier)
    assert (p.collective_time_s("all_gather", "network", 1e9, 8) > p.collective_time_s("all_gather", "nvlink", 1e9, 8))


def test_roundtrip_write_load(tmp_path):
    p = get_profile("h100-sxm")
    write_profile(p, tmp_path / "copy")
    q = load_profile(tmp_path / "copy")
    assert q.summary() == p.summary()
    assert q.gemm_flops_per_s(1000, 5120, 5120) == pytest.approx(p.gemm_flops_per_s(1000, 5120, 5120))


def _copy(tmp_path):
    src = get_profile("h100-sxm").path
    dst = tmp_path / "bad"
    shutil.copytree(src, dst)
    return dst


def test_negative_value_names_field_and_file(tmp_path):
    d = _copy(tmp_path)
    text = (d / "profile.toml").read_text().replace("hbm_bytes = 85520809984.0", "hbm_bytes = -1.0")
    (d / "profile.toml").write_text(text)
    with pytest.raises(ProfileError) as ei:
        load_profile(d)
    msg = str(ei.value)
    assert "device.hbm_bytes" in msg and "-1" in msg and "profile.toml" in msg


def test_missing_source_is_an_error(tmp_path):
    d = _copy(tmp_path)
    text = (d / "profile.toml").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("nic_bw_bytes_per_s = \""))
    (d / "profile.toml").write_text(text)
    with pytest.raises(ProfileError, match="sources.nic_bw_bytes_per_s"):
        load_profile(d)


def test_unsorted_sizes_are_an_error(tmp_path):
    d = _copy(tmp_path)
    lines = (d / "gemm.csv").read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    (d / "gemm.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileError, match="tokens"):
        load_profile(d)


def test_unknown_unit_enum_and_bad_number(tmp_path):
    d = _copy(tmp_path)
    text = (d / "collectives.csv").read_text().replace("all_reduce,nvlink", "allreduce,nvlink", 1)
    (d / "collectives.csv").write_text(text)
    with pytest.raises(ProfileError, match="op: got 'allreduce'"):
        load_profile(d)
    d2 = _copy(tmp_path / "x")
    text = (d2 / "attention.csv").read_text().replace(",316,", ",abc,", 1)
    (d2 / "attention.csv").write_text(text)
    with pytest.raises(ProfileError, match=r"attention.csv:\d+: tflops: got 'abc'"):
        load_profile(d2)


def test_missing_table_and_tier(tmp_path):
    d = _copy(tmp_path)
    (d / "gemm.csv").unlink()
    with pytest.raises(ProfileError, match="gemm.csv"):
        load_profile(d)
    d2 = _copy(tmp_path / "y")
    lines = [ln for ln in (d2 / "collectives.csv").read_text().splitlines() if ",network," not in ln]
    (d2 / "collectives.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileError, match="tier=network"):
        load_profile(d2)


def test_unknown_profile_name():
    with pytest.raises(ConfigError, match="gpu: got 'no-such-gpu'"):
        get_profile("no-such-gpu")


def test_wrong_format_version(tmp_path):
    d = _copy(tmp_path)
    text = (d / "profile.toml").read_text().replace("format_version = 1", "format_version = 99")
    (d / "profile.toml").write_text(text)
    with pytest.raises(ProfileError, match="format_version: got 99"):
        load_profile(d)


def test_public_profiles_name_their_host_cpu() -> None:
    """Every shipped public profile names its host CPU type (the host model's key), with a source."""
    from dcpsim.hardware import get_profile

    for n in SHIPPED:
        p = get_profile(n)
        assert p.host_cpu in ("x86", "grace") and p.sources["host_cpu"], n
    assert get_profile("gb200").host_cpu == "grace" and get_profile("h100-sxm").host_cpu == "x86"
    g = get_profile("gb200")
    assert g.gpus_per_node == 4 and g.nvlink_domain_gpus == 72


# ------------------------------------------------------------------ issue 19, item 5: impossible numbers refused
def _with(tmp_path, old: str, new: str):
    d = _copy(tmp_path)
    text = (d / "profile.toml").read_text()
    assert "\n" + old + "\n" in text  # a whole line (gemm_efficiency_scale is also the end of fp8_...)
    (d / "profile.toml").write_text(text.replace("\n" + old + "\n", "\n" + new + "\n"))
    return d


@pytest.mark.parametrize("old,new,field", [
    ("gemm_efficiency_scale = 1.0", "gemm_efficiency_scale = 1000.0", "timing.gemm_efficiency_scale"),
    ("gemm_efficiency_scale = 1.0", "gemm_efficiency_scale = 1.5", "timing.gemm_efficiency_scale"),  # 691.6*1.5 > 989
    ("attention_efficiency_scale = 1.0", "attention_efficiency_scale = 1.6", "timing.attention_efficiency_scale"),
    ("fp8_gemm_efficiency_scale = 1.0", "fp8_gemm_efficiency_scale = 1.6", "timing.fp8_gemm_efficiency_scale"),  # 1326*1.6 > 1979
    ("sms = 132", "sms = 0", "timing.sms"),
    ("nvlink_efficiency = 1.0", "nvlink_efficiency = 1e300", "timing.nvlink_efficiency"),
])
def test_scales_that_would_pass_the_peak_are_refused(tmp_path, old, new, field):
    """The issue's case: gemm_efficiency_scale = 1000 gave 1,629 TFLOPS/GPU on a 989-TFLOPS H100."""
    d = _with(tmp_path, old, new)
    with pytest.raises(ProfileError) as ei:
        load_profile(d)
    msg = str(ei.value)
    assert field in msg and new.split(" = ")[1] in msg.replace("1e+300", "1e300")


def test_no_kernel_rate_of_a_loadable_profile_exceeds_its_peak(tmp_path):
    """At the largest scales a profile may hold, every rate the cost model produces stays at or below the peak."""
    p = get_profile("h100-sxm")
    best = max(r["tflops"] for r in p.gemm_rows) * 1e12
    s = p.peak_bf16_flops / best  # the largest accepted GEMM scale
    d = _with(tmp_path, "gemm_efficiency_scale = 1.0", f"gemm_efficiency_scale = {s * (1 - 1e-12)!r}")
    q = load_profile(d)
    tokens = np.geomspace(1, 1 << 20, 50)
    for _, n, k in [("x", 5120, 5120), ("y", 13824, 5120), ("z", 32000, 5120), ("w", 8192, 8192)]:
        assert (q.gemm_flops_per_s(tokens, n, k) <= q.peak_bf16_flops * (1 + 1e-9)).all()
        assert q.gemm_max_flops_per_s(n, k) <= q.peak_bf16_flops * (1 + 1e-9)
        assert (q.gemm_flops_per_s(tokens, n, k, precision="fp8") <= q.timing.peak_fp8_flops * (1 + 1e-9)).all()


def test_simulated_throughput_never_passes_the_peak():
    from dcpsim.run.config import RunConfig
    from dcpsim.run.single import run_simulation

    cfg = RunConfig().with_updates({"cluster.gpus": 16, "parallel.pp": 2, "parallel.cp": 8, "workload.gbs": 16,
                                    "workload.max_len": 16384, "parallel.max_tokens_per_rank": 16384})
    s = run_simulation(cfg).summary
    assert 0 < s["tflops_per_gpu"] * 1e12 <= get_profile("h100-sxm").peak_bf16_flops and s["mfu"] <= 1


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_gemm_shape_factor_on_many_repeated_token_counts_equals_it_per_value(precision):
    """Large arrays are computed once per distinct token count: the same floats as each value alone."""
    p = get_profile("h100-sxm")
    rng = np.random.default_rng(3)
    m = rng.choice(np.arange(0, 40000, 7), (3, 6000)).astype(float)  # many repeats, 2-D, zeros
    got = p.gemm_shape_factor(m, 5120, 13824, precision=precision)
    flat = m.ravel()  # chunks below the size where distinct values are taken: the plain elementwise path
    ref = np.concatenate([p.gemm_shape_factor(flat[i:i + 1000], 5120, 13824, precision=precision)
                          for i in range(0, flat.size, 1000)]).reshape(m.shape)
    assert got.shape == m.shape and np.array_equal(got, ref)


def test_a_cached_profile_cannot_be_changed_in_place_under_later_runs():
    """get_profile hands every caller one cached object: assigning a field of it (a library user's what-if,
    ``p.hbm_bytes /= 100``) silently changed every later run_simulation in the process. It is frozen now;
    a variant is dataclasses.replace, which leaves the cached profile as it was."""
    import dataclasses

    p = get_profile("h100-sxm")
    hbm = p.hbm_bytes
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.hbm_bytes = hbm / 100
    small = dataclasses.replace(p, hbm_bytes=hbm / 100)
    assert small.hbm_bytes == hbm / 100 and small.gemm_flops_per_s(4096, 5120, 5120) == p.gemm_flops_per_s(
        4096, 5120, 5120)
    assert get_profile("h100-sxm").hbm_bytes == hbm


@pytest.mark.parametrize("bad", [None, 3, 2.5, ["h100-sxm"]])
def test_get_profile_and_get_model_refuse_a_non_name_naming_it(bad):
    """get_profile(None) and get_model(3) raised Path()'s bare TypeError ('expected str, bytes or os.PathLike
    object'), which names neither the argument nor what it takes."""
    from dcpsim.model import get_model

    with pytest.raises(ConfigError, match="profile name") as ei:
        get_profile(bad)
    assert ei.value.field == "gpu"
    with pytest.raises(ConfigError, match="spec .toml") as ei:
        get_model(bad)
    assert ei.value.field == "model"


@pytest.mark.parametrize("change", [{"hbm_bytes": float("nan")}, {"hbm_bytes": -1.0}, {"nic_bw_bytes_per_s": 0.0},
                                    {"gpus_per_node": 0}, {"peak_bf16_flops": "1e15"}])
def test_a_profile_variant_is_checked_like_a_loaded_profile(change):
    """dataclasses.replace(profile, hbm_bytes=nan) built a profile whose cost model failed with numpy's 'cannot
    convert float NaN to integer'; a NIC of 0 B/s or 0 GPUs per node were taken (load_profile checks these,
    a variant never met that check)."""
    import dataclasses

    field = next(iter(change))
    with pytest.raises(ProfileError, match=f"device.{field}"):
        dataclasses.replace(get_profile("h100-sxm"), **change)
