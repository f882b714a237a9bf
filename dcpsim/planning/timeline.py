"""A pipeline rank's own timeline of host and device, for the planning screen (:mod:`dcpsim.planning.screen`).

The screen's compute term of fixed windows is the busiest rank's time to issue and run its ``m``
microbatches' ops in the schedule's order (:func:`dcpsim.pipeline.stage_order`), every pipeline input taken
as ready, under the simulator's host/device rule (:func:`dcpsim.cost.host.issue_one`): the host runs ahead of
the device between syncs and loses its lead at each. Its bubble term takes from here what one microbatch's
ops add to the pipeline's fill and drain (:func:`bubble_stage_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from dcpsim.run.config import RunConfig


def chunk_device_s(cost, mb: dict[str, float], vp: int) -> np.ndarray:
    """Device seconds of one microbatch per virtual stage and direction, ``(pp·vp, 2)`` (forward, backward):
    each rank's layers' share and the per-microbatch overhead split evenly over its ``vp`` chunks, the
    embedding on the first virtual stage and the output layer on the last (the simulator's split,
    :func:`dcpsim.pipeline.chunk_durations`)."""
    from dcpsim.pipeline import chunk_durations

    layers = np.asarray(getattr(cost, "stage_layers", [cost.layers_per_stage] * cost.pp), dtype=float)
    scale = layers / max(layers.max(), 1.0)
    out = []
    for way in ("fwd", "bwd"):
        stage = mb[f"layers_{way}"] * scale + mb[f"overhead_{way}"]
        stage[0] += mb[f"embed_{way}"]
        stage[-1] += mb[f"head_{way}"]
        out.append(chunk_durations(stage, vp, np.float64(mb[f"head_{way}"]), np.float64(mb[f"embed_{way}"])))
    return np.stack(out, axis=1)


# One op of a rank: ((host seconds, kernels, sync before, sync after), device seconds) -- what
# :func:`dcpsim.cost.host.issue_one` reads.
RankOp = tuple[tuple[float, float, bool, bool], float]


@dataclass(frozen=True)
class RankOps:
    """The host and device cost of one microbatch's ops per pipeline rank: ``fwd[p][c]``, ``bwd[p][c]`` for
    chunk ``c`` of rank ``p`` (:data:`RankOp`), and the host's wake-up after a drain ``sync_s`` (seconds)."""

    pp: int
    vp: int
    fwd: tuple[tuple[RankOp, ...], ...]
    bwd: tuple[tuple[RankOp, ...], ...]
    sync_s: float


def rank_ops(cfg: RunConfig, cost, mb: dict[str, float], mbs: int) -> RankOps | None:
    """The ops of one microbatch on every rank with their host side (None without a host timeline).

    The host's cost and syncs of each op are the simulator's (:func:`dcpsim.sim.durations.pass_shape` and
    :func:`dcpsim.cost.host.host_ops`, one group of ``mbs`` windows), the device's per virtual stage
    :func:`chunk_device_s`.
    """
    host = cost.profile.host
    if not getattr(cfg.sim, "host_timeline", True) or not host.enabled:
        return None
    p = cfg.parallel
    vp = int(getattr(p, "vp", 1) or 1)
    ops = _host_ops(cfg, cost, mbs)
    dev = chunk_device_s(cost, mb, vp)

    # (virtual stage, way) as Python floats and bools, then per rank its chunks (virtual stage c·pp + rank)
    cols = [a[:, :, 0].tolist() for a in (ops.host_s.astype(float), ops.kernels.astype(float), ops.sync_before,
                                          ops.sync_after)]
    h, k, b, a = cols
    d = dev.tolist()
    per = [[((h[s][w], k[s][w], b[s][w], a[s][w]), d[s][w]) for w in (0, 1)] for s in range(len(d))]
    fwd = tuple(tuple(per[c * p.pp + r][0] for c in range(vp)) for r in range(p.pp))
    bwd = tuple(tuple(per[c * p.pp + r][1] for c in range(vp)) for r in range(p.pp))
    return RankOps(p.pp, vp, fwd, bwd, float(ops.sync_s))


_HOST_OPS: dict[tuple, Any] = {}
_HOST_BY_COST: dict[tuple, tuple] = {}
MEMO_MAX = 4096  # entries per memo before it is emptied


