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

Speed: open groups are kept in buckets of equal size, span, step and
token-room class, each sorted by time (:class:`_Buckets`), so a sequence
looks at a few buckets (a binary search and a short scan each) instead of
every group opened so far; full groups are dropped. On the weak-scaling
batch of ``benchmarks/bench_solver_scale.py`` (4 sequences per GPU) that
is about 1.8x less CPU than the former pass over all open groups, with the
same plans (16,384 GPUs: 14.8 -> 8.2 s; 65,536 GPUs: 97 -> 55 s); planning
still grows about as n^1.35 there, far from the 5 s target at 65,536 GPUs.
"""

from __future__ import annotations

from bisect import bisect_left, insort

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
    True).
    """

    name = "dynamic-solver"
    dynamic = True

    def __init__(self, max_extra_microbatches: int = 6, respect_memory: bool = True) -> None:
        if not isinstance(max_extra_microbatches, int) or max_extra_microbatches < 0:
            raise ConfigError("policy.options.max_extra_microbatches", max_extra_microbatches, "an integer >= 0")
        self.max_extra_microbatches = max_extra_microbatches
        self.respect_memory = bool(respect_memory)

    # ------------------------------------------------------------------ plan
    def _plan(self, lengths, layout, cost, rng) -> Plan:
        sizes, need = dynamic_fit(lengths, layout)
        M = layout.max_tokens_per_rank
        cap = M
        if self.respect_memory:
            try:
                mem_cap = int(cost.max_tokens_per_rank())
            except InfeasibleError:
                mem_cap = M
            if mem_cap < M and (smallest_fitting_size(lengths, sizes, mem_cap) >= 0).all():
                cap = mem_cap
                need = smallest_fitting_size(lengths, sizes, cap)
        n = lengths.size
        if n == 0:
            return Plan(self.name, layout, lengths, [], True, meta={"microbatches": 0})
        sc = SeqCosts(lengths, layout, cost, sizes)
        R = layout.ranks_per_stage
        span0 = np.asarray(layout.spans_network(np.zeros(sizes.size, dtype=np.int64), sizes), dtype=np.int64)
        t0 = sc.time_s[np.arange(sizes.size), span0]  # (ns, n): time at the first aligned slice of each size
        feas = sc.tokens <= cap
        gpu = np.where(feas, t0 * sizes[:, None], np.inf)
        W = float(gpu.min(axis=0).sum())
        tok_need = sc.tokens[need, np.arange(n)]
        m0 = max(1, int(np.ceil(tok_need.sum() / (R * cap))))
        tfeas = np.where(feas & (np.arange(sizes.size)[:, None] >= need[None, :]), t0, np.inf)
        fastest = np.argmin(tfeas, axis=0)
        t_floor = float(tfeas.min(axis=0).max())  # no step can be shorter than the longest sequence at its fastest
        seen: set[bytes] = set()
        cands = []
        worse = 0
        best_ms = np.inf
        grid = [(m, 1.0) for m in candidate_microbatch_counts(m0, n, self.max_extra_microbatches, layout.pp)]
        # a coarser CP choice (sizes for twice the target) for the fewest microbatches, where the rank budget
        # of a step rather than its height limits how far sequences should be split
        coarse = [(m, 2.0) for m in range(m0, m0 + 3)]
        for m, f in coarse + grid:
            tau = W / (R * m)
            if f == 1.0 and (worse >= 3 or (m > m0 + self.max_extra_microbatches and tau < 0.5 * t_floor)):
                break  # targets below the longest sequence's time, or no longer improving
            under = tfeas <= f * tau
            choice = np.where(under.any(axis=0), np.argmax(under, axis=0), fastest)
            height = max(tau, float(tfeas[choice, np.arange(n)].max())) if m > m0 else np.inf
            key = choice.astype(np.int16).tobytes() + np.float64(height).tobytes()
            if key in seen:
                continue
            seen.add(key)
            plan = _Placer(sc, layout, cap, need, choice, height).run(self.name, lengths)
            ev = evaluate_plan(plan, cost)
            cands.append((not ev.fits_memory, ev.makespan_s, m, plan, ev))
            if ev.makespan_s < best_ms:
                best_ms, worse = ev.makespan_s, 0
            else:
                worse += 1
        cands.sort(key=lambda x: (x[0], x[1], x[2]))
        _, best_ms, best_m, plan, ev = cands[0]
        hist: dict[int, int] = {}
        for st in plan.steps:
            for g in st.groups:
                hist[g.size] = hist.get(g.size, 0) + 1
        plan.meta = {
            "microbatches": plan.n_steps,
            "target_microbatches": best_m,
            "token_cap": cap,
            "fits_memory": ev.fits_memory,
            "modelled_makespan_s": ev.makespan_s,
            "candidates": [{"m": c[2], "makespan_s": c[1], "fits_memory": not c[0], "steps": c[3].n_steps} for c in cands],
            "groups_per_size": {str(c): v for c, v in sorted(hist.items())},
        }
        return plan


