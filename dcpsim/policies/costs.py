"""Modelled time of plans, and the per-sequence cost tables policies plan with.

Time model (all seconds, one pipeline stage, output layer excluded):

* A group's time in a step is :meth:`CostModel.batch_cost` ``total_s``
  (forward + backward, recomputation and exposed communication included) of
  its pack on its ``size`` ranks, with ``spans_network`` from
  :meth:`Layout.spans_network`. Every rank of the group takes that time.
* The iteration time of a plan (:func:`evaluate_plan`) is the exact makespan
  of its groups under the one pipeline schedule, :func:`dcpsim.pipeline.group_times`
  (1F1B, or interleaved 1F1B with ``layout.vp`` chunks): every stage takes
  the group's forward and backward (each chunk ``1/vp`` of it), a group's op
  starts when all its ranks are free and its input has arrived, ranks a step
  leaves out skip it; transfers, the output layer and the gradient sync are
  left to the simulator. Static plans are the case where groups never change.
* :func:`pipeline_makespan_s` (``sum(t) + (pp − 1)·max(t)``) is the linear
  *surrogate* the MILP and the greedy heuristics optimise (the makespan of a
  proportionate flow shop that ignores the forward/backward split); it is an
  objective, not a schedule, and plans are always scored with
  :func:`evaluate_plan` in the end. For dynamic plans the surrogate puts a
  barrier after every step (step time = the slowest group); for static plans
  it takes the slowest DP replica's ``pipeline_makespan_s``.

:class:`SeqCosts` is an *additive* surrogate of the cost model used inside
the heuristics and the MILP: a sequence's cost on a group of ``c`` ranks is
its exact attention time (attention is additive over the documents of a
pack) + the exposed CP communication it would cause alone + a linear
per-token time for everything else (GEMMs, TP communication, their
recomputation) taken at a reference local token count. Plans are always
scored with the exact cost model in the end.
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.pipeline import StepGroups, group_times, pipeline_schedule, valid_microbatch_count
from dcpsim.policies.plan import Layout, Plan


def pipeline_makespan_s(step_times, pp: int) -> float:
    """The linear surrogate of a pipeline's time (s): ``sum(step_times) + (pp - 1) * max(step_times)``.

    0 for no microbatches. Used as an optimisation objective (MILP, greedy
    heuristics); see the module docstring.
    """
    t = np.asarray(step_times, dtype=np.float64)
    if t.size == 0:
        return 0.0
    return float(t.sum() + (pp - 1) * t.max())


def split_parts(bc, recompute: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a :class:`BatchCost` ``total_s`` into (attention, exposed CP comm, linear-in-tokens) seconds.

    Attention includes its recomputation (``full`` and ``selective``), CP
    communication its recomputation (``full``); the linear part is the rest
    (GEMMs, TP communication and their recomputation).
    """
    rec_attn = recompute in ("full", "selective")
    rec_cp = recompute == "full"
    attn = bc.attn_fwd_s + bc.attn_bwd_s + (bc.attn_fwd_s if rec_attn else 0.0)
    cp = bc.cp_fwd_exposed_s + bc.cp_bwd_exposed_s + (bc.cp_fwd_exposed_s if rec_cp else 0.0)
    lin = bc.total_s - attn - cp
    return attn, cp, lin


@dataclass
class PlanCost:
    """Modelled cost of a plan (seconds; one pipeline stage; head excluded).

    One entry per (step, group) in ``group_*`` arrays, in plan order.
    ``rank_work_s`` is each stage rank's busy time summed over steps;
    ``load_balance`` = max / mean of it (1 = perfect).
    """

    group_step: np.ndarray
    group_start: np.ndarray
    group_size: np.ndarray
    group_time_s: np.ndarray
    step_time_s: np.ndarray
    rank_work_s: np.ndarray
    makespan_s: float
    load_balance: float
    peak_memory_bytes: float
    fits_memory: bool

    def summary(self) -> dict:
        return {
            "makespan_s": self.makespan_s,
            "steps": int(self.step_time_s.size),
            "max_step_s": float(self.step_time_s.max()) if self.step_time_s.size else 0.0,
            "load_balance": self.load_balance,
            "max_rank_work_s": float(self.rank_work_s.max()) if self.rank_work_s.size else 0.0,
            "mean_rank_work_s": float(self.rank_work_s.mean()) if self.rank_work_s.size else 0.0,
            "peak_memory_gib": self.peak_memory_bytes / 2**30,
            "fits_memory": self.fits_memory,
        }