def _host_ops(cfg: RunConfig, cost, mbs: int):
    """:func:`dcpsim.cost.host.host_ops` of one group of ``mbs`` windows of the layout (the simulator's pass
    shape, :func:`dcpsim.sim.durations.pass_shape`). Memoised by what host_ops reads (it is pure): the pass
    shape's fields, the host costs and the step flags; ``n_seqs`` only where host_ops reads it (``thd``),
    ``dp_cp`` and ``cps`` only where :func:`~dcpsim.cost.host.layer_pass_host` does (``test_mode_qk_checks``),
    so that the layouts of every micro-batch size share it; found first by the cost model's settings (the
    profile and model held; DP×CP left out unless the q/k checks read it, so every cluster size shares it:
    pass_shape reads nothing else of a layout but vp, CP and mbs)."""
    from dataclasses import fields

    from dcpsim.cost.host import StepFlags, host_ops
    from dcpsim.sim.durations import pass_shape

    p = cfg.parallel
    vp = int(getattr(p, "vp", 1) or 1)
    flags = StepFlags.from_settings(cfg.step, packed=not cfg.is_fixed)
    st = cost.settings  # pass_shape reads the cost model's settings, DP×CP only into the shape's dp_cp
    values = tuple(getattr(st, f) for f in _setting_names(type(st))
                   if f not in ("profile", "model") and (f != "dp_cp" or flags.test_mode_qk_checks))
    near = (id(st.profile), id(st.model), values, vp, p.cp, mbs if flags.thd else None, flags)
    held = _HOST_BY_COST.get(near)
    if held is not None and held[0] is st.profile and held[1] is st.model:
        return held[2]
    shape = pass_shape(cost, vp, np.array([p.cp]), n_seqs=np.array([mbs]))
    host = cost.profile.host
    unread = (() if flags.thd else ("n_seqs",)) + (() if flags.test_mode_qk_checks else ("dp_cp", "cps"))
    key = (host, flags, *(None if f.name in unread else _frozen(getattr(shape, f.name)) for f in fields(shape)))
    hit = _HOST_OPS.get(key)
    if hit is None:
        hit = _put(_HOST_OPS, key, host_ops(shape, host, flags))
    _put(_HOST_BY_COST, near, (st.profile, st.model, hit))
    return hit


@cache
def _setting_names(cls: type) -> tuple[str, ...]:
    from dataclasses import fields

    return tuple(f.name for f in fields(cls))


def _put(memo: dict, key: tuple, value):
    if len(memo) > MEMO_MAX:
        memo.clear()
    memo[key] = value
    return value


def _frozen(v):
    """A hashable form of a pass-shape field that tells values apart as the arrays' contents do."""
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    return v


def bubble_stage_s(ranks: RankOps) -> np.ndarray:
    """Per rank, what one microbatch's ops add to the pipeline's fill and drain (seconds): an op the host
    issues after a sync (a pipeline receive with ``vp = 1``, Megatron's batched p2p) costs the wake-up plus
    the two-machine flow shop of its ``k`` kernels, ``max(h/k + d, h + d/k)``; any other op its device time
    ``d`` -- its host issued it while the rank waited for its pipeline input (the interleaved schedule's
    p2p does not sync, so every rank's host runs ahead of the fill and has nothing left in the drain)."""
    out = np.zeros(ranks.pp)
    for r in range(ranks.pp):
        t = 0.0
        for (h, k, before, after), d in ranks.fwd[r] + ranks.bwd[r]:
            k = max(k, 1.0)
            t += (int(before) + int(after)) * ranks.sync_s + max(h / k + d, h + d / k) if before else d
        out[r] = t
    return out


def busy_floor_s(ranks: RankOps) -> float:
    """A lower bound of :func:`rank_busy_s` per microbatch (seconds): the busiest rank's ``max(Σh, Σd)`` over
    one microbatch's ops -- its host issues every op (the host clock only moves forward, by at least each op's
    ``h``) and its device runs every op (by at least ``d`` each)."""
    best = 0.0
    for r in range(ranks.pp):
        ops = ranks.fwd[r] + ranks.bwd[r]
        best = max(best, sum(op[0][0] for op in ops), sum(op[1] for op in ops))
    return best


SKIP_RANK_PERIODS = True  # tests: False runs every op of every rank (the reference the skip is compared with)


