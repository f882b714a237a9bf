"""A run's random streams: ``sim.seed`` spawned into four independent streams (see :mod:`dcpsim.run.single`).

Stream ``i`` is ``default_rng(SeedSequence(seed).spawn(4)[i])``; a spawned child is
``SeedSequence(seed, spawn_key=(i,))``, so each stream is built alone, when first asked for (a run whose
simulator is reused never draws its faults: :mod:`dcpsim.run.reuse`). The same generators, the same draws.
"""

from __future__ import annotations

import numpy as np

NAMES = ("workload", "policy", "noise", "faults")


class Streams(dict):
    """``{name: Generator}`` of one seed's streams (:data:`NAMES`), each made on first access."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def __missing__(self, name: str) -> np.random.Generator:
        rng = self[name] = stream(self.seed, NAMES.index(name))
        return rng


def stream(seed: int, index: int) -> np.random.Generator:
    """Stream ``index`` of ``seed``: ``default_rng(SeedSequence(seed).spawn(4)[index])``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
