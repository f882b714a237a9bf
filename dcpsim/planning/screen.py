"""The coarse analytic screen: a closed-form iteration time per candidate, to rank thousands cheaply.

It uses the simulator's own pieces (the cost model's microbatch cost and the
gradient-sync cost the simulator would use) and replaces the event
simulation by a formula:

* fixed windows: every microbatch costs the same ``t`` per stage (forward,
  backward, recompute, exposed TP/CP communication); with ``m`` microbatches
  per replica and the output layer ``h`` per microbatch on the last stage,
  ``T = m·(t + h) + (PP−1)/VP·t + 2·(PP·VP−1)·x + sync`` with ``x`` one activation transfer between
  stages (it matches the event simulation of equal microbatches to within rounding; tested);
* variable lengths: per-sequence time on its CP group (attention exact, the
  rest linear in tokens at the layout's tokens per rank), summed over the
  batch and spread over the DP×CP ranks of a stage (``W``), with
  ``m`` = tokens / (M·CP·DP) microbatches: ``T = W + (PP−1)/VP·W/m + sync``;
* ``sync`` = the slowest stage's parameter all-gather + optimizer step, plus
  its gradient reduce-scatter (minus the last chunk's backward, ``b/VP``, when
  overlapped).

The screen only orders candidates; the survivors are simulated
(:mod:`dcpsim.planning.search`), and only simulated numbers are reported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dcpsim.planning.inputs import DataSpec
from dcpsim.planning.space import _cached_cost, _cost_key
from dcpsim.run.config import RunConfig

_SYNC_CACHE: dict[str, Any] = {}
_BATCH_CACHE: dict[tuple, np.ndarray] = {}
_MB_CACHE: dict[tuple, tuple[float, float, float]] = {}


def sync_exposed_s(cfg: RunConfig, cost, bwd_one_s: float) -> float:
    """Exposed gradient-sync time of the slowest stage (seconds), from the simulator's sync cost."""
    from dcpsim.run.single import build_simulator

    p = cfg.parallel.model_dump(mode="json")
    for k in ("recompute", "max_tokens_per_rank", "cp_comm", "min_cp", "mbs", "vp"):  # the sync cost ignores these
        p.pop(k, None)
    key = repr((cfg.model.name, cfg.hardware.model_dump(mode="json"), p, cfg.dp, cfg.sim.model_dump(mode="json")))
    sync = _SYNC_CACHE.get(key)
    if sync is None:
        if len(_SYNC_CACHE) > 4096:
            _SYNC_CACHE.clear()
        sync = _SYNC_CACHE[key] = build_simulator(cfg, cost).sync
    rs = np.asarray(sync.reduce_scatter_s, dtype=float)
    overlap = bool(getattr(cfg.sim, "overlap_grad_sync", True))
    rs_exp = np.maximum(0.0, rs - bwd_one_s) if overlap else rs
    return float(np.max(rs_exp + np.asarray(sync.all_gather_s) + np.asarray(sync.optimizer_s)))


def _spans(cfg: RunConfig, cost, cp) -> np.ndarray:
    dom = cost.profile.nvlink_domain_gpus if cfg.hardware.nvlink_domain_gpus == "profile" else cfg.hardware.nvlink_domain_gpus
    return np.asarray(cp) * cfg.parallel.tp > dom


def screen_fixed(cfg: RunConfig, data: DataSpec, mbs: int) -> dict[str, float]:
    """Closed-form iteration time of fixed windows (see the module docstring); seconds."""
    cost = _cached_cost(cfg)
    p = cfg.parallel
    vp = int(getattr(p, "vp", 1) or 1)
    L = int(data.seq_len)
    key = (_cost_key(cfg).replace(f"'vp': {vp}", ""), mbs, L)
    t, h, bwd = _MB_CACHE.get(key) or _MB_CACHE.setdefault(key, _microbatch(cfg, cost, L, mbs))
    m = max(1, data.gbs // (cfg.dp * mbs))
    compute = m * (t + h)
    bubble = (p.pp - 1) / vp * t + pipeline_transfers_s(cfg, cost, mbs * L / p.cp)
    sync = sync_exposed_s(cfg, cost, bwd / vp)  # the reduce-scatter hides behind the last chunk's backward only
    return {"time_s": compute + bubble + sync, "compute_s": compute, "bubble_s": bubble, "sync_s": sync,
            "microbatches": float(m)}


def pipeline_transfers_s(cfg: RunConfig, cost, local_tokens: float) -> float:
    """Activation and gradient transfers on the fill/drain path: 2·(PP·VP − 1) hops over the network; seconds."""
    p = cfg.parallel
    hops = p.pp * int(getattr(p, "vp", 1) or 1) - 1
    if hops <= 0:
        return 0.0
    nbytes = local_tokens * cost.model.hidden * 2.0 / p.tp
    return 2.0 * hops * float(cost.profile.collective_time_s("sendrecv", "network", np.array([nbytes]), 2)[0])


def _microbatch(cfg: RunConfig, cost, L: int, mbs: int) -> tuple[float, float, float]:
    """(forward+backward per stage, output layer, backward) of one microbatch of ``mbs`` windows; seconds."""
    cp = cfg.parallel.cp
    bc = cost.batch_cost(np.full(mbs, L), np.zeros(mbs, dtype=np.int64), np.array([cp]), _spans(cfg, cost, [cp]))
    if len(_MB_CACHE) > 4096:
        _MB_CACHE.clear()
    return float(bc.total_s[0]), float(bc.head_fwd_s[0] + bc.head_bwd_s[0]), float(bc.bwd_s[0])


def first_batch(data: DataSpec, gbs: int, seed: int) -> np.ndarray:
    """The first global batch ``run_simulation`` samples for ``seed`` (same stream: the first of four spawned)."""
    key = (repr(data.workload), data.min_len, data.max_len, gbs, seed)
    lens = _BATCH_CACHE.get(key)
    if lens is None:
        from dcpsim.workload import get_workload, sample_global_batch

        dist = get_workload(data.workload, min_len=data.min_len, max_len=data.max_len)
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[0])
        lens = _BATCH_CACHE[key] = sample_global_batch(dist, gbs, rng)
    return lens


