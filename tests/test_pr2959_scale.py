"""``dynamic-pr2959`` restructured for scale gives the same plans as its straightforward scans.

The reference below is the previous implementation of the candidate's phases (a numpy scan over
every bucket or slot per sample, ``list.pop`` for the fillers, a block-minimum per long sample),
which the equivalence study matched to Megatron-LM PR #2959's code; it is kept here only as the
definition the fast code must reproduce exactly (plans and meta, floats bit for bit).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np
import pytest
from policy_cases import comparable, cost_model

from dcpsim.cost.padding import per_rank_tokens_int
from dcpsim.errors import InfeasibleError
from dcpsim.policies import Layout
from dcpsim.policies import pr2959 as pr
from dcpsim.policies.plan import Group, Step
from dcpsim.policies.pr2959 import (
    LONG_BWD_FACTOR,
    NORMAL_BWD_FACTOR,
    Pr2959Policy,
    _LongGroup,
    pipeline_ratio,
    pr_pipeline_makespan,
)
from dcpsim.policies.pr2959_model import _pr_pipeline_graph


class _ScanCandidate(pr._Candidate):
    """The phases as scans (the definition)."""

    def build(self) -> None:
        bt, lay = self.batch, self.batch.layout
        self.n_b = lay.pp * self.m * bt.K
        self.mu = float(bt.f.sum()) / self.n_b
        bubble = (lay.pp * self.m + lay.pp - 1) / (lay.pp * self.m)
        self.tau = self.mu * {"mean": 1.0, "iteration": bubble, "timeline": 1.0 / bubble}[self.bucket_target]
        is_long = bt.f[bt.order] > self.long_factor * self.mu
        if self.safe:  # safe mode: a sample one slot cannot hold is long
            is_long |= np.array([bt.tokens(int(i), 1) > bt.M for i in bt.order], dtype=bool)
        self.long_ids = [int(i) for i in bt.order[is_long]]
        self.normal = [int(i) for i in bt.order[~is_long]]
        sizes = self.long_sizes()
        self.place_long(sizes)
        self.fill_normal(self.n_b - sum(sizes))
        if self.valid:
            self.assign_slots()
        if self.valid:
            self.score()

    def long_sizes(self) -> list[int]:
        """Phase 1: slots per long sample (``nearest_pow2(ceil(f/τ))``, capped as the code caps it)."""
        bt = self.batch
        left = self.n_b
        out = []
        n_long = len(self.long_ids)
        for idx, i in enumerate(self.long_ids):
            want = pr.nearest_pow2(math.ceil(float(bt.f[i]) / self.tau))
            c = min(want, bt.cmax_slots, bt.K, left - (n_long - 1 - idx))
            c2 = 1 << (max(c, 1).bit_length() - 1)  # dcpsim's groups are powers of two, at least one slot
            if self.safe:
                c2 = max(c2, bt.need_slots(i))
            self.clamped += c2 != c
            left -= c2
            out.append(c2)
        return out

    def place_long(self, sizes: list[int]) -> None:
        """Phase 2: an aligned block per long sample (most buckets left), filled with normal samples."""
        bt = self.batch
        remain = np.full(bt.K, bt.layout.pp * self.m, dtype=np.int64)
        self._flag_all = self.n_b - sum(sizes) <= 0
        self._total_num = bt.K * pipeline_ratio(self.m, bt.layout.pp)
        self._negf = [-float(bt.f[i]) for i in self.normal]
        for i, cs in zip(self.long_ids, sizes, strict=True):
            nb = bt.K // cs
            mins = remain[: nb * cs].reshape(nb, cs).min(axis=1)
            blk = int(np.argmax(mins))
            if mins[blk] <= -1:  # the code finds no block and indexes slot -1
                blk = nb - 1
                self.overflow_blocks += 1
            start = blk * cs
            remain[start:start + cs] -= 1
            members = [i, *self._fill_group(i, cs)]
            fsum = float(bt.f[members].sum())
            bwd = LONG_BWD_FACTOR * float(bt.f[i]) + float(bt.b[members[1:]].sum())
            tok = sum(bt.tokens(j, cs) for j in members)
            self.groups.append(_LongGroup(start, cs, members, fsum, bwd, tok))

    def _fill_group(self, i: int, cs: int) -> list[int]:
        """Normal samples a long sample's group takes, largest first, under the code's three limits."""
        bt = self.batch
        room = cs * self.tau - float(bt.f[i])
        length_sum = int(bt.L[i])
        tok = bt.tokens(i, cs)
        cap = bt.M * cs
        taken: list[int] = []
        j = 0
        while self._flag_all or (len(self.normal) > self._total_num and length_sum < cap):
            x = room * self.fill_slack
            if x <= 0:
                break
            j = bisect_right(self._negf, -x, j)  # first normal sample (from j) with forward FLOPs < x
            if j >= len(self.normal):
                break
            k = self.normal[j]
            t = bt.tokens(k, cs)
            if self.safe and tok + t > bt.M:
                j += 1
                continue
            self.normal.pop(j)
            self._negf.pop(j)
            room -= float(bt.f[k])
            length_sum += int(bt.L[k])
            tok += t
            taken.append(k)
        return taken

    def fill_normal(self, n_nb: int) -> None:
        """Phase 3: normal buckets, FLOPs-first under the mean-token target, then leftovers by tokens."""
        bt = self.batch
        if n_nb <= 0:
            if self.normal and not self.safe:
                self._reject("no normal bucket left for the normal samples")
            n_nb = 1 if self.normal else 0
        self.bf = np.zeros(n_nb)
        self.bb = np.zeros(n_nb)
        self.bl = np.zeros(n_nb, dtype=np.int64)
        self.members: list[list[int]] = [[] for _ in range(n_nb)]
        if not self.normal:
            return
        T = float(bt.L[self.normal].sum()) / n_nb
        cap = bt.M if self.safe else np.inf
        left = []
        for i in self.normal:
            Li = int(bt.L[i])
            ok = (self.bl + Li <= T) & (self._bucket_tokens(Li) <= cap)
            if ok.any():
                self._add(int(np.argmin(np.where(ok, self.bf, np.inf))), i)
            else:
                left.append(i)
        self.n_leftovers = len(left)
        self._leftovers(sorted(left, key=lambda i: -int(bt.L[i])), T, cap)

    def _bucket_tokens(self, Li: int) -> np.ndarray:
        """Tokens per rank of every normal bucket with a sample of ``Li`` tokens added (min_cp ranks)."""
        u = self.batch.u
        return self.bl + (Li if u == 1 else per_rank_tokens_int(Li, u))  # with u > 1: a bound (bucket padding aside)

    def _add(self, k: int, i: int) -> None:
        f = float(self.batch.f[i])
        self.bf[k] += f
        self.bb[k] += NORMAL_BWD_FACTOR * f
        self.bl[k] += int(self.batch.L[i])
        self.members[k].append(i)

    def _leftovers(self, left: list[int], T: float, cap: float) -> None:
        """Samples no bucket took: to the bucket whose tokens end closest to ``T`` (safe mode: an extra bucket)."""
        if not left:
            return
        rank = np.argsort(self.bl, kind="stable")  # the code sorts the buckets by tokens once
        for i in left:
            Li = int(self.batch.L[i])
            score = ((self.bl[rank] + Li) - T) ** 2
            score = np.where(self._bucket_tokens(Li)[rank] <= cap, score, np.inf)
            if np.isfinite(score).any():
                self._add(int(rank[int(np.argmin(score))]), i)
                continue
            self.bf = np.append(self.bf, 0.0)
            self.bb = np.append(self.bb, 0.0)
            self.bl = np.append(self.bl, 0)
            self.members.append([])
            rank = np.append(rank, self.bf.size - 1)
            self._add(self.bf.size - 1, i)

    def assign_slots(self) -> None:
        """Phase 4: long groups first on their blocks, then normal buckets (ascending FLOPs) to the lightest slot."""
        bt = self.batch
        per_slot = bt.layout.pp * self.m
        lists: list[list[tuple[str, int]]] = [[] for _ in range(bt.K)]
        fsum = np.zeros(bt.K)
        for g_id, g in enumerate(self.groups):
            for s in range(g.start, g.start + g.slots):
                lists[s].append(("g", g_id))
                fsum[s] += g.fwd / g.slots
        count = np.array([len(x) for x in lists])
        for k in np.argsort(self.bf, kind="stable"):
            if not self.members[k]:
                if not self.safe:
                    self._reject("an empty normal bucket")
                    return
                continue
            room = count < per_slot
            if not room.any():
                if not self.safe:
                    self._reject("more buckets than slots can take")
                    return
                room = np.ones(bt.K, dtype=bool)
            s = int(np.argmin(np.where(room, fsum, np.inf)))
            lists[s].append(("b", int(k)))
            fsum[s] += self.bf[k]
            count[s] += 1
        self.slot_lists = lists
        toks = [g.tokens for g in self.groups] + [self._normal_tokens(k) for k in range(self.bf.size)]
        self.max_tokens = int(max(toks, default=0))
        if self.max_tokens > bt.M:
            self._reject(f"a group holds {self.max_tokens} tokens per rank > max_tokens_per_rank {bt.M}")

    def _normal_tokens(self, k: int) -> int:
        return sum(self.batch.tokens(i, 1) for i in self.members[k])

    def score(self) -> None:
        """Phase 5: the makespan of each slot's list in the PR's pipeline simulation (solver FLOPs), largest over slots."""
        n = max(len(x) for x in self.slot_lists)
        fw = np.zeros((n, self.batch.K))
        bw = np.zeros((n, self.batch.K))
        for s, lst in enumerate(self.slot_lists):
            for k, (kind, idx) in enumerate(lst):
                if kind == "g":
                    g = self.groups[idx]
                    fw[k, s], bw[k, s] = g.fwd / g.slots, g.bwd / g.slots
                else:
                    fw[k, s], bw[k, s] = self.bf[idx], self.bb[idx]
        self.makespan = float(pr_pipeline_makespan(fw, bw, self.batch.layout.pp).max())

    def steps(self) -> list[Step]:
        """Phase 6: microbatch ``k`` of a slot is its ``k``-th bucket; a long group runs where all its slots reach it."""
        bt = self.batch
        nxt = np.zeros(bt.K, dtype=np.int64)
        taken: list[set[int]] = [set() for _ in range(bt.K)]
        at: dict[int, list[Group]] = {}
        for g_id, g in enumerate(self.groups):
            sl = slice(g.start, g.start + g.slots)
            pos = int(nxt[sl].max())
            code_pos = {[i for i, (kind, x) in enumerate(self.slot_lists[s]) if kind == "g" and x == g_id][0]
                        for s in range(g.start, g.start + g.slots)}
            self.misaligned += len(code_pos) > 1
            nxt[sl] = pos + 1
            for s in range(g.start, g.start + g.slots):
                taken[s].add(pos)
            at.setdefault(pos, []).append(Group(g.start * bt.u, g.slots * bt.u, list(g.members)))
        for s, lst in enumerate(self.slot_lists):
            pos = 0
            for kind, k in lst:
                if kind != "b":
                    continue
                while pos in taken[s]:
                    pos += 1
                taken[s].add(pos)
                at.setdefault(pos, []).append(Group(s * bt.u, bt.u, list(self.members[k])))
        return [Step(sorted(at[k], key=lambda gr: gr.start)) for k in sorted(at)]


def _case(rng: np.random.Generator) -> tuple[np.ndarray, Layout, dict]:
    """A random layout (non-power-of-two DP x CP, min_cp > 1), batch (often with ties) and options."""
    dp, cp = int(rng.choice([1, 2, 3, 4, 6, 16])), int(rng.choice([1, 2, 4, 8]))
    pp, M = int(rng.choice([1, 2, 4, 8])), int(rng.choice([512, 2048, 8192]))
    cmax = 1 << ((dp * cp).bit_length() - 1)
    min_cp = int(rng.choice([c for c in (1, 2, 4) if c <= cmax]))
    layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp, min_cp=min_cp)
    n = int(rng.integers(1, 400))
    cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
    scale = float(rng.choice([1.0, 2.0, 8.0, 32.0]))
    lengths = np.minimum(rng.lognormal(np.log(M / scale), float(rng.choice([0.5, 1.2, 2.0])), n).astype(np.int64) + 1, cap)
    if rng.random() < 0.3:
        lengths = rng.choice(lengths[:3], n)  # many ties
    opts: dict = {}
    if rng.random() < 0.3:
        opts["m_values"] = sorted({int(x) for x in rng.integers(1, 9, 3)})
    if rng.random() < 0.2:
        opts["bucket_target"] = str(rng.choice(["iteration", "timeline"]))
    if rng.random() < 0.2:
        opts["long_factor"] = float(rng.choice([0.5, 1.0, 3.0]))
    return lengths, layout, opts


def _plans(lengths, layout, opts):
    cost = cost_model(1, layout.pp, layout.dp * layout.cp)
    try:
        plan = Pr2959Policy(**opts).plan(lengths, layout, cost)
    except InfeasibleError as e:
        return str(e)
    plan.bound_evaluator = None  # the lower bound depends on the batch only: not computed twice here
    return comparable(plan)


def _fast_equals_scan(monkeypatch, rng):
    """One random case planned by the fast phases and by the scan reference: equal plans (returned)."""
    lengths, layout, opts = _case(rng)
    fast = _plans(lengths, layout, opts)
    with monkeypatch.context() as m:
        m.setattr(pr, "_Candidate", _ScanCandidate)
        ref = _plans(lengths, layout, opts)
    assert fast == ref
    return fast


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_fast_phases_give_the_scan_plans(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    seen = {"safe_mode": 0, "leftovers": 0, "overflow_blocks": 0, "plain": 0}
    for _ in range(20):
        fast = _fast_equals_scan(monkeypatch, rng)
        if isinstance(fast, dict):
            meta = fast["meta"]
            for k in ("safe_mode", "leftovers", "overflow_blocks"):
                seen[k] += bool(meta[k])
            seen["plain"] += not meta["safe_mode"]
    assert min(seen.values()) > 0, seen  # safe mode, leftovers, overflowing blocks and plain plans all exercised


def test_token_table_finds_the_codes_closest_bucket():
    """The leftover rule as the code scans it: smallest (tokens + L - T)^2 over the buckets ranked once
    by tokens (stable), first in that ranking on ties; T on half tokens makes ties across token counts."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        bl = rng.integers(0, 20, int(rng.integers(1, 30))).tolist()
        rank = np.argsort(np.array(bl), kind="stable")
        table = pr._TokenTable(list(bl))
        for _ in range(20):
            Li, T = int(rng.integers(1, 10)), float(rng.integers(0, 60)) / 2
            limit = None if rng.random() < 0.5 else int(rng.integers(0, 25))
            toks = np.array(bl)[rank]
            score = np.where(limit is None or toks <= (limit or 0), ((toks + Li) - T) ** 2, np.inf)
            want = int(rank[int(np.argmin(score))]) if np.isfinite(score).any() else -1
            got = table.closest(Li, T, limit)
            assert got == want
            if got < 0:
                bl.append(Li)
                rank = np.append(rank, len(bl) - 1)
                table.add(len(bl) - 1, Li)
            else:
                bl[got] += Li
                table.move(got, bl[got] - Li, bl[got])