class _Buckets:
    """Open groups by (code, step, room class), each bucket sorted by (time, -group id): the join candidates.

    ``code`` = size index·2 + leaves-the-domain, so every group of a bucket
    adds the same time for a given sequence and shares its step's height: a
    group's join cost grows with its time, so the best group of a bucket is
    found by a binary search instead of a pass over every group ever opened.
    The room class (``room.bit_length()``: room in ``[2^(r-1), 2^r)`` tokens
    per rank) lets a query skip buckets that cannot hold the sequence and
    find token room at once in the others. A group is dropped (closed) once
    its token room is below the smallest share any sequence has at its size.
    """

    def __init__(self, min_tok: list[int]) -> None:
        # (code, step) -> room class -> [(time, -group)] sorted
        self.keys: dict[tuple[int, int], dict[int, list[tuple[float, int]]]] = {}
        self.min_tok = min_tok

    def add(self, code: int, step: int, time: float, g: int, room: int) -> None:
        if room >= self.min_tok[code >> 1]:
            insort(self.keys.setdefault((code, step), {}).setdefault(room.bit_length(), []), (time, -g))

    def move(self, code: int, step: int, old: float, new: float, g: int, old_room: int, room: int) -> None:
        by_class = self.keys[(code, step)]
        keys = by_class[old_room.bit_length()]
        del keys[bisect_left(keys, (old, -g))]
        if not keys:
            del by_class[old_room.bit_length()]
        self.add(code, step, new, g, room)


