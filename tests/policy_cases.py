"""Helpers shared by the policy test files: cost models, comparable plans, random (batch, layout) cases."""

from __future__ import annotations

from functools import cache

import numpy as np
from hypothesis import strategies as st

from dcpsim.cost import CostModel
from dcpsim.policies import Layout, Plan


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
