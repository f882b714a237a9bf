"""The ideal network: every transfer at its profile time, contention only through fixed factors.

A CP group that leaves its NVLink domain is priced at the topology's factor
(``network_scale``, ``1/oversubscription`` when it leaves a pod,
``degraded_link_scale`` when it holds the degraded GPU;
:meth:`~dcpsim.sim.topology.Topology.group_network_factor`); transfers never
slow each other down. Runs on either engine.
"""

from __future__ import annotations

import numpy as np

from dcpsim.sim.networks.base import NetworkModel


class IdealNetwork(NetworkModel):
    """Every transfer alone on the network, at the topology's bandwidth factor."""

    name = "ideal"

    def cp_factor(self, stage: int, starts: np.ndarray, cps: np.ndarray) -> np.ndarray:
        return self.topology.group_network_factor(stage, starts, cps)

    def stage_class(self, stage: int) -> str:
        return "topology"  # cp_factor is the topology's group_network_factor: its stage classes
