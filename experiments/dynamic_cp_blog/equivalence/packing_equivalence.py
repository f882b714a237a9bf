"""Equivalence study: ``packing-pr2959`` against ``NaiveSequencePackingScheduler`` of Megatron-LM PR #2959.

The blog's baseline ("packing alone") ran Megatron's ``--sft-sequence-packing`` without hybrid CP, which
packs each global batch with ``NaiveSequencePackingScheduler``
(``megatron/core/pipeline_parallel/data_schedule.py`` at ``refs/pull/2959/head``). This script runs that
class (torch, nvtx and Megatron's parallel state replaced by the stand-ins of ``pr2959_equivalence.py``)
and dcpsim's ``packing-pr2959`` on the same global batches and checks that every microbatch of every
DP×CP rank holds the same samples -- including the pack the code lists twice -- for several static CP
sizes and bin capacities M (the two unpublished settings of the baseline).

Nothing of Megatron is part of dcpsim; the script needs a Megatron-LM checkout or git directory:

    PYTHONPATH=$PWD python experiments/dynamic_cp_blog/equivalence/packing_equivalence.py \
        --megatron /path/to/Megatron-LM [--batches 32] [--out experiments/dynamic_cp_blog/equivalence/results]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = ((1, 131072), (2, 65536), (2, 32768 * 3), (4, 32768), (4, 65536), (8, 16384), (8, 32768))
"""(static CP, M tokens per rank) pairs checked; every one holds the longest sample (M * CP >= 131072)."""


def _helpers():
    spec = importlib.util.spec_from_file_location("pr2959_equivalence", HERE / "pr2959_equivalence.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def real_groups(ds, state: dict, cfg, lengths: np.ndarray) -> list[list[list[int]]]:
    """``sample_id_groups`` of the real naive packer: [microbatch][DP x CP rank] -> sample ids."""
    sched = ds.NaiveSequencePackingScheduler(cfg)
    with contextlib.redirect_stdout(io.StringIO()):
        _, groups = sched.get_groups_and_subsamples([(i, int(L)) for i, L in enumerate(lengths)], cfg)
    return [[list(map(int, r)) for r in mb] for mb in groups]


def dcpsim_groups(plan) -> list[list[list[int]]]:
    out = []
    for st in plan.steps:
        ranks: list[list[int]] = [[] for _ in range(plan.layout.ranks_per_stage)]
        for g in st.groups:
            for r in range(g.start, g.start + g.size):
                ranks[r] = [int(x) for x in g.seq_ids]
        out.append(ranks)
    return out


def run(args) -> dict:
    import types

    from dcpsim.cost.padding import padded_lengths
    from dcpsim.policies import get_policy
    from dcpsim.reproduction.blog import load_experiment
    from dcpsim.run.single import build_cost_model, build_layout
    from dcpsim.workload import get_workload, sample_global_batch

    h = _helpers()
    exp = load_experiment(args.spec)
    out: dict = {"megatron_ref": args.ref, "batches_per_case": args.batches, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = h._checkout(args.megatron, args.ref, Path(tmp))
        if not (Path(args.megatron) / h.NEEDED[0]).is_file():
            out["megatron_commit"] = subprocess.run(["git", f"--git-dir={args.megatron}", "rev-parse", args.ref],
                                                    capture_output=True, text=True).stdout.strip()
        state: dict = {}
        ds = None
        for name in exp.datasets:
            for cp, m_tok in CASES:
                cfg = exp.config(name, "packing-pr2959", calibrated=False, updates={"parallel.cp": cp})
                cost = build_cost_model(cfg)
                layout = build_layout(cfg, cost)
                state.update(dp=layout.dp, cp=cp, pp=layout.pp, tp=layout.tp)
                if ds is None:
                    ds, _, _ = h.load_real(root, state)
                    ps = importlib.import_module("megatron.core.parallel_state")
                    ps.get_data_parallel_world_size = lambda with_context_parallel=False: (
                        state["dp"] * state["cp"] if with_context_parallel else state["dp"])
                    ps.get_context_parallel_world_size = lambda: state["cp"]
                w = cfg.workload
                dist = get_workload(w.name, min_len=w.min_len, max_len=w.max_len, clip=w.clip)
                pol = get_policy("packing-pr2959", bin_tokens_per_rank=m_tok)
                rcfg = types.SimpleNamespace(max_seqlen_per_dp_cp_rank=m_tok)
                same = dup_same = 0
                mbs = []
                for s in range(args.batches):
                    L = sample_global_batch(dist, w.gbs, np.random.default_rng(20_000 + s))
                    # the code sees the SFT dataset's padded sample sizes (multiple of 2*cp when cp > 1)
                    Lp = padded_lengths(L, cp) if cp > 1 else L
                    real = real_groups(ds, state, rcfg, Lp)
                    plan = pol.plan(L, layout, cost)
                    ours = dcpsim_groups(plan)
                    same += real == ours
                    seen: dict[int, int] = {}
                    for mb in real:
                        for j in range(0, len(mb), cp):
                            for sid in mb[j]:
                                seen[sid] = seen.get(sid, 0) + 1
                    rep_real = {k: v - 1 for k, v in seen.items() if v > 1}
                    dup_same += rep_real == plan.repeats
                    mbs.append(len(real))
                out["cases"].append({"dataset": name, "cp": cp, "M": m_tok, "dp": layout.dp, "batches": args.batches,
                                     "identical_plans": same, "identical_repeats": dup_same,
                                     "microbatches_mean": float(np.mean(mbs))})
                print(out["cases"][-1], flush=True)
    return out


def markdown(res: dict) -> str:
    lines = [f"# packing-pr2959 vs NaiveSequencePackingScheduler ({res['megatron_ref']} {res.get('megatron_commit', '')[:10]})",
             "", "Every microbatch of every DP x CP rank compared (sample ids, the repeated pack included).", "",
             "| dataset | static CP | M (tokens/rank) | DP | batches | identical plans | identical repeated samples | microbatches (mean) |",
             "|---|---|---|---|---|---|---|---|"]
    for c in res["cases"]:
        lines.append(f"| {c['dataset']} | {c['cp']} | {c['M']} | {c['dp']} | {c['batches']} | {c['identical_plans']}/{c['batches']} | "
                     f"{c['identical_repeats']}/{c['batches']} | {c['microbatches_mean']:.1f} |")
    lines += ["", "Command (repository root, with a Megatron-LM mirror or checkout):", "",
              "    PYTHONPATH=$PWD python experiments/dynamic_cp_blog/equivalence/packing_equivalence.py --megatron <git dir>",
              "", "Batches: the primary workloads, seeds 20000.., 2,048 samples; the code is given the SFT dataset's padded",
              "sizes (multiple of 2*CP for CP > 1), dcpsim the real lengths (it pads the same way)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True)
    ap.add_argument("--ref", default="refs/pull/2959/head")
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--spec", default=None)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "packing_equivalence.json").write_text(json.dumps(res, indent=1))
    (out / "packing_equivalence.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
