"""Check the cost model against real transformer-layer timings on the local device.

:func:`run_validation` builds one Llama-style decoder layer of the model's
dimensions in torch — RMSNorm, fused QKV projection, rotary embedding (tables
precomputed, positions restart at every document), causal attention over the
packed buffer with the same varlen path the profile was measured with, output
projection and residual, RMSNorm, gated (SwiGLU) MLP and residual — and times
forward and backward (CUDA events on a GPU, a monotonic clock on a CPU; the
median over repeats, with the p10/p90 spread) for a set of packs: uniform
short, uniform medium, one whole-pack document, two halves, long-tailed
(clipped log-normal fill, σ = 1.26 as fitted to Wikipedia lengths in
REFERENCE §7) and long-tailed plus one long document.

The prediction is the cost model's for the same pack on one GPU:
``CostModel.build(profile, model, tp=1, pp=n_layers, recompute="none")``, so one
pipeline stage is one layer, and ``pack_cost(lengths, cp=1)`` gives
``gemm_fwd + attn_fwd`` forward and ``gemm_bwd + attn_bwd`` backward (no CP
or TP communication at cp = tp = 1). The error is ``predicted / measured − 1``.
To tell where an error comes from, attention alone and the four GEMMs alone
are timed on the same pack; what is left of the layer time (norms, rotary,
SwiGLU, residual adds, framework overhead) is what the cost model does not
price.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError
from dcpsim.hardware import HardwareProfile, load_profile
from dcpsim.model import ModelSpec
from dcpsim.profiling.measure import (
    AttentionKernels,
    MeasureContext,
    Timer,
    Timing,
    cpu_threads,
    detect_device,
    require_torch,
)

LOGNORMAL_SIGMA = 1.26  # Wikipedia length fit, REFERENCE §7
TARGET_MEAN_ABS, TARGET_WORST_ABS = 0.05, 0.10  # issue 7, on an H100 or H200


@dataclass(frozen=True)
class Pack:
    """Documents packed into one buffer (token counts)."""

    name: str
    lengths: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return int(sum(self.lengths))


def _lognormal_fill(total: int, mean: float, rng: np.random.Generator, min_len: int) -> list[int]:
    """Clipped log-normal draws (mean ``mean``) until ``total`` tokens; the last one is cut to fit."""
    mu = math.log(mean) - LOGNORMAL_SIGMA**2 / 2
    out: list[int] = []
    left = total
    while left > 0:
        L = int(np.clip(round(rng.lognormal(mu, LOGNORMAL_SIGMA)), min_len, total))
        L = min(L, left)
        if L < min_len and out:  # a sliver left: give it to the previous document
            out[-1] += L
        else:
            out.append(L)
        left -= L
    return out


def default_packs(pack_tokens: list[int], *, short: int, rng: np.random.Generator) -> list[Pack]:
    """Uniform and long-tailed packs, short and long documents, for each pack size (tokens)."""
    packs: list[Pack] = []
    for T in pack_tokens:
        if T < 4 * short:
            raise ConfigError("--pack-tokens", T, f"at least 4 x the short document length ({4 * short})")
        mid = max(2 * short, T // 8)
        min_len = max(16, short // 4)  # stays inside the profile's attention range (quick: 32, full: 128)
        packs += [
            Pack(f"uniform {short} x{T // short}", (short,) * (T // short)),
            Pack(f"uniform {mid} x{T // mid}", (mid,) * (T // mid)),
            Pack(f"single {T}", (T,)),
            Pack(f"two halves {T // 2}", (T // 2, T - T // 2)),
            Pack(f"long-tailed {T}", tuple(_lognormal_fill(T, max(short, T / 16), rng, min_len))),
            Pack(f"long + tail {T}", (T // 2, *_lognormal_fill(T - T // 2, max(short, T / 32), rng, min_len))),
        ]
    return packs


# ----------------------------------------------------------------- torch layer
class TorchLayer:
    """One decoder layer with parameters on the context's device (see module docstring)."""

    def __init__(self, ctx: MeasureContext, model: ModelSpec, kernels: AttentionKernels) -> None:
        self.ctx, self.m, self.k = ctx, model, kernels
        h, q, kv, f = model.hidden, model.q_dim, model.kv_dim, model.ffn_hidden
        up = 2 * f if model.gated_mlp else f
        r = lambda *s: ctx.randn(*s, scale=0.02, requires_grad=True)  # noqa: E731
        torch = require_torch()
        one = lambda: torch.ones(h, dtype=ctx.dtype, device=ctx.tdevice, requires_grad=True)  # noqa: E731
        self.params = dict(n1=one(), wqkv=r(q + 2 * kv, h), wo=r(h, q), n2=one(), w1=r(up, h), w2=r(h, f))

    def rope_tables(self, lengths):
        torch = require_torch()
        d = self.m.head_dim
        pos = torch.cat([torch.arange(L, device=self.ctx.tdevice, dtype=torch.float32) for L in lengths])
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=self.ctx.tdevice, dtype=torch.float32) / d))
        ang = pos[:, None] * inv[None, :]
        return ang.cos().to(self.ctx.dtype)[:, None, :], ang.sin().to(self.ctx.dtype)[:, None, :]

    @staticmethod
    def _rope(x, cos, sin):
        torch = require_torch()
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    @staticmethod
    def _norm(x, w):
        torch = require_torch()
        F = torch.nn.functional
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), w, eps=1e-5)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w

    def forward(self, x, cos, sin, cu, cu_list, max_len):
        torch = require_torch()
        F = torch.nn.functional
        p, m = self.params, self.m
        T = x.shape[0]
        y = self._norm(x, p["n1"])
        qkv = F.linear(y, p["wqkv"])
        q, k, v = qkv.split([m.q_dim, m.kv_dim, m.kv_dim], dim=-1)
        q = self._rope(q.view(T, m.n_heads, m.head_dim), cos, sin)
        k = self._rope(k.view(T, m.n_kv_heads, m.head_dim), cos, sin)
        v = v.reshape(T, m.n_kv_heads, m.head_dim)
        o = self.k.varlen(q, k, v, cu, cu_list, max_len, True)
        x = x + F.linear(o.reshape(T, m.q_dim), p["wo"])
        y = self._norm(x, p["n2"])
        a = F.linear(y, p["w1"])
        if m.gated_mlp:
            g, u = a.chunk(2, dim=-1)
            a = F.silu(g) * u
        else:
            a = F.gelu(a)
        return x + F.linear(a, p["w2"])

    def zero_grad(self) -> None:
        for t in self.params.values():
            t.grad = None


