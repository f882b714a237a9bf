"""Fit the planner-time constant of ``dcpsim/policies/pr2959_time.py`` to the measured CPU time of the real code.

Reads ``equivalence.json`` (written by ``pr2959_equivalence.py``: ``cpu_real_s`` = ``time.process_time`` of
the real ``PipelineAwareBalancedHybridCPscheduler`` per batch), re-plans the same batches (seeds 10000..) with
``dynamic-pr2959`` to get each batch's work (:func:`dcpsim.policies.pr2959_time.planner_work`: the bucket
assignment's and the pipeline simulations') and fits ``seconds = a * assign + b * pipeline`` by least squares
through the origin over every file given (layouts with 8 and 16 DP x CP ranks per stage tell the two apart).
Prints the constants, the fit's residuals per file and dataset, and writes ``planner_time.json`` beside the
first input.

    PYTHONPATH=$PWD python experiments/dynamic_cp_blog/equivalence/fit_planner_time.py \
        results/equivalence.json results/equivalence_128gpus.json
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
    ap.add_argument("equivalence", nargs="*", default=[str(HERE / "results" / "equivalence.json"),
                                                       str(HERE / "results" / "equivalence_128gpus.json")])
    args = ap.parse_args()
    exp = load_experiment()
    xs, ys, groups = [], [], []
    for path in args.equivalence:
        eq = json.loads(Path(path).read_text())
        for name, w in eq["workloads"].items():
            upd = {"cluster.gpus": eq["gpus"]} if eq.get("gpus") else None
            cfg = exp.config(name, "dynamic-pr2959", calibrated=False, updates=upd)
            cost = build_cost_model(cfg)
            layout = build_layout(cfg, cost)
            wl = cfg.workload
            dist = get_workload(wl.name, min_len=wl.min_len, max_len=wl.max_len, clip=wl.clip)
            pol = get_policy("dynamic-pr2959", **dict(cfg.policy.options))
            for r in w["rows"]:
                if "cpu_real_s" not in r:
                    continue
                L = sample_global_batch(dist, wl.gbs, np.random.default_rng(10_000 + r["seed"]))
                p = pol.plan(L, layout, cost)
                xs.append(planner_work(p.meta, L.size, layout.pp, layout.ranks_per_stage))
                ys.append(r["cpu_real_s"])
                groups.append(f"{Path(path).stem}:{name}:{layout.ranks_per_stage} ranks")
    x, y = np.asarray(xs, dtype=float), np.asarray(ys)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    pred = x @ coef
    out = {"seconds_per_assign_unit": float(coef[0]), "seconds_per_pipeline_unit": float(coef[1]),
           "batches": int(y.size), "rel_rmse": float(np.sqrt(np.mean((y - pred) ** 2)) / y.mean()),
           "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
           "sources": [Path(p).name for p in args.equivalence], "groups": {}}
    for g in dict.fromkeys(groups):
        m = np.array([gg == g for gg in groups])
        out["groups"][g] = {"batches": int(m.sum()),
                            "cpu_s_quantiles_0_25_50_75_100": np.percentile(y[m], [0, 25, 50, 75, 100]).round(3).tolist(),
                            "cpu_s_mean": float(y[m].mean()), "model_s_mean": float(pred[m].mean())}
    Path(args.equivalence[0]).with_name("planner_time.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
