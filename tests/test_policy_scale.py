"""Policies restructured for scale give the same plans as their straightforward scans.

Each reference below is the previous implementation (a numpy scan over all
groups or bins per sequence), kept here only as the definition the fast code
must reproduce exactly on random batches.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from policy_cases import comparable, cost_model

from dcpsim.policies import Layout, get_policy, per_rank_tokens
from dcpsim.policies import dynamic as dyn


class _ScanMicrobatch(dyn._Microbatch):
    """``dynamic``'s option choice as a scan of every group of the microbatch (the definition)."""

    def choose(self, i: int):
        ctx, ng = self.ctx, self.ng
        k0 = int(ctx.need[i])
        gs = self.g_sidx[:ng]
        ok = (gs >= k0) & (self.g_tok[:ng] + ctx.tok[i][gs] <= ctx.M)
        newv = self.g_load[:ng] + ctx.work[i][gs]
        f0 = ok & (newv <= self.cur_max)
        kj, gj = ctx.ns, -1
        if f0.any():
            key = np.where(f0, gs * self.BIG + np.arange(ng), np.inf)
            gj = int(np.argmin(key))
            kj = int(gs[gj])
        for kk in range(k0, kj):
            if ctx.work[i][kk] <= self.cur_max and self.first_free(kk) >= 0:
                return ("new", kk)
        if gj >= 0:
            return ("join", gj)
        return self._least_raise(i)


class _ScanCtx(dyn._Ctx):
    """``dynamic``'s empty-rank filling with a re-layout after every doubling (the definition)."""

    def _fill_empty_ranks(self, mb, order, ids, left, stats):
        sizes_g = [self.size_list[int(x)] for x in mb.g_sidx[: mb.ng]]
        starts = list(mb.g_start)
        used = sum(sizes_g)
        free = mb.free
        while free:
            cmin = min(sizes_g)
            if not (2 * cmin <= self.cmax and used + cmin <= self.R):
                stats["full_group_fills"] += 1
                return self._one_full_group(order, ids)
            g = sizes_g.index(cmin)
            sizes_g[g] = 2 * cmin
            used += cmin
            stats["doublings"] += 1
            starts = self._relayout(sizes_g)
            free = ((1 << self.R) - 1) & ~((1 << sum(sizes_g)) - 1)
        groups = [dyn.Group(int(starts[g]), int(sizes_g[g]), mb.members[g]) for g in range(mb.ng)]
        groups.sort(key=lambda gr: gr.start)
        return dyn.Step(groups), left


def _batches():
    rng = np.random.default_rng(13)
    for _ in range(12):
        dp, cp = int(rng.choice([1, 2, 3, 4, 6, 16])), int(rng.choice([1, 2, 4, 8]))
        M = int(rng.choice([512, 2048, 8192]))
        n = int(rng.integers(1, 400))
        layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M)
        cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
        lengths = np.minimum(rng.lognormal(np.log(M / 2), 1.2, n).astype(np.int64) + 1, cap)
        if rng.random() < 0.3:
            lengths = rng.choice(lengths[:3], n)  # many ties
        yield layout, lengths


@pytest.mark.parametrize("delta", [0.05, 1.0])
def test_dynamic_trees_give_the_scan_plans(monkeypatch, delta):
    seen = {"doublings": 0, "full_group_fills": 0}
    for layout, lengths in _batches():
        cost = cost_model(1, 1, layout.dp * layout.cp)
        fast = get_policy("dynamic", cap_delta=delta).plan(lengths, layout, cost)
        with monkeypatch.context() as m:
            m.setattr(dyn, "_Microbatch", _ScanMicrobatch)
            m.setattr(dyn, "_Ctx", _ScanCtx)
            ref = get_policy("dynamic", cap_delta=delta).plan(lengths, layout, cost)
        assert comparable(fast) == comparable(ref)
        for k in seen:
            seen[k] += fast.meta[k]
    assert min(seen.values()) > 0, seen  # both ways of filling empty ranks were exercised


def _lpt_scan(order, t, tok, n_bins, cap):
    """``packing-balanced``'s LPT: every sequence to the least-loaded bin with room, ties to the lowest bin."""
    room = np.full(n_bins, cap, dtype=np.int64)
    load = np.zeros(n_bins)
    members = [[] for _ in range(n_bins)]
    for i in order.tolist():
        cand = np.where(room >= tok[i], load, np.inf)
        b = int(np.argmin(cand))
        if not np.isfinite(cand[b]):
            return None
        room[b] -= tok[i]
        load[b] += t[i]
        members[b].append(i)
    return members


def _deal_scan(bins, t, ids, m, layout):
    """``packing-balanced``'s dealing: largest bin first to the lightest replica with fewer than m bins."""
    dp = layout.dp
    cost_b = np.array([t[b].sum() if b else 0.0 for b in bins])
    order = np.lexsort((np.arange(len(bins)), -cost_b))
    total, count = np.zeros(dp), np.zeros(dp, dtype=np.int64)
    per = [[] for _ in range(dp)]
    for b in order.tolist():
        j = int(np.argmin(np.where(count < m, total, np.inf)))
        total[j] += cost_b[b]
        count[j] += 1
        per[j].append([int(ids[x]) for x in bins[b]])
    return [dyn.Step([dyn.Group(j * layout.cp, layout.cp, per[j][k]) for j in range(dp)]) for k in range(m)]


def test_balanced_packing_heaps_give_the_scan_plans(monkeypatch):
    from dcpsim.policies import static

    for layout, lengths in itertools.islice(_batches(), 8):
        ok = per_rank_tokens(lengths, layout.cp) <= layout.max_tokens_per_rank
        lengths = lengths[ok] if ok.any() else np.array([1])
        cost = cost_model(1, 1, layout.dp * layout.cp)
        fast = get_policy("packing-balanced").plan(lengths, layout, cost)
        with monkeypatch.context() as m:
            m.setattr(static.BalancedPackingPolicy, "_lpt", staticmethod(_lpt_scan))
            m.setattr(static.BalancedPackingPolicy, "_deal", staticmethod(_deal_scan))
            ref = get_policy("packing-balanced").plan(lengths, layout, cost)
        assert comparable(fast) == comparable(ref)


def test_seq_costs_on_distinct_lengths_equal_the_per_sequence_table():
    from dcpsim.policies import SeqCosts
    from dcpsim.policies.costs import split_parts

    rng = np.random.default_rng(1)
    L = np.concatenate([rng.integers(1, 30000, 300), rng.integers(1, 50, 100)])
    layout = Layout(dp=4, cp=4, max_tokens_per_rank=8192, pp=2)
    cost = cost_model(1, 2, 16)
    sizes = np.array([1, 2, 4, 8, 16])
    sc = SeqCosts(L, layout, cost, sizes)
    n, ns = L.size, sizes.size
    # the definition: every sequence alone in its own pack, for every size, without and with network
    bc = cost.batch_cost(np.tile(L, 2 * ns), np.arange(2 * ns * n), np.repeat(np.tile(sizes, 2), n),
                         np.repeat(np.array([False, True]), ns * n))
    attn, comm, _ = split_parts(bc, cost.recompute)
    assert np.array_equal(sc.attn_s, attn[: ns * n].reshape(ns, n))
    assert np.array_equal(sc.comm_s, np.stack([comm[: ns * n].reshape(ns, n), comm[ns * n:].reshape(ns, n)], axis=1))
