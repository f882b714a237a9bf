"""Layout search for one (GPU type, cluster size, policy): enumerate, prune, screen, simulate.

:func:`search_layouts` runs four named phases:

1. :func:`~dcpsim.planning.space.enumerate_candidates` -- every combination of TP, PP, VP, CP, tokens per
   rank / micro-batch size, recompute, precision and overlap flags the run configuration supports;
2. :func:`prune` -- divisibility, the global batch (at least one sequence per DP replica, Megatron's
   ``gbs % (dp·mbs) == 0`` for fixed windows, the interleaved schedule's microbatch rule) and memory
   with the simulator's own memory model (never skipped, also for a forced layout);
3. :func:`screen_all` -- the closed-form iteration time of :mod:`dcpsim.planning.screen`;
4. :func:`simulate_top` -- ``run_simulation`` on the best ``simulate`` layouts of the screen (and the
   overlap-flag variants of the screen's best), ranked by simulated tokens/s.

Only simulated numbers are reported; the screen's estimate is kept beside them (``screen_time_s``).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dcpsim.errors import ConfigError, DcpsimError
from dcpsim.planning.configs import validated
from dcpsim.planning.inputs import DataSpec
from dcpsim.planning.screen import screen
from dcpsim.planning.space import (
    Checked,
    SearchSpace,
    check_candidate,
    dynamic_capacity_check,
    enumerate_candidates,
    profiles_once,
)
from dcpsim.run.config import RunConfig

DEFAULT_SIMULATE = 6  # layouts simulated per (GPU type, size, policy): the screen is close, the simulator decides
SIM_MARGIN = 1.25  # layouts whose screened time exceeds the best screened time by more are not simulated
# summary entries ending in _s that are not parts of the iteration time
NOT_BREAKDOWN = frozenset({"wall_s", "sim_wall_s", "planning_wall_s", "events_per_s", "planning_time_s",
                           "iteration_time_s", "sim_time_s", "tokens_per_s"})


@dataclass(frozen=True)
class SearchContext:
    """What every phase of one search shares: the base configuration, GPUs, the data, the search space,
    sequences per global batch, the config updates every candidate shares (:func:`search_updates`), layouts
    to simulate and the simulation function."""

    base: RunConfig
    gpus: int
    data: DataSpec
    space: SearchSpace
    gbs: int
    common: dict[str, Any]
    simulate: int
    runner: Callable[..., Any]


@dataclass
class LayoutSearch:
    """What one search found: simulated rows (best first), counts per phase, and why nothing fits if so."""

    gpu: str
    gpus: int
    policy: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    # the simulations of the rows by configuration hash (the default runner's results: the final evaluation
    # of the best layout reuses its run when its configuration is the same)
    results: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def best(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None


def prune(base: RunConfig, cands, gpus: int, data: DataSpec, gbs: int,
          common: dict[str, Any], dynamic: bool = False) -> tuple[list[Checked], dict[str, Any]]:
    """(candidates that can run, {reason kind: count, "examples": {kind: first reason}}); for a ``dynamic`` policy
    a layout whose largest CP group cannot hold the longest sequence does not run."""
    ok: list[Checked] = []
    counts: dict[str, Any] = {"enumerated": 0, "examples": {}}
    best_mem: Checked | None = None
    fitted: set = set()
    for cand in sorted(cands, key=lambda c: c.prune_order[0]):
        counts["enumerated"] += 1
        key = cand.prune_order[1]  # all but recompute
        if key in fitted:  # a lighter recompute of this layout fits: more recompute only adds time
            counts["dominated"] = counts.get("dominated", 0) + 1
            continue
        ch = check_candidate(base, cand, gpus, data, gbs, common)
        why = dynamic_capacity_check(cand, gpus, data) if dynamic and ch.cfg is not None else ""
        if why:  # after the other checks: the closest miss (a batch that draws no long sequence would run)
            ch = Checked(cand, reason=why, kind="capacity")
        if ch.cfg is not None:
            ok.append(ch)
            fitted.add(key)
            continue
        counts[ch.kind] = counts.get(ch.kind, 0) + 1
        counts["examples"].setdefault(ch.kind, ch.reason)
        if ch.kind == "memory" and (best_mem is None or ch.memory_bytes < best_mem.memory_bytes):
            best_mem = ch
    if best_mem is not None:
        counts["examples"]["memory"] = best_mem.reason  # the closest miss: the most useful figure
    return ok, counts


BOUND_SLACK = 1e-9  # relative: the lower bound is compared with this margin (float rounding of the sums)


def screen_all(checked: list[Checked], data: DataSpec, dynamic: bool,
               keep: int | None = None) -> list[tuple[float, Checked, dict]]:
    """(closed-form time, candidate, parts), fastest first; candidates the screen cannot cost are dropped.

    ``keep`` (fixed windows): only the head of that list that the search uses is built -- every candidate
    within ``SIM_MARGIN`` of the best and at least the ``keep`` fastest (what :func:`add_flag_variants` and
    :func:`simulate_top` read). Candidates are taken in order of a lower bound of their time (the device's
    compute term, :func:`~dcpsim.planning.screen.fixed_lower_bound_s`) until the next bound exceeds both
    ``SIM_MARGIN`` x the best time so far and the ``keep``-th time: none after it could enter that head. A
    candidate before that is screened in full (with its gradient sync) only when a tighter bound, the
    screen's own compute and bubble terms (:func:`~dcpsim.planning.screen.fixed_host_bound_s`), does not
    exceed both either: the thresholds only fall as times are added, so a candidate left out could not have
    entered the head. The head is the same as that of the full list (tested, :data:`FULL_SCREEN` runs the
    full list).
    """
    if keep is None or FULL_SCREEN or not data.fixed:
        return _screen_each(checked, data, dynamic)
    from dcpsim.planning.screen import fixed_host_bound_s, fixed_lower_bound_s

    bounds: list[tuple[float, int]] = []
    for i, ch in enumerate(checked):
        try:
            lb = fixed_lower_bound_s(ch.cfg, data, int(ch.cand.mbs or 1))
        except (DcpsimError, ValueError):
            continue  # the full screen raises on the same step: dropped either way
        bounds.append((lb if math.isfinite(lb) else -math.inf, i))
    bounds.sort()
    out: list[tuple[float, Checked, dict]] = []
    times: list[float] = []  # sorted screened times

    def beyond(bound: float) -> bool:  # no candidate with this lower bound can enter the head
        b = bound * (1.0 - BOUND_SLACK)
        return bool(times) and b > SIM_MARGIN * times[0] and len(times) >= keep and b > times[keep - 1]

    for lb, i in bounds:
        if beyond(lb):
            break
        ch = checked[i]
        if len(times) >= keep:
            try:
                if beyond(fixed_host_bound_s(ch.cfg, data, int(ch.cand.mbs or 1))):
                    continue
            except (DcpsimError, ValueError):
                continue  # the full screen raises on the same step: dropped either way
        out += _screen_each([ch], data, dynamic)
        if len(out) > len(times):
            bisect.insort(times, out[-1][0])
    out.sort(key=lambda x: (x[0], x[1].cand.label()))
    return out


FULL_SCREEN = False  # tests: screen every candidate (the reference the bounded screen is compared with)


def _screen_each(checked: list[Checked], data: DataSpec, dynamic: bool) -> list[tuple[float, Checked, dict]]:
    out = []
    for ch in checked:
        try:
            parts = screen(ch.cfg, data, mbs=ch.cand.mbs, dynamic=dynamic)
        except (DcpsimError, ValueError):
            continue
        t = parts["time_s"]
        if math.isfinite(t) and t > 0:
            out.append((t, ch, parts))
    out.sort(key=lambda x: (x[0], x[1].cand.label()))
    return out


REFINE_MAX = 24  # variable-length data: most candidates whose policy plan is scored exactly


def refine(screened, data: DataSpec, keep: int) -> list[tuple[float, Checked, dict]]:
    """Variable-length data: re-score candidates with the policy's own plan, in order of the closed form.

    The closed form ignores load imbalance, so it is close to a lower bound: candidates are taken in
    its order and re-scored exactly (:func:`~dcpsim.planning.screen.refine_variable`) until the next
    closed form exceeds the ``keep``-th best exact score (or ``REFINE_MAX`` were scored).
    Fixed windows are returned as they are (the closed form has no imbalance to miss).
    """
    if data.fixed:
        return screened
    from dcpsim.planning.screen import refine_variable

    out: list[tuple[float, Checked, dict]] = []
    for t, ch, parts in screened:
        exact = sorted(x[0] for x in out)
        if len(out) >= REFINE_MAX or (len(exact) >= keep and t > exact[keep - 1]):
            break
        try:
            out.append((refine_variable(ch.cfg, parts), ch, parts))
        except (DcpsimError, ValueError):
            continue
    out.sort(key=lambda x: (x[0], x[1].cand.label()))
    return out


def add_flag_variants(screened, data: DataSpec, dynamic: bool, top: int, variants) -> list:
    """Screen the overlap-flag variants of the ``top`` screened candidates and merge them into the ranking
    (flags are searched on the shortlist, not across the whole space)."""
    extra = [ch for _, ch, _ in screened[:top] for ch in variants(ch)]
    if not extra:
        return screened
    return sorted(screened + screen_all(extra, data, dynamic), key=lambda x: (x[0], x[1].cand.label()))


def _sim_row(ch: Checked, data: DataSpec, screen_t: float, runner,
             results: dict[str, Any] | None = None) -> dict[str, Any]:
    from dcpsim.sim import BREAKDOWN

    c = ch.cand
    row: dict[str, Any] = {"layout": c.label(), "tp": c.tp, "pp": c.pp, "vp": c.vp, "cp": c.cp, "dp": ch.cfg.dp,
                           "first_stage_layers": c.first_stage_layers, "last_stage_layers": c.last_stage_layers,
                           "mbs": c.mbs, "tokens_per_rank": c.tokens_per_rank, "recompute": c.recompute,
                           "precision": c.precision, **{k: v for k, v in c.flags},
                           "memory_gib": ch.memory_bytes / 2**30, "memory_limit_gib": ch.limit_bytes / 2**30,
                           "screen_time_s": screen_t, "config_hash": ch.cfg.config_hash()}
    try:
        res = runner(validated(ch.cfg))  # checked as a light copy (light_config): validated in full once, here
    except (DcpsimError, ValueError) as exc:
        return row | {"status": "error", "reason": str(exc)}
    if results is not None:
        results[row["config_hash"]] = res
    s = res.summary if hasattr(res, "summary") else res
    row |= {"status": "ok", "reason": "", "iteration_time_s": float(s["iteration_time_s"]),
            "tokens_per_s": float(s["tokens_per_s"]), "tflops_per_gpu": float(s["tflops_per_gpu"]),
            "mfu": float(s["mfu"]), "peak_memory_gib": s.get("peak_memory_gib")}
    for k in BREAKDOWN:
        row[k] = float(s.get(k, float("nan")))
    if data.fixed:  # what the compute is made of (cost model), incl. the fixed costs
        from dcpsim.planning.screen import compute_parts_s

        row |= compute_parts_s(ch.cfg, data, int(c.mbs or 1))
    for k, v in s.items():  # breakdown terms the time model adds later (fixed costs, ...) come along
        if k.endswith("_s") and k not in row and isinstance(v, float) and k not in NOT_BREAKDOWN:
            row[k] = v
    return row


def _flag_variants(ch: Checked, ctx: SearchContext, screened: bool) -> list[Checked]:
    """The other settings of one candidate's overlap flags that the screen models (``screened``) or
    does not, each checked like any candidate."""
    import itertools

    from dcpsim.planning.space import SCREENED_FLAGS

    names = [n for n, _ in ch.cand.flags if (n in SCREENED_FLAGS) == screened]
    if not names:
        return []
    out = []
    for combo in itertools.product((True, False), repeat=len(names)):
        new = dict(zip(names, combo, strict=True))
        fl = tuple((n, new.get(n, v)) for n, v in ch.cand.flags)
        if fl == ch.cand.flags or any(v not in ctx.space.flags.get(n, (True, False)) for n, v in new.items()):
            continue
        cand = dataclasses.replace(ch.cand, flags=fl)
        v = check_candidate(ctx.base, cand, ctx.gpus, ctx.data, ctx.gbs, ctx.common)
        if v.cfg is not None:
            out.append(v)
    return out


def simulate_top(screened, ctx: SearchContext, results: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Simulate the best ``ctx.simulate`` distinct layouts of the screen; rows by simulated tokens/s, best first
    (``results``: filled with each run's result by configuration hash)."""
    data, simulate, runner = ctx.data, ctx.simulate, ctx.runner
    seen: set = set()
    picked: list[tuple[float, Checked]] = []
    best_t = screened[0][0] if screened else 0.0
    for t, ch, _ in screened:
        k = ch.cand.layout_key()
        if k in seen:
            continue
        if picked and t > SIM_MARGIN * best_t:
            break
        seen.add(k)
        picked.append((t, ch))
        if len(picked) >= simulate:
            break
    rows = [_sim_row(ch, data, t, runner, results) for t, ch in picked]
    if picked:
        t0, ch0 = picked[0]
        rows += [_sim_row(v, data, float("nan"), runner, results) for v in _flag_variants(ch0, ctx, screened=False)]
    ok = [r for r in rows if r["status"] == "ok"]
    ok.sort(key=lambda r: (-r["tokens_per_s"], r["layout"]))
    return ok + [r for r in rows if r["status"] != "ok"]


