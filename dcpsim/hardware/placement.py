"""Where a CP group's GPUs sit, and whether it leaves one NVLink domain: the one place this is written.

Ranks follow Megatron's order tp-cp-dp-pp (TP fastest, then CP, DP, PP), so
stage rank ``r`` (0..R−1 with ``R = dp·cp``) of pipeline stage ``p`` with TP
rank ``t`` is GPU ``t + tp·r + tp·R·p``. A CP group is the slice of stage
ranks ``[start, start+size)``; on stage ``p`` it covers the GPUs
``[tp·(start + R·p), tp·(start + size + R·p))``. NVLink domains are
``domain_gpus`` consecutive GPUs; a group whose first and last GPU lie in
different domains talks over the network.

When ``tp·R`` is not a multiple of the domain size, the same stage-rank slice
sits differently on different stages (dp 12, pp 2, domain 8: ranks [0, 8) are
GPUs 0–7 on stage 0, one domain, but GPUs 12–19 on stage 1, two domains), so
the answer depends on the stage. :func:`group_spans_domain` answers for one
stage (the simulator, which times every stage); with ``stage=None`` it answers
whether the group leaves a domain on *any* stage (the policies, which give a
group one cost for every stage: in 1F1B the slowest stage sets the pace).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dcpsim.errors import ConfigError

__all__ = ["check_tp_in_domain", "crosses_domain", "group_gpu_range", "group_spans_domain", "stage_offsets"]


def crosses_domain(a, b, domain_gpus: int) -> np.ndarray:
    """Whether GPUs ``a`` and ``b`` (ids, vectorised) sit in different NVLink domains: the one test of it."""
    return (np.asarray(a) // domain_gpus) != (np.asarray(b) // domain_gpus)


def group_gpu_range(start, size, *, tp: int, ranks_per_stage: int, stage=0) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) GPU id (inclusive, int64) of TP rank 0..tp−1 of CP group(s) ``[start, start+size)`` on ``stage``."""
    start = np.asarray(start, dtype=np.int64)
    size = np.asarray(size, dtype=np.int64)
    first = tp * (start + ranks_per_stage * np.asarray(stage, dtype=np.int64))
    return first, first + tp * size - 1


@lru_cache(maxsize=256)
def stage_offsets(*, tp: int, ranks_per_stage: int, pp: int, domain_gpus: int) -> tuple[int, ...]:
    """Distinct positions (GPUs, modulo the domain size) at which the pipeline stages start (sorted)."""
    step = tp * ranks_per_stage
    return tuple(sorted({(step * p) % domain_gpus for p in range(min(pp, domain_gpus))}))


def group_spans_domain(start, size, *, tp: int, ranks_per_stage: int, domain_gpus: int,
                       stage=0, pp: int = 1) -> np.ndarray:
    """Whether CP group(s) ``[start, start+size)`` leave one NVLink domain (vectorised over start/size).

    ``stage``: the pipeline stage asked about; ``None``: any of the ``pp``
    stages (only the distinct stage offsets modulo the domain are tried).
    """
    if stage is not None:
        first, last = group_gpu_range(start, size, tp=tp, ranks_per_stage=ranks_per_stage, stage=stage)
        return crosses_domain(first, last, domain_gpus)
    first, last = group_gpu_range(start, size, tp=tp, ranks_per_stage=ranks_per_stage, stage=0)
    out = np.zeros(np.broadcast(first, last).shape, dtype=bool)
    for off in stage_offsets(tp=tp, ranks_per_stage=ranks_per_stage, pp=pp, domain_gpus=domain_gpus):
        out |= crosses_domain(first + off, last + off, domain_gpus)
    return out


def check_tp_in_domain(tp: int, domain_gpus: int) -> None:
    """Refuse a TP size whose groups would leave an NVLink domain of ``domain_gpus`` GPUs.

    TP collectives are priced at NVLink speed inside op durations (:mod:`dcpsim.cost.model`); Megatron
    places TP ranks on consecutive GPUs, so every TP group stays inside one domain only when TP divides
    the domain (TP 6 on 8-GPU domains puts the second group on GPUs 6-11, across two domains).
    """
    if domain_gpus < tp:
        raise ConfigError("hardware.nvlink_domain_gpus", domain_gpus,
                          f">= parallel.tp ({tp}): TP groups are modelled at NVLink speed inside one domain")
    if domain_gpus % tp:
        raise ConfigError("parallel.tp", tp, f"a divisor of the NVLink domain ({domain_gpus} GPUs, "
                          "hardware.nvlink_domain_gpus): TP groups are modelled at NVLink speed, so each must "
                          "stay inside one domain")
