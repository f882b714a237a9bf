"""The forked prefetching sampler of PR #2959 (dcpsim.sim.sampler) and the naive packer of the blog's baseline."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.errors import InfeasibleError
from dcpsim.policies import get_policy
from dcpsim.policies.plan import Layout, PlanError
from dcpsim.sim.sampler import PrefetchSampler


def _sampler(n: list[int], p: list[float], depth: int) -> PrefetchSampler:
    return PrefetchSampler(depth, lambda j: (n[j], p[j]))


def test_planner_hides_behind_one_iteration_when_batches_outnumber_the_prefetch():
    # 40 microbatches per batch, prefetch 32: at the start of iteration k the sampler enters batch k+1, whose
    # plan was asked for when plan k was taken (start of iteration k-1): one iteration to hide it.
    n, p, T = [40] * 8, [5.0] * 8, 10.0
    s = _sampler(n, p, 32)
    t, stalls = 0.0, []
    for k in range(5):
        st = s.stall(k, t)
        stalls.append(st)
        t += st + T
    assert stalls == [0.0] * 5  # set-up planned what iteration 0 needs; each later plan hides behind an iteration


def test_batches_shorter_than_the_prefetch_need_the_plan_after_next():
    # A slow plan for batch 4 (p = 10 s, T = 4 s): with 40 microbatches a batch, iteration 3 starts by needing
    # batch 4 (asked for at the start of iteration 2: 6 s of stall); with 20, iteration 2 already needs it.
    p = [0.0] * 4 + [10.0] + [0.0] * 8
    for n, at in ((40, 3), (20, 2)):
        s = _sampler([n] * 13, p, 32)
        t, stalls = 0.0, []
        for k in range(6):
            st = s.stall(k, t)
            stalls.append(st)
            t += st + 4.0
        assert stalls == pytest.approx([6.0 if k == at else 0.0 for k in range(6)]), n


def test_slow_planner_stalls_by_its_excess_over_the_iteration():
    n, p, T = [40] * 10, [12.0] * 10, 10.0
    s = _sampler(n, p, 32)
    t, stalls = 0.0, []
    for k in range(6):
        st = s.stall(k, t)
        stalls.append(st)
        t += st + T
    assert stalls[1:] == pytest.approx([2.0] * 5)


def test_sampler_run_is_deterministic_and_shows_stalls():
    from dcpsim.run.config import RunConfig
    from dcpsim.run.single import run_simulation

    base = {"model": {"name": "llama-13b-8l-v131072"}, "cluster": {"gpus": 64},
            "parallel": {"tp": 1, "pp": 8, "cp": 1, "max_tokens_per_rank": 65536},
            "workload": {"gbs": 256, "name": {"type": "wikipedia_shape", "mean": 1050.0}, "min_len": 256, "max_len": 65536},
            "policy": {"name": "dynamic-pr2959", "options": {"max_cp": 8, "host_speed": 0.05}},
            "sim": {"iterations": 4, "seed": 3, "planning": "sampler", "sampler_prefetch": 32}}
    a = run_simulation(RunConfig.model_validate(base)).iterations
    b = run_simulation(RunConfig.model_validate(base)).iterations
    assert list(a["planning_stall_s"]) == list(b["planning_stall_s"])
    assert a["planning_stall_s"].iloc[1:].max() > 0  # a slow host (0.05x) cannot hide the planner


# ----------------------------------------------------------------- the blog's baseline packer
def _cost(dp: int):
    from dcpsim.cost import CostModel

    return CostModel.build("h100-sxm", "llama-13b", tp=1, pp=1, dp_cp=dp)


def _groups(plan):
    return [[g.seq_ids for g in st.groups] for st in plan.steps]


def test_naive_packer_repeats_its_last_pack_and_counts_it_once():
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=100)
    plan = get_policy("packing-pr2959").plan(np.array([60, 30, 50, 20, 90]), lay, _cost(2))
    # next-fit [60,30] [50,20] [90], the last listed again -> 4 packs, a multiple of DP: nothing moves
    assert _groups(plan) == [[[0, 1], [2, 3]], [[4], [4]]]
    assert plan.repeats == {4: 1}
    assert list(plan.counted_lengths) == [60, 30, 50, 20, 90]


def test_naive_packer_moves_samples_off_the_shared_last_pack():
    lay = Layout(dp=4, cp=1, max_tokens_per_rank=100)
    plan = get_policy("packing-pr2959").plan(np.array([60, 30, 50, 20, 90, 5, 5]), lay, _cost(4))
    assert _groups(plan) == [[[0, 1], [2, 3], [4, 5, 6], [4, 5, 6]]]
    lay = Layout(dp=4, cp=1, max_tokens_per_rank=100)
    plan = get_policy("packing-pr2959").plan(np.array([60, 30, 50, 20, 10, 5]), lay, _cost(4))
    # [60,30] [50,20,10,5] + the same list again = 3 packs; one sample moves off the shared list (both shrink)
    assert _groups(plan) == [[[0, 1], [2, 3, 4], [2, 3, 4], [5]]]
    assert plan.repeats == {2: 1, 3: 1, 4: 1}


def test_naive_packer_fails_like_the_code_when_too_few_samples():
    with pytest.raises(InfeasibleError, match="Not enough samples"):
        get_policy("packing-pr2959").plan(np.array([10, 10]), Layout(dp=8, cp=1, max_tokens_per_rank=100), _cost(8))


def test_naive_packer_with_no_sample_is_infeasible_not_an_index_error():
    """An empty batch (or one whose every sequence is dropped as too long) raised a bare IndexError from
    ``packs[-1]``; every other policy plans it. Megatron's packer has no last pack to repeat: InfeasibleError."""
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=100)
    with pytest.raises(InfeasibleError, match="no sample to pack"):
        get_policy("packing-pr2959").plan(np.array([], dtype=np.int64), lay, _cost(2))
    with pytest.raises(InfeasibleError, match="1 dropped as too long"):
        get_policy("packing-pr2959", too_long="drop").plan(np.array([500]), lay, _cost(2))


def test_repeated_sequences_are_validated():
    lay = Layout(dp=2, cp=1, max_tokens_per_rank=100)
    plan = get_policy("packing-pr2959").plan(np.array([60, 30, 50, 20, 90]), lay, _cost(2))
    plan.repeats = {}
    with pytest.raises(PlanError, match="scheduled 2 times"):
        plan.check()


def test_naive_packer_bin_capacity_is_its_own():
    lengths = np.array([40] * 16)
    lay = Layout(dp=2, cp=2, max_tokens_per_rank=100)
    small = get_policy("packing-pr2959", bin_tokens_per_rank=40).plan(lengths, lay, _cost(4))
    big = get_policy("packing-pr2959").plan(lengths, lay, _cost(4))
    assert small.n_steps > big.n_steps
    assert small.layout.max_tokens_per_rank == 40
