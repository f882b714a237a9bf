"""Network models, chosen by name (``sim.network``) through :data:`NETWORKS`.

Built-ins: ``ideal`` (:mod:`~dcpsim.sim.networks.ideal`) and ``shared``
(:mod:`~dcpsim.sim.networks.shared`). A new model is one module with a
:class:`~dcpsim.sim.networks.base.NetworkModel` subclass and one line in
:data:`BUILTIN_NETWORKS` (or :meth:`NETWORKS.register <dcpsim.registry.Registry.register>`
from outside the package).
"""

from __future__ import annotations

from dcpsim.registry import Registry
from dcpsim.sim.networks.base import NetworkModel

# name -> "module:Class". One line per built-in network model.
BUILTIN_NETWORKS: dict[str, str] = {
    "ideal": "dcpsim.sim.networks.ideal:IdealNetwork",
    "shared": "dcpsim.sim.networks.shared:SharedNetwork",
}

NETWORKS: Registry[type[NetworkModel]] = Registry("sim.network", BUILTIN_NETWORKS, NetworkModel)


def get_network(name: str, topology) -> NetworkModel:
    """The network model ``name`` for ``topology`` (:class:`~dcpsim.errors.ConfigError` for an unknown name)."""
    return NETWORKS.get(name)(topology)


__all__ = ["BUILTIN_NETWORKS", "NETWORKS", "NetworkModel", "get_network"]
