"""Measure hardware profiles with torch and check the cost model against real layer timings.

Optional extra: ``pip install 'dcpsim[profile]'``. torch is imported only
inside the functions that measure, so importing this package (and the rest of
dcpsim) works without it; calling a measuring function without torch raises a
:class:`~dcpsim.errors.ConfigError` that names the extra.

* :mod:`~dcpsim.profiling.measure` — timers, GEMM, attention (dense and
  varlen) and copy-bandwidth measurements, device detection;
* :mod:`~dcpsim.profiling.collectives` — the torch.distributed worker (NCCL or
  gloo), launched with torchrun;
* :mod:`~dcpsim.profiling.build` — :func:`run_profile`: measure everything and
  write a profile (``dcpsim profile``);
* :mod:`~dcpsim.profiling.validate` — :func:`run_validation`: one real layer
  per pack against the cost model (``dcpsim validate``).
"""

from __future__ import annotations

from dcpsim.profiling.build import ProfileOptions, ProfileResult, resolve_model, run_profile, scale_model
from dcpsim.profiling.measure import ProfilingError, Timer, Timing, detect_device, require_torch
from dcpsim.profiling.validate import Pack, ValidationResult, ValidationSettings, default_packs, run_validation

__all__ = [
    "Pack",
    "ProfileOptions",
    "ProfileResult",
    "ProfilingError",
    "Timer",
    "Timing",
    "ValidationResult",
    "ValidationSettings",
    "default_packs",
    "detect_device",
    "require_torch",
    "resolve_model",
    "run_profile",
    "run_validation",
    "scale_model",
]
