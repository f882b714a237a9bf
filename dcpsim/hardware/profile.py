"""Hardware profiles: on-disk format, validation, loading and interpolation.

Format (``format_version = 1``), one folder per GPU::

    profiles/<name>/profile.toml      metadata, one origin per value
    profiles/<name>/gemm.csv          n,k,tokens,tflops,source
    profiles/<name>/attention.csv     direction,causal,layout,head_dim,seqlen,tflops,source
    profiles/<name>/collectives.csv   op,tier,bytes,busbw_gb_per_s,ranks,source

Units are in the column names: ``tflops`` is 1e12 FLOP/s, ``busbw_gb_per_s``
is 1e9 bytes/s of nccl-tests *bus* bandwidth, ``bytes`` is the nccl-tests
message size (the full buffer: for all-gather the gathered output, for
reduce-scatter the input). ``profile.toml`` holds the scalar device values in
``[device]`` and a sentence naming where each came from in ``[sources]``
(measured: device, date, versions; or a public source). Measured profiles add
a ``[measured]`` table (device name, driver, torch, CUDA, NCCL, date, command).

Optional ``[timing]`` table (format 1, added later; a profile without it
loads and behaves as before: GEMM from the table alone, no FP8, no fixed
costs, every scale 1). Every value present needs ``sources."timing.<name>"``::

    peak_fp8_flops              dense FP8 peak (datasheet); 0 = no FP8
    fp8_gemm_best_tflops        best achieved FP8 GEMM at the table's anchor shape
    sms, gemm_tile_m, gemm_tile_n, gemm_k_half
                                the GEMM shape model (see :meth:`HardwareProfile.gemm_shape_factor`)
    per_kernel_overhead_s       host launch floor per kernel (CPU-bound regime)
    iteration_overhead_s        fixed per-iteration host time (data loading, logging)
    gemm_efficiency_scale, fp8_gemm_efficiency_scale, attention_efficiency_scale,
    nvlink_efficiency, network_efficiency
                                calibration knobs (1.0 = uncalibrated); a calibrated
                                profile names its fit data and commit in their sources

Optional ``[host]`` table: the host CPU's dispatch costs (kernel launch, module and
collective calls, syncs), one value per mechanism with ``sources."host.<name>"``;
see :mod:`dcpsim.hardware.host`. With it, ``timing.per_kernel_overhead_s`` must
be 0: the host timeline (:mod:`dcpsim.cost.host`) prices every launch.

Interpolation is linear in log(size)–log(throughput) between rows. Outside
the measured range:

* above the largest size the last throughput is held (kernels and links are
  saturated there);
* below the smallest size, GEMM and collectives keep the *time* of the
  smallest row (a latency floor: a smaller call is not faster than the
  smallest one measured), while attention keeps the *efficiency* of the
  smallest row (a packed varlen kernel tiles many short documents into one
  launch, so there is no per-document latency floor).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from dcpsim.errors import ConfigError, ProfileError
from dcpsim.hardware.host import HostCosts, host_from_table
from dcpsim.validation import STRICT, InputModel, read_text, read_toml, validate_model

FORMAT_VERSION = 1
DEVICE_FIELDS = (
    "peak_bf16_flops",
    "hbm_bytes",
    "hbm_bw_bytes_per_s",
    "nvlink_bw_bytes_per_s",
    "nic_bw_bytes_per_s",
    "gpus_per_node",
    "nvlink_domain_gpus",
)
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
TIERS = ("nvlink", "network")
ATTN_LAYOUTS = ("dense", "varlen")
# GEMM tiles the shape model chooses from: (rows, cols, relative main-loop efficiency).
# Assumed: CUTLASS/cuBLAS Hopper/Ampere kernels ship 128x256 and 256x128 tiles at full
# efficiency; smaller tiles reuse less data per byte loaded (arithmetic intensity
# tm*tn/(tm+tn): 85 for 128x256, 64 for 128x128, 43 for 64x128), assumed to cost 10% and 30%.
GEMM_TILES = ((128, 256, 1.0), (256, 128, 1.0), (128, 128, 0.9), (64, 128, 0.7))
GEMM_SPLIT_K = (1, 2, 4, 8)


@dataclass(frozen=True)
class Timing:
    """Optional timing parameters of a profile (``[timing]``); defaults reproduce a format-1 profile without it."""

    peak_fp8_flops: float = 0.0
    fp8_gemm_best_tflops: float = 0.0
    sms: int = 0
    gemm_tile_m: int = 128
    gemm_tile_n: int = 256
    gemm_k_half: float = 0.0
    per_kernel_overhead_s: float = 0.0
    iteration_overhead_s: float = 0.0
    gemm_efficiency_scale: float = 1.0
    fp8_gemm_efficiency_scale: float = 1.0
    attention_efficiency_scale: float = 1.0
    nvlink_efficiency: float = 1.0
    network_efficiency: float = 1.0

    @property
    def has_fp8(self) -> bool:
        return self.peak_fp8_flops > 0 and self.fp8_gemm_best_tflops > 0

    @property
    def has_gemm_model(self) -> bool:
        return self.sms > 0


TIMING_FIELDS = tuple(Timing.__dataclass_fields__)
HOST_CPUS = ("x86", "grace")  # profile.toml host_cpu: the CPU type whose dispatch costs the host model uses
TIMING_INT_FIELDS = ("sms", "gemm_tile_m", "gemm_tile_n")
# fields that may be 0 (mechanism off); the scales must be > 0, and sms too when present (omit it for no
# GEMM shape model: a device has no zero-SM GPU)
TIMING_ZERO_OK = ("peak_fp8_flops", "fp8_gemm_best_tflops", "gemm_k_half", "per_kernel_overhead_s",
                  "iteration_overhead_s")
# largest plausible value of each timing field (refuses unit mistakes; the scales that multiply a kernel rate are
# bounded further by the device peak, see _check_scaled_peaks)
TIMING_MAX = {"peak_fp8_flops": 1e17, "fp8_gemm_best_tflops": 1e5, "sms": 100_000, "gemm_tile_m": 4096,
              "gemm_tile_n": 4096, "gemm_k_half": 1e6, "per_kernel_overhead_s": 1.0, "iteration_overhead_s": 3600.0,
              "gemm_efficiency_scale": 100.0, "fp8_gemm_efficiency_scale": 100.0,
              "attention_efficiency_scale": 100.0, "nvlink_efficiency": 10.0, "network_efficiency": 10.0}


def bus_factor(op: str, n: int) -> float:
    """nccl-tests factor with ``busbw = algbw * factor`` for ``n`` ranks."""
    if op == "sendrecv" or n <= 1:
        return 1.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    raise ProfileError("op", op, f"one of {COLLECTIVE_OPS}")


@dataclass(frozen=True)
class Curve:
    """Throughput against size, interpolated in log-log space.

    ``below`` is ``"time"`` (hold the smallest row's time) or ``"efficiency"``
    (hold the smallest row's throughput). ``power`` is how work grows with size
    (1 for GEMM tokens and message bytes, 2 for attention sequence length), so
    that holding time below the range gives throughput ∝ size**power.
    """

    log_x: np.ndarray
    log_y: np.ndarray
    below: str = "time"
    power: float = 1.0

    @classmethod
    def from_points(cls, x, y, *, below: str = "time", power: float = 1.0) -> Curve:
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        order = np.argsort(x)
        return cls(np.log(x[order]), np.log(y[order]), below, power)

    def __call__(self, x) -> np.ndarray:
        """Throughput at size ``x`` (same unit as the table), vectorised."""
        lx = np.log(np.maximum(np.asarray(x, dtype=float), 1e-300))
        ly = np.interp(lx, self.log_x, self.log_y)  # holds ends flat
        if self.below == "time":
            lo = lx < self.log_x[0]
            ly = np.where(lo, self.log_y[0] + self.power * (lx - self.log_x[0]), ly)
        return np.exp(ly)

    @property
    def x_range(self) -> tuple[float, float]:
        return float(math.exp(self.log_x[0])), float(math.exp(self.log_x[-1]))


@dataclass
class HardwareProfile:
    """A GPU (and its node/network) as dcpsim sees it. Units in field names."""

    name: str
    peak_bf16_flops: float
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    nvlink_bw_bytes_per_s: float
    nic_bw_bytes_per_s: float
    gpus_per_node: int
    nvlink_domain_gpus: int
    kind: str = "public"
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    measured: dict[str, str] = field(default_factory=dict)
    gemm_rows: list[dict] = field(default_factory=list)
    attention_rows: list[dict] = field(default_factory=list)
    collective_rows: list[dict] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    host: HostCosts = field(default_factory=HostCosts)
    host_cpu: str = ""  # "x86" | "grace" | "" (not stated); the host model's CPU type (HOST_CPUS)
    path: Path | None = None
    _gemm: dict = field(default_factory=dict, repr=False)
    _attn: dict = field(default_factory=dict, repr=False)
    _coll: dict = field(default_factory=dict, repr=False)
    _gemm_best: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._build_curves()

    # ------------------------------------------------------------------ build
    def _build_curves(self) -> None:
        groups: dict[tuple, list] = {}
        for r in self.gemm_rows:
            groups.setdefault((int(r["n"]), int(r["k"])), []).append(r)
        self._gemm_best = max((r["tflops"] * 1e12 for r in self.gemm_rows), default=0.0)
        if self.timing.has_gemm_model:
            # residual efficiency R = measured / shape factor, held flat outside the rows
            self._gemm = {
                key: Curve.from_points(
                    [r["tokens"] for r in rs],
                    [r["tflops"] * 1e12 / float(self.gemm_shape_factor(r["tokens"], key[0], key[1])) for r in rs],
                    below="efficiency")
                for key, rs in groups.items()
            }
        else:
            self._gemm = {
                key: Curve.from_points([r["tokens"] for r in rs], [r["tflops"] * 1e12 for r in rs])
                for key, rs in groups.items()
            }
        groups = {}
        for r in self.attention_rows:
            key = (r["direction"], bool(r["causal"]), r["layout"], int(r["head_dim"]))
            groups.setdefault(key, []).append(r)
        self._attn = {
            key: Curve.from_points(
                [r["seqlen"] for r in rs], [r["tflops"] * 1e12 for r in rs], below="efficiency"
            )
            for key, rs in groups.items()
        }
        groups = {}
        for r in self.collective_rows:
            groups.setdefault((r["op"], r["tier"]), []).append(r)
        self._coll = {
            key: Curve.from_points([r["bytes"] for r in rs], [r["busbw_gb_per_s"] * 1e9 for r in rs])
            for key, rs in groups.items()
        }

    # ----------------------------------------------------------------- lookups
    def gemm_shape_factor(self, m, n: int, k: int, *, precision: str = "bf16") -> np.ndarray:
        """Fraction (<= 1) of the tensor cores' main-loop rate an (m × k) @ (k × n) GEMM keeps.

        Wave quantization: the output is cut into tiles (``GEMM_TILES``, best
        choice per shape, as cuBLAS's heuristics pick one), optionally split
        along K (``GEMM_SPLIT_K``) when there are fewer tiles than SMs; tiles
        run in waves of ``sms``; the last partial wave and partially filled
        edge tiles waste their share. Each tile's K loop pays a fixed
        prologue/epilogue worth ``gemm_k_half`` of K: efficiency
        ``k_piece / (k_piece + k_half)``. In FP8 the main loop runs
        ``peak_fp8 / peak_bf16`` times faster while the epilogue (writing the
        BF16 tile) takes as long, so ``k_half`` grows by that ratio. 1.0 when
        the profile has no shape model (``timing.sms == 0``).
        """
        m = np.maximum(np.asarray(m, dtype=float), 1.0)
        t = self.timing
        if not t.has_gemm_model:
            return np.ones_like(m)
        k_half = t.gemm_k_half * (t.peak_fp8_flops / self.peak_bf16_flops if precision == "fp8" and t.has_fp8 else 1.0)
        best = np.zeros_like(m)
        sms = float(t.sms)
        for tm, tn, rel in GEMM_TILES:
            tiles = np.ceil(m / tm) * math.ceil(n / tn)
            for split in GEMM_SPLIT_K:
                kp = k / split
                if split > 1 and kp < 4 * k_half:
                    break
                waves = np.ceil(tiles * split / sms)
                util = (m * n * split) / (waves * sms * tm * tn)
                best = np.maximum(best, rel * util * kp / (kp + k_half))
        return best

    def gemm_flops_per_s(self, tokens, n: int, k: int, *, precision: str = "bf16") -> np.ndarray:
        """Achieved FLOP/s of a (tokens × k) @ (k × n) GEMM (compute rate; no memory roofline).

        Uses the table shape nearest to (n, k) in log(n·k) (ties: nearest in
        log(n/k)), interpolated over the token count. With a shape model
        (``[timing] sms``) the table's rate is divided by its own shape factor
        and multiplied by the asked shape's (:meth:`gemm_shape_factor`), so the
        rate depends on all of M, N and K and equals the table at its rows.
        ``precision="fp8"`` scales by ``fp8_gemm_best_tflops`` over the BF16
        rate of an 8192³ product, with the FP8 shape factor relative to
        8192³ (the FP8 main loop is shorter, so small K costs more; raises
        :class:`ProfileError` naming ``timing.fp8_gemm_best_tflops`` when the
        profile has no FP8 figures). Calibration scales multiply the result.
        """
        key = min(
            self._gemm,
            key=lambda s: (abs(math.log(s[0] * s[1]) - math.log(n * k)), abs(math.log(s[0] / s[1]) - math.log(n / k))),
        )
        t = self.timing
        if precision not in ("bf16", "fp8"):
            raise ProfileError("precision", precision, "'bf16' or 'fp8'", where=str(self.path or self.name))
        ratio = self.fp8_gemm_ratio() if precision == "fp8" else 1.0
        rate = self._gemm[key](tokens)
        if t.has_gemm_model and precision == "fp8":  # FP8 shape factor relative to the 8192^3 FP8 figure
            ref = float(self.gemm_shape_factor(8192.0, 8192, 8192, precision="fp8"))
            rel = np.minimum(self.gemm_shape_factor(tokens, n, k, precision="fp8") / ref, 1.0)
            rate = np.minimum(rate * float(self.gemm_shape_factor(8192.0, 8192, 8192)) * rel, self._gemm_best) * ratio
        elif t.has_gemm_model:  # no shape beats the best measured row
            rate = np.minimum(rate * self.gemm_shape_factor(tokens, n, k), self._gemm_best)
        else:
            rate = rate * ratio
        rate = rate * t.gemm_efficiency_scale * (t.fp8_gemm_efficiency_scale if precision == "fp8" else 1.0)
        rate = np.minimum(rate, self.peak_flops(precision))  # no GEMM runs faster than the device's peak
        if t.has_gemm_model:  # memory roofline: operands in, bf16 result out, at HBM bandwidth
            m = np.maximum(np.asarray(tokens, dtype=float), 1.0)
            b_in = 1.0 if precision == "fp8" else 2.0
            nbytes = b_in * (m * k + k * n) + 2.0 * m * n
            rate = np.minimum(rate, 2.0 * m * n * k * self.hbm_bw_bytes_per_s / nbytes)
        return rate

    def gemm_max_flops_per_s(self, n: int, k: int, *, precision: str = "bf16") -> float:
        """An upper bound of :meth:`gemm_flops_per_s` over every token count (for lower bounds on time)."""
        key = min(
            self._gemm,
            key=lambda s: (abs(math.log(s[0] * s[1]) - math.log(n * k)), abs(math.log(s[0] / s[1]) - math.log(n / k))),
        )
        rate = float(np.exp(self._gemm[key].log_y.max()))  # shape factor <= 1
        if self.timing.has_gemm_model:
            rate = min(rate, self._gemm_best)
        rate *= self.timing.gemm_efficiency_scale
        if precision == "fp8":
            rate *= self.fp8_gemm_ratio() * self.timing.fp8_gemm_efficiency_scale
        return min(rate, self.peak_flops(precision))

    def peak_flops(self, precision: str = "bf16") -> float:
        """The device's dense peak in FLOP/s for ``precision`` (``timing.peak_fp8_flops`` for fp8 when set)."""
        if precision == "fp8" and self.timing.has_fp8:
            return float(self.timing.peak_fp8_flops)
        return float(self.peak_bf16_flops)

    def fp8_gemm_ratio(self) -> float:
        """FP8 over BF16 achieved GEMM rate, both on an 8192³ product (``fp8_gemm_best_tflops`` is one)."""
        t = self.timing
        if not t.has_fp8:
            raise ProfileError("timing.fp8_gemm_best_tflops", t.fp8_gemm_best_tflops,
                               "FP8 figures in the profile ([timing] peak_fp8_flops and fp8_gemm_best_tflops) "
                               "to run precision = 'fp8'", where=str(self.path or self.name))
        key = min(self._gemm, key=lambda s: abs(math.log(s[0] * s[1]) - math.log(8192.0 * 8192.0)))
        bf16 = float(self._gemm[key](8192.0) * self.gemm_shape_factor(8192.0, 8192, 8192))
        return t.fp8_gemm_best_tflops * 1e12 / bf16

    def attention_flops_per_s(self, seqlen, *, direction: str, causal: bool, head_dim: int) -> np.ndarray:
        """Achieved FLOP/s of flash attention on one sequence of ``seqlen`` tokens.

        Prefers the ``varlen`` layout (what packing runs) and falls back to
        ``dense``; uses the nearest measured head dimension.
        """
        best = None
        for (d, c, lay, hd), curve in self._attn.items():
            if d != direction or c != causal:
                continue
            score = (lay != "varlen", abs(hd - head_dim))
            if best is None or score < best[0]:
                best = (score, curve)
        if best is None:
            raise ProfileError(
                "attention", f"direction={direction}, causal={causal}", "rows for this case", where=str(self.path or self.name)
            )
        return best[1](seqlen) * self.timing.attention_efficiency_scale

    def has_collective(self, op: str, tier: str) -> bool:
        return (op, tier) in self._coll

    def busbw_bytes_per_s(self, op: str, tier: str, nbytes) -> np.ndarray:
        """nccl-tests bus bandwidth of ``op`` on ``tier`` at message size ``nbytes``."""
        key = (op, tier)
        if key not in self._coll:
            if op in ("sendrecv", "all_to_all"):
                # fall back to the closest ring collective on the same tier
                key = ("all_gather", tier)
            if key not in self._coll:
                raise ProfileError("collectives", f"{op}/{tier}", "rows for this op and tier", where=str(self.path or self.name))
        scale = self.timing.network_efficiency if tier == "network" else self.timing.nvlink_efficiency
        return self._coll[key](nbytes) * scale

    def collective_time_s(self, op: str, tier: str, nbytes, n: int) -> np.ndarray:
        """Time of one collective of message size ``nbytes`` over ``n`` ranks.

        ``time = nbytes * bus_factor(op, n) / busbw(nbytes)``; the latency
        measured at small sizes is carried by the bus-bandwidth curve.
        ``n <= 1`` costs nothing (except sendrecv, which is point-to-point).
        """
        nbytes = np.asarray(nbytes, dtype=float)
        if n <= 1 and op != "sendrecv":
            return np.zeros_like(nbytes)
        bw = self.busbw_bytes_per_s(op, tier, np.maximum(nbytes, 1.0))
        return np.where(nbytes > 0, nbytes * bus_factor(op, n) / bw, 0.0)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "peak_bf16_tflops": self.peak_bf16_flops / 1e12,
            "hbm_gb": self.hbm_bytes / 1e9,
            "hbm_bw_tb_per_s": self.hbm_bw_bytes_per_s / 1e12,
            "nvlink_gb_per_s": self.nvlink_bw_bytes_per_s / 1e9,
            "nic_gb_per_s": self.nic_bw_bytes_per_s / 1e9,
            "gpus_per_node": self.gpus_per_node,
            "nvlink_domain_gpus": self.nvlink_domain_gpus,
            "host_cpu": self.host_cpu,
            "gemm_rows": len(self.gemm_rows),
            "attention_rows": len(self.attention_rows),
            "collective_rows": len(self.collective_rows),
            "timing": {f: getattr(self.timing, f) for f in TIMING_FIELDS},
            "host": dict(self.host.__dict__),
        }


# ---------------------------------------------------------------------- I/O
class DeviceValues(InputModel):
    """``[device]`` of profile.toml: scalar figures of one GPU and its node, with physical bounds.

    The bounds are wide (any GPU of the last decade and the next few years,
    and a CPU measured for tests, fits) but refuse typos and unit mistakes: a
    peak of 1 FLOP/s or 1e30, a node of 0 GPUs. A peak below a table's
    throughput is refused separately (:func:`_check_below_peak`).
    """

    model_config = STRICT | {"extra": "allow"}  # a newer format may add figures; they are ignored here

    peak_bf16_flops: float = Field(ge=1e9, le=1e17, description="dense BF16 peak in FLOP/s")
    hbm_bytes: float = Field(ge=1e8, le=1e13, description="HBM capacity in bytes")
    hbm_bw_bytes_per_s: float = Field(ge=1e8, le=1e14, description="HBM bandwidth in bytes/s")
    nvlink_bw_bytes_per_s: float = Field(ge=1e6, le=1e14, description="NVLink bandwidth per GPU per direction, bytes/s")
    nic_bw_bytes_per_s: float = Field(ge=1e6, le=1e13, description="scale-out NIC bandwidth per GPU, bytes/s")
    gpus_per_node: int = Field(ge=1, le=1024, description="GPUs per node")
    nvlink_domain_gpus: int = Field(ge=1, le=1_000_000, description="GPUs per NVLink domain")


class ProfileMeta(InputModel):
    """profile.toml as a whole (``[timing]`` is checked by :func:`_read_timing`)."""

    format_version: Literal[1] = Field(description="profile format version")
    name: str = Field(min_length=1, description="profile name")
    kind: Literal["public", "measured", "mixed", "calibrated"] = Field(
        "public", description="where the figures come from (calibrated: a copy with timing knobs fitted by "
        "dcpsim calibrate, its sources naming the fit data)")
    description: str = ""
    host_cpu: Literal["x86", "grace"] | None = Field(
        None, description="the CPU type of the host that drives the GPUs (x86 server CPUs, or NVIDIA Grace in "
                          "GH200/GB200 superchips); sources.host_cpu names the CPU model")
    device: DeviceValues
    sources: dict[str, str] = Field(default_factory=dict, description="one origin sentence per value")
    measured: dict[str, Any] = Field(default_factory=dict, description="device, driver, versions, date, command")
    tables: dict[str, str] = Field(default_factory=dict, description="file names of the CSV tables")
    timing: dict[str, Any] = Field(default_factory=dict, description="optional timing parameters")
    host: dict[str, Any] | None = Field(None, description="host (CPU) dispatch costs, dcpsim.hardware.host")


# largest plausible value of a CSV cell of each numeric kind (refuses unit mistakes such as 1e30 tokens)
CSV_MAX = {"int": 2**50, "float": 1e6}


def _num(where: str, fieldname: str, value, *, integer: bool = False, positive: bool = True):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ProfileError(fieldname, value, "a number", where=where) from None
    if not math.isfinite(v) or (positive and v <= 0):
        raise ProfileError(fieldname, value, "a finite positive number", where=where)
    top = CSV_MAX["int" if integer else "float"]
    if v > top:
        raise ProfileError(fieldname, value, f"a number <= {top:g}", where=where)
    if integer:
        if v != int(v):
            raise ProfileError(fieldname, value, "an integer", where=where)
        return int(v)
    return v


def _cell(kind: str, col: str, v, where: str):
    """One CSV cell of ``kind`` (int, float, bool, source, or an enum ``a|b|c``), checked."""
    if kind in ("int", "float"):
        return _num(where, col, v, integer=kind == "int")
    if kind == "bool":
        if str(v).strip().lower() not in ("0", "1", "true", "false"):
            raise ProfileError(col, v, "0/1 or true/false", where=where)
        return str(v).strip().lower() in ("1", "true")
    if kind == "source":
        if not str(v or "").strip():
            raise ProfileError(col, v, "a non-empty origin for this row", where=where)
        return str(v).strip()
    allowed = kind.split("|")
    if v not in allowed:
        raise ProfileError(col, v, f"one of {allowed}", where=where)
    return v


def _read_csv(path: Path, columns: dict[str, str]) -> list[dict]:
    """Read a table (UTF-8, ``#`` comment lines skipped), checking columns; ``columns`` maps name -> kind."""
    if not path.is_file():
        raise ProfileError("tables", str(path.name), "an existing CSV file", where=str(path.parent))
    text = read_text(path, "profile table")
    reader = csv.DictReader(line for line in io.StringIO(text, newline="") if not line.lstrip().startswith("#"))
    try:
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ProfileError("columns", reader.fieldnames, f"columns {list(columns)} (missing {missing})", where=str(path))
        rows = [{col: _cell(kind, col, raw[col], f"{path}:{i}") for col, kind in columns.items()}
                for i, raw in enumerate(reader, start=2)]
    except csv.Error as exc:
        raise ProfileError("csv", str(exc), "a well-formed CSV table", where=str(path)) from None
    if not rows:
        raise ProfileError("rows", 0, "at least one data row", where=str(path))
    return rows


GEMM_COLUMNS = {"n": "int", "k": "int", "tokens": "int", "tflops": "float", "source": "source"}
ATTN_COLUMNS = {
    "direction": "fwd|bwd",
    "causal": "bool",
    "layout": "|".join(ATTN_LAYOUTS),
    "head_dim": "int",
    "seqlen": "int",
    "tflops": "float",
    "source": "source",
}
COLL_COLUMNS = {
    "op": "|".join(COLLECTIVE_OPS),
    "tier": "|".join(TIERS),
    "bytes": "int",
    "busbw_gb_per_s": "float",
    "ranks": "int",
    "source": "source",
}


def _check_sorted_unique(rows: list[dict], key_cols: tuple[str, ...], size_col: str, where: Path) -> None:
    seen: dict[tuple, list] = {}
    for r in rows:
        seen.setdefault(tuple(r[c] for c in key_cols), []).append(r[size_col])
    for key, sizes in seen.items():
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ProfileError(size_col, sizes, f"strictly increasing sizes within {dict(zip(key_cols, key, strict=True))}", where=str(where))


def load_profile(path: str | Path) -> HardwareProfile:
    """Load and validate a profile folder (or its ``profile.toml``)."""
    path = Path(path)
    folder = path.parent if path.suffix == ".toml" else path
    meta_path = folder / "profile.toml"
    if not meta_path.is_file():
        raise ProfileError("profile", str(folder), "a folder holding profile.toml")
    where = str(meta_path)
    meta = _read_meta(meta_path)
    values = meta.device.model_dump(include=set(DEVICE_FIELDS))
    for f in DEVICE_FIELDS:
        if not meta.sources.get(f, "").strip():
            raise ProfileError(f"sources.{f}", meta.sources.get(f), "a sentence naming the origin of this value", where=where)
    if values["nvlink_domain_gpus"] < values["gpus_per_node"]:
        raise ProfileError("device.nvlink_domain_gpus", values["nvlink_domain_gpus"], f">= gpus_per_node ({values['gpus_per_node']})", where=where)
    timing = _read_timing(meta.timing, meta.sources, where)
    if meta.host_cpu is not None and not meta.sources.get("host_cpu", "").strip():
        raise ProfileError("sources.host_cpu", meta.sources.get("host_cpu"), "a sentence naming the host CPU and its "
                           "source", where=where)
    if meta.host_cpu and isinstance(meta.host, dict) and meta.host.get("cpu") not in (None, meta.host_cpu):
        raise ProfileError("host.cpu", meta.host.get("cpu"), f"the profile's host_cpu ({meta.host_cpu!r})", where=where)
    gemm, attn, coll = _read_tables(folder, meta.tables, where)
    _check_below_peak(gemm, attn, values["peak_bf16_flops"], folder)
    if timing.has_fp8 and timing.fp8_gemm_best_tflops * 1e12 > timing.peak_fp8_flops * (1 + 1e-9):
        raise ProfileError("timing.fp8_gemm_best_tflops", timing.fp8_gemm_best_tflops,
                           f"<= timing.peak_fp8_flops ({timing.peak_fp8_flops / 1e12:g} TFLOPS)", where=where)
    host = host_from_table(meta.host, meta.sources, where)
    if host.enabled and timing.per_kernel_overhead_s > 0:  # the host timeline prices launches: no second floor
        raise ProfileError("timing.per_kernel_overhead_s", timing.per_kernel_overhead_s,
                           "0 in a profile with a [host] table (the host timeline prices kernel launches)", where=where)
    prof = HardwareProfile(
        name=meta.name,
        kind=meta.kind,
        description=meta.description,
        sources=dict(meta.sources),
        measured={k: str(v) for k, v in meta.measured.items()},
        gemm_rows=gemm,
        attention_rows=attn,
        collective_rows=coll,
        timing=timing,
        host=host,
        host_cpu=meta.host_cpu or "",
        path=folder,
        **values,
    )
    _check_scaled_peaks(prof, where)
    return prof


def _check_scaled_peaks(prof: HardwareProfile, where: str) -> None:
    """No kernel rate the cost model can produce exceeds the device's peak, calibration scales included: the best
    GEMM row × ``gemm_efficiency_scale`` and the best attention row × ``attention_efficiency_scale`` stay at or
    below ``peak_bf16_flops``, and the best FP8 GEMM rate (× both GEMM scales) at or below ``peak_fp8_flops``
    (otherwise a simulated TFLOPS/GPU could pass the peak, MFU above 100%)."""
    t, peak = prof.timing, prof.peak_bf16_flops
    tol = 1 + 1e-9
    for field_, scale, rows, what in (("timing.gemm_efficiency_scale", t.gemm_efficiency_scale, prof.gemm_rows, "GEMM"),
                                      ("timing.attention_efficiency_scale", t.attention_efficiency_scale,
                                       prof.attention_rows, "attention")):
        best = max(r["tflops"] for r in rows) * 1e12
        if best * scale > peak * tol:
            raise ProfileError(field_, scale, f"<= {peak / best:.6g}: the best {what} row ({best / 1e12:g} TFLOPS) "
                               f"times it must stay <= peak_bf16_flops ({peak / 1e12:g} TFLOPS)", where=where)
    if t.has_fp8:  # the FP8 anchor figure with both scales; other shapes are clamped at the FP8 peak (gemm_flops_per_s)
        fp8 = t.fp8_gemm_best_tflops * 1e12 * t.gemm_efficiency_scale * t.fp8_gemm_efficiency_scale
        if fp8 > t.peak_fp8_flops * tol:
            raise ProfileError("timing.fp8_gemm_efficiency_scale", t.fp8_gemm_efficiency_scale,
                               f"a value keeping fp8_gemm_best_tflops x the GEMM scales ({fp8 / 1e12:g} TFLOPS with "
                               f"gemm_efficiency_scale {t.gemm_efficiency_scale:g}) <= timing.peak_fp8_flops "
                               f"({t.peak_fp8_flops / 1e12:g} TFLOPS)", where=where)


def _read_meta(meta_path: Path) -> ProfileMeta:
    """profile.toml, read (UTF-8) and validated; errors name the file and the key (``device.peak_bf16_flops``)."""
    try:
        data = read_toml(meta_path, "profile.toml")
    except ConfigError as exc:
        raise ProfileError(exc.field, exc.value, exc.expected, where=exc.where) from None
    if type(data.get("format_version")) is not int or data.get("format_version") != FORMAT_VERSION:
        raise ProfileError("format_version", data.get("format_version"), str(FORMAT_VERSION), where=str(meta_path))
    try:
        return validate_model(ProfileMeta, data, where=str(meta_path))
    except ConfigError as exc:
        raise ProfileError(exc.field, exc.value, exc.expected, where=exc.where) from None


def _read_tables(folder: Path, tables: dict, where: str) -> tuple[list[dict], list[dict], list[dict]]:
    """The GEMM, attention and collective tables, checked (sorted sizes, the cases the cost model needs)."""
    gemm = _read_csv(_table_path(folder, tables, "gemm", where), GEMM_COLUMNS)
    attn = _read_csv(_table_path(folder, tables, "attention", where), ATTN_COLUMNS)
    coll = _read_csv(_table_path(folder, tables, "collectives", where), COLL_COLUMNS)
    _check_sorted_unique(gemm, ("n", "k"), "tokens", folder / "gemm.csv")
    _check_sorted_unique(attn, ("direction", "causal", "layout", "head_dim"), "seqlen", folder / "attention.csv")
    _check_sorted_unique(coll, ("op", "tier"), "bytes", folder / "collectives.csv")
    for need in (("fwd", True), ("bwd", True)):
        if not any(r["direction"] == need[0] and r["causal"] == need[1] for r in attn):
            raise ProfileError("attention", f"direction={need[0]} causal={need[1]}", "rows for this case", where=str(folder / "attention.csv"))
    for tier in TIERS:
        if not any(r["tier"] == tier for r in coll):
            raise ProfileError("collectives", f"tier={tier}", "rows for both tiers (nvlink and network)", where=str(folder / "collectives.csv"))
    return gemm, attn, coll


def _check_below_peak(gemm: list[dict], attn: list[dict], peak_flops: float, folder: Path) -> None:
    """No measured or quoted BF16 kernel runs faster than the device's peak (else MFU could pass 100%)."""
    for fname, rows in (("gemm.csv", gemm), ("attention.csv", attn)):
        top = max(rows, key=lambda r: r["tflops"])
        if top["tflops"] * 1e12 > peak_flops * (1 + 1e-9):
            raise ProfileError("tflops", top["tflops"], f"<= the device's peak_bf16_flops ({peak_flops / 1e12:g} TFLOPS): "
                               "a kernel cannot run faster than the peak", where=str(folder / fname))


def _read_timing(table, sources: dict, where: str) -> Timing:
    """Validate the optional ``[timing]`` table (every value present names its origin)."""
    if not isinstance(table, dict):
        raise ProfileError("timing", table, "a [timing] table", where=where)
    unknown = sorted(set(table) - set(TIMING_FIELDS))
    if unknown:
        raise ProfileError(f"timing.{unknown[0]}", table[unknown[0]], f"one of {list(TIMING_FIELDS)}", where=where)
    vals = {}
    for f, v in table.items():
        zero_ok = f in TIMING_ZERO_OK
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise ProfileError(f"timing.{f}", v, "a number", where=where) from None
        if isinstance(v, bool) or not math.isfinite(fv) or fv < 0 or (fv == 0 and not zero_ok) or fv > TIMING_MAX[f]:
            lo = ">= 0" if zero_ok else "> 0"
            hint = " (omit timing.sms for no GEMM shape model)" if f == "sms" else ""
            raise ProfileError(f"timing.{f}", v, f"a finite number {lo} and <= {TIMING_MAX[f]:g}{hint}", where=where)
        if f in TIMING_INT_FIELDS:
            if fv != int(fv):
                raise ProfileError(f"timing.{f}", v, "an integer", where=where)
            fv = int(fv)
        if not str(sources.get(f"timing.{f}", "")).strip():
            raise ProfileError(f"sources.timing.{f}", sources.get(f"timing.{f}"),
                               "a sentence naming the origin of this value", where=where)
        vals[f] = fv
    t = Timing(**vals)
    if t.has_gemm_model and (t.gemm_tile_m < 1 or t.gemm_tile_n < 1):
        raise ProfileError("timing.gemm_tile_m", t.gemm_tile_m, "positive tile sizes", where=where)
    if (t.peak_fp8_flops > 0) != (t.fp8_gemm_best_tflops > 0):
        raise ProfileError("timing.fp8_gemm_best_tflops", t.fp8_gemm_best_tflops,
                           "set together with timing.peak_fp8_flops (both or neither)", where=where)
    return t


def _table_path(folder: Path, tables: dict, key: str, where: str) -> Path:
    """``tables.<key>``: a plain file name inside the profile folder (no path, no ``..``), default ``<key>.csv``."""
    name = tables.get(key, f"{key}.csv")
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\x00" in name or Path(name).is_absolute() or Path(name).name != name):
        raise ProfileError(f"tables.{key}", name, "a plain file name inside the profile folder, e.g. "
                           f"\"{key}.csv\" (no folders, no '..', not an absolute path)", where=where)
    return folder / name


def write_profile(profile: HardwareProfile, folder: str | Path, *, force: bool = False) -> Path:
    """Write ``profile`` in the on-disk format (used by the profiler and builders).

    Atomic, and only over files dcpsim wrote unless ``force`` (the builder of
    the shipped profiles regenerates the repository's own files): see :mod:`dcpsim.outdir`.
    """
    from dcpsim.outdir import write_text, write_with

    folder = Path(folder)

    def q(s: str) -> str:
        return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [
        f"format_version = {FORMAT_VERSION}",
        f"name = {q(profile.name)}",
        f"kind = {q(profile.kind)}",
        f"description = {q(profile.description)}",
    ]
    if profile.host_cpu:
        lines.append(f"host_cpu = {q(profile.host_cpu)}")
    lines += ["", "[device]"]
    for f in DEVICE_FIELDS:
        v = getattr(profile, f)
        lines.append(f"{f} = {int(v) if f in ('gpus_per_node', 'nvlink_domain_gpus') else repr(float(v))}")
    # sms = 0 (no GEMM shape model) is written by omission: the reader refuses a zero SM count
    timing = [(f, getattr(profile.timing, f)) for f in TIMING_FIELDS if not (f == "sms" and profile.timing.sms == 0)]
    if profile.timing != Timing():
        lines += ["", "[timing]"]
        lines += [f"{f} = {v if isinstance(v, int) else repr(float(v))}" for f, v in timing]
    if profile.host.enabled:
        from dcpsim.hardware.host import HOST_FIELDS

        lines += ["", "[host]", f"cpu = {q(profile.host.cpu)}"]
        lines += [f"{f} = {float(getattr(profile.host, f))!r}" for f in HOST_FIELDS]
    lines += ["", "[sources]"]
    for k, v in profile.sources.items():
        lines.append(f"{q(k) if '.' in k else k} = {q(v)}")
    if profile.measured:
        lines += ["", "[measured]"]
        for k, v in profile.measured.items():
            lines.append(f"{k} = {q(v)}")
    lines += ["", "[tables]", 'gemm = "gemm.csv"', 'attention = "attention.csv"', 'collectives = "collectives.csv"', ""]
    write_text(folder / "profile.toml", "\n".join(lines), force=force)
    for fname, rows, cols in (
        ("gemm.csv", profile.gemm_rows, GEMM_COLUMNS),
        ("attention.csv", profile.attention_rows, ATTN_COLUMNS),
        ("collectives.csv", profile.collective_rows, COLL_COLUMNS),
    ):
        write_with(folder / fname, lambda t, rows=rows, cols=cols: _write_table(t, rows, cols), force=force)
    return folder


def _write_table(path: Path, rows: list[dict], cols: tuple[str, ...]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(cols))
        w.writeheader()
        for r in rows:
            out = dict(r)
            if "causal" in out:
                out["causal"] = int(bool(out["causal"]))
            for c in ("tflops", "busbw_gb_per_s"):
                if c in out:
                    out[c] = f"{float(out[c]):.6g}"
            w.writerow({c: out[c] for c in cols})
