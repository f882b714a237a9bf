"""Per-step breakdown of a tiny-model step, host vs device: a Megatron-LM functional-test case replayed.

Run: ``python experiments/host/tiny_step.py [--case NAME] [--gpu H100] [--out experiments/host]``

Reads the case's own flags (experiments/megatron_ci, the argument reader), simulates one step with the
shipped profile's host model (``[host]``, dcpsim.cost.host) and writes, for stage 0 rank 0 (and the last
stage), the ops' host issue and device times (``results/tiny_step.md``) and a two-lane figure (``results/tiny_step.png``):
where the step goes, and how much of it the device waits for the host. The measured step time of the case
(Megatron's CI golden values) is printed beside the simulated one; nothing is fitted here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DEFAULT_CASE = "gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer"


def main(argv: list[str] | None = None) -> int:
    from dcpsim.outdir import check_out_dir, write_text
    from dcpsim.published.megatron_ci import load_ci_suite, row_run
    from dcpsim.report.host import plot_rank_step, rank_step, step_table_markdown
    from dcpsim.run.single import build_simulator, run_simulation

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default=DEFAULT_CASE)
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = ap.parse_args(argv)
    suite = load_ci_suite()
    rows = [r for r in suite.rows if r.raw["case"] == a.case and r.raw["gpu"] == a.gpu and r.raw["environment"] == "dev"]
    if not rows:
        raise SystemExit(f"no dev row of case {a.case!r} on {a.gpu}")
    row = rows[0]
    run, reason = row_run(row)
    if run is None:
        raise SystemExit(f"case {a.case}: {reason}")
    res = run_simulation(run.config)
    rec = res.records[0]
    pp = rec.timeline.bwd_end_s.size
    out = check_out_dir(a.out)
    measured = float(row.raw["median_iteration_time_s"])
    lines = [f"# One step of `{a.case}` on {a.gpu}, host vs device (simulated)", "",
             f"Layout TP{row.raw['tp']} PP{row.raw['pp']} CP{row.raw['cp']}, {row.raw['microbatches']} microbatches per "
             f"DP rank; profile `{run.config.hardware.gpu}` (host model: its `[host]` table). Simulated step "
             f"{res.summary['iteration_time_s'] * 1e3:.1f} ms; Megatron's CI median {measured * 1e3:.1f} ms "
             f"({row.raw['golden_path']} @ {row.raw['golden_commit'][:10]}).", "",
             "Command: `python experiments/host/tiny_step.py" + (f" --case {a.case}" if a.case != DEFAULT_CASE else "")
             + "`", ""]
    for stage in sorted({0, pp - 1}):
        step = rank_step(rec, stage=stage, rank=0, sim=build_simulator(run.config))
        lines += [f"## Stage {stage}, rank 0", "", step_table_markdown(step)]
        if stage == 0:
            plot_rank_step(step.frame(), out / "tiny_step.png", title=f"{a.case} ({a.gpu}), stage 0 rank 0: simulated "
                           f"{res.summary['iteration_time_s'] * 1e3:.1f} ms, CI {measured * 1e3:.1f} ms")
    write_text(out / "tiny_step.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
