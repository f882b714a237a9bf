"""Collective bandwidth through torch.distributed, launched with torchrun.

Launcher: :func:`run_collectives` starts ``python -m torch.distributed.run``
(torchrun) with ``--nnodes 1 --nproc-per-node N`` and a static rendezvous on
``127.0.0.1`` at a free port, running this module as the worker. The worker
uses NCCL on GPUs (one process per GPU) and gloo on CPUs (in CI: two
processes, loopback only — ``GLOO_SOCKET_IFNAME`` is set to the loopback
interface when the caller has not set it). The same worker can be launched by
hand, for example across two nodes to measure the network tier::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m dcpsim.profiling.collectives --out coll.json --backend nccl --tier network

Each (op, size) is timed like nccl-tests measures it: ``bytes`` is the full
buffer (the gathered output of all-gather, the input of reduce-scatter; the
per-rank buffer of all-reduce, all-to-all and send/recv); a barrier precedes
each timed repeat; the time of a repeat is the slowest rank's (all-reduce MAX
over ranks); the median over repeats is kept with the p10/p90 spread;
``busbw = bytes / time × bus_factor(op, n)``. ``sendrecv`` is a ring: every
rank sends ``bytes`` to rank+1 and receives from rank−1 in one batched call.

Rank 0 prints progress lines ``DCPSIM-PROGRESS <done> <total> <label>`` and
writes the results as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.hardware.profile import COLLECTIVE_OPS, bus_factor
from dcpsim.profiling.measure import ProfilingError, require_torch

PROGRESS_TAG = "DCPSIM-PROGRESS"


# ---------------------------------------------------------------- worker side
def _op_fn(dist, torch, op: str, nbytes: int, n: int, rank: int, device, dtype) -> Callable[[], None]:
    esize = torch.empty((), dtype=dtype).element_size()
    count = nbytes // esize
    if op == "all_reduce":
        x = torch.ones(count, dtype=dtype, device=device)
        return lambda: dist.all_reduce(x)
    if op == "all_gather":
        out = torch.empty(count, dtype=dtype, device=device)
        x = torch.ones(count // n, dtype=dtype, device=device)
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: ag(out, x)
    if op == "reduce_scatter":
        x = torch.ones(count, dtype=dtype, device=device)
        out = torch.empty(count // n, dtype=dtype, device=device)
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: rs(out, x)
    if op == "all_to_all":
        x = torch.ones(count, dtype=dtype, device=device)
        out = torch.empty(count, dtype=dtype, device=device)
        return lambda: dist.all_to_all_single(out, x)
    if op == "sendrecv":
        x = torch.ones(count, dtype=dtype, device=device)
        out = torch.empty(count, dtype=dtype, device=device)

        def sr() -> None:
            ops = [dist.P2POp(dist.isend, x, (rank + 1) % n), dist.P2POp(dist.irecv, out, (rank - 1) % n)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        return sr
    raise ConfigError("op", op, f"one of {COLLECTIVE_OPS}")


def aligned_bytes(nbytes: int, n: int, element_size: int) -> int:
    """``nbytes`` rounded down to a multiple of ``n × element_size`` (at least one element per rank)."""
    unit = n * element_size
    return max(unit, (int(nbytes) // unit) * unit)


def _worker_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="dcpsim.profiling.collectives")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    ap.add_argument("--ops", default=",".join(COLLECTIVE_OPS))
    ap.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-repeats", type=int, default=5)
    ap.add_argument("--max-repeats", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=0.5)
    ap.add_argument("--tier", default="nvlink")
    return ap.parse_args(argv)


def _init_group(a: argparse.Namespace, torch, dist):
    """Join the process group; (device, dtype) of this rank."""
    from dcpsim.profiling.measure import torch_dtype

    if a.backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        try:
            dist.init_process_group("nccl", device_id=device)
        except TypeError:  # torch < 2.3 has no device_id
            dist.init_process_group("nccl")
        return device, torch_dtype(a.dtype)
    dist.init_process_group("gloo")
    return torch.device("cpu"), torch.float32  # gloo reduces float32 everywhere; bytes are what is measured


def _time_once(fn, torch, dist, cuda: bool) -> float:
    """Seconds of one call after a barrier (CUDA events on GPUs, the wall clock on CPUs)."""
    dist.barrier()
    if cuda:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _measure(a: argparse.Namespace, op: str, nbytes: int, n: int, fn, torch, dist, device) -> dict:
    """Median and spread of one collective at one size (every rank agrees on the repeat count; slowest rank counts)."""
    cuda = device.type == "cuda"
    for _ in range(max(1, a.warmup)):
        fn()
    first = torch.tensor([_time_once(fn, torch, dist, cuda)], dtype=torch.float64, device=device)
    dist.all_reduce(first, op=dist.ReduceOp.MAX)
    reps = int(max(a.min_repeats, min(a.max_repeats, a.budget_s / max(float(first.item()), 1e-9))))
    samples = [float(first.item())] + [_time_once(fn, torch, dist, cuda) for _ in range(reps - 1)]
    t = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    p10, med, p90 = np.percentile(t.cpu().numpy(), [10, 50, 90])
    f = bus_factor(op, n)
    return dict(
        op=op, bytes=nbytes, ranks=n, median_s=float(med), p10_s=float(p10), p90_s=float(p90), n=len(samples),
        busbw_gb_per_s=nbytes * f / med / 1e9, busbw_p10_gb_per_s=nbytes * f / p90 / 1e9,
        busbw_p90_gb_per_s=nbytes * f / p10 / 1e9,
    )


def _meta(a: argparse.Namespace, n: int, dtype, torch, device) -> dict:
    meta = {"backend": a.backend, "world_size": n, "tier": a.tier, "dtype": str(dtype).removeprefix("torch."),
            "torch": torch.__version__}
    if device.type == "cuda":
        meta["device"] = torch.cuda.get_device_name(device)
        try:
            meta["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001
            meta["nccl"] = "unknown"
    return meta


def worker_main(argv: list[str] | None = None) -> int:
    """Entry point of one torchrun rank (see the module docstring)."""
    a = _worker_args(argv)
    torch = require_torch()
    import torch.distributed as dist

    device, dtype = _init_group(a, torch, dist)
    rank, n = dist.get_rank(), dist.get_world_size()
    ops = [o for o in a.ops.split(",") if o]
    sizes = [int(s) for s in a.sizes.split(",") if s]
    esize = torch.empty((), dtype=dtype).element_size()
    results = []
    total, done = len(ops) * len(sizes), 0
    for op in ops:
        for size in sizes:
            nbytes = aligned_bytes(size, n, esize)
            fn = _op_fn(dist, torch, op, nbytes, n, rank, device, dtype)
            results.append(_measure(a, op, nbytes, n, fn, torch, dist, device))
            done += 1
            if rank == 0:
                print(f"{PROGRESS_TAG} {done} {total} {op} {nbytes}", flush=True)
            del fn
    meta = _meta(a, n, dtype, torch, device)
    dist.barrier()
    if rank == 0:
        Path(a.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------- launcher side
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _loopback_ifname() -> str | None:
    try:
        names = [nm for _, nm in socket.if_nameindex()]
    except OSError:
        return None
    for cand in ("lo", "lo0"):
        if cand in names:
            return cand
    return None


@dataclass(frozen=True)
class CollectiveSettings:
    """What :func:`run_collectives` times: ``nproc`` worker processes on ``backend`` (``"nccl"`` or ``"gloo"``),
    each op of ``ops`` (default all of :data:`COLLECTIVE_OPS`) at each message size of ``sizes`` (bytes), in
    ``dtype``; ``warmup`` untimed calls, then ``min_repeats``..``max_repeats`` timed ones within ``budget_s``
    seconds per case; the workers are killed after ``timeout_s`` seconds (None: no limit)."""

    nproc: int
    backend: str
    sizes: list[int]
    ops: list[str] | None = None
    dtype: str = "bf16"
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 30
    budget_s: float = 0.5
    timeout_s: float | None = None


def run_collectives(settings: CollectiveSettings, *, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Run the worker under torchrun on this host; returns ``{"meta": ..., "results": [...]}``.

    ``settings`` says what to time (:class:`CollectiveSettings`; a variant is ``dataclasses.replace``).
    ``progress(done, total, label)`` is called as rank 0 reports. Raises :class:`ProfilingError` with the tail
    of the workers' output if they fail.
    """
    c = settings
    nproc, backend, sizes, ops, dtype = c.nproc, c.backend, c.sizes, c.ops, c.dtype
    warmup, min_repeats, max_repeats, budget_s, timeout_s = c.warmup, c.min_repeats, c.max_repeats, c.budget_s, c.timeout_s
    if nproc < 2:
        raise ConfigError("--nproc", nproc, "at least 2 processes for collectives")
    if backend not in ("nccl", "gloo"):
        raise ConfigError("backend", backend, "'nccl' or 'gloo'")
    ops = list(ops or COLLECTIVE_OPS)
    bad = [o for o in ops if o not in COLLECTIVE_OPS]
    if bad:
        raise ConfigError("ops", bad, f"names from {COLLECTIVE_OPS}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])] + [p for p in [env.get("PYTHONPATH")] if p])
    # torchrun would set 1 anyway (with a warning); collectives need no intra-op threads
    env.setdefault("OMP_NUM_THREADS", "1")
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in env:
        lo = _loopback_ifname()
        if lo:
            env["GLOO_SOCKET_IFNAME"] = lo
    with tempfile.TemporaryDirectory(prefix="dcpsim-coll-") as tmp:
        out = Path(tmp) / "collectives.json"
        cmd = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            "-m", "dcpsim.profiling.collectives",
            "--out", str(out), "--backend", backend, "--ops", ",".join(ops),
            "--sizes", ",".join(str(int(s)) for s in sizes), "--dtype", dtype,
            "--warmup", str(warmup), "--min-repeats", str(min_repeats), "--max-repeats", str(max_repeats),
            "--budget-s", str(budget_s),
        ]
        tail: deque[str] = deque(maxlen=40)
        t0 = time.monotonic()
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(PROGRESS_TAG):
                    parts = line.split(maxsplit=3)
                    if progress and len(parts) >= 3:
                        progress(int(parts[1]), int(parts[2]), parts[3].strip() if len(parts) > 3 else "")
                else:
                    tail.append(line.rstrip())
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    proc.kill()
                    break
            rc = proc.wait()
        if rc != 0 or not out.is_file():
            msg = " | ".join(x for x in tail if x.strip())[-1500:]
            raise ProfilingError(f"collectives worker (torchrun, {nproc} x {backend}) failed with exit status {rc}: {msg}")
        return json.loads(out.read_text())


if __name__ == "__main__":  # torchrun -m dcpsim.profiling.collectives
    sys.exit(worker_main())