def screen_variable(cfg: RunConfig, data: DataSpec, dynamic: bool, seed: int = 0) -> dict[str, float]:
    """Closed-form iteration time of a variable-length batch (see the module docstring); seconds."""
    from dcpsim.policies.costs import split_parts

    cost = _cached_cost(cfg)
    p = cfg.parallel
    vp = int(getattr(p, "vp", 1) or 1)
    M = cfg.max_tokens_per_rank
    lens = first_batch(data, cfg.workload.gbs, seed).astype(np.int64)
    if dynamic:
        need = np.ceil(lens / M)
        c = np.maximum(p.min_cp, 2 ** np.ceil(np.log2(np.maximum(need, 1)))).astype(np.int64)
        c = np.minimum(c, cfg.dp * p.cp)
    else:
        c = np.full(lens.size, p.cp, dtype=np.int64)
    n = lens.size
    bc = cost.batch_cost(lens, np.arange(n), c, _spans(cfg, cost, c))
    attn, cpc, _ = split_parts(bc, p.recompute)
    # the linear part at the layout's M tokens per rank (a full microbatch of 4K documents)
    k = max(1, int(M * p.cp // min(4096, M * p.cp)))
    ref = np.full(k, min(4096, M * p.cp))
    bref = cost.batch_cost(ref, np.zeros(k, dtype=np.int64), np.array([p.cp]), _spans(cfg, cost, [p.cp]))
    _, _, lin_ref = split_parts(bref, p.recompute)
    lin_per_tok = float(lin_ref[0]) / max(float(bref.local_tokens[0]), 1.0)
    local = bc.local_tokens
    per_seq = attn + cpc + lin_per_tok * local  # per rank of the sequence's group
    head_per_tok = float(bref.head_fwd_s[0] + bref.head_bwd_s[0]) / max(float(bref.local_tokens[0]), 1.0)
    ranks = cfg.dp * p.cp
    work = float((per_seq * c).sum()) / ranks
    head = head_per_tok * float((local * c).sum()) / ranks
    m = max(1.0, float(np.ceil((local * c).sum() / (M * ranks))))
    bubble = (p.pp - 1) / vp * (work + head) / m + pipeline_transfers_s(cfg, cost, M)
    sync = sync_exposed_s(cfg, cost, float(bref.bwd_s[0]) / vp)
    return {"time_s": work + head + bubble + sync, "compute_s": work + head, "bubble_s": bubble, "sync_s": sync,
            "microbatches": m, "head_s": head, "head_per_token_s": head_per_tok}


def refine_variable(cfg: RunConfig, parts: dict[str, float]) -> float:
    """The policy's own plan of the first batch, scored with the exact cost model (imbalance and bubble
    included, :func:`~dcpsim.policies.evaluate_plan`), plus the screen's output layer and sync; seconds."""
    from dcpsim.policies import evaluate_plan, get_policy
    from dcpsim.run.single import build_layout

    cost = _cached_cost(cfg)
    lens = first_batch_of(cfg)
    policy = get_policy(cfg.policy.name, **dict(cfg.policy.options))
    plan = policy.plan(lens, build_layout(cfg, cost), cost, rng=np.random.default_rng(0))
    pc = evaluate_plan(plan, cost)
    head = parts["head_per_token_s"] * float(pc.rank_work_s.size and lens.sum() / (cfg.dp * cfg.parallel.cp))
    return float(pc.makespan_s) + head + parts["sync_s"]


def first_batch_of(cfg: RunConfig) -> np.ndarray:
    from dcpsim.planning.inputs import DataSpec as _D

    w = cfg.workload
    d = _D(seq_len=None, workload=w.name, gbs=w.gbs, mean_len=1.0, max_len=w.max_len, min_len=w.min_len)
    return first_batch(d, w.gbs, cfg.sim.seed).astype(np.int64)


def screen(cfg: RunConfig, data: DataSpec, *, mbs: int | None, dynamic: bool) -> dict[str, float]:
    """Closed-form iteration time (seconds) and its parts for one checked candidate."""
    if data.fixed:
        return screen_fixed(cfg, data, int(mbs or 1))
    return screen_variable(cfg, data, dynamic, seed=cfg.sim.seed)
