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

Model: ``seconds = SECONDS_PER_UNIT × Σ_candidates normal_samples(m) × buckets(m)`` with
``buckets(m) = PP·m·(DP×CP)``, the work of the bucket assignment, fitted through the origin on the measured
batches (:data:`MEASURED`). One layout (8 DP×CP ranks per stage, PP 8) was measured: other layouts are
an extrapolation along the assignment's work. The blog's host is not published: ``host_speed`` (the
policy option) divides the time -- an assumption, 1 = as fast as the measuring CPU.

Nothing measured at run time enters a simulated result: these constants are fixed data.
"""

from __future__ import annotations

__all__ = ["MEASURED", "SECONDS_PER_UNIT", "planner_seconds", "planner_work"]

SECONDS_PER_UNIT = 6.7813e-07
"""CPU seconds per unit of :func:`planner_work` on the measuring CPU (least squares through the origin;
``experiments/dynamic_cp_blog/equivalence/fit_planner_time.py``)."""

MEASURED: dict = {
    "what": "time.process_time() of PipelineAwareBalancedHybridCPscheduler.get_groups_and_subsamples, one call per batch",
    "code": "Megatron-LM refs/pull/2959/head, commit 3b309c627e902913aafbb6f459f528a4ea06736c (networkx 3.6.1)",
    "host": "Intel Xeon (family 6 model 207: Emerald Rapids), 2.1 GHz, KVM guest, 2 vCPUs; Python 3.11.7",
    "date": "2026-11-27",
    "batches": "32 GitHub + 32 CommonCrawl primary batches (2,048 samples; 64 GPUs, PP 8, 8 DP x CP ranks, M 65,536, "
             "CP up to 8; the launch script's model)",
    "cpu_s": {"github": [1.46, 1.69, 1.83, 1.92, 2.03], "commoncrawl": [1.31, 1.80, 1.94, 2.02, 2.15]},
    "quantiles": "min, 25%, median, 75%, max",
    "fit": "rel. RMSE 9.6% over the 64 batches; the work varies little between batches of one layout (corr. 0.28)",
    "wall_note": "wall times on the shared, loaded 2-vCPU machine were 5-20 s (median 9.4 s): contention, not the "
                 "code; the earlier study's 2.3-11.3 s were wall times too",
}
"""Provenance and summary of the measurement the constant was fitted to."""


def planner_work(meta: dict, n_samples: int, pp: int, ranks_per_stage: int) -> float:
    """Σ over the candidates the scheduler builds of (normal samples × buckets) for one batch."""
    total = 0.0
    for c in meta.get("candidates") or ():
        normal = max(int(n_samples) - int(c.get("long_sequences", 0)), 0)
        total += normal * pp * int(c["m"]) * ranks_per_stage
    return total


def planner_seconds(meta: dict, n_samples: int, pp: int, ranks_per_stage: int, host_speed: float = 1.0) -> float:
    """Modelled seconds the real scheduler takes for one batch on a host ``host_speed`` × the measuring CPU."""
    return SECONDS_PER_UNIT * planner_work(meta, n_samples, pp, ranks_per_stage) / float(host_speed)
