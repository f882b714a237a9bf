"""Failures, checkpoints and restarts: the share of wall time a long run loses (first-order Young/Daly model).

The analytic check beside capacity planning's long-run simulation (:mod:`dcpsim.planning.evaluate`,
:mod:`dcpsim.sim.longrun`): both read the same inputs, the run configuration's ``sim.gpu_mtbf_h``,
``sim.checkpoint_s``, ``sim.restart_s`` and ``sim.checkpoint_interval_s`` (:meth:`FailureModel.from_settings`),
and every formula lives in :mod:`dcpsim.sim.longrun`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dcpsim.errors import ConfigError
from dcpsim.sim.longrun import (  # one implementation of the MTBF, Young interval and goodput formulas
    LLAMA3_DAYS,
    LLAMA3_GPUS,
    LLAMA3_INTERRUPTIONS,
    checkpoint_interval_s,
    failure_settings,
    first_order_goodput,
    llama3_gpu_mtbf_hours,
    system_mtbf_s,
)

__all__ = ["FailureModel", "llama3_gpu_mtbf_hours", "LLAMA3_DAYS", "LLAMA3_GPUS", "LLAMA3_INTERRUPTIONS"]


@dataclass(frozen=True)
class FailureModel:
    """Failures, checkpoints and restarts (first-order Young/Daly model).

    gpu_mtbf_h:   mean time between failures of one GPU (with its share of host, network, ...), hours;
                  default from the Llama 3 report (:func:`llama3_gpu_mtbf_hours`).
    checkpoint_s: time training stops to write one checkpoint, seconds (assumed 60 s).
    restart_s:    time from a failure to training again (detect, reschedule, load), seconds (assumed 600 s).
    interval_s:   work seconds between checkpoints; ``None`` = Young's optimum.

    With N GPUs the job fails every M = gpu_mtbf_h·3600/N seconds on average.
    Checkpoints every τ = √(2·δ·M) seconds of work (Young's optimum, δ =
    checkpoint_s). Per unit of useful work the job spends δ/τ checkpointing,
    and each failure loses R = restart_s plus on average half a segment
    (τ+δ)/2, so wall = work·(1 + δ/τ) / (1 − (R + (τ+δ)/2)/M) and goodput =
    work / wall (0 when failures come faster than the job can progress).
    """

    gpu_mtbf_h: float = field(default_factory=llama3_gpu_mtbf_hours)
    checkpoint_s: float = 60.0
    restart_s: float = 600.0
    interval_s: float | None = None

    def __post_init__(self) -> None:
        if not self.gpu_mtbf_h > 0:
            raise ConfigError("sim.gpu_mtbf_h", self.gpu_mtbf_h, "a positive number of hours")
        if self.checkpoint_s < 0 or self.restart_s < 0:
            raise ConfigError("sim.checkpoint_s/restart_s", (self.checkpoint_s, self.restart_s), "non-negative seconds")
        if self.interval_s is not None and not self.interval_s > 0:
            raise ConfigError("sim.checkpoint_interval_s", self.interval_s, "a positive number of seconds or 'young'")

    @classmethod
    def from_settings(cls, s) -> FailureModel:
        """The failure model of a run configuration's ``[sim]`` section (``cfg.sim``)."""
        return cls(**failure_settings(s))

    def settings(self) -> dict:
        """This model as run-configuration updates (``sim.*``), the inverse of :meth:`from_settings`."""
        return {"sim.gpu_mtbf_h": self.gpu_mtbf_h, "sim.checkpoint_s": self.checkpoint_s,
                "sim.restart_s": self.restart_s,
                "sim.checkpoint_interval_s": "young" if self.interval_s is None else self.interval_s}

    def system_mtbf_s(self, gpus: int) -> float:
        """Mean time between failures of a job on ``gpus`` GPUs, seconds."""
        return system_mtbf_s(self.gpu_mtbf_h, gpus)

    def checkpoint_interval_s(self, gpus: int) -> float:
        """Work time between checkpoints (Young's optimum unless fixed), seconds."""
        return checkpoint_interval_s(self.interval_s, self.checkpoint_s, self.system_mtbf_s(gpus))

    def goodput(self, gpus: int) -> float:
        """Useful fraction of wall time on ``gpus`` GPUs (0..1)."""
        return first_order_goodput(self.system_mtbf_s(gpus), self.checkpoint_interval_s(gpus),
                                   self.checkpoint_s, self.restart_s)

    def first_order_note(self, gpus: int) -> str:
        """Why the first-order goodput does not apply on ``gpus`` GPUs (its clamped 0 is no figure): the job
        MTBF is no longer than a failure's loss, restart plus half a checkpoint segment."""
        lost_s = self.restart_s + (self.checkpoint_interval_s(gpus) + self.checkpoint_s) / 2.0
        return (f"n/a (job MTBF {self.system_mtbf_s(gpus) / 3600:.2f} h <= restart + half a checkpoint segment, "
                f"{lost_s / 3600:.2f} h; the first-order formula does not apply)")

    def expected_failures(self, gpus: int, wall_s: float) -> float:
        """Expected number of failures in ``wall_s`` seconds of wall time on ``gpus`` GPUs."""
        return wall_s / self.system_mtbf_s(gpus)

    def describe(self) -> dict:
        return {"gpu_mtbf_h": self.gpu_mtbf_h, "checkpoint_s": self.checkpoint_s, "restart_s": self.restart_s,
                "checkpoint_interval_s": "young" if self.interval_s is None else self.interval_s}
