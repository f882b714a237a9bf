"""``dynamic-pr2959``'s own cost model: the FLOPs function and the pipeline simulators it scores plans with.

These are the pieces of Megatron-LM pull request #2959 the planner (:mod:`dcpsim.policies.pr2959`) compares
candidates by: :class:`Pr2959Flops` (the code's ``TFLOPs``), :func:`one_f_one_b_makespan` (its 1F1B estimate)
and :func:`pr_pipeline_makespan` (its pipeline simulator). Units: FLOPs; makespans are in the same FLOPs units.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.pipeline import makespan as pipeline_makespan

GEMM_BWD_FACTOR = 2.7  # backward / forward FLOPs of the linear terms (PR #2959, fwd_flops_to_bwd_flops)
ATTN_BWD_FACTOR = 2.77  # backward / forward FLOPs of attention (same)
LONG_BWD_FACTOR = 3.0  # the solver's backward estimate of a long sample (× its forward)
NORMAL_BWD_FACTOR = 2.0  # the solver's backward estimate of a sample in a normal bucket (× its forward; a power of two, see fill_normal)


def nearest_pow2(n: int) -> int:
    """The power of two nearest ``n`` (ties round up; 1 for ``n < 1``), as the PR's helper rounds."""
    if n < 1:
        return 1
    lo = 1 << (int(n).bit_length() - 1)
    hi = lo << 1
    return lo if n - lo < hi - n else hi


def _pow2_floor(c: np.ndarray) -> np.ndarray:
    """The largest power of two ``<= c`` of each positive integer (``1 << (c.bit_length() - 1)``)."""
    return np.ldexp(1.0, np.frexp(np.asarray(c, dtype=np.float64))[1] - 1).astype(np.int64)


def _nearest_pow2_array(q: np.ndarray) -> np.ndarray:
    """:func:`nearest_pow2` of each whole number in the float array ``q`` (exact below 2**53)."""
    qi = np.maximum(q, 1.0).astype(np.int64)
    lo = _pow2_floor(qi)
    return np.where(q < 1, 1, np.where(qi - lo < 2 * lo - qi, lo, 2 * lo))


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


@lru_cache(maxsize=256)
def _pr_pipeline_program(n: int, pp: int) -> tuple[tuple[tuple[int, int, tuple[int, ...], int], ...], int, tuple[int, ...]]:
    """:func:`_pr_pipeline_graph`'s ops on a few buffer rows: ``(is_backward, microbatch, predecessor rows,
    row)`` per op in the same order, the number of rows, and the rows of the ops no op follows. An op's
    row is reused once its last reader has run (the row of an op is taken before its predecessors' are
    given back, so no op writes a row it still reads)."""
    ops = _pr_pipeline_graph(n, pp)
    last: dict[int, int] = {}
    for i, (_, _, _, preds) in enumerate(ops):
        for q in preds:
            last[q] = i
    row_of: dict[int, int] = {}
    free: list[int] = []
    rows = 0
    prog = []
    sinks = []
    for i, (v, d, k, preds) in enumerate(ops):
        prow = tuple(row_of[q] for q in preds)
        if free:
            r = free.pop()
        else:
            r, rows = rows, rows + 1
        prog.append((d, k, prow, r))
        free.extend(row_of[q] for q in preds if last[q] == i)
        row_of[v] = r
        if v not in last:
            sinks.append(r)
    return tuple(prog), rows, tuple(sinks)


def pr_pipeline_makespan(fwd, bwd, pp: int) -> np.ndarray:
    """Makespan of the PR's simulated pipeline for each column (slot) independently (see :func:`_pr_pipeline_graph`).

    ``fwd``, ``bwd``: ``(n_microbatches, n_columns)`` durations (``>= 0``) of one stage (every stage alike).
    The ends live in a few rows reused along the sweep (:func:`_pr_pipeline_program`), so the work stays
    in cache at thousands of columns.
    """
    fwd = np.asarray(fwd, dtype=np.float64)
    bwd = np.asarray(bwd, dtype=np.float64)
    n, cols = fwd.shape
    if n == 0:
        return np.zeros(cols)
    prog, rows, sinks = _pr_pipeline_program(n, int(pp))
    buf = np.empty((rows, cols))
    maximum, add = np.maximum, np.add
    R, dur = list(buf), (list(fwd), list(bwd))  # row views, made once
    for d, k, preds, r in prog:  # each op ends at its latest predecessor's end + its duration
        row = R[r]
        if len(preds) == 1:  # its predecessor's end + its duration, in one pass
            add(R[preds[0]], dur[d][k], out=row)
            continue
        if preds:
            maximum(R[preds[0]], R[preds[1]], out=row)
            for q in preds[2:]:
                maximum(row, R[q], out=row)
        else:
            row[:] = 0.0
        add(row, dur[d][k], out=row)
    # every op's end is at most its successors' (durations are >= 0): the latest is an op no op follows
    return buf[list(sinks)].max(axis=0)
