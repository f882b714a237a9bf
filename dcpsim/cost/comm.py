"""Collectives over groups that may span several NVLink domains."""

from __future__ import annotations

import numpy as np

from dcpsim.hardware import HardwareProfile, bus_factor


def group_collective_time_s(
    profile: HardwareProfile,
    op: str,
    nbytes,
    n_ranks: int,
    *,
    domains: int = 1,
    network_scale: float = 1.0,
) -> np.ndarray:
    """Time of ``op`` over ``n_ranks`` ranks spread over ``domains`` NVLink domains.

    Inside one domain the NVLink table applies. Across domains NCCL runs one
    ring per NIC, so with ``g = n_ranks / domains`` ranks per domain each using
    its own NIC the bus bandwidth is ``min(NVLink busbw, g × per-NIC busbw)``
    (REFERENCE §5: 8×400G nodes reach ≈ 8 × 47 GB/s). ``network_scale`` scales
    the network bandwidth (a degraded link or oversubscription < 1).
    """
    nbytes = np.asarray(nbytes, dtype=float)
    if n_ranks <= 1:
        return np.zeros_like(nbytes)
    f = bus_factor(op, n_ranks)
    size = np.maximum(nbytes, 1.0)
    nvl = profile.busbw_bytes_per_s(op, "nvlink", size)
    if domains <= 1:
        bw = nvl
    else:
        per_domain = max(1.0, n_ranks / domains)
        net = profile.busbw_bytes_per_s(op, "network", size / per_domain) * per_domain * network_scale
        bw = np.minimum(nvl, net)
    return np.where(nbytes > 0, nbytes * f / bw, 0.0)
