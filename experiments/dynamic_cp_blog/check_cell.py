"""Re-run one cell of the joint grid (``[consistency]`` of experiment.toml) at the main table's size.

    PYTHONPATH=$PWD python experiments/dynamic_cp_blog/check_cell.py --gpus 128 --max-len 65536 --cp 4 --m 65536

Runs the baseline (``packing-pr2959`` at static CP ``--cp`` with bins of ``--m`` tokens per rank) and the
headline (``dynamic-pr2959``) on the same seeds x 4 consecutive batches, and prints each dataset's pooled
TFLOPS/GPU, the speedup, the per-seed range and the errors against the published figures (references only).
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    from dcpsim.reproduction.blog import load_experiment
    from dcpsim.run.single import run_simulation

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--max-len", type=int, required=True)
    ap.add_argument("--cp", type=int, required=True, help="the baseline's static CP")
    ap.add_argument("--m", type=int, required=True, help="the baseline's bin capacity, tokens per rank")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=4)
    a = ap.parse_args()
    exp = load_experiment()
    point = {"cluster.gpus": a.gpus, "workload.max_len": a.max_len}
    runs = ((exp.baseline, {"parallel.cp": a.cp, f"options.{exp.baseline}.bin_tokens_per_rank": a.m}), (exp.headline, {}))
    for ds in exp.datasets:
        out = {}
        for pol, upd in runs:
            flops = total = 0.0
            per = []
            for s in range(a.seeds):
                cfg = exp.config(ds, pol, calibrated=False, seed=s, iterations=a.iterations, updates={**point, **upd})
                r = run_simulation(cfg)
                t = float(r.iterations["iteration_time_s"].sum())
                flops += float(r.iterations["flops"].sum())
                total += t
                per.append(t)
            out[pol] = (flops / total / a.gpus / 1e12, np.array(per), r.summary)
        (b, bt, bs), (d, dt, dsum) = out[exp.baseline], out[exp.headline]
        pub = exp.published[ds]
        sp = bt / dt
        print(f"{ds}: packing {b:.1f} ({b / pub['packing'] - 1:+.1%}), {exp.headline} {d:.1f} ({d / pub['dynamic'] - 1:+.1%}), "
              f"speedup {d / b:.3f} ({d / b / pub['speedup'] - 1:+.1%}; per seed {sp.min():.2f}-{sp.max():.2f}); "
              f"microbatches {bs['steps']:.1f} / {dsum['steps']:.1f}; planning stall {dsum['planning_stall_s']:.2f} s")


if __name__ == "__main__":
    main()
