"""Iteration plans: what a scheduling policy hands to the simulator.

A :class:`Plan` is an ordered list of microbatch :class:`Step` s. In each step
the DP×CP ranks of a pipeline stage (numbered 0..DP·CP−1 in Megatron's
tp-cp-dp-pp order, CP fastest after TP) are partitioned into CP
:class:`Group` s, each with its pack of sequences. Every pipeline stage runs
the same steps (a microbatch flows through all stages).

Plans are plain data: ``to_dict``/``from_dict`` round-trip through JSON, and
:meth:`Plan.check` checks the invariants every policy must keep.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from pathlib import Path

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError, DcpsimError, InfeasibleError
from dcpsim.hardware.placement import group_spans_domain


class PlanError(DcpsimError):
    """A plan breaks an invariant (a policy bug, or a hand-edited plan file)."""


def is_pow2(x: int) -> bool:
    return x >= 1 and (x & (x - 1)) == 0


@dataclass(frozen=True)
class Layout:
    """Parallel layout of one training job.

    ``cp`` is the static CP size; dynamic policies may use any power of two up
    to ``dp * cp`` (Megatron's largest dynamic CP). ``max_tokens_per_rank`` is
    Megatron's ``max_seqlen_per_dp_cp_rank`` (M): the most tokens one rank
    holds in one microbatch. ``gpus_per_domain`` is the NVLink domain size in
    GPUs (to tell which groups leave it).
    """

    dp: int
    cp: int
    max_tokens_per_rank: int
    tp: int = 1
    pp: int = 1
    min_cp: int = 1
    gpus_per_domain: int = 8
    vp: int = 1

    def __post_init__(self) -> None:
        for f in ("dp", "cp", "tp", "pp", "min_cp", "max_tokens_per_rank", "gpus_per_domain", "vp"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"layout.{f}", v, "a positive integer")
        if not is_pow2(self.min_cp):
            raise ConfigError("layout.min_cp", self.min_cp, "a power of two")
        if self.min_cp > self.dp * self.cp:
            raise ConfigError("layout.min_cp", self.min_cp, f"<= dp*cp ({self.dp * self.cp})")

    @property
    def ranks_per_stage(self) -> int:
        return self.dp * self.cp

    @property
    def gpus(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def max_dynamic_cp(self) -> int:
        """Largest power of two <= dp*cp."""
        n = self.ranks_per_stage
        return 1 << (n.bit_length() - 1)

    def spans_network(self, start, size, stage: int | None = None) -> np.ndarray:
        """Whether stage ranks [start, start+size) leave one NVLink domain (vectorised).

        ``stage=None`` (what the policies cost): on any pipeline stage, since
        a group keeps its ranks on every stage and the slowest stage sets the
        pace; see :mod:`dcpsim.hardware.placement`.
        """
        return group_spans_domain(start, size, tp=self.tp, ranks_per_stage=self.ranks_per_stage,
                                  domain_gpus=self.gpus_per_domain, stage=stage, pp=self.pp)

    def to_dict(self) -> dict:
        return {f: int(getattr(self, f)) for f in ("dp", "cp", "max_tokens_per_rank", "tp", "pp", "min_cp", "gpus_per_domain", "vp")}


@dataclass
class Group:
    """One CP group in one step: ranks [start, start+size) run ``seq_ids``."""

    start: int
    size: int
    seq_ids: list[int]

    def to_dict(self) -> dict:
        return {"start": int(self.start), "size": int(self.size), "seq_ids": [int(i) for i in self.seq_ids]}


@dataclass
class Step:
    """One microbatch step: a partition of (some of) the stage's ranks into groups.

    A step of :func:`steps_of_arrays` makes its :class:`Group` objects on the first read of ``groups``
    (a plan's :meth:`Plan.arrays` reads such steps' arrays without making them)."""

    groups: list[Group]

    def to_dict(self) -> dict:
        return {"groups": [g.to_dict() for g in self.groups]}


def _step_groups_get(self: Step) -> list[Group]:
    d = self.__dict__
    groups = d.get("_groups")
    if groups is None:  # a step of steps_of_arrays, read for the first time
        a, k, goff, moff = d.pop("_src")
        g0, g1 = goff[k], goff[k + 1]
        ids = a.ids[int(moff[g0]):int(moff[g1])].tolist()
        b = [0, *a.counts[g0:g1].cumsum().tolist()]  # each group's members: ids[b[j]:b[j + 1]]
        groups = d["_groups"] = list(map(Group, a.start[g0:g1].tolist(), a.size[g0:g1].tolist(),
                                         [ids[x:y] for x, y in zip(b[:-1], b[1:], strict=True)]))
    return groups


def _step_groups_set(self: Step, groups: list[Group]) -> None:
    self.__dict__.pop("_src", None)
    self.__dict__["_groups"] = groups


# The dataclass field gives the constructor its ``groups`` argument; the property makes a step of arrays lazy.
Step.groups = property(_step_groups_get, _step_groups_set, doc="The step's CP groups, in list order.")  # type: ignore[assignment]


def steps_of_arrays(a: PlanArrays) -> list[Step]:
    """The steps whose groups are ``a`` (:class:`PlanArrays`), made without a Python loop over the groups:
    each step makes its :class:`Group` objects when its ``groups`` is first read, and a plan of these
    steps, untouched, gives ``a`` back as its :meth:`Plan.arrays`."""
    goff = np.concatenate([[0], np.cumsum(a.per_step)]).tolist()
    moff = np.concatenate([[0], np.cumsum(a.counts)])  # an array: a step reads two entries of it
    out = []
    for k in range(a.per_step.size):
        st = Step.__new__(Step)
        st.__dict__["_src"] = (a, k, goff, moff)
        out.append(st)
    return out


def _arrays_of_lazy(steps: list[Step]) -> PlanArrays | None:
    """The arrays ``steps`` were made from by :func:`steps_of_arrays`, when they are those steps in order and
    none has made its groups (so none can have been edited); else None."""
    if not steps:
        return None
    src = steps[0].__dict__.get("_src")
    if src is None or len(steps) != src[0].per_step.size:
        return None
    a = src[0]
    for k, st in enumerate(steps):
        x = st.__dict__.get("_src")
        if x is None or x[0] is not a or x[1] != k:
            return None
    return a


@dataclass(frozen=True)
class PlanArrays:
    """A plan's groups as flat arrays, in step order then list order (:meth:`Plan.arrays`).

    ``per_step``: groups per step ``(S,)``; per group ``(G,)``: ``step``, ``start``, ``size`` (stage ranks)
    and ``counts`` (sequences); ``ids``: the sequence ids, group after group (``counts.sum()`` entries).
    A snapshot: it does not follow later edits of the plan's steps.
    """

    per_step: np.ndarray
    step: np.ndarray
    start: np.ndarray
    size: np.ndarray
    counts: np.ndarray
    ids: np.ndarray

    def __post_init__(self) -> None:
        for f in ("per_step", "step", "start", "size", "counts", "ids"):
            getattr(self, f).setflags(write=False)  # shared by the check, the group table and the durations


_SEQ_IDS, _START, _SIZE, _GROUPS = attrgetter("seq_ids"), attrgetter("start"), attrgetter("size"), attrgetter("groups")


@dataclass
class Plan:
    """A policy's schedule for one global batch.

    ``dynamic`` says whether groups may change between steps (aligned
    power-of-two slices are then required). ``dropped`` maps sequence id to
    the reason it was not scheduled. ``planning_time_s`` is the policy's
    *modelled* planning time in seconds (deterministic, see
    :meth:`Policy.modelled_planning_s`; the measured host time is
    ``meta["planning_wall_s"]``).

    ``lower_bound_s`` (seconds, optional) is evaluated on first read: the
    ``bound`` and ``milp`` policies set a value; :meth:`Policy.plan
    <dcpsim.policies.base.Policy.plan>` attaches ``bound_evaluator`` (a
    no-argument callable, :func:`~dcpsim.policies.bound.lower_bound_s` of the
    kept sequences), so planning itself never pays for the bound.

    ``counted_lengths`` (optional): the real lengths when ``lengths`` are
    padded ones (Megatron's dynamic-CP sample padding, ``sim.dynamic_cp_padding``):
    the simulator times ``lengths`` and counts FLOPs on these.

    ``repeats`` (optional): sequence id -> extra times the plan runs it (Megatron's pull-request-era naive
    packer trains its last pack twice, ``packing-pr2959``); :meth:`check` then expects ``1 + repeats[i]``
    placements, and the policy sets ``counted_lengths`` so that FLOPs count each sequence once.
    """

    policy: str
    layout: Layout
    lengths: np.ndarray
    steps: list[Step]
    dynamic: bool
    dropped: dict[int, str] = field(default_factory=dict)
    planning_time_s: float = 0.0
    lower_bound_s: float | None = field(default=None, repr=False)  # a lazy property: see _lower_bound_get below
    meta: dict = field(default_factory=dict)
    bound_evaluator: Callable[[], float] | None = field(default=None, repr=False, compare=False)
    counted_lengths: np.ndarray | None = field(default=None, repr=False, compare=False)
    repeats: dict[int, int] = field(default_factory=dict)

    # ---------------------------------------------------------------- views
    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def group_table(self) -> dict[str, np.ndarray]:
        """Flat arrays, one entry per (step, group): step, start, size, tokens, n_seqs."""
        rows = [(k, g.start, g.size, int(self.lengths[g.seq_ids].sum()) if g.seq_ids else 0, len(g.seq_ids))
                for k, st in enumerate(self.steps) for g in st.groups]
        arr = np.array(rows, dtype=np.int64).reshape(-1, 5)
        return {"step": arr[:, 0], "start": arr[:, 1], "size": arr[:, 2], "tokens": arr[:, 3], "n_seqs": arr[:, 4]}

    def arrays(self) -> PlanArrays:
        """The groups of the steps as flat arrays (:class:`PlanArrays`), read in one pass (the arrays the
        steps were made from when they are :func:`steps_of_arrays`' steps, untouched)."""
        steps = self.steps
        lazy = _arrays_of_lazy(steps)
        if lazy is not None:
            return lazy
        per_step = np.fromiter(map(len, map(_GROUPS, steps)), dtype=np.int64, count=len(steps))
        groups = list(chain.from_iterable(map(_GROUPS, steps)))
        n = len(groups)
        seqs = list(map(_SEQ_IDS, groups))
        counts = np.fromiter(map(len, seqs), dtype=np.int64, count=n)
        return PlanArrays(per_step=per_step, step=np.repeat(np.arange(len(steps), dtype=np.int64), per_step),
                          start=np.fromiter(map(_START, groups), dtype=np.int64, count=n),
                          size=np.fromiter(map(_SIZE, groups), dtype=np.int64, count=n), counts=counts,
                          ids=np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(counts.sum())))

    def packs(self, arrays: PlanArrays | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, pack_ids, cp, start) for :meth:`CostModel.batch_cost`, one pack per (step, group);
        ``arrays``: this plan's :meth:`arrays` when the caller has them."""
        a = self.arrays() if arrays is None else arrays
        n = a.size.size
        if not n:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e, e
        return (np.asarray(self.lengths)[a.ids].astype(np.int64), np.repeat(np.arange(n, dtype=np.int64), a.counts),
                a.size, a.start)

    def cp_histogram(self) -> dict[int, int]:
        """Sequences per CP size (every size a group has, in increasing order)."""
        a = self.arrays()
        return cp_histogram_of(a.size, a.counts)

    # ----------------------------------------------------------- invariants
    def check(self, arrays: PlanArrays | None = None) -> Plan:
        """Check the invariants; raise :class:`PlanError` naming the first broken one.

        Vectorised over all groups of all steps: per group (in step order,
        then group order) it flags bounds, overlap with an earlier group of
        its step, shape (aligned power of two, ``min_cp``; static: the CP
        size), sequence ids and token capacity; the first flagged group is
        reported with its first broken check. Then every sequence must be
        scheduled or dropped exactly once (``1 + repeats[i]`` times for a repeated one). ``arrays``: this
        plan's :meth:`arrays` when the caller has them.
        """
        gt = self._validation_table(self.arrays() if arrays is None else arrays)
        first = _first_group_error(self, gt)
        if first is not None:
            raise PlanError(first)
        n = len(self.lengths)
        seen = np.bincount(gt["ids"], minlength=n)[:n] if gt["ids"].size else np.zeros(n, dtype=np.int64)
        for i, reason in self.dropped.items():
            if not (0 <= i < n):
                raise PlanError(f"dropped sequence id {i} out of range")
            seen[i] += 1
            if not reason:
                raise PlanError(f"dropped sequence {i} has no reason")
        expect = np.ones(n, dtype=np.int64)
        for i, extra in self.repeats.items():
            if not (0 <= i < n) or extra < 1:
                raise PlanError(f"repeat of sequence {i} ({extra} extra) out of range")
            expect[i] += extra
        bad = np.nonzero(seen != expect)[0]
        if bad.size:
            i = int(bad[0])
            times = "exactly once" if expect[i] == 1 else f"{int(expect[i])} times (repeated)"
            raise PlanError(f"sequence {i} is scheduled {int(seen[i])} times (expected {times})")
        return self

    @staticmethod
    def _validation_table(a: PlanArrays) -> dict[str, np.ndarray]:
        """Flat arrays for :meth:`check`: per group step/start/size, per member its group and sequence id."""
        return {"step": a.step, "start": a.start, "size": a.size,
                "member_group": np.repeat(np.arange(a.size.size), a.counts), "ids": a.ids}

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "layout": self.layout.to_dict(),
            "lengths": [int(x) for x in self.lengths],
            "dynamic": self.dynamic,
            "steps": [s.to_dict() for s in self.steps],
            "dropped": {str(k): v for k, v in self.dropped.items()},
            **({"repeats": {str(k): int(v) for k, v in self.repeats.items()}} if self.repeats else {}),
            **({"counted_lengths": [int(x) for x in self.counted_lengths]} if self.counted_lengths is not None else {}),
            "planning_time_s": float(self.planning_time_s),
            "lower_bound_s": self.lower_bound_s,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        try:
            return cls(
                policy=d["policy"],
                layout=Layout(**d["layout"]),
                lengths=np.asarray(d["lengths"], dtype=np.int64),
                steps=[Step([Group(**g) for g in s["groups"]]) for s in d["steps"]],
                dynamic=bool(d["dynamic"]),
                dropped={int(k): v for k, v in d.get("dropped", {}).items()},
                repeats={int(k): int(v) for k, v in d.get("repeats", {}).items()},
                counted_lengths=(np.asarray(d["counted_lengths"], dtype=np.int64) if "counted_lengths" in d else None),
                planning_time_s=float(d.get("planning_time_s", 0.0)),
                lower_bound_s=d.get("lower_bound_s"),
                meta=d.get("meta", {}),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError("plan", str(exc), "a plan dictionary as written by Plan.to_dict") from None

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON, atomically and only over a file dcpsim wrote (:mod:`dcpsim.outdir`)."""
        from dcpsim.outdir import write_text

        write_text(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_dict(json.loads(Path(path).read_text()))




def groups_per_size(steps: list[Step]) -> dict[str, int]:
    """How many groups of each CP size the steps hold, sizes ascending (keys as strings, for ``Plan.meta``);
    counted without a Python loop over the groups (a pr2959 plan at 65,536 GPUs has 105,871)."""
    lazy = _arrays_of_lazy(steps)
    if lazy is not None:
        sizes, count = np.unique(lazy.size, return_counts=True)
        return {str(c): v for c, v in zip(sizes.tolist(), count.tolist(), strict=True)}
    return {str(c): v for c, v in sorted(Counter(map(_SIZE, chain.from_iterable(map(_GROUPS, steps)))).items())}


def cp_histogram_of(size: np.ndarray, counts: np.ndarray) -> dict[int, int]:
    """Sequences per CP size from per-group sizes and sequence counts (:meth:`Plan.cp_histogram`)."""
    size = np.asarray(size, dtype=np.int64)
    if size.size and int(size.min()) >= 0 and int(size.max()) < 1 << 20:  # the sizes as bins, without a sort
        sizes = np.flatnonzero(np.bincount(size))  # (sums of whole counts: exact in float64 below 2**53)
        per = np.bincount(size, weights=np.asarray(counts, dtype=np.float64))[sizes].astype(np.int64)
        return dict(zip(sizes.tolist(), per.tolist(), strict=True))
    sizes, inv = np.unique(size, return_inverse=True)
    per = np.zeros(sizes.size, dtype=np.int64)
    np.add.at(per, inv, counts)
    return dict(zip(sizes.tolist(), per.tolist(), strict=True))


def _overlaps_earlier(gt: dict[str, np.ndarray], inside: np.ndarray) -> np.ndarray:
    """Per group: whether a rank of it belongs to an earlier group (in list order) of the same step."""
    ng = gt["size"].size
    out = np.zeros(ng, dtype=bool)
    idx = np.nonzero(inside)[0]
    if not idx.size:
        return out
    size = gt["size"][idx]
    gid = np.repeat(idx, size)  # one entry per (group, rank)
    offs = np.arange(gid.size) - np.repeat(np.cumsum(size) - size, size)
    rank = gt["start"][gid] + offs
    cell = gt["step"][gid] * (int(rank.max()) + 1) + rank
    if np.bincount(cell).max() <= 1:  # no (step, rank) held twice: no overlap
        return out
    owner = np.full(int(cell.max()) + 1, ng, dtype=np.int64)
    np.minimum.at(owner, cell, gid)  # first group (list order) holding each (step, rank)
    out[idx] = np.minimum.reduceat(owner[cell], np.cumsum(size) - size) < idx
    return out


def _first_group_error(plan: Plan, gt: dict[str, np.ndarray]) -> str | None:
    """The message for the first group (step order, then list order) that breaks an invariant, or None."""
    lay, n = plan.layout, len(plan.lengths)
    start, size, step = gt["start"], gt["size"], gt["step"]
    R = lay.ranks_per_stage
    bounds = (size < 1) | (start < 0) | (start + size > R)
    overlap = _overlaps_earlier(gt, ~bounds)
    if plan.dynamic:
        shape = ((size & (size - 1)) != 0) | (start % np.maximum(size, 1) != 0)
        small = size < lay.min_cp
    else:
        shape = (size != lay.cp) | (start % lay.cp != 0)
        small = np.zeros(size.size, dtype=bool)
    ids, mg = gt["ids"], gt["member_group"]
    bad_id = (ids < 0) | (ids >= n)
    if bad_id.any():
        id_range = np.bincount(mg[bad_id], minlength=size.size) > 0
        ok = ~bad_id
        ids, mg = ids[ok], mg[ok]
    else:  # the usual case: every id in range, nothing to filter
        id_range = np.zeros(size.size, dtype=bool)
    tok = per_rank_tokens(plan.lengths[ids], size[mg])
    per_rank = np.bincount(mg, weights=tok, minlength=size.size)
    over = per_rank > lay.max_tokens_per_rank + 1e-9
    checks = (bounds, overlap, shape, small, id_range, over)
    any_bad = np.logical_or.reduce(checks) if size.size else np.zeros(0, dtype=bool)
    if not any_bad.any():
        return None
    g = int(np.argmax(any_bad))
    k, a, c = int(step[g]), int(start[g]), int(size[g])
    messages = (
        f"step {k}: group ranks [{a}, {a + c}) outside 0..{R}",
        f"step {k}: a rank in [{a}, {a + c}) is in two groups",
        f"step {k}: group [{a}, +{c}) is not an aligned power-of-two slice" if plan.dynamic
        else f"step {k}: static plan has group [{a}, +{c}) not of CP size {lay.cp}",
        f"step {k}: group size {c} < min_cp {lay.min_cp}",
        f"step {k}: sequence id out of range",
        f"step {k}: group [{a}, +{c}) holds {per_rank[g]:.0f} tokens per rank > capacity {lay.max_tokens_per_rank}",
    )
    return next(m for m, flag in zip(messages, checks, strict=True) if flag[g])


def _lower_bound_get(self: Plan) -> float | None:
    value = self.__dict__.get("_lower_bound_s")
    if value is None and self.bound_evaluator is not None:
        value = float(self.bound_evaluator())
        self.__dict__["_lower_bound_s"] = value
        self.bound_evaluator = None  # evaluated once; drop the references to the batch and the cost model
    return value


def _lower_bound_set(self: Plan, value: float | None) -> None:
    self.__dict__["_lower_bound_s"] = None if value is None else float(value)


# The dataclass field gives the constructor its ``lower_bound_s=`` argument; the property makes reading it lazy.
Plan.lower_bound_s = property(_lower_bound_get, _lower_bound_set, doc="Lower bound on the iteration time (s), or None.")  # type: ignore[assignment]


def check_fits(lengths: np.ndarray, layout: Layout) -> None:
    """Raise :class:`InfeasibleError` if a sequence exceeds the largest group's capacity (padding counted)."""
    cmax = layout.max_dynamic_cp
    lengths = np.asarray(lengths, dtype=np.int64)
    bad = per_rank_tokens(lengths, cmax) > layout.max_tokens_per_rank
    if bad.any():
        i = int(np.nonzero(bad)[0][np.argmax(lengths[bad])])
        raise InfeasibleError(
            "capacity",
            f"sequence {i} has {int(lengths[i])} tokens (padded to a multiple of 2*cp) > largest CP group "
            f"capacity (cp {cmax} x {layout.max_tokens_per_rank} tokens per rank)",
        )
