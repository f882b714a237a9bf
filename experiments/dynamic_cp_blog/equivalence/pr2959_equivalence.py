"""Equivalence study: ``dynamic-pr2959`` against the scheduler code of Megatron-LM pull request #2959.

Runs, on the same global batches, (a) the real ``PipelineAwareBalancedHybridCPscheduler``
of ``refs/pull/2959/head`` (plain Python over lengths; torch, nvtx and Megatron's
parallel state are replaced by small stand-ins, its own pipeline simulator is used
as is) and (b) dcpsim's ``dynamic-pr2959``, and counts how often the plans agree:
the microbatch count, the CP size of every sample, the bucket of every sample
(microbatch index and set of DP×CP ranks), and the chosen ``m``.

Nothing of Megatron is part of dcpsim: this script needs a Megatron-LM checkout
(or git directory) given on the command line and is not run by the test suite.

    python experiments/dynamic_cp_blog/equivalence/pr2959_equivalence.py \
        --megatron /path/to/Megatron-LM [--ref refs/pull/2959/head] [--batches 64] \
        [--out experiments/dynamic_cp_blog/equivalence/results]

``--megatron`` is a working tree at the PR's head, or a git directory holding the
ref (the two needed folders are then extracted into a temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import math
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

import numpy as np

NEEDED = ("megatron/core/pipeline_parallel/data_schedule.py", "megatron/pipeline_simulator")


# ------------------------------------------------------------------ loading the real scheduler
def _checkout(path: str, ref: str, tmp: Path) -> Path:
    p = Path(path)
    if (p / NEEDED[0]).is_file():
        return p
    raw = subprocess.run(["git", f"--git-dir={p}", "archive", ref, *NEEDED], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        tf.extractall(tmp, filter="data")
    return tmp


def _stub_modules(root: Path, state: dict) -> None:
    """Stand-ins for what data_schedule.py imports but the scheduler does not need."""
    torch = types.ModuleType("torch")
    dist = types.ModuleType("torch.distributed")
    dist.get_rank = lambda *a, **k: 0
    dist.is_available = lambda: False
    dist.is_initialized = lambda: False
    torch.distributed = dist
    torch.multiprocessing = types.ModuleType("torch.multiprocessing")
    torch.tensor = lambda x, *a, **k: np.array(x)
    torch.Tensor = np.ndarray
    nvtx = types.ModuleType("nvtx")
    nvtx.push_range = nvtx.pop_range = lambda *a, **k: None

    ps = types.ModuleType("megatron.core.parallel_state")
    ps.get_data_parallel_world_size = lambda with_context_parallel=False: state["dp"]
    ps.get_pipeline_model_parallel_world_size = lambda: state["pp"]
    ps.get_context_parallel_world_size = lambda: 1
    ps.get_tensor_model_parallel_world_size = lambda: state["tp"]
    ps.get_virtual_pipeline_model_parallel_world_size = lambda: None

    def pkg(name: str, path: Path | None = None) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__path__ = [str(path)] if path else []
        sys.modules[name] = m
        return m

    sys.modules.update({"torch": torch, "torch.distributed": dist, "torch.multiprocessing": torch.multiprocessing,
                        "nvtx": nvtx})
    pkg("megatron")
    core = pkg("megatron.core")
    core.parallel_state = ps
    sys.modules["megatron.core.parallel_state"] = ps
    pkg("megatron.core.datasets")
    md = types.ModuleType("megatron.core.datasets.megatron_dataset")
    md.MegatronDataset = object
    sys.modules[md.__name__] = md
    pg = types.ModuleType("megatron.core.process_groups_config")
    pg.ProcessGroupCollection = object
    sys.modules[pg.__name__] = pg
    rr = types.ModuleType("megatron.core.rerun_state_machine")
    rr.RerunDataIterator = object
    sys.modules[rr.__name__] = rr
    pkg("megatron.core.pipeline_parallel", root / "megatron/core/pipeline_parallel")
    pkg("megatron.pipeline_simulator", root / "megatron/pipeline_simulator")
    pkg("megatron.pipeline_simulator.simulator", root / "megatron/pipeline_simulator/simulator")


def load_real(root: Path, state: dict):
    _stub_modules(root, state)
    ds = importlib.import_module("megatron.core.pipeline_parallel.data_schedule")
    sim = importlib.import_module("megatron.pipeline_simulator.simulator.solver")
    sch = importlib.import_module("megatron.pipeline_simulator.simulator.schedules")
    return ds, sim, sch


def real_config(cfg, cost, layout):
    m = cost.model
    max_cp = cfg.policy.options.get("max_cp") or layout.max_dynamic_cp
    return types.SimpleNamespace(
        hidden_size=m.hidden, num_query_groups=m.n_kv_heads, ffn_hidden_size=m.ffn_hidden, gated_linear_unit=m.gated_mlp,
        recompute_granularity="full" if cost.recompute == "full" else None, num_layers=m.n_layers,
        num_attention_heads=m.n_heads, vocab_size=m.vocab, max_seqlen_per_dp_cp_rank=layout.max_tokens_per_rank,
        min_hybrid_context_parallel_size=layout.min_cp, max_hybrid_context_parallel_size=max_cp,
        search_space=6, run_memory_simulator=False, context_parallel_size=1, hybrid_context_parallel=True,
    )


# ------------------------------------------------------------------ plans in one form
def real_plan(ds, config, lengths) -> dict:
    sched = ds.PipelineAwareBalancedHybridCPscheduler(config)
    with contextlib.redirect_stdout(io.StringIO()):
        _, ids, cps = sched.get_groups_and_subsamples([(i, int(L)) for i, L in enumerate(lengths)], config,
                                                       return_cp_sizes=True)
    where: dict[int, set] = {}
    cp: dict[int, set] = {}
    for mb, ranks in enumerate(ids):
        for r, sids in enumerate(ranks):
            for j, sid in enumerate(sids):
                where.setdefault(sid, set()).add((mb, r))
                cp.setdefault(sid, set()).add(int(cps[mb][r][j]))
    return {"microbatches": len(ids), "where": where, "cp": cp}


def dcpsim_plan(plan) -> dict:
    where: dict[int, set] = {}
    cp: dict[int, set] = {}
    for k, st in enumerate(plan.steps):
        for g in st.groups:
            for sid in g.seq_ids:
                where.setdefault(int(sid), set()).update((k, r) for r in range(g.start, g.start + g.size))
                cp.setdefault(int(sid), set()).add(int(g.size))
    return {"microbatches": len(plan.steps), "where": where, "cp": cp}


def compare(a: dict, b: dict, n: int) -> dict:
    same_cp = sum(a["cp"].get(i) == b["cp"].get(i) for i in range(n))
    same_bucket = sum(a["where"].get(i) == b["where"].get(i) for i in range(n))
    return {"same_microbatches": a["microbatches"] == b["microbatches"], "same_cp": same_cp,
            "same_bucket": same_bucket, "samples": n}


# ------------------------------------------------------------------ pipeline simulators
def check_pipeline(sim, sch, pp: int, trials: int, rng) -> dict:
    """The PR's pipeline simulator (SplitFuseSchedule) vs dcpsim's re-implementation of it, and vs plain 1F1B."""
    from dcpsim.policies.pr2959 import one_f_one_b_makespan, pr_pipeline_makespan

    worst = worst_1f1b = 0.0
    for _ in range(trials):
        n = int(rng.integers(pp, 6 * pp + 1))
        f = rng.lognormal(0, 1, n)
        b = f * rng.uniform(1.5, 3.5, n)
        real = sim.test_with_schedule(sch.SplitFuseSchedule(pp, [[x] for x in f], [[x] for x in b]))
        ours = float(pr_pipeline_makespan(f[:, None], b[:, None], pp)[0])
        plain = float(one_f_one_b_makespan(f[:, None], b[:, None], pp)[0])
        worst = max(worst, abs(real - ours) / real)
        worst_1f1b = max(worst_1f1b, abs(real - plain) / real)
    return {"trials": trials, "pp": pp, "max_rel_diff": worst, "max_rel_diff_plain_1f1b": worst_1f1b}


# ------------------------------------------------------------------ main
def run(args) -> dict:
    from dcpsim.policies import get_policy
    from dcpsim.reproduction.blog import load_experiment
    from dcpsim.run.single import build_cost_model, build_layout
    from dcpsim.workload import get_workload, sample_global_batch

    exp = load_experiment(args.spec)
    out: dict = {"megatron_ref": args.ref, "batches_per_workload": args.batches, "gpus": args.gpus, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = _checkout(args.megatron, args.ref, Path(tmp))
        head = subprocess.run(["git", f"--git-dir={args.megatron}", "rev-parse", args.ref], capture_output=True,
                              text=True).stdout.strip() if not (Path(args.megatron) / NEEDED[0]).is_file() else ""
        out["megatron_commit"] = head
        state: dict = {}
        ds = sim = sch = None
        for name in exp.datasets:
            upd = {"cluster.gpus": args.gpus} if args.gpus else None
            cfg = exp.config(name, "dynamic-pr2959", calibrated=False, updates=upd)
            cost, = (build_cost_model(cfg),)
            layout = build_layout(cfg, cost)
            state.update(dp=layout.ranks_per_stage, pp=layout.pp, tp=layout.tp)
            if ds is None:
                ds, sim, sch = load_real(root, state)
                out["pipeline_check"] = check_pipeline(sim, sch, layout.pp, 200, np.random.default_rng(0))
            config = real_config(cfg, cost, layout)
            w = cfg.workload
            dist = get_workload(w.name, min_len=w.min_len, max_len=w.max_len, clip=w.clip)
            opts = dict(cfg.policy.options)
            pol = get_policy("dynamic-pr2959", **opts)
            rows = []
            for s in range(args.batches):
                L = sample_global_batch(dist, w.gbs, np.random.default_rng(10_000 + s))
                t0 = time.perf_counter()
                c0 = time.process_time()
                try:
                    r = real_plan(ds, config, L)
                except Exception as exc:  # the real code asserts on some batches: record it
                    rows.append({"seed": s, "real_error": f"{type(exc).__name__}: {exc}"[:200]})
                    continue
                t_real = time.perf_counter() - t0
                cpu_real = time.process_time() - c0
                p = pol.plan(L, layout, cost)
                d = dcpsim_plan(p)
                cands = p.meta["candidates"]
                row = {"seed": s, "t_real_s": t_real, "cpu_real_s": cpu_real,
                       "features": {"candidates": len(cands), "long_sum": sum(c["long_sequences"] for c in cands),
                                    "leftovers_sum": sum(c["leftovers"] for c in cands),
                                    "m_sum": sum(c["m"] for c in cands)},
                       "real_m": r["microbatches"] / layout.pp, "dcpsim_m": p.meta["m"],
                       **compare(r, d, L.size), "dcpsim_meta": {k: p.meta[k] for k in (
                           "misaligned", "overflow_blocks", "clamped_sizes", "safe_mode", "leftovers")},
                       "rejected": [(c["m"], c["reason"]) for c in p.meta["candidates"] if not c["valid"]]}
                mr = r["microbatches"] // layout.pp
                if mr != p.meta["m"] and mr in pol.m_values:  # the same m forced: construction vs choice of m
                    pf = get_policy("dynamic-pr2959", **{**opts, "m_values": [mr]}).plan(L, layout, cost)
                    row["forced_m"] = compare(r, dcpsim_plan(pf), L.size)
                    row["forced_m_valid"] = pf.meta["candidates"][0]["valid"] if pf.meta["candidates"] else False
                rows.append(row)
                print(f"{name} batch {s}: real m={row['real_m']:.0f} dcpsim m={row['dcpsim_m']} "
                      f"cp {row['same_cp']}/{row['samples']} bucket {row['same_bucket']}/{row['samples']} "
                      f"({t_real:.1f}s)", flush=True)
            out["workloads"][name] = {"workload": w.name if isinstance(w.name, str) else dict(w.name),
                                      "layout": layout.to_dict(), "rows": rows, "summary": summarise(rows)}
    return out


def summarise(rows: list[dict]) -> dict:
    ok = [r for r in rows if "real_error" not in r]
    n = sum(r["samples"] for r in ok)
    s = {
        "batches": len(rows),
        "real_errors": len(rows) - len(ok),
        "same_microbatches": sum(r["same_microbatches"] for r in ok),
        "same_m": sum(r["real_m"] == r["dcpsim_m"] for r in ok),
        "cp_match_rate": sum(r["same_cp"] for r in ok) / n if n else math.nan,
        "bucket_match_rate": sum(r["same_bucket"] for r in ok) / n if n else math.nan,
        "batches_all_cp_equal": sum(r["same_cp"] == r["samples"] for r in ok),
        "batches_all_buckets_equal": sum(r["same_bucket"] == r["samples"] for r in ok),
    }
    same = [r for r in ok if r["real_m"] == r["dcpsim_m"]]
    ns = sum(r["samples"] for r in same)
    s["cp_match_rate_same_m"] = sum(r["same_cp"] for r in same) / ns if ns else math.nan
    s["bucket_match_rate_same_m"] = sum(r["same_bucket"] for r in same) / ns if ns else math.nan
    forced = [r["forced_m"] for r in ok if "forced_m" in r]
    nf = sum(f["samples"] for f in forced)
    s["differing_m_batches"] = len(ok) - len(same)
    s["cp_match_rate_forced_m"] = sum(f["same_cp"] for f in forced) / nf if nf else math.nan
    return s


def markdown(res: dict) -> str:
    lines = [f"# dynamic-pr2959 vs Megatron-LM PR #2959 ({res['megatron_ref']} {res.get('megatron_commit', '')[:10]})", "",
             f"Pipeline simulators on {res['pipeline_check']['trials']} random cases (PP {res['pipeline_check']['pp']}): "
             f"the PR's SplitFuseSchedule vs dcpsim's pr_pipeline_makespan, largest relative difference "
             f"{res['pipeline_check']['max_rel_diff']:.2e} (vs plain 1F1B: {res['pipeline_check']['max_rel_diff_plain_1f1b']:.2e}).", "",
             "| workload | batches | real errors | same m | same microbatch count | CP size match (samples) | bucket match (samples) | CP match where m agrees | CP match, m forced to the real one |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, w in res["workloads"].items():
        s = w["summary"]
        ok = s["batches"] - s["real_errors"]
        lines.append(f"| {name} | {s['batches']} | {s['real_errors']} | {s['same_m']}/{ok} | {s['same_microbatches']}/{ok} | "
                     f"{s['cp_match_rate']:.1%} | {s['bucket_match_rate']:.1%} | {s['cp_match_rate_same_m']:.1%} | "
                     f"{s['cp_match_rate_forced_m']:.1%} ({s['differing_m_batches']} batches) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True, help="Megatron-LM working tree at the PR head, or a git directory")
    ap.add_argument("--ref", default="refs/pull/2959/head")
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--spec", default=None, help="experiment folder (default: experiments/dynamic_cp_blog)")
    ap.add_argument("--gpus", type=int, default=None, help="GPU count (default: the primary configuration's)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "equivalence" if not args.gpus else f"equivalence_{args.gpus}gpus"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str))
    (out / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
