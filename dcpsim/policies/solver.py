"""``dynamic-solver``: dynamic CP planned with the real cost model.

Guided by the blog-era scheduler (REFERENCE §1, pull request #2959), but
scoring with dcpsim's cost model instead of FLOPs, so it knows what
attention, GEMM efficiency and *exposed communication* cost, including that
a CP group leaving the NVLink domain pays the network.

1. **Cost table.** :class:`~dcpsim.policies.costs.SeqCosts` gives each
   sequence's additive cost on every power-of-two group size (exact
   attention, its exposed CP communication alone, linear GEMM/TP time), with
   and without the network.
2. **Outer search over the microbatch count m**: the capacity minimum
   ``m0 = ceil(tokens / (ranks·M))`` up to ``m0 + max_extra_microbatches``;
   with PP, where more microbatches shrink the pipeline bubble, it goes on
   growing ``m`` by ×1.25 (it stops after three candidates that do not
   improve, or once the target falls below half the longest sequence's
   time). ``m`` sets the per-step target ``τ = W/(ranks·m)`` (``W``:
   GPU-seconds of the batch at each sequence's cheapest size). Each sequence
   takes the smallest CP size whose time is ``≤ τ`` (the fastest size if
   none): long sequences get large groups, short ones stay on ``min_cp``
   ranks. For ``m > m0`` no step may grow past ``H = max(τ, the tallest
   sequence at its size)``; ``m0`` is planned without that cap.
3. **Placement** (longest first). Each sequence goes where it increases the
   modelled iteration time least: joining any group that holds it (token cap
   ``M``) without pushing its step past ``H``, opening an aligned group of
   its size on free ranks of a step, or opening a new step. The increase is
   that of ``Σ_k S_k + (pp-1)·max(H, max_k S_k)`` (``S_k``: step time), the
   pipeline makespan with the fill/drain term counted only above the target;
   among options that add nothing it prefers the fewest GPU-seconds (the CP
   size that wastes least), then the fullest group that still stays under
   its step's time (best fit), which fills the room next to long sequences
   with short ones. This balances work under the token (memory) cap; where
   only the token cap binds, sequences go where tokens have room.
4. **Scoring.** Every candidate is scored with the exact cost model
   (:func:`~dcpsim.policies.costs.evaluate_plan`): pipeline makespan, and a
   memory check (``fits_memory`` of every pack). The fastest plan that fits
   memory wins (the fastest overall if none fits, flagged in ``meta``).

**Screen** (batches above ``screen_above`` = 32,768 sequences; every test,
the dynamic_cp_blog reproduction and the shipped sweeps stay below it and
are planned exactly as described above). Placing every candidate in full is
what costs at 65,536 GPUs (262,144 sequences x ~9 candidates of sequential
greedy decisions). Above the threshold each candidate (its CP sizes and
height, from the full batch) is placed on a stratified subsample instead:
sequences sorted longest first are cut into blocks of ``k``, block ``j``
keeps its ``(j mod k)``-th (a rotating offset), and the subsample is placed
on ``dp/k`` DP ranks, so tokens and load per rank match the full batch's.
``k`` is the largest divisor of dp that keeps at least ``screen_sample``
(8,192) sequences, 8 DP ranks and whole NVLink domains; a candidate whose
CP sizes do not fit the subsample's ranks is placed in full unscreened. The
candidates are ranked by their exact score on the subsample (memory fit,
makespan, m; the search's stopping rule uses these scores), and the best
``screen_full`` (1) of them, plus any whose screened makespan ties the best
(the screen cannot tell them apart), are placed in full; the best full plan
wins. ``meta["screen"]`` says how (k, sequences, dp); each entry of
``meta["candidates"]`` has ``screened_makespan_s`` where it was screened and
``makespan_s`` where it was placed in full. ``screen = false`` restores the
exhaustive search. Quality (simulated iteration time of the screened plan
vs the exhaustive plan, ``sim.engine = "fast"``, weak scaling 4 sequences
per GPU, Llama-13B pp 8 cp 8, seeds 0-2; 2026-11-23). Loss = screened /
exhaustive - 1, max over seeds, simulated (modelled makespan):

=========== =========== ================= =================
GPUs        workload    sample 8,192      sample 16,384
=========== =========== ================= =================
16,384      github      0.061% (0.026%)   0.061% (0.027%)
16,384      commoncrawl 0.000% (0.000%)   0.002% (0.001%)
65,536      github      0.000% (0.000%)   0.000% (0.004%)
65,536      commoncrawl 0.000% (0.002%)   0.001% (0.002%)
=========== =========== ================= =================

(the simulated time can come out below the exhaustive one: the search ranks
by the modelled makespan; measured -0.014%).
On small forced samples (400-600 sequences on 8-16 DP ranks,
``tests/test_policy_scale.py``) the loss reaches 0.7%: the screen needs
samples of thousands of sequences.

Speed: open groups are kept in cells of equal size, span and step
(:class:`_Buckets`), each sorted by time, so a sequence looks at a few
cells (a binary search and a short scan each) instead of every group opened
so far; full groups are dropped, and groups without token room for the
current sequence are parked out of the way until a shorter one fits them.
Most sequences join a group without raising its step: the join search first
assumes the least increase is 0 and visits the codes by increasing
GPU-seconds, stopping at the first that holds such a group; only when no
group adds exactly nothing is the least increase computed over every cell.
The per-length rows (time, tokens, codes by GPU-seconds) are built once for
all candidates (:class:`_Table`). Plans are identical to the definition (a
scan of every open group per sequence, kept in
``tests/test_policy_scale.py``), meta included.

Measured with ``benchmarks/scale_fast.py`` (one iteration, 4 sequences per
GPU, Llama-13B, pp 8 cp 8; 2-core host, 2026-11-23), whole-iteration wall
seconds (peak MB): before the time-sorted cells 4,096 GPUs 1.7; 16,384 GPUs
11.4; 65,536 GPUs 64-74 (706); with them (exhaustive) 0.9, 4.8, 23 (633);
with the screen 0.8 (exact, below the threshold), 1.4 (291), 4.1 (545).
Without the screen 65,536 GPUs is ~2.4 M sequential greedy decisions at
about 10 us each in Python, and the candidates near the optimum lie within
0.06% of each other, so no cheap lower bound can prune them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from copy import copy
from dataclasses import replace
from heapq import heappop, heappush

import numpy as np

from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.policies.base import Policy, candidate_microbatch_counts
from dcpsim.policies.costs import SeqCosts, evaluate_plan
from dcpsim.policies.dynamic import align_masks_for, lowest_free_slice
from dcpsim.policies.fit import dynamic_fit, smallest_fitting_size
from dcpsim.policies.plan import Group, Layout, Plan, Step


class DynamicSolverPolicy(Policy):
    """``dynamic-solver`` (see the module docstring).

    Options: ``max_extra_microbatches`` (microbatch counts above the capacity
    minimum to try, default 6), ``respect_memory`` (cap tokens per rank at what
    the cost model's memory limit allows when that is below ``M``, default
    True), ``screen`` (rank the candidates on a subsample for batches above
    ``screen_above`` sequences, default True), ``screen_above`` (sequences,
    default 32,768), ``screen_sample`` (the least sequences a screen keeps,
    default 8,192) and ``screen_full`` (how many of the best screened
    candidates are placed in full, default 1); see "Screen" in the module
    docstring.
    """

    name = "dynamic-solver"
    dynamic = True

    def __init__(self, max_extra_microbatches: int = 6, respect_memory: bool = True, screen: bool = True,
                 screen_above: int = 32768, screen_sample: int = 8192, screen_full: int = 1) -> None:
        if not isinstance(max_extra_microbatches, int) or max_extra_microbatches < 0:
            raise ConfigError("policy.options.max_extra_microbatches", max_extra_microbatches, "an integer >= 0")
        for key, v, lo in (("screen_above", screen_above, 1), ("screen_sample", screen_sample, 1),
                           ("screen_full", screen_full, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"policy.options.{key}", v, f"an integer >= {lo}")
        self.max_extra_microbatches = max_extra_microbatches
        self.respect_memory = bool(respect_memory)
        self.screen = bool(screen)
        self.screen_above = screen_above
        self.screen_sample = screen_sample
        self.screen_full = screen_full

    # ------------------------------------------------------------------ plan
    def _token_cap(self, lengths, layout, cost, sizes, need):
        """(token cap per rank, smallest fitting size index per sequence) under the memory option."""
        cap = layout.max_tokens_per_rank
        if self.respect_memory:
            try:
                mem_cap = int(cost.max_tokens_per_rank())
            except InfeasibleError:
                mem_cap = cap
            if mem_cap < cap and (smallest_fitting_size(lengths, sizes, mem_cap) >= 0).all():
                cap = mem_cap
                need = smallest_fitting_size(lengths, sizes, cap)
        return cap, need

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        sizes, need = dynamic_fit(lengths, layout)
        cap, need = self._token_cap(lengths, layout, cost, sizes, need)
        n = lengths.size
        if n == 0:
            return Plan(self.name, layout, lengths, [], True, meta={"microbatches": 0})
        sc = SeqCosts(lengths, layout, cost, sizes)
        ctx = _Search(sc, layout, cap, need, self.max_extra_microbatches)
        screen = self._screen(lengths, layout, sc, need, ctx.table) if self.screen and n > self.screen_above else None
        cands = []
        for m, choice, height in ctx.candidates():
            if screen is not None and screen.takes(sc.sizes, choice):
                plan, ev = screen.place(self.name, ctx, choice, height, cost)
            else:
                plan = _Placer(sc, layout, cap, need, choice, height, ctx.table).run(self.name, lengths)
                ev = evaluate_plan(plan, cost)
            cands.append([not ev.fits_memory, ev.makespan_s, m, plan, ev, choice, height])
            ctx.scored(ev.makespan_s)
        cands.sort(key=lambda x: (x[0], x[1], x[2]))
        screened = [c for c in cands if c[3].layout is not layout]
        if screened:  # the best screened candidates, and any that tie the best (the screen cannot tell them apart)
            top = (screened[0][0], screened[0][1] * (1 + 1e-9))
            screened = [c for j, c in enumerate(screened) if j < self.screen_full or (c[0], c[1]) <= top]
        for c in screened:
            c.append((c[1], c[0]))  # the screened (makespan, misfit)
            c[3] = _Placer(sc, layout, cap, need, c[5], c[6], ctx.table).run(self.name, lengths)
            c[4] = evaluate_plan(c[3], cost)
            c[0], c[1] = not c[4].fits_memory, c[4].makespan_s
        placed = sorted((c for c in cands if c[3].layout is layout), key=lambda x: (x[0], x[1], x[2]))
        _, _, best_m, plan, ev = placed[0][:5]
        plan.meta = self._meta(plan, ev, best_m, cap, cands, layout, screen)
        return plan

    def _screen(self, lengths, layout, sc, need, table):
        """The screen for this batch, or None where the layout cannot be subsampled."""
        k = _screen_factor(lengths.size, layout, self.screen_sample)
        return _Screen(lengths, layout, sc, need, k, table) if k > 1 else None

    @staticmethod
    def _meta(plan, ev, best_m, cap, cands, layout, screen) -> dict:
        hist: dict[int, int] = {}
        for st in plan.steps:
            for g in st.groups:
                hist[g.size] = hist.get(g.size, 0) + 1
        rows = []
        for c in cands:
            row = {"m": c[2]}
            if len(c) > 7:  # screened, then placed in full
                row.update(screened_makespan_s=c[7][0], screened_fits_memory=not c[7][1])
            if c[3].layout is layout:
                row.update(makespan_s=c[1], fits_memory=not c[0], steps=c[3].n_steps)
            else:
                row.update(screened_makespan_s=c[1], screened_fits_memory=not c[0], screened_steps=c[3].n_steps)
            rows.append(row)
        meta = {
            "microbatches": plan.n_steps,
            "target_microbatches": best_m,
            "token_cap": cap,
            "fits_memory": ev.fits_memory,
            "modelled_makespan_s": ev.makespan_s,
            "candidates": rows,
            "groups_per_size": {str(c): v for c, v in sorted(hist.items())},
        }
        if screen is not None:
            meta["screen"] = screen.describe()
        return meta


class _Search:
    """The outer search over microbatch counts (step 2 of the module docstring): candidates in order,
    stopping after three that do not improve."""

    def __init__(self, sc: SeqCosts, layout: Layout, cap: int, need: np.ndarray, extra: int) -> None:
        sizes, n = sc.sizes, sc.lengths.size
        self.sc, self.layout, self.cap, self.need, self.extra = sc, layout, cap, need, extra
        R = layout.ranks_per_stage
        span0 = np.asarray(layout.spans_network(np.zeros(sizes.size, dtype=np.int64), sizes), dtype=np.int64)
        t0 = sc.time_s[np.arange(sizes.size), span0]  # (ns, n): time at the first aligned slice of each size
        feas = sc.tokens <= cap
        gpu = np.where(feas, t0 * sizes[:, None], np.inf)
        self.W = float(gpu.min(axis=0).sum())
        tok_need = sc.tokens[need, np.arange(n)]
        self.m0 = max(1, int(np.ceil(tok_need.sum() / (R * cap))))
        self.tfeas = np.where(feas & (np.arange(sizes.size)[:, None] >= need[None, :]), t0, np.inf)
        self.fastest = np.argmin(self.tfeas, axis=0)
        self.t_floor = float(self.tfeas.min(axis=0).max())  # no step is shorter than the longest sequence
        self.table = _Table(sc.lengths, sc, need)
        self.worse, self.best_ms = 0, np.inf

    def scored(self, makespan_s: float) -> None:
        if makespan_s < self.best_ms:
            self.best_ms, self.worse = makespan_s, 0
        else:
            self.worse += 1

    def candidates(self):
        """(m, CP size index per sequence, step height cap) per distinct candidate."""
        m0, R, n = self.m0, self.layout.ranks_per_stage, self.sc.lengths.size
        seen: set[bytes] = set()
        grid = [(m, 1.0) for m in candidate_microbatch_counts(m0, n, self.extra, self.layout.pp)]
        # a coarser CP choice (sizes for twice the target) for the fewest microbatches, where the rank budget
        # of a step rather than its height limits how far sequences should be split
        coarse = [(m, 2.0) for m in range(m0, m0 + 3)]
        for m, f in coarse + grid:
            tau = self.W / (R * m)
            if f == 1.0 and (self.worse >= 3 or (m > m0 + self.extra and tau < 0.5 * self.t_floor)):
                return  # targets below the longest sequence's time, or no longer improving
            under = self.tfeas <= f * tau
            choice = np.where(under.any(axis=0), np.argmax(under, axis=0), self.fastest)
            height = max(tau, float(self.tfeas[choice, np.arange(n)].max())) if m > m0 else np.inf
            key = choice.astype(np.int16).tobytes() + np.float64(height).tobytes()
            if key in seen:
                continue
            seen.add(key)
            yield m, choice, height


def _screen_factor(n: int, layout: Layout, sample: int) -> int:
    """Largest k dividing dp with ``n // k >= sample`` sequences, at least 8 DP ranks and whole NVLink
    domains per stage left (1: no screen)."""
    dp, cp = layout.dp, layout.cp
    best = 1
    for k in range(2, dp + 1):
        if n // k < sample:
            break
        sub = (dp // k) * cp * layout.tp
        if dp % k == 0 and dp // k >= 8 and sub % layout.gpus_per_domain == 0:
            best = k
    return best


class _Screen:
    """A stratified subsample of the batch on ``dp/k`` DP ranks (see "Screen" in the module docstring).

    Sequences sorted longest first (ties by index) are cut into blocks of ``k``; block ``j`` keeps its
    ``(j mod k)``-th sequence (a rotating offset, so the kept lengths follow the batch's distribution
    within each block). Per-rank load and tokens per rank match the full batch's, so a candidate's
    step count and makespan on the subsample track its full ones.
    """

    def __init__(self, lengths: np.ndarray, layout: Layout, sc: SeqCosts, need: np.ndarray, k: int,
                 table: _Table) -> None:
        n = lengths.size
        order = np.lexsort((np.arange(n), -lengths))
        blocks = n // k
        self.idx = np.sort(order[np.arange(blocks) * k + np.arange(blocks) % k])
        self.k = k
        self.layout = replace(layout, dp=layout.dp // k)
        sub = copy(sc)
        sub.lengths, sub.layout = lengths[self.idx], self.layout
        sub.tokens, sub.time_s = sc.tokens[:, self.idx], sc.time_s[:, :, self.idx]
        sub.attn_s, sub.comm_s = sc.attn_s[:, self.idx], sc.comm_s[:, :, self.idx]
        self.sc, self.need = sub, need[self.idx]
        self.table = copy(table)  # rows per distinct length are the full batch's; only the index changes
        self.table.uid = [table.uid[i] for i in self.idx.tolist()]
        self.max_size = self.layout.max_dynamic_cp

    def takes(self, sizes: np.ndarray, choice: np.ndarray) -> bool:
        """Whether the subsample's ranks hold every chosen CP size of this candidate."""
        return int(sizes[choice[self.idx]].max()) <= self.max_size

    def place(self, name: str, ctx: _Search, choice: np.ndarray, height: float, cost):
        """The candidate's plan and its exact score on the subsample."""
        plan = _Placer(self.sc, self.layout, ctx.cap, self.need, choice[self.idx], height, self.table).run(
            name, self.sc.lengths)
        return plan, evaluate_plan(plan, cost)

    def describe(self) -> dict:
        return {"method": "every k-th sequence by length (rotating offset) on dp/k ranks",
                "k": self.k, "sequences": int(self.idx.size), "dp": self.layout.dp}


