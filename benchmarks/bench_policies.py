"""Benchmarks of the scheduling policies, and the MILP optimality-gap study.

Planning speed (pytest-benchmark; off by default)::

    .venv/bin/python -m pytest -m benchmark --benchmark-enable benchmarks/bench_policies.py

Targets (issue 3): ``dynamic`` plans a 2048-sequence GitHub batch on a
512-rank stage in < 100 ms, ``dynamic-solver`` in < 2 s (median).

Optimality gaps of the heuristics against ``milp`` on small random cases::

    .venv/bin/python benchmarks/bench_policies.py gaps [--cases 20] [--seed 0] [--time-limit 60]

prints, for each heuristic, the mean and max of ``heuristic / optimum - 1``,
both under the additive model the MILP optimises (where the optimum is
exact) and under the exact cost model. Dynamic heuristics are compared with
the dynamic optimum, static ones with the static optimum, each over plans
with at most as many steps as the heuristics used.

Policy quality on full batches (modelled makespan / lower bound)::

    .venv/bin/python benchmarks/bench_policies.py quality [--seeds 3]

The policies' own planning time (``Plan.meta["planning_wall_s"]``, host wall time; the pytest
benchmarks above also time the bound and the validation)::

    .venv/bin/python benchmarks/bench_policies.py speed
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pytest
from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)

from dcpsim.cost import CostModel
from dcpsim.policies import Layout, SeqCosts, evaluate_plan, get_policy
from dcpsim.policies.base import dynamic_sizes
from dcpsim.workload import get_workload, sample_global_batch

HEURISTICS = ["packing", "packing-balanced", "dynamic", "dynamic-solver"]
STATIC = {"packing", "packing-balanced"}


def github_batch(seed: int = 0, gbs: int = 2048) -> np.ndarray:
    dist = get_workload("github", min_len=256, max_len=131072)
    return sample_global_batch(dist, gbs, np.random.default_rng(seed))


def setup_512(pp: int) -> tuple[np.ndarray, Layout, CostModel]:
    layout = Layout(dp=64, cp=8, max_tokens_per_rank=65536, pp=pp)
    cost = CostModel.build("h100-sxm", "llama-13b", pp=pp, dp_cp=512)
    return github_batch(), layout, cost


@pytest.mark.benchmark
@pytest.mark.parametrize("pp", [1, 8])
def test_dynamic_2048_seqs_512_ranks(benchmark, pp):
    lengths, layout, cost = setup_512(pp)
    pol = get_policy("dynamic")
    plan = benchmark(pol.plan, lengths, layout, cost)
    assert plan.n_steps >= 1
    assert benchmark.stats.stats.median < 0.1


@pytest.mark.benchmark
@pytest.mark.parametrize("pp", [1, 8])
def test_dynamic_solver_2048_seqs_512_ranks(benchmark, pp):
    lengths, layout, cost = setup_512(pp)
    pol = get_policy("dynamic-solver")
    plan = benchmark.pedantic(pol.plan, args=(lengths, layout, cost), rounds=7, iterations=1)
    assert plan.n_steps >= 1
    assert benchmark.stats.stats.median < 2.0


# --------------------------------------------------------------- gap study
def small_case(rng: np.random.Generator):
    dp, cp = [(2, 1), (4, 1), (2, 2), (8, 1), (1, 4), (4, 2)][int(rng.integers(6))]
    pp = int(rng.choice([1, 2]))
    M = 8192
    n = int(rng.integers(6, 11))
    lengths = np.clip(rng.lognormal(np.log(2500), 1.1, n), 64, cp * M - 2 * cp).astype(np.int64)
    layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp)
    cost = CostModel.build("h100-sxm", "llama-13b", pp=pp, dp_cp=dp * cp)
    return lengths, layout, cost


def gap_study(n_cases: int = 20, seed: int = 0, time_limit_s: float = 60.0) -> dict:
    rng = np.random.default_rng(seed)
    rows = []
    for case in range(n_cases):
        lengths, layout, cost = small_case(rng)
        plans = {n: get_policy(n).plan(lengths, layout, cost) for n in HEURISTICS}
        K = max(p.n_steps for p in plans.values())
        sizes = np.unique(np.r_[dynamic_sizes(layout), [layout.cp]])
        sc = SeqCosts(lengths, layout, cost, sizes)
        opt = {}
        for mode in ("dynamic", "static"):
            t0 = time.perf_counter()
            p = get_policy("milp", mode=mode, max_steps=K, time_limit_s=time_limit_s).plan(lengths, layout, cost)
            opt[mode] = (p, time.perf_counter() - t0)
        for name, p in plans.items():
            mode = "static" if name in STATIC else "dynamic"
            o, solve_s = opt[mode]
            rows.append({
                "case": case, "n": int(lengths.size), "dp": layout.dp, "cp": layout.cp, "pp": layout.pp, "steps": K,
                "policy": name, "milp_mode": mode, "milp_status": o.meta["status"], "milp_s": solve_s,
                "gap_additive": sc.plan_makespan_s(p) / o.meta["objective_s"] - 1,
                "gap_exact": evaluate_plan(p, cost).makespan_s / evaluate_plan(o, cost).makespan_s - 1,
                "over_bound_exact": evaluate_plan(p, cost).makespan_s / p.lower_bound_s,
            })
    summary = {}
    for name in HEURISTICS:
        r = [x for x in rows if x["policy"] == name and x["milp_status"] == "optimal"]
        ga = np.array([x["gap_additive"] for x in r])
        ge = np.array([x["gap_exact"] for x in r])
        summary[name] = {
            "cases_optimal": len(r),
            "gap_additive_mean": float(ga.mean()) if r else None,
            "gap_additive_max": float(ga.max()) if r else None,
            "gap_exact_mean": float(ge.mean()) if r else None,
            "gap_exact_max": float(ge.max()) if r else None,
            "gap_exact_min": float(ge.min()) if r else None,
        }
    return {"cases": n_cases, "seed": seed, "summary": summary, "rows": rows}


def quality(seeds: int = 3) -> list[dict]:
    out = []
    for seed in range(seeds):
        lengths = github_batch(seed)
        for dp, cp, pp in ((64, 8, 1), (1, 8, 8), (8, 8, 1), (8, 2, 4), (64, 8, 8)):
            layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=65536, pp=pp)
            cost = CostModel.build("h100-sxm", "llama-13b", pp=pp, dp_cp=dp * cp)
            row = {"seed": seed, "dp": dp, "cp": cp, "pp": pp}
            for name in HEURISTICS:
                try:
                    p = get_policy(name).plan(lengths, layout, cost)
                except Exception as exc:  # noqa: BLE001 - a row records why a policy cannot run
                    row[name] = f"{type(exc).__name__}"
                    continue
                row[name] = round(evaluate_plan(p, cost).makespan_s / p.lower_bound_s, 4)
                row[name + "_plan_s"] = round(p.meta["planning_wall_s"], 4)
            out.append(row)
    return out


def speed(runs: int = 15) -> list[dict]:
    """``Plan.meta["planning_wall_s"]`` (the policy's own time, without bound and validation) over ``runs`` plans."""
    out = []
    for pp in (1, 8):
        lengths, layout, cost = setup_512(pp)
        for name in ("dynamic", "dynamic-solver"):
            pol = get_policy(name)
            t = np.array([pol.plan(lengths, layout, cost).meta["planning_wall_s"] for _ in range(runs)])
            q1, med, q3 = np.percentile(t, [25, 50, 75])
            out.append({"policy": name, "ranks": layout.ranks_per_stage, "pp": pp, "runs": runs, "median_ms": med * 1e3,
                        "iqr_ms": (q3 - q1) * 1e3, "min_ms": t.min() * 1e3, "max_ms": t.max() * 1e3})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["gaps", "quality", "speed"])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=None, help="also write the full result as JSON")
    args = ap.parse_args()
    check_result_path(args.out, "--out")
    if args.what == "gaps":
        res = gap_study(args.cases, args.seed, args.time_limit)
    else:
        res = quality(args.seeds) if args.what == "quality" else speed()
    save_result(args.out, res, indent=1)
    print(json.dumps(res["summary"] if args.what == "gaps" else res, indent=1))


if __name__ == "__main__":
    main()
