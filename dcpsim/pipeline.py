"""The one pipeline schedule of dcpsim: op order per pipeline rank (1F1B and interleaved 1F1B) and its evaluation.

Everything that needs the order of forwards and backwards on a pipeline
(the simulator's dependency graph, its exact fast path, the policies' plan
scoring, the bubble accounting) takes it from here; nothing else builds a
1F1B order. This module imports only numpy and :mod:`dcpsim.errors`.

**Order** (Megatron-LM, ``megatron/core/pipeline_parallel/schedules.py``,
read at commit d98e8a6; the orders are checked against Megatron's own
functions run outside the project, see ``tests/data/megatron_pipeline_orders.json``).
A pipeline of ``pp`` ranks runs ``m`` microbatches; with ``vp`` virtual
stages per rank (model chunks), rank ``p`` holds chunks ``c = 0..vp-1``, and
chunk ``c`` of rank ``p`` is virtual stage ``s = c·pp + p`` (Megatron's
layer assignment: virtual stage ``s`` holds layers ``s·L/(pp·vp) ..``).

* ``vp = 1`` (``forward_backward_pipelining_without_interleaving``): rank
  ``p`` runs ``W = min(pp − 1 − p, m)`` warm-up forwards, then pairs
  (forward ``W + i``, backward ``i``), then the remaining backwards.
* ``vp > 1`` (``forward_backward_pipelining_with_interleaving``): the
  *virtual microbatch* sequence is Megatron's schedule table: microbatches
  are taken in groups of ``N`` (``microbatch_group_size_per_vp_stage``,
  default ``pp``); within a group every chunk runs the group's microbatches
  (chunk 0 of all of them, then chunk 1, ...); the last group takes the
  remaining microbatches. Virtual microbatch ``j`` is (microbatch, chunk)
  of the table for forwards; for backwards the chunk is reversed
  (``vp − 1 − chunk``), and a chunk's backwards come in the order of its
  forwards. Rank ``p`` runs ``W = 2·(pp − 1 − p) + (vp − 1)·N`` warm-up
  forwards (at most all ``vp·m``), then pairs (forward ``W + i``, backward
  ``i``), then the remaining backwards.

**Microbatch rule** (interleaved only; Megatron raises otherwise):
``pp ≤ N ≤ m`` and ``m mod N`` is 0 or at least ``pp``. With the default
``N = pp`` this is: ``m`` a positive multiple of ``pp`` (older Megatron
versions stated exactly that).

**Dependencies** of op (rank ``p``, direction, microbatch ``k``, chunk ``c``),
virtual stage ``s``: the rank's previous op; a forward also the forward of
``k`` on virtual stage ``s − 1`` plus the transfer between them (rank
``p − 1``, or for ``p = 0, c > 0`` the wrap-around from rank ``pp − 1``); a
backward also the backward of ``k`` on ``s + 1`` plus the transfer. An op
starts when all of them are done.

**Evaluation.** :func:`chain_times` evaluates independent pipelines
(columns) node by node in a topological order, each node vectorised over the
columns. :func:`group_times` evaluates a plan whose microbatches are groups
of stage ranks that may change between microbatches (dynamic CP): a group's
op starts when every member rank has finished its previous op and its
pipeline input has arrived; ranks that a microbatch leaves out skip it.
Both are exact longest-path evaluations of the same dependency graph that
the event simulation runs.

Closed forms (``m`` equal microbatches of forward ``f`` and backward ``b``
per stage, no transfers): 1F1B takes ``(m + pp − 1)·(f + b)``; interleaved
1F1B takes ``(m + (pp − 1)/vp)·(f + b)``, a bubble of ``(pp − 1)/(vp·m)``
of the ideal time (Narayanan et al., SC21).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.pipeline_tiling import GroupClocks, aligned_tiling, op_arrays

FWD, BWD = 0, 1


# ------------------------------------------------------------------ rules
def default_group(pp: int, group: int | None) -> int:
    """Megatron's ``microbatch_group_size_per_vp_stage`` (default: ``pp``)."""
    return int(pp if group is None else group)


