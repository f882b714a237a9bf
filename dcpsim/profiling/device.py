"""The device a measurement runs on, and torch itself: :func:`require_torch`, :func:`detect_device`,
:class:`DeviceInfo`, thread and dtype helpers (split out of :mod:`dcpsim.profiling.measure`, which re-exports
every name here). torch is imported lazily, so importing this module works without it.
"""

from __future__ import annotations

import os
import platform
from contextlib import contextmanager
from dataclasses import dataclass

from dcpsim.errors import ConfigError, DcpsimError

PROFILE_EXTRA_HINT = "an importable torch; install the profile extra: pip install 'dcpsim[profile]'"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class ProfilingError(DcpsimError):
    """A measurement could not be taken (a worker failed, no kernel ran)."""


def require_torch():
    """Import and return torch, or raise a ConfigError naming the ``profile`` extra."""
    try:
        import torch
    except ImportError:
        raise ConfigError("torch", "not installed", PROFILE_EXTRA_HINT) from None
    return torch


# ----------------------------------------------------------------- device
@dataclass(frozen=True)
class DeviceInfo:
    """What was measured on. ``kind`` is ``"cuda"`` or ``"cpu"``."""

    kind: str
    index: int
    name: str
    driver: str
    torch: str
    cuda: str
    nccl: str
    threads: int
    memory_bytes: float
    count: int

    def torch_device(self):
        torch = require_torch()
        return torch.device(self.kind, self.index) if self.kind == "cuda" else torch.device("cpu")

    def metadata(self) -> dict[str, str]:
        return {
            "device": self.name,
            "device_kind": self.kind,
            "driver": self.driver,
            "torch": self.torch,
            "cuda": self.cuda,
            "nccl": self.nccl,
            "threads": str(self.threads),
        }


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):  # noqa: SIM115 - short read
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _nvidia_driver(torch) -> str:
    try:  # pynvml (nvidia-ml-py) names the kernel driver, e.g. "550.54.15"
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - optional helper, any failure falls through
        pass
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
        if out:
            return out[0].strip()
    except Exception:  # noqa: BLE001
        pass
    try:  # CUDA driver API version (e.g. 12040), when nothing better is available
        v = int(torch._C._cuda_getDriverVersion())
        return f"CUDA driver API {v // 1000}.{(v % 1000) // 10}"
    except Exception:  # noqa: BLE001
        return "unknown"


def detect_device(device: str | None = None) -> DeviceInfo:
    """The device to measure: ``"cpu"``, ``"cuda"`` / ``"cuda:N"``, or None (CUDA when available)."""
    torch = require_torch()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = str(device)
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("--device", dev, "'cpu' (no CUDA device is visible to torch)")
        idx = int(dev.split(":", 1)[1]) if ":" in dev else 0
        if idx >= torch.cuda.device_count():
            raise ConfigError("--device", dev, f"a CUDA index below {torch.cuda.device_count()}")
        props = torch.cuda.get_device_properties(idx)
        try:
            nv = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
        except Exception:  # noqa: BLE001 - builds without NCCL
            nccl = "unavailable"
        return DeviceInfo(
            kind="cuda", index=idx, name=str(props.name), driver=_nvidia_driver(torch),
            torch=torch.__version__, cuda=str(torch.version.cuda), nccl=nccl,
            threads=torch.get_num_threads(), memory_bytes=float(props.total_memory),
            count=torch.cuda.device_count(),
        )
    if dev != "cpu":
        raise ConfigError("--device", dev, "'cpu', 'cuda' or 'cuda:N'")
    try:
        mem = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        mem = 0.0
    return DeviceInfo(
        kind="cpu", index=0, name=f"{_cpu_name()} ({os.cpu_count()} logical CPUs)", driver="n/a (CPU)",
        torch=torch.__version__, cuda=str(torch.version.cuda or "none"), nccl="n/a (gloo on CPU)",
        threads=torch.get_num_threads(), memory_bytes=mem, count=1,
    )


@contextmanager
def cpu_threads(n: int | None):
    """Run the block with ``torch.set_num_threads(n)`` (None: leave as is); restores the old count.

    On a small shared CPU one intra-op thread is steadier than several: a
    parallel region waits for its slowest thread, so one preempted core stalls
    every kernel.
    """
    torch = require_torch()
    if n is None:
        yield
        return
    if not isinstance(n, int) or n < 1:
        raise ConfigError("--threads", n, "a positive integer")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def torch_dtype(name: str):
    torch = require_torch()
    if name not in DTYPES:
        raise ConfigError("--dtype", name, f"one of {sorted(DTYPES)}")
    return getattr(torch, DTYPES[name])
