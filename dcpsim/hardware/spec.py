"""What a hardware profile holds in memory: :class:`HardwareProfile`, its timing knobs and interpolation curves
(split out of :mod:`dcpsim.hardware.profile`, which documents the on-disk format and re-exports every name here)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dcpsim.errors import ProfileError
from dcpsim.hardware.host import HostCosts

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
    # time factor (>= 1) of the backward FP8 GEMMs (dgrad, wgrad), which Transformer Engine runs with split
    # (promoted) accumulation instead of the fast accumulation of the forward GEMM (dcpsim.cost.compute)
    fp8_split_accumulation_factor: float = 1.0

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
              "attention_efficiency_scale": 100.0, "nvlink_efficiency": 10.0, "network_efficiency": 10.0,
              "fp8_split_accumulation_factor": 10.0}


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


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU (and its node/network) as dcpsim sees it. Units in field names.

    Frozen: :func:`dcpsim.hardware.get_profile` hands every caller one cached object, so a field assigned in
    place would silently change every later run in the process. A variant is ``dataclasses.replace``."""

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
    # look-ups that depend only on the fields above (rebuilt empty by dataclasses.replace): the table shape
    # nearest to (n, k), and the shape factor's candidate (tile, split-K) arrays per (n, k, k_half)
    _memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # load_profile checks these with their bounds; a variant (dataclasses.replace) comes here only: a NaN HBM
        # ended in numpy's 'cannot convert float NaN to integer', a NIC of 0 B/s was costed as a network
        for f in ("peak_bf16_flops", "hbm_bytes", "hbm_bw_bytes_per_s", "nvlink_bw_bytes_per_s", "nic_bw_bytes_per_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise ProfileError(f"device.{f}", v, "a positive, finite number", where=self.name)
        for f in ("gpus_per_node", "nvlink_domain_gpus"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ProfileError(f"device.{f}", v, "a positive integer", where=self.name)
        self._build_curves()

    # ------------------------------------------------------------------ build
    def _build_curves(self) -> None:
        groups: dict[tuple, list] = {}
        for r in self.gemm_rows:
            groups.setdefault((int(r["n"]), int(r["k"])), []).append(r)
        gemm_best = max((r["tflops"] * 1e12 for r in self.gemm_rows), default=0.0)
        if self.timing.has_gemm_model:
            # residual efficiency R = measured / shape factor, held flat outside the rows
            gemm = {
                key: Curve.from_points(
                    [r["tokens"] for r in rs],
                    [r["tflops"] * 1e12 / float(self.gemm_shape_factor(r["tokens"], key[0], key[1])) for r in rs],
                    below="efficiency")
                for key, rs in groups.items()
            }
        else:
            gemm = {
                key: Curve.from_points([r["tokens"] for r in rs], [r["tflops"] * 1e12 for r in rs])
                for key, rs in groups.items()
            }
        groups = {}
        for r in self.attention_rows:
            key = (r["direction"], bool(r["causal"]), r["layout"], int(r["head_dim"]))
            groups.setdefault(key, []).append(r)
        attn = {
            key: Curve.from_points(
                [r["seqlen"] for r in rs], [r["tflops"] * 1e12 for r in rs], below="efficiency"
            )
            for key, rs in groups.items()
        }
        groups = {}
        for r in self.collective_rows:
            groups.setdefault((r["op"], r["tier"]), []).append(r)
        coll = {
            key: Curve.from_points([r["bytes"] for r in rs], [r["busbw_gb_per_s"] * 1e9 for r in rs])
            for key, rs in groups.items()
        }
        # frozen: the derived tables are set once, here (object.__setattr__, as dataclasses' own __init__ does)
        object.__setattr__(self, "_gemm_best", gemm_best)
        object.__setattr__(self, "_gemm", gemm)
        object.__setattr__(self, "_attn", attn)
        object.__setattr__(self, "_coll", coll)

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
        if m.size > 4096 and not _mostly_distinct_ascending(m):  # elementwise in m: computed once per distinct
            u, inv = np.unique(m, return_inverse=True)  # value (token counts repeat a lot)
            if 2 * u.size < m.size:
                return self.gemm_shape_factor(u, n, k, precision=precision)[inv.reshape(m.shape)]
        k_half = t.gemm_k_half * (t.peak_fp8_flops / self.peak_bf16_flops if precision == "fp8" and t.has_fp8 else 1.0)
        tm, tn, cn, rel, split, kp = self._shape_candidates(n, k, k_half)
        # every (tile, split) candidate at once, each element by the same operations in the same order as one
        # candidate at a time (bit-identical; in place, rel * util as util * rel); the best candidate per element,
        # never below 0:  tiles = ceil(m / tm) * cn,  waves = ceil(tiles * split / sms),
        # util = (m * n * split) / (waves * sms * tm * tn),  best = max(rel * util * kp / (kp + k_half))
        row = m.reshape(1, -1)
        x = row / tm
        np.ceil(x, out=x)
        x *= cn  # tiles
        x *= split
        x /= float(t.sms)
        np.ceil(x, out=x)  # waves
        x *= float(t.sms)
        x *= tm
        x *= tn
        util = row * n * split
        util /= x
        util *= rel
        util *= kp
        util /= kp + k_half
        return util.max(axis=0, initial=0.0).reshape(m.shape)

    def _shape_candidates(self, n: int, k: int, k_half: float) -> tuple[np.ndarray, ...]:
        """Columns (shape (C, 1)) of the shape factor's candidates: tile M, tile N, ceil(n / tile N), the tile's
        relative rate, split-K and K per split (splits whose piece is under 4 × ``k_half`` are not tried)."""
        key = ("shape", n, k, k_half)
        got = self._memo.get(key)
        if got is None:
            rows = []
            for tm, tn, rel in GEMM_TILES:
                for split in GEMM_SPLIT_K:
                    kp = k / split
                    if split > 1 and kp < 4 * k_half:
                        break
                    rows.append((tm, tn, math.ceil(n / tn), rel, split, kp))
            got = tuple(np.array(c, dtype=float)[:, None] for c in zip(*rows, strict=True))
            self._memo[key] = got
        return got

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
        key = self._memo.get(("gemm", n, k))
        if key is None:
            key = self._memo["gemm", n, k] = min(
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
        key = self._memo.get(("gemm", n, k))
        if key is None:
            key = self._memo["gemm", n, k] = min(
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


def _mostly_distinct_ascending(m: np.ndarray) -> bool:
    """Whether ``m`` (1-D) is ascending with at least half its entries distinct (``np.unique`` would not shrink it
    below half: :meth:`HardwareProfile.gemm_shape_factor` skips that sort, e.g. on the distinct token counts it
    is given); False on anything else (NaN included)."""
    if m.ndim != 1:
        return False
    step = m[1:] != m[:-1]
    return bool((m[1:] >= m[:-1]).all()) and 2 * (1 + int(np.count_nonzero(step))) >= m.size
