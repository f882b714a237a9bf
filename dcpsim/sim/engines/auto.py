"""``auto``: the fast path whenever it can run the network, else the event simulation."""

from __future__ import annotations

from dcpsim.sim.engine import IterationTimeline
from dcpsim.sim.engines.base import Engine
from dcpsim.sim.engines.events import EventEngine
from dcpsim.sim.engines.fast import FastEngine


class AutoEngine(Engine):
    """Picks :class:`FastEngine` when it supports the simulator's network model, else :class:`EventEngine`."""

    name = "auto"

    def run(self, sim, work, table, sched) -> IterationTimeline:
        engine = FastEngine() if FastEngine.supports(type(sim.network)) else EventEngine()
        return engine.run(sim, work, table, sched)
