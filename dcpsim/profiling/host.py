"""Host dispatch costs on the local device: what the CPU spends issuing work to the GPU.

A short training step (a small model, many small microbatches, a variable-
length batch) is bound by the host, not the device: Python and module
dispatch, kernel launches, collective calls and device syncs. This module
measures those costs with torch so that a time model can take them from a
measurement instead of a fit. Each figure is a median over repeats with its
10th/90th percentiles:

* ``kernel_launch_host_s``: host time to enqueue one tiny kernel (an in-place
  add on a one-element tensor), timed over a loop with no sync inside, so the
  device never stalls the host (its own time per kernel is smaller);
* ``kernel_device_s``: device time per tiny kernel when many are queued
  back to back (a CUDA graph of ``n`` adds, replayed: no host in the loop);
* ``graph_launch_host_s``: host time to launch one captured graph;
* ``sync_idle_s`` / ``item_idle_s``: ``torch.cuda.synchronize()`` and a
  scalar ``.item()`` (kernel + device-to-host copy + sync) on an idle queue;
* ``linear_fwd_host_s``: one ``nn.Linear`` forward call on a tiny input;
* ``block_fwd_host_s`` / ``block_bwd_host_s``: one GPT block (norm, QKV,
  causal SDPA, projection, norm, GELU MLP) forward / backward issued on a
  tiny input, and ``block_fwd_kernels`` / ``block_bwd_kernels`` the kernels
  each launches (torch.profiler, where it works);
* ``collective_host_s``: host time of one NCCL call (all-reduce, all-gather,
  reduce-scatter, broadcast) of a small message in a one-rank process group:
  the call path (ProcessGroupNCCL work, stream bookkeeping), not the wire;
* ``optimizer_step_host_s`` / ``clip_grad_host_s``: fused Adam step and
  ``clip_grad_norm_`` (which syncs) for the tiny GPT's parameters;
* ``tiny_gpt``: a whole step of a small GPT (default: 12 layers, hidden 512,
  8 heads, sequence 1024, micro-batch 4, the shape of Megatron-LM's
  functional tests) eager and under one CUDA graph per microbatch (forward and
  backward captured), with the host time to issue one microbatch and the
  device time of one microbatch.

These are plain-PyTorch modules: Transformer Engine's modules and
Megatron's schedule add host work on top (a stated caveat for whoever uses
the figures). On a CPU every figure is still produced (the "device" is the
CPU itself, so host and device time coincide); that is what the tests run.

Run: ``python -m dcpsim.profiling.host --out DIR [--quick]`` writes
``DIR/host.json``; ``dcpsim profile`` records the same under the profile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dcpsim.profiling.measure import _cpu_name, detect_device, require_torch


@dataclass(frozen=True)
class HostOptions:
    """What to measure. ``quick`` shrinks every size and repeat count (CPU, CI)."""

    device: str | None = None
    quick: bool = False
    repeats: int = 21
    loop: int = 2000  # calls per timed loop for the per-call figures
    layers: int = 12
    hidden: int = 512
    heads: int = 8
    seq: int = 1024
    micro_batch: int = 4
    vocab: int = 50304  # GPT-2 BPE padded to a multiple of 128, as Megatron pads it
    microbatches: int = 4
    steps: int = 6

    def shrunk(self) -> HostOptions:
        from dataclasses import replace

        return replace(self, repeats=5, loop=50, layers=2, hidden=64, heads=4, seq=64, micro_batch=2,
                       vocab=256, microbatches=2, steps=2)


def _stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) >= 2 else [s[0]] * 9
    return {"median_s": statistics.median(s), "p10_s": q[0], "p90_s": q[-1], "n": len(s)}


class _Dev:
    """The torch device, its sync and an event timer (CUDA events or perf_counter)."""

    def __init__(self, torch, info) -> None:
        self.torch, self.info = torch, info
        self.cuda = info.kind == "cuda"
        self.dev = torch.device("cuda", info.index) if self.cuda else torch.device("cpu")
        if self.cuda:
            torch.cuda.set_device(info.index)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def device_time(self, fn: Callable[[], Any]) -> float:
        """Seconds of device time for ``fn`` (host issue included on a CPU)."""
        if not self.cuda:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        ev = self.torch.cuda.Event
        a, b = ev(enable_timing=True), ev(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3


def _host_per_call(d: _Dev, fn: Callable[[], Any], loop: int, repeats: int) -> dict[str, float]:
    """Host seconds per call of ``fn``, timed over ``loop`` calls with no sync inside."""
    for _ in range(min(loop, 50)):
        fn()
    d.sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(loop):
            fn()
        out.append((time.perf_counter() - t0) / loop)
        d.sync()
    return _stats(out)


def _idle_latency(d: _Dev, fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    out = []
    for _ in range(repeats * 5):
        d.sync()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return _stats(out)


def _block(torch, hidden: int, heads: int, dev, dtype):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(a)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    return Block().to(device=dev, dtype=dtype)


def _gpt(torch, o: HostOptions, dev, dtype):
    nn = torch.nn

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(o.vocab, o.hidden)
            self.pos = nn.Embedding(o.seq, o.hidden)
            self.blocks = nn.ModuleList(_block(torch, o.hidden, o.heads, dev, dtype) for _ in range(o.layers))
            self.ln = nn.LayerNorm(o.hidden)
            self.head = nn.Linear(o.hidden, o.vocab, bias=False)

        def forward(self, tok, tgt):
            x = self.emb(tok) + self.pos.weight[: tok.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x)).float()
            return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))

    return GPT().to(device=dev, dtype=dtype)


def _count_kernels(torch, fn: Callable[[], Any]) -> int | None:
    """CUDA kernels launched by ``fn`` (torch.profiler), or None where the profiler cannot see them."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if getattr(e, "device_type", None) is not None
                   and str(e.device_type).endswith("CUDA"))
    except Exception:  # noqa: BLE001 - profiler unavailable (no CUPTI): the count is optional
        return None


