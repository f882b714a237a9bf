"""The final evaluation of a search's best layout: the configured network, seeds, and the long-run fault simulation.

The search (:mod:`dcpsim.planning.search`) screens and simulates layouts on the ideal network
(``sim.network = "ideal"``, the exact fast path) with the long-run mode off. The best layout of each
(GPU type, size, policy) is then evaluated as it will be reported:

1. **Throughput under the configured network** (``sim.network`` of the base configuration, ``ideal`` or
   ``shared``): ``run_simulation`` of the layout for each throughput seed (``seeds`` when something varies
   between seeds -- variable lengths, per-document windows, kernel noise, stragglers -- else one), each
   ``sim.iterations`` iterations. Their tokens/s give the row's throughput and its spread; their iteration
   times (seeds x iterations, pooled) are the long run's sample of undisturbed iterations.
2. **The long run** (:mod:`dcpsim.sim.longrun`): ``sim.long_run_seeds`` independent runs over the
   planned training duration -- the time to train at that throughput divided by the first-order goodput
   -- or over ``sim.long_run_hours`` when that is set (a representative horizon); either is capped at
   :data:`MAX_SEGMENTS` checkpoint segments and at ten years (the horizon used is reported). Failures
   from ``sim.gpu_mtbf_h``, checkpoints every ``sim.checkpoint_interval_s`` of work (Young's optimum by
   default), ``sim.restart_s`` per restart; slow-GPU and degraded-link episodes (``sim.slow_gpu_*``,
   ``sim.degraded_link_*``) with their iteration-time ratios measured with the simulator on this layout
   (:func:`dcpsim.run.single.measured_long_run`). The first-order Young/Daly goodput of the same inputs
   (:func:`dcpsim.sim.longrun.young_daly_goodput`) comes alongside as the analytic check.

Everything is drawn from seeded generators: one seed, one result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dcpsim.errors import DcpsimError
from dcpsim.planning.inputs import DataSpec
from dcpsim.planning.tasks import Task, TaskSettings
from dcpsim.run.config import RunConfig

MAX_SEGMENTS = 20_000  # checkpoint segments per long run at most (a longer plan: a representative horizon)
MAX_HORIZON_H = 24.0 * 3650  # ten years, the config's bound on sim.long_run_hours
# what the search runs with: the ideal network (exact fast path), no long run per screened layout
SEARCH_UPDATES: dict[str, Any] = {"sim.network": "ideal", "sim.long_run_hours": 0.0}


def varies_between_seeds(cfg: RunConfig, data: DataSpec) -> bool:
    """Whether another seed can give another throughput (variable lengths, documents, noise, stragglers)."""
    s = cfg.sim
    return (not data.fixed) or data.documents is not None or s.noise_cv > 0 or s.straggler_fraction > 0


def flags_of(row: dict[str, Any]) -> tuple[tuple[str, bool], ...]:
    """The overlap flags of a simulated row, as a :class:`~dcpsim.planning.space.Candidate` holds them."""
    from dcpsim.planning.space import OVERLAP_FLAGS, optional_field

    return tuple((n, bool(row[n])) for n in OVERLAP_FLAGS if optional_field(n) and n in row)


def best_config(best: dict[str, Any], cfg: RunConfig, data: DataSpec, gpus: int, gbs: int,
                policy: str) -> RunConfig | None:
    """The run configuration of a search's best row on top of ``cfg`` (``None`` if it no longer checks)."""
    from dcpsim.planning.search import search_updates
    from dcpsim.planning.space import Candidate, check_candidate

    cand = Candidate(tp=best["tp"], pp=best["pp"], cp=best["cp"], tokens_per_rank=best["tokens_per_rank"],
                     recompute=best["recompute"], vp=best["vp"], mbs=best["mbs"],
                     first_stage_layers=best["first_stage_layers"], last_stage_layers=best["last_stage_layers"],
                     precision=best["precision"], flags=flags_of(best))
    return check_candidate(cfg, cand, gpus, data, gbs, search_updates(data, policy, gbs)).cfg


def _seed_runs(cfg: RunConfig, n: int, runner, known: dict[str, Any] | None = None) -> tuple[list[dict], np.ndarray, Any]:
    """(summaries, pooled iteration times, the first non-empty plan) of ``n`` seeds from ``cfg.sim.seed``;
    ``known``: results of ``runner`` by configuration hash (the search's runs: an equal configuration is not
    simulated again -- one configuration, one result)."""
    summaries, times, plan = [], [], None
    first = known.get(cfg.config_hash()) if known else None
    for k in range(n):
        r = first if k == 0 and first is not None else runner(cfg.with_updates({"sim.seed": cfg.sim.seed + k}) if k else cfg)
        s = r.summary if hasattr(r, "summary") else r
        summaries.append(s)
        if hasattr(r, "iteration_values"):  # a SimResult: the column without building the table (no pandas)
            times.append(r.iteration_values("iteration_time_s"))
        else:
            it = getattr(r, "iterations", None)
            times.append(it["iteration_time_s"].to_numpy(float) if it is not None else np.array([s["iteration_time_s"]]))
        if plan is None:
            plan = next((p for p in getattr(r, "plans", None) or [] if p.steps), None)
    return summaries, np.concatenate(times), plan


