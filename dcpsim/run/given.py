"""What a caller of :func:`~dcpsim.run.single.run_simulation` hands in beside the configuration (batches,
plans), checked before any work: a bad one is a ConfigError naming it, not an error from deep inside or a
silent cast (an int64 cast truncated a length of 4096.5 to 4096 and made nan -2**63)."""

from __future__ import annotations

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.policies.fit import check_lengths
from dcpsim.policies.plan import Plan
from dcpsim.run.config import RunConfig


def check_given(cfg, batches, plans, *, trace_max_tracks: int = 64, config_hash: str | None = None) -> None:
    """``cfg`` is a RunConfig; ``plans``, when given, a non-empty sequence of Plan (one per iteration);
    ``trace_max_tracks`` a positive integer (0 or -5 drew one track, 2.5 two, without a word); ``config_hash``
    text or None (an int was written as the run's hash)."""
    if not isinstance(cfg, RunConfig):
        raise ConfigError("cfg", type(cfg).__name__, "a RunConfig (dcpsim.load_config(path) reads a TOML file)")
    if isinstance(trace_max_tracks, bool) or not isinstance(trace_max_tracks, int | np.integer) or trace_max_tracks < 1:
        raise ConfigError("trace_max_tracks", trace_max_tracks, "a positive integer (tracks drawn in the trace)")
    if config_hash is not None and not (isinstance(config_hash, str) and config_hash):
        raise ConfigError("config_hash", config_hash, "cfg.config_hash() (non-empty text) or None")
    if plans is not None and (isinstance(plans, Plan) or len(plans) == 0
                              or not all(isinstance(p, Plan) for p in plans)):
        raise ConfigError("plans", type(plans).__name__ if isinstance(plans, Plan) else [type(p).__name__ for p in
                          plans][:4], "a non-empty sequence of dcpsim.policies.Plan, one per iteration")


def batch_lengths(cfg: RunConfig, i: int, batches, dist, fixed, rng: np.random.Generator) -> np.ndarray:
    """Sequence lengths of iteration ``i``: given (checked), full fixed-length windows, or sampled."""
    if batches is not None:
        return check_lengths(batches[i], f"batches[{i}]")
    if fixed is not None:
        return fixed.sample_windows(cfg.workload.gbs, rng)[0]
    from dcpsim.workload import sample_global_batch

    return sample_global_batch(dist, cfg.workload.gbs, rng)
