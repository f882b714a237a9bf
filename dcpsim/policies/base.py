"""The :class:`Policy` base class and the policy registry.

A policy turns one global batch (sequence lengths in tokens, ids = positions
in the array) and a :class:`~dcpsim.policies.plan.Layout` into a validated
:class:`~dcpsim.policies.plan.Plan`. Policies are looked up by name::

    from dcpsim.policies import get_policy
    plan = get_policy("dynamic").plan(lengths, layout, cost)

Adding a policy is one new module (a :class:`Policy` subclass) and one line in
:data:`dcpsim.choices.BUILTIN_POLICIES` (built-ins are imported lazily, so importing
:mod:`dcpsim.policies` stays cheap); code outside the package can call
:func:`register_policy`. A name can be registered once: a duplicate raises
:class:`~dcpsim.errors.ConfigError`.
"""

from __future__ import annotations

import gc
import inspect
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from functools import lru_cache, partial
from typing import Any, ClassVar

import numpy as np

from dcpsim.choices import BUILTIN_POLICIES, POLICIES  # noqa: F401 - BUILTIN_POLICIES re-exported
from dcpsim.errors import ConfigError
from dcpsim.policies.bound import lower_bound_s
from dcpsim.policies.fit import (  # noqa: F401 - re-exported: policies import them from here
    check_layout_cost,
    check_lengths,
    dynamic_fit,
    dynamic_sizes,
    raise_too_long,
    smallest_fitting_size,
)
from dcpsim.policies.plan import Layout, Plan, Step
from dcpsim.registry import Registry

# name -> "module:Class", one line per built-in policy, in dcpsim.choices.BUILTIN_POLICIES (the configuration
# checks a name there without importing a policy)
_REGISTRY: Registry[type[Policy]] = POLICIES  # base set below the class

PLANNING_S_PER_UNIT = 1e-6
"""Modelled host seconds per unit of planning work (one sequence weighed for one CP size in one candidate
pass). An assumption, not a measurement: the order of one step of a vectorised NumPy/Python scheduler loop
on a current server core (Megatron's dynamic-CP scheduler is Python). It makes ``sim.planning = "stall"`` and
``"hidden"`` deterministic (the measured wall time depended on the host and gave different results for one
seed); the measured time stays in ``Plan.meta["planning_wall_s"]`` as host information."""


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector while a batch is planned (:meth:`Policy.plan`).

    The planners allocate millions of small acyclic objects (heap entries, group lists, tuples of
    options); at 65,536 GPUs the collector's passes over them cost 10-20% of the planning time and find
    nothing (reference counting frees it all). The previous state is restored on exit.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def pad_for_schedule(plan: Plan) -> Plan:
    """Append empty steps until the interleaved schedule allows the step count (in place).

    With ``layout.vp > 1`` Megatron runs a multiple of ``pp`` microbatches
    (:func:`dcpsim.pipeline.microbatch_rule_violation`); a plan with fewer
    steps gets microbatch slots in which no rank works (they cost nothing in
    dcpsim's model). ``plan.meta["padding_steps"]`` records how many.
    """
    from dcpsim.pipeline import valid_microbatch_count

    lay = plan.layout
    if lay.vp > 1 and plan.steps:
        extra = valid_microbatch_count(plan.n_steps, lay.pp, lay.vp) - plan.n_steps
        if extra:
            plan.steps.extend(Step([]) for _ in range(extra))
            plan.meta["padding_steps"] = extra
    return plan


