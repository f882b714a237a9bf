"""Seeded variability: kernel-time noise, straggler GPUs and one degraded link.

All draws come from ``numpy.random.Generator`` streams the caller passes, so
one seed gives one result. With every knob at its neutral value (``noise_cv =
0``, ``straggler_fraction = 0`` or ``straggler_slowdown = 1``,
``degraded_link_scale = 1``) nothing is drawn and nothing changes.

* Kernel noise: each group op's time (forward or backward of one CP group on
  one stage) is multiplied by a log-normal factor of mean 1 and coefficient of
  variation ``noise_cv`` (σ² = ln(1 + cv²), μ = −σ²/2). The ranks of a group
  run in lock-step (their CP ring and TP collectives synchronise them), so one
  draw per group op.
* Stragglers: ``round(fraction · GPUs)`` GPUs, chosen once per run, run every
  op ``straggler_slowdown`` times slower; a group runs at its slowest member.
* Degraded link: one GPU's network link (chosen once per run) has its
  bandwidth multiplied by ``degraded_link_scale``; see
  :class:`~dcpsim.sim.topology.Topology` for what it slows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Faults:
    """GPUs that are slow for the whole run."""

    straggler_gpus: np.ndarray
    straggler_slowdown: float
    degraded_gpu: int | None


def sample_faults(gpus: int, *, straggler_fraction: float, straggler_slowdown: float,
                  degraded_link_scale: float, rng: np.random.Generator) -> Faults:
    """Choose straggler GPUs and the degraded link's GPU (nothing drawn when disabled)."""
    n_strag = int(round(straggler_fraction * gpus)) if straggler_slowdown > 1.0 else 0
    strag = np.sort(rng.choice(gpus, size=n_strag, replace=False)) if n_strag else np.zeros(0, dtype=np.int64)
    degraded = int(rng.integers(gpus)) if degraded_link_scale < 1.0 else None
    return Faults(strag.astype(np.int64), float(straggler_slowdown), degraded)


def lognormal_factors(cv: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray | None:
    """Multipliers of mean 1 and coefficient of variation ``cv`` (``None`` when ``cv == 0``)."""
    if cv <= 0:
        return None
    sigma2 = np.log1p(cv * cv)
    return rng.lognormal(mean=-sigma2 / 2.0, sigma=np.sqrt(sigma2), size=shape)


def slice_any(flag: np.ndarray, start: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Whether any of ``flag[start:start+size]`` is set, for many slices at once."""
    if not flag.any():
        return np.zeros(np.broadcast(start, size).shape, dtype=bool)
    c = np.concatenate([[0], np.cumsum(flag.astype(np.int64))])
    return (c[start + size] - c[start]) > 0
