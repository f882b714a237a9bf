"""Extension points: a new network model (or engine) is one module plus one registry line."""

from __future__ import annotations

import pytest

from dcpsim.errors import ConfigError
from dcpsim.registry import Registry
from dcpsim.run.load import config_from_dict
from dcpsim.sim.engines import ENGINES
from dcpsim.sim.networks import NETWORKS, NetworkModel


def _cfg(**sim):
    return config_from_dict({
        "model": {"name": "llama2-7b"}, "cluster": {"gpus": 16},
        "parallel": {"tp": 1, "pp": 1, "cp": 16, "max_tokens_per_rank": 16384},
        "workload": {"name": "github", "gbs": 16, "min_len": 256, "max_len": 65536},
        "policy": {"name": "packing"}, "sim": {"iterations": 1, **sim}})


@pytest.fixture
def toy_network(monkeypatch):
    monkeypatch.setattr(NETWORKS, "_entries", dict(NETWORKS._entries))  # undone after the test
    NETWORKS.register("toy-half", "toy_network:HalfBisectionNetwork")  # the one registry line
    return "toy-half"


def test_a_toy_network_is_one_module_and_one_registry_line(toy_network):
    from dcpsim.run.single import run_simulation

    toy = run_simulation(_cfg(network=toy_network)).summary
    ideal = run_simulation(_cfg(network="ideal")).summary
    slow = run_simulation(_cfg(network="ideal").model_copy(
        update={"hardware": _cfg().hardware.model_copy(update={"network_scale": 0.5})})).summary
    # the toy prices the CP ring (16 ranks over two NVLink domains) at half the bandwidth: exactly the CP
    # communication of the ideal network at half the network bandwidth
    assert toy["cp_comm_s"] > ideal["cp_comm_s"] > 0
    assert toy["cp_comm_s"] == pytest.approx(slow["cp_comm_s"], rel=1e-12)
    assert toy["network"] == "toy-half"
    # the fast path runs it (it does not use flows), as "auto" picks
    assert ENGINES.get("fast").supports(NETWORKS.get("toy-half"))


def test_unknown_and_duplicate_names_are_refused(toy_network):
    with pytest.raises(ConfigError, match="sim.network"):
        _cfg(network="mesh")
    with pytest.raises(ConfigError, match="already registered"):
        NETWORKS.register("ideal", "toy_network:HalfBisectionNetwork")
    with pytest.raises(ConfigError, match="NetworkModel subclass"):
        NETWORKS.register("not-a-network", dict)
    from dcpsim.sim.settings import SimSettings

    with pytest.raises(ConfigError, match="sim.engine"):
        SimSettings(network="shared", engine="fast")
    assert issubclass(NETWORKS.get(toy_network), NetworkModel)


def test_registry_is_lazy_and_lists_builtins_first():
    r: Registry = Registry("thing.name", {"a": "dcpsim.sim.networks.ideal:IdealNetwork"}, NetworkModel)
    assert r.names() == ["a"] and isinstance(r._entries["a"], str)  # nothing imported yet
    assert r.get("a").name == "ideal" and not isinstance(r._entries["a"], str)
    with pytest.raises(ConfigError, match="thing.name"):
        r.get("b")


def test_a_toy_plot_is_one_function_and_one_registry_line(monkeypatch, tmp_path):
    import inspect

    import pandas as pd

    from dcpsim.report import PLOTS, get_plot

    monkeypatch.setattr(PLOTS, "_entries", dict(PLOTS._entries))
    PLOTS.register("toy-tokens", "toy_network:tokens_bar")  # the one registry line
    df = pd.DataFrame({"policy": ["packing", "dynamic", "dynamic"], "tokens": [3, 1, 2]})
    out = get_plot("toy-tokens")(df, tmp_path / "t.png")
    assert out.is_file() and out.stat().st_size > 0
    # every built-in figure takes the DataFrame first (the lengths figure also takes a plain array)
    for name, fn in PLOTS.items():
        first = next(iter(inspect.signature(fn).parameters))
        assert first in ("df", "data", "lengths"), (name, first)
    with pytest.raises(ConfigError, match="plot"):
        get_plot("pie")
# the configuration schema's imports: tests/test_layers.py::test_the_config_schema_loads_no_policy_workload_or_simulator
