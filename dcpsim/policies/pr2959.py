"""``dynamic-pr2959``: the Dynamic-CP scheduler at the time of NVIDIA's blog (Megatron-LM pull request #2959).

Written from the description in REFERENCE §1 ("Scheduler at the time of the
blog (pull request #2959)"), in dcpsim's own code. Unlike ``dynamic-solver``
it never looks at dcpsim's :class:`~dcpsim.cost.CostModel` times: it plans
with its own FLOPs model, as the blog-era code did, and the simulator then
times its plans with the real cost model. Only the model shape, TP, PP and
the recompute mode are read from ``cost`` (plus its memory formula for the
memory check).

**Cost model** (:class:`Pr2959Flops`), FLOPs per transformer block per TP
rank for one sequence of ``s`` tokens:

* linear terms ``2·s·h1·h2`` for each GEMM of the block (QKV, output
  projection, and the gated MLP's up/gate and down projections), i.e.
  ``G(s) = 2·s·Σ n·k`` over :meth:`ModelSpec.gemm_shapes`;
* attention ``A(s) = 2·2·s²·h·0.5`` (causal), with ``h`` read as the
  attention width (heads × head_dim; equal to the hidden size for Llama-13B);
* backward ``2.7·G + 2.77·A``; ``full`` recompute adds one more forward
  ``G + A``; ``selective`` recompute (not named in the description) adds the
  attention forward ``A`` only, as that mode recomputes core attention;
* communication costs nothing; a sequence on ``c`` ranks costs ``1/c`` of its
  FLOPs on each rank (its padding to ``2c`` is not counted).

The per-stage cost is the block cost × ``n_layers/pp``.

**Buckets** (reading of "bucket count = PP·m·DP"). A bucket is one slot of
the rank grid in one microbatch step: ``DP`` is read as the number of
data-parallel slots when every sample runs at the smallest CP size, i.e.
``K = (DP×CP) // min_cp`` slots of ``min_cp`` ranks (with the default
``min_cp = 1``, every DP×CP rank is a slot, as in Megatron's pooled
"dp_cp" ranks). Each slot runs ``PP·m`` microbatches, so there are
``PP·m·K`` buckets: step ``k`` (a microbatch every rank of a stage runs),
slot ``j`` = ranks ``[j·min_cp, (j+1)·min_cp)``. A normal sample occupies
one bucket (a CP group of ``min_cp`` ranks); a long sample occupies an
aligned block of ``c/min_cp`` buckets of one step (a CP group of ``c``
ranks). Every group of a step becomes a :class:`Group`; buckets nobody uses
leave their ranks idle for that step.

**Per-bucket target** (reading of "folds in the pipeline bubble"). With
``n = PP·m`` microbatches of equal time ``t`` a 1F1B pipeline takes
``(n + PP - 1)·t``: the work plus ``PP − 1`` microbatch times of fill and
drain. The target spreads that whole iteration over the ``n`` microbatches:
``τ = μ·(n + PP − 1)/n`` with ``μ = F/(PP·m·K)`` the mean FLOPs per bucket
(``F``: the batch's FLOPs). It is the mean for ``PP = 1`` and grows as the
bubble's share grows (small ``m``). This reading keeps long samples inside
the bucket grid: ``Σ_i F_i/τ ≤ F/τ < PP·m·K`` buckets. (The other reading,
``F/(K·(n + PP − 1))``, is below the mean and would give the long samples
more buckets than exist whenever they carry most of the work.) The option
``bucket_target`` selects the reading: ``"iteration"`` (this one, default),
``"timeline"`` (the other one) or ``"mean"`` (``τ = μ``, no bubble), so
that what the ambiguity is worth can be measured.

**Solver**, for each ``m`` in ``m_values`` (default 1..6):

1. *Long samples*: FLOPs ``> long_factor × μ`` (1.3), or too long to fit one
   bucket's ``min_cp`` ranks within ``M`` tokens per rank (padding to ``2c``
   counted). Their CP size is the power of two nearest (in log scale) to
   ``F_i/τ`` buckets, at least one bucket, at least the smallest size that
   holds the sequence within ``M`` tokens per rank, at most the largest
   power of two ``≤ DP×CP``. Longest first, each takes a free aligned block
   of that size: the block whose slots have the least FLOPs so far (summed
   over the block's slots, so long work spreads over DP ranks), then the step
   with the least FLOPs, then the lowest step and rank. If no step has a free
   aligned block, it joins the long group (of a size that holds it) whose
   per-rank FLOPs stay lowest with tokens under ``M``; failing that, a step
   is added.
2. *Room next to long samples*: each long group, in placement order, takes
   the largest remaining normal samples that fit its room ``τ − load`` (per
   rank) and its token room (``M`` per rank, each sample padded to ``2c``).
3. *Bi-objective filling*: the remaining normal samples, largest FLOPs first,
   each go to the bucket (empty slot, or a group formed so far) whose
   per-rank FLOPs after adding it are lowest (ties: smaller group, lower step,
   lower rank) among those whose tokens stay ``≤ M`` per rank. *Leftovers*
   (no bucket has token room) go, largest first, to the bucket with the
   fewest tokens of steps added for them (keeping token counts even).
4. *Scoring*: a 1F1B simulation (:func:`one_f_one_b_makespan`) of every slot
   with the FLOPs model's forward and backward (+recompute) per step;
   the candidate's score is the largest makespan over slots ("makespan over
   DP ranks"), in FLOPs per rank (a time at a nominal FLOP rate). A memory
   check rejects candidates whose peak (:meth:`CostModel.peak_memory_bytes`
   at the largest tokens per rank of any microbatch, PP microbatches in
   flight) is ``≥ memory_limit_gib`` (70 GiB). The lowest score wins (ties:
   smaller ``m``). If every candidate is rejected the one with the lowest
   peak is taken and ``meta["memory_ok"]`` is False (``strict_memory=True``
   raises :class:`InfeasibleError` instead): whether a configuration fits
   is the simulator's call; the check ranks candidates.

Steps run in order of creation (steps left empty are dropped; steps added
in 1. or 3. come last). Planning is meant to be hidden (REFERENCE §1: the plan
of batch k+1 is made while batch k trains); ``planning_time_s`` records what
it took here.

Speed: one numpy pass over the free blocks per long sample, a heap per group
size for the filling, and a 1F1B recursion vectorised over slots; 2048
sequences on 512 ranks (PP 8) plan in well under 2 s.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from dcpsim.cost.padding import max_length_for_tokens, per_rank_tokens_int
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.pipeline import makespan as pipeline_makespan
from dcpsim.policies.base import Policy, dynamic_fit
from dcpsim.policies.plan import Group, Layout, Plan, Step

GEMM_BWD_FACTOR = 2.7  # backward / forward FLOPs of the linear terms (REFERENCE §1, PR #2959)
ATTN_BWD_FACTOR = 2.77  # backward / forward FLOPs of attention (same source)
GIB = 2**30
BUCKET_TARGETS = ("iteration", "timeline", "mean")  # readings of the bubble-folded bucket target


# ------------------------------------------------------------------ FLOPs model
@dataclass(frozen=True)
class Pr2959Flops:
    """The blog-era scheduler's FLOPs cost model (see the module docstring).

    ``gemm_flops_per_token``: forward linear FLOPs per token per block per TP
    rank (``2·Σ n·k``); ``attn_flops_per_token2``: forward causal attention
    FLOPs per block per TP rank per squared token (``2·2·0.5·q/TP``);
    ``layers``: blocks per pipeline stage; ``recompute``: ``none``,
    ``selective`` or ``full``.
    """

    gemm_flops_per_token: float
    attn_flops_per_token2: float
    layers: int
    recompute: str

    @classmethod
    def from_cost(cls, cost) -> Pr2959Flops:
        """The FLOPs model of ``cost``'s model, TP, layers per stage and recompute mode."""
        m = cost.model
        gemm = 2.0 * sum(n * k * cnt for _, n, k, cnt in m.gemm_shapes(cost.tp))
        attn = 2.0 * 2.0 * 0.5 * m.q_dim / cost.tp
        return cls(float(gemm), float(attn), int(cost.layers_per_stage), str(cost.recompute))

    def block_forward(self, lengths) -> tuple[np.ndarray, np.ndarray]:
        """(linear, attention) forward FLOPs of one block for each sequence (per TP rank)."""
        s = np.asarray(lengths, dtype=np.float64)
        return self.gemm_flops_per_token * s, self.attn_flops_per_token2 * s * s

    def block_fwd_bwd(self, lengths) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward incl. recomputation) FLOPs of one block for each sequence."""
        g, a = self.block_forward(lengths)
        bwd = GEMM_BWD_FACTOR * g + ATTN_BWD_FACTOR * a
        if self.recompute == "full":
            bwd = bwd + g + a
        elif self.recompute == "selective":
            bwd = bwd + a
        return g + a, bwd

    def block_flops(self, lengths) -> np.ndarray:
        """Total FLOPs of one block per sequence: forward + backward + recomputation."""
        f, b = self.block_fwd_bwd(lengths)
        return f + b

    def stage_fwd_bwd(self, lengths) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) FLOPs of one pipeline stage (``layers`` blocks) per sequence."""
        f, b = self.block_fwd_bwd(lengths)
        return f * self.layers, b * self.layers


