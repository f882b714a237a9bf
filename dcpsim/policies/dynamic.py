"""``dynamic``: Megatron-Core's ``default_dynamic_cp`` scheduler (REFERENCE §1, dev branch).

Written from the description in REFERENCE §1 ("Scheduler in today's code"):

* ``gpus_needed(L)``: the smallest power of two ``c ≥ min_cp`` whose group
  holds the sequence, counting its padding to a multiple of ``2c``.
* workload proxy of a sequence on ``c`` ranks: ``L²/c`` per rank (attention
  only, no constants). A rank's load is the sum over the packs it runs.
* The batch is sorted longest first and microbatches are built one at a time.
  The longest remaining sequence (length ``T``) opens a group of
  ``gpus_needed(T)`` ranks at rank 0; no rank's load may exceed
  ``cap = 1.05·T·M``.
* Every other sequence, in order, considers each CP size from
  ``gpus_needed`` upward (×2): joining an existing group of that size whose
  padded tokens stay ``≤ M`` per rank, or opening a group of that size on
  free ranks. Each option is scored by the resulting *maximum load over all
  ranks*; the smallest score under the cap wins, ties going to the first
  option in that order (smaller size first, existing groups in creation
  order before a new group). Sequences that fit nowhere wait for the next
  microbatch.
* Ranks left empty: double the smallest group (its sequences re-split over
  twice the ranks); failing that, one group over all ranks packed greedily
  from this microbatch's sequences, the rest waiting.

Where Megatron's own layout and ours differ: new groups take the lowest free
*aligned* slice (communicators exist only for aligned power-of-two slices,
REFERENCE §1), and after a doubling the groups are re-laid largest first from
rank 0, which keeps every slice aligned (Megatron shifts the groups behind the
doubled one instead; only the ranks' positions differ). When DP×CP is not a
power of two the "group over all ranks" is the largest aligned power of two,
and the remaining ranks idle.

Speed: each sequence is placed with a handful of numpy operations over the
groups of the current microbatch (≤ DP×CP of them), free aligned slices are
found with bit operations on a Python integer, and a microbatch stops early
once even the shortest remaining sequence cannot be placed.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.base import Policy
from dcpsim.policies.fit import dynamic_fit
from dcpsim.policies.plan import Group, Layout, Plan, Step


def lowest_free_slice(free: int, c: int, n_ranks: int, align_masks: dict[int, int]) -> int:
    """Start of the lowest aligned run of ``c`` free ranks in bitmask ``free`` (bit r = rank r free); -1 if none."""
    x = free
    s = 1
    while s < c:  # bit p stays set iff ranks p..p+2s-1 are free
        x &= x >> s
        s <<= 1
    x &= align_masks[c]
    if not x:
        return -1
    return (x & -x).bit_length() - 1


def align_masks_for(sizes, n_ranks: int) -> dict[int, int]:
    """Bitmask of the valid starts (multiples of c with start + c <= n_ranks) for every size."""
    out = {}
    for c in (int(x) for x in sizes):
        m = 0
        for s in range(0, n_ranks - c + 1, c):
            m |= 1 << s
        out[c] = m
    return out


class DynamicPolicy(Policy):
    """``dynamic``: Megatron's ``default_dynamic_cp`` (see the module docstring).

    Option ``cap_delta``: slack of the per-rank load cap ``(1 + cap_delta)·T·M``
    (Megatron: 0.05).
    """

    name = "dynamic"
    dynamic = True

    def __init__(self, cap_delta: float = 0.05) -> None:
        if not isinstance(cap_delta, (int, float)) or cap_delta < 0:
            raise ConfigError("policy.options.cap_delta", cap_delta, "a number >= 0")
        self.cap_delta = float(cap_delta)

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        sizes, need = dynamic_fit(lengths, layout)
        ctx = _Ctx(lengths, layout, sizes, need, self.cap_delta)
        order = np.lexsort((np.arange(lengths.size), -lengths))  # longest first, ties by id
        steps: list[Step] = []
        stats = {"doublings": 0, "full_group_fills": 0}
        while order.size:
            step, order = ctx.microbatch(order, stats)
            steps.append(step)
        hist: dict[int, int] = {}
        for st in steps:
            for g in st.groups:
                hist[g.size] = hist.get(g.size, 0) + 1
        meta = {"microbatches": len(steps), "groups_per_size": {str(c): v for c, v in sorted(hist.items())}, **stats}
        return Plan(self.name, layout, lengths, steps, True, meta=meta)


class _Ctx:
    """Per-batch tables and the microbatch builder."""

    def __init__(self, lengths: np.ndarray, layout: Layout, sizes: np.ndarray, need: np.ndarray, delta: float) -> None:
        self.L = lengths
        self.layout = layout
        self.sizes = sizes
        self.size_list = [int(c) for c in sizes]
        self.ns = sizes.size
        self.need = need
        self.R = layout.ranks_per_stage
        self.M = layout.max_tokens_per_rank
        self.delta = delta
        Lf = lengths.astype(np.float64)
        # per sequence and size: padded tokens per rank and the L²/c proxy
        self.tok = per_rank_tokens(lengths[:, None], sizes[None, :])  # (n, ns)
        self.work = (Lf * Lf)[:, None] / sizes[None, :]  # (n, ns)
        self.align = align_masks_for(sizes, self.R)
        self.cmax = int(sizes[-1])

    def microbatch(self, order: np.ndarray, stats: dict) -> tuple[Step, np.ndarray]:  # noqa: C901 - temporary, split by dedupe
        """Build one microbatch from ``order`` (ids, longest first); return it and the waiting ids."""
        R, M, ns = self.R, self.M, self.ns
        size_list, align = self.size_list, self.align
        tok_tab, work_tab, need_tab, L = self.tok, self.work, self.need, self.L
        g_sidx = np.zeros(R, dtype=np.int64)
        g_load = np.zeros(R)
        g_tok = np.zeros(R, dtype=np.int64)
        g_start: list[int] = []
        members: list[list[int]] = []
        ng = 0
        free = (1 << R) - 1
        slice_cache: list[int | None] = [None] * ns

        def first_free(k: int) -> int:
            v = slice_cache[k]
            if v is None:
                v = lowest_free_slice(free, size_list[k], R, align)
                slice_cache[k] = v
            return v

        ids = order.tolist()
        i0 = ids[0]
        k = int(need_tab[i0])
        g_sidx[0], g_load[0], g_tok[0] = k, work_tab[i0, k], tok_tab[i0, k]
        start = lowest_free_slice(free, size_list[k], R, align)
        g_start.append(start)
        members.append([i0])
        free &= ~(((1 << size_list[k]) - 1) << start)
        ng = 1
        cur_max = float(work_tab[i0, k])
        cap = (1.0 + self.delta) * float(L[i0]) * M
        min_tok = int(g_tok[0])
        big = size_list[k]
        leftovers: list[int] = []
        shortest = int(L[ids[-1]])
        n_ids = len(ids)
        BIG = float(4 * R + 4)

        for pos in range(1, n_ids):
            i = ids[pos]
            Li = int(L[i])
            if free == 0 and Li > (M - min_tok) * big:
                # no free rank and no group has room even for a perfect split: cannot place
                leftovers.append(i)
                if shortest > (M - min_tok) * big:  # nor can any shorter remaining sequence
                    leftovers.extend(ids[pos + 1 :])
                    break
                continue
            k0 = int(need_tab[i])
            tok_row = tok_tab[i]
            work_row = work_tab[i]
            gs = g_sidx[:ng]
            ok = (gs >= k0) & (g_tok[:ng] + tok_row[gs] <= M)
            newv = g_load[:ng] + work_row[gs]
            choice = None  # ("join", group) or ("new", size index)
            # options whose score is the current maximum (nothing rises): first in option order wins
            f0 = ok & (newv <= cur_max)
            kj = ns
            gj = -1
            if f0.any():
                key = np.where(f0, gs * BIG + np.arange(ng), np.inf)
                gj = int(np.argmin(key))
                kj = int(gs[gj])
            kn = -1
            for kk in range(k0, kj):  # a new group of a smaller size comes first in option order
                if work_row[kk] <= cur_max and first_free(kk) >= 0:
                    kn = kk
                    break
            if kn >= 0:
                choice = ("new", kn)
            elif gj >= 0:
                choice = ("join", gj)
            else:
                # every option raises the maximum: take the smallest resulting maximum under the cap
                okc = ok & (newv <= cap)
                best_v, best_key = np.inf, np.inf
                if okc.any():
                    vv = np.where(okc, newv, np.inf)
                    jv = float(vv.min())
                    cand = np.where(vv == jv, gs * BIG + np.arange(ng), np.inf)
                    g = int(np.argmin(cand))
                    best_v, best_key, choice = jv, float(cand[g]), ("join", g)
                for kk in range(k0, ns):
                    v = float(work_row[kk])
                    if v > cap or first_free(kk) < 0:
                        continue
                    key = kk * BIG + 2 * R + 1  # after the existing groups of its size
                    if v < best_v or (v == best_v and key < best_key):
                        best_v, best_key, choice = v, key, ("new", kk)
            if choice is None:
                leftovers.append(i)
                continue
            if choice[0] == "join":
                g = choice[1]
                kk = int(g_sidx[g])
                g_load[g] += work_row[kk]
                g_tok[g] += tok_row[kk]
                members[g].append(i)
                if g_load[g] > cur_max:
                    cur_max = float(g_load[g])
            else:
                kk = choice[1]
                c = size_list[kk]
                start = first_free(kk)
                g_sidx[ng], g_load[ng], g_tok[ng] = kk, work_row[kk], tok_row[kk]
                g_start.append(start)
                members.append([i])
                ng += 1
                free &= ~(((1 << c) - 1) << start)
                slice_cache = [None] * ns
                if work_row[kk] > cur_max:
                    cur_max = float(work_row[kk])
                if c > big:
                    big = c
            min_tok = int(g_tok[:ng].min())

        # ---------------------------------------------------------- fill empty ranks
        sizes_g = [size_list[int(x)] for x in g_sidx[:ng]]
        starts = list(g_start)
        used = sum(sizes_g)
        left = np.asarray(leftovers, dtype=np.int64)
        full_fallback = False
        while free:
            cmin = min(sizes_g)
            if 2 * cmin <= self.cmax and used + cmin <= R:
                g = sizes_g.index(cmin)  # first-created group of the smallest size
                sizes_g[g] = 2 * cmin
                used += cmin
                stats["doublings"] += 1
                starts, free = self._relayout(sizes_g)
            else:
                full_fallback = True
                break
        if full_fallback:
            stats["full_group_fills"] += 1
            c = self.cmax
            tok_c = per_rank_tokens(L[order], c)
            sel, rest, used_tok = [], [], 0
            for i, t in zip(ids, tok_c.tolist(), strict=True):
                if used_tok + t <= M:
                    sel.append(i)
                    used_tok += t
                else:
                    rest.append(i)
            return Step([Group(0, c, sel)]), np.asarray(rest, dtype=np.int64)
        groups = [Group(int(starts[g]), int(sizes_g[g]), members[g]) for g in range(ng)]
        groups.sort(key=lambda gr: gr.start)
        return Step(groups), left

    def _relayout(self, sizes_g: list[int]) -> tuple[list[int], int]:
        """Place groups largest first from rank 0 (aligned because sizes are powers of two); return starts and free mask."""
        order = sorted(range(len(sizes_g)), key=lambda g: (-sizes_g[g], g))
        starts = [0] * len(sizes_g)
        pos = 0
        for g in order:
            starts[g] = pos
            pos += sizes_g[g]
        free = ((1 << self.R) - 1) & ~((1 << pos) - 1)
        return starts, free