class _Placer:
    """Greedy placement of one candidate (fixed CP size per sequence); see step 3 of the module docstring.

    Per sequence (larger CP sizes first, then longest first) it compares three
    kinds of option: joining an open group (:meth:`_join_option`), a new
    group on free ranks of an open step (:meth:`_new_group_option`) and a new
    step (:meth:`_new_step_option`), then applies the best (:meth:`_apply`).
    """

    def __init__(self, sc: SeqCosts, layout: Layout, cap: int, need: np.ndarray, choice: np.ndarray, height: float) -> None:
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

    def run(self, name: str, lengths: np.ndarray) -> Plan:
        sc, n = self.sc, lengths.size
        ar = np.arange(n)
        span0 = np.asarray(self.span0, dtype=np.int64)
        t_choice = sc.time_s[self.choice, span0[self.choice], ar]
        # larger CP groups first (aligned blocks before the ranks fragment), then longest first
        order = np.lexsort((ar, -t_choice, -self.choice))
        self._start()
        tok_t = np.ascontiguousarray(sc.tokens.T)  # (n, ns)
        time_t = np.ascontiguousarray(sc.time_s.reshape(-1, n).T)  # (n, ns*2), column = size index*2 + span
        for i in order.tolist():
            k, kn = int(self.choice[i]), int(self.need[i])
            trow, tokrow = time_t[i].tolist(), tok_t[i].tolist()
            best = self._join_option(trow, tokrow, kn)
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
    def _join_option(self, trow: list[float], tokrow: list[int], kn: int):
        """The best open group to join: least makespan increase, then fewest GPU-seconds, then fullest (best fit)."""
        cands = []  # (step height, added time, height limit, keys, tokens per rank, size index)
        d0 = np.inf
        for (code, st), by_class in self.buckets.keys.items():
            k = code >> 1
            if k < kn:  # a group too small for the sequence
                continue
            tok, s_k, add = tokrow[k], self.S[st], trow[code]
            lim = max(s_k, self.height) * (1 + 1e-12)
            for cls, keys in by_class.items():
                if (1 << cls) <= tok:  # no group of this room class has room for it
                    continue
                cands.append((s_k, add, lim, keys, tok, k))
                if d0 > 0.0:  # nothing is below 0
                    d0 = min(d0, self._least_increase(s_k, add, lim, keys, tok))
        if not np.isfinite(d0):
            return None
        thr = d0 + 1e-9 * (self.gmax + d0)
        # buckets by GPU-seconds: the first with a group within the threshold sets the least, and only
        # buckets within the tolerance of it can hold the pick
        found = []  # (new time, -group)
        gmin = np.inf
        for gpu, _, (s_k, add, lim, keys, tok, _k) in sorted((self.sizes[c[5]] * c[1], j, c) for j, c in enumerate(cands)):
            if gpu > gmin * (1 + 1e-9):
                break
            g = self._fullest_within(s_k, add, lim, keys, tok, thr)
            if g >= 0:
                gmin = min(gmin, gpu)
                found.append((self.g_time[g] + add, -g))
        best = max(found)
        return (float(d0), float(gmin), -float(best[0]), 0, ("join", -best[1]))

    def _least_increase(self, s_k: float, add: float, lim: float, keys: list, tok: int) -> float:
        """Least makespan increase of joining a group of one bucket (``inf`` if none can take the sequence).

        The increase grows with the group's time, so it is that of the lowest group with token room.
        """
        for t, neg_g in keys:
            if self.g_room[-neg_g] >= tok:
                return self._delta(s_k, t + add) if t + add <= lim else np.inf
        return np.inf

    def _fullest_within(self, s_k: float, add: float, lim: float, keys: list, tok: int, thr: float) -> int:
        """The bucket's fullest group with token room whose increase is within ``thr`` (lowest id on ties); -1 if none."""
        lo, hi = 0, len(keys)  # binary search: groups [0, lo) are within the threshold and the height limit
        pp1, gmax = self.pp - 1, self.gmax
        while lo < hi:  # conditionals instead of max(): the same values, without a call per probe
            mid = (lo + hi) // 2
            newt = keys[mid][0] + add
            if newt > lim:
                hi = mid
                continue
            sn = newt if newt > s_k else s_k
            over = sn - gmax
            if (sn - s_k) + (pp1 * (over if over > 0.0 else 0.0) if pp1 else 0.0) <= thr:
                lo = mid + 1
            else:
                hi = mid
        for pos in range(lo - 1, -1, -1):
            if self.g_room[-keys[pos][1]] >= tok:
                return -keys[pos][1]
        return -1

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
        opt = (a1 + pp1 * max(0.0, a1 - self.gmax), c * a1, -a1, 2, ("step",))
        if best is None or _better(opt, best, self.gmax):
            best = opt
        return best

    # ------------------------------------------------------------ apply
    def _apply(self, act: tuple, i: int, k: int, trow: list[float], tokrow: list[int]) -> None:
        if act[0] == "join":
            g = act[1]
            old, old_room = self.g_time[g], self.g_room[g]
            self.g_time[g] = old + trow[self.g_code[g]]
            self.g_room[g] -= tokrow[self.g_sidx[g]]
            self.members[g].append(i)
            st = self.g_step[g]
            self.buckets.move(self.g_code[g], st, old, self.g_time[g], g, old_room, self.g_room[g])
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