class Policy(ABC):
    """Base class of scheduling policies.

    Subclasses set :attr:`name` and :attr:`dynamic` (whether their plans change
    CP groups between steps) and implement :meth:`_plan`. Options are keyword
    arguments of ``__init__``; :func:`get_policy` reports unknown ones.

    :meth:`plan` does the shared work around :meth:`_plan`: it checks the
    input, sets the *modelled* planning time (``Plan.planning_time_s``, see
    :meth:`modelled_planning_s`; deterministic, so one seed gives one
    result) and records the host's wall seconds of :meth:`_plan` as
    ``Plan.meta["planning_wall_s"]`` (host information only, never part of a
    simulated time), attaches :func:`~dcpsim.policies.bound.lower_bound_s`
    of the sequences it did not drop as the plan's bound evaluator (run only
    when ``Plan.lower_bound_s`` is read), and checks the plan.
    """

    name: ClassVar[str] = ""
    dynamic: ClassVar[bool] = False
    executable: ClassVar[bool] = True  # False: the plans are not schedules a run can train with (the bound)

    def options(self) -> dict[str, Any]:
        """The options this policy was built with (recorded in ``Plan.meta``)."""
        return {p: getattr(self, p) for p in init_options(type(self)) if hasattr(self, p)}

    def plan(self, lengths, layout: Layout, cost, *, rng: np.random.Generator | None = None) -> Plan:
        """Plan one global batch.

        ``lengths``: sequence lengths in tokens (1-D, positive integers; the
        id of a sequence is its index). ``cost``: a
        :class:`~dcpsim.cost.CostModel` whose ``tp`` and ``pp`` match the
        layout. ``rng``: only for randomised policies (the built-in ones are
        deterministic and ignore it). Raises
        :class:`~dcpsim.errors.InfeasibleError` when a sequence cannot fit
        any group the policy may form.
        """
        lengths = check_lengths(lengths)
        check_layout_cost(layout, cost)
        t0 = time.perf_counter()
        with gc_paused():
            plan = self._plan(lengths, layout, cost, rng)
        plan.meta["planning_wall_s"] = time.perf_counter() - t0
        plan.planning_time_s = self.modelled_planning_s(lengths, layout, plan)
        if plan.lower_bound_s is None:  # evaluated only if someone reads plan.lower_bound_s
            kept = np.ones(lengths.size, dtype=bool)
            kept[list(plan.dropped)] = False
            plan.bound_evaluator = partial(lower_bound_s, lengths[kept], layout, cost)
        plan.meta.setdefault("options", self.options())
        pad_for_schedule(plan)
        return plan.check()

    def planning_work(self, lengths: np.ndarray, layout: Layout, plan: Plan) -> int:
        """Units of planning work: sequences x CP sizes considered x candidate passes.

        A dynamic policy weighs every sequence against each dynamic CP size, a
        static one against its one size; a policy that tries several
        candidate plans (``plan.meta["candidates"]``: microbatch counts,
        bucket counts) repeats that for each.
        """
        sizes = int(dynamic_sizes(layout).size) if self.dynamic else 1
        passes = max(1, len(plan.meta.get("candidates") or ()))
        return int(lengths.size) * max(sizes, 1) * passes

    def modelled_planning_s(self, lengths: np.ndarray, layout: Layout, plan: Plan) -> float:
        """Host seconds the planner is modelled to take: ``planning_work * PLANNING_S_PER_UNIT``."""
        return float(self.planning_work(lengths, layout, plan)) * PLANNING_S_PER_UNIT

    @abstractmethod
    def _plan(self, lengths: np.ndarray, layout: Layout, cost, rng: np.random.Generator | None) -> Plan:
        """Build the plan (``lengths`` already checked: int64, 1-D, positive)."""


_REGISTRY.base = Policy


# ---------------------------------------------------------------- registry
def register_policy(name: str, cls: type[Policy] | str) -> None:
    """Register a policy class (or a lazy ``"module:Class"`` path) under ``name``.

    Raises :class:`ConfigError` if the name is taken (built-ins included).
    """
    _REGISTRY.register(name, cls)


def list_policies() -> list[str]:
    """Registered policy names, built-ins first in their declared order."""
    return _REGISTRY.names()


def policy_class(name: str) -> type[Policy]:
    """The class registered under ``name`` (imports a built-in on first use)."""
    return _REGISTRY.get(name)


@lru_cache(maxsize=256)
def init_options(cls: type) -> tuple[str, ...]:
    """The keyword options of a policy class: its ``__init__`` parameters but ``self`` (read once per class)."""
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")


def get_policy(name: str, **options: Any) -> Policy:
    """An instance of the policy ``name`` built with ``options``.

    Unknown names and unknown options raise :class:`ConfigError` listing what
    is accepted.
    """
    cls = policy_class(name)
    params = list(init_options(cls))
    for key in options:
        if key not in params:
            raise ConfigError(f"policy.options.{key}", options[key], f"an option of policy {name!r} (one of {params})")
    from dcpsim.schema import check_options

    return cls(**check_options(cls.__init__, options, "policy.options"))


# ------------------------------------------------------------------ search
def candidate_microbatch_counts(m0: int, m_max: int, extra: int, pp: int):
    """Microbatch counts a search tries: ``m0 .. m0+extra``; with PP (where more microbatches
    shrink the pipeline bubble) then growing by ×1.25 up to ``m_max``. Callers stop early."""
    top = min(m0 + extra, max(m_max, m0))
    yield from range(m0, top + 1)
    if pp == 1:
        return
    m = top
    while m < m_max:
        m = min(m_max, max(m + 1, int(round(m * 1.25))))
        yield m