def test_bulk_normal_filling_gives_the_scan_plans(monkeypatch):
    """Phase 3 placing runs of normal samples in bulk (_Candidate._bulk_lowest_flops, then _merge_runs)
    gives the scan's plans on batches with enough buckets and samples for runs of 64 and more."""
    rng = np.random.default_rng(5)
    placed = []
    real = pr._Candidate._bulk_lowest_flops

    def counted(self, *a):
        n = real(self, *a)
        placed.append(n)
        return n

    for _ in range(3):
        layout = Layout(dp=int(rng.choice([16, 32])), cp=8, max_tokens_per_rank=8192, pp=int(rng.choice([1, 2])))
        lengths = np.minimum(rng.lognormal(np.log(8192 / 16), 1.0, 1500).astype(np.int64) + 1, 8192 * 64 - 128)
        if rng.random() < 0.5:
            lengths = rng.choice(lengths[:40], lengths.size)  # ties
        with monkeypatch.context() as m:
            m.setattr(pr._Candidate, "_bulk_lowest_flops", counted)
            fast = _plans(lengths, layout, {})
        with monkeypatch.context() as m:
            m.setattr(pr, "_Candidate", _ScanCandidate)
            ref = _plans(lengths, layout, {})
        assert fast == ref
    assert sum(placed) > 500, placed


