"""The engine base class: how one iteration's ops are put on a timeline.

An engine is a small subclass of :class:`Engine` with two hooks, registered
by name in :data:`dcpsim.sim.engines.ENGINES` (``sim.engine``):

* :meth:`Engine.supports` — whether it can run a network model (a model
  whose transfers are flows, ``NetworkModel.uses_flows``, needs events);
* :meth:`Engine.run` — the :class:`~dcpsim.sim.engine.IterationTimeline` of
  one iteration from its durations, group table and pipeline schedule.

Every engine gives the same finish times for what both can run (the fast
path is tested against the event simulation).
"""

from __future__ import annotations

from typing import Any, ClassVar


class Engine:
    """Evaluates one iteration (see the module docstring for the hooks)."""

    name: ClassVar[str] = ""

    @classmethod
    def supports(cls, network: type) -> bool:
        """Whether this engine runs the network model class ``network`` (a
        :class:`~dcpsim.sim.networks.base.NetworkModel` subclass)."""
        return True

    def run(self, sim: Any, work: Any, table: Any, sched: Any) -> Any:
        """The :class:`~dcpsim.sim.engine.IterationTimeline` of one iteration from its
        :class:`~dcpsim.sim.durations.IterationWork`, :class:`~dcpsim.sim.graph.GroupTable` and pipeline
        schedule; ``sim`` (a :class:`~dcpsim.sim.ClusterSimulator`) gives the gradient synchronisation
        (``sim.sync``), the settings and the network model."""
        raise NotImplementedError
