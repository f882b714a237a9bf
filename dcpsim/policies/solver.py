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
all candidates (:class:`_Table`). Sequences of one length come one after
another; after one joins a group without raising its step, the next ones are
placed in bulk (:mod:`dcpsim.policies.solver_follow`): the same group while
it can take them, then the groups of identical time and room below it, in
order, each decision provably the per-sequence one (at 65,536 GPUs about
80% of the full placement's sequences go this way). Where the height limit's
effect is not tracked (:meth:`_Placer.unbounded_same`), such a run is one walk
down the cell's time-sorted list (the picks are its groups with room, in
order), its list changes made once at the end; where that cell runs out and
the search had one other cell with a hit, of the same code, the run goes on
there. One 65,536-GPU iteration (``benchmarks/scale_instructions.py``,
valgrind, 2026-11-27): 12.6 G instructions before the walk, 9.6 G with it
(``packing``: 0.96 G); 8.6 G with the cost table costed once per run of
lengths that pad alike on a size (:class:`~dcpsim.policies.costs.SeqCosts`,
0.25 -> 0.045 CPU s) and the plans handed out as arrays (no ``Group``
objects for the scoring, the check and the simulator); 7.7 G (8.58 -> 7.74,
the same count on the same host) with a walk's lone first pick moved alone,
each size's free slices kept until a group opens, the cut test before the
join searches and the least-increase pass's usual cell inline
(:mod:`dcpsim.policies.solver_least`; checked against the general paths in
``tests/test_solver_fast.py``). After a join that raises its step, the next sequences of its length
are placed by :mod:`dcpsim.policies.solver_fill` while only the raised group's cell can change the
decision (every rank taken, the short sequences filling the lowest step group by group; each decision the
full one, ``tests/test_solver_fill.py``): one 65,536-GPU iteration 7,790 M -> 7,546 M instructions
(``benchmarks/scale_instructions.py``, 2026-11-28; ``packing``: 0.90 G), its plan 7.53 G -> 7.31 G.
After a sequence opens a group on the first open step's free ranks adding nothing, the next ones of its length
open that step's next free slices (:mod:`dcpsim.policies.solver_open`) while joins into the groups just
opened raise the step by far more than the tolerances (each decision the full one,
``tests/test_solver_open.py``): the 65,536-GPU full placement's decisions 28,715 -> 20,646. With it and
smaller shortcuts (the prefix end's usual answer tested inline, a free single rank found by
``bytearray.find``, a twin run sliced to what it takes) one 65,536-GPU iteration 7,538 M -> 7,202 M
instructions (``benchmarks/scale_instructions.py``, 2026-11-28; ``packing``: 0.90 G, so 8.4x -> 8.0x).
Then 7,190 M -> 6,812 M (7.6x; CPU medians 0.81 -> 0.75 s, ``packing`` 0.11-0.12 s, ``benchmarks/scale_fast.py``;
``benchmarks/results/scale_fast/gpus65536_issue24_solver29_*.json``, 2026-11-28):
each sequence's group kept in one placement-order list (the plan's members from a stable sort of it), a run
opened on one step's free slices found and opened in one pass (:meth:`_Open._free_run`, :meth:`_Open._open_block`),
and a twin run of consecutive group ids (at 65,536 GPUs every one: groups opened together keep their ids, times
and rooms) updated by list slices. What is left is spread: about 44,000 full decisions (the six screens' 8,192
sequences come mostly one length each) at about 100 interpreted lines each, and the walks' per-group steps.
The cell lists (about 5,700 groups per cell, changed near their shortest times) are kept in reverse, keys
(-time, id) ascending, so a change shifts only the entries after it, few: 6,817 M -> 6,071 M instructions
(list memory moves were about 12%), CPU medians 0.73 -> 0.71 s (2026-11-28); 5,940 M -> 5,833 M with the per-length
rows cut to the size indices a candidate can choose (at most each length's fastest: 4 of 14 sizes at 65,536 GPUs).
Then 5,850 M -> 5,278 M (5.9x ``packing``'s 897 M; CPU medians of 5 alternating runs 0.67 -> 0.63 s, ``packing``
0.11 s; ``benchmarks/results/scale_fast/gpus65536_issue24_session13_*.json``, 2026-11-28): the per-decision calls
inline in :meth:`_Placer.run` (new-group options, their comparison, a join's move), a cell's usual answers (its
last one or two entries) tested before each binary search, candidates kept per distinct length, the table's
families by ``np.unique``; and screen placements reuse as :class:`_Full` does (no effect on ``github``; on
``commoncrawl`` and ``wikipedia`` one screen and one full placement fewer: 0.91 -> 0.52 and 0.74 -> 0.49 CPU s).
Left: the placements are about 4.3 G instructions, some 41% of it the interpreter's own loop: about 34,000
decisions that start a run (the screens' samples are mostly one length each) and the walks' list rebuilds.
Plans are identical to
the definition (a scan of every open group per sequence, kept in
``tests/test_policy_scale.py``) and to one full decision per sequence
(``_Placer.bulk = False``), meta included.

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

from copy import copy
from dataclasses import replace

import numpy as np

from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.policies.base import Policy, candidate_microbatch_counts
from dcpsim.policies.costs import SeqCosts, evaluate_plan
from dcpsim.policies.fit import dynamic_fit, smallest_fitting_size
from dcpsim.policies.plan import Layout, Plan, groups_per_size
from dcpsim.policies.solver_placer import _Placer, _Table
from dcpsim.policies.static import _distinct_ints


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
        n = lengths.size
        if n == 0:
            sizes, need = dynamic_fit(lengths, layout)
            self._token_cap(lengths, layout, cost, sizes, need)
            return Plan(self.name, layout, lengths, [], True, meta={"microbatches": 0})
        # the fits are elementwise in the length: computed on the distinct lengths and spread
        distinct = _distinct_ints(lengths)  # np.unique(lengths, return_index=True, return_inverse=True)
        u, _, inv = distinct
        try:
            sizes, need = dynamic_fit(u, layout)
        except InfeasibleError:
            dynamic_fit(lengths, layout)  # the same error, naming the sequence by its index in the batch
            raise
        cap, need = self._token_cap(u, layout, cost, sizes, need)
        need = need[inv]
        sc = SeqCosts(lengths, layout, cost, sizes, distinct=distinct)
        ctx = _Search(sc, layout, cap, need, self.max_extra_microbatches)
        screen = self._screen(lengths, layout, sc, need, ctx.table) if self.screen and n > self.screen_above else None
        cands = []
        full = _Full(sc, layout, cap, need, ctx.table, self.name, lengths, cost)
        # the choices come per distinct length, spread to the sequences placed (``inv``: the whole batch's)
        inv, wanted = ctx.inv, ctx.unbounded_choices()
        full.wanted = {c[inv].tobytes() for c in wanted}
        if screen is not None:
            screen.wanted = {c[screen.table.inv].tobytes() for c in wanted}
        for m, choice_u, height in ctx.candidates():
            if screen is not None and screen.takes(sc.sizes, choice_u):
                plan, ev = screen.place(self.name, ctx, choice_u, height, cost)
            else:
                plan, ev = full.place(choice_u[inv], height)
            cands.append([not ev.fits_memory, ev.makespan_s, m, plan, ev, choice_u, height])
            ctx.scored(ev.makespan_s)
        cands.sort(key=lambda x: (x[0], x[1], x[2]))
        screened = [c for c in cands if c[3].layout is not layout]
        if screened:  # the best screened candidates, and any that tie the best (the screen cannot tell them apart)
            top = (screened[0][0], screened[0][1] * (1 + 1e-9))
            screened = [c for j, c in enumerate(screened) if j < self.screen_full or (c[0], c[1]) <= top]
        # those with a height limit first: one without a limit may then reuse the plan of one with the same
        # choice (:class:`_Full`; each placement is a function of its candidate alone, so the order changes nothing)
        # (and only those with the choice of one without a limit placed here track the limit's effect)
        full.wanted = {c[5][inv].tobytes() for c in screened if not np.isfinite(c[6])}
        for c in sorted(screened, key=lambda c: not np.isfinite(c[6])):
            c.append((c[1], c[0]))  # the screened (makespan, misfit)
            c[3], c[4] = full.place(c[5][inv], c[6])
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
            "groups_per_size": groups_per_size(plan.steps),
        }
        if screen is not None:
            meta["screen"] = screen.describe()
        return meta


class _Full:
    """Candidates placed on the whole batch, each with its exact score.

    A candidate without a height limit (``m = m0``) whose CP choice a candidate with a limit had before is
    not placed again when that placement made every decision the unlimited one makes
    (:meth:`_Placer.unbounded_same`): its plan and score are that one's (with ``m0 = 1`` the coarse
    choice for ``m0 + 1`` is the plain one for ``m0``, and where the tallest sequence goes first its
    step reaches the limit at once). The screen's placements (:class:`_Screen`) go through one of these too,
    on its subsample; of the screened candidates placed in full, those with a limit go first. At 65,536 GPUs
    (pp 8 cp 8, seed 0) this skips one screen placement and one full placement (of two) on ``commoncrawl`` and
    ``wikipedia`` (one iteration 0.91 -> 0.52 and 0.74 -> 0.49 CPU s); on ``github`` the screened candidate with
    a limit starts below it (:meth:`_Placer.unbounded_same` fails), so it is placed untracked as before.
    """

    def __init__(self, sc: SeqCosts, layout: Layout, cap: int, need: np.ndarray, table: _Table, name: str,
                 lengths: np.ndarray, cost) -> None:
        self.args = (sc, layout, cap, need)
        self.table, self.name, self.lengths, self.cost = table, name, lengths, cost
        self.unbounded: dict[bytes, tuple[Plan, object]] = {}  # choice -> (plan, score) valid without a limit
        self.wanted: set[bytes] | None = None  # the choices of the candidates without a limit (set by the caller)

    def place(self, choice: np.ndarray, height: float) -> tuple[Plan, object]:
        """(plan, :func:`evaluate_plan` score) of the candidate (CP size index per sequence, height limit)."""
        key = choice.tobytes()
        if not np.isfinite(height) and key in self.unbounded:
            plan, ev = self.unbounded[key]
            return copy(plan), ev
        placer = _Placer(*self.args, choice, height, self.table)
        # the limit's effect is tracked only where a candidate without one may have this choice
        placer.track = np.isfinite(height) and (self.wanted is None or key in self.wanted)
        plan = placer.run(self.name, self.lengths)
        ev = evaluate_plan(plan, self.cost)
        if placer.track and getattr(placer, "unbounded_same", None) is not None and placer.unbounded_same():
            self.unbounded.setdefault(key, (plan, ev))
        return plan, ev


class _Search:
    """The outer search over microbatch counts (step 2 of the module docstring): candidates in order,
    stopping after three that do not improve."""

    def __init__(self, sc: SeqCosts, layout: Layout, cap: int, need: np.ndarray, extra: int) -> None:
        sizes = sc.sizes
        self.sc, self.layout, self.cap, self.need, self.extra = sc, layout, cap, need, extra
        R = layout.ranks_per_stage
        span0 = np.asarray(layout.spans_network(np.zeros(sizes.size, dtype=np.int64), sizes), dtype=np.int64)
        # every column below is a function of the sequence's length: computed once per distinct length
        # (``first``: a sequence of each), spread to the sequences (``inv``) where sums and choices need them
        _, first, self.inv = sc.distinct()
        ns, nu = sizes.size, first.size
        t0 = sc.time_u[np.arange(ns), span0]  # (ns, nu): first aligned slice (sc.time_s[:, :, first])
        tok = sc.tok_u  # (ns, nu): sc.tokens[:, first]
        feas = tok <= cap
        gpu = np.where(feas, t0 * sizes[:, None], np.inf)
        self.W = float(gpu.min(axis=0)[self.inv].sum())
        need_u = need[first]
        tok_need = tok[need_u, np.arange(nu)][self.inv]
        self.m0 = max(1, int(np.ceil(tok_need.sum() / (R * cap))))
        self.tfeas = np.where(feas & (np.arange(ns)[:, None] >= need_u[None, :]), t0, np.inf)  # (ns, nu)
        self.fastest = np.argmin(self.tfeas, axis=0)
        self.t_floor = float(self.tfeas.min(axis=0).max())  # no step is shorter than the longest sequence
        # rows as wide as the candidates choose: a choice is at most each length's fastest size index (_choice_u)
        self.table = _Table(sc.lengths, sc, need, width=int(self.fastest.max()) + 1 if nu else None)
        self.worse, self.best_ms = 0, np.inf

    def scored(self, makespan_s: float) -> None:
        if makespan_s < self.best_ms:
            self.best_ms, self.worse = makespan_s, 0
        else:
            self.worse += 1

    def _choice_u(self, target: float) -> np.ndarray:
        """Per distinct length, the smallest CP size index whose time is within ``target`` seconds (the
        fastest if none)."""
        under = self.tfeas <= target
        return np.where(under.any(axis=0), np.argmax(under, axis=0), self.fastest)

    def unbounded_choices(self) -> list[np.ndarray]:
        """The CP choices (per distinct length, as :meth:`candidates`) of the candidates without a height limit
        (``m = m0``) that a candidate with a limit may stand in for (:class:`_Full`; tracking the limit's effect
        costs time, and pays only where such a candidate follows): the plain one's, where it differs from the
        coarse one's. The coarse ``m0`` candidate comes first, before any with a limit, and a plain one of its
        choice is not yielded again; the plain one comes after the coarse ones (the search stops only on
        three candidates that do not improve, and the first improves on an infinite start)."""
        tau = self.W / (self.layout.ranks_per_stage * self.m0)
        plain, coarse = self._choice_u(tau), self._choice_u(2.0 * tau)
        return [] if np.array_equal(plain, coarse) else [plain]

    def candidates(self):
        """(m, CP size index per distinct length, step height cap) per distinct candidate; ``choice_u[inv]`` is
        the size index per sequence (spread where placed: a screen places a sample)."""
        m0, R, n, nu = self.m0, self.layout.ranks_per_stage, self.sc.lengths.size, self.tfeas.shape[1]
        seen: set[bytes] = set()
        grid = [(m, 1.0) for m in candidate_microbatch_counts(m0, n, self.extra, self.layout.pp)]
        # a coarser CP choice (sizes for twice the target) for the fewest microbatches, where the rank budget
        # of a step rather than its height limits how far sequences should be split
        coarse = [(m, 2.0) for m in range(m0, m0 + 3)]
        for m, f in coarse + grid:
            tau = self.W / (R * m)
            if f == 1.0 and (self.worse >= 3 or (m > m0 + self.extra and tau < 0.5 * self.t_floor)):
                return  # targets below the longest sequence's time, or no longer improving
            choice_u = self._choice_u(f * tau)
            height = max(tau, float(self.tfeas[choice_u, np.arange(nu)].max())) if m > m0 else np.inf
            # (every distinct length is some sequence's: equal choices per length, equal choices per sequence)
            key = choice_u.astype(np.int16).tobytes() + np.float64(height).tobytes()
            if key in seen:
                continue
            seen.add(key)
            yield m, choice_u, height


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
        # np.lexsort((np.arange(n), -lengths)): the distinct lengths' indices (ascending in the length) reversed,
        # stably sorted (16-bit where they fit: by radix)
        nu = int(table.inv.max()) + 1 if n else 0
        if lengths is sc.lengths and sc.distinct_table and nu <= 1 << 16:
            order = np.argsort((nu - 1 - table.inv).astype(np.uint16), kind="stable")
        else:
            order = np.lexsort((np.arange(n), -lengths))
        blocks = n // k
        self.idx = np.sort(order[np.arange(blocks) * k + np.arange(blocks) % k])
        self.k = k
        self.layout = replace(layout, dp=layout.dp // k)
        self.sc, self.need = sc.subset(self.idx, self.layout), need[self.idx]
        self.table = copy(table)  # rows per distinct length are the full batch's; only the index changes
        self.table.inv = table.inv[self.idx]
        self.table.uid = self.table.inv.tolist()
        self.max_size = self.layout.max_dynamic_cp
        self.wanted: set[bytes] | None = None  # :attr:`_Full.wanted` of the subsample's choices (set by the caller)
        self.full: _Full | None = None  # the placements on the subsample (made on the first)

    def takes(self, sizes: np.ndarray, choice_u: np.ndarray) -> bool:
        """Whether the subsample's ranks hold every chosen CP size of this candidate (size index per distinct
        length)."""
        return int(sizes[choice_u[self.table.inv]].max()) <= self.max_size

    def place(self, name: str, ctx: _Search, choice_u: np.ndarray, height: float, cost):
        """The candidate's plan and its exact score on the subsample; one without a height limit reuses those of
        one with a limit and the same choice there as :class:`_Full` does (a placement on the subsample is a
        placement of its own batch and layout: :meth:`_Placer.unbounded_same` holds for it as for any)."""
        if self.full is None:
            self.full = _Full(self.sc, self.layout, ctx.cap, self.need, self.table, name, self.sc.lengths, cost)
            self.full.wanted = self.wanted
        return self.full.place(choice_u[self.table.inv], height)

    def describe(self) -> dict:
        return {"method": "every k-th sequence by length (rotating offset) on dp/k ranks",
                "k": self.k, "sequences": int(self.idx.size), "dp": self.layout.dp}