def test_in_order_is_the_stable_sort_of_ascending_values():
    """_bulk_deal's next order without a sort (pr2959_tables._in_order): indices whose values do not fall, in
    any order within equal values, come back as numpy's stable argsort orders them; None where values fall."""
    from dcpsim.policies.pr2959_tables import _in_order

    rng = np.random.default_rng(31)
    for _ in range(400):
        f = rng.integers(0, 6, int(rng.integers(1, 80))).astype(np.float64)
        idx = np.sort(rng.choice(f.size, int(rng.integers(0, f.size + 1)), replace=False))
        ref = idx[np.argsort(f[idx], kind="stable")]
        shuffled = ref[np.lexsort((rng.random(ref.size), f[ref]))]  # ties in any order
        assert np.array_equal(_in_order(shuffled, f), ref)
        if ref.size >= 2 and f[ref[0]] < f[ref[-1]]:
            assert _in_order(ref[::-1].copy(), f) is None


def test_bulk_dealing_gives_the_scan_plans(monkeypatch):
    """Phase 4 dealing runs of normal buckets to the lightest slots in bulk (_Candidate._bulk_deal, then the
    heap loop) gives the scan's plans, on batches with enough buckets and slots for runs of 64 and more."""
    rng = np.random.default_rng(24)
    dealt = []
    real = pr._Candidate._bulk_deal

    def counted(*a):
        n = real(*a)
        dealt.append(n)
        return n

    for j in range(3):
        layout = Layout(dp=int(rng.choice([16, 32])), cp=8, max_tokens_per_rank=8192, pp=int(rng.choice([1, 2, 4])))
        lengths = np.minimum(rng.lognormal(np.log(8192 / 16), 1.0, 2000).astype(np.int64) + 1, 8192 * 64 - 128)
        if j == 1:
            lengths = rng.choice(lengths[:40], lengths.size)  # ties
        with monkeypatch.context() as m:
            m.setattr(pr._Candidate, "_bulk_deal", staticmethod(counted))
            fast = _plans(lengths, layout, {})
        with monkeypatch.context() as m:
            m.setattr(pr, "_Candidate", _ScanCandidate)
            ref = _plans(lengths, layout, {})
        assert fast == ref
    assert sum(dealt) > 500, dealt


