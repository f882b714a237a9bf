"""Host (CPU) dispatch costs of a hardware profile: the ``[host]`` table of ``profile.toml``.

A training step's kernels are issued by the host: Python and Transformer
Engine module code, PyTorch's dispatcher, the CUDA driver's launch path and
NCCL's enqueue. Those costs depend on the CPU (an x86 DGX host against a
Grace CPU), not on the GPU, so a profile names its host CPU (``cpu``) and
carries one value per mechanism, each with a source in ``[sources]`` under
``host.<name>``::

    [host]
    cpu = "x86"                      # CPU type: "x86" or "grace"
    layer_fwd_s = 267e-6             # one transformer layer's forward pass on the host (measured block)
    layer_bwd_s = 1473e-6            # one transformer layer's backward pass on the host, autograd engine included
    kernel_fwd_s = 24e-6             # forward: host time per kernel issued beyond the layer's base kernels
    kernel_bwd_s = 35e-6             # backward: the same, autograd engine included
    kernel_launch_s = 6.5e-6         # one bare op enqueue (outside modules: the step end's launches)
    module_call_s = 10e-6            # one Python-level module / op call outside the layers
    collective_call_s = 44e-6        # one NCCL collective or p2p call (torch.distributed + enqueue)
    sync_s = 5e-6                    # host wake-up after a device sync drains the queue
    microbatch_s = 0.0               # per-microbatch Python outside the layers (schedule, batch, loss)
    param_tensor_s = 6e-6            # per parameter tensor, per per-tensor loop of the step's end
    step_s = 0.0                     # per-step Python outside the above (training loop, logging)
    graph_replay_s = 6.5e-6          # host time to launch one captured CUDA graph ...
    graph_kernel_s = 0.9e-6          # ... plus this per kernel it holds

Every field is in seconds except ``cpu``. ``layer_fwd_s``/``layer_bwd_s`` price a transformer layer's pass as
a whole (the host time of the measured block's pass: its module Python, dispatcher and launches), so that
the price does not depend on how many kernels a framework fuses the same work into; kernels a layer launches
beyond the base layer's (tensor-parallel collectives, ring steps, FP8 casts, unfused attention) cost
``kernel_*_s`` or ``collective_call_s`` each. A table without ``layer_*_s`` (profiles written before them)
prices the base layer at its kernel count times ``kernel_*_s`` instead. A profile without ``[host]`` has no
host model: every host cost is zero and a step's time is its device time (the
behaviour of profiles written before the host model). How the costs are used
is :mod:`dcpsim.cost.host`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from dcpsim.errors import ProfileError

CPU_TYPES = ("x86", "grace")


@dataclass(frozen=True)
class HostCosts:
    """Host dispatch costs of one CPU type (seconds; see the module docstring)."""

    cpu: str = "none"
    layer_fwd_s: float = 0.0
    layer_bwd_s: float = 0.0
    kernel_fwd_s: float = 0.0
    kernel_bwd_s: float = 0.0
    kernel_launch_s: float = 0.0
    module_call_s: float = 0.0
    collective_call_s: float = 0.0
    sync_s: float = 0.0
    microbatch_s: float = 0.0
    param_tensor_s: float = 0.0
    step_s: float = 0.0
    graph_replay_s: float = 0.0
    graph_kernel_s: float = 0.0

    @property
    def enabled(self) -> bool:
        """Whether the profile models its host (a ``[host]`` table was given)."""
        return self.cpu != "none"


HOST_FIELDS = tuple(f.name for f in fields(HostCosts) if f.name != "cpu")


def host_from_table(table: dict[str, Any] | None, sources: dict[str, Any], where: str) -> HostCosts:
    """Validate a profile's ``[host]`` table (``None``: no host model). Every value needs ``sources."host.<name>"``."""
    if table is None:
        return HostCosts()
    if not isinstance(table, dict):
        raise ProfileError("host", table, "a table of host costs", where=where)
    unknown = sorted(set(table) - set(HOST_FIELDS) - {"cpu"})
    if unknown:
        raise ProfileError(f"host.{unknown[0]}", table[unknown[0]],
                           f"not a host field; one of cpu, {', '.join(HOST_FIELDS)}", where=where)
    cpu = table.get("cpu")
    if cpu not in CPU_TYPES:
        raise ProfileError("host.cpu", cpu, f"one of {', '.join(CPU_TYPES)}", where=where)
    vals: dict[str, Any] = {"cpu": cpu}
    for name in HOST_FIELDS:
        if name not in table:
            continue
        v = table[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) or float(v) < 0:
            raise ProfileError(f"host.{name}", v, "a finite number of seconds >= 0", where=where)
        if not str(sources.get(f"host.{name}", "")).strip():
            raise ProfileError(f"host.{name}", v, f'a value with its origin in sources."host.{name}"', where=where)
        vals[name] = float(v)
    return HostCosts(**vals)
