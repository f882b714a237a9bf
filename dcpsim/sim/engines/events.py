"""The event engine: SimPy orders the ops at decision points (:mod:`dcpsim.sim.engine`); runs every network."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from dcpsim.sim.engine import IterationTimeline, run_iteration
from dcpsim.sim.engines.base import Engine
from dcpsim.sim.graph import build_graph


class EventEngine(Engine):
    """A SimPy event simulation of the iteration's dependency graph."""

    name = "events"

    def run(self, sim, work, table, sched) -> IterationTimeline:
        s = sim.settings
        graph = build_graph(table, sched, work.virtual()[2])
        with fewer_collections():
            return run_iteration(work, graph, sim.sync, overlap_grad_sync=s.overlap_grad_sync,
                                 overlap_param_gather=s.overlap_param_gather, network=sim.network,
                                 param_gather_launch=s.param_gather_launch)


YOUNG_GC_THRESHOLD = 100_000
"""Container allocations between the cyclic garbage collector's young collections during an event
simulation (Python's default: 700)."""


@contextlib.contextmanager
def fewer_collections(young: int = YOUNG_GC_THRESHOLD) -> Iterator[None]:
    """Python's cyclic garbage collector collects its youngest generation every ``young`` container allocations
    (net) inside the block instead of every 700, and the older ones proportionally less often; the previous
    thresholds come back after it. An event simulation allocates millions of events, flows and closures and
    keeps hundreds of thousands alive, so the default thresholds walk that live heap again and again (about a
    sixth of a 16,384-GPU shared-network iteration's CPU time). Changes no result: the collector only frees
    unreachable cycles. Left alone when the collector is off or its threshold is already higher."""
    old = gc.get_threshold()
    if not gc.isenabled() or old[0] == 0 or old[0] >= young:
        yield
        return
    gc.set_threshold(young, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