def _token_case(rng, most_buckets: int):
    """A random leftover query: bucket token counts, L, T (on half tokens) and a limit (None 60% of the time)."""
    bl = rng.integers(0, 12, int(rng.integers(1, most_buckets))).tolist()
    Li, T = int(rng.integers(1, 6)), float(rng.integers(0, 40)) / 2
    limit = None if rng.random() < 0.6 else int(rng.integers(0, 14))
    return bl, Li, T, limit


def test_token_table_run_picks_are_the_one_by_one_picks():
    """A run of equal leftovers (run_picks) takes the buckets closest() gives one query after another (each
    bucket moved by L tokens before the next), T on half tokens and repeated counts making ties."""
    rng = np.random.default_rng(11)
    used = 0
    for _ in range(300):
        bl, Li, T, limit = _token_case(rng, 40)
        most = int(rng.integers(2, 20))
        table, ref = pr._TokenTable(list(bl)), pr._TokenTable(list(bl))
        picks = table.run_picks(Li, T, limit, most)
        assert len(picks) <= most
        used += len(picks)
        toks = list(bl)
        for k in picks:
            assert ref.closest(Li, T, limit) == k
            toks[k] += Li
            ref.move(k, toks[k] - Li, toks[k])
    assert used > 300


def test_token_table_move_run_equals_the_moves_one_by_one():
    """A run's picks moved in bulk (move_run) leave the table as moving them one by one (move) does: the
    same token counts, each with the same buckets' ranks in ascending order, so later queries agree."""
    rng = np.random.default_rng(12)
    moved = 0
    for _ in range(300):
        bl, Li, T, limit = _token_case(rng, 60)
        table, ref = pr._TokenTable(list(bl)), pr._TokenTable(list(bl))
        for _ in range(int(rng.integers(1, 4))):  # a few runs in a row, each starting from the last one's table
            picks = table.run_picks(Li, T, limit, int(rng.integers(2, 20)))
            table.move_run(picks, [bl[k] for k in picks], Li)
            for k in picks:
                ref.move(k, bl[k], bl[k] + Li)
                bl[k] += Li
            moved += len(picks)
            assert table.vals == ref.vals
            assert {v: sorted(h) for v, h in table.at.items()} == {v: sorted(h) for v, h in ref.at.items()}
            assert all(h == sorted(h) for h in table.at.values())
            Li = int(rng.integers(1, 6))
    assert moved > 1000