def rank_busy_s(ranks: RankOps, m: int) -> np.ndarray:
    """When each rank's device and host are done with its ``m`` microbatches, every pipeline input taken as
    ready (seconds from the rank's start): its ops in the schedule's order (:func:`dcpsim.pipeline.stage_order`:
    warm-up forwards, 1F1B pairs, cool-down backwards) under the host/device rule
    (:func:`dcpsim.cost.host.issue_one`). A sync drains the queue, so the host's lead is kept only between syncs:
    a rank whose ops alternate between host-bound and device-bound runs (the interleaved schedule's chunks, the
    loss check after the last chunk's forward) costs more than ``max(Σh, Σd)``.

    The 1F1B pairs repeat with a period of ``vp·pp`` pairs (1 without interleaving); once two consecutive
    periods move the host and device clocks by the same amounts, the remaining whole periods are added at that
    rate (:data:`SKIP_RANK_PERIODS`; equal to running every op, tested).
    """
    from dcpsim.pipeline import check_microbatches, warmup_forwards

    pp, vp, sync_s = ranks.pp, ranks.vp, ranks.sync_s
    check_microbatches(m, pp, vp)
    n = pp  # Megatron's microbatch group (the default, pp); m is a multiple of it when vp > 1
    period = vp * n if vp > 1 else 1
    total = vp * m

    def chunk(j: int) -> int:  # the chunk of the j-th virtual microbatch (Megatron's table, groups of n)
        return (j // n) % vp if vp > 1 else 0

    step = _issue_ready if FAST_ISSUE else _issue_ready_ref
    out = np.zeros(pp)
    for r in range(pp):
        fwd, bwd = _prepared(ranks.fwd[r]), _prepared(ranks.bwd[r])
        w = warmup_forwards(r, pp, m, vp)
        hf = df = 0.0
        for j in range(w):
            hf, df = step(hf, df, fwd[chunk(j)], sync_s)
        pairs = total - w
        marks: list[tuple[float, float]] = []  # the clocks at the last period starts
        skip = SKIP_RANK_PERIODS
        i = 0
        while i < pairs:
            if skip and i % period == 0:
                marks.append((hf, df))
                if len(marks) == 3:
                    (h0, d0), (h1, d1), (h2, d2) = marks
                    if _same(h2 - h1, h1 - h0) and _same(d2 - d1, d1 - d0):
                        k = (pairs - i) // period
                        hf, df = hf + k * (h2 - h1), df + k * (d2 - d1)
                        i += k * period
                        skip = False
                        continue
                    marks.pop(0)
            hf, df = step(hf, df, fwd[chunk(w + i)], sync_s)
            hf, df = step(hf, df, bwd[vp - 1 - chunk(i)], sync_s)
            i += 1
        for j in range(pairs, total):
            hf, df = step(hf, df, bwd[vp - 1 - chunk(j)], sync_s)
        out[r] = max(hf, df)
    return out


FAST_ISSUE = True  # tests: False steps each op with dcpsim.cost.host.issue_one itself (the reference)


def _prepared(ops: tuple[RankOp, ...]) -> tuple[tuple, ...]:
    """Each op as ``(host, host / k, device, device / k, sync before, sync after, op)`` with ``k`` its kernels floored
    at 1: the quotients :func:`dcpsim.cost.host.issue_one` computes per call, computed once (the same floats)."""
    out = []
    for op, d in ops:
        h, kernels, before, after = op
        k = kernels if kernels > 1.0 else 1.0
        out.append((h, h / k, d, d / k, before, after, op))
    return tuple(out)


def _issue_ready(hf: float, df: float, p: tuple, sync_s: float) -> tuple[float, float]:
    """(host free, device free) after one prepared op (:func:`_prepared`) whose input is ready when the device is
    free: :func:`dcpsim.cost.host.issue_one` with ``ready = device free``, its operations in its order (tested
    equal, :data:`FAST_ISSUE`)."""
    h, hk, d, dk, before, after, _ = p
    if before:  # max(max(host, device), ready) with ready = device
        H = (hf if hf >= df else df) + sync_s
    else:
        H = hf
    t = H + hk
    start = t if t > df else df
    end = start + d
    t = H + h + dk
    if t > end:
        end = t
    host_after = H + h
    if after:
        host_after = (host_after if host_after >= end else end) + sync_s
    return host_after, end


def _issue_ready_ref(hf: float, df: float, p: tuple, sync_s: float) -> tuple[float, float]:
    """:func:`_issue_ready` by :func:`dcpsim.cost.host.issue_one` itself (the reference)."""
    from dcpsim.cost.host import issue_one

    _, _, df2, hf2 = issue_one(hf, df, df, p[2], p[6], sync_s)
    return hf2, df2


def _same(a: float, b: float) -> bool:
    """Two period increments equal but for float rounding."""
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1e-12)
