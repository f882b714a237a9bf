"""Engines, chosen by name (``sim.engine``) through :data:`ENGINES`.

Built-ins: ``events`` (SimPy), ``fast`` (the exact vectorised path) and
``auto`` (fast whenever the network allows). A new engine is one module with
an :class:`~dcpsim.sim.engines.base.Engine` subclass and one line in
:data:`dcpsim.choices.ENGINES`.
"""

from __future__ import annotations

from dcpsim.choices import ENGINES
from dcpsim.sim.engines.base import Engine

ENGINES.base = Engine

__all__ = ["ENGINES", "Engine"]
