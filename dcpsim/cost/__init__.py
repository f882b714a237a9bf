"""Per-microbatch time and memory of one CP group (see :mod:`dcpsim.cost.model`)."""

from dcpsim.cost.comm import group_collective_time_s
from dcpsim.cost.model import CP_COMM_TYPES, BatchCost, CostModel, PackCost

__all__ = ["CP_COMM_TYPES", "BatchCost", "CostModel", "PackCost", "group_collective_time_s"]
