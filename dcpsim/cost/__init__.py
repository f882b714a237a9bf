"""Per-microbatch time and memory of one CP group (the facade: :mod:`dcpsim.cost.model`).

Modules, one mechanism each: :mod:`~dcpsim.cost.settings` (the frozen
:class:`CostSettings` a cost model takes whole), :mod:`~dcpsim.cost.compute`
(device kernels), :mod:`~dcpsim.cost.communication` (CP and TP
communication, collectives over NVLink domains), :mod:`~dcpsim.cost.memory`,
:mod:`~dcpsim.cost.fixed` (kernels per layer and microbatch, launch floors),
:mod:`~dcpsim.cost.host` (the host timeline: issue costs, syncs, the step's end),
:mod:`~dcpsim.cost.breakdown` (the result types), :mod:`~dcpsim.padding`.
"""

from dcpsim.choices import CP_COMM_TYPES
from dcpsim.cost.breakdown import BatchCost, PackCost
from dcpsim.cost.communication import group_collective_time_s
from dcpsim.cost.model import CostModel
from dcpsim.cost.settings import USABLE_HBM_FRACTION, CostSettings, stage_layer_counts

__all__ = ["CP_COMM_TYPES", "USABLE_HBM_FRACTION", "BatchCost", "CostModel", "CostSettings", "PackCost",
           "group_collective_time_s", "stage_layer_counts"]
