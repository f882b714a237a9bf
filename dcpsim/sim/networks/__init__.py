"""Network models, chosen by name (``sim.network``) through :data:`NETWORKS`.

Built-ins: ``ideal`` (:mod:`~dcpsim.sim.networks.ideal`) and ``shared``
(:mod:`~dcpsim.sim.networks.shared`). A new model is one module with a
:class:`~dcpsim.sim.networks.base.NetworkModel` subclass and one line in
:data:`dcpsim.choices.NETWORKS` (or :meth:`NETWORKS.register <dcpsim.registry.Registry.register>`
from outside the package).
"""

from __future__ import annotations

from dcpsim.choices import NETWORKS
from dcpsim.sim.networks.base import NetworkModel

NETWORKS.base = NetworkModel


def get_network(name: str, topology) -> NetworkModel:
    """The network model ``name`` for ``topology`` (:class:`~dcpsim.errors.ConfigError` for an unknown name)."""
    return NETWORKS.get(name)(topology)


__all__ = ["NETWORKS", "NetworkModel", "get_network"]
