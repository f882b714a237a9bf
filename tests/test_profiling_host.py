"""Host dispatch measurement (dcpsim.profiling.host): the CPU path produces every figure; files are owned."""

import importlib.util
import json

import pytest

from dcpsim.errors import ConfigError

if importlib.util.find_spec("torch") is None:  # imported where a test uses it: not at collection
    pytest.skip("could not import 'torch'", allow_module_level=True)

from dcpsim.profiling import host  # noqa: E402


def test_stats_orders_percentiles():
    s = host._stats([3.0, 1.0, 2.0, 5.0, 4.0])
    assert s["p10_s"] <= s["median_s"] <= s["p90_s"]
    assert s["median_s"] == 3.0 and s["n"] == 5


def test_write_host_refuses_a_folder_it_does_not_own(tmp_path):
    (tmp_path / "mine.txt").write_text("user data")
    with pytest.raises(ConfigError):
        host.write_host({"x": 1}, tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "user data"


@pytest.mark.slow
def test_quick_cpu_run_produces_every_figure(tmp_path):
    res = host.measure_host(host.HostOptions(device="cpu", quick=True))
    path = host.write_host(res, tmp_path / "h")
    back = json.loads(path.read_text())
    for key in ("kernel_launch_host_s", "sync_idle_s", "item_idle_s", "linear_fwd_host_s", "block_fwd_host_s",
                "block_fwd_bwd_host_s"):
        assert back["kernels"][key]["median_s"] > 0, key
    assert back["collectives"]["backend"] == "gloo" and "error" not in back["collectives"]
    assert back["tiny_gpt"]["eager_step_s"]["median_s"] > 0
    assert back["measured"]["device_kind"] == "cpu" and back["measured"]["host_cpu"]
    assert back["block_sweep"] and "error" not in back["block_sweep"][0]
