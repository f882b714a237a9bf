"""Hardware profile files: reading, validating and writing a profile folder (the format is described in
:mod:`dcpsim.hardware.profile`, which re-exports every name here).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from dcpsim.errors import ConfigError, ProfileError
from dcpsim.hardware.host import host_from_table
from dcpsim.hardware.spec import (
    ATTN_LAYOUTS,
    COLLECTIVE_OPS,
    DEVICE_FIELDS,
    FORMAT_VERSION,
    TIERS,
    TIMING_FIELDS,
    TIMING_INT_FIELDS,
    TIMING_MAX,
    TIMING_ZERO_OK,
    HardwareProfile,
    Timing,
)
from dcpsim.schema import STRICT, InputModel, parse_model, read_text, read_toml


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
        return parse_model(ProfileMeta, data, where=str(meta_path))
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