def _time_fwd_bwd(timer: Timer, fwd, bwd, before=None) -> tuple[Timing, Timing, Timing]:
    """(forward, backward, total) timings of ``bwd(fwd())``, each iteration timed in two parts."""
    torch = require_torch()
    cuda = timer.device.kind == "cuda"

    def once_cpu():
        if before:
            before()
        t0 = time.perf_counter()
        out = fwd()
        t1 = time.perf_counter()
        bwd(out)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    def run_cuda(n):
        evs = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(n)]
        flush = timer._flush_buffer()
        for e0, e1, e2 in evs:
            if before:
                before()
            flush.zero_()
            e0.record()
            out = fwd()
            e1.record()
            bwd(out)
            e2.record()
            del out
        timer.sync()
        return [(a.elapsed_time(b) / 1e3, b.elapsed_time(c) / 1e3) for a, b, c in evs]

    for _ in range(max(1, timer.warmup)):
        if before:
            before()
        bwd(fwd())
    timer.sync()
    first = run_cuda(1)[0] if cuda else once_cpu()
    n = timer._repeats(sum(first))
    rest = run_cuda(n - 1) if cuda else [once_cpu() for _ in range(n - 1)]
    samples = np.asarray([first] + rest, dtype=float)
    return Timing.from_samples(samples[:, 0]), Timing.from_samples(samples[:, 1]), Timing.from_samples(samples.sum(axis=1))


