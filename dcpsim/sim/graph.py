"""From a :class:`~dcpsim.policies.plan.Plan` to the dependency graph the engine runs.

Entities. Every rank of a CP group does the same work, and so do the TP ranks
behind a stage rank, so the simulator's unit is one *group op*: the forward
(or backward) pass of one CP group's microbatch on one pipeline stage. A node
is identified by ``(virtual stage s, direction d, group g)`` with ``d = 0`` forward and
``d = 1`` backward, numbered ``(2·s + d)·G + g`` (``s = p`` without
interleaving).

Groups. Group ``g`` is the ``g``-th (step, group) of the plan, in
:meth:`Plan.packs` order. Stage ranks that a step leaves out skip that
microbatch: they have no op in it. This cannot deadlock: every group op maps
to an op of the schedule's template (virtual stage, direction, microbatch),
and every edge below maps to a path of the template's acyclic graph (a rank's
next op comes later in its order; pipeline edges are the template's), so
the graph of group ops is acyclic too.

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
from dcpsim.pipeline_tiling import tiles_in_order
from dcpsim.policies.plan import Plan, PlanArrays

__all__ = ["BWD", "FWD", "Graph", "GroupTable", "build_graph", "build_group_table"]


@dataclass
class GroupTable:
    """All groups of one plan, in :meth:`Plan.packs` order, and who is in which.

    ``gid[k, r]`` is the group that stage rank ``r`` belongs to in step ``k``
    (``-1``: the step leaves the rank out, it skips that microbatch).
    ``pack[g]`` is the plan's pack index (``g`` itself; kept for readers of
    older tables, where idle filler groups had ``-1``); ``n_real`` = ``G``.
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
        row = self.gid[k]
        return np.unique(row[row >= 0])

    def member_ranks(self) -> np.ndarray:
        """Stage ranks of every group, group after group (``size.sum()`` entries)."""
        before = np.cumsum(self.size) - self.size
        return np.repeat(self.start - before, self.size) + np.arange(int(self.size.sum()))


def build_group_table(plan: Plan, arrays: PlanArrays | None = None) -> GroupTable:
    """Number the plan's groups (no fillers: ranks a step leaves out have ``gid = -1``); ``arrays``: the
    plan's :meth:`~dcpsim.policies.plan.Plan.arrays` when the caller has them."""
    R = plan.layout.ranks_per_stage
    S = plan.n_steps
    a = plan.arrays() if arrays is None else arrays
    G = a.size.size
    step, start, size, nseq = a.step, a.start, a.size, a.counts
    pack = np.arange(G, dtype=np.int64)
    g = np.repeat(pack, size)  # each member's group (one repeat; the rest gathered by it)
    if _tiles_in_order(step, start, size, S, R):  # members in (step, rank) order: the groups' ranks, row by row
        gid = g.reshape(S, R)
    else:
        gid = np.full((S, R), -1, dtype=np.int64)
        gid.reshape(-1)[step.take(g) * R + (start - (np.cumsum(size) - size)).take(g) + np.arange(g.size)] = g
    return GroupTable(n_steps=S, ranks=R, step=step, start=start, size=size, pack=pack, n_seqs=nseq, gid=gid, n_real=G)


def _tiles_in_order(step: np.ndarray, start: np.ndarray, size: np.ndarray, S: int, R: int) -> bool:
    """Whether the groups (in plan order) cover steps ``0 .. S − 1`` one after the other, each step's ranks
    ``0 .. R − 1`` in order without gaps or overlaps (each member's flat cell ``step·R + rank`` is then its index)."""
    if step.size == 0 or S * R == 0 or int(size.sum()) != S * R or int(step[0]) != 0 or np.any(size < 1):
        return False
    ds = np.diff(step)
    new = np.ones(step.size, dtype=bool)  # a group opening its step
    new[1:] = ds != 0
    return bool(np.all((ds == 0) | (ds == 1))) and tiles_in_order(start, size, new, R)


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
