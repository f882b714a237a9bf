"""The simulator's settings (:class:`SimSettings`): switches of the time model beyond the cost model."""

from __future__ import annotations

from dataclasses import dataclass

from dcpsim.choices import EXCHANGES, PARAM_GATHER_LAUNCHES
from dcpsim.choices import PLANNING_MODES as _PLANNING_MODES
from dcpsim.errors import ConfigError
from dcpsim.sim.engines import ENGINES
from dcpsim.sim.networks import NETWORKS

PLANNING_MODES = _PLANNING_MODES  # defined once in dcpsim.choices


@dataclass(frozen=True)
class SimSettings:
    """What the simulator reads besides the cost model and topology: one frozen object, passed whole.

    Field names and meanings are those of :class:`~dcpsim.run.config.SimSection` (the run's ``[sim]``
    table); :func:`dcpsim.run.single.sim_settings` builds it from a configuration by field name, so a
    field added here is carried from the configuration without another list to update. A variant is
    ``dataclasses.replace(settings, ...)``.
    """

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
        ENGINES.check(self.engine)
        if not 0 <= self.noise_cv <= 1:  # also refuses nan
            raise ConfigError("sim.noise_cv", self.noise_cv, "a finite number >= 0 and <= 1")
        NETWORKS.check(self.network)
        network = NETWORKS.get(self.network)
        if not ENGINES.get(self.engine).supports(network):
            able = [name for name, engine in ENGINES.items() if engine.supports(network)]
            raise ConfigError("sim.engine", self.engine, f"one of {able} with sim.network = {self.network!r} "
                              "(flows that share links need the event simulation)")
        if self.dynamic_cp_exchange not in EXCHANGES:
            raise ConfigError("sim.dynamic_cp_exchange", self.dynamic_cp_exchange, f"one of {EXCHANGES}")
        if self.param_gather_launch not in PARAM_GATHER_LAUNCHES:
            raise ConfigError("sim.param_gather_launch", self.param_gather_launch, f"one of {PARAM_GATHER_LAUNCHES}")
        if not self.cp_switch_s >= 0:
            raise ConfigError("sim.cp_switch_s", self.cp_switch_s, ">= 0 seconds")
