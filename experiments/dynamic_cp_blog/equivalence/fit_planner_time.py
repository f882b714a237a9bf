"""Fit the planner-time constant of ``dcpsim/policies/pr2959_time.py`` to the measured CPU time of the real code.

Reads ``equivalence.json`` (written by ``pr2959_equivalence.py``: ``cpu_real_s`` = ``time.process_time`` of
the real ``PipelineAwareBalancedHybridCPscheduler`` per batch), re-plans the same batches (seeds 10000..) with
``dynamic-pr2959`` to get each batch's work (:func:`dcpsim.policies.pr2959_time.planner_work`) and fits
``seconds = k * work`` by least squares through the origin. Prints the constant, the fit's residuals and the
per-dataset distribution, and writes ``planner_time.json`` beside the input.

    PYTHONPATH=$PWD python experiments/dynamic_cp_blog/equivalence/fit_planner_time.py \
        [--equivalence experiments/dynamic_cp_blog/equivalence/results/equivalence.json]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    from dcpsim.policies import get_policy
    from dcpsim.policies.pr2959_time import planner_work
    from dcpsim.reproduction.blog import load_experiment
    from dcpsim.run.single import build_cost_model, build_layout
    from dcpsim.workload import get_workload, sample_global_batch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--equivalence", default=str(HERE / "results" / "equivalence.json"))
    args = ap.parse_args()
    src = Path(args.equivalence)
    eq = json.loads(src.read_text())
    exp = load_experiment()
    xs, ys, per = [], [], {}
    for name, w in eq["workloads"].items():
        cfg = exp.config(name, "dynamic-pr2959", calibrated=False)
        cost = build_cost_model(cfg)
        layout = build_layout(cfg, cost)
        wl = cfg.workload
        dist = get_workload(wl.name, min_len=wl.min_len, max_len=wl.max_len, clip=wl.clip)
        pol = get_policy("dynamic-pr2959", **dict(cfg.policy.options))
        t, x = [], []
        for r in w["rows"]:
            if "cpu_real_s" not in r:
                continue
            L = sample_global_batch(dist, wl.gbs, np.random.default_rng(10_000 + r["seed"]))
            p = pol.plan(L, layout, cost)
            x.append(planner_work(p.meta, L.size, layout.pp, layout.ranks_per_stage))
            t.append(r["cpu_real_s"])
        xs += x
        ys += t
        per[name] = {"batches": len(t), "cpu_s_quantiles_0_25_50_75_100": np.percentile(t, [0, 25, 50, 75, 100]).round(3).tolist(),
                     "cpu_s_mean": float(np.mean(t)), "work_mean": float(np.mean(x)), "_t": t, "_x": x}
    x, y = np.asarray(xs), np.asarray(ys)
    k = float(x @ y / (x @ x))
    resid = y - k * x
    out = {"seconds_per_unit": k, "batches": int(y.size), "rel_rmse": float(np.sqrt(np.mean(resid**2)) / y.mean()),
           "corr_work_time": float(np.corrcoef(x, y)[0, 1]) if y.size > 2 else float("nan"),
           "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
           "megatron_ref": eq.get("megatron_ref"), "megatron_commit": eq.get("megatron_commit"),
           "source": str(src.name), "datasets": {}}
    for name, d in per.items():
        pred = k * np.asarray(d["_x"])
        out["datasets"][name] = {kk: v for kk, v in d.items() if not kk.startswith("_")}
        out["datasets"][name]["model_s_mean"] = float(pred.mean())
    (src.parent / "planner_time.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
