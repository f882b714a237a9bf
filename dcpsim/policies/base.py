"""The :class:`Policy` base class and the policy registry.

A policy turns one global batch (sequence lengths in tokens, ids = positions
in the array) and a :class:`~dcpsim.policies.plan.Layout` into a validated
:class:`~dcpsim.policies.plan.Plan`. Policies are looked up by name::

    from dcpsim.policies import get_policy
    plan = get_policy("dynamic").plan(lengths, layout, cost)

Adding a policy is one new module (a :class:`Policy` subclass) and one line in
:data:`BUILTIN_POLICIES` (built-ins are imported lazily, so importing
:mod:`dcpsim.policies` stays cheap); code outside the package can call
:func:`register_policy`. A name can be registered once: a duplicate raises
:class:`~dcpsim.errors.ConfigError`.
"""

from __future__ import annotations

import importlib
import inspect
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.policies.plan import Layout, Plan, Step

# name -> "module:Class". One line per built-in policy.
BUILTIN_POLICIES: dict[str, str] = {
    "packing": "dcpsim.policies.static:PackingPolicy",
    "packing-balanced": "dcpsim.policies.static:BalancedPackingPolicy",
    "dynamic": "dcpsim.policies.dynamic:DynamicPolicy",
    "dynamic-solver": "dcpsim.policies.solver:DynamicSolverPolicy",
    "bound": "dcpsim.policies.bound:BoundPolicy",
    "milp": "dcpsim.policies.milp:MilpPolicy",
    "dynamic-pr2959": "dcpsim.policies.pr2959:Pr2959Policy",
}

_REGISTRY: dict[str, type[Policy] | str] = dict(BUILTIN_POLICIES)


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
    input, times the planning (``Plan.planning_time_s``, wall seconds of
    :meth:`_plan` only), fills ``Plan.lower_bound_s`` with
    :func:`~dcpsim.policies.bound.lower_bound_s` of the sequences it did not
    drop, and validates the plan.
    """

    name: ClassVar[str] = ""
    dynamic: ClassVar[bool] = False

    def options(self) -> dict[str, Any]:
        """The options this policy was built with (recorded in ``Plan.meta``)."""
        sig = inspect.signature(type(self).__init__)
        return {p: getattr(self, p) for p in sig.parameters if p != "self" and hasattr(self, p)}

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
        from dcpsim.policies.bound import lower_bound_s

        lengths = check_lengths(lengths)
        check_layout_cost(layout, cost)
        t0 = time.perf_counter()
        plan = self._plan(lengths, layout, cost, rng)
        plan.planning_time_s = time.perf_counter() - t0
        if plan.lower_bound_s is None:
            kept = np.ones(lengths.size, dtype=bool)
            kept[list(plan.dropped)] = False
            plan.lower_bound_s = lower_bound_s(lengths[kept], layout, cost)
        plan.meta.setdefault("options", self.options())
        pad_for_schedule(plan)
        return plan.validate()

    @abstractmethod
    def _plan(self, lengths: np.ndarray, layout: Layout, cost, rng: np.random.Generator | None) -> Plan:
        """Build the plan (``lengths`` already checked: int64, 1-D, positive)."""


# ---------------------------------------------------------------- registry
def register_policy(name: str, cls: type[Policy] | str) -> None:
    """Register a policy class (or a lazy ``"module:Class"`` path) under ``name``.

    Raises :class:`ConfigError` if the name is taken (built-ins included).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError("policy.name", name, "a non-empty string")
    if name in _REGISTRY:
        raise ConfigError("policy.name", name, f"a name not already registered (taken: {sorted(_REGISTRY)})")
    if not isinstance(cls, str) and not (inspect.isclass(cls) and issubclass(cls, Policy)):
        raise ConfigError("policy class", cls, "a Policy subclass or a 'module:Class' string")
    _REGISTRY[name] = cls


def list_policies() -> list[str]:
    """Registered policy names, built-ins first in their declared order."""
    return list(_REGISTRY)


def policy_class(name: str) -> type[Policy]:
    """The class registered under ``name`` (imports a built-in on first use)."""
    if name not in _REGISTRY:
        raise ConfigError("policy.name", name, f"one of {list_policies()}")
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        mod, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(mod), attr)
        _REGISTRY[name] = entry
    return entry


def get_policy(name: str, **options: Any) -> Policy:
    """An instance of the policy ``name`` built with ``options``.

    Unknown names and unknown options raise :class:`ConfigError` listing what
    is accepted.
    """
    cls = policy_class(name)
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    for key in options:
        if key not in params:
            raise ConfigError(f"policy.options.{key}", options[key], f"an option of policy {name!r} (one of {params})")
    from dcpsim.validation import check_options

    return cls(**check_options(cls.__init__, options, "policy.options"))


# ------------------------------------------------------------------ checks
def check_lengths(lengths) -> np.ndarray:
    """Lengths as a 1-D int64 array of positive token counts (ConfigError otherwise)."""
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ConfigError("lengths", f"array of shape {arr.shape}", "a 1-D array of sequence lengths")
    if arr.size and (not np.issubdtype(arr.dtype, np.number) or np.any(arr != np.floor(arr)) or arr.min() < 1):
        raise ConfigError("lengths", arr[:8].tolist(), "positive integer token counts")
    return arr.astype(np.int64)


def check_layout_cost(layout: Layout, cost) -> None:
    """The cost model must describe the layout's TP and PP (its times are per stage)."""
    if not isinstance(layout, Layout):
        raise ConfigError("layout", type(layout).__name__, "a dcpsim.policies.Layout")
    for f in ("tp", "pp"):
        if getattr(cost, f) != getattr(layout, f):
            raise ConfigError(f"cost.{f}", getattr(cost, f), f"the layout's {f} ({getattr(layout, f)})")


def dynamic_sizes(layout: Layout) -> np.ndarray:
    """CP group sizes a dynamic plan may use: powers of two from min_cp to max_dynamic_cp."""
    out = []
    c = layout.min_cp
    while c <= layout.max_dynamic_cp:
        out.append(c)
        c *= 2
    return np.asarray(out, dtype=np.int64)


def smallest_fitting_size(lengths: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Index into ``sizes`` (ascending) of the smallest group that holds each sequence; -1 if none."""
    fits = per_rank_tokens(lengths[None, :], sizes[:, None]) <= capacity  # (n_sizes, n)
    idx = np.argmax(fits, axis=0)
    return np.where(fits.any(axis=0), idx, -1)


def dynamic_fit(lengths: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, need): the dynamic CP sizes and, per sequence, the index of the smallest that holds it.

    Raises :class:`InfeasibleError` for a sequence that no dynamic group holds.
    """
    sizes = dynamic_sizes(layout)
    M = layout.max_tokens_per_rank
    need = smallest_fitting_size(lengths, sizes, M)
    if (need < 0).any():
        raise_too_long(lengths, need < 0, int(sizes[-1]), M, "dynamic")
    return sizes, need


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


def raise_too_long(lengths: np.ndarray, bad: np.ndarray, largest: int, capacity: int, what: str) -> None:
    """Raise InfeasibleError for the longest of the sequences flagged in ``bad``."""
    ids = np.nonzero(bad)[0]
    i = int(ids[np.argmax(lengths[ids])])
    raise InfeasibleError(
        "capacity",
        f"sequence {i} has {int(lengths[i])} tokens; the largest {what + ' ' if what else ''}CP group ({largest} ranks x "
        f"{capacity} tokens per rank, each sequence padded to a multiple of 2*cp) cannot hold it "
        f"({int(bad.sum())} sequence(s) too long)",
    )
