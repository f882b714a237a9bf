"""Scheduling policies (a name registry) and the iteration plans they produce."""

from dcpsim.policies.plan import Group, Layout, Plan, PlanError, Step, check_fits, is_pow2

__all__ = ["Group", "Layout", "Plan", "PlanError", "Step", "check_fits", "is_pow2"]