# ----------------------------------------------------------------- validation
@dataclass
class ValidationResult:
    """Per-pack rows (times in seconds, errors as fractions) and the summary."""

    rows: list[dict]
    meta: dict
    mean_abs_error: float
    worst_abs_error: float
    path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"mean_abs_error": self.mean_abs_error, "worst_abs_error": self.worst_abs_error,
                "packs": len(self.rows), "meta": self.meta, "notes": self.notes,
                "path": str(self.path) if self.path else None}


@dataclass(frozen=True)
class ValidationSettings:
    """How :func:`run_validation` measures: the packs, the device and the timer (a variant is ``dataclasses.replace``).

    ``pack_tokens`` (tokens per pack) and ``short`` (tokens of a short document) size the default packs, unless
    ``packs`` gives them; ``warmup`` untimed calls, then ``min_repeats``..``max_repeats`` timed ones within
    ``budget_s`` seconds per case; ``dtype`` defaults to the profile's; ``out`` is the Markdown file to write (default
    ``<profile folder>/VALIDATION.md`` for a measured or mixed profile; nothing for a public one unless ``out``);
    ``threads`` (CPU) defaults to the intra-op thread count the profile was measured with; ``command`` is recorded.
    """

    pack_tokens: list[int]
    short: int
    device: str | None = None
    dtype: str | None = None
    warmup: int = 2
    min_repeats: int = 3
    max_repeats: int = 20
    budget_s: float = 1.0
    seed: int = 0
    command: str = ""
    out: str | Path | None = None
    packs: list[Pack] | None = None
    threads: int | None = None


def run_validation(profile: HardwareProfile | str | Path, model: ModelSpec,
                   settings: ValidationSettings) -> ValidationResult:
    """Time one layer per pack, compare with the cost model, write ``VALIDATION.md``.

    ``settings`` says how (:class:`ValidationSettings`; a variant is ``dataclasses.replace``).
    """
    from dcpsim.outdir import check_out_file

    s = settings
    prof = profile if isinstance(profile, HardwareProfile) else load_profile(profile)
    target = validation_target(prof, s.out)
    if target is not None:  # before any measurement: a bad or foreign path fails fast
        check_out_file(target, field="--out")
    threads = s.threads
    if threads is None and prof.measured.get("device_kind") == "cpu" and str(prof.measured.get("threads", "")).isdigit():
        threads = int(prof.measured["threads"])  # time the layer as the kernels were timed
    if threads is not None and detect_device(s.device).kind != "cpu":
        threads = None
    with cpu_threads(threads):
        return _run_validation(prof, model, s)