# ------------------------------------------------------------------ 1F1B simulation
def one_f_one_b_makespan(fwd, bwd, pp: int) -> np.ndarray:
    """Makespan of a ``pp``-stage 1F1B pipeline for each column (DP rank) independently.

    ``fwd``, ``bwd``: arrays ``(n_microbatches, n_columns)`` of one stage's forward and
    backward durations (every stage takes the same; transfers are free). Returns
    ``(n_columns,)`` end times of the last op, from the one schedule definition
    (:func:`dcpsim.pipeline.makespan`). With equal microbatches ``(f, b)`` this is
    ``(n + pp - 1)·(f + b)``.
    """
    fwd = np.asarray(fwd, dtype=np.float64)
    bwd = np.asarray(bwd, dtype=np.float64)
    if fwd.ndim != 2 or fwd.shape != bwd.shape:
        raise ConfigError("fwd/bwd", f"shapes {fwd.shape} and {bwd.shape}", "two equal (microbatches, columns) arrays")
    return pipeline_makespan(fwd, bwd, int(pp))


# ------------------------------------------------------------------ policy
class Pr2959Policy(Policy):
    """``dynamic-pr2959`` (see the module docstring).

    Options: ``m_values`` (microbatches per slot per pipeline stage to try;
    default ``[1, 2, 3, 4, 5, 6]``), ``long_factor`` (a sample is long above
    this × the mean FLOPs per bucket; 1.3), ``memory_limit_gib`` (candidates
    whose peak is at or above it are rejected; 70), ``strict_memory`` (raise
    :class:`InfeasibleError` when every candidate is rejected; default False),
    ``bucket_target`` (reading of the bubble-folded target: ``"iteration"``,
    default; ``"timeline"``; ``"mean"``; see the module docstring).
    """

    name = "dynamic-pr2959"
    dynamic = True

    def __init__(self, m_values: list[int] | None = None, long_factor: float = 1.3,
                 memory_limit_gib: float = 70.0, strict_memory: bool = False,
                 bucket_target: str = "iteration") -> None:
        vals = [1, 2, 3, 4, 5, 6] if m_values is None else m_values
        if (not isinstance(vals, (list, tuple)) or not vals
                or any(not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1 for v in vals)):
            raise ConfigError("policy.options.m_values", m_values, "a non-empty list of positive integers")
        self.m_values = sorted({int(v) for v in vals})
        if isinstance(long_factor, bool) or not isinstance(long_factor, (int, float)) or long_factor <= 0:
            raise ConfigError("policy.options.long_factor", long_factor, "a number > 0")
        self.long_factor = float(long_factor)
        if isinstance(memory_limit_gib, bool) or not isinstance(memory_limit_gib, (int, float)) or memory_limit_gib <= 0:
            raise ConfigError("policy.options.memory_limit_gib", memory_limit_gib, "a number of GiB > 0")
        self.memory_limit_gib = float(memory_limit_gib)
        if not isinstance(strict_memory, bool):
            raise ConfigError("policy.options.strict_memory", strict_memory, "true or false")
        self.strict_memory = strict_memory
        if bucket_target not in BUCKET_TARGETS:
            raise ConfigError("policy.options.bucket_target", bucket_target, f"one of {list(BUCKET_TARGETS)}")
        self.bucket_target = bucket_target

    def _plan(self, lengths, layout, cost, rng) -> Plan:
        sizes, need = dynamic_fit(lengths, layout)
        if lengths.size == 0:
            return Plan(self.name, layout, lengths, [], True, meta={"microbatches": 0})
        fm = Pr2959Flops.from_cost(cost)
        fwd, bwd = fm.stage_fwd_bwd(lengths)
        ctx = _Ctx(lengths, layout, fwd, bwd, sizes[need], self.long_factor, self.bucket_target)
        limit = self.memory_limit_gib * GIB
        cands = []
        for m in self.m_values:
            c = ctx.candidate(m)
            c.peak_bytes = float(cost.peak_memory_bytes(c.max_tokens))
            c.memory_ok = c.peak_bytes < limit
            cands.append(c)
        ok = [c for c in cands if c.memory_ok]
        if ok:
            best = min(ok, key=lambda c: (c.makespan, c.m))
        else:
            lowest = min(cands, key=lambda c: (c.peak_bytes, c.m))
            if self.strict_memory:
                raise InfeasibleError(
                    "memory",
                    f"every candidate microbatch count m in {self.m_values} peaks at >= {self.memory_limit_gib:g} GiB per GPU "
                    f"(lowest: {lowest.peak_bytes / GIB:.1f} GiB at m={lowest.m}, {lowest.max_tokens} tokens per rank)",
                )
            best = lowest
        hist: dict[int, int] = {}
        for st in best.steps:
            for g in st.groups:
                hist[g.size] = hist.get(g.size, 0) + 1
        total = fwd + bwd
        bound = max(float(total.sum()) / (ctx.u * ctx.K), layout.pp * float(total.max()) / ctx.cmax)
        meta = {
            "m": best.m,
            "microbatches": len(best.steps),
            "target_microbatches": layout.pp * best.m,
            "extra_steps": best.extra_steps,
            "long_sequences": best.n_long,
            "long_joins": best.long_joins,
            "leftovers": best.leftovers,
            "mean_bucket_flop": best.mean_bucket,
            "bucket_target_flop": best.target,
            "flops_makespan": best.makespan,
            "flops_lower_bound": bound,
            "peak_memory_gib": best.peak_bytes / GIB,
            "memory_ok": best.memory_ok,
            "candidates": [
                {"m": c.m, "steps": len(c.steps), "extra_steps": c.extra_steps, "long_sequences": c.n_long,
                 "long_joins": c.long_joins, "leftovers": c.leftovers,
                 "flops_makespan": c.makespan, "peak_memory_gib": c.peak_bytes / GIB, "memory_ok": c.memory_ok}
                for c in cands
            ],
            "groups_per_size": {str(c): v for c, v in sorted(hist.items())},
        }
        return Plan(self.name, layout, lengths, best.steps, True, meta=meta)


