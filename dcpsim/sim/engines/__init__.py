"""Engines, chosen by name (``sim.engine``) through :data:`ENGINES`.

Built-ins: ``events`` (SimPy), ``fast`` (the exact vectorised path) and
``auto`` (fast whenever the network allows). A new engine is one module with
an :class:`~dcpsim.sim.engines.base.Engine` subclass and one line in
:data:`BUILTIN_ENGINES`.
"""

from __future__ import annotations

from dcpsim.registry import Registry
from dcpsim.sim.engines.base import Engine

# name -> "module:Class". One line per built-in engine.
BUILTIN_ENGINES: dict[str, str] = {
    "auto": "dcpsim.sim.engines.auto:AutoEngine",
    "events": "dcpsim.sim.engines.events:EventEngine",
    "fast": "dcpsim.sim.engines.fast:FastEngine",
}

ENGINES: Registry[type[Engine]] = Registry("sim.engine", BUILTIN_ENGINES, Engine)

__all__ = ["BUILTIN_ENGINES", "ENGINES", "Engine"]
