"""Kernel timing on the local device: timers, GEMM, attention and copy bandwidth (the device and torch helpers live
in :mod:`dcpsim.profiling.device` and are re-exported here).

torch is imported lazily (inside functions), so ``import dcpsim`` works
without it; :func:`require_torch` turns a missing torch into a
:class:`~dcpsim.errors.ConfigError` naming the ``profile`` extra.

Timing (:class:`Timer`): ``warmup`` untimed calls, then repeats timed one by
one — with CUDA events on a GPU (start/end event around each call, the L2
cache evicted by zeroing a 256 MiB buffer before each, one
``torch.cuda.synchronize`` at the end) and with ``time.perf_counter`` on a CPU.
The number of repeats adapts to the cost of one call: as many as fit in
``budget_s``, clamped to ``[min_repeats, max_repeats]``; once the timer's
``deadline`` has passed, each remaining case is timed once (so a whole run is
bounded on a slow machine). The median is kept; the 10th and 90th
percentiles are the recorded spread.

FLOP accounting matches :mod:`dcpsim.cost.model`, so that a throughput stored
here and read back there reproduces the measured time:

* GEMM ``Y[T×n] = X[T×k] Wᵀ``: ``2·T·n·k`` FLOPs (forward);
* attention per document of length ``L`` with ``H`` query heads of dim ``d``:
  forward ``4·L²·d·H``, halved when causal; backward 2.5× the forward.

Attention paths per device (chosen by :class:`AttentionKernels`, which times
each candidate once on a probe size and keeps the fastest that works):

* dense (one sequence, ``layout="dense"``): ``scaled_dot_product_attention``
  under each ``torch.nn.attention.sdpa_kernel`` backend the device offers —
  CUDA: cuDNN, Flash, memory-efficient; CPU: Flash (the CPU flash kernel) and
  math — plus ``flash_attn.flash_attn_func`` on CUDA when flash-attn is
  installed.
* varlen (a packed THD buffer of several documents, ``layout="varlen"``;
  ``seqlen`` is the document length): on CUDA ``flash_attn_varlen_func``
  (flash-attn) and ``torch.nn.attention.varlen.varlen_attn`` (torch ≥ 2.9),
  both real cu_seqlens kernels; on every device a per-document loop of the
  chosen dense SDPA inside one timed region (the CPU path: torch has no CPU
  varlen kernel, and a block-diagonal mask over the whole buffer would do the
  buffer's full s² work and be timed as if it were useful).
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from dcpsim.model.accounting import attention_flops as model_attention_flops
from dcpsim.profiling.device import (  # noqa: F401  (re-exported: these names stay importable from here)
    DTYPES,
    PROFILE_EXTRA_HINT,
    DeviceInfo,
    ProfilingError,
    _cpu_name,
    _nvidia_driver,
    cpu_threads,
    detect_device,
    require_torch,
    torch_dtype,
)


# ----------------------------------------------------------------- timing
@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and the 10th/90th percentiles over ``n`` repeats."""

    median_s: float
    p10_s: float
    p90_s: float
    n: int

    @classmethod
    def from_samples(cls, samples_s) -> Timing:
        a = np.asarray(samples_s, dtype=float)
        if a.size == 0 or not np.isfinite(a).all() or (a <= 0).any():
            raise ProfilingError(f"timing samples must be finite and positive, got {a.tolist()[:5]}")
        p10, med, p90 = np.percentile(a, [10, 50, 90])
        return cls(float(med), float(p10), float(p90), int(a.size))

    def rate_range(self, work: float) -> tuple[float, float]:
        """(low, high) rate of ``work`` per second over the p90..p10 times."""
        return work / self.p90_s, work / self.p10_s


