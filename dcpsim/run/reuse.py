"""What the runs of one sweep task share, built once: the cost model, the layout and the simulator.

A sweep task runs many configurations that differ mostly by seed or policy (:func:`dcpsim.run.sweep.execute_batch`);
inside :func:`shared_parts` :func:`dcpsim.run.single.run_simulation` takes the parts that do not depend on the
seed or the policy from the runs before it, keyed by the rest of the configuration (:func:`run_key`):

* the cost model and the layout (the hardware profile and model spec are read once, not once per run);
* the cluster simulator, when the run draws no faults (no stragglers, no degraded link: its faults then do not
  depend on the seed); with faults the seed is part of the key.

Each part is what a fresh build gives: the cost model and the layout are immutable, and a simulator keeps
nothing from one iteration to the next but memos of pure functions of its inputs (a run of several iterations
already reuses it), so a reused part gives the same results bit for bit (tests/test_sweep.py compares).
Outside :func:`shared_parts` (one ``dcpsim simulate``, a notebook that edits a profile between runs) nothing is
kept. A configuration whose sections hold tables (an inline model or workload, policy options) has no key:
its parts are built afresh.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_SCOPE: dict[Any, Any] | None = None  # the parts of the current shared_parts() block; None outside one
MAX_PARTS = 64
"""Most parts one block keeps (a task of many distinct configurations keeps the newest)."""


@contextlib.contextmanager
def shared_parts() -> Iterator[None]:
    """Within this block, runs share the parts that do not depend on their seed (nested blocks share one)."""
    global _SCOPE
    outer = _SCOPE
    if outer is None:
        _SCOPE = {}
    try:
        yield
    finally:
        _SCOPE = outer


def run_key(cfg: Any) -> tuple | None:
    """``cfg`` without its policy and ``sim.seed`` as a hashable key; None outside :func:`shared_parts`."""
    if _SCOPE is None:
        return None
    return (cfg.model, cfg.hardware, cfg.cluster, cfg.parallel, cfg.workload, cfg.step,
            tuple((k, v) for k, v in cfg.sim if k != "seed"))


def simulator_part(cfg: Any) -> tuple:
    """The part name of ``cfg``'s simulator: with faults on (stragglers or a degraded link, drawn from the
    seed's fault stream) one per seed."""
    s = cfg.sim
    faults = (s.straggler_fraction > 0 and s.straggler_slowdown > 1.0) or s.degraded_link_scale < 1.0
    return ("simulator", s.seed) if faults else ("simulator",)


def reused(key: tuple | None, part: Any, make: Callable[[], T]) -> T:
    """The ``part`` built for ``key`` in this block, else ``make()`` (kept when ``key`` is hashable)."""
    scope = _SCOPE
    if scope is None or key is None:
        return make()
    k = (part, key)
    try:
        return scope[k]
    except KeyError:
        pass
    except TypeError:  # a section holds a table (unhashable): nothing is shared
        return make()
    value = make()
    if len(scope) >= MAX_PARTS:
        scope.pop(next(iter(scope)))
    scope[k] = value
    return value
