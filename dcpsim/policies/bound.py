"""A lower bound on the iteration time of a batch on a layout (the ``bound`` policy).

Notation: ``R = dp·cp`` ranks per stage, ``C`` the group sizes any valid plan
may use (``cp`` for static plans; powers of two from ``min_cp`` to
``max_dynamic_cp`` for dynamic ones), and for sequence ``i`` only the sizes
``c ∈ C`` whose padded per-rank share fits the capacity ``M``. For a sequence
of length ``L`` on ``c`` ranks let

* ``a_c(L)``: its attention time per rank (forward, backward and
  recomputation), exactly as the cost model computes it. The cost model adds
  attention document by document, so this is the sequence's contribution to
  any pack it is in.
* ``λ``: a lower bound on the time per local token of everything that grows
  with the token count: the GEMMs,
  ``layers · Σ_GEMMs 2·n·k · (1 + 2 + [full recompute]) / max_s FLOP/s(s)``
  with the maximum over token counts ``s ≤ M`` (the profile curve is
  piecewise linear in log-log space, so its maximum on ``[1, M]`` is at a
  table point or at ``M``; both are evaluated), plus the memory-bound
  element-wise work, which the cost model prices exactly linearly in tokens
  (read off one cost call; 0 for a cost model without that term).
* ``p_c(L)``: its padded per-rank token count.

Then ``lo_c(L) = a_c(L) + λ·p_c(L)`` is at most the time it adds to any
group of ``c`` ranks it joins (exposed CP and TP communication are ≥ 0,
GEMM and element-wise time ≥ λ per token), and ``c·lo_c(L)`` at most the
GPU-seconds it adds.
Define ``w_i = min_c c·lo_c(L_i)`` and ``W = Σ_i w_i``.

For the longest-sequence term we also use the sequence's exact time *alone*
on ``c`` ranks, ``T_c(L)`` (the smaller of inside and across the NVLink
domain): when the profile's curves are monotone (GEMM and collective time
never fall as the size grows, attention time never falls with length; checked
by :func:`profile_is_monotone`), adding documents to a pack never makes it
faster, because in the cost model a pack's time is non-decreasing in its
local token count (GEMM, TP and CP transfers) and in its attention time
(attention plus exposed ring communication is ``max(A, A/c + (c-1)·tx)``
per layer). Then every group holding the sequence takes ``≥ T_c(L)``. With
``hi_c = max(lo_c, T_c)`` if the profile is monotone (else ``hi_c = lo_c``),
``t1 = max_i min_c hi_c(L_i)``.

**Theorem.** For every plan ``P`` of the batch on the layout (dropped
sequences aside), ``makespan(P) ≥ B`` for the exact schedule makespan of
:func:`~dcpsim.policies.costs.evaluate_plan` (1F1B or interleaved 1F1B, see
:mod:`dcpsim.pipeline`) and for the linear surrogate
:func:`~dcpsim.policies.costs.pipeline_makespan_s`, with::

    B = max(W/R, pp·t1)

*Proof.* Let ``T_g`` be the time of group ``g`` (size ``c_g``) on one stage.
Summed over all groups of all steps, ``Σ_g c_g·T_g ≥ W`` because each
sequence adds at least ``w_i`` GPU-seconds to the group holding it. Every
stage rank runs its groups' ops one at a time, so the makespan is at least
any rank's busy time, hence at least the mean over the ``R`` ranks of a
stage, ``Σ_g c_g·T_g / R ≥ W/R``. The group holding the sequence that attains
``t1`` has ``T_g ≥ hi_{c_g} ≥ t1``; its forwards run stage after stage and
its backwards back (every virtual stage in turn with interleaving), a chain
of ops that takes ``pp·T_g ≥ pp·t1`` in all. For the surrogate,
``Σ_k S_k + (pp-1)·max_k S_k`` is at least both as well. ∎

(Earlier versions added a pipeline fill/drain term, ``(pp−1)·t1`` for
dynamic plans; that holds for the surrogate's barrier-per-step model but
not for the exact 1F1B schedule, where small microbatches can run inside a
large one's fill, so it was dropped. The three scopes now differ only in the
group sizes ``W`` and ``t1`` range over.)

Cost: the terms depend on a sequence's length only, so they are computed
once per distinct length (``W`` weights them by their counts); ``W`` needs
only the attention part of each length alone on each size where it fits
(inside the NVLink domain; attention does not depend on the link), and
``t1`` only the longest length when the profile is monotone (``min_c hi_c``
never falls as the length grows: ``lo_c`` and ``T_c`` are non-decreasing in
it and longer sequences fit on fewer sizes); otherwise ``hi = lo`` and the
maximum is taken over all lengths. Vectorised cost calls in chunks of at
most 262,144 packs bound the memory.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.compute import GEMM_BWD_FLOPS_FACTOR
from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError
from dcpsim.policies.costs import split_parts
from dcpsim.policies.fit import check_lengths, dynamic_sizes
from dcpsim.policies.plan import Layout

SCOPES = ("any", "dynamic", "static")


def min_gemm_s_per_token(cost, max_tokens: int) -> float:
    """Smallest GEMM seconds per local token (one stage, fwd+bwd+recompute) over token counts ≤ ``max_tokens``."""
    prof = cost.profile
    knots = sorted({float(r["tokens"]) for r in prof.gemm_rows if float(r["tokens"]) <= max_tokens})
    grid = np.asarray(knots + [1.0, float(max_tokens)])
    per_fwd = 0.0
    precision = getattr(cost, "precision", "bf16")
    for _, n, k, cnt in cost.model.gemm_shapes(cost.tp):
        if prof.timing.has_gemm_model:  # rate not monotone in tokens (wave quantization): use its upper bound
            best = prof.gemm_max_flops_per_s(n, k, precision=precision)
        else:
            best = float(np.max(prof.gemm_flops_per_s(grid, n, k)))
        per_fwd += cnt * 2.0 * n * k / best
    factor = 1.0 + GEMM_BWD_FLOPS_FACTOR + (1.0 if cost.recompute == "full" else 0.0)
    return per_fwd * factor * cost.layers_per_stage


def min_linear_s_per_token(cost, max_tokens: int) -> float:
    """λ: GEMM (:func:`min_gemm_s_per_token`) plus element-wise seconds per local token (see the module docstring)."""
    lam = min_gemm_s_per_token(cost, max_tokens)
    s = float(max_tokens)
    bc = cost.batch_cost(np.array([max_tokens]), np.zeros(1, dtype=np.int64), np.array([1]))
    ew_f = float(getattr(bc, "elementwise_fwd_s", np.zeros(1))[0])
    ew_b = float(getattr(bc, "elementwise_bwd_s", np.zeros(1))[0])
    rec = ew_f if cost.recompute == "full" else 0.0  # full recompute repeats the forward element-wise ops
    return lam + (ew_f + ew_b + rec) / s


_MONOTONE: dict[int, bool] = {}


def profile_is_monotone(profile) -> bool:
    """Whether the profile's tables make time non-decreasing in size.

    GEMM time ∝ tokens / FLOP/s, attention time ∝ seqlen² / FLOP/s and
    collective time ∝ bytes / bus bandwidth must not fall between consecutive
    table rows. The curves are linear in log-log space between rows and hold
    time or efficiency outside them, so checking the rows suffices.
    """
    key = id(profile)
    if key in _MONOTONE:
        return _MONOTONE[key]

    def ok(rows, group_cols, x_col, y_col, power):
        groups: dict[tuple, list[tuple[float, float]]] = {}
        for r in rows:
            groups.setdefault(tuple(r[c] for c in group_cols), []).append((float(r[x_col]), float(r[y_col])))
        for pts in groups.values():
            pts.sort()
            t = [x**power / y for x, y in pts]
            if any(b < a * (1 - 1e-12) for a, b in zip(t, t[1:], strict=False)):
                return False
        return True

    res = (
        ok(profile.gemm_rows, ("n", "k"), "tokens", "tflops", 1)
        and ok(profile.attention_rows, ("direction", "causal", "layout", "head_dim"), "seqlen", "tflops", 2)
        and ok(profile.collective_rows, ("op", "tier"), "bytes", "busbw_gb_per_s", 1)
    )
    _MONOTONE[key] = res
    return res


def bound_terms(lengths, layout: Layout, cost, *, standalone: bool = True) -> dict:
    """The terms of the bound (seconds): ``work_s`` (W/R) and ``longest_s`` (t1) for every scope.

    Returns ``{"any": (W/R, t1), "dynamic": (...), "static": (...)}`` plus
    ``linear_s_per_token`` (λ) and ``monotone_profile``. ``standalone=False``
    leaves out the exact-time-alone term (``hi = lo``): the result then also
    bounds the additive :class:`~dcpsim.policies.costs.SeqCosts` model.
    """
    L = check_lengths(lengths)
    M = layout.max_tokens_per_rank
    lam = min_linear_s_per_token(cost, M)
    dyn = dynamic_sizes(layout)
    sizes = np.unique(np.concatenate([dyn, [layout.cp]]))
    out: dict = {"linear_s_per_token": lam}
    if L.size == 0:
        for s in SCOPES:
            out[s] = (0.0, 0.0)
        return out
    U, count = np.unique(L, return_counts=True)  # every term depends on the length only
    tok = per_rank_tokens(U[None, :], sizes[:, None])
    fits = tok <= M
    lo = np.full(tok.shape, np.inf)
    lo[fits] = _attention_s(cost, U, sizes, fits) + lam * tok[fits]  # per-rank seconds on each size
    monotone = profile_is_monotone(cost.profile)
    out["monotone_profile"] = monotone
    gpu = lo * sizes[:, None]
    if monotone and standalone:
        # min over sizes of hi_c(L) never falls as L grows (module docstring), so t1 is the longest's
        inside, across = _span_options(layout, sizes, dyn)
        bc = cost.batch_cost(np.tile(U[-1:], 2 * sizes.size), np.arange(2 * sizes.size), np.tile(sizes, 2),
                             np.repeat([False, True], sizes.size))
        t_in = np.where(inside, bc.total_s[: sizes.size], np.inf)
        t_out = np.where(across, bc.total_s[sizes.size:], np.inf)
        per = np.where(fits[:, -1:], np.maximum(lo[:, -1:], np.minimum(t_in, t_out)[:, None]), np.inf)
    else:
        per = lo
    R = layout.ranks_per_stage
    for scope, allowed in (
        ("any", np.ones(sizes.size, dtype=bool)),
        ("dynamic", np.isin(sizes, dyn)),
        ("static", sizes == layout.cp),
    ):
        w = gpu[allowed].min(axis=0, initial=np.inf)
        t = per[allowed].min(axis=0, initial=np.inf)
        if not np.all(np.isfinite(w)):  # some sequence cannot run in this scope: no finite plan exists
            out[scope] = (float("inf"), float("inf"))
        else:
            out[scope] = (float((w * count).sum() / R), float(t.max()))
    return out


def _attention_s(cost, lengths: np.ndarray, sizes: np.ndarray, fits: np.ndarray, chunk: int = 262_144) -> np.ndarray:
    """Attention seconds per rank (forward, backward, recomputation) of each length alone on each size where
    ``fits`` (``fits[k, i]``: size ``sizes[k]``, length ``lengths[i]``), in ``fits``' row-major order; one
    vectorised cost call per ``chunk`` packs (bounded memory)."""
    k_idx, i_idx = np.nonzero(fits)
    out = np.empty(k_idx.size)
    for a in range(0, k_idx.size, chunk):
        z = min(a + chunk, k_idx.size)
        bc = cost.batch_cost(lengths[i_idx[a:z]], np.arange(z - a), sizes[k_idx[a:z]], np.zeros(z - a, dtype=bool))
        out[a:z] = split_parts(bc, cost.recompute)[0]
    return out


def _span_options(layout: Layout, sizes: np.ndarray, dyn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each size: whether some slice a plan may use stays inside / leaves the NVLink domain."""
    R = layout.ranks_per_stage
    inside = np.zeros(sizes.size, dtype=bool)
    across = np.zeros(sizes.size, dtype=bool)
    for j, c in enumerate(sizes.tolist()):
        starts = []
        if c in dyn:
            starts.append(np.arange(0, R - c + 1, c))
        if c == layout.cp:
            starts.append(np.arange(layout.dp) * c)
        sp = layout.spans_network(np.concatenate(starts), c)
        inside[j], across[j] = (~sp).any(), sp.any()
    return inside, across


def lower_bound_s(lengths, layout: Layout, cost, *, scope: str = "any", standalone: bool = True) -> float:
    """Lower bound (s) on the modelled iteration time of any plan of ``lengths`` on ``layout``.

    ``scope``: ``"any"`` (valid for every policy; the value plans record),
    ``"dynamic"`` (dynamic plans only; tighter under PP) or ``"static"``.
    See the module docstring for the proof. ``inf`` if a sequence fits no
    group of the scope. ``standalone=False``: without the exact-time-alone
    term, so that it also bounds the additive SeqCosts model (used by ``milp``).
    """
    if scope not in SCOPES:
        raise ConfigError("scope", scope, f"one of {SCOPES}")
    terms = bound_terms(lengths, layout, cost, standalone=standalone)
    return combine_bound(terms, layout, scope)


def combine_bound(terms: dict, layout: Layout, scope: str) -> float:
    """``max(W/R, pp·t1)`` of the scope's terms (see the module docstring)."""
    w, t1 = terms[scope]
    return max(w, layout.pp * t1)
