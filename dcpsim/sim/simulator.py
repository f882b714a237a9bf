"""One object that simulates plans on one cluster: durations (numpy) + graph + SimPy engine.

Planning time (``Plan.planning_time_s``, the policy's *modelled* planning
time: deterministic, see :meth:`dcpsim.policies.Policy.modelled_planning_s`)
enters as ``planning``:

* ``hidden``: the plan for batch k+1 is computed while batch k trains
  (Megatron's zero-overhead mode, REFERENCE §1); iteration k stalls by
  ``max(0, planning_k − T_{k−1})``. The first plan is made before training
  starts (like the data loader's prefetch), so iteration 0 does not stall.
* ``stall``: every iteration waits for its plan.
* ``ignore``: planning costs nothing.
* ``sampler``: Megatron PR #2959's forked prefetching sampler (:mod:`dcpsim.sim.sampler`); the run
  loop computes each iteration's stall and passes it to :meth:`ClusterSimulator.simulate`.

No wall-clock time measured on the host enters a simulated time: one seed
gives one result in every mode.
"""

from __future__ import annotations

import time

import numpy as np

from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError
from dcpsim.pipeline import pipeline_schedule
from dcpsim.policies.plan import Plan
from dcpsim.sim.durations import DurationModel
from dcpsim.sim.engines import ENGINES
from dcpsim.sim.graph import build_group_table
from dcpsim.sim.metrics import IterationRecord
from dcpsim.sim.networks import get_network
from dcpsim.sim.settings import SimSettings
from dcpsim.sim.topology import Topology
from dcpsim.sim.variability import Faults


def check_topology(cost: CostModel, topology: Topology) -> None:
    """Refuse a topology whose TP, PP or ranks per stage are not the cost model's."""
    if topology.tp != cost.tp or topology.pp != cost.pp or topology.ranks_per_stage != cost.dp_cp:
        raise ConfigError("topology", topology.describe(),
                          f"tp={cost.tp}, pp={cost.pp}, dp*cp={cost.dp_cp} as in the cost model")


class ClusterSimulator:
    """Simulates iterations of plans for one (cost model, topology, faults, settings) setting."""

    def __init__(self, cost: CostModel, topology: Topology, *, faults: Faults | None = None,
                 settings: SimSettings | None = None, host_flags=None) -> None:
        self.cost = cost
        # dcpsim.cost.host.StepFlags: price the host timeline with the profile's [host] costs (None: device only;
        # dcpsim.run.single.build_simulator passes the run's [step] flags)
        self.host_flags = host_flags
        self.topology = topology
        self.settings = settings or SimSettings()
        check_topology(cost, topology)
        self.network = get_network(self.settings.network, topology)
        self.engine = ENGINES.get(self.settings.engine)()
        self.durations = DurationModel(cost, topology, faults=faults, settings=self.settings, host_flags=host_flags,
                                       network=self.network)
        self.sync = self.durations.sync_cost()

    def variant(self, *, topology: Topology | None = None, settings: SimSettings | None = None,
                faults: Faults | None = None) -> ClusterSimulator:
        """A simulator of the same cost model and host flags on ``topology`` with ``settings`` (default: this
        one's) and ``faults`` (default: none; a variant does not inherit this simulator's sampled faults)."""
        return ClusterSimulator(self.cost, topology or self.topology, faults=faults,
                                settings=settings or self.settings, host_flags=self.host_flags)

    def planning_stall_s(self, planning_time_s: float, index: int, previous_iteration_s: float | None) -> float:
        mode = self.settings.planning
        if mode == "ignore":
            return 0.0
        if mode == "stall":
            return float(planning_time_s)
        if index == 0 or previous_iteration_s is None:
            return 0.0
        return max(0.0, float(planning_time_s) - previous_iteration_s)

    def simulate(self, plan: Plan, *, index: int = 0, offset_s: float = 0.0, previous_iteration_s: float | None = None,
                 rng: np.random.Generator | None = None, validate: bool = True,
                 planning_stall_s: float | None = None) -> IterationRecord:
        """Simulate one iteration of ``plan``; ``rng`` feeds the kernel noise (needed when ``noise_cv > 0``).

        ``planning_stall_s`` (seconds) overrides the stall the planning mode gives (the run loop's
        ``sampler`` timeline)."""
        lay = plan.layout
        topo = self.topology
        if (lay.tp, lay.pp, lay.ranks_per_stage, lay.vp) != (topo.tp, topo.pp, topo.ranks_per_stage, topo.vp):
            raise ConfigError("plan.layout", lay.to_dict(), f"a layout matching the cluster ({self.topology.describe()})")
        if not plan.steps:
            raise ConfigError("plan.steps", 0, "at least one microbatch step (a plan without steps cannot be simulated)")
        t0 = time.perf_counter()
        arrays = plan.arrays()  # the plan's groups read once, for the check, the group table and the durations
        if validate:
            t_check = time.perf_counter()
            plan.check(arrays)
            t0 += time.perf_counter() - t_check  # sim_wall_s (host information) leaves the check out
        table = build_group_table(plan, arrays)
        sched = pipeline_schedule(self.topology.pp, table.n_steps, self.topology.vp)  # InfeasibleError: VP rule
        work = self.durations.work(plan, table, noise_cv=self.settings.noise_cv, rng=rng, arrays=arrays)
        timeline = self.engine.run(self, work, table, sched)
        wall = time.perf_counter() - t0
        return IterationRecord(
            index=index,
            offset_s=offset_s,
            planning_stall_s=(float(planning_stall_s) if planning_stall_s is not None
                              else self.planning_stall_s(plan.planning_time_s, index, previous_iteration_s)),
            planning_time_s=float(plan.planning_time_s),
            work=work,
            timeline=timeline,
            sync=self.sync,
            policy=plan.policy,
            dropped=len(plan.dropped),
            sim_wall_s=wall,
        )
