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
(:func:`_long_blocks`), fillers come from a list with O(α) removal
(:class:`_NormalPool`), normal buckets sit in heaps by FLOPs and by tokens,
leftovers in a table sorted by tokens (:class:`_TokenTable`), slots in a heap
by FLOPs. ``tests/test_pr2959_scale.py`` keeps the plain scans as the
definition and checks identical plans (65,536 GPUs: ~138 s -> a few s).
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from bisect import bisect_left, bisect_right, insort
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from dcpsim.cost.padding import per_rank_tokens, per_rank_tokens_int
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.pipeline import makespan as pipeline_makespan
from dcpsim.policies.base import Policy
from dcpsim.policies.fit import dynamic_fit
from dcpsim.policies.plan import Group, Layout, Plan, Step

GEMM_BWD_FACTOR = 2.7  # backward / forward FLOPs of the linear terms (PR #2959, fwd_flops_to_bwd_flops)
ATTN_BWD_FACTOR = 2.77  # backward / forward FLOPs of attention (same)
LONG_BWD_FACTOR = 3.0  # the solver's backward estimate of a long sample (× its forward)
NORMAL_BWD_FACTOR = 2.0  # the solver's backward estimate of a sample in a normal bucket (× its forward; a power of two, see fill_normal)
GIB = 2**30
BUCKET_TARGETS = ("mean", "iteration", "timeline")  # the code's target, and two readings of "folds in the bubble"


def nearest_pow2(n: int) -> int:
    """The power of two nearest ``n`` (ties round up; 1 for ``n < 1``), as the PR's helper rounds."""
    if n < 1:
        return 1
    lo = 1 << (int(n).bit_length() - 1)
    hi = lo << 1
    return lo if n - lo < hi - n else hi


@contextmanager
def _gc_paused():
    """Pause Python's cyclic garbage collector while a batch is planned.

    The planner allocates millions of small acyclic objects (heap entries, bucket lists, groups);
    at 65,536 GPUs the collector's full passes over them cost ~20% of the planning time and find
    nothing (reference counting frees it all). The previous state is restored on exit.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def pipeline_ratio(m: int, pp: int) -> float:
    """The code's per-slot bucket ratio ``r(m) = m·PP·(2PP−1)/(m·PP + PP − 1)`` (non-interleaved)."""
    return m * pp * (2 * pp - 1) / (m * pp + pp - 1)


# ------------------------------------------------------------------ FLOPs model
@dataclass(frozen=True)
class Pr2959Flops:
    """The blog-era scheduler's FLOPs model (see the module docstring).

    ``gemm_flops_per_token``: forward linear FLOPs per token of one block, as
    the code counts them; ``attn_flops_per_token2``: forward causal attention
    FLOPs of one block per squared token (``2·2·0.5·h``); ``layers``: blocks
    per pipeline stage (a common factor, kept so the meta figures are per
    stage); ``recompute``: ``none``, ``selective`` or ``full``.
    """

    gemm_flops_per_token: float
    attn_flops_per_token2: float
    layers: int
    recompute: str

    @classmethod
    def from_cost(cls, cost) -> Pr2959Flops:
        """The FLOPs model of ``cost``'s model, layers per stage and recompute mode (TP does not enter)."""
        m = cost.model
        h = m.hidden
        up = m.ffn_hidden * (2 if m.gated_mlp else 1)
        qkv = 2.0 * h * h * (1.0 + 2.0 / m.n_kv_heads)
        gemm = qkv + 2.0 * h * h + 2.0 * h * up + 2.0 * m.ffn_hidden * h
        attn = 2.0 * 2.0 * 0.5 * h
        return cls(float(gemm), float(attn), int(cost.layers_per_stage), str(cost.recompute))

    def block_forward(self, lengths) -> tuple[np.ndarray, np.ndarray]:
        """(linear, attention) forward FLOPs of one block for each sequence."""
        s = np.asarray(lengths, dtype=np.float64)
        return self.gemm_flops_per_token * s, self.attn_flops_per_token2 * s * s

    def block_fwd_bwd(self, lengths) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward incl. recomputation) FLOPs of one block for each sequence."""
        g, a = self.block_forward(lengths)
        bwd = GEMM_BWD_FACTOR * g + ATTN_BWD_FACTOR * a
        if self.recompute == "full":
            bwd = bwd + g + a
        return g + a, bwd

    def block_flops(self, lengths) -> np.ndarray:
        """Total FLOPs of one block per sequence: forward + backward + recomputation."""
        f, b = self.block_fwd_bwd(lengths)
        return f + b

    def stage_fwd_bwd(self, lengths) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) FLOPs of one pipeline stage (``layers`` blocks) per sequence."""
        f, b = self.block_fwd_bwd(lengths)
        return f * self.layers, b * self.layers


