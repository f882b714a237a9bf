"""Helpers shared by the policy test files: cost models, comparable plans, random (batch, layout) cases."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import strategies as st

from dcpsim.cost import CostModel
from dcpsim.policies import Layout, Plan, get_policy


@cache
def cost_model(tp: int, pp: int, dp_cp: int, recompute: str = "full") -> CostModel:
    return CostModel.build("h100-sxm", "llama-13b", tp=tp, pp=pp, dp_cp=dp_cp, recompute=recompute)


def comparable(plan: Plan) -> dict:
    """A plan as a dict without the host's measured planning wall time, for determinism checks.

    ``planning_time_s`` (modelled from the planner's work) stays: it is deterministic.
    """
    d = plan.to_dict()
    d["meta"] = {k: v for k, v in d["meta"].items() if k != "planning_wall_s"}
    return d


def solver_plan(lengths: np.ndarray, layout: Layout, *patches: tuple) -> dict:
    """``dynamic-solver``'s :func:`comparable` plan of a batch (cost model: TP 1, the layout's PP and DP×CP),
    with each ``(object, attribute, value)`` of ``patches`` set for this call alone (a fast path switched
    off, a reference put in its place)."""
    with pytest.MonkeyPatch.context() as m:
        for obj, name, value in patches:
            m.setattr(obj, name, value)
        cost = cost_model(1, layout.pp, layout.dp * layout.cp)
        return comparable(get_policy("dynamic-solver").plan(lengths, layout, cost))


def same_solver_plans(cases, ref: list[tuple], *variants: list[tuple]) -> None:
    """For each ``(layout, lengths)`` of ``cases``: the :func:`solver_plan` with each list of patches of
    ``variants`` (``[]``: the policy as it is) equals the one with the patches ``ref`` (the reference path)."""
    for j, (layout, lengths) in enumerate(cases):
        want = solver_plan(lengths, layout, *ref)
        for i, patches in enumerate(variants):
            assert solver_plan(lengths, layout, *patches) == want, (j, i)


def count_placed(monkeypatch: pytest.MonkeyPatch, cls: type, name: str, pos_at: int) -> list[int]:
    """Wrap method ``cls.name`` (it places the sequences from position ``pos``, its positional argument
    ``pos_at`` after ``self``, and returns the position after the last it placed) so that each call's count
    of placed sequences is appended to the list returned."""
    placed: list[int] = []
    method = getattr(cls, name)

    def counted(self, *args):
        end = method(self, *args)
        placed.append(end - args[pos_at])
        return end

    monkeypatch.setattr(cls, name, counted)
    return placed


@st.composite
def cases(draw, max_seqs: int = 40, max_dp: int = 4, pps=(1, 2, 4), sigma: float = 1.3):
    """A random layout (incl. non-power-of-two DP×CP, TP 2, min_cp > 1) and a batch every dynamic group fits.

    Lengths are log-normal around M/4 with ``sigma``, clipped to what the largest aligned group holds
    (padding included).
    """
    dp = draw(st.integers(1, max_dp))
    cp = draw(st.sampled_from([1, 2, 3, 4]))
    tp = draw(st.sampled_from([1, 2]))
    pp = draw(st.sampled_from(list(pps)))
    M = draw(st.sampled_from([1024, 4096, 16384]))
    R = dp * cp
    cmax = 1 << (R.bit_length() - 1)
    min_cp = draw(st.sampled_from([c for c in (1, 2, 4) if c <= cmax]))
    layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, tp=tp, pp=pp, min_cp=min_cp, gpus_per_domain=4)
    n = draw(st.integers(0, max_seqs))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    lengths = np.clip(rng.lognormal(np.log(M / 4), sigma, n), 1, cmax * M - 2 * cmax).astype(np.int64)
    return lengths, layout
