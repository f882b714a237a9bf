"""Shared pieces of the calibrations (:mod:`dcpsim.published.calibrate`, :mod:`dcpsim.published.calibrate_host`):
knobs and their bounds, candidate profile folders holding knob values, and the bounded Gauss-Newton fit.

Host knobs (:data:`HOST_KNOBS`) are fitted on the Megatron-LM CI suite's fit rows (experiments/megatron_ci), not
the published runs: ``host_module_scale`` multiplies the ``[host]`` costs that are framework Python
(:data:`HOST_SCALED`: a layer pass, each kernel and module call, the per-microbatch and per-parameter-tensor
loops; the driver's launch, NCCL's call path and the sync wake-up stay as measured); ``host_step_s`` is
``[host].step_s``, the per-step host work outside every priced mechanism (training-loop Python, logging writes,
garbage collection).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError, DcpsimError
from dcpsim.serialize import toml_value as _toml_value


@dataclass(frozen=True)
class Param:
    """One knob: ``log`` knobs are multiplicative scales fitted in log space; ``lin`` ones additive (seconds)."""

    name: str
    kind: str  # "log" | "lin"
    lo: float
    hi: float
    step: float  # finite-difference step in the fitted coordinate

    def to_x(self, v: float) -> float:
        return math.log(v) if self.kind == "log" else v

    def from_x(self, x: float) -> float:
        return math.exp(x) if self.kind == "log" else x

    @property
    def x_bounds(self) -> tuple[float, float]:
        return self.to_x(self.lo), self.to_x(self.hi)


HOST_SCALED = ("layer_fwd_s", "layer_bwd_s", "kernel_fwd_s", "kernel_bwd_s", "module_call_s", "microbatch_s",
               "param_tensor_s")
HOST_KNOBS = {
    "host_module_scale": Param("host_module_scale", "log", 0.25, 4.0, 0.05),
    "host_step_s": Param("host_step_s", "lin", 0.0, 0.25, 0.002),
}
DEFAULT_HOST_PARAMS = {"h100-sxm": ["host_module_scale", "host_step_s"],
                       "a100-sxm-80gb": ["host_module_scale", "host_step_s"]}
CI_GPU = {"h100-sxm": "H100", "a100-sxm-80gb": "A100", "gb200": "GB200"}

BOUND_TOLERANCE = 1e-3  # share of a knob's range (in its fitted coordinate) that counts as "on the bound"


class KnobAtBoundError(DcpsimError):
    """A fitted knob landed on a bound of its range: a missing mechanism, not a fit (the calibration fails)."""

    def __init__(self, at_bound: list[tuple[str, str, float]], result: Any = None) -> None:
        self.at_bound, self.result = at_bound, result
        names = "; ".join(f"{n} = {v:.6g} at its {side} bound" for n, side, v in at_bound)
        super().__init__(f"calibration failed: {names} (a knob at its bound stands for a mechanism the time "
                         "model lacks; fix the model or declare other knobs, do not widen the range)")


def knobs_at_bound(params: list[Param], x: np.ndarray) -> list[tuple[str, str, float]]:
    """(name, "lower"/"upper", value) of every knob whose fitted coordinate lies within
    :data:`BOUND_TOLERANCE` of its range's ends."""
    out = []
    for p, v in zip(params, np.asarray(x, dtype=float), strict=True):
        lo, hi = p.x_bounds
        tol = BOUND_TOLERANCE * (hi - lo)
        if v <= lo + tol:
            out.append((p.name, "lower", p.from_x(float(v))))
        elif v >= hi - tol:
            out.append((p.name, "upper", p.from_x(float(v))))
    return out

