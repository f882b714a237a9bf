"""``dynamic-solver`` shortcuts that skip work give exactly the plans of doing it.

A candidate without a height limit is not placed again when a candidate with the same CP choice and a
limit made every decision the unlimited placement makes (``_Placer.unbounded_same``); these tests place
both and compare, on random batches and layouts (PP and not, several CP sizes, runs of equal lengths), and
with forced small screens (the screen's placements reuse alike).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from policy_cases import comparable, cost_model, same_solver_plans

from dcpsim.policies import Layout
from dcpsim.policies.costs import SeqCosts
from dcpsim.policies.fit import dynamic_fit


def _batches(seed: int, count: int, big: bool = False):
    """Random layouts (pp 1/2/4/8, dp×cp up to 64 ranks, NVLink domains of 4/8) and batches: log-normal
    lengths, some with few distinct lengths (long runs of equal sequences), some with one very long
    sequence (the tallest goes first)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        dp, cp = int(rng.choice([1, 2, 4, 8, 16])), int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 2, 4, 8]))
        M = int(rng.choice([1024, 4096, 16384]))
        layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp, gpus_per_domain=int(rng.choice([4, 8])))
        cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
        n = int(rng.integers(20, 1500 if big else 400))
        lengths = np.minimum(rng.lognormal(np.log(M / 3), float(rng.choice([0.6, 1.3, 2.0])), n).astype(np.int64) + 1,
                             cap)
        if rng.random() < 0.6:  # one microbatch's worth (m0 = 1: the coarse m0 + 1 choice is the plain m0 one)
            fill = rng.uniform(0.3, 0.95) * layout.ranks_per_stage * M
            lengths = lengths[: max(2, int(np.searchsorted(np.cumsum(lengths), fill)))]
            n = lengths.size
        r = rng.random()
        if r < 0.3:
            lengths = rng.choice(lengths[: int(rng.integers(2, 12))], n)  # runs of equal lengths
        elif r < 0.6:
            lengths[int(rng.integers(n))] = cap  # one sequence far taller than the rest
        yield layout, lengths


def _candidates(layout, lengths):
    """(search context, SeqCosts, cap, need, candidates) as ``DynamicSolverPolicy._plan`` builds them."""
    from dcpsim.policies.solver import _Search

    cost = cost_model(1, layout.pp, layout.dp * layout.cp)
    sizes, need = dynamic_fit(lengths, layout)
    sc = SeqCosts(lengths, layout, cost, sizes)
    cap = layout.max_tokens_per_rank
    ctx = _Search(sc, layout, cap, need, 6)
    cands = []
    for m, choice_u, height in ctx.candidates():
        ctx.scored(float(-m))  # always improving: every candidate of the grid
        cands.append((choice_u[ctx.inv], height))
    return ctx, sc, cap, need, cands


def _check_reuse(layout, lengths, bulk: bool) -> tuple[int, int]:
    """Place every finite-height candidate and, where it says it is the unlimited placement's, that one too;
    the plans must be equal. Returns (candidates that said so, finite-height candidates)."""
    from dcpsim.policies.solver_placer import _Placer

    ctx, sc, cap, need, cands = _candidates(layout, lengths)
    same = total = 0
    for choice, height in cands:
        if not np.isfinite(height):
            continue
        total += 1
        p = _Placer(sc, layout, cap, need, choice, height, ctx.table)
        p.bulk, p.track = bulk, True
        plan = p.run("dynamic-solver", lengths)
        if p.unbounded_same():
            same += 1
            q = _Placer(sc, layout, cap, need, choice, np.inf, ctx.table)
            q.bulk = bulk
            assert comparable(q.run("dynamic-solver", lengths)) == comparable(plan)
    return same, total


def test_unbounded_same_placements_equal_the_unlimited_ones():
    """Where a placement with a height limit says it made the unlimited placement's decisions, placing the
    same choice without the limit gives the same plan (bulk runs and one full decision per sequence)."""
    same = total = 0
    for j, (layout, lengths) in enumerate(_batches(3, 24)):
        s, t = _check_reuse(layout, lengths, bulk=j % 3 != 0)
        same, total = same + s, total + t
    assert same >= 5 and total - same >= 1  # the shortcut is taken, and refused too


@pytest.mark.slow
def test_unbounded_same_placements_equal_the_unlimited_ones_many():
    same = total = 0
    for seed in range(4, 10):
        for j, (layout, lengths) in enumerate(_batches(seed, 30, big=True)):
            s, t = _check_reuse(layout, lengths, bulk=j % 3 != 0)
            same, total = same + s, total + t
    assert same >= 20


def test_reused_candidates_give_the_plans_of_placing_each():
    """The policy's plans (meta included: every candidate's makespan and steps) are those it makes when
    every candidate is placed, and the reuse does happen on some of these batches."""
    from dcpsim.policies import solver, solver_placer

    reused = []
    place = solver._Full.place

    def counted(self, choice, height):
        before = len(self.unbounded)
        out = place(self, choice, height)
        reused.append(not np.isfinite(height) and choice.tobytes() in self.unbounded and before == len(self.unbounded))
        return out

    same_solver_plans(_batches(11, 16), [(solver_placer._Placer, "unbounded_same", lambda self: False)],
                      [(solver._Full, "place", counted)])
    assert any(reused)


def _take_loop(t, r, add, tok, floor, s_k, most):
    """The follow's per-sequence loop (the definition of ``solver_follow._take``)."""
    c = 0
    while c < most:
        nt = t + add
        if not (r >= tok and floor <= nt <= s_k):
            break
        t, r, c = nt, r - tok, c + 1
    return c, t, r


