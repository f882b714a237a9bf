"""The event engine: SimPy orders the ops at decision points (:mod:`dcpsim.sim.engine`); runs every network."""

from __future__ import annotations

from dcpsim.sim.engine import IterationTimeline, run_iteration
from dcpsim.sim.engines.base import Engine
from dcpsim.sim.graph import build_graph


class EventEngine(Engine):
    """A SimPy event simulation of the iteration's dependency graph."""

    name = "events"

    def run(self, sim, work, table, sched) -> IterationTimeline:
        s = sim.settings
        graph = build_graph(table, sched, work.virtual()[2])
        return run_iteration(work, graph, sim.sync, overlap_grad_sync=s.overlap_grad_sync,
                             overlap_param_gather=s.overlap_param_gather, network=sim.network,
                             param_gather_launch=s.param_gather_launch)