# ---------------------------------------------------------------- candidate profiles


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def dump_profile_toml(data: dict[str, Any]) -> str:
    """Write a profile.toml dict (scalars at the top, then one level of tables)."""
    lines = [f"{_key(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            lines += ["", f"[{_key(k)}]"] + [f"{_key(a)} = {_toml_value(b)}" for a, b in v.items()]
    return "\n".join(lines) + "\n"


def profile_folder(gpu: str) -> Path:
    from dcpsim.hardware import get_profile

    prof = get_profile(gpu)
    path = getattr(prof, "path", None)
    if path is None:
        raise ConfigError("--gpu", gpu, "a profile loaded from a folder")
    p = Path(path)
    return p.parent if p.suffix == ".toml" else p


def write_profile(base: Path, out: Path, values: dict[str, float], sources: dict[str, str],
                  meta: dict[str, str] | None = None) -> Path:
    """A copy of profile folder ``base`` in ``out`` with ``[timing]`` values (and their sources) replaced.

    ``meta`` replaces top-level fields (``name``, ``description``). Written atomically, only over files
    dcpsim wrote (:mod:`dcpsim.outdir`).
    """
    from dcpsim.outdir import write_bytes, write_text

    for f in base.iterdir():
        if f.is_file() and f.name != "profile.toml" and f.suffix in (".csv", ".toml", ".md"):
            write_bytes(out / f.name, f.read_bytes())
    write_text(out / "profile.toml", calibrated_profile_text(base, values, sources, meta))
    return out


def calibrated_profile_text(base: Path, values: dict[str, float], sources: dict[str, str],
                            meta: dict[str, str] | None = None) -> str:
    """``base``'s profile.toml with ``[timing]`` values (and their sources) replaced."""
    data = tomllib.loads((base / "profile.toml").read_text())
    timing = dict(data.get("timing", {}))
    host = dict(data.get("host", {}))
    srcs = dict(data.get("sources", {}))
    for k, v in values.items():
        if k == "host_module_scale":  # the base's framework-Python host costs, scaled
            for h in HOST_SCALED:
                if h in host:
                    host[h] = float(host[h]) * float(v)
                    srcs[f"host.{h}"] = (f"{srcs.get(f'host.{h}', '')} x host_module_scale {float(v):.4g} ("
                                         f"{sources.get(k, 'calibration candidate')})")
        elif k == "host_step_s":
            host["step_s"] = float(v)
            srcs["host.step_s"] = sources.get(k, "calibration candidate")
        else:
            timing[k] = float(v)
            srcs[f"timing.{k}"] = sources.get(k, "calibration candidate")
    data.update(meta or {})
    data["timing"] = timing
    if host:
        data["host"] = host
    data["sources"] = srcs
    return dump_profile_toml(data)



# ---------------------------------------------------------------- the fit
def _jacobian(ev: Any, x: np.ndarray, rcs: list, r0: np.ndarray) -> np.ndarray:
    J = np.zeros((len(rcs), len(x)))
    for j, p in enumerate(ev.params):
        lo, hi = p.x_bounds
        h = p.step if x[j] + p.step <= hi else -p.step
        xj = x.copy()
        xj[j] = min(max(x[j] + h, lo), hi)
        J[:, j] = (ev.log_ratio(xj, rcs) - r0) / (xj[j] - x[j])
    return J


def _solve_linear(r0: np.ndarray, J: np.ndarray, x: np.ndarray, params: list[Param]) -> np.ndarray:
    from scipy.optimize import lsq_linear

    # the linearised problem min |r0 + J (z - x)|^2 over the box, solved exactly (a general least-squares
    # solver started at z = 0 stopped at once on its relative step tolerance: an additive knob at 0 never moved)
    lo = np.array([p.x_bounds[0] for p in params])
    hi = np.array([p.x_bounds[1] for p in params])
    sol = lsq_linear(J, J @ x - r0, bounds=(lo, hi), method="bvls")
    return np.clip(sol.x, lo, hi)


def gauss_newton(ev: Any, rcs: list, x0: np.ndarray, iterations: int,
                 first: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, list[dict]]:
    """``iterations`` Gauss-Newton steps on the rows ``rcs`` from ``x0``; returns x and a log of the steps."""
    x = x0.copy()
    log = []
    for it in range(iterations):
        if it == 0 and first is not None:
            r0, J = first
        else:
            r0 = ev.log_ratio(x, rcs)
            J = _jacobian(ev, x, rcs, r0)
        ok = np.isfinite(r0) & np.isfinite(J).all(axis=1)
        if not ok.any():
            raise ConfigError("calibration rows", [rc.row.id for rc in rcs], "rows the simulator can run")
        x_new = _solve_linear(r0[ok], J[ok], x, ev.params)
        log.append({"iteration": it, "rms_log_error_before": float(np.sqrt(np.mean(r0[ok] ** 2))),
                    "values": ev.values(x_new)})
        x = x_new
    return x, log
