"""Device time of memory-bound kernels against their size, on one device.

dcpsim prices an elementwise or normalisation kernel at its bytes over the profile's HBM bandwidth
(``hbm_bw_bytes_per_s``, from a 1 GiB copy). Small kernels do not reach that rate: a kernel of a few MB has too few
blocks to fill the GPU and pays its ramp-up and tail. The tiny-GPT checks on two lent machines show it
(profiles/h200-sxm-measured/MEASURED.md, "The host model on a machine it was not fitted on"): at hidden 512-2048 the
H200 ran microbatches only 1.03-1.16x faster than the H100, where the HBM ratio is 1.41x, and the public profiles
price those microbatches 8-21% too fast. This measures the curve the model would need: per op and size, the device
time of one kernel and the bytes it moves per second.

Each (op, size) runs ``reps`` kernels back to back captured in one CUDA graph (no host gaps; CUDA events around
the replay), median of ``rounds`` replays; sizes are bf16 tensors of ``rows x hidden`` (hidden 512 .. 8192) from
64 KiB to 1 GiB. Bytes moved are counted from what each op must read and write (``copy``: read + write;
``add``: 2 reads + 1 write; ``gelu``: read + write; ``layer_norm``: read + write, weights ignored; ``softmax``:
read + write). On a CPU (``--device cpu``, for tests) the same loop is timed with ``time.perf_counter``: that is
not a device measurement and the output says so. Usage::

    python benchmarks/device/membound_curve.py --out membound.json [--device cuda] [--reps 20] [--rounds 7]

Only torch is needed (no dcpsim import), so it runs on a bare device machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time

# (op, bytes moved per element of the input, in units of the element size)
OPS = {"copy": 2, "add": 3, "gelu": 2, "layer_norm": 2, "softmax": 2}
SIZES_BYTES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
HIDDENS = (512, 2048, 8192)
# inputs of this size or more run BIG_REPS kernels per graph: the allocating ops' outputs stay in the graph's pool
BIG_BYTES, BIG_REPS = 256 << 20, 4


def shapes(sizes=SIZES_BYTES, hiddens=HIDDENS, elem=2) -> list[tuple[int, int]]:
    """(rows, hidden) of every bf16 tensor measured: each size at each hidden it holds at least one row of."""
    return [(size // (elem * h), h) for size in sizes for h in hiddens if size // (elem * h) >= 1]


def _kernel(torch, op: str, x, y):
    f = torch.nn.functional
    if op == "copy":
        return lambda: y.copy_(x)
    if op == "add":
        return lambda: torch.add(x, x, out=y)
    if op == "gelu":
        return lambda: f.gelu(x)
    if op == "layer_norm":
        return lambda: f.layer_norm(x, (x.shape[-1],))
    if op == "softmax":
        return lambda: torch.softmax(x, dim=-1)
    raise ValueError(f"op {op!r}: expected one of {sorted(OPS)}")


def _time_cuda(torch, fn, reps: int, rounds: int) -> list[float]:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / reps)
    return out


def _time_cpu(fn, reps: int, rounds: int) -> list[float]:
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        out.append((time.perf_counter() - t0) / reps)
    return out


def measure(dev: str, reps: int, rounds: int, sizes=SIZES_BYTES, ops=tuple(OPS)) -> list[dict]:
    import torch

    rows = []
    for op in ops:
        for n, h in shapes(sizes):
            x = torch.randn(n, h, device=dev, dtype=torch.bfloat16)
            y = torch.empty_like(x)
            fn = _kernel(torch, op, x, y)
            k = reps if x.numel() * x.element_size() < BIG_BYTES else min(reps, BIG_REPS)  # graph pool memory
            t = _time_cuda(torch, fn, k, rounds) if dev.startswith("cuda") else _time_cpu(fn, k, rounds)
            med = statistics.median(t)
            moved = OPS[op] * x.numel() * x.element_size()
            rows.append({"op": op, "rows": n, "hidden": h, "input_bytes": x.numel() * x.element_size(),
                         "bytes_moved": moved, "kernel_s": med, "kernel_min_max_s": [min(t), max(t)],
                         "bytes_per_s": moved / med if med > 0 else None, "reps": k, "rounds": rounds})
            del x, y
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--max-bytes", type=int, default=1 << 30, help="largest input tensor (bytes)")
    a = p.parse_args(argv)
    if a.reps < 1 or a.rounds < 1:
        p.error(f"--reps {a.reps} / --rounds {a.rounds}: expected integers >= 1")
    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {a.device!r}: CUDA is not available here (use --device cpu for a host-timed dry run)")
    sizes = [s for s in SIZES_BYTES if s <= a.max_bytes]
    rows = measure(a.device, a.reps, a.rounds, sizes)
    name = torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else platform.processor() or "cpu"
    payload = {"_provenance": {
        "what": "device seconds per memory-bound kernel against its size, benchmarks/device/membound_curve.py",
        "timing": "CUDA events around a CUDA graph of reps kernels" if a.device.startswith("cuda")
        else "host perf_counter around reps calls (CPU dry run: not a device measurement)",
        "device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])])},
        "rows": rows}
    with open(a.out, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
    for r in rows:
        bw = r["bytes_per_s"] or 0.0
        print(f"{r['op']:<11} {r['input_bytes'] / 2**20:9.3f} MiB  h{r['hidden']:<5} {r['kernel_s'] * 1e6:10.2f} us "
              f"{bw / 1e9:9.1f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