def horizon_hours(tokens: float, tokens_per_s: float, gpus: int, fm, iteration_s: float,
                  fixed_h: float) -> tuple[float, str]:
    """(hours the long run covers, what they are): ``fixed_h`` if > 0, else the planned duration (time to
    train / first-order goodput), capped at :data:`MAX_SEGMENTS` checkpoint segments and ten years."""
    from dcpsim.sim.longrun import checkpoint_iterations, first_order_goodput

    tau = checkpoint_iterations(fm.checkpoint_interval_s(gpus), iteration_s) * iteration_s
    if fixed_h > 0:
        h, what = fixed_h, "sim.long_run_hours"
    else:
        g = first_order_goodput(fm.system_mtbf_s(gpus), tau, fm.checkpoint_s, fm.restart_s)
        h = tokens / tokens_per_s / 3600.0 / g if g > 0 else math.inf
        what = "planned duration"
    cap = min(MAX_HORIZON_H, MAX_SEGMENTS * (tau + fm.checkpoint_s) / 3600.0)
    if h > cap:
        return cap, f"representative ({MAX_SEGMENTS:,} checkpoint segments or ten years; {what} is longer)"
    return h, what


def long_run_stats(iter_s: np.ndarray, gpus: int, lr, seeds: int, seed: int) -> dict[str, Any]:
    """The long run's goodput mean/std/min/max, failures, Young/Daly, and mean/std of 1/goodput over seeds."""
    from dcpsim.sim.longrun import long_run_summary, long_runs

    runs = long_runs(iter_s, gpus, lr, seeds, seed)
    out = long_run_summary(iter_s, gpus, lr, seeds, seed, runs=runs)
    g = np.array([r["goodput"] for r in runs])
    inv = np.where(g > 0, 1.0 / np.where(g > 0, g, 1.0), np.inf)
    out["inv_goodput_std"] = float(inv.std(ddof=1)) if inv.size > 1 and np.isfinite(inv).all() else 0.0
    out["failures_std"] = float(np.std([r["failures"] for r in runs], ddof=1)) if len(runs) > 1 else 0.0
    return out


def evaluate_best(res, cfg: RunConfig, task: Task, settings: TaskSettings) -> dict[str, Any]:
    """The best row of ``res`` (a :class:`~dcpsim.planning.search.LayoutSearch` of ``task``) under ``cfg``'s
    network, ``settings.seeds`` seeds and long run over ``settings.tokens`` (see the module docstring); ``{}``
    when the search found nothing, ``{"final_error": why}`` when the layout cannot run under the configured
    network."""
    from dcpsim.run.single import run_simulation

    data, gpus, seeds, tokens, runner = settings.data, task.gpus, settings.seeds, settings.tokens, settings.runner
    gbs, policy = task.gbs, task.policy
    best = res.best
    if best is None or best["status"] != "ok":
        return {}
    run_cfg = best_config(best, cfg.with_updates({"sim.long_run_hours": 0.0}), data, gpus, gbs, policy)
    if run_cfg is None:
        return {"final_error": "the best layout does not check under the configured settings"}
    n = seeds if varies_between_seeds(run_cfg, data) else 1
    try:
        summaries, iter_s, plan = _seed_runs(run_cfg, n, runner or run_simulation, None if runner else getattr(res, "results", None))
    except (DcpsimError, ValueError) as exc:
        return {"final_error": f"{cfg.sim.network} network: {exc}"}
    tps = [float(s["tokens_per_s"]) for s in summaries]
    out: dict[str, Any] = {"network": cfg.sim.network, "seed_tokens_per_s": tps, "final": summaries[0],
                           "long_run_sample_iterations": int(iter_s.size)}
    return out | _long_run(run_cfg, cfg, iter_s, plan, gpus=gpus, tokens=tokens, tokens_per_s=float(np.mean(tps)))


def _long_run(run_cfg: RunConfig, cfg: RunConfig, iter_s: np.ndarray, plan, *, gpus: int, tokens: float,
              tokens_per_s: float) -> dict[str, Any]:
    """``{"long_run": stats}`` over the horizon of :func:`horizon_hours`, or ``{"long_run_error": why}``."""
    from dcpsim.planning.failures import FailureModel
    from dcpsim.run.single import measured_long_run
    from dcpsim.sim.longrun import long_run_from_settings

    fm = FailureModel.from_settings(cfg.sim)
    hours, what = horizon_hours(tokens, tokens_per_s, gpus, fm, float(iter_s.mean()), float(cfg.sim.long_run_hours))
    if not math.isfinite(hours):
        return {"long_run_error": "failures: the job fails faster than it can checkpoint and restart"}
    episodes = cfg.sim.slow_gpu_per_day > 0 or cfg.sim.degraded_link_per_day > 0
    if episodes and plan is None:
        return {"long_run_error": "no simulated plan to measure the slow-GPU / degraded-link episodes on"}
    lr = measured_long_run(run_cfg, hours, plan=plan) if episodes else long_run_from_settings(cfg.sim, hours)
    lrs = long_run_stats(iter_s, gpus, lr, cfg.sim.long_run_seeds, cfg.sim.seed)
    return {"long_run": lrs | {"horizon_h": hours, "horizon": what, "slow_gpu_ratio": lr.slow_gpu.ratio,
                               "degraded_link_ratio": lr.degraded_link.ratio}}