def explain(rows: list[dict[str, Any]]) -> None:
    """Add ``why``: where each simulated layout gains or loses against the next one (largest terms)."""
    from dcpsim.sim import BREAKDOWN

    terms = [k for k in BREAKDOWN] + sorted({k for r in rows for k in r if k.endswith("_s") and k not in BREAKDOWN
                                             and k not in NOT_BREAKDOWN and k != "screen_time_s"})
    ok = [r for r in rows if r.get("status") == "ok"]
    for i, r in enumerate(ok):
        if i + 1 >= len(ok):
            r["why"] = "last simulated layout"
            continue
        o = ok[i + 1]
        d = {k: (r.get(k) or 0.0) - (o.get(k) or 0.0) for k in terms
             if isinstance(r.get(k), float) and isinstance(o.get(k), float)}
        d = {k: v for k, v in d.items() if math.isfinite(v)}
        gains = sorted(d.items(), key=lambda kv: kv[1])[:2]
        parts = [f"{k.removesuffix('_s').removeprefix('part_')} {v * 1e3:+.0f} ms" for k, v in gains if abs(v) > 1e-6]
        dt = r["iteration_time_s"] - o["iteration_time_s"]
        r["why"] = (f"vs {o['layout']}: {dt * 1e3:+.0f} ms/iteration" + (" (" + ", ".join(parts) + ")" if parts else ""))


