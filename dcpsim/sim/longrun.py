"""Long runs at iteration granularity: failures, checkpoint/restart, slow GPUs and degrading links over hours to days.

The per-iteration times come from the simulator (a sample of simulated
iterations, cycled); this module adds what happens between them, drawn from a
seeded generator (one seed, one result):

* **Failures** of the job: a Poisson process of rate ``gpus / MTBF_gpu``
  (exponential gaps; the per-GPU MTBF model of
  :func:`llama3_gpu_mtbf_hours`, default from the Llama 3 report;
  capacity planning's :class:`dcpsim.planning.failures.FailureModel` uses
  the same functions). A failure loses the work since the last checkpoint (and a
  checkpoint being written), then the job restarts: ``restart_s`` of wall time
  (detect, reschedule, load the checkpoint). The gap to the next failure is
  drawn from the restart's end.
* **Checkpoints** every ``c`` iterations, ``c = round(τ / mean iteration)``
  with ``τ`` the checkpoint interval (default Young's ``√(2·δ·M)``, ``δ`` the
  write time, ``M`` the job's MTBF); writing stops training for ``δ``.
* **Slow GPU episodes** (thermal throttling, a straggler) and **degraded
  link episodes**: Poisson arrivals per day of wall time, each lasting
  ``episode_s``; an iteration that starts inside an episode takes
  ``ratio`` times longer (``ratio`` is measured by the caller with the
  simulator: the same plan with one slow GPU or one degraded NIC, so a
  synchronous job runs at its slowest member, averaged over a sample of the
  GPUs the episode may hit, :func:`slowdown_ratios`). Overlapping episodes
  take the larger ratio.

Goodput = useful work (committed iterations at their undisturbed time) /
wall time, over whole checkpoint segments up to the horizon. First-order
expectation (Young/Daly, no slowness): ``(1 − (R + (τ + δ)/2)/M) / (1 + δ/τ)``
(:func:`young_daly_goodput`); the exact expectation of this model is
:func:`renewal_goodput`.

:func:`slowdown_ratios` measures the episode ratios with the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.failure_rates import (  # noqa: F401 - re-exported
    LLAMA3_DAYS,
    LLAMA3_GPUS,
    LLAMA3_INTERRUPTIONS,
    llama3_gpu_mtbf_hours,
)

DAY_S = 86400.0



def system_mtbf_s(gpu_mtbf_h: float, gpus: int) -> float:
    """Mean time between failures of a job on ``gpus`` GPUs (seconds), from the per-GPU MTBF in hours."""
    return gpu_mtbf_h * 3600.0 / gpus


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimal work time between checkpoints, ``√(2·δ·M)`` (seconds)."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def checkpoint_interval_s(fixed_s: float | None, checkpoint_s: float, mtbf_s: float) -> float:
    """Work seconds between checkpoints: ``fixed_s`` when set, else Young's optimum (:func:`young_interval_s`)."""
    return float(fixed_s) if fixed_s is not None else young_interval_s(checkpoint_s, mtbf_s)


def checkpoint_iterations(interval_s: float, iteration_s: float) -> int:
    """Iterations between checkpoints: ``interval_s`` rounded to whole iterations, at least one."""
    return max(1, round(interval_s / iteration_s))


def failure_settings(s) -> dict:
    """The failure inputs of a run configuration's ``[sim]`` section ``s`` (``gpu_mtbf_h``, ``checkpoint_s``,
    ``restart_s``, ``checkpoint_interval_s``; ``"young"`` becomes ``None``): the one reader of these fields,
    for :func:`long_run_from_settings` and planning's ``FailureModel.from_settings``."""
    iv = s.checkpoint_interval_s
    return {"gpu_mtbf_h": float(s.gpu_mtbf_h), "checkpoint_s": float(s.checkpoint_s), "restart_s": float(s.restart_s),
            "interval_s": None if iv == "young" else float(iv)}