@dataclass
class Timer:
    """Times callables on one device (CUDA events or a monotonic clock)."""

    device: DeviceInfo
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 50
    budget_s: float = 0.5
    l2_flush_bytes: int = 256 * 2**20  # CUDA: larger than any current GPU's L2 (H100 50 MB, B200 126 MB)
    deadline: float | None = None  # time.monotonic() after which each case is timed once (bounds a whole run)
    cut: int = 0  # cases timed once because the deadline had passed
    _flush: Any = field(default=None, repr=False)

    def sync(self) -> None:
        if self.device.kind == "cuda":
            require_torch().cuda.synchronize(self.device.index)

    def time(self, fn: Callable[[], Any]) -> Timing:
        """Median time of ``fn()`` in seconds (see the module docstring)."""
        for _ in range(max(self.warmup, 1)):  # at least one: compile, allocate, autotune
            fn()
        self.sync()
        if self.device.kind == "cuda":
            return self._time_cuda(fn)
        first = self._cpu_once(fn)
        n = self._repeats(first)
        return Timing.from_samples([first] + [self._cpu_once(fn) for _ in range(n - 1)])

    def _repeats(self, first_s: float) -> int:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.cut += 1
            return 1  # past the run's time limit: one timed call per remaining case
        n = int(self.budget_s / max(first_s, 1e-9))
        return max(self.min_repeats, min(self.max_repeats, n))

    @staticmethod
    def _cpu_once(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def _flush_buffer(self):
        if self._flush is None:
            torch = require_torch()
            self._flush = torch.empty(self.l2_flush_bytes, dtype=torch.int8, device=self.device.torch_device())
        return self._flush

    def _time_cuda(self, fn) -> Timing:
        torch = require_torch()
        ev = torch.cuda.Event
        s, e = ev(enable_timing=True), ev(enable_timing=True)
        self._flush_buffer().zero_()
        s.record()
        fn()
        e.record()
        e.synchronize()
        first = s.elapsed_time(e) / 1e3
        n = self._repeats(first) - 1
        starts = [ev(enable_timing=True) for _ in range(n)]
        ends = [ev(enable_timing=True) for _ in range(n)]
        flush = self._flush_buffer()
        for a, b in zip(starts, ends, strict=True):
            flush.zero_()  # evict L2 (outside the timed region): training does not re-read warm inputs
            a.record()
            fn()
            b.record()
        self.sync()
        return Timing.from_samples([first] + [a.elapsed_time(b) / 1e3 for a, b in zip(starts, ends, strict=True)])


# ----------------------------------------------------------------- context
@dataclass
class MeasureContext:
    """Everything a measurement needs: device, dtype, timer and how to label rows."""

    device: DeviceInfo
    dtype_name: str = "bf16"
    timer: Timer | None = None
    date: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d"))
    seed: int = 0

    def __post_init__(self) -> None:
        if self.timer is None:
            self.timer = Timer(self.device)
        self.dtype = torch_dtype(self.dtype_name)
        self.tdevice = self.device.torch_device()
        torch = require_torch()
        if self.device.kind == "cuda":
            torch.cuda.set_device(self.device.index)  # events and default streams follow the current device
        self.gen = torch.Generator(device=self.tdevice).manual_seed(self.seed)

    def randn(self, *shape, requires_grad: bool = False, scale: float = 1.0):
        torch = require_torch()
        t = torch.randn(*shape, generator=self.gen, device=self.tdevice, dtype=torch.float32)
        t = (t * scale).to(self.dtype)
        return t.requires_grad_(requires_grad)

    def source(self, what: str, timing: Timing, work: float, unit: str = "TFLOPS", scale: float = 1e12) -> str:
        lo, hi = timing.rate_range(work)
        return (
            f"measured: {self.device.name}, {self.date}, torch {self.device.torch}, {what}, "
            f"median of {timing.n}, spread p10-p90 {lo / scale:.4g}-{hi / scale:.4g} {unit}"
        )


Progress = Callable[[str, bool], None]  # (what, finished): called when a measurement starts and when it ends


def _noop(_: str, __: bool = True) -> None:
    return None


# ----------------------------------------------------------------- GEMM
def measure_gemm(
    ctx: MeasureContext, shapes: list[tuple[str, int, int]], tokens: list[int], progress: Progress = _noop
) -> tuple[list[dict], list[dict]]:
    """Forward GEMM throughput ``Y[T×n] = X[T×k] Wᵀ`` for each (name, n, k) over token counts.

    Returns ``(rows, raw)``: profile rows (n, k, tokens, tflops, source) and
    raw records (times of the forward and of its backward pair dgrad+wgrad).
    The profile stores the forward throughput (the format's meaning); the
    backward/forward time ratio goes into the source text and the raw record.
    """
    torch = require_torch()
    F = torch.nn.functional
    rows, raw = [], []
    for name, n, k in shapes:
        w = ctx.randn(n, k, scale=0.02)
        for t in tokens:
            progress(f"GEMM {name} {n}x{k} T={t}", False)
            x = ctx.randn(t, k)
            dy = ctx.randn(t, n)
            fwd = ctx.timer.time(lambda x=x, w=w: F.linear(x, w))
            bwd = ctx.timer.time(lambda x=x, dy=dy, w=w: (dy @ w, dy.t() @ x))  # dgrad, wgrad
            flops = 2.0 * t * n * k
            ratio = bwd.median_s / fwd.median_s
            what = f"{name} fwd X@W^T {ctx.dtype_name}; dgrad+wgrad/fwd time {ratio:.2f}"
            rows.append(dict(n=n, k=k, tokens=t, tflops=flops / fwd.median_s / 1e12, source=ctx.source(what, fwd, flops)))
            raw.append(dict(kind="gemm", name=name, n=n, k=k, tokens=t, fwd=fwd.__dict__, bwd=bwd.__dict__, flops_fwd=flops))
            progress(f"GEMM {name} {n}x{k} T={t}", True)
    return rows, raw


# ----------------------------------------------------------------- attention
def attention_flops(lengths, n_heads: int, head_dim: int, causal: bool, direction: str = "fwd") -> float:
    """FLOPs of attention over documents ``lengths`` (see the module docstring)."""
    return float(model_attention_flops(lengths, head_dim * n_heads, causal=causal, direction=direction).sum())


class _Ordered:
    """Calls the first path of an ordered list that accepts the shape; remembers the choice per shape.

    ``last`` names the path of the latest call (so a row can say when a
    fallback ran instead of the chosen path).
    """

    def __init__(self, paths: list[tuple[str, Callable]]) -> None:
        self.paths = paths
        self.choice: dict[tuple, int] = {}
        self.last = paths[0][0]

    def __call__(self, q, k, v, causal: bool):
        key = (q.shape[0], q.shape[1], k.shape[1], bool(causal))
        errors = []
        for i in range(self.choice.get(key, 0), len(self.paths)):
            name, fn = self.paths[i]
            try:
                out = fn(q, k, v, causal)
            except (RuntimeError, ValueError, NotImplementedError) as exc:
                errors.append(f"{name}: {str(exc)[:120]}")
                continue
            self.choice[key], self.last = i, name
            return out
        raise ProfilingError(f"no attention path accepted {tuple(q.shape)} causal={causal}: {'; '.join(errors)}")


def _to_bhsd(x):
    """[T, H, D] packed rows -> [1, H, T, D] view for SDPA."""
    return x.unsqueeze(0).transpose(1, 2)


@dataclass
class AttentionKernels:
    """The dense and varlen attention paths chosen for one device (see module docstring).

    Both take packed ``q`` [T, Hq, D], ``k``/``v`` [T, Hkv, D], the int32
    ``cu_seqlens`` [n_docs+1] (CPU copy ``cu_list``) and return [T, Hq, D]
    (``dense`` ignores the boundaries: one sequence of T).
    """

    ctx: MeasureContext
    dense_name: str = ""
    varlen_name: str = ""
    _dense: Callable | None = None
    _varlen: Callable | None = None
    probes: dict[str, float] = field(default_factory=dict)

    # -- candidates ---------------------------------------------------------
    def _sdpa(self, backends: list):
        """SDPA restricted to ``backends``, tried in that order (``set_priority`` where torch has it)."""
        torch = require_torch()
        F = torch.nn.functional
        from torch.nn.attention import sdpa_kernel

        try:
            with sdpa_kernel(backends, set_priority=True):
                pass
            ctx_kw: dict[str, Any] = {"set_priority": True}
        except TypeError:  # torch < 2.6: the set is enabled, torch orders it
            ctx_kw = {}

        def run(q, k, v, causal: bool):
            gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
            with sdpa_kernel(backends, **ctx_kw):
                o = F.scaled_dot_product_attention(_to_bhsd(q), _to_bhsd(k), _to_bhsd(v), is_causal=causal, **gqa)
            return o.transpose(1, 2).squeeze(0)

        return run

    def _dense_candidates(self) -> dict[str, Callable]:
        from torch.nn.attention import SDPBackend

        names = ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"] if self.ctx.device.kind == "cuda" else [
            "FLASH_ATTENTION", "MATH"]
        cands: dict[str, Callable] = {}
        for nm in names:
            be = getattr(SDPBackend, nm, None)
            if be is not None:
                cands[f"sdpa[{nm}]"] = self._sdpa([be])
        if self.ctx.device.kind == "cuda":
            try:
                from flash_attn import flash_attn_func

                cands["flash_attn.flash_attn_func"] = lambda q, k, v, causal: flash_attn_func(
                    q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), causal=causal).squeeze(0)
            except ImportError:
                pass
        return cands

    def _varlen_candidates(self, dense: Callable) -> dict[str, Callable]:
        cands: dict[str, Callable] = {}
        if self.ctx.device.kind == "cuda":
            try:
                from flash_attn import flash_attn_varlen_func

                def fa(q, k, v, cu, cu_list, max_len, causal):
                    return flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=causal)

                cands["flash_attn.flash_attn_varlen_func"] = fa
            except ImportError:
                pass
            try:
                from torch.nn.attention.varlen import varlen_attn

                params = inspect.signature(varlen_attn).parameters

                def tv(q, k, v, cu, cu_list, max_len, causal):
                    kw: dict[str, Any] = {}
                    if q.shape[1] != k.shape[1]:
                        kw["enable_gqa"] = True
                    if "is_causal" in params:  # torch 2.9/2.10 spelling
                        kw["is_causal"] = causal
                    elif causal:  # later releases: causal is a (-1, 0) window
                        kw["window_size"] = (-1, 0)
                    return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)

                cands["torch.nn.attention.varlen.varlen_attn"] = tv
            except ImportError:
                pass

        def per_doc(q, k, v, cu, cu_list, max_len, causal):
            torch = require_torch()
            outs = [dense(q[a:b], k[a:b], v[a:b], causal) for a, b in zip(cu_list[:-1], cu_list[1:], strict=True)]
            return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

        cands[f"per-document {self.dense_name} loop"] = per_doc
        return cands

    # -- selection ----------------------------------------------------------
    def select(
        self, n_heads: int, n_kv_heads: int, head_dim: int, probe_tokens: int, probe_doc: int, *,
        prefer_dense: str | None = None, prefer_varlen: str | None = None,
    ) -> AttentionKernels:
        """Time each candidate once (forward+backward, causal) and keep the fastest that runs.

        ``prefer_*`` names a candidate to keep whenever it runs (the validator
        uses the paths a profile was measured with).
        """
        q, k, v = self._qkv(probe_tokens, n_heads, n_kv_heads, head_dim)
        cu, cu_list, mx = self.cu_seqlens([probe_doc] * max(1, probe_tokens // probe_doc))
        best = None
        for nm, fn in self._dense_candidates().items():
            t = self._probe(lambda fn=fn: fn(q, k, v, True), q, k, v)
            self.probes[f"dense {nm}"] = t
            if t is not None and (best is None or t < best[0] or nm == prefer_dense):
                if best is None or best[1] != prefer_dense:
                    best = (t, nm, fn)
        if best is None:
            raise ProfilingError(f"no attention backend ran on {self.ctx.device.name} (tried {list(self.probes)})")
        _, self.dense_name, self._dense = best
        ran = sorted((t, nm.removeprefix("dense ")) for nm, t in self.probes.items()
                     if t is not None and nm.startswith("dense ") and nm != f"dense {self.dense_name}")
        if ran:  # the other paths that ran stay as fallbacks, fastest first, for shapes the chosen one refuses
            cands = self._dense_candidates()
            self._dense = _Ordered([(self.dense_name, self._dense)] + [(nm, cands[nm]) for _, nm in ran])
        best = None
        for nm, fn in self._varlen_candidates(self._dense).items():
            t = self._probe(lambda fn=fn: fn(q, k, v, cu, cu_list, mx, True), q, k, v)
            self.probes[f"varlen {nm}"] = t
            if t is not None and (best is None or t < best[0] or nm == prefer_varlen):
                if best is None or best[1] != prefer_varlen:
                    best = (t, nm, fn)
        if best is None:
            raise ProfilingError(f"no varlen attention path ran on {self.ctx.device.name}")
        _, self.varlen_name, self._varlen = best
        return self

    def _probe(self, fwd: Callable, q, k, v) -> float | None:
        torch = require_torch()
        try:
            for _ in range(2):  # the first call may compile or autotune
                o = fwd()
                torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
            self.ctx.timer.sync()
            t1 = time.perf_counter()
            o = fwd()
            torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
            self.ctx.timer.sync()
            t = time.perf_counter() - t1
            return t if math.isfinite(t) and t > 0 else None
        except (RuntimeError, ValueError, TypeError, NotImplementedError):
            return None

    # -- helpers -------------------------------------------------------------
    def _qkv(self, tokens: int, n_heads: int, n_kv_heads: int, head_dim: int):
        c = self.ctx
        return (
            c.randn(tokens, n_heads, head_dim, requires_grad=True),
            c.randn(tokens, n_kv_heads, head_dim, requires_grad=True),
            c.randn(tokens, n_kv_heads, head_dim, requires_grad=True),
        )

    def cu_seqlens(self, lengths) -> tuple[Any, list[int], int]:
        """(int32 device tensor, python list, longest) of the cumulative document offsets."""
        torch = require_torch()
        cu_list = [0] + np.cumsum(np.asarray(lengths, dtype=np.int64)).tolist()
        return torch.tensor(cu_list, dtype=torch.int32, device=self.ctx.tdevice), cu_list, int(max(lengths))

    def dense_used(self) -> str:
        """The dense path that ran in the latest call (differs from ``dense_name`` after a fallback)."""
        return self._dense.last if isinstance(self._dense, _Ordered) else self.dense_name

    def dense(self, q, k, v, causal: bool):
        return self._dense(q, k, v, causal)

    def varlen(self, q, k, v, cu, cu_list, max_len: int, causal: bool):
        return self._varlen(q, k, v, cu, cu_list, max_len, causal)


def measure_attention(
    ctx: MeasureContext,
    kernels: AttentionKernels,
    *,
    seqlens: list[int],
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    varlen_tokens: int,
    progress: Progress = _noop,
) -> tuple[list[dict], list[dict]]:
    """Attention throughput rows for both layouts, directions and causal 0/1.

    ``dense``: one sequence of ``seqlen``. ``varlen``: a packed buffer of
    ``max(1, varlen_tokens // seqlen)`` documents of ``seqlen`` each. Backward
    is timed alone (``autograd.grad`` with ``retain_graph`` on one forward).
    """
    torch = require_torch()
    rows, raw = [], []
    for layout in ("dense", "varlen"):
        for L in seqlens:
            n_docs = 1 if layout == "dense" else max(1, varlen_tokens // L)
            T = n_docs * L
            q, k, v = kernels._qkv(T, n_heads, n_kv_heads, head_dim)
            cu, cu_list, mx = kernels.cu_seqlens([L] * n_docs)
            path = kernels.dense_name if layout == "dense" else kernels.varlen_name
            for causal in (False, True):
                label = f"attention {layout} L={L} {'causal' if causal else 'full'}"
                progress(label, False)
                if layout == "dense":
                    fwd_fn = lambda q=q, k=k, v=v, c=causal: kernels.dense(q, k, v, c)  # noqa: E731
                else:
                    fwd_fn = lambda q=q, k=k, v=v, c=causal, cu=cu, cl=cu_list, m=mx: kernels.varlen(q, k, v, cu, cl, m, c)  # noqa: E731
                tf = ctx.timer.time(fwd_fn)
                row_path, used = path, kernels.dense_used()
                if (layout == "dense" or kernels.varlen_name.startswith("per-document")) and used != kernels.dense_name:
                    row_path = f"{path} (fell back to {used} at this size)"
                out = fwd_fn()
                g = torch.ones_like(out)
                tb = ctx.timer.time(lambda out=out, g=g, q=q, k=k, v=v: torch.autograd.grad(out, (q, k, v), g, retain_graph=True))
                del out, g
                for direction, tm in (("fwd", tf), ("bwd", tb)):
                    flops = attention_flops([L] * n_docs, n_heads, head_dim, causal, direction)
                    what = (f"{direction} {'causal' if causal else 'non-causal'} {layout} {row_path}, {n_docs} doc(s) of {L}, "
                            f"{n_heads} heads x {head_dim}, {ctx.dtype_name}")
                    rows.append(dict(direction=direction, causal=causal, layout=layout, head_dim=head_dim, seqlen=L,
                                     tflops=flops / tm.median_s / 1e12, source=ctx.source(what, tm, flops)))
                    raw.append(dict(kind="attention", direction=direction, causal=causal, layout=layout, seqlen=L,
                                    n_docs=n_docs, heads=n_heads, head_dim=head_dim, path=row_path, flops=flops, timing=tm.__dict__))
                progress(label, True)
            del q, k, v
    rows.sort(key=lambda r: (r["direction"], r["causal"], r["layout"], r["seqlen"]))
    return rows, raw


# ----------------------------------------------------------------- memory
def measure_copy_bandwidth(ctx: MeasureContext, nbytes: int) -> tuple[float, Timing, str]:
    """Device-memory bandwidth from a ``dst.copy_(src)`` of ``nbytes``: (bytes/s, timing, source).

    Counts the bytes read plus the bytes written (2·nbytes per copy).
    """
    torch = require_torch()
    n = max(1, nbytes // 4)
    src = torch.empty(n, dtype=torch.float32, device=ctx.tdevice).uniform_(generator=ctx.gen)
    dst = torch.empty_like(src)
    tm = ctx.timer.time(lambda: dst.copy_(src))
    moved = 2.0 * n * 4
    what = f"copy of {n * 4 / 2**20:.0f} MiB, read+write bytes / time"
    return moved / tm.median_s, tm, ctx.source(what, tm, moved, unit="GB/s", scale=1e9)
