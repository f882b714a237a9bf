"""Measure a hardware profile on the local device and write it in the shipped format.

:func:`run_profile` measures, in order: device-memory copy bandwidth, GEMM
throughput for the model's layer shapes (plus the output layer) over token
counts, attention (dense and varlen, forward and backward, causal and not)
over sequence lengths, and collectives over message sizes (torchrun worker,
:mod:`dcpsim.profiling.collectives`). It then assembles a
:class:`~dcpsim.hardware.HardwareProfile`, writes it with
:func:`~dcpsim.hardware.write_profile` next to ``measurements.json`` (every
raw timing), and reloads it with :func:`~dcpsim.hardware.load_profile`.

What is measured and what is taken from elsewhere:

* Tables: GEMM and attention rows are all measured. Collective rows of tier
  ``nvlink`` are measured between the processes of this host (NCCL between
  GPUs; on a CPU, gloo between processes over loopback — the source says so).
  Tier ``network`` rows cannot be measured on one host: they are copied from
  the ``base`` profile (source ``from base profile ...``) and the profile's
  ``kind`` becomes ``mixed``. Without a base (a CPU, or a GPU with no public
  profile) the measured intra-host rows are reused for the network tier, with
  a source saying they are a placeholder.
* Device scalars: ``hbm_bytes`` is queried (GPU memory, or physical RAM on a
  CPU); ``hbm_bw_bytes_per_s`` is measured by a large copy. Peak FLOP/s and
  link bandwidths cannot be measured by a kernel benchmark: they come from the
  base profile (the public profile of the detected GPU by default) or, without
  one, from a stated placeholder (peak = best measured kernel, GEMM or attention; link bandwidths =
  best measured send/recv bus bandwidth; GPUs per node = ranks measured).

Quick mode (``quick=True``) measures small sizes on a reduced model (see
:func:`scale_model`) so that a CPU profile takes seconds, for CI; after
``QUICK_TIME_LIMIT_S`` seconds of kernel timing each remaining case is timed
once, which bounds a run on a slow CPU. The profile is written only once it
loads (:func:`write_checked_profile`): a run never leaves a folder that
``load_profile`` refuses.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from dcpsim.errors import ConfigError
from dcpsim.hardware import HardwareProfile, get_profile, load_profile, write_profile
from dcpsim.hardware.profile import COLLECTIVE_OPS, DEVICE_FIELDS, TIMING_FIELDS, Timing
from dcpsim.model import ModelSpec, get_model
from dcpsim.outdir import write_text
from dcpsim.profiling.measure import (
    AttentionKernels,
    DeviceInfo,
    MeasureContext,
    Timer,
    cpu_threads,
    detect_device,
    measure_attention,
    measure_copy_bandwidth,
    measure_gemm,
    require_torch,
)

KIB, MIB, GIB = 1024, 1024**2, 1024**3
# Public profile of a detected GPU (substring of torch's device name -> shipped profile).
GPU_BASES = (("H200", "h200-sxm"), ("H100", "h100-sxm"), ("A100", "a100-sxm-80gb"), ("B200", "b200"))
QUICK_HIDDEN = 512  # quick mode shrinks the model until hidden <= this
CPU_MAX_SIZE = 16384  # largest token count / document length a full-mode CPU run accepts
QUICK_TIME_LIMIT_S = 60.0  # quick mode: seconds of kernel timing before each remaining case is timed once


def scale_model(model: ModelSpec, scale: int) -> ModelSpec:
    """``model`` with hidden, heads, KV heads, FFN and vocabulary divided by ``scale`` (head_dim kept).

    Attention kernels behave by head dimension, so it is kept; FFN is rounded
    to a multiple of 8 and the vocabulary up to a multiple of 64.
    """
    if not isinstance(scale, int) or scale < 1:
        raise ConfigError("--scale", scale, "a positive integer")
    if scale == 1:
        return model
    if model.n_heads % scale or model.hidden % scale:
        raise ConfigError("--scale", scale, f"a divisor of n_heads ({model.n_heads}) and hidden ({model.hidden})")
    heads = model.n_heads // scale
    kv = max(1, model.n_kv_heads // scale)
    if heads % kv:
        raise ConfigError("--scale", scale, f"a divisor that keeps n_heads/scale ({heads}) a multiple of the KV heads ({kv})")
    ffn = max(8, int(round(model.ffn_hidden / scale / 8)) * 8)
    vocab = max(64, int(math.ceil(model.vocab / scale / 64)) * 64)
    return replace(
        model, name=f"{model.name}@1/{scale}", hidden=model.hidden // scale, n_heads=heads, n_kv_heads=kv,
        ffn_hidden=ffn, vocab=vocab, source=f"{model.name} scaled down by {scale} (hidden, heads, ffn, vocab); {model.source}",
    )


def quick_scale(model: ModelSpec) -> int:
    """Smallest divisor of n_heads and hidden that brings hidden to at most 512."""
    for s in range(1, model.n_heads + 1):
        if model.n_heads % s == 0 and model.hidden % s == 0 and model.hidden // s <= QUICK_HIDDEN:
            if (model.n_heads // s) % max(1, model.n_kv_heads // s) == 0:
                return s
    return model.n_heads


def resolve_model(name: str, scale: int | None, quick: bool) -> tuple[ModelSpec, int]:
    """The (possibly scaled) model to profile or validate, and the scale used."""
    base = get_model(name)
    s = scale if scale is not None else (quick_scale(base) if quick else 1)
    return scale_model(base, s), s


def _pow2_range(lo: int, hi: int, step: int = 2) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= step
    return out


@dataclass(frozen=True)
class ProfileOptions:
    """What to measure. Sizes: tokens per GEMM, document lengths, message bytes."""

    out: Path
    model: ModelSpec
    scale: int = 1
    tp: int = 1
    quick: bool = False
    device: str | None = None
    dtype: str = "bf16"
    base: str | None = "auto"
    tokens: tuple[int, ...] = ()
    seqlens: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    varlen_tokens: int = 16384
    ops: tuple[str, ...] = COLLECTIVE_OPS
    nproc: int | None = None
    collectives: bool = True
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 50
    budget_s: float = 1.0
    copy_bytes: int = GIB
    seed: int = 0
    threads: int | None = None
    command: str = ""
    time_limit_s: float | None = None  # after this many seconds of kernel timing, each remaining case is timed once

    @classmethod
    def make(cls, out, model: ModelSpec, *, quick: bool = False, **kw) -> ProfileOptions:
        """Options with the default sizes of quick or full mode filled in."""
        if quick:  # small sizes and a time limit: seconds on a fast CPU, bounded on a slow one (bf16 emulated)
            d = dict(tokens=tuple(_pow2_range(64, 512)), seqlens=tuple(_pow2_range(32, 512)),
                     sizes=tuple(_pow2_range(4 * KIB, 256 * KIB, 4)), varlen_tokens=512, warmup=1, min_repeats=3,
                     max_repeats=15, budget_s=0.1, copy_bytes=64 * MIB, time_limit_s=QUICK_TIME_LIMIT_S)
        else:
            d = dict(tokens=tuple(_pow2_range(64, 131072)), seqlens=tuple(_pow2_range(128, 131072)),
                     sizes=tuple(_pow2_range(4 * KIB, GIB, 4)), varlen_tokens=16384)
        base = kw.pop("base", "auto")  # None is meaningful here: no base profile
        d.update({k: v for k, v in kw.items() if v is not None and v != ()})
        d["base"] = base
        opts = cls(out=Path(out), model=model, quick=quick, **d)
        opts.check()
        return opts

    def check(self) -> None:
        for name in ("tokens", "seqlens", "sizes"):
            v = getattr(self, name)
            if not v or any((not isinstance(x, int)) or x <= 0 for x in v):
                raise ConfigError(f"--{name}", list(v), "a non-empty list of positive integers")
            if list(v) != sorted(set(v)):
                raise ConfigError(f"--{name}", list(v), "strictly increasing values")
        if self.dtype not in ("bf16", "fp16", "fp32"):
            raise ConfigError("--dtype", self.dtype, "bf16, fp16 or fp32")
        if self.tp < 1 or self.model.n_heads % self.tp or self.model.ffn_hidden % self.tp or self.model.n_kv_heads % self.tp:
            raise ConfigError("--tp", self.tp, f"a divisor of n_heads, n_kv_heads and ffn_hidden of {self.model.name}")
        bad = [o for o in self.ops if o not in COLLECTIVE_OPS]
        if bad:
            raise ConfigError("--ops", bad, f"names from {COLLECTIVE_OPS}")
        if self.nproc is not None and self.nproc < 2:
            raise ConfigError("--nproc", self.nproc, "at least 2")
        if self.time_limit_s is not None and not (isinstance(self.time_limit_s, (int, float))
                                                  and 0 < self.time_limit_s <= 1e6):
            raise ConfigError("--time-limit", self.time_limit_s, "seconds in (0, 1e6]")
        for name in ("warmup", "min_repeats", "max_repeats", "varlen_tokens"):
            if getattr(self, name) < (0 if name == "warmup" else 1):
                raise ConfigError(f"--{name.replace('_', '-')}", getattr(self, name), "a positive integer")


@dataclass
class ProfileResult:
    """The written profile, where it is, and how long each part took (seconds)."""

    profile: HardwareProfile
    path: Path
    seconds: dict[str, float] = field(default_factory=dict)
    kernels: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict:
        return self.profile.summary() | {"path": str(self.path), "seconds": self.seconds, "kernels": self.kernels,
                                         "measured": self.profile.measured}


def default_base(device_name: str, kind: str) -> str | None:
    """Shipped public profile for a GPU name (None for CPUs and unknown GPUs)."""
    if kind != "cuda":
        return None
    up = device_name.upper()
    for key, prof in GPU_BASES:
        if key in up:
            return prof
    return None


class _Bar:
    """rich progress bar on a terminal; silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tasks: dict[str, int] = {}
        self.p = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.p = Progress(TextColumn("[bold]{task.fields[part]:<12}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), TextColumn("{task.description}"), console=Console(stderr=True),
                              transient=False)

    def __enter__(self) -> _Bar:
        if self.p:
            self.p.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.p:
            self.p.__exit__(*exc)

    def add(self, part: str, total: int) -> Callable[[str, bool], None]:
        if not self.p:
            return lambda _label, _done=True: None
        tid = self.p.add_task("", total=total, part=part)
        return lambda label, done=True: self.p.update(tid, advance=1 if done else 0, description=label)

    def add_reporting(self, part: str, total: int) -> Callable[[int, int, str], None]:
        if not self.p:
            return lambda _d, _t, _l: None
        tid = self.p.add_task("starting torchrun", total=total, part=part)
        return lambda d, t, label: self.p.update(tid, completed=d, total=t, description=label)


def _interactive() -> bool:
    import sys

    return sys.stderr.isatty()


def run_profile(opts: ProfileOptions, *, show_progress: bool | None = None, force: bool = False) -> ProfileResult:
    """Measure and write a profile to ``opts.out``; returns the reloaded profile.

    ``opts.out`` is checked before anything is measured: an existing folder may
    hold only files dcpsim wrote unless ``force`` (:mod:`dcpsim.outdir`).

    ``opts.threads`` sets torch's intra-op threads for the whole run (CPU;
    default torch's own count, or 1 for a quick CPU run).
    """
    from dcpsim.outdir import check_out_dir

    check_out_dir(opts.out, force=force)
    threads = opts.threads
    if threads is None and opts.quick and (opts.device or "cpu") == "cpu" and not require_torch().cuda.is_available():
        threads = 1  # quick CPU runs: one thread is steadier on small shared machines (see cpu_threads)
    with cpu_threads(threads):
        return _run_profile(opts, show_progress)


def _run_profile(opts: ProfileOptions, show_progress: bool | None) -> ProfileResult:
    torch = require_torch()
    from dcpsim.profiling.collectives import CollectiveSettings, run_collectives

    info = detect_device(opts.device)
    if info.kind == "cpu" and not opts.quick and max(max(opts.tokens), max(opts.seqlens)) > CPU_MAX_SIZE:
        raise ConfigError("--quick", False, f"--quick, or --tokens and --seqlens up to {CPU_MAX_SIZE}, on a CPU "
                          "(the full sizes, up to 128K, are meant for a GPU and would take hours here)")
    base_name = default_base(info.name, info.kind) if opts.base == "auto" else opts.base
    base = get_profile(base_name) if base_name else None
    nproc = opts.nproc or (info.count if info.kind == "cuda" else 2)
    do_coll = opts.collectives and nproc >= 2
    if not do_coll and base is None:
        raise ConfigError("--base", opts.base, "a base profile to copy collective rows from (collectives are not measured here)")
    torch.manual_seed(opts.seed)
    timer = Timer(info, warmup=opts.warmup, min_repeats=opts.min_repeats, max_repeats=opts.max_repeats, budget_s=opts.budget_s,
                  deadline=None if opts.time_limit_s is None else time.monotonic() + opts.time_limit_s)
    ctx = MeasureContext(info, dtype_name=opts.dtype, timer=timer, seed=opts.seed)
    m, tp = opts.model, opts.tp
    shapes: list[tuple[str, int, int]] = []
    v = m.vocab // tp if m.vocab % tp == 0 else m.vocab
    for name, n, k in [(nm, n, k) for nm, n, k, _ in m.gemm_shapes(tp)] + [("head", v, m.hidden)]:
        if all((n, k) != (n2, k2) for _, n2, k2 in shapes):  # one row set per (n, k)
            shapes.append((name, n, k))
    heads, kv_heads = m.n_heads // tp, m.n_kv_heads // tp
    seconds: dict[str, float] = {}
    raw: list[dict] = []
    with _Bar(_interactive() if show_progress is None else show_progress) as bar:
        t0 = time.perf_counter()
        hbm_bw, hbm_t, hbm_src = measure_copy_bandwidth(ctx, opts.copy_bytes)
        raw.append(dict(kind="copy", bytes=opts.copy_bytes, timing=hbm_t.__dict__, bw_bytes_per_s=hbm_bw))
        seconds["copy"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        gemm_rows, r = measure_gemm(ctx, shapes, list(opts.tokens), bar.add("GEMM", len(shapes) * len(opts.tokens)))
        raw += r
        seconds["gemm"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        probe_tokens = min(max(opts.seqlens), opts.varlen_tokens)
        kernels = AttentionKernels(ctx).select(heads, kv_heads, m.head_dim, probe_tokens,
                                                max(min(opts.seqlens), probe_tokens // 4))
        attn_rows, r = measure_attention(
            ctx, kernels, seqlens=list(opts.seqlens), n_heads=heads, n_kv_heads=kv_heads, head_dim=m.head_dim,
            varlen_tokens=opts.varlen_tokens, progress=bar.add("attention", 2 * 2 * len(opts.seqlens)),
        )
        raw += r
        seconds["attention"] = time.perf_counter() - t0

        coll_meta: dict = {}
        coll_results: list[dict] = []
        if do_coll:
            t0 = time.perf_counter()
            backend = "nccl" if info.kind == "cuda" else "gloo"
            if info.kind == "cuda":
                torch.cuda.empty_cache()  # the workers share GPU 0 with this process
            late = timer.deadline is not None and time.monotonic() > timer.deadline  # time limit spent: one repeat
            if late:
                timer.cut += len(opts.ops) * len(opts.sizes)
            res = run_collectives(
                CollectiveSettings(
                    nproc=nproc, backend=backend, sizes=list(opts.sizes), ops=list(opts.ops), dtype=opts.dtype,
                    warmup=min(opts.warmup, 1) if late else opts.warmup, min_repeats=1 if late else opts.min_repeats,
                    max_repeats=1 if late else max(opts.min_repeats, opts.max_repeats),
                    budget_s=0.0 if late else opts.budget_s),
                progress=bar.add_reporting("collectives", len(opts.ops) * len(opts.sizes)),
            )
            coll_meta, coll_results = res["meta"], res["results"]
            raw += [dict(kind="collective", **x) for x in coll_results]
            seconds["collectives"] = time.perf_counter() - t0

    profile = _assemble(opts, Measurements(info, ctx, base, gemm_rows, attn_rows, coll_meta, coll_results, hbm_bw, hbm_src,
                                           kernels, nproc))
    if timer.cut:
        profile.measured["time_limit"] = (f"{opts.time_limit_s:g} s reached: {timer.cut} case(s) timed once "
                                          "(their p10-p90 spread is that one sample)")
    seconds["total"] = sum(seconds.values())
    measurements = json.dumps({"measured": profile.measured, "options": _opts_dict(opts),
                               "kernel_probes_s": kernels.probes, "seconds": seconds, "records": raw},
                              indent=1, default=str)
    out = Path(opts.out)
    loaded = write_checked_profile(profile, out, {"measurements.json": measurements})
    return ProfileResult(loaded, out, seconds, {"dense": kernels.dense_name, "varlen": kernels.varlen_name})


def write_checked_profile(profile: HardwareProfile, out: Path, extra: dict[str, str]) -> HardwareProfile:
    """Write ``profile`` (and the ``extra`` text files) into ``out`` only once it loads: it is first written to a
    private temporary folder and read back with :func:`~dcpsim.hardware.load_profile` (every check of the
    format); a refusal there raises before anything reaches ``out``. Then each file is copied atomically into
    ``out``, ``profile.toml`` last, so ``out`` never holds a profile.toml beside tables it does not describe.
    Returns the profile as loaded from ``out``."""
    import tempfile

    from dcpsim.outdir import write_bytes

    with tempfile.TemporaryDirectory(prefix="dcpsim-profile-") as tmp:
        stage = Path(tmp) / out.name
        write_profile(profile, stage)
        for name, text in extra.items():
            write_text(stage / name, text)
        load_profile(stage)  # ProfileError naming the field, before out is touched
        files = sorted((f for f in stage.iterdir() if f.is_file() and not f.name.startswith(".")),
                       key=lambda f: f.name == "profile.toml")
        for f in files:
            write_bytes(out / f.name, f.read_bytes())
    return load_profile(out)


def _opts_dict(opts: ProfileOptions) -> dict:
    d = asdict(opts)
    d["out"] = str(opts.out)
    d["model"] = opts.model.to_dict()
    return d


def _collective_rows(tag: str, info, base, coll_meta, coll_results, nproc) -> tuple[list[dict], str, list[str]]:
    """Collective rows: measured NVLink tier (or the base's), network tier from the base (or a placeholder)."""
    rows: list[dict] = []
    copied: list[str] = []
    source = ""
    if coll_results:
        if info.kind == "cuda":
            where = f"NCCL {coll_meta.get('nccl', info.nccl)} between {nproc} GPUs of this node"
        else:
            where = f"gloo between {nproc} processes of this host over loopback (intra-host shared memory stands in for NVLink)"
        for x in coll_results:
            rows.append(dict(
                op=x["op"], tier="nvlink", bytes=int(x["bytes"]), busbw_gb_per_s=x["busbw_gb_per_s"], ranks=int(x["ranks"]),
                source=(f"measured: {tag}, {where}, {x['op']} {coll_meta.get('dtype', '')}, median of {x['n']}, "
                        f"spread p10-p90 {x['busbw_p10_gb_per_s']:.4g}-{x['busbw_p90_gb_per_s']:.4g} GB/s busbw"),
            ))
        source = f"tier nvlink measured ({where})"
    elif base is not None:
        rows += [dict(r) | {"source": f"from base profile {base.name} (not measured here): {r['source']}"}
                 for r in base.collective_rows if r["tier"] == "nvlink"]
        copied.append("collectives (nvlink)")
    if base is not None:
        rows += [dict(r) | {"source": f"from base profile {base.name} (one host cannot measure the network tier): {r['source']}"}
                 for r in base.collective_rows if r["tier"] == "network"]
        copied.append("collectives (network)")
        source = (source or f"tier nvlink from base profile {base.name}") + f"; tier network copied from base profile {base.name}"
    else:
        rows += [dict(r) | {"tier": "network", "source": "placeholder: the intra-host rows reused for the network tier "
                            "(no base profile; one host has no scale-out link to measure); " + r["source"]}
                 for r in rows if r["tier"] == "nvlink"]
        source += "; tier network: the intra-host rows reused as a placeholder (no base profile)"
    rows.sort(key=lambda r: (r["op"], r["tier"], r["bytes"]))
    return rows, source, copied


def _device_values(info, base, gemm_rows, attn_rows, coll_rows, nproc, opts) -> tuple[dict[str, float], dict[str, str]]:
    """Device scalars not measured by a kernel benchmark: from the base profile, else placeholders (named so)."""
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    # placeholder peak: the fastest measured kernel, GEMM or attention (on a CPU either may be the faster: bf16
    # GEMMs are emulated without bf16 instructions), so no measured row is above it; the CSV keeps 6 significant
    # digits: a peak just above the best row stays >= every written row
    best_gemm = max(r["tflops"] for r in gemm_rows + attn_rows) * 1e12 * (1 + 1e-5)
    sendrecv = [r for r in coll_rows if r["op"] == "sendrecv" and r["tier"] == "nvlink" and r["source"].startswith("measured")]
    best_link = max((r["busbw_gb_per_s"] for r in sendrecv), default=0.0) * 1e9
    for f in ("peak_bf16_flops", "nvlink_bw_bytes_per_s", "nic_bw_bytes_per_s", "gpus_per_node", "nvlink_domain_gpus"):
        if base is not None:
            values[f] = getattr(base, f)
            sources[f] = f"from base profile {base.name} (not measurable by a kernel benchmark): {base.sources.get(f, '')}"
        elif f == "peak_bf16_flops":
            values[f] = best_gemm
            sources[f] = (f"placeholder: best measured kernel throughput (GEMM or attention) on {info.name} "
                          f"({opts.dtype}); no datasheet peak used")
        elif f in ("nvlink_bw_bytes_per_s", "nic_bw_bytes_per_s"):
            if best_link <= 0:
                raise ConfigError("--base", None, "a base profile (no send/recv bandwidth was measured to stand in for link bandwidth)")
            values[f] = best_link
            sources[f] = f"placeholder: best measured send/recv bus bandwidth between {nproc} ranks on this host"
        else:
            values[f] = nproc if info.kind == "cpu" else max(nproc, info.count)
            sources[f] = f"placeholder: number of ranks measured on this host ({int(values[f])})"
    return values, sources


def _timing_from_base(base) -> tuple[Timing, dict[str, str]]:
    """The base profile's FP8 figures (the split-accumulation factor included: a property of Transformer Engine's
    FP8 GEMMs on that GPU, from a public source, not a calibration), GEMM shape model and launch floor; calibration
    scales reset to 1 (new data)."""
    if base is None:
        return Timing(), {}
    keep = ("peak_fp8_flops", "fp8_gemm_best_tflops", "sms", "gemm_tile_m", "gemm_tile_n", "gemm_k_half",
            "per_kernel_overhead_s", "iteration_overhead_s", "fp8_split_accumulation_factor")
    t = Timing(**{f: getattr(base.timing, f) for f in keep})
    if t == Timing():
        return t, {}
    sources = {f"timing.{f}": f"from base profile {base.name}: {base.sources.get(f'timing.{f}', '')}" for f in TIMING_FIELDS
               if f in keep}
    sources.update({f"timing.{f}": "uncalibrated (1.0): the base's calibration does not carry over to measured tables"
                    for f in TIMING_FIELDS if f not in keep})
    return t, sources


@dataclass(frozen=True)
class Measurements:
    """What one profiling run measured, handed whole to :func:`_assemble`: the device (``info``, ``ctx``), the base
    profile (or None), the GEMM and attention table rows, the collectives' metadata and results (empty when not
    measured), the copy bandwidth ``hbm_bw`` in bytes/s with its source sentence, the chosen attention kernels and
    the collective worker count ``nproc``."""

    info: DeviceInfo
    ctx: MeasureContext
    base: HardwareProfile | None
    gemm_rows: list[dict]
    attn_rows: list[dict]
    coll_meta: dict
    coll_results: list[dict]
    hbm_bw: float
    hbm_src: str
    kernels: AttentionKernels
    nproc: int


def _assemble(opts, m: Measurements) -> HardwareProfile:
    info, ctx, base, gemm_rows, attn_rows = m.info, m.ctx, m.base, m.gemm_rows, m.attn_rows
    coll_meta, coll_results, hbm_bw, hbm_src, kernels, nproc = (m.coll_meta, m.coll_results, m.hbm_bw, m.hbm_src,
                                                                m.kernels, m.nproc)
    name = Path(opts.out).resolve().name
    tag = f"{info.name}, {ctx.date}, torch {info.torch}"
    coll_rows, coll_src, copied_tables = _collective_rows(tag, info, base, coll_meta, coll_results, nproc)
    values, sources = _device_values(info, base, gemm_rows, attn_rows, coll_rows, nproc, opts)
    sources["collectives"] = coll_src
    values["hbm_bytes"] = info.memory_bytes
    sources["hbm_bytes"] = (f"queried: torch.cuda.get_device_properties().total_memory on {info.name}" if info.kind == "cuda"
                            else f"queried: physical memory of this host ({info.name})")
    values["hbm_bw_bytes_per_s"] = hbm_bw
    sources["hbm_bw_bytes_per_s"] = hbm_src
    sources["gemm"] = f"measured: {tag}, forward GEMMs of {opts.model.name} (tp={opts.tp}) layer shapes and output layer, {opts.dtype}"
    sources["attention"] = (f"measured: {tag}, dense: {kernels.dense_name}; varlen: {kernels.varlen_name}; "
                            f"{opts.model.n_heads // opts.tp} heads x {opts.model.head_dim}, {opts.dtype}")
    timing, timing_sources = _timing_from_base(base)
    sources.update(timing_sources)

    measured = info.metadata() | {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": opts.command or "dcpsim.profiling.run_profile(...)",
        "dtype": opts.dtype,
        "model": opts.model.name.split("@", 1)[0],
        "model_scale": str(opts.scale),
        "model_dims": f"hidden {opts.model.hidden}, heads {opts.model.n_heads}/{opts.model.n_kv_heads} x {opts.model.head_dim}, "
                      f"ffn {opts.model.ffn_hidden}, vocab {opts.model.vocab}",
        "tp": str(opts.tp),
        "attention_dense": kernels.dense_name,
        "attention_varlen": kernels.varlen_name,
        "collectives": (f"torchrun --nproc-per-node {nproc}, {coll_meta.get('backend')}" if coll_results else "not measured"),
        "quick": str(bool(opts.quick)).lower(),
        "base": base.name if base is not None else "none",
        "hostname": "not recorded",
    }
    kind = "mixed" if copied_tables else "measured"
    desc = (f"Measured with dcpsim profile on {info.name} ({ctx.date}, torch {info.torch}, {opts.dtype}"
            f"{', quick sizes on ' + opts.model.name if opts.quick else ''})"
            + (f"; copied from {base.name}: {', '.join(copied_tables)}" if copied_tables else ""))
    for f in DEVICE_FIELDS:
        assert f in values and f in sources, f
    return HardwareProfile(
        name=name, kind=kind, description=desc, sources=sources, measured=measured,
        gemm_rows=sorted(gemm_rows, key=lambda r: (r["n"], r["k"], r["tokens"])), attention_rows=attn_rows,
        collective_rows=coll_rows,
        peak_bf16_flops=float(values["peak_bf16_flops"]), hbm_bytes=float(values["hbm_bytes"]),
        hbm_bw_bytes_per_s=float(values["hbm_bw_bytes_per_s"]), nvlink_bw_bytes_per_s=float(values["nvlink_bw_bytes_per_s"]),
        nic_bw_bytes_per_s=float(values["nic_bw_bytes_per_s"]), gpus_per_node=int(values["gpus_per_node"]),
        nvlink_domain_gpus=int(values["nvlink_domain_gpus"]), timing=timing,
    )