# ------------------------------------------------------------------ 1F1B simulation
def one_f_one_b_makespan(fwd, bwd, pp: int) -> np.ndarray:
    """Makespan of a ``pp``-stage 1F1B pipeline for each column (DP rank) independently.

    ``fwd``, ``bwd``: arrays ``(n_microbatches, n_columns)`` of one stage's forward and
    backward durations (every stage takes the same; transfers are free). Returns
    ``(n_columns,)`` end times of the last op, from the one schedule definition
    (:func:`dcpsim.pipeline.makespan`). With equal microbatches ``(f, b)`` this is
    ``(n + pp - 1)·(f + b)``.
    """
    fwd = np.asarray(fwd, dtype=np.float64)
    bwd = np.asarray(bwd, dtype=np.float64)
    if fwd.ndim != 2 or fwd.shape != bwd.shape:
        raise ConfigError("fwd/bwd", f"shapes {fwd.shape} and {bwd.shape}", "two equal (microbatches, columns) arrays")
    return pipeline_makespan(fwd, bwd, int(pp))


# ------------------------------------------------------------------ the PR's pipeline simulator
@lru_cache(maxsize=256)
def _pr_pipeline_graph(n: int, pp: int) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Ops of the pipeline the PR's solver simulates (its ``SplitFuseSchedule``, one chunk per microbatch).

    Returns ``(is_backward, microbatch, predecessor ops)`` in a topological order. The op order
    follows the PR's tick pattern: ``pp`` forward ticks, then backward and forward ticks
    alternating, then backward ticks; in a forward tick with counter ``v`` stage ``s`` runs the
    forward of microbatch ``v + pp − 1 − s``, in a backward tick with counter ``w`` the backward
    of ``w − (pp − 1 − s)``. So stage ``s`` runs ``1 + 2·(pp − 1 − s)`` warm-up forwards (1F1B
    runs ``pp − 1 − s``). Dependencies: each stage's order; forward ``s−1 → s`` and backward
    ``s+1 → s`` of a microbatch; forward before backward on the last stage; and the PR's extra
    chain across stages (last stage first): on each stage its first run of backwards after the
    warm-up, then the run of forwards that follows.
    """
    per_stage: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    ticks: list[list[tuple[int, int] | None]] = []
    fwd, bwd = 1 - pp, 0
    while bwd < n + pp - 1:
        is_b = not (fwd < 1) and (fwd == n or fwd - bwd == 1)
        row: list[tuple[int, int] | None] = []
        for s in range(pp):
            k = bwd - (pp - 1 - s) if is_b else fwd + pp - 1 - s
            row.append((int(is_b), k) if 0 <= k < n else None)
        ticks.append(row)
        if is_b:
            bwd += 1
        else:
            fwd += 1
    for row in ticks:
        for s, op in enumerate(row):
            if op is not None:
                per_stage[s].append(op)
    return _pr_pipeline_order(n, pp, per_stage, _pr_extra_chain(pp, ticks))


def _pr_extra_chain(pp: int, ticks: list) -> list[tuple[int, int, int]]:
    """The PR's extra dependency chain: stages last to first; on each, after its warm-up forwards,
    its first run of backwards and the run of forwards that follows it."""
    chain: list[tuple[int, int, int]] = []
    for s in reversed(range(pp)):
        col = [row[s] for row in ticks]
        i = 0
        for kind, take in ((0, False), (1, True), (0, True)):
            while i < len(col) and (col[i] is None or col[i][0] == kind):
                if take and col[i] is not None:
                    chain.append((s, *col[i]))
                i += 1
    return chain


def _pr_pipeline_order(n: int, pp: int, per_stage: list[list[tuple[int, int]]],
                       chain: list[tuple[int, int, int]]) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """Number the ops, collect their predecessors and sort them topologically (Kahn, lowest id first)."""
    node = {(s, d, k): i for i, (s, d, k) in enumerate((s, d, k) for s in range(pp) for d, k in per_stage[s])}
    preds: dict[int, set[int]] = {v: set() for v in node.values()}
    for s, ops in enumerate(per_stage):
        for a, b in zip(ops, ops[1:], strict=False):
            preds[node[(s, *b)]].add(node[(s, *a)])
    for k in range(n):
        for s in range(1, pp):
            preds[node[(s, 0, k)]].add(node[(s - 1, 0, k)])
            preds[node[(s - 1, 1, k)]].add(node[(s, 1, k)])
        for s in range(pp):
            preds[node[(s, 1, k)]].add(node[(s, 0, k)])
    for a, b in zip(chain, chain[1:], strict=False):
        preds[node[b]].add(node[a])
    info = {v: key for key, v in node.items()}
    return tuple((v, info[v][1], info[v][2], tuple(sorted(preds[v]))) for v in _topological(preds))


def _topological(preds: dict[int, set[int]]) -> list[int]:
    """Kahn's algorithm, lowest node id first (deterministic)."""
    succ: dict[int, list[int]] = {v: [] for v in preds}
    indeg = {v: len(p) for v, p in preds.items()}
    for v, p in preds.items():
        for u in p:
            succ[u].append(v)
    ready = [v for v, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        v = heapq.heappop(ready)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, w)
    if len(out) != len(preds):
        raise RuntimeError("the PR's pipeline graph has a cycle")
    return out


