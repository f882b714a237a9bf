"""Run configurations, single runs, sweeps and executors."""

from dcpsim.run.config import RunConfig, config_from_dict, load_config

__all__ = ["RunConfig", "config_from_dict", "load_config"]