def test_long_groups_table_equals_the_scans_groups():
    """The long groups summed after the filling loop (_Candidate._group_table: FLOPs left to right below 8
    members, numpy's sums from 8; tokens per rank) equal the groups the scan builds member by member, in
    safe mode too, with groups of 1 to many members."""
    rng = np.random.default_rng(4)
    sizes = set()
    for _ in range(12):
        layout = Layout(dp=int(rng.choice([2, 4, 8])), cp=4, max_tokens_per_rank=4096, pp=int(rng.choice([1, 2])),
                        min_cp=int(rng.choice([1, 2])))
        lengths = np.minimum(rng.lognormal(np.log(4096 / 8), 1.5, 600).astype(np.int64) + 1, 4096 * 16 - 64)
        cost = cost_model(1, layout.pp, layout.dp * layout.cp)
        fwd, bwd = pr.Pr2959Flops.from_cost(cost).stage_fwd_bwd(lengths)
        scale = 1.0 + rng.random(2) / 7  # full mantissas: the order of the additions shows in the sums
        batch = pr._Batch(lengths, layout, fwd * scale[0], bwd * scale[1])
        for m in (1, 2):
            for safe in (False, True):
                fast = pr._Candidate(batch, m, 1.3, float(rng.choice([1.05, 3.0, 8.0])), "mean", safe)
                ref = _ScanCandidate(batch, m, 1.3, fast.fill_slack, "mean", safe)
                fast.build()
                ref.build()
                assert fast.valid == ref.valid
                got = fast._long_groups()
                assert [(g.start, g.slots, g.members, g.fwd, g.bwd, g.tokens) for g in got] == \
                       [(g.start, g.slots, g.members, g.fwd, g.bwd, g.tokens) for g in ref.groups]
                sizes.update(len(g.members) for g in ref.groups)
    assert {1, 2, 7, 8} <= sizes and max(sizes) >= 9, sorted(sizes)


