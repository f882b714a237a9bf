"""The SimPy cluster simulator: GPUs running iteration plans, with metrics.

Layers (each documented in its module):

* :mod:`~dcpsim.sim.topology` — GPUs, nodes, NVLink domains, pods; Megatron
  rank order; which links a group crosses.
* :mod:`~dcpsim.sim.graph` — plan → groups (one entity per CP group and
  pipeline stage) → dependency graph in the op order of :mod:`dcpsim.pipeline`
  (1F1B or interleaved 1F1B).
* :mod:`~dcpsim.sim.durations` — every op's duration with numpy from the cost
  model (one vectorised ``batch_cost`` per link class), transfers, gradient sync.
* :mod:`~dcpsim.sim.variability` — seeded kernel noise, stragglers, a degraded link.
* :mod:`~dcpsim.sim.engine` — SimPy orders the ops (events at decision points only; the parameter
  all-gather's gate in :mod:`~dcpsim.sim.gate`, the stages' sync formulas in :mod:`~dcpsim.sim.stage_sync`);
  :mod:`~dcpsim.sim.fastpath` — the same schedule evaluated exactly with numpy. Both are engines chosen
  by name (``sim.engine``; :mod:`dcpsim.sim.engines`).
* :mod:`dcpsim.sim.networks` — network models chosen by name (``sim.network``: ``ideal``, ``shared``;
  the shared network's transfers in :mod:`~dcpsim.sim.network`, its max-min flows in :mod:`~dcpsim.sim.flownet`).
* :mod:`~dcpsim.sim.metrics` — per-iteration and per-rank accounting, :class:`SimResult`.

Example (a hand-built plan; :func:`dcpsim.run.single.run_simulation` does
this from a :class:`~dcpsim.run.config.RunConfig`)::

    from dcpsim.cost import CostModel
    from dcpsim.sim import ClusterSimulator, Topology
    cost = CostModel.build("h100-sxm", "llama-13b", tp=1, pp=4, dp_cp=8)
    sim = ClusterSimulator(cost, Topology(tp=1, pp=4, dp=4, cp=2))
    record = sim.simulate(plan)          # plan: dcpsim.policies.plan.Plan
    print(record.iteration_time_s)
"""

from dcpsim.sim.durations import DurationModel, IterationWork, SyncCost
from dcpsim.sim.engine import IterationTimeline, SimulationError, run_iteration
from dcpsim.sim.graph import GroupTable, build_graph, build_group_table
from dcpsim.sim.metrics import BREAKDOWN, IterationRecord, SimResult, iteration_row, rank_arrays, rank_rows
from dcpsim.sim.settings import PLANNING_MODES, SimSettings
from dcpsim.sim.simulator import ClusterSimulator
from dcpsim.sim.topology import Topology
from dcpsim.sim.variability import Faults, sample_faults

__all__ = [
    "BREAKDOWN",
    "PLANNING_MODES",
    "ClusterSimulator",
    "DurationModel",
    "Faults",
    "GroupTable",
    "IterationRecord",
    "IterationTimeline",
    "IterationWork",
    "SimResult",
    "SimSettings",
    "SimulationError",
    "SyncCost",
    "Topology",
    "build_graph",
    "build_group_table",
    "iteration_row",
    "rank_arrays",
    "rank_rows",
    "run_iteration",
    "sample_faults",
]