def test_take_equals_the_per_sequence_loop():
    """The bulk count of equal sequences a group takes (accumulated sums, binary search, estimate) equals the
    loop's count, time and room exactly, on random groups, heights that the sums hit exactly, rooms that bind
    first, floors above the first new time, and zero-length additions."""
    from dcpsim.policies.solver_follow import _take

    rng = np.random.default_rng(5)
    for _ in range(3000):
        add = float(rng.choice([0.0, rng.uniform(1e-6, 1e-3), rng.uniform(0.1, 3.0), 1 / 3]))
        t = float(rng.uniform(0, 50))
        most = int(rng.integers(0, 400))
        tok = int(rng.choice([0, 1, rng.integers(1, 5000)]))
        r = int(rng.integers(0, 400_000))
        k = int(rng.integers(0, most + 2))
        if rng.random() < 0.4:  # a height the sequential sums reach exactly
            s_k = t
            for _ in range(k):
                s_k += add
        else:
            s_k = t + add * k * float(rng.uniform(0.9, 1.1))
        floor = float(rng.choice([-np.inf, t, t + add, t + 2 * add + 1e-12]))
        assert _take(t, r, add, tok, floor, s_k, most) == _take_loop(t, r, add, tok, floor, s_k, most)


def test_join_search_cut_gives_the_plans_without_it():
    """The join search that stops at the codes dearer than a first new group adding nothing (and returns no
    join where those codes hold nothing near zero) gives the plans of the full join search, meta included,
    on random batches; the cut does return no join for many sequences."""
    from dcpsim.policies import solver_placer

    join = solver_placer._Placer._join_option
    cut = []

    def counted(self, trow, tokrow, fam, first=None):
        out = join(self, trow, tokrow, fam, first)
        cut.append(first is not None and out is None and self._cut)
        return out

    def uncut(self, trow, tokrow, fam, first=None):
        return join(self, trow, tokrow, fam, None)

    same_solver_plans(_batches(17, 12), [(solver_placer._Placer, "_join_option", uncut)],
                      [(solver_placer._Placer, "_join_option", counted)])
    assert sum(cut) > 100


def _screened_batches(seed: int, count: int):
    """Random layouts of 16-32 DP ranks (so a forced small screen takes a subsample on 8-16 of them) and
    batches of log-normal lengths, most cut to one microbatch's worth (m0 = 1: the coarse m0 + 1 choice is the
    plain m0 one, on the subsample too), some with runs of equal lengths or one very long sequence; with the
    policy options that screen them (``screen_above`` below the batch, ``screen_sample`` a half or a quarter
    of it)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        dp, cp = int(rng.choice([16, 32])), int(rng.choice([1, 2, 4]))
        pp = int(rng.choice([1, 2, 4, 8]))
        M = int(rng.choice([1024, 4096, 16384]))
        layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp, gpus_per_domain=int(rng.choice([4, 8])))
        cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
        n, mu = int(rng.integers(600, 2000)), np.log(M / float(rng.choice([2, 4, 8])))
        lengths = np.minimum(rng.lognormal(mu, float(rng.choice([0.8, 1.3, 2.0])), n).astype(np.int64) + 1, cap)
        if rng.random() < 0.7:
            fill = rng.uniform(0.5, 0.95) * layout.ranks_per_stage * M
            lengths = lengths[: max(64, int(np.searchsorted(np.cumsum(lengths), fill)))]
        r = rng.random()
        if r < 0.3:
            lengths = rng.choice(lengths[: int(rng.integers(2, 12))], lengths.size)  # runs of equal lengths
        elif r < 0.6:
            lengths[int(rng.integers(lengths.size))] = cap  # one sequence far taller than the rest
        n = lengths.size
        yield layout, lengths, {"screen_above": n // 2, "screen_sample": n // int(rng.choice([2, 4]))}


def test_screen_reuse_gives_the_plans_of_placing_each():
    """With forced small screens, the screen's placements reuse as the full ones do (a candidate without a
    height limit takes the subsample plan of one with a limit and its choice, where that one made the unlimited
    decisions; screened candidates with a limit are placed in full first): every reused plan is the one
    placing it gives, and the policy's plans (meta included: every candidate's screened and full makespan and
    steps) are those it makes with no reuse. Both reuses happen on these batches."""
    from dcpsim.policies import get_policy, solver, solver_placer

    place = solver._Full.place
    reused = {"screen": 0, "full": 0}

    def checked(self, choice, height):
        reuse = not np.isfinite(height) and choice.tobytes() in self.unbounded
        plan, ev = place(self, choice, height)
        if reuse:
            reused["full" if self.lengths.size == n_batch[0] else "screen"] += 1
            fresh = solver_placer._Placer(*self.args, choice, np.inf, self.table).run(self.name, self.lengths)
            assert comparable(fresh) == comparable(plan)
            again = solver.evaluate_plan(fresh, self.cost)
            assert all(np.array_equal(getattr(again, f.name), getattr(ev, f.name)) for f in fields(ev))
        return plan, ev

    screened, n_batch = 0, [0]
    for j, (layout, lengths, opts) in enumerate(_screened_batches(23, 30)):
        n_batch[0] = lengths.size
        cost = cost_model(1, layout.pp, layout.dp * layout.cp)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(solver_placer._Placer, "unbounded_same", lambda self: False)
            want = comparable(get_policy("dynamic-solver", **opts).plan(lengths, layout, cost))
        with pytest.MonkeyPatch.context() as m:
            m.setattr(solver._Full, "place", checked)
            got = comparable(get_policy("dynamic-solver", **opts).plan(lengths, layout, cost))
        assert got == want, j
        screened += "screen" in got["meta"]
    assert screened >= 10 and reused["screen"] >= 3 and reused["full"] >= 1, (screened, reused)
