"""A capacity plan's units of work: one :class:`Task` per (GPU type, size, policy), the settings all share.

Both are frozen and picklable: a task and its :class:`TaskSettings` are what a worker process receives
(:func:`dcpsim.planning.capacity.run_task`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dcpsim.planning.inputs import DataSpec
from dcpsim.planning.space import SearchSpace
from dcpsim.run.config import RunConfig


@dataclass(frozen=True)
class Task:
    """One search: GPU type, price (per GPU-hour), size (GPUs), policy, global batch (sequences)."""

    gpu: str
    price: float
    gpus: int
    policy: str
    gbs: int


@dataclass(frozen=True)
class TaskSettings:
    """What every task of one plan shares: the base run configuration (its ``sim.*`` the failures, network
    and long run), the data, the layout search space, layouts simulated per search, throughput seeds of the
    best layout, tokens to train on, and the simulation function (``None``: ``run_simulation``)."""

    base: RunConfig
    data: DataSpec
    space: SearchSpace
    simulate: int
    seeds: int
    tokens: float = 1e12
    runner: Callable[..., Any] | None = None
