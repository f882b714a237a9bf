"""Scheduling policies (a name registry) and the iteration plans they produce.

``get_policy(name, **options).plan(lengths, layout, cost)`` returns a
validated :class:`Plan`. Built-in names: ``packing`` (Megatron's static
``dp_balanced``), ``packing-balanced`` (static CP, cost-balanced),
``dynamic`` (Megatron's ``default_dynamic_cp``), ``dynamic-solver`` (dynamic
CP planned with the cost model), ``dynamic-pr2959`` (the blog-era
scheduler of Megatron-LM pull request #2959: FLOPs model, bucket search,
1F1B scoring), ``bound`` (a lower bound, not a schedule) and ``milp``
(exact, small batches). :func:`evaluate_plan` scores any plan
with the cost model; :func:`lower_bound_s` is the ideal to compare against.
"""

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.policies.base import (
    BUILTIN_POLICIES,
    Policy,
    get_policy,
    list_policies,
    policy_class,
    register_policy,
)
from dcpsim.policies.bound import lower_bound_s
from dcpsim.policies.costs import PlanCost, SeqCosts, evaluate_plan, pipeline_makespan_s, plan_makespan_s
from dcpsim.policies.plan import Group, Layout, Plan, PlanError, Step, check_fits, is_pow2

__all__ = [
    "BUILTIN_POLICIES",
    "Group",
    "Layout",
    "Plan",
    "PlanCost",
    "PlanError",
    "Policy",
    "SeqCosts",
    "Step",
    "check_fits",
    "evaluate_plan",
    "get_policy",
    "is_pow2",
    "list_policies",
    "lower_bound_s",
    "per_rank_tokens",
    "pipeline_makespan_s",
    "plan_makespan_s",
    "policy_class",
    "register_policy",
]
