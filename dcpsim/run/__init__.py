"""Run configurations, single runs, sweeps and executors."""

from dcpsim.run.config import RunConfig
from dcpsim.run.load import config_from_dict, load_config

__all__ = ["RunConfig", "config_from_dict", "load_config"]
