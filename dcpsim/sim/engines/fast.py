"""The fast path: the exact vectorised evaluation of the schedule (:mod:`dcpsim.sim.fastpath`), no events.

It needs every duration before the iteration starts, so it cannot run a
network whose transfers are flows (``NetworkModel.uses_flows``).
"""

from __future__ import annotations

from dcpsim.sim.engine import IterationTimeline
from dcpsim.sim.engines.base import Engine
from dcpsim.sim.fastpath import fast_iteration


class FastEngine(Engine):
    """The schedule evaluated with numpy (same finish times as the event simulation)."""

    name = "fast"

    @classmethod
    def supports(cls, network) -> bool:
        return not network.uses_flows

    def run(self, sim, work, table, sched) -> IterationTimeline:
        s = sim.settings
        return fast_iteration(work, sched, sim.sync, overlap_grad_sync=s.overlap_grad_sync,
                              overlap_param_gather=s.overlap_param_gather, param_gather_launch=s.param_gather_launch)
