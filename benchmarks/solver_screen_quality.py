"""Quality of ``dynamic-solver``'s screen: simulated iteration time of the screened plan vs the exhaustive one.

Run (each case is one process: exhaustive search, then the screen at each sample size)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/solver_screen_quality.py [--gpus 16384,65536]
        [--workloads github,commoncrawl] [--seeds 0,1,2] [--samples 8192,16384]

Same setup as ``benchmarks/scale_fast.py`` (Llama-13B, tp 1 pp 8 cp 8, H100, 4 sequences per GPU, one
iteration, ``sim.planning = "ignore"``, fast engine). Loss = screened / exhaustive - 1 of the simulated
iteration time (and of the modelled makespan the search ranks by). Slow: the exhaustive search at
65,536 GPUs takes 10-25 s per case.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from _results import check_result_path, save_result  # noqa: E402  (benchmarks/_results.py)


def one(gpus: int, workload: str, seed: int, samples: list[int]) -> dict:
    import time

    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    row: dict = {"gpus": gpus, "workload": workload, "seed": seed}
    for opts in [{"screen": False}] + [{"screen_sample": s} for s in samples]:
        cfg = RunConfig().with_updates({
            "cluster.gpus": gpus, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1,
            "policy.name": "dynamic-solver", "policy.options": opts, "workload.name": workload,
            "workload.gbs": 4 * gpus, "sim.iterations": 1, "sim.seed": seed, "sim.planning": "ignore",
            "sim.engine": "fast"})
        c0 = time.process_time()
        res = run_simulation(cfg)
        meta = res.plans[0].meta
        key = "exhaustive" if "screen" in opts else f"sample_{opts['screen_sample']}"
        row[key] = {"iteration_s": res.summary["iteration_time_s"], "modelled_s": meta["modelled_makespan_s"],
                    "cpu_s": round(time.process_time() - c0, 2), "m": meta["target_microbatches"],
                    "screen": meta.get("screen"), "placed_in_full": sum("makespan_s" in c for c in meta["candidates"]),
                    "candidates": len(meta["candidates"])}
        if key != "exhaustive":
            ex = row["exhaustive"]
            row[key]["loss_pct"] = 100 * (row[key]["iteration_s"] / ex["iteration_s"] - 1)
            row[key]["modelled_loss_pct"] = 100 * (row[key]["modelled_s"] / ex["modelled_s"] - 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="16384,65536")
    ap.add_argument("--workloads", default="github,commoncrawl")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--samples", default="8192,16384")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    check_result_path(a.json, "--json")
    samples = [int(x) for x in a.samples.split(",")]
    if a.child:
        print(json.dumps(one(int(a.child[0]), a.child[1], int(a.child[2]), samples)))
        return
    rows = []
    for g in a.gpus.split(","):
        for w in a.workloads.split(","):
            for s in a.seeds.split(","):
                out = subprocess.run([sys.executable, __file__, "--samples", a.samples, "--child", g, w, s],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(r)
                cells = [f"{k}: {v['loss_pct']:+.4f}% ({v['modelled_loss_pct']:+.4f}%) m={v['m']} "
                         f"full {v['placed_in_full']}/{v['candidates']} cpu {v['cpu_s']} s"
                         for k, v in r.items() if k.startswith("sample_")]
                ex = r["exhaustive"]
                print(f"{g:>6} {w:12s} seed {s}: exhaustive {ex['iteration_s']:.4f} s m={ex['m']} cpu {ex['cpu_s']} s | "
                      + " | ".join(cells), flush=True)
    for n in samples:
        k = f"sample_{n}"
        print(f"{k}: max loss {max(r[k]['loss_pct'] for r in rows):+.4f}% simulated, "
              f"{max(r[k]['modelled_loss_pct'] for r in rows):+.4f}% modelled")
    save_result(a.json, rows, indent=1)


if __name__ == "__main__":
    main()
