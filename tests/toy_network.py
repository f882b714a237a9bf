"""A toy third network model: the whole of what a new model needs (used by test_extension_points.py).

A fabric with 2:1 oversubscription everywhere above the NVLink domain: every CP group that leaves its domain
runs at half the ideal network's bandwidth factor. Registering it is one line:
``NETWORKS.register("toy-half", "toy_network:HalfBisectionNetwork")``.
"""

from __future__ import annotations

from dcpsim.sim.networks.ideal import IdealNetwork


class HalfBisectionNetwork(IdealNetwork):
    """The ideal network with half its bandwidth for CP groups that leave their NVLink domain."""

    name = "toy-half"

    def cp_factor(self, stage, starts, cps):
        return 0.5 * super().cp_factor(stage, starts, cps)