def pr_pipeline_makespan(fwd, bwd, pp: int) -> np.ndarray:
    """Makespan of the PR's simulated pipeline for each column (slot) independently (see :func:`_pr_pipeline_graph`).

    ``fwd``, ``bwd``: ``(n_microbatches, n_columns)`` durations of one stage (every stage alike).
    """
    fwd = np.asarray(fwd, dtype=np.float64)
    bwd = np.asarray(bwd, dtype=np.float64)
    n, cols = fwd.shape
    if n == 0:
        return np.zeros(cols)
    ops = _pr_pipeline_graph(n, int(pp))
    end = np.zeros((len(ops), cols))
    for v, d, k, preds in ops:
        if preds:
            end[v] = end[list(preds)].max(axis=0)
        end[v] += bwd[k] if d else fwd[k]
    return end.max(axis=0)


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
        dynamic_fit(lengths, layout)  # a sequence no aligned group holds: InfeasibleError
        if self.max_cp is not None and self.max_cp < layout.max_dynamic_cp:
            top = max(self.max_cp, layout.min_cp)
            bad = [i for i, L in enumerate(lengths.tolist()) if per_rank_tokens_int(L, top) > layout.max_tokens_per_rank]
            if bad:
                raise InfeasibleError("capacity", f"sequence {bad[0]} ({int(lengths[bad[0]])} tokens) does not fit "
                                      f"max_cp={top} ranks x {layout.max_tokens_per_rank} tokens")
        if lengths.size == 0:
            return Plan(self.name, layout, lengths, [], True, meta={"microbatches": 0})
        fwd, bwd = Pr2959Flops.from_cost(cost).stage_fwd_bwd(lengths)
        with _gc_paused():
            return self._plan_batch(_Batch(lengths, layout, fwd, bwd, self.max_cp), cost)

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
        hist: dict[int, int] = {}
        for st in steps:
            for g in st.groups:
                hist[g.size] = hist.get(g.size, 0) + 1
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
            "groups_per_size": {str(c): v for c, v in sorted(hist.items())},
        }


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"policy.options.{name}", value, "a number > 0")
    return float(value)


