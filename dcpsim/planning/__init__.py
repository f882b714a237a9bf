"""Capacity planning: which GPU type, how many, which layout and policy, to train on N tokens by a deadline.

* :mod:`~dcpsim.planning.inputs` -- prices, deadlines, token counts (``4M``), the data (fixed windows or
  variable lengths) and the global batch;
* :mod:`~dcpsim.planning.space` -- the layout search space and its pruning (divisibility, batch, memory);
* :mod:`~dcpsim.planning.screen` -- the closed-form screen;
* :mod:`~dcpsim.planning.search` -- the search per (GPU type, size, policy): enumerate, prune, screen,
  simulate;
* :mod:`~dcpsim.planning.failures` -- failures, checkpoints and restarts;
* :mod:`~dcpsim.planning.capacity` -- :func:`plan_capacity`: every GPU type × size × policy, time to
  train, cost, seeds, Pareto front, recommendation.
"""

from dcpsim.planning.capacity import (
    DEFAULT_POLICIES,
    CapacityPlan,
    CapacityRequest,
    pareto_front,
    plan_capacity,
    recommend,
)
from dcpsim.planning.failures import FailureModel, llama3_gpu_mtbf_hours
from dcpsim.planning.inputs import (
    DATA_PRESETS,
    DataSpec,
    fixed_workload,
    make_data_spec,
    parse_duration_days,
    parse_gpu_prices,
    parse_token_count,
)
from dcpsim.planning.search import LayoutSearch, search_layouts
from dcpsim.planning.space import Candidate, SearchSpace

__all__ = [
    "DATA_PRESETS",
    "DEFAULT_POLICIES",
    "Candidate",
    "CapacityPlan",
    "CapacityRequest",
    "DataSpec",
    "FailureModel",
    "LayoutSearch",
    "SearchSpace",
    "fixed_workload",
    "llama3_gpu_mtbf_hours",
    "make_data_spec",
    "pareto_front",
    "parse_duration_days",
    "parse_gpu_prices",
    "parse_token_count",
    "plan_capacity",
    "recommend",
    "search_layouts",
]