def _pr_pipeline_every_op(fwd: np.ndarray, bwd: np.ndarray, pp: int) -> np.ndarray:
    """The PR's pipeline makespan keeping every op's end (the previous implementation: the definition)."""
    n, cols = fwd.shape
    if n == 0:
        return np.zeros(cols)
    ops = _pr_pipeline_graph(n, pp)
    end = np.zeros((len(ops), cols))
    for v, d, k, preds in ops:
        if preds:
            end[v] = np.max(end[list(preds)], axis=0)
        end[v] += bwd[k] if d else fwd[k]
    return end.max(axis=0)


def test_pr_pipeline_on_reused_rows_equals_every_op_kept():
    """pr_pipeline_makespan with its ends in a few reused rows gives, bit for bit, the makespans of the sweep
    that keeps every op's end (full-mantissa durations, zeros among them, 1 to 40 microbatches, PP 1 to 8)."""
    rng = np.random.default_rng(8)
    for _ in range(60):
        n, pp, cols = int(rng.integers(0, 41)), int(rng.choice([1, 2, 3, 4, 8])), int(rng.integers(1, 9))
        f = rng.random((n, cols)) * rng.choice([1.0, 1e13])
        b = f * (2.0 + rng.random((n, cols)))
        f[rng.random((n, cols)) < 0.1] = 0.0
        got = pr.pr_pipeline_makespan(f, b, pp)
        assert got.tolist() == _pr_pipeline_every_op(f, b, pp).tolist()