class _Batch:
    """Per-batch tables shared by the candidates: lengths, FLOPs and the code's sample order."""

    def __init__(self, lengths: np.ndarray, layout: Layout, fwd: np.ndarray, bwd: np.ndarray,
                 max_cp: int | None = None) -> None:
        self.L = np.asarray(lengths, dtype=np.int64)
        self.layout = layout
        self.f, self.b = fwd, bwd
        self.n = int(self.L.size)
        self.M = layout.max_tokens_per_rank
        self.u = layout.min_cp
        self.K = layout.ranks_per_stage // self.u
        top = layout.max_dynamic_cp if max_cp is None else max(min(max_cp, layout.max_dynamic_cp), self.u)
        self.cmax_slots = max(1, top // self.u)
        # the code sorts the batch longest first (stable); every later order is a stable sort of this one
        self.order = np.argsort(-self.L, kind="stable")
        self.tok1 = per_rank_tokens(self.L, self.u)  # tokens per rank of each sample on one slot
        self.L_list, self.f_list, self.b_list = self.L.tolist(), fwd.tolist(), bwd.tolist()  # for per-sample loops

    def f_sum(self, idx: list[int]) -> float:
        """``float(f[idx].sum())``, bit for bit (see :func:`_np_sum`)."""
        return _np_sum(self.f, self.f_list, idx)

    def b_sum(self, idx: list[int]) -> float:
        """``float(b[idx].sum())``, bit for bit."""
        return _np_sum(self.b, self.b_list, idx)

    def tokens(self, i: int, slots: int) -> int:
        """Tokens per rank of sample ``i`` on a group of ``slots`` slots (padding counted)."""
        return per_rank_tokens_int(int(self.L[i]), slots * self.u)

    def need_slots(self, i: int) -> int:
        """Smallest power-of-two slot count that holds sample ``i`` within ``M`` tokens per rank."""
        cs = 1
        while cs < self.cmax_slots and self.tokens(i, cs) > self.M:
            cs *= 2
        return cs


@dataclass
class _LongGroup:
    start: int  # first slot
    slots: int
    members: list[int]
    fwd: float  # the solver's forward FLOPs of the whole group
    bwd: float  # the solver's backward estimate of the whole group
    tokens: int  # per rank


@dataclass
class _Candidate:
    """One ``m`` of the search, built phase by phase (see the module docstring)."""

    batch: _Batch
    m: int
    long_factor: float
    fill_slack: float
    bucket_target: str
    safe: bool
    valid: bool = True
    reason: str = ""
    makespan: float = math.inf
    peak_bytes: float = 0.0
    memory_ok: bool = True
    max_tokens: int = 0
    misaligned: int = 0
    overflow_blocks: int = 0
    clamped: int = 0
    n_leftovers: int = 0
    long_ids: list[int] = field(default_factory=list)
    groups: list[_LongGroup] = field(default_factory=list)
    slot_lists: list[list[int]] = field(default_factory=list)

    # ------------------------------------------------------------ phases
    def build(self) -> None:
        bt, lay = self.batch, self.batch.layout
        self.n_b = lay.pp * self.m * bt.K
        self.mu = float(bt.f.sum()) / self.n_b
        bubble = (lay.pp * self.m + lay.pp - 1) / (lay.pp * self.m)
        self.tau = self.mu * {"mean": 1.0, "iteration": bubble, "timeline": 1.0 / bubble}[self.bucket_target]
        is_long = bt.f[bt.order] > self.long_factor * self.mu
        if self.safe:  # safe mode: a sample one slot cannot hold is long
            is_long |= bt.tok1[bt.order] > bt.M
        self.long_ids = bt.order[is_long].tolist()
        self.normal = bt.order[~is_long]  # ids, largest first (an int64 array)
        sizes = self.long_sizes()
        self.place_long(sizes)
        self.fill_normal(self.n_b - sum(sizes))
        if self.valid:
            self.assign_slots()
        if self.valid:
            self.score()

    def _reject(self, reason: str) -> None:
        if self.valid:
            self.valid, self.reason = False, reason

    def long_sizes(self) -> list[int]:
        """Phase 1: slots per long sample (``nearest_pow2(ceil(f/τ))``, capped as the code caps it)."""
        bt = self.batch
        left = self.n_b
        out = []
        n_long = len(self.long_ids)
        for idx, i in enumerate(self.long_ids):
            want = nearest_pow2(math.ceil(float(bt.f[i]) / self.tau))
            c = min(want, bt.cmax_slots, bt.K, left - (n_long - 1 - idx))
            c2 = 1 << (max(c, 1).bit_length() - 1)  # dcpsim's groups are powers of two, at least one slot
            if self.safe:
                c2 = max(c2, bt.need_slots(i))
            self.clamped += c2 != c
            left -= c2
            out.append(c2)
        return out

    def place_long(self, sizes: list[int]) -> None:
        """Phase 2: an aligned block per long sample (most buckets left), filled with normal samples."""
        bt = self.batch
        blocks, self.overflow_blocks = _long_blocks(sizes, bt.K, bt.layout.pp * self.m)
        self._flag_all = self.n_b - sum(sizes) <= 0
        self._total_num = bt.K * pipeline_ratio(self.m, bt.layout.pp)
        self._pool = pool = _NormalPool(self.normal, bt.f, bt.L)
        self.groups = [self._long_group(i, cs, blk) for i, cs, blk in zip(self.long_ids, sizes, blocks, strict=True)]
        self.normal = pool.alive()
        self._pool = None

    def _long_group(self, i: int, cs: int, blk: int) -> _LongGroup:
        """Long sample ``i``'s group on block ``blk`` of ``cs`` slots: the normal samples it takes (largest
        first, under the code's three limits), its tokens per rank and the solver's FLOPs of the group."""
        bt, pool = self.batch, self._pool
        negf, nxt, size = pool.negf, pool.nxt, pool.size
        fi = bt.f_list[i]
        room = cs * self.tau - fi
        length_sum = bt.L_list[i]
        ranks = cs * bt.u
        pad = 2 * ranks if ranks > 1 else 1  # the padding rule (dcpsim.cost.padding), inlined
        tok = -(-length_sum // pad) * pad // ranks
        cap = bt.M * cs
        members, fsum, bsum = [i], 0.0 + fi, 0.0  # numpy sums fewer than 8 numbers left to right from 0.0
        p = 0  # position in the pool's fixed order (the code's index into its shrinking list)
        while self._flag_all or (pool.n_alive > self._total_num and length_sum < cap):
            x = room * self.fill_slack
            if x <= 0:
                break
            # first remaining normal sample (from p) with forward FLOPs < x: pool.first_below, inlined
            p = max(p, bisect_right(negf, -x))
            while nxt[p] != p:
                nxt[p] = p = nxt[nxt[p]]  # path halving
            if p >= size:
                break
            Lk = pool.lengths[p]
            t = -(-Lk // pad) * pad // ranks
            if self.safe and tok + t > bt.M:
                p += 1
                continue
            pool.remove(p)
            k, fk = pool.ids[p], -negf[p]
            room -= fk
            length_sum += Lk
            tok += t
            members.append(k)
            fsum += fk
            bsum += bt.b_list[k]
        if len(members) >= 8:  # numpy's pairwise summation
            fsum, bsum = bt.f_sum(members), bt.b_sum(members[1:])
        return _LongGroup(blk * cs, cs, members, fsum, LONG_BWD_FACTOR * fi + bsum, tok)

    def fill_normal(self, n_nb: int) -> None:
        """Phase 3: normal buckets, FLOPs-first under the mean-token target, then leftovers by tokens."""
        bt = self.batch
        if n_nb <= 0:
            if self.normal.size and not self.safe:
                self._reject("no normal bucket left for the normal samples")
            n_nb = 1 if self.normal.size else 0
        self.bf, self.bl = [0.0] * n_nb, [0] * n_nb
        self.seq: list[int] = []  # normal samples in the order they joined a bucket (an array once filled)
        self.dest: list[int] = []  # the bucket each joined
        if self.normal.size:
            ids = self.normal
            T = float(bt.L[ids].sum()) / n_nb
            cap = bt.M if self.safe else math.inf
            left = self._lowest_flops_first(ids, T, cap)
            self.n_leftovers = len(left)
            self._leftovers(sorted(left, key=bt.L_list.__getitem__, reverse=True), T, cap)
        self.bf, self.bl = np.array(self.bf), np.array(self.bl, dtype=np.int64)
        self.seq, self.dest = np.array(self.seq, dtype=np.int64), np.array(self.dest, dtype=np.int64)
        # the code adds 2·f to a bucket's backward estimate with every f it adds to its forward; doubling
        # is exact in binary floating point, so those sums are exactly twice the forward sums
        self.bb = NORMAL_BWD_FACTOR * self.bf

    def _lowest_flops_first(self, ids: np.ndarray, T: float, cap: float) -> list[int]:
        """Each normal sample (largest first) to the bucket with the lowest forward FLOPs among those it
        keeps within ``T`` tokens (and ``cap`` tokens per rank), ties to the lowest bucket; returns the
        samples none takes.

        A bucket fits sample ``i`` when its tokens are at most ``lim_i = min(floor(T) − L_i, cap − t_i)``
        (integers), which only grows as the samples shrink. The buckets that may fit sit in a heap by
        (FLOPs, index); one found too full is parked in a heap by tokens until ``lim`` reaches it, and
        one above the last sample's ``lim`` is dropped for good.
        """
        bt, bf, bl, seq, dest = self.batch, self.bf, self.bl, self.seq, self.dest
        lims = math.floor(T) - bt.L[ids]
        if cap != math.inf:
            lims = np.minimum(lims, int(cap) - bt.tok1[ids])
        dead = int(lims[-1])
        never = dead + 1
        # samples no bucket can hold (lim < 0) come first: leftovers; then each of the next samples opens
        # the lowest empty bucket (FLOPs 0, below any other) while one is left
        n0 = int(np.searchsorted(lims, 0))
        left = ids[:n0].tolist()
        E = min(len(bf), ids.size - n0)
        first = ids[n0:n0 + E]
        bf[:E], bl[:E] = bt.f[first].tolist(), bt.L[first].tolist()
        seq.extend(first.tolist())
        dest.extend(range(E))
        rest, rest_lims = ids[n0 + E:], lims[n0 + E:]
        done = self._bulk_lowest_flops(rest, rest_lims)  # in runs while provably the same, then one by one
        rest, rest_lims = rest[done:], rest_lims[done:]
        active = [(bf[k], k) for k in range(len(bf)) if bl[k] <= dead]
        heapq.heapify(active)
        parked: list[tuple[int, int]] = []
        pmin = never  # tokens of the emptiest parked bucket
        pop, push, replace = heapq.heappop, heapq.heappush, heapq.heapreplace
        for i, lim, Li, fi in zip(rest.tolist(), rest_lims.tolist(), bt.L[rest].tolist(), bt.f[rest].tolist(),
                                  strict=True):
            while pmin <= lim:
                k = pop(parked)[1]
                push(active, (bf[k], k))
                pmin = parked[0][0] if parked else never
            while active:
                v, k = active[0]
                b = bl[k]
                if b <= lim:
                    break
                pop(active)
                push(parked, (b, k))
                if b < pmin:
                    pmin = b
            else:
                left.append(i)
                continue
            bf[k] = v = v + fi  # the heap key is the bucket's FLOPs
            bl[k] = b = b + Li
            seq.append(i)
            dest.append(k)
            if b > dead:
                pop(active)
            else:
                replace(active, (v, k))
        return left

    def _bulk_lowest_flops(self, ids: np.ndarray, lims: np.ndarray) -> int:
        """:meth:`_lowest_flops_first`'s placements in runs while provably its decision; returns how many of
        ``ids`` (their ``lims``) were placed.

        The next ``k`` samples go to the ``k`` buckets of lowest (FLOPs, index) in that order when each
        of those buckets fits its sample (tokens ``<= lim``) and every bucket given one in the run ends
        above the next bucket's FLOPs (so that bucket is still the lowest that fits). The sums are the
        heap loop's (one addition per sample, in order). Stops at the first run shorter than
        ``_BULK_MIN`` (the heap loop takes over from there, from the same state).
        """
        bt = self.batch
        n, nb = ids.size, len(self.bf)
        if n == 0 or nb == 0:
            return 0
        bf, bl = np.asarray(self.bf, dtype=np.float64), np.asarray(self.bl, dtype=np.int64)
        fs, Ls = bt.f[ids].astype(np.float64), bt.L[ids].astype(np.int64)
        lims = np.asarray(lims, dtype=np.int64)
        ks = np.arange(nb)
        pos = 0
        placed: list[np.ndarray] = []
        while pos < n:
            k = min(nb, n - pos)
            e = np.lexsort((ks, bf))[:k]  # lowest FLOPs first, ties to the lowest bucket
            new = bf[e] + fs[pos:pos + k]
            good = bl[e] <= lims[pos:pos + k]
            good[1:] &= np.minimum.accumulate(new)[:-1] > bf[e[1:]]
            bad = np.flatnonzero(~good)
            run = k if bad.size == 0 else int(bad[0])
            if run:
                e = e[:run]
                bf[e] = new[:run]
                bl[e] += Ls[pos:pos + run]
                placed.append(e)
                pos += run
            if run < _BULK_MIN:
                break
        if pos:
            self.bf[:], self.bl[:] = bf.tolist(), bl.tolist()
            self.seq.extend(ids[:pos].tolist())
            self.dest.extend(np.concatenate(placed).tolist())
        return pos

    def _leftovers(self, left: list[int], T: float, cap: float) -> None:
        """Samples no bucket took: to the bucket whose tokens end closest to ``T`` (safe mode: an extra bucket).

        The code ranks the buckets by tokens once and takes the first of that ranking with the
        smallest ``(tokens + L − T)²``; here the buckets sit in a table sorted by token count.
        """
        if not left:
            return
        table = _TokenTable(self.bl)
        Ls, fs = self.batch.L_list, self.batch.f_list
        limits = [None] * len(left) if cap == math.inf else (int(cap) - self.batch.tok1[left]).tolist()
        bf, bl, seq, dest = self.bf, self.bl, self.seq, self.dest
        for i, limit in zip(left, limits, strict=True):
            Li = Ls[i]
            k = table.closest(Li, T, limit)
            if k < 0:  # safe mode: an extra bucket, ranked last
                k = len(bl)
                bf.append(0.0 + fs[i])
                bl.append(Li)
                table.add(k, Li)
            else:
                bf[k] += fs[i]
                bl[k] = b = bl[k] + Li
                table.move(k, b - Li, b)
            seq.append(i)
            dest.append(k)

    def assign_slots(self) -> None:
        """Phase 4: long groups first on their blocks, then normal buckets (ascending FLOPs) to the lightest slot."""
        bt = self.batch
        lists, fsum = self._long_lists()
        if not self._deal_buckets(lists, fsum, bt.layout.pp * self.m):
            return
        self.slot_lists = lists
        toks = [g.tokens for g in self.groups] + self._normal_tokens().tolist()
        self.max_tokens = int(max(toks, default=0))
        if self.max_tokens > bt.M:
            self._reject(f"a group holds {self.max_tokens} tokens per rank > max_tokens_per_rank {bt.M}")

    def _long_lists(self) -> tuple[list[list[int]], list[float]]:
        """Each slot's list of long groups (``~g``, in placement order) and its forward FLOPs from them
        (each group's share added slot by slot in placement order, as the code adds them)."""
        K, ng = self.batch.K, len(self.groups)
        if not ng:
            return [[] for _ in range(K)], [0.0] * K
        starts = np.fromiter((g.start for g in self.groups), dtype=np.int64, count=ng)
        width = np.fromiter((g.slots for g in self.groups), dtype=np.int64, count=ng)
        share = np.fromiter((g.fwd for g in self.groups), dtype=np.float64, count=ng) / width
        gid = np.repeat(np.arange(ng), width)
        slot = np.repeat(starts, width) + (np.arange(gid.size) - np.repeat(np.cumsum(width) - width, width))
        fsum = np.zeros(K)
        np.add.at(fsum, slot, share[gid])  # in order: each slot's adds as the code makes them
        order = np.argsort(slot, kind="stable")
        codes = (~gid[order]).tolist()
        ends = np.cumsum(np.bincount(slot, minlength=K)).tolist()
        return [codes[a:b] for a, b in zip([0, *ends][:K], ends, strict=True)], fsum.tolist()

    def _deal_buckets(self, lists: list[list[int]], fsum: list[float], per_slot: int) -> bool:
        """Normal buckets, ascending forward FLOPs, each to the slot with the least FLOPs among those with
        fewer than ``per_slot`` buckets (ties: lowest slot); False when the candidate is rejected.

        Empty buckets (FLOPs 0) come first in that order: outside safe mode the code rejects the
        candidate at the first one, in safe mode they are skipped.
        """
        count = [len(x) for x in lists]
        heap = [(f, s) for s, f in enumerate(fsum) if count[s] < per_slot]
        heapq.heapify(heap)
        overfull = False  # safe mode, every slot full: the lightest slot of all (the code's fallback)
        pop, replace = heapq.heappop, heapq.heapreplace
        order = np.argsort(self.bf, kind="stable")
        filled = np.bincount(self.dest, minlength=len(self.bf))[order] > 0
        if not filled.all() and not self.safe:
            self._reject("an empty normal bucket")
            return False
        for k, fk in zip(order[filled].tolist(), self.bf[order[filled]].tolist(), strict=True):
            if not heap:
                if not self.safe:
                    self._reject("more buckets than slots can take")
                    return False
                overfull = True
                heap = [(f, s) for s, f in enumerate(fsum)]
                heapq.heapify(heap)
            f, s = heap[0]
            lists[s].append(k)
            fsum[s] = f = f + fk
            count[s] += 1
            if overfull or count[s] < per_slot:
                replace(heap, (f, s))
            else:
                pop(heap)
        return True

    def _normal_tokens(self) -> np.ndarray:
        """Tokens per rank of every normal bucket (``min_cp`` ranks, each sample padded on its own)."""
        return np.bincount(self.dest, weights=self.batch.tok1[self.seq], minlength=len(self.bf)).astype(np.int64)

    def members(self) -> list[list[int]]:
        """The samples of every normal bucket, in the order they joined it."""
        dest = np.asarray(self.dest, dtype=np.int64)
        by = np.asarray(self.seq, dtype=np.int64)[np.argsort(dest, kind="stable")]
        ends = np.cumsum(np.bincount(dest, minlength=len(self.bf))).tolist()
        flat = by.tolist()
        return [flat[a:b] for a, b in zip([0, *ends][: len(ends)], ends, strict=True)]

    def _slot_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slot, position, code) of every entry of the slots' lists (code: bucket ``k``, or ``~g`` for long group ``g``)."""
        lens = [len(x) for x in self.slot_lists]
        code = np.fromiter(itertools.chain.from_iterable(self.slot_lists), dtype=np.int64, count=sum(lens))
        slot = np.repeat(np.arange(len(lens)), lens)
        pos = np.arange(code.size) - np.repeat(np.cumsum(lens) - lens, lens)
        return slot, pos, code

    def score(self) -> None:
        """Phase 5: the makespan of each slot's list in the PR's pipeline simulation (solver FLOPs), largest over slots."""
        slot, pos, code = self._slot_table()
        n = max((len(x) for x in self.slot_lists), default=0)
        fw = np.zeros((n, self.batch.K))
        bw = np.zeros((n, self.batch.K))
        g = code < 0
        if g.any():
            per = np.array([x.slots for x in self.groups], dtype=np.float64)
            gid = ~code[g]
            fw[pos[g], slot[g]] = (np.array([x.fwd for x in self.groups]) / per)[gid]
            bw[pos[g], slot[g]] = (np.array([x.bwd for x in self.groups]) / per)[gid]
        b = ~g
        fw[pos[b], slot[b]] = self.bf[code[b]]
        bw[pos[b], slot[b]] = self.bb[code[b]]
        self.makespan = float(pr_pipeline_makespan(fw, bw, self.batch.layout.pp).max())

    def steps(self) -> list[Step]:
        """Phase 6: microbatch ``k`` of a slot is its ``k``-th bucket; a long group runs where all its slots reach it."""
        slot, pos, code = self._slot_table()
        g = code < 0
        if g.any():  # a long group the code has at different list positions on its slots
            lo = np.full(len(self.groups), np.iinfo(np.int64).max)
            hi = np.full(len(self.groups), -1)
            np.minimum.at(lo, ~code[g], pos[g])
            np.maximum.at(hi, ~code[g], pos[g])
            self.misaligned += int(np.count_nonzero(lo != hi))
        if self.misaligned:
            return self._realigned_steps()
        # every long group sits at one list index on all its slots, so each entry runs at its index
        first = np.array([gr.start for gr in self.groups], dtype=np.int64)[~code[g]] == slot[g]
        keep = np.flatnonzero(~g)
        keep = np.sort(np.concatenate([keep, np.flatnonzero(g)[first]]))
        order = keep[np.lexsort((slot[keep], pos[keep]))]
        u, groups, members = self.batch.u, self.groups, self.members()
        out: list[Step] = []
        cur, last = [], 0
        for c, s, p in zip(code[order].tolist(), slot[order].tolist(), pos[order].tolist(), strict=True):
            if p != last:
                out.append(Step(cur))
                cur, last = [], p
            if c < 0:
                gr = groups[~c]
                cur.append(Group(gr.start * u, gr.slots * u, list(gr.members)))
            else:
                cur.append(Group(s * u, u, members[c]))
        if cur:
            out.append(Step(cur))
        return out

    def _realigned_steps(self) -> list[Step]:
        """:meth:`steps` when a long group is misaligned: it runs at the latest of its slots' next
        positions, and the other slots' next buckets move into the gap."""
        bt = self.batch
        u = bt.u
        nxt = np.zeros(bt.K, dtype=np.int64)
        taken: list[set[int]] = [set() for _ in range(bt.K)]
        at: dict[int, list[Group]] = {}
        for gr in self.groups:
            sl = slice(gr.start, gr.start + gr.slots)
            p = int(nxt[sl].max())
            nxt[sl] = p + 1
            for s in range(gr.start, gr.start + gr.slots):
                taken[s].add(p)
            at.setdefault(p, []).append(Group(gr.start * u, gr.slots * u, list(gr.members)))
        members = self.members()
        for s, lst in enumerate(self.slot_lists):
            p, tk = 0, taken[s]
            for k in lst:
                if k < 0:
                    continue
                while p in tk:
                    p += 1
                at.setdefault(p, []).append(Group(s * u, u, members[k]))
                p += 1
        return [Step(sorted(at[k], key=lambda gr: gr.start)) for k in sorted(at)]


_BULK_MIN = 64  # _Candidate._bulk_lowest_flops: runs shorter than this hand over to the heap loop


def _sq(x: float) -> float:
    """``x²`` as numpy's ``x ** 2`` computes it (one rounded product)."""
    return x * x


def _np_sum(values: np.ndarray, listed: list[float], idx: list[int]) -> float:
    """``float(values[idx].sum())`` bit for bit (``listed`` = ``values.tolist()``): numpy adds fewer than
    8 numbers left to right from 0.0 (its pairwise summation starts at 8), so a plain loop gives the
    same float without numpy's call cost."""
    if len(idx) >= 8:
        return float(values[idx].sum())
    s = 0.0
    for i in idx:
        s += listed[i]
    return s


def _long_blocks(sizes: list[int], slots: int, per_slot: int) -> tuple[list[int], int]:
    """Aligned block (index among the blocks of its size) of every long sample, and how many found none free.

    The code gives each long sample, in order, the first aligned block of ``c`` slots whose fullest
    slot has the most buckets left (``per_slot`` at the start), or the last block when none has one
    left. Over a run of samples of one size that rule visits, for ``v`` from the largest block minimum
    down to 0, every block whose minimum is at least ``v``, in index order (a block taken at level
    ``v`` drops to ``v − 1``, below the blocks still at ``v``), so a run is computed at once.
    """
    remain = np.full(slots, per_slot, dtype=np.int64)
    out: list[int] = []
    overflow = 0
    for cs, run in itertools.groupby(sizes):
        r = len(list(run))
        nb = slots // cs
        view = remain[: nb * cs].reshape(nb, cs)
        mins = view.min(axis=1)
        picks: list[np.ndarray] = []
        got, v = 0, int(mins.max())
        while v >= 0 and got < r:
            level = np.flatnonzero(mins >= v)[: r - got]
            picks.append(level)
            got += level.size
            v -= 1
        extra = r - got  # the code indexes the last block
        chosen = np.concatenate([*picks, np.full(extra, nb - 1, dtype=np.int64)])
        view -= np.bincount(chosen, minlength=nb)[:, None]
        out.extend(chosen.tolist())
        overflow += extra
    return out, overflow


class _NormalPool:
    """The normal samples (largest first) long groups take fillers from: the code's list with ``pop(j)``,
    as a fixed order with a next-remaining pointer per position (union-find), so a removal costs O(α)."""

    def __init__(self, ids: np.ndarray, f: np.ndarray, lengths: np.ndarray) -> None:
        self.arr = ids
        self.ids = ids.tolist()
        self.lengths = lengths[ids].tolist()
        self.negf = (-f[ids]).tolist()  # ascending: the samples are longest first
        self.nxt = list(range(len(ids) + 1))
        self.n_alive = self.size = len(ids)
        self.removed: list[int] = []

    def _find(self, p: int) -> int:
        nxt, r = self.nxt, p
        while nxt[r] != r:
            r = nxt[r]
        while p != r:
            nxt[p], p = r, nxt[p]
        return r

    def first_below(self, x: float, p: int) -> int:
        """First remaining position ``>= p`` whose forward FLOPs are below ``x``; −1 when none."""
        q = bisect_right(self.negf, -x)
        q = self._find(q if q > p else p)
        return q if q < self.size else -1

    def remove(self, p: int) -> None:
        self.nxt[p] = p + 1
        self.n_alive -= 1
        self.removed.append(p)

    def alive(self) -> np.ndarray:
        """The remaining samples, in order."""
        return np.delete(self.arr, self.removed) if self.removed else self.arr


class _TokenTable:
    """Normal buckets by token count, for the code's leftover rule: the bucket with the smallest
    ``(tokens + L − T)²``, ties to the first in the code's one ranking by tokens (stable, made once).

    Distinct token counts sit in a sorted list; each keeps a heap of its buckets' ranks.
    """

    def __init__(self, tokens: list[int]) -> None:
        arr = np.asarray(tokens, dtype=np.int64)
        rank = np.argsort(arr, kind="stable")
        inverse = np.empty_like(rank)
        inverse[rank] = np.arange(rank.size)
        self.bucket = rank.tolist()  # rank -> bucket
        self.rank = inverse.tolist()  # bucket -> rank
        vals, first, count = np.unique(arr[rank], return_index=True, return_counts=True)
        self.vals = vals.tolist()
        self.at: dict[int, list[int]] = {  # the ranks of each token count (consecutive: already heaps)
            v: list(range(a, a + c)) for v, a, c in zip(self.vals, first.tolist(), count.tolist(), strict=True)}

    def closest(self, Li: int, T: float, limit: int | None) -> int:
        """Bucket (among those with tokens ``<= limit``) whose tokens + ``Li`` end closest to ``T``; −1 if none.

        The score ``((tokens + Li) − T)²`` (the code's floats) falls up to the first token count ``j`` with
        ``tokens + Li >= T`` and rises from it, so its minimum is at ``j − 1`` or ``j``, or on a run of
        equal scores around them; the first-ranked bucket of those token counts wins.
        """
        vals = self.vals
        nf = len(vals) if limit is None else bisect_right(vals, limit)
        if nf == 0:
            return -1
        j = bisect_left(vals, math.ceil(T) - Li, 0, nf)
        lo, hi = max(j - 1, 0), min(j, nf - 1)
        d_lo, d_hi = (vals[lo] + Li) - T, (vals[hi] + Li) - T
        best = min(d_lo * d_lo, d_hi * d_hi)
        if d_lo * d_lo != best:
            lo = hi
        elif d_hi * d_hi != best:
            hi = lo
        while lo > 0 and _sq((vals[lo - 1] + Li) - T) == best:
            lo -= 1
        while hi + 1 < nf and _sq((vals[hi + 1] + Li) - T) == best:
            hi += 1
        if lo == hi:
            return self.bucket[self.at[vals[lo]][0]]
        return self.bucket[min(self.at[vals[x]][0] for x in range(lo, hi + 1))]

    def add(self, k: int, tokens: int) -> None:
        """A new bucket, ranked last."""
        self.rank.append(len(self.bucket))
        self.bucket.append(k)
        self._push(self.rank[k], tokens)

    def move(self, k: int, old: int, new: int) -> None:
        """Bucket ``k`` (the first-ranked of its token count ``old``) now holds ``new`` tokens."""
        heap = self.at[old]
        heapq.heappop(heap)
        if not heap:
            del self.at[old]
            del self.vals[bisect_left(self.vals, old)]
        self._push(self.rank[k], new)

    def _push(self, r: int, tokens: int) -> None:
        if tokens not in self.at:
            self.at[tokens] = []
            insort(self.vals, tokens)
        heapq.heappush(self.at[tokens], r)