def _run_validation(prof: HardwareProfile, model: ModelSpec, s: ValidationSettings) -> ValidationResult:
    device, seed, command, out = s.device, s.seed, s.command, s.out
    torch = require_torch()
    dtype = s.dtype or prof.measured.get("dtype", "bf16")
    info = detect_device(device)
    torch.manual_seed(seed)
    timer = Timer(info, warmup=s.warmup, min_repeats=s.min_repeats, max_repeats=s.max_repeats, budget_s=s.budget_s)
    ctx = MeasureContext(info, dtype_name=dtype, timer=timer, seed=seed)
    rng = np.random.default_rng(seed)
    packs = s.packs or default_packs(s.pack_tokens, short=s.short, rng=rng)
    probe = min(max(p.tokens for p in packs), 4096)
    kernels = AttentionKernels(ctx).select(
        model.n_heads, model.n_kv_heads, model.head_dim, probe, max(16, probe // 4),
        prefer_dense=prof.measured.get("attention_dense"), prefer_varlen=prof.measured.get("attention_varlen"),
    )
    layer = TorchLayer(ctx, model, kernels)
    cm = CostModel.build(prof, model, tp=1, pp=model.n_layers, dp_cp=1, recompute="none", memory_limit_bytes=1e30)
    F = torch.nn.functional
    rows: list[dict] = []
    for pk in packs:
        T = pk.tokens
        cu, cu_list, mx = kernels.cu_seqlens(pk.lengths)
        cos, sin = layer.rope_tables(pk.lengths)
        x = ctx.randn(T, model.hidden, requires_grad=True)
        gy = ctx.randn(T, model.hidden)

        def before(x=x):
            layer.zero_grad()
            x.grad = None

        tf, tb, tt = _time_fwd_bwd(
            timer, lambda x=x, cos=cos, sin=sin, cu=cu, cl=cu_list, mx=mx: layer.forward(x, cos, sin, cu, cl, mx),
            lambda out, gy=gy: out.backward(gy), before)
        # attention alone on the same pack
        q = ctx.randn(T, model.n_heads, model.head_dim, requires_grad=True)
        k = ctx.randn(T, model.n_kv_heads, model.head_dim, requires_grad=True)
        v = ctx.randn(T, model.n_kv_heads, model.head_dim, requires_grad=True)
        af, ab, _ = _time_fwd_bwd(
            timer, lambda q=q, k=k, v=v, cu=cu, cl=cu_list, mx=mx: kernels.varlen(q, k, v, cu, cl, mx, True),
            lambda o, q=q, k=k, v=v: torch.autograd.grad(o, (q, k, v), torch.ones_like(o)))
        # the layer's four GEMMs alone (forward, then dgrad + wgrad), same token count
        gx = [ctx.randn(T, k, requires_grad=True) for _, _, k, _ in model.gemm_shapes(1)]
        gw = [ctx.randn(n, k, scale=0.02, requires_grad=True) for _, n, k, _ in model.gemm_shapes(1)]
        gg = [ctx.randn(T, n) for _, n, _, _ in model.gemm_shapes(1)]
        gf, gb, _ = _time_fwd_bwd(
            timer, lambda gx=gx, gw=gw: [F.linear(a, w) for a, w in zip(gx, gw, strict=True)],
            lambda ys, gg=gg, gx=gx, gw=gw: torch.autograd.grad(ys, gx + gw, gg))
        pc = cm.pack_cost(list(pk.lengths), 1, check_memory=False)
        meas = tt.median_s
        pred = pc.total_s
        rows.append(dict(
            pack=pk.name, docs=len(pk.lengths), tokens=T, longest=max(pk.lengths),
            measured_fwd_s=tf.median_s, measured_bwd_s=tb.median_s, measured_s=meas,
            measured_p10_s=tt.p10_s, measured_p90_s=tt.p90_s, repeats=tt.n,
            predicted_fwd_s=pc.fwd_s, predicted_bwd_s=pc.bwd_s, predicted_s=pred,
            error_fwd=pc.fwd_s / tf.median_s - 1.0, error_bwd=pc.bwd_s / tb.median_s - 1.0, error=pred / meas - 1.0,
            attn_measured_s=af.median_s + ab.median_s, attn_predicted_s=pc.attn_fwd_s + pc.attn_bwd_s,
            gemm_measured_s=gf.median_s + gb.median_s, gemm_predicted_s=pc.gemm_fwd_s + pc.gemm_bwd_s,
            other_measured_s=meas - af.median_s - ab.median_s - gf.median_s - gb.median_s,
        ))
        del x, gy, q, k, v, cos, sin, gx, gw, gg
    errs = np.abs([r["error"] for r in rows])
    notes = []
    pdev = prof.measured.get("device")
    if pdev and pdev != info.name:
        notes.append(f"profile measured on {pdev!r}, validated on {info.name!r}")
    if prof.measured.get("dtype", dtype) != dtype:
        notes.append(f"profile dtype {prof.measured.get('dtype')} differs from validation dtype {dtype}")
    meta = {
        "profile": prof.name, "profile_kind": prof.kind, "profile_path": str(prof.path) if prof.path else "",
        "model": model.name, "model_dims": f"hidden {model.hidden}, heads {model.n_heads}/{model.n_kv_heads} x {model.head_dim}, "
                                          f"ffn {model.ffn_hidden}",
        "dtype": dtype, "attention_varlen": kernels.varlen_name, "attention_dense": kernels.dense_name,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "command": command or "run_validation(...)",
        "seed": seed,
    } | info.metadata()
    res = ValidationResult(rows, meta, float(errs.mean()), float(errs.max()), notes=notes)
    target = validation_target(prof, out)
    if target is not None:
        res.path = write_validation_md(res, target)
    else:
        res.notes.append(f"{prof.name} is a public profile: no VALIDATION.md written (give --out to write one)")
    return res


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def _pct(e: float) -> str:
    return f"{e * 100:+.1f}%"


def validation_target(prof: HardwareProfile, out: str | Path | None) -> Path | None:
    """Where the Markdown goes: ``out``, else ``<profile>/VALIDATION.md`` for a measured profile, else nowhere."""
    # a shipped public profile is data of the repository: write next to it only when asked (--out)
    if out is not None:
        return Path(out)
    from dcpsim.resources import is_shipped

    # never into shipped data (a calibrated or measured profile shipped with dcpsim)
    return Path(prof.path) / "VALIDATION.md" if prof.path and prof.kind != "public" and not is_shipped(prof.path) \
        else None


def write_validation_md(res: ValidationResult, path: str | Path) -> Path:
    """Write the error table and its context as Markdown (atomically; only over a file dcpsim wrote)."""
    from dcpsim.outdir import write_text

    path = Path(path)
    m = res.meta
    gpu = m.get("device_kind") == "cuda"
    verdict = (
        f"target on an H100/H200: mean |error| <= {TARGET_MEAN_ABS:.0%}, worst <= {TARGET_WORST_ABS:.0%} — "
        + ("**met**" if res.mean_abs_error <= TARGET_MEAN_ABS and res.worst_abs_error <= TARGET_WORST_ABS else "**not met**")
        if gpu else
        f"target (H100/H200 only): mean |error| <= {TARGET_MEAN_ABS:.0%}, worst <= {TARGET_WORST_ABS:.0%}; "
        "not applicable to this CPU run, which checks the machinery (CPU timings are noisy)"
    )
    lines = [
        f"# Validation of profile `{m['profile']}` against real layer timings",
        "",
        f"- device: {m['device']} ({m['device_kind']}); driver {m['driver']}; torch {m['torch']}; CUDA {m['cuda']}; NCCL {m['nccl']}",
        f"- date: {m['date']}",
        f"- command: `{m['command']}`",
        f"- model: {m['model']} ({m['model_dims']}), one layer, {m['dtype']}, forward + backward, no recomputation",
        f"- attention: varlen {m['attention_varlen']}",
        "- prediction: `CostModel.build(profile, model, tp=1, pp=n_layers, recompute='none').pack_cost(lengths, cp=1)` "
        "(GEMM + attention, forward and backward)",
        "- error = predicted / measured - 1; measured = median over repeats (p10-p90 shown)",
        "",
        f"**mean |error| {res.mean_abs_error:.1%}, worst |error| {res.worst_abs_error:.1%}** ({len(res.rows)} packs); {verdict}.",
        "",
        "| pack | docs | tokens | longest | measured ms (p10-p90) | predicted ms | error | fwd error | bwd error "
        "| attention meas / pred ms | GEMM meas / pred ms | unpriced ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res.rows:
        lines.append(
            f"| {r['pack']} | {r['docs']} | {r['tokens']} | {r['longest']} | {_ms(r['measured_s'])} "
            f"({_ms(r['measured_p10_s'])}-{_ms(r['measured_p90_s'])}) | {_ms(r['predicted_s'])} | {_pct(r['error'])} "
            f"| {_pct(r['error_fwd'])} | {_pct(r['error_bwd'])} | {_ms(r['attn_measured_s'])} / {_ms(r['attn_predicted_s'])} "
            f"| {_ms(r['gemm_measured_s'])} / {_ms(r['gemm_predicted_s'])} | {_ms(r['other_measured_s'])} |"
        )
    lines += ["", "Attention and the four GEMMs are also timed alone on the same pack (forward + backward). "
              "*Unpriced* = layer - attention - GEMMs as measured: norms, rotary, SwiGLU, residual adds and "
              "framework overhead, which the cost model does not price."]
    if res.notes:
        lines += ["", "Notes:", *[f"- {n}" for n in res.notes]]
    return write_text(path, "\n".join(lines) + "\n")
