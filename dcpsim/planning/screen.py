"""The coarse analytic screen: a closed-form iteration time per candidate, to rank thousands cheaply.

It uses the simulator's own pieces (the cost model's microbatch cost and the
gradient-sync cost the simulator would use) and replaces the event
simulation by a formula:

* fixed windows: every microbatch costs the same per op (forward, backward, recompute, exposed TP/CP
  communication); with ``m`` microbatches per replica,
  ``T = max_p R_p(m) + (PP−1)/VP·mean_p c_p + 2·(PP·VP−1)·x + sync``. ``R_p(m)`` is rank ``p``'s own
  timeline, every pipeline input taken as ready: its ops in the schedule's order under the simulator's
  host/device rule (:func:`rank_busy_s`; ``m·t_p`` with ``t_p`` the device's forward + backward of stage
  ``p`` -- its layers, the per-microbatch overhead, the embedding on the first stage and the output layer on
  the last -- without a host timeline). ``c_p`` is what one microbatch's ops add to the pipeline's fill and
  drain (:func:`bubble_stage_s`: the device's time, but the host's too where the op waits for a sync before
  it) and ``x`` one activation transfer between stages (within 1% of the event simulation of equal
  microbatches; tested);
* variable lengths: per-sequence time on its CP group (attention exact, the
  rest linear in tokens at the layout's tokens per rank), summed over the
  batch and spread over the DP×CP ranks of a stage (``W``), with
  ``m`` = tokens / (M·CP·DP) microbatches: ``T = W + (PP−1)/VP·W/m + sync``;
* ``sync`` = the simulator's own rules for the bucketed gradient reduce-scatter (overlapping the
  last chunk's backward, ``b/VP``), the optimizer step and the parameter all-gather (overlapping the
  next iteration's first forward), per stage from its place in the pipeline.

The screen only orders candidates; the survivors are simulated
(:mod:`dcpsim.planning.search`), and only simulated numbers are reported.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dcpsim.padding import pad_multiple
from dcpsim.planning.configs import cost_key, section_key
from dcpsim.planning.inputs import DataSpec
from dcpsim.planning.space import _cached_cost
from dcpsim.planning.timeline import RankOps, bubble_stage_s, busy_floor_s, rank_busy_s, rank_ops
from dcpsim.run.config import RunConfig
from dcpsim.run.streams import NAMES, stream

_SYNC_CACHE: dict[tuple, Any] = {}
# the gradient sync does not depend on these parallel fields
SYNC_INDEPENDENT = ("recompute", "max_tokens_per_rank", "cp_comm", "min_cp", "mbs")  # vp: one DDP bucket per model chunk
# nor on these sim fields (the overlap flags time the sync, they do not change its cost: the simulator's own
# memo of it, dcpsim.sim.durations._SYNC_MEMO, leaves them out too)
SYNC_SIM_INDEPENDENT = ("overlap_grad_sync", "overlap_param_gather", "param_gather_launch")
_BATCH_CACHE: dict[tuple, np.ndarray] = {}
_MB_CACHE: dict[tuple, dict[str, float]] = {}


def _sync_cost(cfg: RunConfig, cost):
    """The simulator's gradient-sync cost of ``cfg`` (cached: it ignores recompute, tokens, mbs and the overlap
    flags)."""
    from dcpsim.run.single import build_sync_cost

    key = (section_key(cfg.model), section_key(cfg.hardware), section_key(cfg.parallel, SYNC_INDEPENDENT), cfg.dp,
           section_key(cfg.sim, SYNC_SIM_INDEPENDENT), section_key(cfg.step))
    sync = _SYNC_CACHE.get(key)
    if sync is None:
        if len(_SYNC_CACHE) > 4096:
            _SYNC_CACHE.clear()
        sync = _SYNC_CACHE[key] = build_sync_cost(cfg, cost)
    return sync


def sync_tail_s(cfg: RunConfig, cost, f_chunk: float, b_chunk: float, x: float) -> float:
    """Time after the pipeline's last backward until every stage is done (seconds), with the simulator's rules
    (:func:`dcpsim.sim.stage_sync.grad_sync_end_s`, :func:`~dcpsim.sim.stage_sync.param_gather_stall_s`).

    Stage ``p`` ends its last backward ``p·(b_chunk + x)`` before stage 0 and starts its first forward
    ``p·(f_chunk + x)`` after it (equal microbatches). With ``vp = 1`` and ``overlap_param_gather`` the
    all-gather waits at each stage's first forward instead (Megatron's rule, ``sim.param_gather_launch``):
    the delay it adds along the pipeline fill (:func:`fill_gather_delay_s`) adds to the tail.
    """
    from dcpsim.sim.stage_sync import gathers_at_first_forward

    sync = _sync_cost(cfg, cost)
    pp = cfg.parallel.pp
    nb = sync.buckets if sync.buckets is not None else np.ones(pp)
    rs_b = sync.reduce_scatter_bucket_s if sync.reduce_scatter_bucket_s is not None else sync.reduce_scatter_s
    ag_b = sync.all_gather_bucket_s if sync.all_gather_bucket_s is not None else sync.all_gather_s
    ov_g = bool(getattr(cfg.sim, "overlap_grad_sync", True))
    ov_p = bool(getattr(cfg.sim, "overlap_param_gather", False))
    gated = gathers_at_first_forward(ov_p, int(getattr(cfg.parallel, "vp", 1) or 1))
    # every stage at once: the same float operations as grad_sync_end_s / param_gather_stall_s per stage
    stages = np.arange(pp)
    b1 = -stages * (b_chunk + x)
    b0 = b1 - b_chunk
    nbi = nb.astype(np.int64)
    rs = np.asarray(sync.reduce_scatter_s, dtype=float)
    rsb, agb = np.asarray(rs_b, dtype=float), np.asarray(ag_b, dtype=float)
    end = np.maximum(b1 + rsb, b0 + (b1 - b0) / nbi + nbi * rsb) if ov_g else b1 + rs
    if gated:
        stall = 0.0
    elif ov_p:
        stall = np.maximum(agb, nbi * agb - f_chunk * (nbi - 1) / nbi)
        stall = np.maximum(0.0, stall - stages * (f_chunk + x))
    else:
        stall = np.asarray(sync.all_gather_s, dtype=float)
    tail = max(0.0, float(np.max(end + np.asarray(sync.optimizer_s, dtype=float) + stall)))
    if _CHECK_SCALAR:
        assert tail == _sync_tail_loop(sync, (f_chunk, b_chunk, x), (ov_g, ov_p, gated))
    if gated:
        tail += fill_gather_delay_s(ag_b, nb, f_chunk, x, getattr(cfg.sim, "param_gather_launch", "first_forward"))
    return tail


_CHECK_SCALAR = False  # tests: compare the vectorised tail with the per-stage rules of the simulator


def _sync_tail_loop(sync, chunks: tuple[float, float, float], flags: tuple[bool, bool, bool]) -> float:
    """The tail before the fill delay, stage by stage with the simulator's functions (the reference);
    ``chunks``: (forward, backward, transfer) seconds, ``flags``: (overlap grad sync, overlap param gather,
    gathered at the first forward)."""
    from dcpsim.sim.stage_sync import grad_sync_end_s, param_gather_stall_s

    f_chunk, b_chunk, x = chunks
    ov_g, ov_p, gated = flags
    pp = sync.reduce_scatter_s.size
    nb = sync.buckets if sync.buckets is not None else np.ones(pp)
    rs_b = sync.reduce_scatter_bucket_s if sync.reduce_scatter_bucket_s is not None else sync.reduce_scatter_s
    ag_b = sync.all_gather_bucket_s if sync.all_gather_bucket_s is not None else sync.all_gather_s
    tail = 0.0
    for p in range(pp):
        b1 = -p * (b_chunk + x)
        end = grad_sync_end_s(b1 - b_chunk, b1, float(sync.reduce_scatter_s[p]), float(rs_b[p]), int(nb[p]), ov_g)
        stall = param_gather_stall_s(float(sync.all_gather_s[p]), float(ag_b[p]), int(nb[p]), f_chunk, ov_p)
        if ov_p:
            stall = max(0.0, stall - p * (f_chunk + x))
        tail = max(tail, end + float(sync.optimizer_s[p]) + (0.0 if gated else stall))
    return tail


def fill_gather_delay_s(bucket_s: np.ndarray, buckets: np.ndarray, f_chunk: float, x: float, launch: str) -> float:
    """Delay the parameter all-gather adds to the pipeline fill (seconds; vp = 1, overlap): each stage's first
    forward ends where :func:`dcpsim.sim.stage_sync.param_gather_ends` (the simulator's rule) puts it, its input
    ready at stage ``p − 1``'s end plus ``x``; minus the fill without it, ``(pp − 1)·(f_chunk + x) + f_chunk``."""
    from dcpsim.sim.stage_sync import param_gather_ends, param_gather_launch_s

    launch_s = param_gather_launch_s(launch)
    pp = len(bucket_s)
    end = -x
    for p in range(pp):
        end = float(param_gather_ends(np.array([end + x]), np.array([f_chunk]), float(bucket_s[p]), int(buckets[p]),
                                      launch_s)[0])
    return end - ((pp - 1) * (f_chunk + x) + f_chunk)


def _spans(cfg: RunConfig, cost, cp) -> np.ndarray:
    dom = cost.profile.nvlink_domain_gpus if cfg.hardware.nvlink_domain_gpus == "profile" else cfg.hardware.nvlink_domain_gpus
    return np.asarray(cp) * cfg.parallel.tp > dom


def _device_stages(cfg: RunConfig, data: DataSpec, mbs: int):
    """(cost model, microbatch parts, device stage times, microbatches) of :func:`screen_fixed`."""
    cost = _cached_cost(cfg)
    p = cfg.parallel
    L = int(data.seq_len)
    key = (cost_key(cfg, drop=MB_INDEPENDENT), L)
    table = _MB_CACHE.get(key) or _MB_CACHE.setdefault(key, _microbatch_table(cfg, cost, L))
    mb = table.get((p.cp, mbs)) or _microbatch_table(cfg, cost, L, [(p.cp, mbs)])[(p.cp, mbs)]
    return cost, mb, stage_times_s(cost, mb), max(1, data.gbs // (cfg.dp * mbs))


# Memos of the fixed-window screen (per process; the values are those the functions compute, stored).
# A layout's stage times do not depend on DP (the cost model reads it for the memory figure only), so the
# layouts of every cluster size share them; a whole screen is shared by the searches that screen an equal
# configuration (the packing and dynamic searches of one GPU type and size, the flag variants).
SCREEN_MEMO = True  # tests: False screens every candidate from scratch (the reference the memo is compared with)
_LAYOUT_KEYS: dict[int, tuple[RunConfig, tuple]] = {}
_DEVICE_MAX: dict[tuple, tuple[float, float]] = {}
_STAGES: dict[tuple, _Layout] = {}
_BUSY: dict[tuple, float] = {}  # (layout, microbatches) -> the busiest rank's timeline
_SCREENS: dict[tuple, dict[str, float]] = {}
MEMO_MAX = 65536  # entries per memo before it is emptied


def _layout_key(cfg: RunConfig, L: int, mbs: int) -> tuple:
    """What a layout's stage times read, less DP: the cost model's inputs (model, hardware, parallel and sim
    sections), the step flags, the window and the micro-batch size -- and DP·CP where the host timeline reads
    it (``step.test_mode_qk_checks``: the q/k checks' DP all-gather). Once per configuration object."""
    hit = _LAYOUT_KEYS.get(id(cfg))
    if hit is not None and hit[0] is cfg and hit[1][-2:] == (L, mbs):
        return hit[1]
    dp = cfg.dp if getattr(cfg.step, "test_mode_qk_checks", False) else 0
    key = (cost_key(cfg, drop=("dp",)), section_key(cfg.step), dp, L, mbs)
    if len(_LAYOUT_KEYS) > MEMO_MAX:
        _LAYOUT_KEYS.clear()
    _LAYOUT_KEYS[id(cfg)] = (cfg, key)
    return key


def _memo_put(memo: dict, key: tuple, value):
    if len(memo) > MEMO_MAX:
        memo.clear()
    memo[key] = value
    return value


def fixed_lower_bound_s(cfg: RunConfig, data: DataSpec, mbs: int) -> float:
    """A lower bound of :func:`screen_fixed`'s time (seconds): its compute and bubble terms with the device's times
    alone -- ``m`` x the largest device stage time and ``(PP−1)/VP`` x the mean device stage plus the transfers --,
    and no sync tail. The host timeline only adds to a rank's time (:func:`rank_busy_s`: the device runs every op
    for at least its device time, one after the other) and to a stage's part of the fill and drain
    (:func:`bubble_stage_s`: each op adds its device time or more), and the sync tail is never negative. Neither
    the host nor the sync model is evaluated: the search's cheap first pass."""
    m = max(1, data.gbs // (cfg.dp * mbs))
    if not SCREEN_MEMO:
        dmax, bubble = _device_bound(cfg, data, mbs)
        return m * dmax + bubble
    L = int(data.seq_len)
    d = cfg.__dict__
    secs = (d["model"], d["hardware"], d["parallel"], d["sim"], d["step"])
    near = (id(secs[0]), id(secs[1]), id(secs[2]), id(secs[3]), id(secs[4]), L, mbs)
    held = _BOUND_BY_SECTIONS.get(near)
    if held is not None and held[0][0] is secs[0] and held[0][1] is secs[1] and held[0][2] is secs[2] \
            and held[0][3] is secs[3] and held[0][4] is secs[4]:
        hit = held[1]
    else:
        key = _layout_key(cfg, L, mbs)
        hit = _DEVICE_MAX.get(key)
        if hit is None:
            hit = _memo_put(_DEVICE_MAX, key, _device_bound(cfg, data, mbs))
        if not getattr(cfg.step, "test_mode_qk_checks", False):  # else the layout key holds DP too
            _memo_put(_BOUND_BY_SECTIONS, near, (secs, hit))
    return m * hit[0] + hit[1]


# fixed_lower_bound_s' parts found first by the five section objects its layout key reads (held, so their ids are
# not reused): the candidates of every cluster size and policy share their cached sections (planning.configs), so
# the bound of each is found without building its layout key
_BOUND_BY_SECTIONS: dict[tuple, tuple[tuple, tuple[float, float]]] = {}


def _device_bound(cfg: RunConfig, data: DataSpec, mbs: int) -> tuple[float, float]:
    """(largest device stage, the bubble with device times alone), seconds: :func:`fixed_lower_bound_s`' parts."""
    cost, _, device, _ = _device_stages(cfg, data, mbs)
    p = cfg.parallel
    vp = int(getattr(p, "vp", 1) or 1)
    x = pipeline_transfer_s(cfg, cost, mbs * int(data.seq_len) / p.cp)
    return float(device.max()), (p.pp - 1) / vp * float(device.mean()) + 2.0 * (p.pp * vp - 1) * x


def screen_fixed(cfg: RunConfig, data: DataSpec, mbs: int) -> dict[str, float]:
    """Closed-form iteration time of fixed windows (see the module docstring); seconds. Memoised
    (:data:`SCREEN_MEMO`): the same figures as :func:`screen_fixed_each` (tested)."""
    if not SCREEN_MEMO:
        return screen_fixed_each(cfg, data, mbs)
    lk = _layout_key(cfg, int(data.seq_len), mbs)
    key = (lk, cfg.dp, data.gbs)
    hit = _SCREENS.get(key)
    if hit is None:
        st = _stage_parts(cfg, data, mbs, lk)
        hit = _memo_put(_SCREENS, key, _fixed_time(cfg, _cached_cost(cfg), max(1, data.gbs // (cfg.dp * mbs)), st, lk))
    return dict(hit)


def _stage_parts(cfg: RunConfig, data: DataSpec, mbs: int, lk: tuple | None = None) -> _Layout:
    """A layout's parts of the screen (:class:`_Layout`: the ranks' ops, the device stages, the bubble's mean
    stage, the pipeline transfer, the largest stage's forward and backward), seconds; memoised by
    :func:`_layout_key` (``lk``) unless :data:`SCREEN_MEMO` is off."""
    st = _STAGES.get(lk) if lk is not None else None
    if st is None:
        cost, mb, device, _ = _device_stages(cfg, data, mbs)
        ranks = rank_ops(cfg, cost, mb, mbs)
        chain = device if ranks is None else bubble_stage_s(ranks)
        x = pipeline_transfer_s(cfg, cost, mbs * int(data.seq_len) / cfg.parallel.cp)
        dmax = float(device.max())
        floor = dmax if ranks is None else max(dmax, busy_floor_s(ranks))
        st = _Layout(ranks, dmax, floor, float(chain.mean()), x, mb["fwd"], mb["bwd"])
        if lk is not None:
            _memo_put(_STAGES, lk, st)
    return st


def _compute_s(st: _Layout, m: int, lk: tuple | None = None) -> float:
    """The screen's compute term of ``m`` microbatches (seconds): the busiest rank's own timeline
    (:func:`rank_busy_s`), or ``m`` x the largest device stage without a host timeline; memoised by
    (``lk``, ``m``)."""
    if st.ranks is None:
        return m * st.device_max
    key = (lk, m) if lk is not None else None
    hit = _BUSY.get(key) if key is not None else None
    if hit is None:
        hit = float(rank_busy_s(st.ranks, m).max())
        if key is not None:
            _memo_put(_BUSY, key, hit)
    return hit


def _bubble_s(pp: int, vp: int, st: _Layout) -> float:
    """The screen's pipeline bubble (seconds): ``(PP−1)/VP`` x the ranks' mean fill-and-drain cost of a
    microbatch, plus the transfers."""
    return (pp - 1) / vp * st.chain_mean + 2.0 * (pp * vp - 1) * st.x


def _compute_bubble(cfg: RunConfig, m: int, st: _Layout, lk: tuple | None = None) -> tuple[float, float]:
    """The screen's compute (``m`` microbatches on the busiest rank) and pipeline bubble, seconds."""
    p = cfg.parallel
    return _compute_s(st, m, lk), _bubble_s(p.pp, int(getattr(p, "vp", 1) or 1), st)


def _fixed_time(cfg: RunConfig, cost, m: int, st: _Layout, lk: tuple | None = None) -> dict[str, float]:
    """The screen's time of ``m`` microbatches from a layout's parts (:func:`_stage_parts`); seconds."""
    vp = int(getattr(cfg.parallel, "vp", 1) or 1)
    compute, bubble = _compute_bubble(cfg, m, st, lk)
    sync = sync_tail_s(cfg, cost, st.fwd / vp, st.bwd / vp, st.x)
    return {"time_s": compute + bubble + sync, "compute_s": compute, "bubble_s": bubble, "sync_s": sync,
            "microbatches": float(m)}


def fixed_host_bound_s(cfg: RunConfig, data: DataSpec, mbs: int) -> float:
    """A tighter lower bound of :func:`screen_fixed`'s time (seconds): its bubble term exactly and a lower bound
    of its compute term, ``m`` x the busiest rank's ``max(Σh, Σd)`` per microbatch (:func:`busy_floor_s`: its
    host issues and its device runs every op), without the sync tail, which is never negative. It prices the
    layout's parts (shared by every cluster size) but neither the ranks' timelines nor the gradient sync: the
    search's second pass (:func:`dcpsim.planning.search.screen_all`)."""
    lk = _layout_key(cfg, int(data.seq_len), mbs) if SCREEN_MEMO else None
    st = _stage_parts(cfg, data, mbs, lk)
    p = cfg.parallel
    vp = int(getattr(p, "vp", 1) or 1)
    return max(1, data.gbs // (cfg.dp * mbs)) * st.busy_floor + _bubble_s(p.pp, vp, st)


def screen_fixed_each(cfg: RunConfig, data: DataSpec, mbs: int) -> dict[str, float]:
    """:func:`screen_fixed` computed from scratch for one candidate (the reference of the memoised one)."""
    cost, _, _, m = _device_stages(cfg, data, mbs)
    return _fixed_time(cfg, cost, m, _stage_parts(cfg, data, mbs))


def stage_times_s(cost, mb: dict[str, float]) -> np.ndarray:
    """Forward + backward of one microbatch on every stage: its layers' share, the per-microbatch overhead,
    the embedding on the first stage and the output layer on the last; seconds."""
    layers = np.asarray(getattr(cost, "stage_layers", [cost.layers_per_stage] * cost.pp), dtype=float)
    t = mb["layers"] * layers / max(layers.max(), 1.0) + mb["overhead"]
    t[0] += mb["embed"]
    t[-1] += mb["head"]
    return t


class _Layout(NamedTuple):
    """A layout's memoised parts of the fixed-window screen (seconds)."""

    ranks: RankOps | None  # None: no host timeline (a stage costs its device time)
    device_max: float  # the largest device stage time, one microbatch
    busy_floor: float  # a lower bound of the busiest rank's timeline per microbatch (:func:`busy_floor_s`)
    chain_mean: float  # the mean over ranks of :func:`bubble_stage_s`
    x: float  # one pipeline transfer
    fwd: float  # the largest stage's forward and backward (layers and overhead), one microbatch
    bwd: float


def pipeline_transfer_s(cfg: RunConfig, cost, local_tokens: float) -> float:
    """One activation transfer between pipeline stages over the network (0 without a pipeline); seconds."""
    p = cfg.parallel
    if p.pp * int(getattr(p, "vp", 1) or 1) <= 1:
        return 0.0
    nbytes = local_tokens * cost.model.hidden * 2.0 / p.tp
    prof = cost.profile
    key = (id(prof), nbytes)
    hit = _TRANSFERS.get(key)
    if hit is None or hit[0] is not prof:  # the profile held, so its id is not reused
        hit = _memo_put(_TRANSFERS, key, (prof, float(prof.collective_time_s("sendrecv", "network", np.array([nbytes]),
                                                                            2)[0])))
    return hit[1]


_TRANSFERS: dict[tuple, tuple] = {}


MB_CP = (1, 2, 4, 8, 16)
MB_MBS = (1, 2, 4, 8, 16)
# a microbatch's cost does not depend on these (DP only shards memory; VP splits the same layers)
MB_INDEPENDENT = ("dp", "cp", "mbs", "vp", "max_tokens_per_rank", "overlap_grad_sync", "overlap_param_gather",
                  "param_gather_launch", "grad_bucket_params", "min_cp")


def _microbatch_table(cfg: RunConfig, cost, L: int, combos=None) -> dict[tuple[int, int], dict[str, float]]:
    """Parts of one microbatch of ``mbs`` windows on ``cp`` ranks, largest stage (seconds), for every
    (cp, mbs) in ``combos`` (default all of MB_CP x MB_MBS) in ONE vectorised cost-model call:
    layers (forward + backward with recompute), per-microbatch overhead, embedding, output layer, and the
    stage's forward and backward; each of the first four per direction too (``layers_fwd``, ...)."""
    combos = list(combos or [(c, b) for c in MB_CP for b in MB_MBS if L % pad_multiple(c) == 0])
    cps = np.array([c for c, _ in combos])
    pids = np.concatenate([np.full(b, i) for i, (_, b) in enumerate(combos)])
    bc = cost.batch_cost(np.full(pids.size, L), pids, cps, _spans(cfg, cost, cps))
    if len(_MB_CACHE) > 4096:
        _MB_CACHE.clear()

    def get(name: str) -> np.ndarray:
        v = getattr(bc, name, None)
        return np.asarray(v, dtype=float) if v is not None else np.zeros(len(combos))

    layers = get("layer_fwd_s") + get("layer_bwd_s") if hasattr(bc, "layer_fwd_s") else get("total_s")
    parts = {"layers": layers, "overhead": get("overhead_fwd_s") + get("overhead_bwd_s"),
             "embed": get("embed_fwd_s") + get("embed_bwd_s"), "head": get("head_fwd_s") + get("head_bwd_s"),
             "fwd": get("fwd_s"), "bwd": get("bwd_s")}
    for way in ("fwd", "bwd"):  # each direction's parts (the ranks' ops, :func:`chunk_device_s`)
        parts[f"layers_{way}"] = get(f"layer_{way}_s") if hasattr(bc, f"layer_{way}_s") else get(f"{way}_s")
        parts.update({f"{k}_{way}": get(f"{k}_{way}_s") for k in ("overhead", "embed", "head")})
    return {cb: {k: float(v[i]) for k, v in parts.items()} for i, cb in enumerate(combos)}


def _file_stamp(workload) -> tuple[int, int] | None:
    """A lengths file's (mtime_ns, size): a file rewritten in the same process is sampled again, not the batch
    of its old content (get_workload reads the file each time; a key of its path alone went stale)."""
    import os

    if isinstance(workload, str | os.PathLike) and os.path.isfile(workload):
        st = os.stat(workload)
        return st.st_mtime_ns, st.st_size
    return None


def first_batch(data: DataSpec, gbs: int, seed: int) -> np.ndarray:
    """The first global batch ``run_simulation`` samples for ``seed`` (the same workload stream)."""
    key = (repr(data.workload), _file_stamp(data.workload), data.min_len, data.max_len, gbs, seed)
    lens = _BATCH_CACHE.get(key)
    if lens is None:
        from dcpsim.workload import get_workload, sample_global_batch

        dist = get_workload(data.workload, min_len=data.min_len, max_len=data.max_len)
        lens = _BATCH_CACHE[key] = sample_global_batch(dist, gbs, stream(seed, NAMES.index("workload")))
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
    x = pipeline_transfer_s(cfg, cost, M)
    bubble = (p.pp - 1) / vp * (work + head) / m + 2.0 * (p.pp * vp - 1) * x
    sync = sync_tail_s(cfg, cost, float(bref.fwd_s[0]) / vp, float(bref.bwd_s[0]) / vp, x)
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


# where a microbatch's compute goes, from the cost model (name in the breakdown: BatchCost fields)
COMPUTE_PARTS = {
    "gemm": ("gemm_fwd_s", "gemm_bwd_s"), "attention": ("attn_fwd_s", "attn_bwd_s"),
    "tp_comm": ("tp_fwd_s", "tp_bwd_s"), "elementwise": ("elementwise_fwd_s", "elementwise_bwd_s"),
    "recompute": ("recompute_s",), "fp8_cast": ("fp8_cast_fwd_s", "fp8_cast_bwd_s"),
    "launch_floor": ("launch_fwd_s", "launch_bwd_s"), "microbatch_overhead": ("overhead_fwd_s", "overhead_bwd_s"),
}


def compute_parts_s(cfg: RunConfig, data: DataSpec, mbs: int) -> dict[str, float]:
    """Fixed windows: the compute of one iteration on the busiest stage split by kind (seconds per iteration:
    per-microbatch cost-model parts x microbatches), plus the optimizer step (a per-iteration fixed cost).

    Keys ``part_<kind>_s``; they explain the simulator's ``compute_s`` (they sum to about it) and let a
    layout's advantage be named (GEMM efficiency, TP communication, launch floors, ...).
    """
    cost = _cached_cost(cfg)
    L = int(data.seq_len)
    lk = _layout_key(cfg, L, mbs) if SCREEN_MEMO else None
    per = _PARTS.get(lk) if lk is not None else None
    if per is None:  # one microbatch's parts: a layout's, whatever the DP (memoised by its layout key)
        p = cfg.parallel
        bc = cost.batch_cost(np.full(mbs, L), np.zeros(mbs, dtype=np.int64), np.array([p.cp]), _spans(cfg, cost, [p.cp]))
        per = [(f"part_{name}_s", [float(getattr(bc, f)[0]) for f in fields if getattr(bc, f, None) is not None])
               for name, fields in COMPUTE_PARTS.items()]
        per.append(("part_embed_head_s", [float(getattr(bc, f)[0]) for f in ("embed_fwd_s", "embed_bwd_s", "head_fwd_s",
                                                                           "head_bwd_s") if getattr(bc, f, None) is not None]))
        if lk is not None:
            _memo_put(_PARTS, lk, per)
    m = max(1, data.gbs // (cfg.dp * mbs))
    out = {key: m * sum(vals) for key, vals in per[:-1] if vals}
    out[per[-1][0]] = m * sum(per[-1][1])
    out["part_optimizer_s"] = float(np.max(_sync_cost(cfg, cost).optimizer_s))
    return out


_PARTS: dict[tuple, list[tuple[str, list[float]]]] = {}  # compute_parts_s' per-microbatch parts by layout key


def screen(cfg: RunConfig, data: DataSpec, *, mbs: int | None, dynamic: bool) -> dict[str, float]:
    """Closed-form iteration time (seconds) and its parts for one checked candidate."""
    if data.fixed:
        return screen_fixed(cfg, data, int(mbs or 1))
    return screen_variable(cfg, data, dynamic, seed=cfg.sim.seed)
