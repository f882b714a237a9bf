"""The network-model base class: how transfers that leave an NVLink domain use the network.

A network model is a small subclass of :class:`NetworkModel` with two hooks,
registered by name in :data:`dcpsim.sim.networks.NETWORKS` (``sim.network``):

* :meth:`NetworkModel.cp_factor` — the bandwidth factor at which the cost
  model prices the CP communication of groups that leave their NVLink domain
  (the durations are computed with numpy before the iteration runs);
* :meth:`NetworkModel.flows` — for a model whose transfers share links while
  the iteration runs (``uses_flows = True``), the flows object the event
  engine drives (:class:`~dcpsim.sim.network.PipelineTransfers`); ``None``
  keeps every transfer at its precomputed time.

A model with ``uses_flows`` needs the event engine (an engine's
:meth:`~dcpsim.sim.engines.base.Engine.supports` says which it runs), and
the durations give it each CP ring's traffic and window.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dcpsim.sim.topology import Topology


class NetworkModel:
    """One cluster's network for the simulator (see the module docstring for the hooks)."""

    name: ClassVar[str] = ""
    uses_flows: ClassVar[bool] = False  # transfers run as flows that share links (needs the event engine)

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def cp_factor(self, stage: int, starts: np.ndarray, cps: np.ndarray) -> np.ndarray | float:
        """Network bandwidth factor (× the profile's) per CP group of pipeline stage ``stage`` (groups starting
        at stage rank ``starts`` with sizes ``cps``), applied to the groups that leave their NVLink domain."""
        raise NotImplementedError

    def stage_class(self, stage: int) -> object | None:
        """A key such that stages of equal keys and equal :meth:`Topology.stage_class
        <dcpsim.sim.topology.Topology.stage_class>` have the same :meth:`cp_factor` for every group (None: none
        shared, each stage asked)."""
        return None

    def flows(self, env: Any, work: Any, n_groups: int) -> Any:
        """The flows of one iteration in SimPy environment ``env`` (None: transfers keep their times)."""
        return None