def first_order_goodput(mtbf_s: float, interval_s: float, checkpoint_s: float, restart_s: float) -> float:
    """Young/Daly first-order goodput ``(1 − (R + (τ + δ)/2)/M) / (1 + δ/τ)``, 0 when failures outrun progress.

    The one implementation of the formula: the long-run simulation's expectation
    and capacity planning's time to train both call it.
    """
    lost = (restart_s + (interval_s + checkpoint_s) / 2.0) / mtbf_s
    if lost >= 1.0:
        return 0.0
    ckpt = checkpoint_s / interval_s if interval_s > 0 else 0.0
    return (1.0 - lost) / (1.0 + ckpt)


@dataclass(frozen=True)
class Episodes:
    """Poisson episodes of slowness: ``per_day`` arrivals per day of wall time, ``episode_s`` long, ``ratio`` ≥ 1."""

    per_day: float = 0.0
    episode_s: float = 3600.0
    ratio: float = 1.0

    def draw(self, horizon_s: float, rng: np.random.Generator) -> np.ndarray:
        """Sorted episode start times over ``horizon_s`` of wall time (empty when disabled)."""
        if self.per_day <= 0 or self.ratio <= 1.0:
            return np.zeros(0)
        n = int(rng.poisson(self.per_day * horizon_s / DAY_S))
        return np.sort(rng.uniform(0.0, horizon_s, n))

    def factor(self, starts: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per time in ``t``: ``ratio`` if an episode (started at ``starts``) covers it, else 1."""
        if starts.size == 0:
            return np.ones(t.size)
        inside = np.searchsorted(starts, t, "right") > np.searchsorted(starts, t - self.episode_s, "right")
        return np.where(inside, self.ratio, 1.0)


@dataclass(frozen=True)
class LongRun:
    """Long-run settings (seconds unless noted)."""

    hours: float
    gpu_mtbf_h: float
    checkpoint_s: float = 60.0
    restart_s: float = 600.0
    checkpoint_interval_s: float | None = None  # None: Young's optimum
    slow_gpu: Episodes = Episodes()
    degraded_link: Episodes = Episodes()

    def __post_init__(self) -> None:
        if not self.hours > 0:
            raise ConfigError("sim.long_run_hours", self.hours, "> 0")
        if not self.gpu_mtbf_h > 0:
            raise ConfigError("sim.gpu_mtbf_h", self.gpu_mtbf_h, "> 0 hours")
        if self.checkpoint_s < 0 or self.restart_s < 0:
            raise ConfigError("sim.checkpoint_s/restart_s", (self.checkpoint_s, self.restart_s), ">= 0 seconds")

    def system_mtbf_s(self, gpus: int) -> float:
        return system_mtbf_s(self.gpu_mtbf_h, gpus)

    def interval_s(self, gpus: int) -> float:
        """Work seconds between checkpoints (Young: ``√(2·δ·M)``)."""
        return checkpoint_interval_s(self.checkpoint_interval_s, self.checkpoint_s, self.system_mtbf_s(gpus))


def long_run_from_settings(s, hours: float, slow_gpu_ratio: float = 1.0, degraded_link_ratio: float = 1.0) -> LongRun:
    """The :class:`LongRun` of a run configuration's ``[sim]`` section ``s`` (any object with its fields:
    ``gpu_mtbf_h``, ``checkpoint_s``, ``restart_s``, ``checkpoint_interval_s``, ``slow_gpu_*``,
    ``degraded_link_*``) over ``hours``, with the episode ratios measured by the caller
    (:func:`slowdown_ratios`). The one place the config's failure fields become the model's inputs."""
    f = failure_settings(s)
    return LongRun(hours=hours, gpu_mtbf_h=f["gpu_mtbf_h"], checkpoint_s=f["checkpoint_s"], restart_s=f["restart_s"],
                   checkpoint_interval_s=f["interval_s"],
                   slow_gpu=Episodes(s.slow_gpu_per_day, s.slow_gpu_episode_s, slow_gpu_ratio),
                   degraded_link=Episodes(s.degraded_link_per_day, s.degraded_link_episode_s, degraded_link_ratio))


def young_daly_goodput(gpus: int, lr: LongRun, iteration_s: float | None = None) -> float:
    """First-order expected goodput (no slowness), with ``τ`` rounded to whole iterations when given."""
    tau = lr.interval_s(gpus)
    if iteration_s:
        tau = checkpoint_iterations(tau, iteration_s) * iteration_s
    return first_order_goodput(lr.system_mtbf_s(gpus), tau, lr.checkpoint_s, lr.restart_s)


def renewal_goodput(gpus: int, lr: LongRun, iteration_s: float) -> float:
    """Exact expected goodput of this module's model without slowness (renewal argument).

    Between failures the job is up for ``U ~ Exp(M)`` and completes
    ``floor(U/s)`` segments of ``s = τ + δ`` (``τ`` whole iterations), each
    worth ``τ``; then it restarts for ``R``. So goodput ``= τ·E[floor(U/s)] /
    (M + R)`` with ``E[floor(U/s)] = 1/(e^{s/M} − 1)`` (the horizon's cut-off
    aside). Young/Daly is its first-order expansion in ``s/M`` and ``R/M``.
    """
    m = lr.system_mtbf_s(gpus)
    tau = checkpoint_iterations(lr.interval_s(gpus), iteration_s) * iteration_s
    return tau / (math.expm1((tau + lr.checkpoint_s) / m) * (m + lr.restart_s))


SAME_SEGMENTS = True  # tests: False prices every segment from its iterations (the reference of the shortcut)


def simulate_long_run(iter_s: np.ndarray, gpus: int, lr: LongRun, rng: np.random.Generator) -> dict:
    """One long run: goodput, failures, time lost; ``iter_s`` are undisturbed iteration times, cycled."""
    base = np.asarray(iter_s, dtype=np.float64)
    if base.size == 0 or not np.all(base > 0):
        raise ConfigError("iteration times", base.tolist(), "positive simulated iteration times")
    horizon = lr.hours * 3600.0
    m = lr.system_mtbf_s(gpus)
    c = checkpoint_iterations(lr.interval_s(gpus), float(base.mean()))
    # one stream per kind of event (common random numbers: the failures of a seed are the same draws with
    # and without slow episodes, so the two compare without the noise of reshuffled failures)
    fail_rng, *ep_rng = rng.spawn(3)
    kinds = [(e, e.draw(horizon, r)) for e, r in zip((lr.slow_gpu, lr.degraded_link), ep_rng, strict=True)]
    kinds = [(e, st) for e, st in kinds if st.size]
    t, done, useful, fails, lost, restart = 0.0, 0, 0.0, 0, 0.0, 0.0
    next_fail = fail_rng.exponential(m)
    same = None  # every segment runs the same iterations (no episodes; c a multiple of the cycle): its sums once
    if SAME_SEGMENTS and not kinds and c % base.size == 0:
        work = base[np.arange(c) % base.size]
        same = (float((work * np.ones(c)).sum()) + lr.checkpoint_s, float(work.sum()))
    while t < horizon:
        if same is not None:
            seg, seg_useful = same
        else:
            idx = (done + np.arange(c)) % base.size
            work = base[idx]
            starts = t + np.concatenate([[0.0], np.cumsum(work[:-1])])
            slow = np.ones(c)
            for e, st in kinds:  # an iteration that starts inside an episode; overlapping kinds: the larger ratio
                slow = np.maximum(slow, e.factor(st, starts))
            dur = work * slow
            seg, seg_useful = float(dur.sum()) + lr.checkpoint_s, float(work.sum())
        if t + seg <= next_fail:
            t += seg
            done += c
            useful += seg_useful
            continue
        fails += 1
        lost += next_fail - t
        t = next_fail + lr.restart_s
        restart += lr.restart_s
        next_fail = t + fail_rng.exponential(m)
    return {"goodput": useful / t, "wall_s": t, "useful_s": useful, "failures": fails, "lost_work_s": lost,
            "restart_s": restart, "checkpoint_every_iterations": c, "iterations": done}


def long_runs(iter_s: np.ndarray, gpus: int, lr: LongRun, seeds: int, seed: int) -> list[dict]:
    """``seeds`` independent long runs (:func:`simulate_long_run`), their streams spawned from ``seed``."""
    return [simulate_long_run(iter_s, gpus, lr, np.random.default_rng(s))
            for s in np.random.SeedSequence(seed).spawn(int(seeds))]


def long_run_summary(iter_s: np.ndarray, gpus: int, lr: LongRun, seeds: int, seed: int,
                     runs: list[dict] | None = None) -> dict:
    """Goodput over ``seeds`` independent runs (streams spawned from ``seed``; ``runs``: those runs when
    already made) and the Young/Daly and renewal expectations."""
    runs = runs if runs is not None else long_runs(iter_s, gpus, lr, seeds, seed)
    g = np.array([r["goodput"] for r in runs])
    return {
        "goodput_mean": float(g.mean()),
        "goodput_std": float(g.std(ddof=1)) if g.size > 1 else 0.0,
        "goodput_min": float(g.min()),
        "goodput_max": float(g.max()),
        "failures_mean": float(np.mean([r["failures"] for r in runs])),
        "checkpoint_every_iterations": runs[0]["checkpoint_every_iterations"],
        "young_daly_goodput": young_daly_goodput(gpus, lr, float(np.mean(iter_s))),
        "renewal_goodput": renewal_goodput(gpus, lr, float(np.mean(iter_s))),
        "long_run_seeds": int(seeds),
    }


SLOWDOWN_SAMPLES = 8  # GPUs an episode is measured on (its ratio is their mean; drawn uniformly, fixed seed)
SHARED_LINK_SAMPLES = 4  # fewer for a degraded link on the shared network (each one an event simulation)


def episode_gpus(topology, samples: int = SLOWDOWN_SAMPLES) -> np.ndarray:
    """GPUs an episode is measured on: ``samples`` distinct stage ranks (one GPU each; TP peers are equivalent)
    drawn uniformly from a fixed seed, so that the ratio estimates the mean over the GPU an episode hits."""
    ranks = topology.pp * topology.dp * topology.cp
    k = min(int(samples), ranks)
    pick = np.sort(np.random.default_rng(0).choice(ranks, size=k, replace=False))
    return pick * topology.tp


def slowdown_ratios(sim, plan, *, slow_gpu_slowdown: float, degraded_link_scale: float,
                    samples: int = SLOWDOWN_SAMPLES) -> tuple[float, float]:
    """(slow GPU, degraded link) iteration-time ratios of ``plan`` on ``sim`` (a
    :class:`~dcpsim.sim.ClusterSimulator`): the same plan with one GPU running ``slow_gpu_slowdown`` times
    slower, and with one GPU's network link at ``degraded_link_scale`` of its bandwidth, each the mean over
    the GPUs of :func:`episode_gpus` (an episode hits any GPU; a rank with slack hides it, the critical one
    does not, so one fixed GPU would be biased).

    The slow GPU (a compute slowdown) is measured on the ideal network, the exact fast path (with
    ``sim.network = "shared"`` it moves the ratio by well under 1% in our checks, and costs an event
    simulation per GPU); the degraded link under ``sim``'s own network (on the shared network with
    :data:`SHARED_LINK_SAMPLES` GPUs). Both against the same plan without the run's own stragglers."""
    from dataclasses import replace

    from dcpsim.sim.variability import Faults

    def makespan(s) -> float:
        return s.simulate(plan, validate=False, rng=np.random.default_rng(0)).timeline.makespan_s

    slow = link = 1.0
    if slow_gpu_slowdown > 1.0:
        ideal = replace(sim.settings, network="ideal")
        base = makespan(sim.variant(settings=ideal))
        slow = float(np.mean([makespan(sim.variant(settings=ideal,
                                                   faults=Faults(np.array([g]), float(slow_gpu_slowdown), None)))
                              for g in episode_gpus(sim.topology, samples)])) / base
    if degraded_link_scale < 1.0:
        k = min(samples, SHARED_LINK_SAMPLES) if sim.network.uses_flows else samples
        base = makespan(sim.variant())
        link = float(np.mean([makespan(sim.variant(topology=replace(sim.topology, degraded_gpu=int(g),
                                                                    degraded_link_scale=float(degraded_link_scale))))
                              for g in episode_gpus(sim.topology, k)]))
        link /= base
    return slow, link
