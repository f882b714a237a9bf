"""How long the blog's scheduler takes to plan a global batch: measured on the real code, not assumed.

``PipelineAwareBalancedHybridCPscheduler`` (Megatron-LM ``refs/pull/2959/head``) is plain Python; with
``--async-hybrid-context-parallel-scheduler`` it runs in a forked process with one thread
(``torch.set_num_threads(1)`` in ``MegatronSFTPrefetchDPBalancedSampler.prefetch_batch``). Its CPU time
was measured by ``experiments/dynamic_cp_blog/equivalence/pr2959_equivalence.py`` (``time.process_time``
around ``get_groups_and_subsamples``; results in ``equivalence/results/equivalence.json``, ``cpu_real_s``)
on the primary configuration's batches. Where the time goes (cProfile, one GitHub batch): for each
candidate ``m`` the bucket assignment (``assign_samples_to_buckets``: every normal sample weighed against
the buckets, ``fwd_flops_update_rule``) and the PR's own pipeline simulator (networkx graphs), plus deep
copies of the bucket lists.

Model: ``seconds = SECONDS_PER_ASSIGN_UNIT × Σ_candidates normal_samples(m) × buckets(m) +
SECONDS_PER_PIPELINE_UNIT × Σ_candidates PP·m`` with ``buckets(m) = PP·m·(DP×CP)``: the bucket
assignment's work and the pipeline simulations' size, fitted through the origin on batches of two
layouts (8 and 16 DP×CP ranks per stage, PP 8; :data:`MEASURED`); a one-term fit on the 8-rank batches
alone over-predicted the 16-rank ones by 32–48%. Other layouts are an extrapolation. The blog's host is
not published: ``host_speed`` (the policy option) divides the time -- an assumption, 1 = as fast as the
measuring CPU.

Nothing measured at run time enters a simulated result: these constants are fixed data.
"""

from __future__ import annotations

__all__ = ["MEASURED", "SECONDS_PER_ASSIGN_UNIT", "SECONDS_PER_PIPELINE_UNIT", "planner_seconds", "planner_work"]

SECONDS_PER_ASSIGN_UNIT = 2.8411e-07
"""CPU seconds per unit of bucket-assignment work (:func:`planner_work`) on the measuring CPU."""

SECONDS_PER_PIPELINE_UNIT = 6.3734e-03
"""CPU seconds per microbatch of the pipeline simulations (:func:`planner_work`) on the measuring CPU.
Both: least squares through the origin, ``experiments/dynamic_cp_blog/equivalence/fit_planner_time.py``."""

MEASURED: dict = {
    "what": "time.process_time() of PipelineAwareBalancedHybridCPscheduler.get_groups_and_subsamples, one call per batch",
    "code": "Megatron-LM refs/pull/2959/head, commit 3b309c627e902913aafbb6f459f528a4ea06736c (networkx 3.6.1)",
    "host": "Intel Xeon (family 6 model 207: Emerald Rapids), 2.1 GHz, KVM guest, 2 vCPUs; Python 3.11.7",
    "date": "2026-11-27",
    "batches": "32 GitHub + 32 CommonCrawl primary batches (2,048 samples; 64 GPUs, PP 8, 8 DP x CP ranks, M 65,536, "
             "CP up to 8; the launch script's model) and 6 + 6 at 128 GPUs (16 DP x CP ranks)",
    "cpu_s": {"github, 8 ranks": [1.46, 1.69, 1.83, 1.92, 2.03], "commoncrawl, 8 ranks": [1.31, 1.80, 1.94, 2.02, 2.15],
              "github, 16 ranks": [2.12, 2.22, 2.38, 2.62, 2.87], "commoncrawl, 16 ranks": [2.27, 2.47, 2.76, 3.00, 3.15]},
    "quantiles": "min, 25%, median, 75%, max",
    "fit": "rel. RMSE 10.7% over the 76 batches; model means 1.84 s (8 ranks; measured 1.80 / 1.88) and 2.58 s "
           "(16 ranks; measured 2.44 / 2.73); the work varies little between batches of one layout",
    "wall_note": "wall times on the shared, loaded 2-vCPU machine were 5-20 s (median 9.4 s): contention, not the "
                 "code; the earlier study's 2.3-11.3 s were wall times too",
}
"""Provenance and summary of the measurement the constant was fitted to."""


def planner_work(meta: dict, n_samples: int, pp: int, ranks_per_stage: int) -> tuple[float, float]:
    """(bucket-assignment work, pipeline-simulation work) of one batch: Σ over the candidates the scheduler builds
    of normal samples × buckets (``PP·m·ranks``), and of the pipeline simulator's microbatches (``PP·m``)."""
    assign = pipe = 0.0
    for c in meta.get("candidates") or ():
        normal = max(int(n_samples) - int(c.get("long_sequences", 0)), 0)
        assign += normal * pp * int(c["m"]) * ranks_per_stage
        pipe += pp * int(c["m"])
    return assign, pipe


def planner_seconds(meta: dict, n_samples: int, pp: int, ranks_per_stage: int, host_speed: float = 1.0) -> float:
    """Modelled seconds the real scheduler takes for one batch on a host ``host_speed`` × the measuring CPU."""
    assign, pipe = planner_work(meta, n_samples, pp, ranks_per_stage)
    return (SECONDS_PER_ASSIGN_UNIT * assign + SECONDS_PER_PIPELINE_UNIT * pipe) / float(host_speed)
