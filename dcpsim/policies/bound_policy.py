"""The ``bound`` policy: a plan with no steps that carries the lower bound (see :mod:`dcpsim.policies.bound`)."""

from __future__ import annotations

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.base import Policy
from dcpsim.policies.bound import SCOPES, bound_terms, combine_bound
from dcpsim.policies.fit import dynamic_sizes, raise_too_long
from dcpsim.policies.plan import Plan


class BoundPolicy(Policy):
    """``bound``: not a schedule but the ideal to measure schedules against.

    Returns a plan with no steps whose ``lower_bound_s`` is
    :func:`lower_bound_s` for the chosen ``scope``, with its terms in
    ``meta``. Every sequence is listed in ``dropped`` (reason "bound: not
    scheduled") so the plan still validates; it must never be executed.
    """

    name = "bound"
    dynamic = True
    executable = False  # a lower bound on the iteration time, not a schedule: never a plan's pick

    def __init__(self, scope: str = "any") -> None:
        if scope not in SCOPES:
            raise ConfigError("policy.options.scope", scope, f"one of {SCOPES}")
        self.scope = scope

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        terms = bound_terms(lengths, layout, cost)
        value = combine_bound(terms, layout, self.scope)
        if not np.isfinite(value):
            sizes = dynamic_sizes(layout) if self.scope != "static" else np.array([layout.cp])
            largest = int(max(sizes.max(), layout.cp if self.scope == "any" else 0))
            fits = (per_rank_tokens(lengths[None, :], sizes[:, None]) <= layout.max_tokens_per_rank).any(axis=0)
            if self.scope == "any":
                fits |= per_rank_tokens(lengths, layout.cp) <= layout.max_tokens_per_rank
            raise_too_long(lengths, ~fits, largest, layout.max_tokens_per_rank, self.scope if self.scope != "any" else "")
        w, t1 = terms[self.scope]
        meta = {
            "executable": False,
            "scope": self.scope,
            "work_term_s": w,
            "longest_term_s": t1,
            "linear_s_per_token": terms["linear_s_per_token"],
            "bounds_s": {s: combine_bound(terms, layout, s) for s in SCOPES},
            "explain": "max(total GPU-seconds at each sequence's cheapest CP size / ranks, pp x the longest "
            "sequence's best per-stage time); see dcpsim.policies.bound",
        }
        return Plan(
            policy=self.name,
            layout=layout,
            lengths=lengths,
            steps=[],
            dynamic=True,
            dropped={i: "bound: not scheduled (the bound policy only computes a lower bound)" for i in range(lengths.size)},
            lower_bound_s=value,
            meta=meta,
        )
