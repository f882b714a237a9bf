"""``dynamic-solver``'s placement shortcuts (``_Follow.fast``) give exactly the plans of the general paths.

The shortcuts: a walk whose only pick is its first group moves that group's entry alone
(``_Follow._settle_first`` instead of ``_settle_walk``), and after a decision whose join search ended at the
cut with nothing, the next one first tests ``_Placer._cut_none`` (one pass of first tests over the cells)
instead of running the two searches. Random batches and layouts (PP and not, several CP sizes, runs of equal
lengths and long tails of distinct ones), compared with ``fast = False``, meta included.
"""

from __future__ import annotations

import copy

import numpy as np
from policy_cases import cost_model, same_solver_plans

from dcpsim.policies import Layout, get_policy


def _cases():
    """Log-normal lengths with a few near the cap (tall steps, so groups take several short sequences), as
    they are or drawn again from a third to a fifth of them (runs of 2-5 equal sequences), 2-4 sequences per
    rank of a stage."""
    rng = np.random.default_rng(26)
    for j in range(10):
        dp, cp = int(rng.choice([4, 16, 32, 64])), int(rng.choice([1, 4, 8]))
        pp = int(rng.choice([1, 2, 4, 8]))
        M = int(rng.choice([2048, 8192]))
        layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp, gpus_per_domain=int(rng.choice([4, 8])))
        cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
        n = int(rng.integers(2, 5)) * dp * cp
        lengths = np.minimum(rng.lognormal(np.log(M / 16), float(rng.choice([0.8, 1.4])), n).astype(np.int64) + 1,
                             cap)
        tall = max(1, n // 50)
        lengths[:tall] = rng.integers(cap // 2, cap, tall)
        if j % 3:
            q = int(rng.choice([2, 3, 5]))
            lengths = np.concatenate([lengths[:tall], rng.choice(lengths[tall:max(tall + 1, n // q)], n - tall)])
        yield layout, rng.permutation(lengths)


def test_solver_shortcuts_give_the_general_plans(monkeypatch):
    from dcpsim.policies import solver_follow, solver_placer

    taken = {"first": 0, "cut": 0}
    settle_first, cut_none = solver_follow._Follow._settle_first, solver_placer._Placer._cut_none

    def counted_first(self, *a):
        taken["first"] += 1
        return settle_first(self, *a)

    def checked_cut(self, trow, tokrow, fam, thr, cut):
        """Where the test holds, both searches return None (the cut reached) and change no cell."""
        held = cut_none(self, trow, tokrow, fam, thr, cut)
        if held:
            taken["cut"] += 1
            before = copy.deepcopy((self.buckets.by_code, self.buckets.parked))
            assert self._search(trow, tokrow, fam, 1e-9 * (self.gmax + 0.0), cut) is None and self._cut
            assert self._search(trow, tokrow, fam, thr, cut) is None and self._cut
            assert (self.buckets.by_code, self.buckets.parked) == before
        return held

    monkeypatch.setattr(solver_follow._Follow, "_settle_first", counted_first)
    monkeypatch.setattr(solver_placer._Placer, "_cut_none", checked_cut)
    same_solver_plans(_cases(), [(solver_follow._Follow, "fast", False)], [])
    assert taken["first"] > 100 and taken["cut"] > 100, taken


def _least_reference(pl, trow, tokrow, fam):
    """The least increase over every cell, one :meth:`_least_increase` per cell (the definition)."""
    d0, H = np.inf, pl.height
    for code in fam:
        for st, cell in pl.buckets.by_code.get(code, {}).items():
            s_k = pl.S[st]
            d0 = min(d0, pl._least_increase(cell, s_k, trow[code], (s_k if s_k >= H else H) * (1 + 1e-12),
                                            tokrow[code >> 1]))
            if d0 == 0.0:
                return d0
    return d0


def test_solver_least_increase_pass_equals_one_cell_search_each(monkeypatch):
    """``_least_increase_all`` (the usual cell inline) gives the least increase, the excluded least
    (``_excl``) and the cells (parked groups included) of one ``_least_increase`` per cell."""
    from dcpsim.policies import solver_placer

    least_all = solver_placer._Placer._least_increase_all
    seen = []

    def checked(self, trow, tokrow, fam):
        ref = copy.copy(self)
        ref.buckets = copy.deepcopy(self.buckets)
        want = _least_reference(ref, trow, tokrow, fam)
        got = least_all(self, trow, tokrow, fam)
        assert (got, self._excl) == (want, ref._excl)
        assert (self.buckets.by_code, self.buckets.parked) == (ref.buckets.by_code, ref.buckets.parked)
        seen.append(got)
        return got

    monkeypatch.setattr(solver_placer._Placer, "_least_increase_all", checked)
    for layout, lengths in list(_cases())[:6]:
        get_policy("dynamic-solver").plan(lengths, layout, cost_model(1, layout.pp, layout.dp * layout.cp))
    assert len(seen) > 100
