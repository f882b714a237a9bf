"""run_simulation's summary without pandas (issue 24): the same figures, of the same types, as from DataFrames;
the result's tables built on first use, and a result still pickles."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest

from dcpsim.run.config import RunConfig
from dcpsim.run.single import run_simulation
from dcpsim.sim import BREAKDOWN
from dcpsim.sim.metrics import IterationColumns


def _pandas_summary_parts(it: pd.DataFrame) -> dict:
    """The reductions the summary made with pandas before (the reference)."""
    out = {"T": float(it["iteration_time_s"].sum()), "flops": float(it["flops"].sum()),
           "tokens": float(it["tokens"].sum()), "simulated": bool(it["simulated"].all())}
    for k in BREAKDOWN:
        out[k] = float(it[k].sum(skipna=False))
    for k in ("steps", "groups", "mean_cp"):
        if k in it:
            out["mean_" + k] = float(it[k].mean())
    for k, agg in (("max_cp", "max"), ("peak_memory_gib", "max"), ("packs_over_memory", "sum"), ("dropped", "sum"),
                   ("sequences", "sum"), ("planning_time_s", "mean"), ("sim_wall_s", "sum"), ("events", "sum")):
        if k in it:
            v = getattr(it[k], agg)()
            out[agg + "_" + k] = v.item() if hasattr(v, "item") else v
    return out


def _columns_summary_parts(it: IterationColumns) -> dict:
    out = {"T": float(it.sum("iteration_time_s")), "flops": float(it.sum("flops")),
           "tokens": float(it.sum("tokens")), "simulated": bool(it.col("simulated").all())}
    for k in BREAKDOWN:
        out[k] = float(it.sum(k, skipna=False))
    for k in ("steps", "groups", "mean_cp"):
        if k in it:
            out["mean_" + k] = float(it.mean(k))
    for k, agg in (("max_cp", "max"), ("peak_memory_gib", "max"), ("packs_over_memory", "sum"), ("dropped", "sum"),
                   ("sequences", "sum"), ("planning_time_s", "mean"), ("sim_wall_s", "sum"), ("events", "sum")):
        if k in it:
            v = getattr(it, agg)(k)
            out[agg + "_" + k] = v.item() if hasattr(v, "item") else v
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        assert type(x) is type(y), (k, type(x), type(y))
        assert (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == y, (k, x, y)


@pytest.mark.parametrize("updates", [
    {"policy.name": "dynamic", "sim.iterations": 3},
    {"policy.name": "packing", "sim.iterations": 1},
    {"policy.name": "bound", "sim.iterations": 2},
])
def test_columns_reduce_as_pandas(updates):
    """On real iteration rows (several iterations; the bound policy's NaN rows) and on made-up rows with
    missing keys, None, ints and NaN: the same values and types as pandas."""
    cfg = RunConfig().with_updates({"model.name": "llama2-7b", "cluster.gpus": 64, "workload.gbs": 64,
                                    "parallel.pp": 4, "parallel.cp": 2, **updates})
    res = run_simulation(cfg)
    rows = res.iterations.to_dict("records")
    _same(_pandas_summary_parts(pd.DataFrame(rows)), _columns_summary_parts(IterationColumns(rows)))
    made = [dict(r) for r in rows] * 3
    made[0]["steps"], made[1]["max_cp"], made[-1]["planning_time_s"] = 5, float("nan"), None
    made[1].pop("dropped", None)
    for r in made:
        r["events"] = int(r.get("events", 0))
    _same(_pandas_summary_parts(pd.DataFrame(made)), _columns_summary_parts(IterationColumns(made)))


def test_tables_built_on_first_use_and_pickled():
    cfg = RunConfig().with_updates({"model.name": "llama2-7b", "cluster.gpus": 64, "workload.gbs": 64,
                                    "parallel.pp": 4, "parallel.cp": 2, "sim.iterations": 2})
    res = run_simulation(cfg)
    assert callable(res.__dict__["_iterations"])  # not built yet
    back = pickle.loads(pickle.dumps(res))
    for r in (res, back):
        assert isinstance(r.iterations, pd.DataFrame) and len(r.iterations) == 2
        assert isinstance(r.ranks, pd.DataFrame) and set(r.ranks["iteration"]) == {0, 1}
    assert res.summary["iteration_time_s"] == pytest.approx(float(np.mean(res.iterations["iteration_time_s"])))
    pd.testing.assert_frame_equal(res.ranks, back.ranks)