class _Buckets:
    """Open groups by code and step: the join candidates.

    ``code`` = size index·2 + leaves-the-domain, so every group of a
    (code, step) *cell* adds the same time for a given sequence and shares
    its step's height. A cell is ``[groups, parked, count]``: ``groups``
    sorted by (time, -group id), so the fullest group below a height limit
    is found by a binary search; a group a query passes without token room
    for its sequence is *parked* out of that list into a heap by room
    (``parked``) until a query's tokens fit it again (sequences come longest
    first, so mostly it stays parked), and every query first brings back the
    parked groups with room for it: the list always holds every group with
    room for the current sequence, and few without. A group is dropped
    (closed) once its token room is below the smallest share any sequence has
    at its size.
    """

    def __init__(self, min_tok: list[int]) -> None:
        self.by_code: dict[int, dict[int, list]] = {}
        self.min_tok = min_tok
        self.parked: set[int] = set()

    def add(self, code: int, step: int, time: float, g: int, room: int) -> None:
        if room >= self.min_tok[code >> 1]:
            cells = self.by_code.setdefault(code, {})
            cell = cells.get(step)
            if cell is None:
                cell = cells[step] = [[], [], 0]
            insort(cell[0], (time, -g))
            cell[2] += 1

    def move(self, code: int, step: int, old: float, new: float, g: int, room: int) -> None:
        cells = self.by_code[code]
        cell = cells[step]
        if g in self.parked:
            self.parked.discard(g)  # its heap entry goes stale
        else:
            groups = cell[0]
            del groups[bisect_left(groups, (old, -g))]
        cell[2] -= 1
        if not cell[2]:
            del cells[step]
            if not cells:
                del self.by_code[code]
        self.add(code, step, new, g, room)

    def park(self, cell: list, positions, g_room: list[int]) -> None:
        """Move the groups at ``positions`` (descending) of the cell's list to its heap by room."""
        groups, heap = cell[0], cell[1]
        for pos in positions:
            t, neg_g = groups[pos]
            del groups[pos]
            heappush(heap, (-g_room[-neg_g], t, neg_g))
            self.parked.add(-neg_g)

    def unpark(self, cell: list, tok: int, g_time: list[float], g_room: list[int]) -> None:
        """Bring back every parked group with room for ``tok`` tokens (skipping stale heap entries)."""
        heap = cell[1]
        while heap and -heap[0][0] >= tok:
            neg_room, t, neg_g = heappop(heap)
            g = -neg_g
            if g in self.parked and g_time[g] == t and g_room[g] == -neg_room:
                self.parked.discard(g)
                insort(cell[0], (t, neg_g))