def microbatch_rule_violation(m: int, pp: int, vp: int = 1, group: int | None = None) -> str | None:
    """Why ``m`` microbatches cannot run on ``pp`` ranks with ``vp`` chunks (``None`` if they can)."""
    if m < 1:
        return f"{m} microbatches; a pipeline needs at least one"
    if vp == 1:
        return None
    n = default_group(pp, group)
    if not pp <= n <= m:
        return (f"interleaved pipeline (vp={vp}) needs pp <= microbatch group size <= microbatches; got pp={pp}, "
                f"group={n}, microbatches={m} (Megatron requires the microbatch count to be a multiple of pp "
                f"with the default group size)")
    r = m % n
    if 0 < r < pp:
        return (f"interleaved pipeline (vp={vp}): {m} microbatches leave a last group of {r} < pp={pp} "
                f"(Megatron requires microbatches mod group size ({n}) to be 0 or >= pp)")
    return None


def check_microbatches(m: int, pp: int, vp: int = 1, group: int | None = None) -> None:
    """Raise :class:`InfeasibleError` (kind ``"pipeline"``) when Megatron would refuse ``m`` microbatches."""
    why = microbatch_rule_violation(m, pp, vp, group)
    if why is not None:
        raise InfeasibleError("pipeline", why)


def valid_microbatch_count(m: int, pp: int, vp: int = 1, group: int | None = None) -> int:
    """The smallest microbatch count ``>= m`` that the rule allows (``m`` itself for ``vp = 1``)."""
    m = max(int(m), 1)
    while microbatch_rule_violation(m, pp, vp, group) is not None:
        m += 1
    return m


