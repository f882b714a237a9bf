"""From a :class:`~dcpsim.policies.plan.Plan` to the dependency graph the engine runs.

Entities. Every rank of a CP group does the same work, and so do the TP ranks
behind a stage rank, so the simulator's unit is one *group op*: the forward
(or backward) pass of one CP group's microbatch on one pipeline stage. A node
is identified by ``(virtual stage s, direction d, group g)`` with ``d = 0`` forward and
``d = 1`` backward, numbered ``(2·s + d)·G + g`` (``s = p`` without
interleaving).

Groups. Group ``g`` is the ``g``-th (step, group) of the plan, in
:meth:`Plan.packs` order. Stage ranks that a step leaves out get a
one-rank *idle group* of zero work, so that every rank runs every step and all
ranks of a stage follow the same 1F1B op order (Megatron runs the same number
of microbatches on every rank; without this, ranks that skip different steps
could wait on each other in a cycle).

Op order: :mod:`dcpsim.pipeline` (the one schedule definition: 1F1B, or
Megatron's interleaved 1F1B with ``vp`` chunks per rank, where chunk ``c`` of
stage ``p`` is virtual stage ``c·PP + p``); a plan's steps are its
microbatches.

Edges (a node starts when all its incoming edges have fired):

* same stage, previous op: a group starts only when every member rank has
  finished its previous op; the edge set between the groups of two steps is
  the set of (previous group, group) pairs that share a rank (dynamic CP
  regroups ranks between steps; static CP keeps them, giving one chain per
  DP rank);
* forward of ``g`` on virtual stage ``s`` after its forward on ``s − 1`` plus
  the activation transfer; backward on ``s`` after the backward on ``s + 1``
  plus the gradient transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.pipeline import BWD, FWD, PipelineSchedule
from dcpsim.policies.plan import Plan

__all__ = ["BWD", "FWD", "Graph", "GroupTable", "build_graph", "build_group_table"]


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


def build_graph(table: GroupTable, sched: PipelineSchedule, xfer_s: np.ndarray) -> Graph:
    """Edges of one iteration. ``xfer_s[s, g]``: transfer time of group ``g`` between virtual stages ``s`` and ``s + 1``.

    Node of (virtual stage ``s``, direction ``d``, group ``g``): ``(2·s + d)·G + g``. Each pipeline rank
    follows :func:`~dcpsim.pipeline.pipeline_schedule`'s order; between two consecutive ops of a stage
    rank there is an edge from the group that ran the first to the group that runs the second (ranks a
    step leaves out skip it). ``last_ops[p]``: the groups holding the final op of each rank of stage ``p``.
    """
    G, R, pp, V = table.n_groups, table.ranks, sched.pp, sched.n_stages
    n = 2 * V * G
    gid = table.gid
    srcs, dsts, dels = [], [], []
    last_ops = []
    for p in range(pp):
        last = np.full(R, -1, dtype=np.int64)
        for d, k, c in sched.orders[p].tolist():
            row = gid[k]
            has = row >= 0
            cur = (2 * (c * pp + p) + d) * G + row[has]
            prev = last[has]
            m = prev >= 0
            if m.any():
                code = np.unique(prev[m] * n + cur[m])
                srcs.append(code // n)
                dsts.append(code % n)
                dels.append(np.zeros(code.size))
            last[has] = cur
        last_ops.append(np.unique(last[last >= 0]))
    g_all = np.arange(G, dtype=np.int64)
    for s_ in range(V - 1):
        # forward s -> s+1 and backward s+1 -> s, same group, same link
        srcs.append((2 * s_ + FWD) * G + g_all)
        dsts.append((2 * (s_ + 1) + FWD) * G + g_all)
        dels.append(xfer_s[s_])
        srcs.append((2 * (s_ + 1) + BWD) * G + g_all)
        dsts.append((2 * s_ + BWD) * G + g_all)
        dels.append(xfer_s[s_])
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
