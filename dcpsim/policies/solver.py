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

Speed: placement is a few numpy operations per sequence over the open
groups; 2048 sequences on 512 ranks plan in well under a second.
"""

from __future__ import annotations

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


class _Placer:
    """Greedy placement of one candidate (fixed CP size per sequence)."""

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

    def run(self, name: str, lengths: np.ndarray) -> Plan:  # noqa: C901 - temporary, split by dedupe
        sc, R, cap, pp = self.sc, self.R, self.cap, self.pp
        n = lengths.size
        ar = np.arange(n)
        span0 = np.asarray(self.layout.spans_network(np.zeros(len(self.sizes), dtype=np.int64), sc.sizes), dtype=np.int64)
        t_choice = sc.time_s[self.choice, span0[self.choice], ar]
        # larger CP groups first (aligned blocks before the ranks fragment), then longest first
        order = np.lexsort((ar, -t_choice, -self.choice))
        gcap = max(16, 2 * R)
        g_step = np.zeros(gcap, dtype=np.int64)
        g_sidx = np.zeros(gcap, dtype=np.int64)
        g_code = np.zeros(gcap, dtype=np.int64)  # size index * 2 + leaves-the-domain
        g_time = np.zeros(gcap)
        g_room = np.zeros(gcap, dtype=np.int64)  # tokens per rank still free under the cap
        g_start: list[int] = []
        members: list[list[int]] = []
        ng = 0
        S = np.zeros(16)  # step times
        n_steps = 0
        free: list[int] = []
        cache: list[dict[int, int]] = []
        open_steps: list[int] = []  # steps with free ranks
        span_cache: dict[tuple[int, int], int] = {}
        # no step grows past the target height H (unless a sequence alone is taller); steps may grow
        # to H before the (pp-1)·max term counts
        H = self.height
        gmax = H if (pp > 1 and np.isfinite(H)) else 0.0
        full = (1 << R) - 1
        sizes = self.sizes
        size_arr = sc.sizes
        tok_t = np.ascontiguousarray(sc.tokens.T)  # (n, ns)
        time_t = np.ascontiguousarray(sc.time_s.reshape(-1, n).T)  # (n, ns*2), column = size index*2 + span
        choice, need = self.choice, self.need
        pp1 = pp - 1

        def spans(start: int, c: int) -> int:
            key = (start, c)
            v = span_cache.get(key)
            if v is None:
                v = int(bool(self.layout.spans_network(start, c)))
                span_cache[key] = v
            return v

        for i in order.tolist():
            k = int(choice[i])
            c = sizes[k]
            kn = int(need[i])
            trow = time_t[i]
            best = None  # (delta, gpu, -new_T, kind, action)
            if ng:
                gs = g_sidx[:ng]
                add = trow[g_code[:ng]]
                newt = g_time[:ng] + add
                Sk = S[g_step[:ng]]
                ok = (gs >= kn) & (tok_t[i][gs] <= g_room[:ng]) & (newt <= np.maximum(Sk, H) * (1 + 1e-12))
                if ok.any():
                    Sn = np.maximum(Sk, newt)
                    delta = Sn - Sk
                    if pp1:
                        delta += pp1 * np.maximum(0.0, Sn - gmax)
                    delta[~ok] = np.inf
                    d0 = delta.min()
                    sel = delta <= d0 + 1e-9 * (gmax + d0)
                    gpu = np.where(sel, size_arr[gs] * add, np.inf)
                    gmin = gpu.min()
                    sel &= gpu <= gmin * (1 + 1e-9)
                    j = int(np.argmax(np.where(sel, newt, -np.inf)))
                    best = (float(d0), float(gmin), -float(newt[j]), 0, ("join", j))
            # a new group of size c on free ranks of an existing step
            for kk in open_steps:
                fc = cache[kk]
                start = fc.get(c)
                if start is None:
                    start = lowest_free_slice(free[kk], c, R, self.align)
                    fc[c] = start
                if start < 0:
                    continue
                b = spans(start, c)
                a1 = float(trow[2 * k + b])
                s_k = float(S[kk])
                if a1 > max(s_k, H):
                    continue
                Sn = max(s_k, a1)
                delta = (Sn - s_k) + pp1 * max(0.0, Sn - gmax)
                opt = (delta, c * a1, -a1, 1, ("new", kk, start, b))
                if best is None or _better(opt, best, gmax):
                    best = opt
            # a new step
            a1 = float(trow[2 * k + span0[k]])
            opt = (a1 + pp1 * max(0.0, a1 - gmax), c * a1, -a1, 2, ("step",))
            if best is None or _better(opt, best, gmax):
                best = opt
            act = best[4]
            if act[0] == "join":
                g = act[1]
                g_time[g] += trow[g_code[g]]
                g_room[g] -= tok_t[i, g_sidx[g]]
                members[g].append(i)
                st = int(g_step[g])
                t_new = float(g_time[g])
            else:
                if act[0] == "step":
                    if n_steps == S.size:
                        S = np.concatenate([S, np.zeros(S.size)])
                    st = n_steps
                    n_steps += 1
                    free.append(full)
                    cache.append({})
                    open_steps.append(st)
                    start = lowest_free_slice(full, c, R, self.align)
                    b = spans(start, c)
                else:
                    _, st, start, b = act
                if ng == gcap:
                    gcap *= 2
                    g_step, g_sidx, g_code, g_time, g_room = (
                        np.resize(a, gcap) for a in (g_step, g_sidx, g_code, g_time, g_room)
                    )
                t_new = float(trow[2 * k + b])
                g_step[ng], g_sidx[ng], g_code[ng] = st, k, 2 * k + b
                g_time[ng], g_room[ng] = t_new, cap - tok_t[i, k]
                g_start.append(start)
                members.append([i])
                ng += 1
                free[st] &= ~(((1 << c) - 1) << start)
                cache[st] = {}
                if not free[st]:
                    open_steps.remove(st)
            if t_new > S[st]:
                S[st] = t_new
                if t_new > gmax:
                    gmax = t_new
        steps: list[list[Group]] = [[] for _ in range(n_steps)]
        for g in range(ng):
            steps[int(g_step[g])].append(Group(int(g_start[g]), sizes[int(g_sidx[g])], members[g]))
        # longest steps first (any order has the same modelled makespan)
        order_steps = sorted(range(n_steps), key=lambda s: (-S[s], s))
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
