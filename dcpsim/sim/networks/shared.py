"""The shared network: transfers that leave an NVLink domain are flows sharing NICs and pod uplinks.

Pipeline transfers, the bucketed gradient reduce-scatter and parameter
all-gather, and CP rings (paced by their attention) that leave the NVLink
domain run as max-min fair flows on a :class:`~dcpsim.sim.network.Fabric`
(the flow solver and the fabric are in :mod:`dcpsim.sim.network`). The fabric
applies pods and the degraded NIC as link capacities, so CP groups are priced
at the NIC's own speed (``network_scale`` only). Needs the event engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dcpsim.sim.network import Fabric, PipelineTransfers
from dcpsim.sim.networks.base import NetworkModel
from dcpsim.sim.topology import Topology


class SharedNetwork(NetworkModel):
    """Transfers leaving an NVLink domain share the fabric's links as flows while the iteration runs."""

    name = "shared"
    uses_flows = True

    def __init__(self, topology: Topology) -> None:
        super().__init__(topology)
        t = topology
        self.fabric = Fabric(gpus=t.gpus, pod_gpus=t.pod_gpus, oversubscription=t.oversubscription,
                             degraded_gpu=t.degraded_gpu, degraded_link_scale=t.degraded_link_scale)

    def cp_factor(self, stage: int, starts: np.ndarray, cps: np.ndarray) -> float:
        return float(self.topology.network_scale)

    def stage_class(self, stage: int) -> str:
        return "every stage"  # one factor for every group

    def flows(self, env: Any, work: Any, n_groups: int) -> PipelineTransfers:
        return PipelineTransfers(env, self.fabric, self.topology, work, n_groups)