def _collectives(torch, d: _Dev, o: HostOptions) -> dict[str, Any]:
    """Host seconds per collective call in a one-rank group (NCCL on a GPU, gloo on a CPU)."""
    import torch.distributed as dist

    backend = "nccl" if d.cuda else "gloo"
    out: dict[str, Any] = {"backend": backend}
    try:
        if not dist.is_initialized():
            store = dist.HashStore()
            dist.init_process_group(backend, store=store, rank=0, world_size=1)
        x = torch.ones(1024, device=d.dev, dtype=torch.float32)  # 4 KiB: latency, not bandwidth
        y = torch.empty(1024, device=d.dev, dtype=torch.float32)
        calls = {
            "all_reduce": lambda: dist.all_reduce(x),
            "all_gather": lambda: dist.all_gather_into_tensor(y, x),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(y, x),
            "broadcast": lambda: dist.broadcast(x, 0),
        }
        for name, fn in calls.items():
            out[name] = _host_per_call(d, fn, max(o.loop // 4, 10), o.repeats)
        if d.cuda:
            out["all_reduce_device_s"] = _stats([d.device_time(lambda: dist.all_reduce(x)) for _ in range(o.repeats)])
    except Exception as e:  # noqa: BLE001 - recorded, not fatal: the other figures stand alone
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return out


def _tiny_gpt(torch, d: _Dev, o: HostOptions, dtype) -> dict[str, Any]:
    torch.manual_seed(0)
    model = _gpt(torch, o, d.dev, dtype)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-4, fused=d.cuda) if d.cuda else torch.optim.Adam(params, lr=1e-4)
    tok = torch.randint(0, o.vocab, (o.micro_batch, o.seq), device=d.dev)
    tgt = torch.randint(0, o.vocab, (o.micro_batch, o.seq), device=d.dev)
    res: dict[str, Any] = {"shape": {k: getattr(o, k) for k in
                                     ("layers", "hidden", "heads", "seq", "micro_batch", "vocab", "microbatches")},
                           "parameters": sum(p.numel() for p in params)}

    def micro():
        model(tok, tgt).backward()

    def step(micro_fn):
        for _ in range(o.microbatches):
            micro_fn()
        loss_sync = params[0].grad.float().sum().item()  # the logged loss: one device sync per step
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss_sync

    for _ in range(3):  # warm-up: allocator, cuDNN/cuBLAS heuristics
        step(micro)
    d.sync()
    # host time to issue one microbatch: the Python thread's wall time of fwd+bwd, not waiting on the device
    # (on a GPU fwd returns once issued; backward returns once the autograd thread has issued every kernel)
    issue = []
    for _ in range(o.repeats):
        d.sync()
        t0 = time.perf_counter()
        micro()
        issue.append(time.perf_counter() - t0)
    d.sync()
    opt.zero_grad(set_to_none=False)
    res["micro_issue_host_s"] = _stats(issue)
    res["micro_wall_s"] = _stats([d.device_time(micro) for _ in range(o.repeats)])
    opt.zero_grad(set_to_none=False)
    wall, cpu = [], []
    for _ in range(o.steps):
        d.sync()
        t0, c0 = time.perf_counter(), time.process_time()
        step(micro)
        d.sync()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    res["eager_step_s"] = _stats(wall)
    res["eager_step_cpu_s"] = _stats(cpu)
    res["optimizer_step_host_s"] = _host_per_call(d, opt.step, max(o.loop // 100, 5), o.repeats)
    res["clip_grad_host_s"] = _idle_latency(d, lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), o.repeats)
    if d.cuda:
        res["micro_kernels"] = _count_kernels(torch, micro)
        res.update(_graphed(torch, d, o, model, opt, params, micro, step))
    return res


def _graphed(torch, d: _Dev, o, model, opt, params, micro, step) -> dict[str, Any]:
    """The same microbatch captured once as a CUDA graph (forward + backward), replayed per microbatch."""
    out: dict[str, Any] = {}
    try:
        opt.zero_grad(set_to_none=False)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                micro()
        torch.cuda.current_stream().wait_stream(s)
        opt.zero_grad(set_to_none=False)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            micro()
        d.sync()
        out["micro_graph_device_s"] = _stats([d.device_time(g.replay) for _ in range(o.repeats)])
        out["graph_launch_host_s"] = _host_per_call(d, g.replay, 5, o.repeats)
        wall = []
        for _ in range(o.steps):
            d.sync()
            t0 = time.perf_counter()
            step(g.replay)
            d.sync()
            wall.append(time.perf_counter() - t0)
        out["graphed_step_s"] = _stats(wall)
    except Exception as e:  # noqa: BLE001 - capture can fail on some stacks: recorded
        out["graph_error"] = f"{type(e).__name__}: {e}"
    return out


def _kernels(torch, d: _Dev, o: HostOptions, dtype) -> dict[str, Any]:
    res: dict[str, Any] = {}
    x = torch.zeros(1, device=d.dev)
    res["kernel_launch_host_s"] = _host_per_call(d, lambda: x.add_(1.0), o.loop, o.repeats)
    res["sync_idle_s"] = _idle_latency(d, d.sync, o.repeats)
    res["item_idle_s"] = _idle_latency(d, lambda: x.sum().item(), o.repeats)
    if d.cuda:
        n = o.loop
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x.add_(1.0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(n):
                x.add_(1.0)
        g.replay()
        d.sync()
        res["kernel_device_s"] = _stats([d.device_time(g.replay) / n for _ in range(o.repeats)])
    lin = torch.nn.Linear(o.hidden, o.hidden).to(device=d.dev, dtype=dtype)
    xi = torch.randn(8, o.hidden, device=d.dev, dtype=dtype)
    with torch.no_grad():
        res["linear_fwd_host_s"] = _host_per_call(d, lambda: lin(xi), o.loop // 4, o.repeats)
    blk = _block(torch, o.hidden, o.heads, d.dev, dtype)
    xb = torch.randn(1, 16, o.hidden, device=d.dev, dtype=dtype, requires_grad=True)
    res["block_fwd_host_s"] = _host_per_call(d, lambda: blk(xb), max(o.loop // 20, 10), o.repeats)

    def fb():
        blk(xb).sum().backward()

    res["block_fwd_bwd_host_s"] = _host_per_call(d, fb, max(o.loop // 40, 5), o.repeats)
    if d.cuda:
        res["block_fwd_kernels"] = _count_kernels(torch, lambda: blk(xb))
        res["block_fwd_bwd_kernels"] = _count_kernels(torch, fb)
    return res


def _block_sweep(torch, d: _Dev, o: HostOptions, dtype) -> list[dict[str, Any]]:
    """One GPT block's forward+backward over hidden sizes and token counts: host issue time against device time.

    Where the device time falls below the host's, a step of such layers is host-bound; the device time is
    taken from a CUDA graph replay of the same forward+backward (no host in the loop).
    """
    hiddens = (64,) if o.quick else (512, 2048, 5120)
    tokens = (64,) if o.quick else (256, 1024, 4096, 16384)
    rows = []
    for h in hiddens:
        heads = max(1, h // 128) if not o.quick else 4
        blk = _block(torch, h, heads, d.dev, dtype)
        for t in tokens:
            row: dict[str, Any] = {"hidden": h, "heads": heads, "tokens": t}
            try:
                x = torch.randn(1, t, h, device=d.dev, dtype=dtype, requires_grad=True)

                def fb(blk=blk, x=x):
                    blk(x).sum().backward()

                fb()
                d.sync()
                issue = []
                for _ in range(o.repeats):
                    d.sync()
                    t0 = time.perf_counter()
                    fb()
                    issue.append(time.perf_counter() - t0)
                d.sync()
                row["issue_host_s"] = _stats(issue)
                row["eager_wall_s"] = _stats([d.device_time(fb) for _ in range(o.repeats)])
                if d.cuda:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        fb()
                    torch.cuda.current_stream().wait_stream(s)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        fb()
                    d.sync()
                    row["graph_device_s"] = _stats([d.device_time(g.replay) for _ in range(o.repeats)])
                    del g
            except Exception as e:  # noqa: BLE001 - recorded per row
                row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
        del blk
    return rows


def measure_host(opts: HostOptions) -> dict[str, Any]:
    """Every host figure (see the module docstring), with the metadata that names its origin."""
    torch = require_torch()
    o = opts.shrunk() if opts.quick else opts
    info = detect_device(o.device)
    d = _Dev(torch, info)
    dtype = torch.bfloat16 if d.cuda else torch.float32
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "format_version": 1,
        "measured": {
            **info.metadata(),
            "host_cpu": _cpu_name(),
            "host_cpus": os.cpu_count(),
            "python": platform.python_version(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "dtype": str(dtype).replace("torch.", ""),
            "quick": o.quick,
        },
        "options": asdict(o),
    }
    out["kernels"] = _kernels(torch, d, o, dtype)
    out["collectives"] = _collectives(torch, d, o)
    out["tiny_gpt"] = _tiny_gpt(torch, d, o, dtype)
    out["block_sweep"] = _block_sweep(torch, d, o, dtype)
    out["measure_wall_s"] = time.perf_counter() - t0
    return out


def write_host(result: dict[str, Any], out: Path, *, force: bool = False) -> Path:
    """Write ``result`` as ``out/host.json`` through dcpsim's output-folder rules."""
    from dcpsim.outdir import check_out_dir, write_text

    check_out_dir(out, force=force)
    path = Path(out) / "host.json"
    write_text(path, json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpsim.profiling.host", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder to write host.json into")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CPU, CI)")
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    res = measure_host(HostOptions(device=a.device, quick=a.quick))
    path = write_host(res, Path(a.out), force=a.force)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