class _Table:
    """Per distinct length, shared by every candidate: time row (column = size index·2 + span), token row,
    and the codes a sequence may join (size index at least its need) by increasing GPU-seconds."""

    def __init__(self, lengths: np.ndarray, sc: SeqCosts, need: np.ndarray) -> None:
        _, first, inv = np.unique(lengths, return_index=True, return_inverse=True)
        self.uid: list[int] = inv.tolist()
        t = sc.time_s.reshape(-1, lengths.size)[:, first].T  # (distinct, ns*2)
        self.time_rows: list[list[float]] = t.tolist()
        self.tok_rows: list[list[int]] = sc.tokens[:, first].T.tolist()
        code_size = np.repeat(sc.sizes, 2)
        gpu = np.where(np.arange(t.shape[1])[None, :] // 2 >= need[first][:, None], code_size[None, :] * t, np.inf)
        by_gpu = np.argsort(gpu, axis=1, kind="stable")
        n_fin = np.isfinite(gpu).sum(axis=1).tolist()  # the infinite (excluded) codes sort last
        self.fam: list[list[int]] = [row[:c] for row, c in zip(by_gpu.tolist(), n_fin, strict=True)]


class _Placer:
    """Greedy placement of one candidate (fixed CP size per sequence); see step 3 of the module docstring.

    Per sequence (larger CP sizes first, then longest first) it compares three
    kinds of option: joining an open group (:meth:`_join_option`), a new
    group on free ranks of an open step (:meth:`_new_group_option`) and a new
    step (:meth:`_new_step_option`), then applies the best (:meth:`_apply`).
    """


    def __init__(self, sc: SeqCosts, layout: Layout, cap: int, need: np.ndarray, choice: np.ndarray, height: float,
                 table: _Table | None = None) -> None:
        self.height = height
        self.sc = sc
        self.layout = layout
        self.cap = cap
        self.need = need
        self.choice = choice
        self.R = layout.ranks_per_stage
        self.sizes = [int(c) for c in sc.sizes]
        self.align = align_masks_for(sc.sizes, self.R)
        self.pp = layout.pp
        self.span0 = [int(x) for x in layout.spans_network(np.zeros(len(self.sizes), dtype=np.int64), sc.sizes)]
        self.table = table

    def run(self, name: str, lengths: np.ndarray) -> Plan:
        sc, n = self.sc, lengths.size
        tab = self.table if self.table is not None else _Table(lengths, sc, self.need)
        ar = np.arange(n)
        span0 = np.asarray(self.span0, dtype=np.int64)
        t_choice = sc.time_s[self.choice, span0[self.choice], ar]
        # larger CP groups first (aligned blocks before the ranks fragment), then longest first
        order = np.lexsort((ar, -t_choice, -self.choice))
        self._start()
        uid, time_rows, tok_rows, fam = tab.uid, tab.time_rows, tab.tok_rows, tab.fam
        choice = self.choice.tolist()
        for i in order.tolist():
            u, k = uid[i], choice[i]
            trow, tokrow = time_rows[u], tok_rows[u]
            best = self._join_option(trow, tokrow, fam[u])
            best = self._new_group_option(trow, k, best)
            best = self._new_step_option(trow, k, best)
            self._apply(best[4], i, k, trow, tokrow)
        return self._plan(name, lengths)

    # ------------------------------------------------------------ state
    def _start(self) -> None:
        H = self.height
        self.g_step: list[int] = []
        self.g_sidx: list[int] = []
        self.g_code: list[int] = []  # size index * 2 + leaves-the-domain
        self.g_time: list[float] = []
        self.g_room: list[int] = []  # tokens per rank still free under the cap
        self.g_start: list[int] = []
        self.members: list[list[int]] = []
        self.S: list[float] = []  # step times
        self.free: list[int] = []  # per step: bit r set = rank r free
        self.cache: list[dict[int, int]] = []  # per step: size -> lowest free aligned start
        self.open_steps: list[int] = []  # steps with free ranks
        self.span_cache: dict[tuple[int, int], int] = {}
        # no step grows past the target height H (unless a sequence alone is taller); steps may grow
        # to H before the (pp-1)·max term counts
        self.gmax = H if (self.pp > 1 and np.isfinite(H)) else 0.0
        self.buckets = _Buckets([int(x) for x in self.sc.tokens.min(axis=1)])

    def _spans(self, start: int, c: int) -> int:
        key = (start, c)
        v = self.span_cache.get(key)
        if v is None:
            v = int(bool(self.layout.spans_network(start, c)))
            self.span_cache[key] = v
        return v

    def _delta(self, s_k: float, newt: float) -> float:
        """Increase of the modelled makespan when a step of height ``s_k`` gets a group of time ``newt``."""
        sn = newt if newt > s_k else s_k  # max(s_k, newt) without the call
        d = sn - s_k
        if self.pp > 1:
            over = sn - self.gmax
            d += (self.pp - 1) * (over if over > 0.0 else 0.0)
        return d

    # ---------------------------------------------------------- options
    def _join_option(self, trow: list[float], tokrow: list[int], fam: list[int]):
        """The best open group to join: least makespan increase, then fewest GPU-seconds, then fullest
        (lowest id on ties).

        Most sequences fit somewhere without raising a step: the search first assumes the least
        increase is 0 and keeps its answer if it found a group that adds exactly nothing; otherwise it
        computes the least increase over every open group and searches with that threshold.
        """
        thr0 = 1e-9 * (self.gmax + 0.0)
        found = self._search(trow, tokrow, fam, thr0)
        if found is not None and found[3]:
            return (0.0, found[0], -found[1], 0, ("join", -found[2]))
        d0 = self._least_increase_all(trow, tokrow, fam)
        if not d0 < np.inf:
            return None
        if d0 != 0.0 or found is None:
            found = self._search(trow, tokrow, fam, d0 + 1e-9 * (self.gmax + d0))
        return (float(d0), found[0], -found[1], 0, ("join", -found[2]))

    def _least_increase_all(self, trow: list[float], tokrow: list[int], fam: list[int]) -> float:
        """Least makespan increase of joining any open group that can take the sequence (``inf`` if none)."""
        d0 = np.inf
        by_code = self.buckets.by_code
        for code in fam:
            cells = by_code.get(code)
            if cells is None:
                continue
            tok, add = tokrow[code >> 1], trow[code]
            for st, cell in cells.items():
                s_k = self.S[st]
                d0 = min(d0, self._least_increase(cell, s_k, add, max(s_k, self.height) * (1 + 1e-12), tok))
                if d0 == 0.0:
                    return d0
        return d0

    def _least_increase(self, cell: list, s_k: float, add: float, lim: float, tok: int) -> float:
        """Least makespan increase of joining a group of one cell (``inf`` if none can take the sequence).

        The increase grows with the group's time, so it is that of the lowest group with token room
        (the groups passed on the way are parked).
        """
        room = self.g_room
        if cell[1] and -cell[1][0][0] >= tok:
            self.buckets.unpark(cell, tok, self.g_time, room)
        groups = cell[0]
        n = len(groups)
        pos = 0
        while pos < n and room[-groups[pos][1]] < tok:
            pos += 1
        out = np.inf
        if pos < n:
            t = groups[pos][0]
            out = self._delta(s_k, t + add) if t + add <= lim else np.inf
        if pos:
            self.buckets.park(cell, range(pos - 1, -1, -1), room)
        return out

    def _search(self, trow: list[float], tokrow: list[int], fam: list[int], thr: float):
        """Among groups whose increase is within ``thr``: the fewest GPU-seconds, then the fullest.

        Codes go by increasing GPU-seconds; the first with such a group sets the least, and only codes
        within the tolerance of it can hold the pick. Returns (GPU-seconds, new time, -group, whether a
        group found adds exactly nothing) or None.
        """
        best = (-np.inf, 0)  # (new time, -group)
        gmin = np.inf
        zero = False
        by_code = self.buckets.by_code
        for code in fam:
            cells = by_code.get(code)
            if cells is None:
                continue
            add = trow[code]
            gpu = self.sizes[code >> 1] * add
            if gpu > gmin * (1 + 1e-9):
                break
            tok = tokrow[code >> 1]
            for st, cell in cells.items():
                s_k = self.S[st]
                lim = max(s_k, self.height) * (1 + 1e-12)
                hit = self._fullest_in_cell(cell, s_k, add, lim, tok, thr, best)
                if hit is None:
                    continue
                gmin = min(gmin, gpu)
                if hit[1]:
                    best = hit[1]
                zero = zero or hit[0]
        if gmin == np.inf:
            return None
        return (float(gmin), float(best[0]), best[1], zero)

    def _within(self, t: float, s_k: float, add: float, lim: float, thr: float) -> bool:
        newt = t + add
        if newt > lim:
            return False
        sn = newt if newt > s_k else s_k
        over = sn - self.gmax
        return (sn - s_k) + ((self.pp - 1) * (over if over > 0.0 else 0.0) if self.pp > 1 else 0.0) <= thr

    def _limit(self, keys: list, s_k: float, add: float, lim: float, thr: float) -> int:
        """Number of groups of a sorted list whose increase is within ``thr`` (it grows with the time)."""
        x = (lim if lim < s_k + thr else s_k + thr) - add
        p = bisect_right(keys, (x, np.inf))
        n = len(keys)
        # past the height limit is never within; at most the step's height adds nothing (the usual answers,
        # decided without the full test)
        while p < n and keys[p][0] + add <= lim and self._within(keys[p][0], s_k, add, lim, thr):
            p += 1
        while p > 0:
            newt = keys[p - 1][0] + add
            if (newt <= s_k and newt <= lim) or self._within(keys[p - 1][0], s_k, add, lim, thr):
                break
            p -= 1
        return p

    def _fullest_in_cell(self, cell, s_k: float, add: float, lim: float, tok: int, thr: float, best: tuple):
        """A cell's groups with token room within ``thr``: (whether one adds nothing, the pick if it beats
        ``best`` by (new time, -group), else None); None if the cell has no such group. The groups passed
        without room are parked."""
        room = self.g_room
        if cell[1] and -cell[1][0][0] >= tok:
            self.buckets.unpark(cell, tok, self.g_time, room)
        groups = cell[0]
        p = self._limit(groups, s_k, add, lim, thr)
        pos = p - 1
        while pos >= 0 and room[-groups[pos][1]] < tok:
            pos -= 1
        hit = self._tied_pick(groups, pos, s_k, add, tok, best) if pos >= 0 else None
        if pos < p - 1:
            self.buckets.park(cell, range(p - 1, pos, -1), room)
        return hit

    def _tied_pick(self, keys: list, pos: int, s_k: float, add: float, tok: int, best: tuple):
        """From the highest group with room at ``pos``: the lowest id among the groups with room and the same
        new time (the list is sorted by time, and a new time can round equal for different times)."""
        newt = keys[pos][0] + add
        zero = newt <= s_k
        if newt < best[0]:
            return (zero, None)
        pick = (newt, keys[pos][1])
        room = self.g_room
        pos -= 1
        while pos >= 0 and keys[pos][0] + add == newt:
            if keys[pos][1] > pick[1] and room[-keys[pos][1]] >= tok:
                pick = (newt, keys[pos][1])
            pos -= 1
        return (zero, pick if pick > best else None)

    def _new_group_option(self, trow: list[float], k: int, best):
        """A new group of the sequence's size on free ranks of an open step, if one beats ``best``."""
        c, H, pp1 = self.sizes[k], self.height, self.pp - 1
        for kk in self.open_steps:
            fc = self.cache[kk]
            start = fc.get(c)
            if start is None:
                start = lowest_free_slice(self.free[kk], c, self.R, self.align)
                fc[c] = start
            if start < 0:
                continue
            b = self._spans(start, c)
            a1 = float(trow[2 * k + b])
            s_k = float(self.S[kk])
            if a1 > max(s_k, H):
                continue
            Sn = max(s_k, a1)
            delta = (Sn - s_k) + pp1 * max(0.0, Sn - self.gmax)
            opt = (delta, c * a1, -a1, 1, ("new", kk, start, b))
            if best is None or _better(opt, best, self.gmax):
                best = opt
        return best

    def _new_step_option(self, trow: list[float], k: int, best):
        """A new step holding only this sequence's group, if it beats ``best``."""
        c, pp1 = self.sizes[k], self.pp - 1
        a1 = float(trow[2 * k + self.span0[k]])
        d = a1 + pp1 * max(0.0, a1 - self.gmax)
        if best is not None and d > best[0] + 1e-9 * (self.gmax + a1 + abs(best[2])):
            return best  # :func:`_better`'s larger-increase test, without building the option
        opt = (d, c * a1, -a1, 2, ("step",))
        if best is None or _better(opt, best, self.gmax):
            best = opt
        return best

    # ------------------------------------------------------------ apply
    def _apply(self, act: tuple, i: int, k: int, trow: list[float], tokrow: list[int]) -> None:
        if act[0] == "join":
            g = act[1]
            old = self.g_time[g]
            self.g_time[g] = old + trow[self.g_code[g]]
            self.g_room[g] -= tokrow[self.g_sidx[g]]
            self.members[g].append(i)
            st = self.g_step[g]
            self.buckets.move(self.g_code[g], st, old, self.g_time[g], g, self.g_room[g])
            t_new = self.g_time[g]
        else:
            st, t_new = self._open_group(act, i, k, trow, tokrow)
        if t_new > self.S[st]:
            self.S[st] = t_new
            if t_new > self.gmax:
                self.gmax = t_new

    def _open_group(self, act: tuple, i: int, k: int, trow: list[float], tokrow: list[int]) -> tuple[int, float]:
        """Open the group of ``act`` (on a new step for ``("step",)``); return its step and time."""
        c = self.sizes[k]
        if act[0] == "step":
            st = len(self.S)
            self.S.append(0.0)
            self.free.append((1 << self.R) - 1)
            self.cache.append({})
            self.open_steps.append(st)
            start = lowest_free_slice(self.free[st], c, self.R, self.align)
            b = self._spans(start, c)
        else:
            _, st, start, b = act
        t_new = float(trow[2 * k + b])
        g = len(self.g_step)
        self.g_step.append(st)
        self.g_sidx.append(k)
        self.g_code.append(2 * k + b)
        self.g_time.append(t_new)
        self.g_room.append(self.cap - tokrow[k])
        self.g_start.append(start)
        self.members.append([i])
        self.buckets.add(2 * k + b, st, t_new, g, self.g_room[g])
        self.free[st] &= ~(((1 << c) - 1) << start)
        self.cache[st] = {}
        if not self.free[st]:
            self.open_steps.remove(st)
        return st, t_new

    def _plan(self, name: str, lengths: np.ndarray) -> Plan:
        n_steps = len(self.S)
        steps: list[list[Group]] = [[] for _ in range(n_steps)]
        for g in range(len(self.g_step)):
            steps[self.g_step[g]].append(Group(int(self.g_start[g]), self.sizes[self.g_sidx[g]], self.members[g]))
        # longest steps first (any order has the same modelled makespan)
        order_steps = sorted(range(n_steps), key=lambda s: (-self.S[s], s))
        out = [Step(sorted(steps[s], key=lambda gr: gr.start)) for s in order_steps]
        return Plan(name, self.layout, lengths, out, True)


def _better(a: tuple, b: tuple, scale: float) -> bool:
    """Option ``a`` beats ``b``: smaller makespan increase, then fewer GPU-seconds, then fuller group, then kind."""
    tol = 1e-9 * (scale + abs(a[2]) + abs(b[2]))
    if a[0] < b[0] - tol:
        return True
    if a[0] > b[0] + tol:
        return False
    if a[1] < b[1] * (1 - 1e-9):
        return True
    if a[1] > b[1] * (1 + 1e-9):
        return False
    return (a[2], a[3]) < (b[2], b[3])
