"""The Dynamic-CP blog reproduction: shape of the quick run, specs, calibration rules, CLI.

No published number is asserted here: the quick reproduction is checked for its
shape only (both datasets, every policy, Dynamic-CP faster than packing on both,
GitHub's gain larger than CommonCrawl's).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from dcpsim.errors import ConfigError
from dcpsim.reproduction import DEFAULT_SPEC_DIR, ReproduceOptions, load_experiment, reproduce
from dcpsim.reproduction.blog import read_calibration

pytest.importorskip("dcpsim.policies", reason="policies not available")


@pytest.fixture(scope="module")
def exp():
    return load_experiment()


@pytest.fixture(scope="module")
def quick(exp):
    return reproduce(exp, ReproduceOptions(quick=True))


def test_spec_folder_loads(exp):
    assert DEFAULT_SPEC_DIR.is_dir()
    assert set(exp.datasets) == {"github", "commoncrawl"}
    assert {"packing-pr2959", "packing", "packing-balanced", "dynamic", "dynamic-solver", "dynamic-pr2959"} <= set(exp.policies)
    assert exp.baseline == "packing-pr2959" and exp.headline == "dynamic-pr2959"
    for ds, cfg in exp.datasets.items():
        assert cfg.workload.gbs == 2048
        assert cfg.parallel.pp == 8 and cfg.parallel.tp == 1
        assert cfg.max_tokens_per_rank * cfg.parallel.cp >= cfg.workload.max_len, ds
        # the launch script's model (8 layers, vocabulary = sequence length) and its planner set-up
        assert cfg.model.name == "llama-13b-8l-v131072"
        assert cfg.sim.planning == "sampler" and cfg.sim.sampler_prefetch == 32
    from dcpsim.model import get_model

    m = get_model("llama-13b-8l-v131072")
    assert (m.n_layers, m.hidden, m.ffn_hidden, m.n_heads, m.vocab) == (8, 5120, 13824, 40, 131072)
    # the stall of the forked sampler only shows over several consecutive batches
    assert exp.modes["quick"].iterations >= 4 and exp.modes["full"].iterations >= 4
    # the mean length of the public-facts workload is never the fitted parameter
    assert exp.calibration_setup["parameter"] not in ("mean", "mu")


def test_calibration_fits_only_baseline(exp):
    for ds, fp in exp.calibration.fitted.items():
        assert fp.target_policy == exp.baseline
        assert fp.target_tflops == exp.published[ds]["packing"]
        # the fitted value replaces exactly one field of the secondary view's table
        base, cal = exp.calibration_base(ds), exp.workload(ds, calibrated=True)
        assert {k for k in base if base[k] != cal[k]} <= {fp.parameter}
        assert base["mean"] == cal["mean"]


def test_primary_workloads_are_real_data_and_never_calibrated(exp):
    assert exp.workload("github", calibrated=False) == {"type": "github_proxy"}
    cc = exp.workload("commoncrawl", calibrated=False)
    assert cc["type"] == "wikipedia_shape" and 517 <= cc["mean"] <= 1100
    for ds in exp.datasets:
        assert exp.workload(ds, calibrated=False) == exp.public_workload(ds)
    band = next(a for a in exp.axes if a.name == "commoncrawl_mean")
    assert band.datasets == ("commoncrawl",)
    assert sorted(v["mean"] for v in band.values) == [517.0, 671.0, 1100.0]  # the band of public means, primary 1050


def _rows(exp, quick):
    return [r for r in quick.table if r["workload"] == "public"]


def test_quick_reproduction_covers_every_dataset_and_policy(exp, quick):
    rows = _rows(exp, quick)
    pols = exp.modes["quick"].policies or exp.policies
    assert {exp.baseline, exp.headline} <= set(pols)
    assert {(r["dataset"], r["policy"]) for r in rows} == {(ds, p) for ds in exp.datasets for p in pols}
    for r in rows:
        assert r["failed"] == 0, r.get("reason")
        assert math.isfinite(r["tflops"]) and r["tflops"] > 0
        parts = sum(r[k] for k in ("compute_s", "cp_comm_s", "bubble_s", "imbalance_s", "grad_sync_s", "planning_stall_s"))
        assert parts == pytest.approx(r["iteration_time_s"], rel=1e-6)
        if r["policy"] == exp.baseline:
            assert r["speedup"] == pytest.approx(1.0)
        # the published figures sit beside the baseline and every compared policy, nowhere else
        assert (r["published_tflops"] is not None) == (r["policy"] == exp.baseline or r["policy"] in exp.compared)


def test_quick_dynamic_cp_beats_packing_on_both_datasets(exp, quick):
    rows = _rows(exp, quick)
    sp = {r["dataset"]: r["speedup"] for r in rows if r["policy"] == exp.headline}
    assert sp["github"] > 1.0
    assert sp["commoncrawl"] > 1.0
    # every dynamic policy trains on more than one CP size, static ones on exactly one
    for r in rows:
        used = [c for c, v in r["cp_token_share"].items() if v > 0]
        assert sum(r["cp_token_share"].values()) == pytest.approx(1.0)
        if r["policy"] in ("packing", "packing-balanced", "packing-pr2959"):
            assert used == [exp.datasets[r["dataset"]].parallel.cp]
        else:
            assert len(used) >= 2, r["policy"]


@pytest.mark.xfail(strict=True, reason=(
    "known gap at the primary configuration (64 GPUs), see experiments/dynamic_cp_blog/README.md: CommonCrawl's "
    "CP-2 baseline fills a pipeline with ~7 microbatches against GitHub's ~17, so it has more bubble to lose and "
    "Dynamic-CP gains more there; the blog reports the opposite order (the joint grid finds it at 128 GPUs)"))
def test_quick_github_gains_more_than_commoncrawl(exp, quick):
    sp = {r["dataset"]: r["speedup"] for r in _rows(exp, quick) if r["policy"] == exp.headline}
    assert sp["github"] > sp["commoncrawl"]


def test_quick_runs_only_the_primary_workloads(quick):
    assert {r["workload"] for r in quick.cells} == {"public"}


@pytest.mark.slow  # duplicate: test_cli_writes_table_and_figures checks a second run's times against `quick`'s
def test_quick_is_deterministic(exp, quick):
    again = reproduce(exp, ReproduceOptions(quick=True, seeds=1))
    first = {(r["dataset"], r["policy"], r["seed"], r["workload"]): r for r in quick.cells}
    for r in again.cells:
        assert r["time_s"] == first[(r["dataset"], r["policy"], r["seed"], r["workload"])]["time_s"]


def test_cli_writes_table_and_figures(tmp_path, capsys, quick):
    """The CLI's quick run writes its tables and figures; its cells (a second reproduction, seed 0) have the
    times of the `quick` fixture's, to the last bit: one seed, one result."""
    import csv

    from dcpsim.cli import main

    out = tmp_path / "out"
    rc = main(["reproduce", "--quick", "--seeds", "1", "--out", str(out), "--no-progress", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert {r["dataset"] for r in res["table"]} == {"github", "commoncrawl"}
    for name in ("summary.csv", "summary.md", "cells.csv", "result.json", "tflops.png", "breakdown.png", "cp_mix.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    first = {(r["dataset"], r["policy"], str(r["seed"]), r["workload"]): r["time_s"] for r in quick.cells}
    with (out / "cells.csv").open() as f:
        again = list(csv.DictReader(f))
    assert again and {r["seed"] for r in again} == {"0"}
    for r in again:
        assert float(r["time_s"]) == first[(r["dataset"], r["policy"], r["seed"], r["workload"])], r


def test_bad_spec_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="spec_dir"):
        load_experiment(tmp_path / "missing")


def test_calibration_may_not_target_dynamic(tmp_path):
    d = tmp_path / "spec"
    shutil.copytree(DEFAULT_SPEC_DIR, d, ignore=shutil.ignore_patterns("results"))
    (d / "calibration.toml").write_text(
        "[fitted.github]\nparameter='alpha'\nvalue=1.5\npublic_value=1.55\ntarget_policy='dynamic'\n"
        "target_tflops=289.32\nfitted_tflops=289.0\nresidual_tflops=-0.32\nseeds=[0]\niterations=1\n"
        "bounds=[1.05,4.0]\nat_bound=false\nconfig_hash='x'\n"
    )
    with pytest.raises(ConfigError, match="target_policy"):
        read_calibration(Path(d / "calibration.toml"))


@pytest.mark.parametrize("gpus", [64, 128])
def test_primary_cp_groups_stay_inside_a_node(exp, gpus):
    # Megatron orders ranks tp-cp-ep-dp-pp (parallel_state.initialize_model_parallel at refs/pull/2959/head), so
    # with TP 1 a stage's DP x CP ranks are consecutive global ranks, and create_hybrid_dp_cp_groups builds
    # aligned slices of them: a group of <= 8 (the launch script's max CP) never leaves an 8-GPU node.
    from dcpsim.run.single import run_simulation

    cfg = exp.config("github", exp.headline, calibrated=False, seed=0, iterations=1,
                     updates={"cluster.gpus": gpus, "sim.planning": "ignore"})
    plan = run_simulation(cfg).plans[0]
    sizes = {g.size for st in plan.steps for g in st.groups}
    assert max(sizes) == 8
    assert not any(plan.layout.spans_network(g.start, g.size) for st in plan.steps for g in st.groups)


def test_joint_grid_runs_the_headline_once_per_point_and_the_baseline_per_cp_and_m(exp):
    from dcpsim.reproduction.runner import consistency_cells

    g = exp.consistency
    assert g["gpus"] and g["max_len"] and g["baseline_cp_m"] and g["host_speed"]
    cells = consistency_cells(exp, seeds=1, iterations=1)
    head = [c for c in cells if c.policy == exp.headline]
    base = [c for c in cells if c.policy == exp.baseline]
    n = len(g["gpus"]) * len(g["max_len"]) * len(exp.datasets)
    assert len(head) == n * len(g["host_speed"]) and len(base) == n * len(g["baseline_cp_m"])
    for c in base:  # the baseline's own CP and bin capacity; the headline keeps the primary layout
        cp, m = c.value.split("|")[2].split("x")
        assert c.config.parallel.cp == int(cp) and c.config.policy.options["bin_tokens_per_rank"] == int(m)
    assert all(c.config.parallel.cp == exp.datasets[c.dataset].parallel.cp for c in head)


def test_table_headers_name_what_is_published(quick):
    """The side-by-side table (terminal and summary.md) had two columns headed "published" (TFLOPS, then speedup
    as "published " with a trailing space): each header now says which published figure it holds."""
    from dcpsim.commands.reproduce import display_rows

    rows = display_rows(quick.table)
    heads = [k.strip() for k in rows[0]]
    assert len(set(heads)) == len(heads), heads
    assert "published TFLOPS" in heads and "published speedup" in heads


def test_quick_help_states_the_shipped_quick_size(exp, capsys):
    """`reproduce --help` said --quick runs 8 seeds; the shipped [modes.quick] runs 3 (x 4 iterations), as the
    quick run's own table title says. The help states the shipped mode's sizes."""
    from dcpsim.cli import main

    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    q = exp.modes["quick"]
    assert f"{q.seeds} seeds x {q.iterations} iterations in the shipped one" in text
