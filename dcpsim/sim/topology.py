"""Cluster topology: where every rank sits and which links its groups cross.

GPUs are numbered 0..N−1 and fill nodes in order (``gpus_per_node`` per
node); NVLink domains are ``nvlink_domain_gpus`` consecutive GPUs (8 on an
HGX node, 72 on an NVL72 rack); pods of ``pod_gpus`` consecutive GPUs have
full bisection bandwidth inside and ``oversubscription``-times less towards
other pods (``pod_gpus = 0``: one flat fabric).

Ranks follow Megatron's order tp-cp-dp-pp (TP fastest, then CP, DP, PP), so
stage-rank ``r`` (0..DP·CP−1, CP fastest) of pipeline stage ``p`` with TP rank
``t`` is GPU ``t + tp·r + tp·dp·cp·p``. A CP group is the aligned slice of
stage ranks ``[start, start+size)``; it covers the GPUs
``[tp·(start + R·p), tp·(start + size + R·p))`` with ``R = dp·cp``.

Network bandwidth factors (multiplying the network bandwidth, ≤ 1):
``network_scale`` for every network transfer, ``1/oversubscription`` for
transfers that leave a pod, and ``degraded_link_scale`` for transfers that
touch the NIC of the one degraded GPU (``degraded_gpu``; a ring or a
collective runs at its slowest hop, so the whole group is slowed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.hardware.placement import check_tp_in_domain, crosses_domain, group_gpu_range, group_spans_domain


@dataclass(frozen=True)
class Topology:
    """GPU placement of one job (sizes in GPUs; factors are bandwidth multipliers)."""

    tp: int
    pp: int
    dp: int
    cp: int
    gpus_per_node: int = 8
    nvlink_domain_gpus: int = 8
    pod_gpus: int = 0
    oversubscription: float = 1.0
    network_scale: float = 1.0
    degraded_gpu: int | None = None
    degraded_link_scale: float = 1.0
    vp: int = 1

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "dp", "cp", "gpus_per_node", "nvlink_domain_gpus", "vp"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"topology.{f}", v, "a positive integer")
        check_tp_in_domain(int(self.tp), int(self.nvlink_domain_gpus))
        if self.pod_gpus < 0:
            raise ConfigError("hardware.pod_gpus", self.pod_gpus, "0 (flat fabric) or a positive number of GPUs")
        if self.oversubscription < 1.0:
            raise ConfigError("hardware.oversubscription", self.oversubscription, ">= 1")
        if not 0.0 < self.network_scale:
            raise ConfigError("hardware.network_scale", self.network_scale, "> 0")
        if not 0.0 < self.degraded_link_scale <= 1.0:
            raise ConfigError("sim.degraded_link_scale", self.degraded_link_scale, "in (0, 1]")
        if self.degraded_gpu is not None and not 0 <= self.degraded_gpu < self.gpus:
            raise ConfigError("topology.degraded_gpu", self.degraded_gpu, f"a GPU id in 0..{self.gpus - 1}")

    # ----------------------------------------------------------- sizes
    @property
    def ranks_per_stage(self) -> int:
        """DP×CP ranks in one pipeline stage (R)."""
        return self.dp * self.cp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    def gpu_id(self, stage, stage_rank, tp_rank=0) -> np.ndarray:
        """GPU id of (pipeline stage, stage rank, TP rank) in Megatron order (vectorised)."""
        stage = np.asarray(stage, dtype=np.int64)
        stage_rank = np.asarray(stage_rank, dtype=np.int64)
        return np.asarray(tp_rank, dtype=np.int64) + self.tp * stage_rank + self.tp * self.ranks_per_stage * stage

    # -------------------------------------------------------- CP groups
    def _gpu_span(self, stage: int, start, size) -> tuple[np.ndarray, np.ndarray]:
        return group_gpu_range(start, size, tp=self.tp, ranks_per_stage=self.ranks_per_stage, stage=stage)

    def group_spans_network(self, stage: int, start, size) -> np.ndarray:
        """Whether CP group(s) ``[start, start+size)`` of ``stage`` leave one NVLink domain."""
        return group_spans_domain(start, size, tp=self.tp, ranks_per_stage=self.ranks_per_stage,
                                  domain_gpus=self.nvlink_domain_gpus, stage=stage)

    def stage_class(self, stage: int) -> tuple[int, int, int]:
        """Stages of one class have the same :meth:`group_spans_network` and :meth:`group_network_factor` for
        every group: their first GPUs lie the same distance into an NVLink domain and into a pod (floor
        divisions of GPU ids shifted by whole domains and pods shift alike), and neither holds the degraded GPU
        (the stage itself is its class when a degraded link is set)."""
        first = self.tp * self.ranks_per_stage * int(stage)
        degraded = self.degraded_gpu is not None and self.degraded_link_scale < 1.0
        return first % self.nvlink_domain_gpus, first % self.pod_gpus if self.pod_gpus else 0, stage if degraded else -1

    def group_network_factor(self, stage: int, start, size) -> np.ndarray:
        """Network bandwidth factor of CP group(s) of ``stage`` (only meaningful where they span the network)."""
        first, last = self._gpu_span(stage, start, size)
        f = np.full(first.shape, float(self.network_scale))
        if self.pod_gpus:
            f = np.where(first // self.pod_gpus != last // self.pod_gpus, f / self.oversubscription, f)
        if self.degraded_gpu is not None and self.degraded_link_scale < 1.0:
            hit = (first <= self.degraded_gpu) & (self.degraded_gpu <= last)
            f = np.where(hit, f * self.degraded_link_scale, f)
        return f

    # ------------------------------------------------- pipeline transfers
    @property
    def n_links(self) -> int:
        """Pipeline links: stage ``p`` to ``p + 1`` for ``p < pp − 1``, plus the wrap-around from the last
        stage to the first (link ``pp − 1``) when an interleaved schedule (``vp > 1``) uses it."""
        return self.pp - 1 + (1 if self.vp > 1 and self.pp > 1 else 0)

    def p2p_links(self, stage: int) -> tuple[np.ndarray, np.ndarray]:
        """Per stage rank: whether the activation send of link ``stage`` uses the network, and its factor.

        Link ``p < pp − 1`` goes from stage ``p`` to ``p + 1``; link ``pp − 1`` is
        the interleaved schedule's wrap-around from the last stage to the first.
        Each TP rank sends to the same (tp, cp, dp) coordinates on the other
        stage (``tp·R`` GPUs per stage apart); the pair crosses the network when
        the two GPUs sit in different NVLink domains. A stage rank counts as
        crossing if any of its TP ranks does.
        """
        r = np.arange(self.ranks_per_stage, dtype=np.int64)
        d = self.nvlink_domain_gpus
        step = self.tp * self.ranks_per_stage * (1 if stage < self.pp - 1 else -(self.pp - 1))
        cross = np.zeros(r.size, dtype=bool)
        factor = np.full(r.size, float(self.network_scale))
        for t in range(self.tp):
            a = self.gpu_id(stage, r, t)
            b = a + step
            cross |= crosses_domain(a, b, d)
            if self.pod_gpus:
                factor = np.where(a // self.pod_gpus != b // self.pod_gpus,
                                  np.minimum(factor, self.network_scale / self.oversubscription), factor)
            if self.degraded_gpu is not None and self.degraded_link_scale < 1.0:
                hit = (a == self.degraded_gpu) | (b == self.degraded_gpu)
                factor = np.where(hit, factor * self.degraded_link_scale, factor)
        return cross, factor

    # ---------------------------------------------------- DP collectives
    def stage_dp_group(self, stage: int) -> tuple[int, int, float]:
        """(ranks, NVLink domains spanned, network factor) of the DP×CP gradient group of ``stage``.

        The group holds the R stage ranks with one TP rank; the worst TP rank
        is reported (they run concurrently and finish together).
        """
        # TP rank t's GPUs: first + k·tp, k < R (gpu_id), an increasing run: its distinct domains (pods) are every
        # one from the first's to the last's when tp <= the domain size, else one per GPU
        R, tp, d = self.ranks_per_stage, self.tp, self.nvlink_domain_gpus
        domains = 1
        factor = float(self.network_scale)
        for t in range(tp):
            first = t + tp * R * stage
            last = first + tp * (R - 1)
            domains = max(domains, int(R if tp > d else last // d - first // d + 1))
            f = float(self.network_scale)
            if self.pod_gpus and first // self.pod_gpus != last // self.pod_gpus:
                f /= self.oversubscription
            deg = self.degraded_gpu
            if deg is not None and self.degraded_link_scale < 1.0 and first <= deg <= last and (deg - first) % tp == 0:
                f *= self.degraded_link_scale
            factor = min(factor, f)
        return R, domains, factor

    def describe(self) -> dict:
        return {
            "gpus": self.gpus,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "nvlink_domain_gpus": self.nvlink_domain_gpus,
            "pod_gpus": self.pod_gpus,
            "oversubscription": self.oversubscription,
            "network_scale": self.network_scale,
            "degraded_gpu": self.degraded_gpu,
            "degraded_link_scale": self.degraded_link_scale,
            "vp": self.vp,
            "rank_order": "tp-cp-dp-pp",
        }