def makespan_from_groups(step, start, size, time_s, n_steps: int, layout: Layout, dynamic: bool) -> tuple[float, np.ndarray]:
    """(surrogate iteration time, step times) from per-group arrays (the :func:`pipeline_makespan_s` surrogate)."""
    step_t = np.zeros(n_steps)
    if time_s.size:
        np.maximum.at(step_t, step, time_s)
    if dynamic:
        return pipeline_makespan_s(step_t, layout.pp), step_t
    # static: replica j = start // cp runs its own pipeline
    rep = start // layout.cp
    per = np.zeros((layout.dp, n_steps))
    if time_s.size:
        np.maximum.at(per, (rep, step), time_s)
    ms = per.sum(axis=1) + (layout.pp - 1) * per.max(axis=1, initial=0.0)
    return float(ms.max(initial=0.0)), step_t


def schedule_makespan_s(step, start, size, fwd_s, bwd_s, n_steps: int, layout: Layout) -> float:
    """Exact makespan (s) of groups under the one pipeline schedule (:func:`dcpsim.pipeline.group_times`).

    Per group: its step, first rank, size, and one stage's forward and backward time (every stage the
    same; each of the ``layout.vp`` chunks takes ``1/vp``). No transfers, no output layer. A step count
    that the interleaved schedule does not allow is padded with empty steps, as :meth:`Policy.plan` pads
    plans (:func:`~dcpsim.pipeline.valid_microbatch_count`).
    """
    if n_steps == 0:
        return 0.0
    n_steps = valid_microbatch_count(n_steps, layout.pp, layout.vp)
    order = np.lexsort((start, step))
    groups = StepGroups.from_arrays(step[order], start[order], size[order], n_steps, layout.ranks_per_stage)
    sched = pipeline_schedule(layout.pp, n_steps, layout.vp)
    f = np.broadcast_to(np.asarray(fwd_s, dtype=np.float64)[order] / layout.vp, (sched.n_stages, order.size))
    b = np.broadcast_to(np.asarray(bwd_s, dtype=np.float64)[order] / layout.vp, (sched.n_stages, order.size))
    return float(group_times(sched, groups, f, b).rank_end.max(initial=0.0))


def evaluate_plan(plan: Plan, cost) -> PlanCost:
    """Score ``plan`` with the exact cost model (one vectorised :meth:`CostModel.batch_cost` call)."""
    a = plan.arrays()
    lens, pids, sizes, starts = plan.packs(a)
    steps = a.step
    return evaluate_packs(plan.layout, plan.n_steps, lens, pids, sizes, starts, steps, cost)


def evaluate_packs(lay: Layout, n_steps: int, lens, pids, sizes, starts, steps, cost) -> PlanCost:
    """:func:`evaluate_plan` of a plan given as its packs (:meth:`Plan.packs`: document lengths, pack ids,
    and per pack its CP size and first rank) and each pack's step, in the plan's order (steps, then groups)."""
    n_ranks = lay.ranks_per_stage
    if sizes.size == 0:
        return PlanCost(steps, starts, sizes, np.zeros(0), np.zeros(n_steps), np.zeros(n_ranks), 0.0, 1.0, 0.0, True)
    bc = cost.batch_cost(lens, pids, sizes, lay.spans_network(starts, sizes))
    gt = bc.total_s
    nonempty = bc.local_tokens > 0
    step_t = np.zeros(n_steps)
    np.maximum.at(step_t, steps, gt)
    makespan = schedule_makespan_s(steps, starts, sizes, bc.fwd_s, bc.bwd_s, n_steps, lay)
    # rank work: add each group's time to its ranks (difference array over rank ranges)
    diff = np.zeros(n_ranks + 1)
    np.add.at(diff, starts, gt)
    np.add.at(diff, starts + sizes, -gt)
    rank_work = np.cumsum(diff)[:-1]
    mean = rank_work.mean()
    peak = float(bc.peak_memory_bytes[nonempty].max()) if nonempty.any() else 0.0
    return PlanCost(
        group_step=steps,
        group_start=starts,
        group_size=sizes,
        group_time_s=gt,
        step_time_s=step_t,
        rank_work_s=rank_work,
        makespan_s=makespan,
        load_balance=float(rank_work.max() / mean) if mean > 0 else 1.0,
        peak_memory_bytes=peak,
        fits_memory=bool(np.all(bc.fits_memory[nonempty])),
    )


def plan_makespan_s(plan: Plan, cost) -> float:
    """Modelled iteration time (s) of ``plan`` (exact schedule, :func:`evaluate_plan`)."""
    return evaluate_plan(plan, cost).makespan_s


