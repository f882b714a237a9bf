"""``dynamic-pr2959``: the Dynamic-CP scheduler NVIDIA's blog measured, as its code behaves.

Source read: Megatron-LM pull request #2959 at ``refs/pull/2959/head`` (commit
3b309c6, 2026-01-20). Its launch script (``examples/run_hybrid_cp.sh``) passes
``--async-hybrid-context-parallel-scheduler``, which plans each global batch in
a background process with ``PipelineAwareBalancedHybridCPscheduler``
(``megatron/core/pipeline_parallel/data_schedule.py``), its FLOPs function
``TFLOPs`` and its pipeline simulator (``megatron/pipeline_simulator``). This
module does what that code does, in dcpsim's own code; nothing of it is copied.
``experiments/dynamic_cp_blog/equivalence/`` runs both on the same batches and
counts how often the plans agree. Where the code differs from the earlier
description (REFERENCE §1), the code is followed; the differences are listed in
``experiments/dynamic_cp_blog/README.md``.

It never looks at dcpsim's :class:`~dcpsim.cost.CostModel` times: it plans with
its own FLOPs model and the simulator times the plan with the real cost model.

**FLOPs** (:class:`Pr2959Flops`), forward per transformer block for a sequence
of ``s`` tokens, ``h`` the hidden size: QKV ``2·s·h²·(1 + 2/g)`` with ``g``
the number of query groups (the code's formula; the true K/V width is
``2·h·g/heads``, so for MHA it counts 1.05 h² where there are 3 h²), output
projection ``2·s·h²``, MLP ``2·s·h·f_up + 2·s·f·h`` (``f_up = 2f`` when gated),
attention ``2·2·s²·h·0.5``. Backward ``2.7×`` the linear terms and ``2.77×``
attention; ``full`` recompute adds the forward (no other mode adds anything).
Everything the solver compares is *forward* FLOPs.

**Search.** ``K = (DP·CP)/min_cp`` slots (data-parallel ranks of ``min_cp``
GPUs). For each ``m`` in ``m_values`` (the code's ``search_space = 6``: 1..6;
every slot runs the same ``m``), skipped when ``PP·m·K`` exceeds the number of
samples, there are ``n_b = PP·m·K`` buckets and the target ``τ`` is the mean
forward FLOPs per bucket (the bubble ratio of the code's ``compute_ratios``
cancels when every slot has the same ``m``). One candidate is built in phases:

1. :meth:`_Candidate.long_sizes` -- *long* samples have forward FLOPs
   ``> long_factor·τ`` (1.3). Longest first, each takes
   ``c = nearest_pow2(ceil(f/τ))`` slots (ties round up), capped at
   ``max_cp/min_cp``, at ``K`` and at the buckets left minus one per long sample
   still to come. There is no memory minimum.
2. :meth:`_Candidate.place_long` -- each long sample takes the aligned block of
   ``c`` slots whose fullest slot has the most buckets left (first such block),
   and fills its group with normal samples, largest first, each whose forward
   FLOPs are below ``fill_slack`` (1.05) × the room ``c·τ − f`` left, while more
   than ``K·r(m)`` normal samples remain (``r(m) = m·PP(2PP−1)/(m·PP+PP−1)``,
   the code's ratio) and the group holds fewer than ``M·c`` tokens (checked
   before adding, so a group can end above it).
3. :meth:`_Candidate.fill_normal` -- the ``n_b − Σc`` normal buckets get a token
   target ``T`` = the remaining normal tokens / the number of normal buckets.
   Largest first, each normal sample goes to the bucket with the lowest forward
   FLOPs after adding it among those staying ``<= T`` tokens; samples that fit
   none go, longest first, to the bucket whose tokens end closest to ``T``.
4. :meth:`_Candidate.assign_slots` -- each slot's list starts with its long
   groups in placement order; normal buckets, in ascending forward FLOPs, go to
   the slot with the least forward FLOPs that has fewer than ``PP·m`` buckets.
   Backward estimates as in the code: ``3·f`` for a long sample, ``2·f`` for a
   sample in a normal bucket, the model's backward for a long group's fillers.
5. :meth:`_Candidate.score` -- the 1F1B makespan of each slot's list
   (:func:`one_f_one_b_makespan`), largest over slots. The lowest wins (ties:
   smaller ``m``). A candidate with an empty bucket is rejected, as in the code.
   The code's memory simulator is off in the blog's runs (``run_memory_simulator``
   is a class attribute no flag sets); ``memory_limit_gib`` turns dcpsim's
   memory formula on as a check (default off).
6. :meth:`_Candidate.steps` -- microbatch ``k`` of slot ``s`` is the ``k``-th
   bucket of its list.

Where the code's plan cannot run as written, dcpsim departs from it, counts
it in ``meta`` and the equivalence study reports it: a candidate whose groups
hold more than ``M`` tokens on a rank is rejected (the code does not check;
dcpsim's plans must hold); a long group whose slots have it at different list
positions (the code would pair ranks running different microbatches) runs at
the latest of those positions and the other slots' next buckets move into the
gap (``misaligned``); a long sample finding no block with a free bucket takes
the last aligned block (the code indexes slot ``-1``). If every ``m`` is
rejected, the candidates are rebuilt in *safe* mode (tokens capped at ``M`` per
rank everywhere, extra microbatches for what does not fit, empty buckets
allowed) and ``meta["safe_mode"]`` is True.

Planning runs in the blog's runs in a forked background process
(``sim.planning = "sampler"``, :mod:`dcpsim.sim.sampler`); ``planning_time_s``
is the time the real code was measured to take for such a batch
(:mod:`dcpsim.policies.pr2959_time`), divided by the option ``host_speed``.

**Speed.** The phases make the code's decisions with faster structures, not
other rules: a run of long samples of one size takes its blocks at once
(:func:`_long_blocks`), fillers come from the pool's length classes (:mod:`dcpsim.policies.pr2959_fillers`:
chunks of groups at once in numpy, kept up to the first group another one's takings change; safe mode: a
list with O(α) removal, :class:`_NormalPool`), the groups' FLOPs and tokens are summed after it in numpy, in
the code's order of additions, normal
samples go to the buckets in runs (:func:`_bulk_lowest`, each round's order sorted from the last one's runs of
equal FLOPs, ``stable_order``; then a run of equal samples at a time as a merge of the buckets' rising
FLOPs, :func:`_merge_runs`), leftovers on the buckets of fewest tokens in rounds
where provably the code's pick (:mod:`dcpsim.policies.pr2959_bulk`), the rest in a table sorted by
tokens (:class:`_TokenTable`, runs moved in bulk by their ranks; their FLOPs added after the loop, in its
order), slots in runs while provably the heap's choice (:func:`_bulk_deal`; after a run every slot not full
took part in, the next run's order is the last one's, no sort), then in a heap by FLOPs; the pipeline
simulation keeps its ends in a few reused rows; integer sorts use numpy's radix sort
(:func:`stable_argsort`). ``tests/test_pr2959_scale.py`` keeps the plain scans as the definition and checks
identical plans and run times (65,536 GPUs: ~138 s -> about 0.35 CPU s of planning on a 2-core Xeon, 0.33-0.45
with the host's load; then leftover rounds, run sorts and arrays for the long samples: 1,986 -> 1,474 M
instructions per plan of that batch under valgrind, 0.31 -> 0.26 CPU s).
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.padding import per_rank_tokens, per_rank_tokens_int
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.policies.base import Policy
from dcpsim.policies.fit import dynamic_fit
from dcpsim.policies.plan import Layout, Plan, Step, groups_per_size
from dcpsim.policies.pr2959_candidate import _Batch, _Candidate, _LongGroup
from dcpsim.policies.pr2959_model import (
    ATTN_BWD_FACTOR,
    GEMM_BWD_FACTOR,
    LONG_BWD_FACTOR,
    NORMAL_BWD_FACTOR,
    Pr2959Flops,
    nearest_pow2,
    one_f_one_b_makespan,
    pipeline_ratio,
    pr_pipeline_makespan,
)
from dcpsim.policies.pr2959_tables import _long_blocks, _NormalPool, _TokenTable

# the planner's parts live in pr2959_model (FLOPs, pipeline simulators), pr2959_candidate (the phases)
# and pr2959_tables (fast structures); their names stay importable from here
__all__ = [
    "ATTN_BWD_FACTOR", "BUCKET_TARGETS", "GEMM_BWD_FACTOR", "GIB", "LONG_BWD_FACTOR", "NORMAL_BWD_FACTOR",
    "Pr2959Flops", "Pr2959Policy", "_Batch", "_Candidate", "_LongGroup", "_NormalPool", "_TokenTable",
    "_long_blocks", "nearest_pow2", "one_f_one_b_makespan", "pipeline_ratio", "pr_pipeline_makespan",
]

GIB = 2**30
BUCKET_TARGETS = ("mean", "iteration", "timeline")  # the code's target, and two readings of "folds in the bubble"


# ------------------------------------------------------------------ policy
class Pr2959Policy(Policy):
    """``dynamic-pr2959`` (see the module docstring).

    Options: ``m_values`` (microbatches per slot per pipeline stage to try;
    default ``[1, 2, 3, 4, 5, 6]``, the code's ``search_space``),
    ``long_factor`` (a sample is long above this × the target; 1.3),
    ``fill_slack`` (a filler's forward FLOPs must stay below this × the room
    left in a long group; 1.05), ``memory_limit_gib`` (``None``, the default, as
    in the blog's runs: no memory check; a number rejects candidates whose
    peak is at or above it), ``strict_memory`` (raise :class:`InfeasibleError`
    when the memory check rejects every candidate; default False),
    ``bucket_target`` (``"mean"``, the code's; ``"iteration"`` and
    ``"timeline"`` are the readings of the description the earlier version
    used, kept for comparison), ``max_cp`` (the largest CP size, Megatron's
    ``--max-hybrid-context-parallel-size``; ``None``: the layout's largest,
    DP×CP; the blog's launch script sets 8), ``host_speed`` (the planner host's
    single-thread speed relative to the CPU the real scheduler was measured on,
    :mod:`dcpsim.policies.pr2959_time`; an assumption, default 1).
    """

    name = "dynamic-pr2959"
    dynamic = True

    def __init__(self, m_values: list[int] | None = None, long_factor: float = 1.3, fill_slack: float = 1.05,
                 memory_limit_gib: float | None = None, strict_memory: bool = False,
                 bucket_target: str = "mean", max_cp: int | None = None, host_speed: float = 1.0) -> None:
        vals = [1, 2, 3, 4, 5, 6] if m_values is None else m_values
        if (not isinstance(vals, (list, tuple)) or not vals
                or any(not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1 for v in vals)):
            raise ConfigError("policy.options.m_values", m_values, "a non-empty list of positive integers")
        self.m_values = sorted({int(v) for v in vals})
        self.long_factor = _positive("long_factor", long_factor)
        self.fill_slack = _positive("fill_slack", fill_slack)
        self.memory_limit_gib = None if memory_limit_gib is None else _positive("memory_limit_gib", memory_limit_gib)
        if not isinstance(strict_memory, bool):
            raise ConfigError("policy.options.strict_memory", strict_memory, "true or false")
        self.strict_memory = strict_memory
        if bucket_target not in BUCKET_TARGETS:
            raise ConfigError("policy.options.bucket_target", bucket_target, f"one of {list(BUCKET_TARGETS)}")
        self.bucket_target = bucket_target
        if max_cp is not None and (isinstance(max_cp, bool) or not isinstance(max_cp, (int, np.integer))
                                   or max_cp < 1 or max_cp & (max_cp - 1)):
            raise ConfigError("policy.options.max_cp", max_cp, "a power of two >= 1, or None")
        self.max_cp = None if max_cp is None else int(max_cp)
        self.host_speed = _positive("host_speed", host_speed)

    def modelled_planning_s(self, lengths: np.ndarray, layout: Layout, plan: Plan) -> float:
        """The real scheduler's measured time for this batch's work (:mod:`dcpsim.policies.pr2959_time`)."""
        from dcpsim.policies.pr2959_time import planner_seconds

        return planner_seconds(plan.meta, int(lengths.size), layout.pp, layout.ranks_per_stage, self.host_speed)

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        # the padding rule never falls with the length: the longest sequence fits, or dynamic_fit names one that does not
        if lengths.size and per_rank_tokens_int(int(lengths.max()), layout.max_dynamic_cp) > layout.max_tokens_per_rank:
            dynamic_fit(lengths, layout)  # a sequence no aligned group holds: InfeasibleError
        if self.max_cp is not None and self.max_cp < layout.max_dynamic_cp:
            top = max(self.max_cp, layout.min_cp)
            bad = np.flatnonzero(per_rank_tokens(lengths, top) > layout.max_tokens_per_rank).tolist()
            if bad:
                raise InfeasibleError("capacity", f"sequence {bad[0]} ({int(lengths[bad[0]])} tokens) does not fit "
                                      f"max_cp={top} ranks x {layout.max_tokens_per_rank} tokens")
        if lengths.size == 0:
            return Plan(self.name, layout, lengths, [], True, meta={"microbatches": 0})
        fwd, bwd = Pr2959Flops.from_cost(cost).stage_fwd_bwd(lengths)
        return self._plan_batch(_Batch(lengths, layout, fwd, bwd, self.max_cp), cost)  # gc paused (Policy.plan)

    def _plan_batch(self, batch: _Batch, cost) -> Plan:
        """Build and score every candidate, pick the best (the code's rule) and lay out its steps."""
        cands = self._candidates(batch, cost, safe=False)
        safe = not any(c.valid for c in cands)
        if safe:
            cands = self._candidates(batch, cost, safe=True)
        valid = [c for c in cands if c.valid]
        ok = [c for c in valid if c.memory_ok]
        if ok:
            best = min(ok, key=lambda c: (c.makespan, c.m))
        else:
            lowest = min(valid, key=lambda c: (c.peak_bytes, c.m))
            if self.strict_memory:
                raise InfeasibleError(
                    "memory",
                    f"every candidate microbatch count m in {self.m_values} peaks at >= {self.memory_limit_gib:g} GiB per GPU "
                    f"(lowest: {lowest.peak_bytes / GIB:.1f} GiB at m={lowest.m})",
                )
            best = lowest
        steps = best.steps()
        return Plan(self.name, batch.layout, batch.L, steps, True, meta=self._meta(best, cands, safe, steps))

    def _candidates(self, batch: _Batch, cost, *, safe: bool) -> list[_Candidate]:
        """Build and score one candidate per ``m`` (the code skips ``m`` with more buckets than samples)."""
        out = []
        for m in self.m_values:
            if not safe and batch.layout.pp * m * batch.K > batch.n:
                continue
            c = _Candidate(batch, m, self.long_factor, self.fill_slack, self.bucket_target, safe)
            c.build()
            if c.valid:
                c.peak_bytes = float(cost.peak_memory_bytes(c.max_tokens))
                c.memory_ok = self.memory_limit_gib is None or c.peak_bytes < self.memory_limit_gib * GIB
            out.append(c)
        if safe and not any(c.valid for c in out):  # safe mode builds valid plans by construction
            raise InfeasibleError("capacity", "dynamic-pr2959 found no plan within max_tokens_per_rank")
        return out

    @staticmethod
    def _meta(best: _Candidate, cands: list[_Candidate], safe: bool, steps: list[Step]) -> dict:
        return {
            "m": best.m,
            "microbatches": len(steps),
            "target_microbatches": best.batch.layout.pp * best.m,
            "long_sequences": len(best.long_ids),
            "leftovers": best.n_leftovers,
            "misaligned": best.misaligned,
            "overflow_blocks": best.overflow_blocks,
            "clamped_sizes": best.clamped,
            "mean_bucket_flop": best.mu,
            "bucket_target_flop": best.tau,
            "flops_makespan": best.makespan,
            "peak_memory_gib": best.peak_bytes / GIB,
            "memory_ok": best.memory_ok,
            "safe_mode": safe,
            "candidates": [
                {"m": c.m, "valid": c.valid, "reason": c.reason, "long_sequences": len(c.long_ids),
                 "leftovers": c.n_leftovers, "flops_makespan": c.makespan if c.valid else None,
                 "peak_memory_gib": c.peak_bytes / GIB if c.valid else None, "memory_ok": c.memory_ok}
                for c in cands
            ],
            "groups_per_size": groups_per_size(steps),
        }


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"policy.options.{name}", value, "a number > 0")
    return float(value)

