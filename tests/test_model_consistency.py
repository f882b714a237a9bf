"""Time model consistent with what export emits (FP8 parameter all-gather) and TP kept inside an NVLink domain."""

from __future__ import annotations

import pytest

from dcpsim import cli
from dcpsim.errors import ConfigError
from dcpsim.model import get_model
from dcpsim.resources import data_dir
from dcpsim.run.config import RunConfig
from dcpsim.sim.durations import param_gather_bytes, stage_params
from dcpsim.sim.topology import Topology

DATA = data_dir("examples")
# Llama-3.1-8B-like layout on H100: FP8 GEMMs, TP 2, PP 2 (both stages gather over DP 4)
_FP8 = {"model.name": "llama3-8b", "hardware.gpu": "h100-sxm", "cluster.gpus": 16, "parallel.tp": 2,
        "parallel.pp": 2, "parallel.cp": 1, "parallel.precision": "fp8", "workload.gbs": 16}


def _sync(updates: dict):
    from dcpsim.run.single import build_cost_model, build_simulator

    cfg = RunConfig().with_updates(updates)
    cost = build_cost_model(cfg)
    return cost, build_simulator(cfg, cost).sync


def test_fp8_param_gather_moves_one_byte_per_block_weight():
    """Megatron --fp8-param-gather (which `dcpsim export` emits for FP8 runs) all-gathers the block GEMM
    weights as FP8: 1 B each; embeddings/output layer/norms stay at 2 B. BF16, or the flag off: 2 B."""
    cost, sync = _sync(_FP8)
    params = stage_params(cost)
    lin = get_model("llama3-8b").linear_params_per_layer() / 2  # per TP rank
    for p in range(2):
        want = 2.0 * params[p] - cost.stage_layers[p] * lin
        assert param_gather_bytes(cost, p, params[p]) == pytest.approx(want)
        assert param_gather_bytes(cost, p, params[p], fp8_param_gather=False) == 2.0 * params[p]
    _, sync_off = _sync({**_FP8, "sim.fp8_param_gather": False})
    _, sync_bf16 = _sync({**_FP8, "parallel.precision": "bf16"})
    assert (sync.all_gather_s < sync_off.all_gather_s).all()
    assert (sync_off.all_gather_s == sync_bf16.all_gather_s).all()  # the reduce-scatter and BF16 are untouched
    assert (sync.reduce_scatter_s == sync_off.reduce_scatter_s).all()


def test_export_emits_fp8_param_gather_only_when_the_time_model_uses_it():
    from dcpsim.export.megatron import cost_mechanism_flags

    on = cost_mechanism_flags(RunConfig().with_updates(_FP8))
    off = cost_mechanism_flags(RunConfig().with_updates({**_FP8, "sim.fp8_param_gather": False}))
    assert "--fp8-param-gather" in on and "--fp8-param-gather" not in off and "--fp8-format" in off


@pytest.mark.parametrize(("kw", "field"), [
    ({"tp": 6, "nvlink_domain_gpus": 8}, "parallel.tp"),                # second TP group on GPUs 6-11
    ({"tp": 8, "nvlink_domain_gpus": 4}, "hardware.nvlink_domain_gpus"),  # domain below TP
    ({"tp": 4, "nvlink_domain_gpus": 6}, "parallel.tp"),
])
def test_tp_that_leaves_an_nvlink_domain_is_refused(kw, field):
    with pytest.raises(ConfigError) as e:
        Topology(pp=1, dp=2, cp=1, **kw)
    assert e.value.field == field and str(kw["tp"]) in str(e.value)


def test_tp_not_dividing_the_domain_is_one_line_at_the_cli(tmp_path, capsys):
    rc = cli.main(["simulate", str(DATA / "simulate_default.toml"), "--set", "parallel.tp=6", "--set", "parallel.pp=1", "--set", "parallel.cp=1",
                   "--set", "cluster.gpus=48", "--set", "workload.gbs=48", "--set", "model.name=llama3-8b",
                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "parallel.tp" in err
    assert not (tmp_path / "o").exists()


def test_planner_skips_tp_outside_the_domain():
    """The layout search never proposes such a TP; a user-given one is a refused candidate, not a crash."""
    from dcpsim.planning import make_data_spec
    from dcpsim.planning.space import Candidate, SearchSpace, _tp_options, check_candidate

    base = RunConfig().with_updates({"model.name": "llama2-7b", "hardware.gpu": "h100-sxm"})
    assert _tp_options(SearchSpace(), base.with_updates({"hardware.nvlink_domain_gpus": 4})) == [1, 2, 4]
    data = make_data_spec(seq_len=4096, gbs=64)
    for tp, upd in ((8, {"hardware.nvlink_domain_gpus": 4}), (6, {})):
        cand = Candidate(tp=tp, pp=1, cp=1, tokens_per_rank=4096, recompute="full", mbs=1)
        ch = check_candidate(base.with_updates(upd), cand, 48 if tp == 6 else 64, data, 64,
                             {"policy.name": "packing", **data.config_updates()})
        assert ch.cfg is None and "at NVLink speed" in ch.reason, ch.reason
