"""dcpsim: a discrete-event cluster simulator and cost model for context parallelism in LLM training.

The public API (everything else is reachable through the sub-packages)::

    from dcpsim import RunConfig, run_simulation
    res = run_simulation(RunConfig().with_updates({"policy.name": "dynamic"}))

Names are imported on first use, so ``import dcpsim`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from dcpsim._version import __version__

__all__ = [
    "ConfigError",
    "CostModel",
    "DcpsimError",
    "InfeasibleError",
    "RunConfig",
    "__version__",
    "export_megatron",
    "get_model",
    "get_policy",
    "get_profile",
    "get_workload",
    "list_policies",
    "list_profiles",
    "load_config",
    "load_results",
    "load_sweep_spec",
    "run_simulation",
    "run_sweep",
]

_WHERE = {
    "ConfigError": "dcpsim.errors",
    "DcpsimError": "dcpsim.errors",
    "InfeasibleError": "dcpsim.errors",
    "RunConfig": "dcpsim.run.config",
    "load_config": "dcpsim.run.load",
    "run_simulation": "dcpsim.run.single",
    "run_sweep": "dcpsim.run.sweep",
    "load_sweep_spec": "dcpsim.run.sweep",
    "load_results": "dcpsim.run.sweep",
    "CostModel": "dcpsim.cost",
    "get_policy": "dcpsim.policies",
    "list_policies": "dcpsim.policies",
    "get_profile": "dcpsim.hardware",
    "list_profiles": "dcpsim.hardware",
    "get_model": "dcpsim.model",
    "get_workload": "dcpsim.workload",
    "export_megatron": "dcpsim.export",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dcpsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