def vp_from_layers_per_virtual_stage(n_layers: int, pp: int, layers_per_virtual_stage: int) -> int:
    """Megatron's ``--num-layers-per-virtual-pipeline-stage`` as ``vp = layers / (pp · that)``."""
    if layers_per_virtual_stage < 1 or n_layers % pp or (n_layers // pp) % layers_per_virtual_stage:
        raise ConfigError("num_layers_per_virtual_pipeline_stage", layers_per_virtual_stage,
                          f"a divisor of the layers per pipeline stage ({n_layers}/{pp})")
    return n_layers // pp // layers_per_virtual_stage


# ------------------------------------------------------------------ order
def warmup_forwards(rank: int, pp: int, m: int, vp: int = 1, group: int | None = None) -> int:
    """Warm-up forwards of pipeline rank ``rank`` (see the module docstring)."""
    if vp == 1:
        return min(pp - 1 - rank, m)
    w = 2 * (pp - 1 - rank) + (vp - 1) * default_group(pp, group)
    return min(w, vp * m)


def virtual_table(m: int, vp: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of each virtual microbatch in Megatron's forward order."""
    out: list[tuple[int, int]] = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        out.extend((k, c) for c in range(vp) for k in range(lo, hi))
    return out


def stage_order(rank: int, pp: int, m: int, vp: int = 1, group: int | None = None) -> np.ndarray:
    """Op order of pipeline rank ``rank``: ``(n_ops, 3)`` int array of (direction, microbatch, chunk)."""
    check_microbatches(m, pp, vp, group)
    table = virtual_table(m, vp, default_group(pp, group)) if vp > 1 else [(k, 0) for k in range(m)]
    total = len(table)
    fwd = [(FWD, k, c) for k, c in table]
    done = [0] * vp  # backwards issued per chunk (a chunk's backwards follow its forwards' order)
    bwd = []
    for _, c in table:
        cb = vp - 1 - c
        bwd.append((BWD, done[cb], cb))
        done[cb] += 1
    w = warmup_forwards(rank, pp, m, vp, group)
    ops = fwd[:w]
    for i in range(total - w):
        ops.append(fwd[w + i])
        ops.append(bwd[i])
    ops.extend(bwd[total - w:])
    return np.asarray(ops, dtype=np.int64).reshape(-1, 3)


@dataclass(frozen=True)
class PipelineSchedule:
    """The op orders of all ranks and the dependency graph over them, nodes in a topological order.

    Node ``i`` (``0 .. 2·pp·vp·m − 1``) is op ``(rank[i], direction[i], microbatch[i], chunk[i])`` on
    virtual stage ``stage[i] = chunk·pp + rank``; ``prev[i]`` is the node before it on its rank and
    ``dep[i]`` its pipeline input (``-1``: none); both come before ``i``. ``last[p]`` is rank ``p``'s
    final node.
    """

    pp: int
    vp: int
    m: int
    group: int
    orders: tuple[np.ndarray, ...]
    rank: np.ndarray
    direction: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray
    stage: np.ndarray
    prev: np.ndarray
    dep: np.ndarray
    last: np.ndarray

    @property
    def n_stages(self) -> int:
        """Virtual stages ``pp · vp``."""
        return self.pp * self.vp

    @property
    def n_nodes(self) -> int:
        return int(self.rank.size)


@lru_cache(maxsize=512)
def pipeline_schedule(pp: int, m: int, vp: int = 1, group: int | None = None) -> PipelineSchedule:
    """The schedule of ``m`` microbatches on ``pp`` ranks with ``vp`` chunks each (cached)."""
    pp, m, vp = int(pp), int(m), int(vp)
    if pp < 1 or vp < 1:
        raise ConfigError("parallel.pp/vp", (pp, vp), "positive integers")
    n = default_group(pp, group)
    orders = tuple(stage_order(p, pp, m, vp, n) for p in range(pp))
    V = pp * vp
    # template id of (virtual stage, direction, microbatch), at done[(s * 2 + d) * m + k]
    done = [-1] * (V * 2 * m)
    ops = [o.tolist() for o in orders]
    pos = [0] * pp
    rows: list[tuple[int, int, int, int, int, int, int]] = []
    last_on_rank = [-1] * pp
    left = 2 * V * m
    while left:
        moved = False
        for p in range(pp):
            o = ops[p]
            while pos[p] < len(o):
                d, k, c = o[pos[p]]
                s = c * pp + p
                t = s - 1 if d == FWD else s + 1
                dep = done[(t * 2 + d) * m + k] if 0 <= t < V else -1
                if 0 <= t < V and dep < 0:
                    break
                i = len(rows)
                rows.append((p, d, k, c, s, last_on_rank[p], dep))
                done[(s * 2 + d) * m + k] = i
                last_on_rank[p] = i
                pos[p] += 1
                left -= 1
                moved = True
        if not moved:  # pragma: no cover - guarded by the microbatch rule
            raise InfeasibleError("pipeline", f"the schedule of {m} microbatches on pp={pp}, vp={vp} deadlocks")
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 7)
    return PipelineSchedule(pp=pp, vp=vp, m=m, group=n, orders=orders, rank=a[:, 0], direction=a[:, 1],
                            microbatch=a[:, 2], chunk=a[:, 3], stage=a[:, 4], prev=a[:, 5], dep=a[:, 6],
                            last=np.asarray(last_on_rank, dtype=np.int64))


# ------------------------------------------------------------------ durations per virtual stage
def chunk_durations(stage_s: np.ndarray, vp: int, head_s: np.ndarray | None = None,
                    first_s: np.ndarray | None = None) -> np.ndarray:
    """Per virtual stage durations ``(pp·vp, ...)`` from per-rank ones ``(pp, ...)``.

    Each rank's time (its layers, plus ``head_s`` on the last rank and ``first_s`` on the first) is split
    evenly over its ``vp`` chunks, except that the head goes to the last virtual stage only and
    ``first_s`` (the embedding) to the first only.
    """
    stage_s = np.asarray(stage_s, dtype=np.float64)
    if vp == 1:
        return stage_s.copy()  # exactly the rank's time (no split, no rounding)
    pp = stage_s.shape[0]
    body = stage_s.copy()
    if head_s is not None:
        body[pp - 1] = body[pp - 1] - head_s
    if first_s is not None:
        body[0] = body[0] - first_s
    out = np.concatenate([body / vp] * vp, axis=0)
    if head_s is not None:
        out[-1] = out[-1] + head_s
    if first_s is not None:
        out[0] = out[0] + first_s
    return out


def link_of_transfer(pp: int, vp: int) -> np.ndarray:
    """For each transfer between virtual stages ``s`` and ``s + 1``: the physical link, ``p`` for rank
    ``p → p + 1`` (``0 .. pp − 2``) or ``pp − 1`` for the wrap-around from the last rank to the first."""
    s = np.arange(pp * vp - 1)
    return s % pp


# ------------------------------------------------------------------ evaluation: independent pipelines
def chain_times(sched: PipelineSchedule, fwd_s, bwd_s, xfer_s=None, *,
                starts: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """(start, finish) of every node, ``(n_nodes, N)``, for ``N`` independent pipelines (start None when not
    ``starts``).

    ``fwd_s``, ``bwd_s``: broadcastable to ``(pp·vp, m, N)`` (virtual stage, microbatch, column);
    ``xfer_s``: broadcastable to ``(pp·vp − 1, m, N)``, the transfer between virtual stages ``s`` and
    ``s + 1`` (the same both ways), or ``None`` for free transfers.
    """
    V, m = sched.n_stages, sched.m
    f = np.asarray(fwd_s, dtype=np.float64)
    b = np.asarray(bwd_s, dtype=np.float64)
    if f.ndim != 3 or b.ndim != 3:
        raise ValueError("fwd_s and bwd_s must be 3-d, broadcastable to (pp*vp, m, N)")
    n_col = int(np.broadcast_shapes(f.shape, b.shape)[-1])
    f = np.broadcast_to(f, (V, m, n_col))
    b = np.broadcast_to(b, (V, m, n_col))
    x = None
    if xfer_s is not None and V > 1:
        x = np.broadcast_to(np.asarray(xfer_s, dtype=np.float64), (V - 1, m, n_col))
    n = sched.n_nodes
    start = np.empty((n, n_col)) if starts else None
    finish = np.empty((n, n_col))
    zero = np.zeros(n_col)
    d_l, k_l, s_l = sched.direction.tolist(), sched.microbatch.tolist(), sched.stage.tolist()
    prev_l, dep_l = sched.prev.tolist(), sched.dep.tolist()
    for i in range(n):
        pv, dp, d, k, s = prev_l[i], dep_l[i], d_l[i], k_l[i], s_l[i]
        ready = finish[pv] if pv >= 0 else zero
        if dp >= 0:
            arr = finish[dp]
            if x is not None:
                arr = arr + x[s - 1 if d == FWD else s, k]
            ready = np.maximum(ready, arr)
        if start is not None:
            start[i] = ready
        np.add(ready, f[s, k] if d == FWD else b[s, k], out=finish[i])
    return start, finish


def makespan(fwd_s, bwd_s, pp: int, vp: int = 1, xfer_s=None, group: int | None = None) -> np.ndarray:
    """End of the last op of ``N`` independent pipelines, ``(N,)`` seconds.

    ``fwd_s``, ``bwd_s``: ``(m, N)``, one pipeline stage's (all its chunks') forward and backward time
    per microbatch, the same on every stage (each chunk takes ``1/vp`` of it); ``xfer_s``: scalar or
    broadcastable to ``(m, N)``, the time of each pipeline transfer.
    """
    f = np.asarray(fwd_s, dtype=np.float64)
    b = np.asarray(bwd_s, dtype=np.float64)
    if f.ndim == 1:
        f, b = f[:, None], b[:, None]
    m, n_col = f.shape
    if m == 0:
        return np.zeros(n_col)
    sched = pipeline_schedule(pp, m, vp, group)
    x = None if xfer_s is None else np.broadcast_to(np.asarray(xfer_s, dtype=np.float64), (m, n_col))[None]
    _, fin = chain_times(sched, (f / vp)[None], (b / vp)[None], x)
    return fin[sched.last].max(axis=0)


def activations_in_flight(pp: int, vp: int = 1, group: int | None = None) -> float:
    """Activations pipeline rank 0 holds at its peak, in microbatches of a whole stage.

    Rank 0 runs ``W`` warm-up forwards before its first backward, so ``W + 1`` chunk forwards are in
    flight, each of ``1/vp`` of its layers: ``pp`` for 1F1B, ``(2·(pp−1) + (vp−1)·N + 1)/vp`` interleaved
    (``N`` the microbatch group, default ``pp``: ``pp·(1 + (pp−1)/(pp·vp))``, the factor of Narayanan et
    al., SC21). Enough microbatches assumed (at most ``m`` stay in flight in a short iteration).
    """
    w = pp - 1 if vp == 1 else 2 * (pp - 1) + (vp - 1) * default_group(pp, group)
    return (w + 1) / vp


def bubble_fraction(pp: int, m: int, vp: int = 1) -> float:
    """Idle share of the ideal time for ``m`` equal microbatches without transfers: ``(pp − 1)/(vp·m)``."""
    return (pp - 1) / (vp * m)


# ------------------------------------------------------------------ evaluation: groups of ranks
@dataclass(frozen=True)
class StepGroups:
    """Groups of stage ranks per microbatch step, for :func:`group_times`.

    Groups are numbered step-major: step ``k`` holds groups ``offset[k] .. offset[k+1] − 1``, sorted by
    their first rank. ``ranks[k]`` lists the ranks of step ``k``'s groups (group after group); ``bounds[k]``/``take[k]``
    reduce a per-rank array to per-group maxima with one ``reduceat`` (all three made on first use).
    """

    n_ranks: int
    n_steps: int
    start: np.ndarray
    size: np.ndarray
    offset: np.ndarray

    @property
    def n_groups(self) -> int:
        return int(self.start.size)

    @cached_property
    def ranks(self) -> tuple[np.ndarray, ...]:
        """Per step, the ranks of its groups, group after group (made on first use: the per-rank clocks' path)."""
        out = []
        for a, z in zip(self.offset[:-1].tolist(), self.offset[1:].tolist(), strict=True):
            st, sz = self.start[a:z], self.size[a:z]
            out.append(np.repeat(st - np.cumsum(np.r_[0, sz[:-1]]), sz) + np.arange(int(sz.sum())) if z > a
                       else np.zeros(0, dtype=np.int64))
        return tuple(out)

    @cached_property
    def _segments(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """(bounds, take) per step: the sorted distinct starts and ends of its groups, and each group's segment."""
        bounds, take = [], []
        for a, z in zip(self.offset[:-1].tolist(), self.offset[1:].tolist(), strict=True):
            st, sz = self.start[a:z], self.size[a:z]
            ends = st + sz
            if z > a and st[0] >= 0:  # the sorted distinct starts and ends, as np.union1d gives them
                mark = np.zeros(max(self.n_ranks, int(st[-1]) + 1), dtype=bool)
                mark[st] = True
                mark[ends[ends < self.n_ranks]] = True
                b = np.flatnonzero(mark)
            else:
                b = np.union1d(st, ends[ends < self.n_ranks])
            bounds.append(b)
            take.append(np.searchsorted(b, st))
        return tuple(bounds), tuple(take)

    @property
    def bounds(self) -> tuple[np.ndarray, ...]:
        return self._segments[0]

    @property
    def take(self) -> tuple[np.ndarray, ...]:
        return self._segments[1]

    @classmethod
    def from_arrays(cls, step, start, size, n_steps: int, n_ranks: int) -> StepGroups:
        """From per-group arrays that are sorted by (step, start) (:meth:`sort_key` gives that order)."""
        step = np.asarray(step, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        size = np.asarray(size, dtype=np.int64)
        if step.size and (np.any(np.diff(step) < 0) or np.any((np.diff(step) == 0) & (np.diff(start) <= 0))):
            raise ValueError("groups must be sorted by (step, start)")
        offset = np.searchsorted(step, np.arange(n_steps + 1)).astype(np.int64)
        return cls(int(n_ranks), int(n_steps), start, size, offset)


@dataclass
class GroupTimes:
    """Result of :func:`group_times` (seconds from the first op).

    ``start``/``finish``: ``(pp·vp, 2, G)`` (virtual stage, direction, group). Per rank of each pipeline
    stage, ``(pp, R)``: ``rank_end`` (its last op's end; 0 if it ran nothing) and ``rank_last_start``.
    """

    start: np.ndarray
    finish: np.ndarray
    rank_end: np.ndarray
    rank_last_start: np.ndarray
    rank_used: np.ndarray
    host_start: np.ndarray | None = None  # with a host: when each op's issue began, ``(pp·vp, 2, G)``
    host_end: np.ndarray | None = None  # ... and when its host was free again


def _bounds_max(clock: np.ndarray, bounds: np.ndarray, take: np.ndarray | None) -> np.ndarray:
    """Per group of a step, the latest of its ranks' clocks (``clock``: ``(n, R)``, one row per clock: the
    device's, and the host's) by one reduceat over the step's bounds (``take``: each group's segment, None when
    the segments are the groups); ``(n, groups)``."""
    m = np.maximum.reduceat(clock, bounds, axis=-1)
    return m if take is None else m[..., take]


def _tree_index(groups: StepGroups) -> tuple[np.ndarray, np.ndarray] | None:
    """For groups that are aligned power-of-two slices of the ranks (``R`` divisible by each size): each
    group's cell in a rank row of :func:`group_times`'s clock buffer (level ``j``, the maxima of aligned
    blocks of ``2^j`` ranks, at ``2R − 2·(R >> j)``) and its level; None when some group is not such."""
    R, st, sz = groups.n_ranks, groups.start, groups.size
    if st.size == 0 or np.any(sz < 1) or np.any(sz & (sz - 1)) or np.any(st & (sz - 1)) or np.any(R & (sz - 1)):
        return None  # (``x & (size − 1)`` is ``x mod size`` for a power-of-two size)
    if np.any(st < 0) or np.any(st + sz > R):
        return None
    j = np.log2(sz).astype(np.int64)
    return 2 * R - 2 * (R >> j) + (st >> j), j


@dataclass
class _Steps:
    """Per step of a :class:`StepGroups`, how :func:`group_times` reads and writes its ranks' clocks."""

    groups: StepGroups
    tree: tuple[np.ndarray, np.ndarray] | None  # _tree_index
    ranks: list  # the step's ranks, None when its groups tile every rank in order (a whole row)
    spread: list  # each rank's group (``v[spread[k]]`` is ``np.repeat(v, sizes)``), None when that is ``v`` itself
    top: list[int]  # its largest group's tree level (-1: no tree)
    per_group: list[bool]  # its reduceat segments are its groups (empty with a tree: not read)

    @classmethod
    def of(cls, groups: StepGroups) -> _Steps:
        R, off, tree = groups.n_ranks, groups.offset.tolist(), _tree_index(groups)
        every = np.arange(R)
        tiles = [r.size == R and np.array_equal(r, every) for r in groups.ranks]
        n = [z - a for a, z in zip(off[:-1], off[1:], strict=True)]
        top = ([int(tree[1][a:z].max(initial=0)) for a, z in zip(off[:-1], off[1:], strict=True)] if tree is not None
               else [-1] * groups.n_steps)
        return cls(groups, tree, [None if t else r for t, r in zip(tiles, groups.ranks, strict=True)],
                   [None if t and c == R else np.repeat(np.arange(c), groups.size[a:a + c])
                    for t, c, a in zip(tiles, n, off, strict=False)], top,
                   [t.size == b.size and np.array_equal(t, np.arange(t.size))  # (read without a tree only)
                    for t, b in zip(groups.take, groups.bounds, strict=True)] if tree is None else [])

    def latest(self, row: np.ndarray, k: int, a: int, z: int):
        """Each group of step ``k`` (groups ``a:z``): the latest of its ranks' clocks in ``row`` (``(rows, 2R)``,
        a stage's clocks and tree levels, the levels it needs computed here), one ``(z − a,)`` array per clock."""
        R = self.groups.n_ranks
        if self.spread[k] is None:  # every group is one rank, in order: the clocks themselves (a view)
            return row[:, :R]
        if self.top[k] < 0:
            return _bounds_max(row[:, :R], self.groups.bounds[k], None if self.per_group[k] else self.groups.take[k])
        for j in range(1, self.top[k] + 1):
            lo, n = 2 * R - 2 * (R >> (j - 1)), R >> j
            np.maximum(row[:, lo:lo + 2 * n:2], row[:, lo + 1:lo + 2 * n:2], out=row[:, lo + 2 * n:lo + 3 * n])
        return [r.take(self.tree[0][a:z]) for r in row]  # a take per clock (numpy's fancy index is slower)

    def finish(self, pending: list, ran: np.ndarray, start: np.ndarray, last_start: np.ndarray,
               used: np.ndarray) -> None:
        """Per stage ``p``, each rank's last start (``last_start[p]``) from the starts of the ops in ``pending[p]``
        (``(step, virtual stage, direction, a, z)``, from its last whole-row step on, in order) and whether it
        ran any op (``used[p]``, from the steps ``ran[p]``)."""
        for p, ops in enumerate(pending):
            for k, s, d, a, z in ops:
                self.set_ranks(k, (start[s, d, a:z],), (last_start[p],))
            ks = np.flatnonzero(ran[p]).tolist()
            if any(self.ranks[k] is None for k in ks):  # a whole row: every rank ran
                used[p] = True
                continue
            for k in ks:
                used[p, self.groups.ranks[k]] = True

    def set_ranks(self, k: int, values, rows) -> None:
        """Each rank of step ``k`` takes its group's value: ``values[i]`` (per group) into ``rows[i]`` (per rank,
        ``(R,)``)."""
        ranks, sp = self.ranks[k], self.spread[k]
        for v, r in zip(values, rows, strict=True):
            if ranks is not None:
                r[ranks] = v[sp]
            elif sp is None:
                r[:] = v
            else:
                np.take(v, sp, out=r, mode="clip")


def group_times(sched: PipelineSchedule, groups: StepGroups, fwd_s: np.ndarray, bwd_s: np.ndarray,
                xfer_s: np.ndarray | None = None,
                first_forward: Callable[[int, np.ndarray, np.ndarray], np.ndarray] | None = None,
                host=None) -> GroupTimes:
    """Exact op times of a plan of groups of stage ranks (see the module docstring).

    ``fwd_s``, ``bwd_s``: ``(pp·vp, G)`` per virtual stage and group; ``xfer_s``: ``(pp·vp − 1, G)``,
    the transfer of group ``g`` between virtual stages ``s`` and ``s + 1``, or ``None``. The schedule's
    microbatches are the plan's steps (``sched.m == groups.n_steps``). ``first_forward(s, ready, dur)``,
    if given, returns the finish times of the first forward op (with groups) of each virtual stage
    ``s < pp`` from its groups' ready times and durations (in place of ``ready + dur``: e.g. a wait for
    the stage's parameter all-gather). ``host`` (a :class:`dcpsim.cost.host.HostOps`, groups in this
    order), if given, adds the host timeline: each rank's host issues its ops in schedule order, and an
    op's device start and end follow :func:`dcpsim.cost.host.issue` (:meth:`~dcpsim.cost.host.HostOps.runner`)
    from the group's host clock (the latest of its ranks') and its device-ready time.

    A group's latest rank comes from its stage's per-group clocks when every step tiles the ranks with aligned
    power-of-two slices (:class:`dcpsim.pipeline_tiling.GroupClocks`), else from per-rank clocks: a tree of pairwise
    maxima over aligned blocks of ranks (aligned power-of-two groups) or a reduceat over its step's bounds.
    """
    if sched.m != groups.n_steps:
        raise ValueError(f"schedule of {sched.m} microbatches for a plan of {groups.n_steps} steps")
    V, G, R, pp = sched.n_stages, groups.n_groups, groups.n_ranks, sched.pp
    start, finish, h_start, h_end = op_arrays(V, G, groups.offset, 2 if host is None else 4)
    # per rank of each stage: row 0 when its device is free, row 1 (with ``host``) its host, in cells 0..R-1;
    # cells R..2R-1 hold the levels of maxima over aligned blocks of ranks (_tree_index)
    buf = np.zeros((1 if host is None else 2, pp, 2 * R))
    last_start = np.zeros((pp, R))
    used = np.zeros((pp, R), dtype=bool)
    off = groups.offset.tolist()
    dur = (np.asarray(fwd_s, dtype=np.float64), np.asarray(bwd_s, dtype=np.float64))
    x = None if xfer_s is None or V == 1 else np.asarray(xfer_s, dtype=np.float64)
    run = host.runner(*dur) if host is not None else None
    gated: set[int] = set()
    level = aligned_tiling(groups.start, groups.size, groups.offset, R)
    clocks = None if level is None else GroupClocks(groups.start, groups.size, level, groups.offset, R, buf.shape[0], pp)
    steps = _Steps.of(groups) if clocks is None else None
    ran = np.zeros((pp, groups.n_steps), dtype=bool)  # the steps each stage ran (``used`` after the loop)
    pending: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(pp)]  # per stage: ops to read last starts of
    for p_, d, k, s in zip(sched.rank.tolist(), sched.direction.tolist(), sched.microbatch.tolist(),
                           sched.stage.tolist(), strict=True):
        a, z = off[k], off[k + 1]
        if a == z:
            continue
        if clocks is not None:
            late = clocks.latest(p_, k, z - a)  # each group's latest rank: device and host clocks
        else:
            row = buf[:, p_]
            late = steps.latest(row, k, a, z)
        ready = late[0]
        t = s - 1 if d == FWD else s + 1
        if 0 <= t < V:
            inp = finish[t, d, a:z] if x is None else finish[t, d, a:z] + x[min(s, t), a:z]
            ready = np.maximum(ready, inp, out=None if x is None else inp)
        d_s = dur[d][s, a:z]
        if run is not None:
            ready, fin_h, h_after, _ = run(s, d, a, z, late[1], ready, (start[s, d, a:z], h_end[s, d, a:z],
                                                                         h_start[s, d, a:z]))
            d_s = np.subtract(fin_h, ready, out=fin_h)
        else:
            start[s, d, a:z] = ready
        if first_forward is not None and d == FWD and s < pp and s not in gated:
            gated.add(s)
            fin = finish[s, d, a:z] = first_forward(s, ready, d_s)
        else:
            fin = np.add(ready, d_s, out=finish[s, d, a:z])
        if clocks is not None:
            clocks.keep(p_, k, (fin,) if run is None else (fin, h_after), (s, d, a, z))
            continue
        if run is None:
            steps.set_ranks(k, (fin,), (row[0, :R],))
        else:
            steps.set_ranks(k, (fin, h_after), (row[0, :R], row[1, :R]))
        if steps.ranks[k] is None:  # a whole row: the stage's earlier last starts are overwritten
            pending[p_].clear()
        pending[p_].append((k, s, d, a, z))
        ran[p_, k] = True
    if clocks is not None:
        return GroupTimes(start, finish, *clocks.result(start), host_start=h_start, host_end=h_end)
    steps.finish(pending, ran, start, last_start, used)
    return GroupTimes(start=start, finish=finish, rank_end=np.ascontiguousarray(buf[0, :, :R]),
                      rank_last_start=last_start, rank_used=used, host_start=h_start, host_end=h_end)
