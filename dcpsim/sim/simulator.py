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

No wall-clock time measured on the host enters a simulated time: one seed
gives one result in every mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from dcpsim.choices import PARAM_GATHER_LAUNCHES
from dcpsim.choices import PLANNING_MODES as _PLANNING_MODES
from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError
from dcpsim.pipeline import pipeline_schedule
from dcpsim.policies.plan import Plan
from dcpsim.sim.durations import DurationModel
from dcpsim.sim.engine import run_iteration
from dcpsim.sim.fastpath import fast_iteration
from dcpsim.sim.metrics import IterationRecord
from dcpsim.sim.network import NETWORKS, Fabric, PipelineTransfers
from dcpsim.sim.schedule import build_graph, build_group_table
from dcpsim.sim.topology import Topology
from dcpsim.sim.variability import Faults

PLANNING_MODES = _PLANNING_MODES  # defined once in dcpsim.choices
ENGINES = ("auto", "events", "fast")
EXCHANGES = ("none", "async", "sync")


@dataclass(frozen=True)
class SimOptions:
    """Simulation switches (see :class:`~dcpsim.run.config.SimSection` for their meaning)."""

    overlap_grad_sync: bool = True
    noise_cv: float = 0.0
    planning: str = "hidden"
    grad_reduce_bytes_per_param: int = 4
    fp8_param_gather: bool = True
    overlap_param_gather: bool = False
    param_gather_launch: str = "first_forward"
    grad_bucket_params: int = 0
    engine: str = "auto"
    network: str = "ideal"
    dynamic_cp_exchange: str = "none"
    cp_switch_s: float = 0.0
    microbatch_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.planning not in PLANNING_MODES:
            raise ConfigError("sim.planning", self.planning, f"one of {PLANNING_MODES}")
        if self.engine not in ENGINES:
            raise ConfigError("sim.engine", self.engine, f"one of {ENGINES}")
        if not 0 <= self.noise_cv <= 1:  # also refuses nan
            raise ConfigError("sim.noise_cv", self.noise_cv, "a finite number >= 0 and <= 1")
        if self.network not in NETWORKS:
            raise ConfigError("sim.network", self.network, f"one of {NETWORKS}")
        if self.network == "shared" and self.engine == "fast":
            raise ConfigError("sim.engine", self.engine, '"events" or "auto" with sim.network = "shared" '
                              "(flows that share links need the event simulation)")
        if self.dynamic_cp_exchange not in EXCHANGES:
            raise ConfigError("sim.dynamic_cp_exchange", self.dynamic_cp_exchange, f"one of {EXCHANGES}")
        if self.param_gather_launch not in PARAM_GATHER_LAUNCHES:
            raise ConfigError("sim.param_gather_launch", self.param_gather_launch, f"one of {PARAM_GATHER_LAUNCHES}")
        if not self.cp_switch_s >= 0:
            raise ConfigError("sim.cp_switch_s", self.cp_switch_s, ">= 0 seconds")


class ClusterSimulator:
    """Simulates iterations of plans for one (cost model, topology, faults, options) setting."""

    def __init__(self, cost: CostModel, topology: Topology, *, faults: Faults | None = None,
                 options: SimOptions | None = None, host_flags=None) -> None:
        self.cost = cost
        self.topology = topology
        self.options = options or SimOptions()
        if topology.tp != cost.tp or topology.pp != cost.pp or topology.ranks_per_stage != cost.dp_cp:
            raise ConfigError("topology", topology.describe(),
                              f"tp={cost.tp}, pp={cost.pp}, dp*cp={cost.dp_cp} as in the cost model")
        self.durations = DurationModel(cost, topology, faults=faults,
                                       grad_reduce_bytes_per_param=self.options.grad_reduce_bytes_per_param,
                                       fp8_param_gather=self.options.fp8_param_gather,
                                       grad_bucket_params=self.options.grad_bucket_params,
                                       dynamic_cp_exchange=self.options.dynamic_cp_exchange,
                                       cp_switch_s=self.options.cp_switch_s,
                                       microbatch_overhead_s=self.options.microbatch_overhead_s,
                                       shared_network=self.options.network == "shared",
                                       host_flags=host_flags)
        self.sync = self.durations.sync_cost()

    def uses_events(self) -> bool:
        """Whether iterations run as a SimPy event simulation (``engine = "events"``) or on the exact fast
        path (``"fast"``; ``"auto"`` picks it whenever every duration is known before the iteration starts,
        which holds for everything modelled so far)."""
        return self.options.engine == "events" or self.options.network == "shared"

    def _network(self):
        """Factory of the shared network's pipeline transfers (``None`` for the ideal network)."""
        if self.options.network != "shared":
            return None
        t = self.topology
        fabric = Fabric(gpus=t.gpus, pod_gpus=t.pod_gpus, oversubscription=t.oversubscription,
                        degraded_gpu=t.degraded_gpu, degraded_link_scale=t.degraded_link_scale)
        return lambda env, work, n_groups: PipelineTransfers(env, fabric, t, work, n_groups)

    def planning_stall_s(self, planning_time_s: float, index: int, previous_iteration_s: float | None) -> float:
        mode = self.options.planning
        if mode == "ignore":
            return 0.0
        if mode == "stall":
            return float(planning_time_s)
        if index == 0 or previous_iteration_s is None:
            return 0.0
        return max(0.0, float(planning_time_s) - previous_iteration_s)

    def simulate(self, plan: Plan, *, index: int = 0, offset_s: float = 0.0, previous_iteration_s: float | None = None,
                 rng: np.random.Generator | None = None, validate: bool = True) -> IterationRecord:
        """Simulate one iteration of ``plan``; ``rng`` feeds the kernel noise (needed when ``noise_cv > 0``)."""
        lay = plan.layout
        topo = self.topology
        if (lay.tp, lay.pp, lay.ranks_per_stage, lay.vp) != (topo.tp, topo.pp, topo.ranks_per_stage, topo.vp):
            raise ConfigError("plan.layout", lay.to_dict(), f"a layout matching the cluster ({self.topology.describe()})")
        if not plan.steps:
            raise ConfigError("plan.steps", 0, "at least one microbatch step (a plan without steps cannot be simulated)")
        if validate:
            plan.validate()
        t0 = time.perf_counter()
        table = build_group_table(plan)
        sched = pipeline_schedule(self.topology.pp, table.n_steps, self.topology.vp)  # InfeasibleError: VP rule
        work = self.durations.work(plan, table, noise_cv=self.options.noise_cv, rng=rng)
        if self.uses_events():
            graph = build_graph(table, sched, work.virtual()[2])
            timeline = run_iteration(work, graph, self.sync, overlap_grad_sync=self.options.overlap_grad_sync,
                                     overlap_param_gather=self.options.overlap_param_gather, network=self._network(),
                                     param_gather_launch=self.options.param_gather_launch)
        else:
            timeline = fast_iteration(work, sched, self.sync, overlap_grad_sync=self.options.overlap_grad_sync,
                                      overlap_param_gather=self.options.overlap_param_gather,
                                      param_gather_launch=self.options.param_gather_launch)
        wall = time.perf_counter() - t0
        return IterationRecord(
            index=index,
            offset_s=offset_s,
            planning_stall_s=self.planning_stall_s(plan.planning_time_s, index, previous_iteration_s),
            planning_time_s=float(plan.planning_time_s),
            work=work,
            timeline=timeline,
            sync=self.sync,
            policy=plan.policy,
            dropped=len(plan.dropped),
            sim_wall_s=wall,
        )
