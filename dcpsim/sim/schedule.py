"""From a :class:`~dcpsim.policies.plan.Plan` to the dependency graph the engine runs.

Entities. Every rank of a CP group does the same work, and so do the TP ranks
behind a stage rank, so the simulator's unit is one *group op*: the forward
(or backward) pass of one CP group's microbatch on one pipeline stage. A node
is identified by ``(stage p, direction d, group g)`` with ``d = 0`` forward and
``d = 1`` backward, numbered ``(2·p + d)·G + g``.

Groups. Group ``g`` is the ``g``-th (step, group) of the plan, in
:meth:`Plan.packs` order. Stage ranks that a step leaves out get a
one-rank *idle group* of zero work, so that every rank runs every step and all
ranks of a stage follow the same 1F1B op order (Megatron runs the same number
of microbatches on every rank; without this, ranks that skip different steps
could wait on each other in a cycle).

1F1B order of stage ``p`` with ``S`` steps: ``W = min(PP − 1 − p, S)`` warm-up
forwards, then alternating forward ``W + i`` and backward ``i``, then the
remaining backwards.

Edges (a node starts when all its incoming edges have fired):

* same stage, previous op: a group starts only when every member rank has
  finished its previous op; the edge set between the groups of two steps is
  the set of (previous group, group) pairs that share a rank (dynamic CP
  regroups ranks between steps; static CP keeps them, giving one chain per
  DP rank);
* forward of ``g`` on stage ``p`` after its forward on ``p − 1`` plus the
  activation transfer; backward on ``p`` after the backward on ``p + 1``
  plus the gradient transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.policies.plan import Plan

FWD, BWD = 0, 1


@dataclass
class GroupTable:
    """All groups of one plan (real ones first, then idle fillers), and who is in which.

    ``gid[k, r]`` is the group that stage rank ``r`` belongs to in step ``k``.
    ``pack[g]`` is the plan's pack index (``-1`` for idle groups).
    """

    n_steps: int
    ranks: int
    step: np.ndarray
    start: np.ndarray
    size: np.ndarray
    pack: np.ndarray
    n_seqs: np.ndarray
    gid: np.ndarray
    n_real: int

    @property
    def n_groups(self) -> int:
        return int(self.step.size)

    def groups_of_step(self, k: int) -> np.ndarray:
        return np.unique(self.gid[k])


def build_group_table(plan: Plan) -> GroupTable:
    """Number the plan's groups and fill the ranks each step leaves out with idle groups."""
    R = plan.layout.ranks_per_stage
    S = plan.n_steps
    step, start, size, nseq = [], [], [], []
    gid = np.full((S, R), -1, dtype=np.int64)
    g = 0
    for k, st in enumerate(plan.steps):
        for grp in st.groups:
            gid[k, grp.start:grp.start + grp.size] = g
            step.append(k)
            start.append(grp.start)
            size.append(grp.size)
            nseq.append(len(grp.seq_ids))
            g += 1
    n_real = g
    step_a = [np.asarray(step, dtype=np.int64)]
    start_a = [np.asarray(start, dtype=np.int64)]
    for k in range(S):
        empty = np.nonzero(gid[k] < 0)[0]
        if empty.size:
            gid[k, empty] = np.arange(g, g + empty.size)
            step_a.append(np.full(empty.size, k, dtype=np.int64))
            start_a.append(empty)
            g += empty.size
    n_idle = g - n_real
    return GroupTable(
        n_steps=S,
        ranks=R,
        step=np.concatenate(step_a),
        start=np.concatenate(start_a),
        size=np.concatenate([np.asarray(size, dtype=np.int64), np.ones(n_idle, dtype=np.int64)]),
        pack=np.concatenate([np.arange(n_real, dtype=np.int64), np.full(n_idle, -1, dtype=np.int64)]),
        n_seqs=np.concatenate([np.asarray(nseq, dtype=np.int64), np.zeros(n_idle, dtype=np.int64)]),
        gid=gid,
        n_real=n_real,
    )


def one_f_one_b_order(stage: int, pp: int, n_steps: int) -> list[tuple[int, int]]:
    """Op order ``[(direction, step), ...]`` of pipeline stage ``stage`` under 1F1B."""
    w = min(pp - 1 - stage, n_steps)
    ops = [(FWD, k) for k in range(w)]
    for i in range(n_steps - w):
        ops.append((FWD, w + i))
        ops.append((BWD, i))
    ops.extend((BWD, k) for k in range(n_steps - w, n_steps))
    return ops