def _single_pack_parts(cost, u: np.ndarray, sizes: np.ndarray, tok_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(attention ``[size, length]``, exposed CP communication ``[size, network, length]``) seconds of each
    ascending distinct length ``u`` alone in a pack on each of ``sizes`` (``tok_u``: its tokens per rank).

    A one-sequence pack's cost depends on its length only through its padded length (the cost model pads,
    then works on the padded length), and on one size the lengths that pad alike are neighbours in ``u``
    (equal tokens per rank): each such run is costed once, by its first length, and spread. The same
    numbers as one :meth:`CostModel.batch_cost` pack per (size, length, network): every term is elementwise
    in the pack (at 65,536 GPUs, 13,665 lengths on 14 sizes: 191,310 packs per network become 31,201).
    """
    ns, nu = tok_u.shape
    new = np.ones((ns, nu), dtype=bool)
    np.not_equal(tok_u[:, 1:], tok_u[:, :-1], out=new[:, 1:])
    new = new.ravel()
    run = np.cumsum(new) - 1  # each (size, length)'s run, in (size, length) order
    rep_len = np.broadcast_to(u, (ns, nu)).ravel()[new]
    rep_cp = np.repeat(sizes, nu)[new]
    nr = rep_len.size
    # the documents' terms (:meth:`CostModel.doc_terms`) once for both networks (the same values as batch_cost's)
    docs = tuple(np.tile(x, 2) for x in cost.doc_terms(rep_len, rep_cp))
    bc = cost.batch_cost(np.tile(rep_len, 2), np.arange(2 * nr), np.tile(rep_cp, 2), np.repeat(np.array([False, True]), nr),
                         docs=docs)
    attn, comm, _ = split_parts(bc, cost.recompute)
    attn_u = attn[:nr][run].reshape(ns, nu)
    comm_u = comm.reshape(2, nr)[:, run].reshape(2, ns, nu).transpose(1, 0, 2)  # [size, network, length] (a view)
    return attn_u, comm_u


class SeqCosts:
    """Additive per-sequence cost table on candidate group sizes (see the module docstring).

    ``time_s[k, b, i]``: seconds per rank of sequence ``i`` on a group of
    ``sizes[k]`` ranks that leaves the NVLink domain (``b = 1``) or not
    (``b = 0``); ``tokens[k, i]``: tokens per rank (padding included);
    ``attn_s[k, i]`` and ``comm_s[k, b, i]``: its attention and exposed
    communication parts; ``lin_s_per_token``: the linear part per local token.

    The reference local token count for the linear part is ``s_ref`` (default:
    the mean tokens per rank if the batch were spread over all ranks in as few
    steps as capacity allows, at most the capacity). ``distinct``: the batch's
    ``np.unique(lengths, return_index=True, return_inverse=True)`` where the
    caller has it (computed here otherwise).

    The table is built per distinct length: ``tok_u[k, j]`` and ``time_u[k, b, j]``
    for distinct length ``j``, ``inv[i]`` the distinct index of sequence ``i``;
    ``tokens`` and ``time_s`` (per sequence, the same numbers) are gathered
    from them on first read, so a caller that works per distinct length never
    builds them (at 262,144 sequences and 14 sizes they are 88 MB).
    """

    def __init__(self, lengths, layout: Layout, cost, sizes, *, s_ref: float | None = None,
                 distinct: tuple | None = None) -> None:
        L = np.asarray(lengths, dtype=np.int64)
        self.lengths = L
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.layout = layout
        n, ns = L.size, self.sizes.size
        self.size_index = {int(c): k for k, c in enumerate(self.sizes)}
        M = layout.max_tokens_per_rank
        if s_ref is None:
            total = float(L.sum())
            steps = max(1.0, np.ceil(total / (layout.ranks_per_stage * M)))
            s_ref = min(float(M), max(1.0, total / (layout.ranks_per_stage * steps)))
        self.s_ref = float(s_ref)
        # linear part per token, from one pack of s_ref tokens on one rank
        ref = cost.batch_cost(np.array([max(1, round(self.s_ref))]), np.zeros(1, dtype=np.int64), np.array([1]))
        _, _, lin = split_parts(ref, cost.recompute)
        self.lin_s_per_token = float(lin[0] / max(1, round(self.s_ref)))
        self._attn_s: np.ndarray | None = None
        self._comm_s: np.ndarray | None = None
        if n:
            # each sequence alone in its own pack, for every size, without and with network; a pack of one
            # sequence costs the same whatever the others, so the table is built on the distinct lengths,
            # summed there (the same float64 operations per entry) and spread to the sequences once
            if distinct is None:
                distinct = np.unique(L, return_index=True, return_inverse=True)
            u, first, inv = distinct
            self._distinct: tuple | None = (u, first, inv)
            tok_u = per_rank_tokens(u[None, :], self.sizes[:, None])
            attn_u, comm_u = _single_pack_parts(cost, u, self.sizes, tok_u)
            lin_u = self.lin_s_per_token * tok_u
            # per distinct length; the per-sequence tables (elementwise in (length, size)) are spread on
            # first read
            self.tok_u, self.time_u = tok_u, attn_u[:, None, :] + comm_u + lin_u[:, None, :]
            self.inv = np.asarray(inv, dtype=np.int64)
            self._tokens: np.ndarray | None = None
            self._time_s: np.ndarray | None = None
            self._parts: tuple | None = (attn_u, comm_u, inv)  # attn_s and comm_s, gathered on first read
        else:
            self._attn_s, self._comm_s, self._parts = np.zeros((ns, n)), np.zeros((ns, 2, n)), None
            self._distinct = None
            self.tok_u, self.time_u = np.zeros((ns, 0), dtype=np.int64), np.zeros((ns, 2, 0))
            self.inv = np.zeros(0, dtype=np.int64)
            self._tokens = np.zeros((ns, 0), dtype=np.int64)
            self._time_s = np.zeros((ns, 2, n))
        self.distinct_table = True  # the columns of tok_u / time_u are distinct()'s lengths, each some sequence's

    @property
    def tokens(self) -> np.ndarray:
        """Tokens per rank (padding included), ``[size, sequence]`` (int64)."""
        if self._tokens is None:
            self._tokens = self.tok_u[:, self.inv]
        return self._tokens

    @tokens.setter
    def tokens(self, value: np.ndarray) -> None:
        self._tokens = value

    @property
    def time_s(self) -> np.ndarray:
        """Seconds per rank, ``[size, network, sequence]``."""
        if self._time_s is None:
            self._time_s = self.time_u[:, :, self.inv]
        return self._time_s

    @time_s.setter
    def time_s(self, value: np.ndarray) -> None:
        self._time_s = value

    def min_tokens(self) -> np.ndarray:
        """Per size, the fewest tokens per rank of any sequence (``tokens.min(axis=1)``)."""
        return self.tok_u.min(axis=1) if self.distinct_table else self.tokens.min(axis=1)

    def subset(self, idx: np.ndarray, layout: Layout) -> SeqCosts:
        """The table of the sequences ``idx`` on ``layout`` (the same numbers as their columns of this one)."""
        sub = copy(self)
        sub.lengths, sub.layout = self.lengths[idx], layout
        sub.inv = self.inv[idx]
        sub._tokens = sub._time_s = None
        sub.attn_s, sub.comm_s = self.take(idx)
        sub._distinct = None  # the subset's, if asked, from its own lengths
        sub.distinct_table = False  # its columns stay the full table's
        return sub

    def distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``np.unique(lengths, return_index=True, return_inverse=True)``: the distinct lengths, the first
        sequence of each and every sequence's distinct index (computed once, with the table)."""
        if self._distinct is None:
            self._distinct = np.unique(self.lengths, return_index=True, return_inverse=True)
        return self._distinct

    @property
    def attn_s(self) -> np.ndarray:
        """Attention seconds per rank, ``[size, sequence]``."""
        if self._attn_s is None:
            attn_u, _, inv = self._parts
            self._attn_s = attn_u[:, inv]
        return self._attn_s

    @attn_s.setter
    def attn_s(self, value: np.ndarray) -> None:
        self._attn_s = value

    @property
    def comm_s(self) -> np.ndarray:
        """Exposed communication seconds per rank, ``[size, network, sequence]``."""
        if self._comm_s is None:
            _, comm_u, inv = self._parts
            self._comm_s = comm_u[:, :, inv]
        return self._comm_s

    @comm_s.setter
    def comm_s(self, value: np.ndarray) -> None:
        self._comm_s = value

    def take(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(attn_s, comm_s) of the sequences ``idx`` alone (without gathering the whole batch's first)."""
        if self._attn_s is None and self._comm_s is None and self._parts is not None:
            attn_u, comm_u, inv = self._parts
            sub = inv[idx]
            return attn_u[:, sub], comm_u[:, :, sub]
        return self.attn_s[:, idx], self.comm_s[:, :, idx]

    def spans(self, start, size) -> np.ndarray:
        return self.layout.spans_network(start, size)

    def group_time_s(self, ids, size: int, start: int) -> float:
        """Surrogate time (s) of a pack of sequences ``ids`` on ranks [start, start+size)."""
        k = self.size_index[int(size)]
        b = int(bool(self.spans(start, size)))
        return float(self.time_s[k, b, np.asarray(ids, dtype=np.int64)].sum())

    def plan_group_times(self, plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(step, start, size, surrogate time) per (step, group) of ``plan``."""
        rows = [(k, g.start, g.size, self.group_time_s(g.seq_ids, g.size, g.start)) for k, st in enumerate(plan.steps) for g in st.groups]
        if not rows:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e, np.zeros(0)
        a = np.array(rows, dtype=np.float64)
        return a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64), a[:, 3]

    def plan_makespan_s(self, plan: Plan) -> float:
        """Iteration time (s) of ``plan`` under this additive surrogate and the :func:`pipeline_makespan_s` objective."""
        step, start, size, t = self.plan_group_times(plan)
        return makespan_from_groups(step, start, size, t, plan.n_steps, plan.layout, plan.dynamic)[0]