@dataclass
class _Candidate:
    m: int
    steps: list[Step]
    makespan: float  # FLOPs per rank (largest 1F1B makespan over slots)
    max_tokens: int  # largest tokens per rank of any group
    extra_steps: int
    n_long: int
    mean_bucket: float
    target: float
    long_joins: int  # long samples that found no free aligned block and joined a long group
    leftovers: int  # normal samples that found no bucket with token room
    peak_bytes: float = 0.0
    memory_ok: bool = True


class _Ctx:
    """Per-batch tables shared by the candidates."""

    def __init__(self, lengths: np.ndarray, layout: Layout, fwd: np.ndarray, bwd: np.ndarray,
                 need_ranks: np.ndarray, long_factor: float, bucket_target: str = "iteration") -> None:
        self.L = lengths
        self.layout = layout
        self.fwd, self.bwd = fwd, bwd
        self.f = fwd + bwd
        self.M = layout.max_tokens_per_rank
        self.u = layout.min_cp
        self.K = layout.ranks_per_stage // self.u
        self.cmax = layout.max_dynamic_cp
        self.need_slots = (need_ranks // self.u).astype(np.int64)
        self.long_factor = long_factor
        self.bucket_target = bucket_target
        n = lengths.size
        order = np.lexsort((np.arange(n), -self.f))  # largest FLOPs first, ties by id
        self.by_flops_desc = order
        asc = np.lexsort((np.arange(n), lengths))  # shortest first (FLOPs grow with length)
        self.by_len_asc = asc

    # ---------------------------------------------------------------- one m
    def candidate(self, m: int) -> _Candidate:  # noqa: C901 - temporary, split by repro
        lay, u, K, M = self.layout, self.u, self.K, self.M
        pp = lay.pp
        L, f = self.L, self.f
        n_steps = pp * m
        F = float(f.sum())
        mu = F / (n_steps * K)
        bubble = (n_steps + pp - 1) / n_steps  # 1F1B iteration / work, for equal microbatches
        # bucket FLOPs target with the bubble folded in (see the module docstring for the readings)
        tau = mu * {"iteration": bubble, "timeline": 1.0 / bubble, "mean": 1.0}[self.bucket_target]
        tau_r = tau / u  # per rank
        cmax_slots = self.cmax // u
        with np.errstate(divide="ignore"):
            want = np.exp2(np.round(np.log2(f / tau)))
        c_slots = np.clip(want, 1, cmax_slots).astype(np.int64)
        c_slots = np.maximum(c_slots, self.need_slots)
        is_long = (f > self.long_factor * mu) | (self.need_slots > 1)

        # groups: step, first slot, slots, per-rank FLOPs, per-rank tokens, members
        g_step: list[int] = []
        g_slot: list[int] = []
        g_cs: list[int] = []
        g_load: list[float] = []
        g_tok: list[int] = []
        members: list[list[int]] = []
        cap = max(n_steps, 4)
        free = np.ones((cap, K), dtype=bool)
        # free aligned blocks of every size (in slots), kept up to date as groups open
        bsizes = [1 << e for e in range(cmax_slots.bit_length())]
        bfree = {cs: np.ones((cap, K // cs), dtype=bool) for cs in bsizes}
        col_tot = np.zeros(K)
        step_load = np.zeros(cap)
        n_rows = n_steps
        base_steps = n_steps

        def add_step() -> None:
            nonlocal free, step_load, n_rows
            if n_rows == free.shape[0]:
                free = np.vstack([free, np.ones_like(free)])
                step_load = np.concatenate([step_load, np.zeros(step_load.size)])
                for cs in bsizes:
                    bfree[cs] = np.vstack([bfree[cs], np.ones_like(bfree[cs])])
            n_rows += 1

        def new_group(i: int, k: int, slot: int, cs: int) -> int:
            c = cs * u
            Li = int(L[i])
            g_step.append(k)
            g_slot.append(slot)
            g_cs.append(cs)
            g_load.append(float(f[i]) / c)
            g_tok.append(per_rank_tokens_int(Li, c))
            members.append([int(i)])
            free[k, slot:slot + cs] = False
            for bs in bsizes:
                bfree[bs][k, slot // bs:(slot + cs - 1) // bs + 1] = False
            col_tot[slot:slot + cs] += f[i] / c
            step_load[k] += f[i]
            return len(g_step) - 1

        # 1. long samples on aligned blocks, largest first
        long_ids = [int(i) for i in self.by_flops_desc if is_long[i]]
        long_groups: list[int] = []
        joins = 0
        for i in long_ids:
            cs = int(c_slots[i])
            placed = False
            while not placed:
                nb = K // cs
                fr = bfree[cs][:n_rows]
                anyb = fr.any(axis=0)
                if anyb.any():
                    bt = col_tot[: nb * cs].reshape(nb, cs).sum(axis=1)
                    bmin = bt[anyb].min()
                    sel = fr & (anyb & (bt <= bmin))[None, :]
                    score = np.where(sel, step_load[:n_rows, None], np.inf)
                    k, b = divmod(int(np.argmin(score)), nb)
                    long_groups.append(new_group(i, k, b * cs, cs))
                    placed = True
                    continue
                # no free aligned block anywhere: join the long group that stays lightest, else add a step
                best_g, best_v = -1, np.inf
                for g in long_groups:
                    c = g_cs[g] * u
                    if g_cs[g] < self.need_slots[i]:
                        continue
                    t = per_rank_tokens_int(int(L[i]), c)
                    if g_tok[g] + t > M:
                        continue
                    v = g_load[g] + float(f[i]) / c
                    if v < best_v:
                        best_g, best_v = g, v
                if best_g >= 0:
                    joins += 1
                    g = best_g
                    c = g_cs[g] * u
                    g_load[g] = best_v
                    g_tok[g] += per_rank_tokens_int(int(L[i]), c)
                    members[g].append(i)
                    col_tot[g_slot[g]:g_slot[g] + g_cs[g]] += f[i] / c
                    step_load[g_step[g]] += f[i]
                    placed = True
                else:
                    add_step()

        # 2. fill the room next to each long sample with the largest normal samples that fit
        norm = [int(i) for i in self.by_len_asc if not is_long[i]]
        nl_L = [int(L[i]) for i in norm]
        nl_f = [float(f[i]) for i in norm]
        for g in long_groups:
            c = g_cs[g] * u
            while nl_L:
                room = tau_r - g_load[g]
                if room <= 0:
                    break
                tr = M - g_tok[g]
                l_tok = max_length_for_tokens(tr, c)
                idx = min(bisect_right(nl_f, room * c), bisect_right(nl_L, l_tok)) - 1
                if idx < 0:
                    break
                i = norm.pop(idx)
                nl_L.pop(idx)
                fi = nl_f.pop(idx)
                g_load[g] += fi / c
                g_tok[g] += per_rank_tokens_int(int(L[i]), c)
                members[g].append(i)
                step_load[g_step[g]] += fi

        # 3. bi-objective filling: lowest resulting per-rank FLOPs among buckets with token room
        rest = sorted(norm, key=lambda i: (-f[i], i))
        heaps: dict[int, list[tuple[float, int, int, int]]] = {}  # slots -> [(load, step, slot, group or -1)]
        for g in range(len(g_step)):
            heaps.setdefault(g_cs[g], []).append((g_load[g], g_step[g], g_slot[g], g))
        ks, js = np.nonzero(free[:n_rows])
        heaps.setdefault(1, []).extend((0.0, int(k), int(j), -1) for k, j in zip(ks.tolist(), js.tolist(), strict=True))
        for h in heaps.values():
            heapq.heapify(h)
        hsizes = sorted(heaps)
        leftovers: list[int] = []
        for i in rest:
            fi, Li = float(f[i]), int(L[i])
            best = None  # (new load, slots, step, slot, heap size)
            stash: dict[int, list] = {}
            for cs in hsizes:
                h = heaps[cs]
                c = cs * u
                t = per_rank_tokens_int(int(Li), c)
                st = stash.setdefault(cs, [])
                while h:
                    load, k, j, g = h[0]
                    if (g_tok[g] if g >= 0 else 0) + t <= M:
                        key = (load + fi / c, cs, k, j)
                        if best is None or key < best:
                            best = key
                        break
                    st.append(heapq.heappop(h))
            if best is not None:
                cs = best[1]
                load, k, j, g = heapq.heappop(heaps[cs])
                c = cs * u
                if g < 0:
                    g = new_group(i, k, j, cs)
                else:
                    g_load[g] += fi / c
                    g_tok[g] += per_rank_tokens_int(int(Li), c)
                    members[g].append(i)
                heapq.heappush(heaps[cs], (g_load[g], k, j, g))
            else:
                leftovers.append(i)
            for cs, st in stash.items():
                for e in st:
                    heapq.heappush(heaps[cs], e)

        # leftovers: steps of their own, each to the bucket with the fewest tokens (an empty one first)
        if leftovers:
            left_base = n_rows
            left_groups: list[int] = []
            for i in sorted(leftovers, key=lambda i: (-int(L[i]), i)):
                t = per_rank_tokens_int(int(L[i]), u)
                spot = None
                for k in range(left_base, n_rows):
                    js = np.flatnonzero(free[k, :K])
                    if js.size:
                        spot = (k, int(js[0]))
                        break
                if spot is None:
                    fit = [g for g in left_groups if g_tok[g] + t <= M]
                    if fit:
                        g = min(fit, key=lambda g: (g_tok[g], g))
                        g_load[g] += float(f[i]) / u
                        g_tok[g] += t
                        members[g].append(i)
                        continue
                    add_step()
                    spot = (n_rows - 1, 0)
                left_groups.append(new_group(i, spot[0], spot[1], 1))

        # steps, dropping empty ones; per-slot FLOPs for the 1F1B score
        keep = sorted({g_step[g] for g in range(len(g_step)) if members[g]})
        row = {k: r for r, k in enumerate(keep)}
        S = len(keep)
        fw = np.zeros((S, K + 1))
        bw = np.zeros((S, K + 1))
        by_step: list[list[Group]] = [[] for _ in range(S)]
        max_tok = 0
        for g in range(len(g_step)):
            if not members[g]:
                continue
            r = row[g_step[g]]
            c = g_cs[g] * u
            ids = members[g]
            by_step[r].append(Group(g_slot[g] * u, c, ids))
            a, b = g_slot[g], g_slot[g] + g_cs[g]
            vf = float(self.fwd[ids].sum()) / c
            vb = float(self.bwd[ids].sum()) / c
            fw[r, a] += vf
            fw[r, b] -= vf
            bw[r, a] += vb
            bw[r, b] -= vb
            max_tok = max(max_tok, g_tok[g])
        fw = np.cumsum(fw, axis=1)[:, :K]
        bw = np.cumsum(bw, axis=1)[:, :K]
        makespan = float(one_f_one_b_makespan(fw, bw, pp).max()) if S else 0.0
        steps = [Step(sorted(gs, key=lambda gr: gr.start)) for gs in by_step]
        return _Candidate(m=m, steps=steps, makespan=makespan, max_tokens=int(max_tok),
                          extra_steps=max(0, n_rows - base_steps), n_long=len(long_ids), mean_bucket=mu, target=tau,
                          long_joins=joins, leftovers=len(leftovers))