@dataclass
class Graph:
    """Dependency graph in CSR form (successors of node ``n``: ``dst[indptr[n]:indptr[n+1]]``).

    ``delay_s`` is the transfer time on each edge (seconds); ``indegree`` the
    number of incoming edges; ``last_ops`` the nodes that close each stage's
    schedule (the backward of the last step), per stage.
    """

    n_nodes: int
    indptr: np.ndarray
    dst: np.ndarray
    delay_s: np.ndarray
    indegree: np.ndarray
    last_ops: list[np.ndarray]


def build_graph(table: GroupTable, pp: int, xfer_s: np.ndarray) -> Graph:
    """Edges of one iteration. ``xfer_s[p, g]``: transfer time between stage ``p`` and ``p + 1`` for group ``g``."""
    G, S = table.n_groups, table.n_steps
    gid = table.gid
    srcs, dsts, dels = [], [], []
    pair_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def pairs(k1: int, k2: int) -> tuple[np.ndarray, np.ndarray]:
        key = (k1, k2)
        if key not in pair_cache:
            code = np.unique(gid[k1] * G + gid[k2])
            pair_cache[key] = (code // G, code % G)
        return pair_cache[key]

    last_ops = []
    for p in range(pp):
        order = one_f_one_b_order(p, pp, S)
        for (d1, k1), (d2, k2) in zip(order[:-1], order[1:], strict=True):
            a, b = pairs(k1, k2)
            srcs.append((2 * p + d1) * G + a)
            dsts.append((2 * p + d2) * G + b)
            dels.append(np.zeros(a.size))
        d_last, k_last = order[-1]
        last_ops.append((2 * p + d_last) * G + table.groups_of_step(k_last))
    g_all = np.arange(G, dtype=np.int64)
    for p in range(pp - 1):
        # forward p -> p+1 and backward p+1 -> p, same group, same link
        srcs.append((2 * p + FWD) * G + g_all)
        dsts.append((2 * (p + 1) + FWD) * G + g_all)
        dels.append(xfer_s[p])
        srcs.append((2 * (p + 1) + BWD) * G + g_all)
        dsts.append((2 * p + BWD) * G + g_all)
        dels.append(xfer_s[p])
    n = 2 * pp * G
    src = np.concatenate(srcs) if srcs else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, dtype=np.int64)
    dl = np.concatenate(dels) if dels else np.zeros(0)
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return Graph(
        n_nodes=n,
        indptr=indptr,
        dst=dst[order],
        delay_s=dl[order],
        indegree=np.bincount(dst, minlength=n),
        last_ops=last_ops,
    )


def balanced_1f1b_end(fwd_s: np.ndarray, bwd_s: np.ndarray, xfer_s: np.ndarray, n_steps: int) -> np.ndarray:
    """Last-backward end per stage of 1F1B chains whose microbatches are all equal.

    ``fwd_s``/``bwd_s`` are ``(PP, N)``: the per-microbatch time of ``N``
    independent chains on each stage; ``xfer_s`` is ``(PP−1, N)``. Returns
    ``(PP, N)``. This is the reference pipeline behind the bubble accounting:
    evaluated node by node in a topological order of one chain's graph, each
    node vectorised over the ``N`` chains.
    """
    pp = fwd_s.shape[0]
    S = int(n_steps)
    orders = [one_f_one_b_order(p, pp, S) for p in range(pp)]
    done: dict[tuple[int, int, int], np.ndarray] = {}
    nxt = [0] * pp
    zero = np.zeros(fwd_s.shape[1])
    remaining = 2 * pp * S
    while remaining:
        progressed = False
        for p in range(pp):
            while nxt[p] < 2 * S:
                d, k = orders[p][nxt[p]]
                if d == FWD:
                    dep = (p - 1, FWD, k) if p > 0 else None
                    x = xfer_s[p - 1] if p > 0 else None
                else:
                    dep = (p + 1, BWD, k) if p < pp - 1 else None
                    x = xfer_s[p] if p < pp - 1 else None
                if dep is not None and dep not in done:
                    break
                prev = done[(p, *orders[p][nxt[p] - 1])] if nxt[p] else zero
                ready = prev if dep is None else np.maximum(prev, done[dep] + x)
                done[(p, d, k)] = ready + (fwd_s[p] if d == FWD else bwd_s[p])
                nxt[p] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - 1F1B orders are always consistent
            raise RuntimeError("1F1B reference pipeline has a cycle")
    return np.stack([done[(p, *orders[p][-1])] for p in range(pp)])
