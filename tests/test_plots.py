"""Plots of sweep results: general x/y/hue/col figures, speedup pairing, breakdown, CP mix, standard figures."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dcpsim.errors import ConfigError
from dcpsim.report.plots import (
    PALETTE,
    cp_mix_table,
    label_for,
    plot,
    plot_cost_time,
    resolve_column,
    speedup_table,
    standard_figures,
)


def _rows() -> pd.DataFrame:
    """Rows shaped like a sweep's (summary columns + dotted axis columns), with known TFLOPS."""
    recs = []
    for gpus in (64, 128, 256):
        for wl, base in (("github", 200.0), ("commoncrawl", 150.0)):
            for seed in (0, 1):
                for pol, gain in (("packing", 1.0), ("dynamic", 1.5)):
                    t = base * gain * (1 - 0.01 * np.log2(gpus)) + seed
                    recs.append({
                        "policy": pol, "gpus": gpus, "workload": wl, "tflops_per_gpu": t,
                        "iteration_time_s": 100.0 / t, "frac_compute": 0.7, "frac_cp_exposed": 0.1,
                        "frac_bubble": 0.2, "cp_hist": json.dumps({"1": 6, "2": 2} if pol == "dynamic" else {"2": 8}),
                        "policy.name": pol, "cluster.gpus": gpus, "workload.name": wl, "sim.seed": seed,
                        "status": "ok", "config_hash": f"{pol}{gpus}{wl}{seed}",
                    })
    recs.append({"policy": "dynamic", "gpus": 512, "workload": "github", "status": "infeasible",
                 "reason": "memory", "config_hash": "x"})
    return pd.DataFrame(recs)


def test_resolve_column_aliases_and_errors():
    df = _rows()
    assert resolve_column(df, "gpus") == "gpus"
    assert resolve_column(df.drop(columns=["gpus"]), "gpus") == "cluster.gpus"
    assert resolve_column(df, "seed") == "sim.seed"
    with pytest.raises(ConfigError, match="--x.*nope"):
        resolve_column(df, "nope", "--x")


def test_labels_carry_units():
    assert "TFLOPS" in label_for("tflops_per_gpu")
    assert label_for("iteration_time_s").endswith("(s)")
    assert label_for("sim.foo_bytes").endswith("(bytes)")


def test_speedup_pairs_equal_settings():
    sp = speedup_table(_rows())
    dyn = sp[sp["policy"] == "dynamic"]
    pk = sp[sp["policy"] == "packing"]
    assert np.allclose(pk["speedup"], 1.0)
    # each dynamic row divides by the packing row with the same gpus, workload and seed
    for _, r in dyn.iterrows():
        ref = pk[(pk["gpus"] == r["gpus"]) & (pk["workload"] == r["workload"]) & (pk["sim.seed"] == r["sim.seed"])]
        assert len(ref) == 1
        assert r["speedup"] == pytest.approx(r["tflops_per_gpu"] / ref["tflops_per_gpu"].iloc[0])
    assert len(dyn) == 12  # the infeasible row is not plotted or paired


def test_plot_writes_png_and_pdf(tmp_path):
    fig = plot(_rows(), "gpus", "tflops_per_gpu", hue="policy", col="workload", out=tmp_path / "f")
    assert (tmp_path / "f.png").stat().st_size > 1000 and (tmp_path / "f.pdf").stat().st_size > 1000
    ax = fig.axes[0]
    assert ax.get_xlabel() == "GPUs" and "TFLOPS" in ax.get_ylabel()
    assert ax.get_xscale() == "log"  # powers of two spanning 4x
    # one series per policy, in the colour-blind-safe palette, in sorted order
    assert ax.get_legend() is not None
    assert ax.lines[0].get_color() == PALETTE[0]
    plot(_rows(), "workload", "iteration_time_s", hue="policy", out=tmp_path / "bars.svg")
    assert (tmp_path / "bars.svg").is_file() and not (tmp_path / "bars.png").exists()
    with pytest.raises(ConfigError, match="numeric"):
        plot(_rows(), "gpus", "workload")


def test_plot_from_directory_needs_results(tmp_path):
    with pytest.raises(ConfigError, match="results"):
        plot(tmp_path, "gpus", "tflops_per_gpu")


def test_cp_mix_shares_sum_to_one():
    t = cp_mix_table(_rows())
    assert np.allclose(t.sum(axis=1), 1.0)
    assert t.loc["dynamic", 1] == pytest.approx(0.75)
    assert t.loc["packing", 2] == pytest.approx(1.0)


def test_standard_figures_written_and_skipped(tmp_path):
    res = standard_figures(_rows(), tmp_path, axes=["policy.name", "cluster.gpus", "workload.name", "sim.seed"])
    for name in ("speedup_vs_gpus", "speedup_vs_workload", "time_breakdown", "cp_mix"):
        assert isinstance(res[name], list), res[name]
        assert all((tmp_path / p).is_file() for p in res[name])
    assert res["speedup_vs_network"].startswith("skipped")
    only_dyn = _rows()[lambda d: d["policy"] == "dynamic"].drop(columns=["cp_hist", "frac_compute"])
    res2 = standard_figures(only_dyn, tmp_path / "b")
    assert all(isinstance(v, str) and v.startswith("skipped") for k, v in res2.items() if k != "time_breakdown")


def test_cost_time_plot_highlights_front(tmp_path):
    df = pd.DataFrame({
        "gpu": ["a", "a", "b", "b"], "policy": ["packing", "dynamic"] * 2, "gpus": [64, 64, 128, 128],
        "effective_days": [10.0, 8.0, 5.0, 12.0], "cost": [100.0, 90.0, 150.0, 200.0],
        "pareto": [False, True, True, False], "status": ["ok"] * 4,
    })
    fig = plot_cost_time(df, tmp_path / "c.png", deadline=9.0)
    assert (tmp_path / "c.png").is_file()
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "Pareto front" in labels and "deadline" in labels