@pytest.mark.parametrize("buckets", [(1, 40), (40, 400)])
def test_merge_runs_equal_the_one_by_one_rule(buckets):
    """_merge_runs (a run of equal samples takes the least offers of a merge) places every sample where the
    one-by-one rule does (the bucket of least (FLOPs, index) among those within its limit, FLOPs added one
    sample at a time), leaves the same samples over and ends with the same FLOPs and tokens, bit for bit:
    full-mantissa and tied FLOPs, runs of 1 to many equal samples, buckets taking several of a run; with many
    buckets, runs shorter than the buckets within their limit (whose first offers _merge_runs screens)."""
    from dcpsim.policies.pr2959_tables import _merge_runs

    rng = np.random.default_rng(31)
    placed = multi = 0
    for _ in range(200):
        nb = int(rng.integers(*buckets))
        bf = rng.choice([rng.random(nb) * 1e13, np.round(rng.random(nb) * 4) * 1e12])  # ties in the second
        bl = rng.integers(0, 60, nb).astype(np.int64)
        n = int(rng.integers(1, 80))
        Ls = np.sort(rng.integers(1, 12, n))[::-1].astype(np.int64)
        Ls = np.repeat(Ls[: max(1, n // int(rng.integers(1, 10)))], int(rng.integers(1, 10)))[:n]
        unit = float(rng.choice([1.0, 1e9 + 0.123, 3.3e11]))
        fs = Ls * unit
        lims = np.maximum.accumulate(int(rng.integers(30, 90)) - Ls)
        rb, rl = bf.copy(), bl.copy()
        want = []
        for f, L, lim in zip(fs.tolist(), Ls.tolist(), lims.tolist(), strict=True):
            ok = np.flatnonzero(rl <= lim)
            if not ok.size:
                want.append(-1)
                continue
            k = int(ok[np.lexsort((ok, rb[ok]))[0]])
            want.append(k)
            rb[k] = rb[k] + f
            rl[k] += L
        gb, gl = bf.copy(), bl.copy()
        got = _merge_runs(gb, gl, fs.astype(np.float64), Ls, lims.astype(np.int64))
        assert got.tolist() == want
        assert gb.tolist() == rb.tolist() and gl.tolist() == rl.tolist()
        placed += sum(k >= 0 for k in want)
        multi += any(np.bincount([k for k in want if k >= 0] or [0]) > 1)
    assert placed > 2000 and multi > 50, (placed, multi)


def _scan_and_fast_runs(monkeypatch, gpus: int, workload: str, seed: int) -> tuple[dict, dict]:
    """One simulated iteration of ``dynamic-pr2959`` (pp 8, cp 8, 4 sequences per GPU) with the fast phases
    and with the scan reference: (plan, iteration time) of each."""
    from dcpsim.run import RunConfig
    from dcpsim.run.single import run_simulation

    cfg = RunConfig().with_updates({"cluster.gpus": gpus, "parallel.pp": 8, "parallel.cp": 8, "parallel.tp": 1,
                                    "policy.name": "dynamic-pr2959", "workload.name": workload,
                                    "workload.gbs": 4 * gpus, "sim.iterations": 1, "sim.seed": seed,
                                    "sim.planning": "ignore", "sim.engine": "fast"})
    out = []
    for scan in (False, True):
        with monkeypatch.context() as m:
            if scan:
                m.setattr(pr, "_Candidate", _ScanCandidate)
            res = run_simulation(cfg)
        plan = res.plans[0]
        plan.bound_evaluator = None
        out.append({"plan": comparable(plan), "iteration_time_s": res.summary["iteration_time_s"]})
    return out[0], out[1]


@pytest.mark.parametrize("gpus,workload,seed", [(128, "github", 0), (256, "commoncrawl", 1)])
def test_fast_and_scan_runs_are_identical(monkeypatch, gpus, workload, seed):
    """A whole run (sampling, planning, fast engine) gives the same plan and the same iteration time, bit for
    bit, with the fast phases as with the scan reference (the definition)."""
    fast, ref = _scan_and_fast_runs(monkeypatch, gpus, workload, seed)
    assert fast == ref


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 10))
def test_fast_phases_give_the_scan_plans_more_seeds(monkeypatch, seed):
    """The random cases of test_fast_phases_give_the_scan_plans on eight more seeds."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        _fast_equals_scan(monkeypatch, rng)


@pytest.mark.slow
@pytest.mark.parametrize("gpus,workload,seed", [(512, "github", 3), (1024, "commoncrawl", 4), (1024, "github", 5)])
def test_fast_and_scan_runs_are_identical_larger(monkeypatch, gpus, workload, seed):
    """test_fast_and_scan_runs_are_identical at 512 and 1,024 GPUs."""
    fast, ref = _scan_and_fast_runs(monkeypatch, gpus, workload, seed)
    assert fast == ref


@pytest.mark.parametrize("key_sort_min", [1 << 15, 2])
def test_stable_argsort_is_numpys_stable_argsort(monkeypatch, key_sort_min):
    """The radix-pass argsort gives numpy's stable order index for index: spans below 2**16, below 2**32 and
    above, negative values, many ties, int32/int64/uint, one element and none; with the key sort taking every
    span from 2**16 (``_KEY_SORT_MIN`` lowered) too."""
    from dcpsim.policies import pr2959_tables
    from dcpsim.policies.pr2959_tables import stable_argsort

    monkeypatch.setattr(pr2959_tables, "_KEY_SORT_MIN", key_sort_min)
    rng = np.random.default_rng(9)
    for _ in range(200):
        n = int(rng.integers(0, 3000))
        span = int(rng.choice([1, 3, 1000, 70000, 2**31, 2**40]))
        a = rng.integers(-span // 2 if rng.random() < 0.5 else 0, span, n)
        a = a.astype(rng.choice([np.int64, np.int32])) if span < 2**31 else a
        if rng.random() < 0.3:
            a = np.abs(a).astype(np.uint64)
        assert stable_argsort(a).tolist() == np.argsort(a, kind="stable").tolist()


def test_falling_order_is_numpys_stable_argsort():
    """_bulk_lowest's first order (buckets opened largest first, then empty ones) without a sort: numpy's stable
    order index for index on values that never rise (ties, zeros of both signs), and numpy's sort otherwise."""
    from dcpsim.policies.pr2959_tables import _falling_order

    rng = np.random.default_rng(13)
    falling = 0
    for _ in range(400):
        n = int(rng.integers(0, 200))
        v = np.sort(rng.choice([0.0, -0.0, 1.0, 2.5, 1e13], n) if rng.random() < 0.6 else rng.random(n))[::-1].copy()
        if n and rng.random() < 0.2:
            v[rng.integers(0, n)] = rng.choice([np.nan, 1e14, -1.0])
        falling += n > 1 and bool((v[1:] <= v[:-1]).all())
        assert _falling_order(v).tolist() == np.argsort(v, kind="stable").tolist()
    assert falling > 200