def search_layouts(base: RunConfig, gpus: int, data: DataSpec, *, policy: str, space: SearchSpace | None = None,
                   gbs: int | None = None, simulate: int = DEFAULT_SIMULATE, runner=None) -> LayoutSearch:
    """Search the layouts of ``base``'s model on ``gpus`` GPUs of ``base.hardware.gpu`` under ``policy``.

    ``gbs``: sequences per global batch (default: the data's). ``simulate``: how many screened layouts
    are simulated. ``runner``: the simulation function (default ``run_simulation``).
    """
    from dcpsim.policies import policy_class
    from dcpsim.run.single import run_simulation

    space = space or SearchSpace()
    gbs = int(gbs or data.gbs)
    try:
        dynamic = bool(getattr(policy_class(policy), "dynamic", False))
    except (ConfigError, KeyError):
        raise ConfigError("--policies", policy, "a registered policy name") from None
    common = search_updates(data, policy, gbs)
    ctx = SearchContext(base, gpus, data, space, gbs, common, simulate, runner or run_simulation)
    out = LayoutSearch(gpu=base.hardware.gpu, gpus=gpus, policy=policy)
    if data.documents is not None and policy != "packing":
        out.reason = f"policy {policy}: fixed windows with per-document attention run with 'packing' only"
        return out
    with profiles_once():
        cands = enumerate_candidates(base, gpus, data, space, dynamic)
        checked, counts = prune(base, cands, gpus, data, gbs, common, dynamic)
        screened = screen_all(checked, data, dynamic, keep=simulate)
        screened = add_flag_variants(screened, data, dynamic, simulate, lambda ch: _flag_variants(
            ch, ctx, screened=True))
    out.counts = {k: v for k, v in counts.items() if k != "examples"} | {"fit": len(checked),
                                                                          "screened": len(screened)}
    if not screened:
        ex = counts["examples"]
        # the closest miss: a candidate is checked for the batch, then its layout, then memory
        out.reason = (ex.get("capacity") or ex.get("memory") or ex.get("divisibility") or ex.get("batch")
                      or f"no layout in the search space divides the GPU count ({gpus}) and the model's layers "
                         "(PP x VP dividing them, or PP with uneven first/last stages)")
        return out
    screened = refine(screened, data, simulate)
    out.counts["refined"] = 0 if data.fixed else len(screened)
    out.rows = simulate_top(screened, ctx, out.results if runner is None else None)
    out.counts["simulated"] = len(out.rows)
    explain(out.rows)
    if not any(r["status"] == "ok" for r in out.rows):
        out.reason = out.rows[0]["reason"] if out.rows else "nothing simulated"
    return out


def search_updates(data: DataSpec, policy: str, gbs: int) -> dict[str, Any]:
    """The config updates every candidate of one search shares (the data, its batch, the policy)."""
    return {"policy.name": policy, **data.config_updates(gbs)}
