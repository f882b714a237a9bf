"""Host cost of PyTorch's deterministic NaN fill, per allocation, on one device.

``torch.use_deterministic_algorithms(True)`` makes every ``empty`` factory fill the tensor it returns
(``torch.utils.deterministic.fill_uninitialized_memory``, default True; dcpsim/cost/determinism.py). This times, on
the host, ops that allocate through those factories with the fill switched on and off inside one process, the two
states alternating round by round so that drift cancels, and a tiny in-place kernel (dcpsim.profiling.host's
``kernel_launch_host_s``) as the unit the fill is priced in. Per op: host seconds per call with the fill on and off
(median of the rounds), the difference, the fills the op makes (counted from PyTorch's source: ``empty`` 1,
``native_dropout`` output and mask 2, ``native_layer_norm`` output, mean and rstd 3) and the difference per fill.
Usage::

    python benchmarks/device/fill_host.py --out fill_host.json [--device cuda] [--loop 2000] [--rounds 15]

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


def _ops(torch, dev):
    f = torch.nn.functional
    x = torch.randn(4 * 1024, 512, device=dev, dtype=torch.bfloat16)  # a microbatch's activation: 4 x 1024 tokens x 512
    w = torch.ones(512, device=dev, dtype=torch.bfloat16)
    b = torch.zeros(512, device=dev, dtype=torch.bfloat16)
    t = torch.zeros(1, device=dev)
    return x, {  # name: (callable, fills per call)
        "add_inplace_tiny": (lambda: t.add_(1.0), 0),
        "empty_1": (lambda: torch.empty((1,), device=dev), 1),
        "empty_activation": (lambda: torch.empty((4 * 1024, 512), device=dev, dtype=torch.bfloat16), 1),
        "empty_like_activation": (lambda: torch.empty_like(x), 1),
        "dropout_activation": (lambda: f.dropout(x, 0.1, training=True), 2),
        "layer_norm_activation": (lambda: f.layer_norm(x, (512,), w, b), 3),
    }


def measure(dev: str, loop: int, rounds: int) -> dict:
    import torch

    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    torch.use_deterministic_algorithms(True)
    _, ops = _ops(torch, dev)
    out = {}
    for name, (fn, fills) in ops.items():
        per = {True: [], False: []}
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                torch.utils.deterministic.fill_uninitialized_memory = on
                for _ in range(min(loop, 50)):
                    fn()
                sync()
                t0 = time.perf_counter()
                for _ in range(loop):
                    fn()
                per[on].append((time.perf_counter() - t0) / loop)
                sync()
        on_s, off_s = statistics.median(per[True]), statistics.median(per[False])
        diffs = sorted(a - b for a, b in zip(per[True], per[False], strict=True))
        out[name] = {"fills_per_call": fills, "fill_on_s": on_s, "fill_off_s": off_s, "delta_s": on_s - off_s,
                     "delta_paired_median_s": statistics.median(diffs),
                     "delta_paired_min_max_s": [diffs[0], diffs[-1]],
                     "delta_per_fill_s": (statistics.median(diffs) / fills) if fills else None,
                     "rounds": rounds, "loop": loop}
    torch.utils.deterministic.fill_uninitialized_memory = True
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--loop", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args(argv)
    import torch

    res = {"_provenance": {
        "what": "host seconds per call with torch.utils.deterministic.fill_uninitialized_memory on and off "
                "(torch.use_deterministic_algorithms(True)), benchmarks/device/fill_host.py",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "command": " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])])},
        "ops": measure(a.device, a.loop, a.rounds)}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
        f.write("\n")
    for k, v in res["ops"].items():
        per = v["delta_per_fill_s"]
        print(f"{k:24s} on {v['fill_on_s']*1e6:7.2f} us  off {v['fill_off_s']*1e6:7.2f} us  "
              f"delta {v['delta_paired_median_s']*1e6:6.2f} us" + (f"  per fill {per*1e6:6.2f} us" if per else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
