"""Count the NaN fills ``torch.use_deterministic_algorithms(True)`` adds to one transformer layer (CPU, no GPU needed).

Cross-check of ``dcpsim.cost.determinism.FILLS_LAYER["local"]``: a layer with the structure of Megatron-LM's
``local`` spec (LayerNorm, QKV linear, unfused attention with baddbmm into a held buffer, softmax, dropout, bmm,
``permute(...).contiguous()``, projection, bias-dropout-add, LayerNorm, fc1, GeLU, fc2, bias-dropout-add; [s, b, h]
layout) runs forward and backward under PyTorch's CPU profiler with deterministic algorithms off and on; the
``aten::fill_`` events are counted and attributed to the op that allocated (its profiler parents).

Run: ``python experiments/host/determinism_fills.py`` (needs ``torch``; a few seconds). The counts are a host
measurement used as a check in the docstring of ``dcpsim.cost.determinism``, never as a simulator input. CPU kernels
allocate differently from CUDA ones in places (CPU dropout draws a Bernoulli mask and casts it; CPU LayerNorm backward
resizes its outputs), so the CUDA count there is read from the source.

Result (torch 2.13.0+cpu, 2026-11-27): forward 0 fills non-deterministic, 14 deterministic (6 LayerNorm
output/mean/rstd, 3 dropout outputs, 3 dropout-mask casts, 2 layout copies); backward 4 and 19 (15 added: 12 LayerNorm
gradients and their resized buffers, 2 casts, 1 layout copy; the 4 present either way are the bias gradients'
reductions). ``FILLS_LAYER["local"]`` is (14, 14).
"""

from __future__ import annotations

from collections import Counter


def count(hidden: int = 256, heads: int = 8, seq: int = 128, batch: int = 2) -> dict[str, dict[str, object]]:
    """Fills (``aten::fill_`` events) of one layer's forward and backward, deterministic off and on, with the
    allocating op chain of each deterministic fill."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    d = hidden // heads

    class LocalLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
            self.buf = torch.zeros(batch * heads, seq, seq)
            self.mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)

        def forward(self, x):
            qkv = self.qkv(self.ln1(x)).view(seq, batch, heads, 3 * d)
            q, k, v = torch.split(qkv, d, dim=3)
            q, k = q.reshape(seq, batch * heads, d), k.reshape(seq, batch * heads, d)
            scores = torch.baddbmm(self.buf, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2), beta=0.0,
                                   alpha=d ** -0.5)
            p = F.dropout(F.softmax(scores.masked_fill(self.mask, -10000.0), dim=-1), 0.1, training=True)
            ctx = torch.bmm(p, v.reshape(seq, batch * heads, d).transpose(0, 1))
            ctx = ctx.view(batch, heads, seq, d).permute(2, 0, 1, 3).contiguous().view(seq, batch, hidden)
            x = x + F.dropout(self.proj(ctx), 0.1, training=True)
            return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), 0.1, training=True)

    def fills(fn, det: bool) -> tuple[int, Counter]:
        torch.use_deterministic_algorithms(det)
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
        finally:
            torch.use_deterministic_algorithms(False)
        where: Counter = Counter()
        n = 0
        for e in prof.events():
            if e.name == "aten::fill_":
                n += 1
                chain, p = [], e.cpu_parent
                while p is not None and len(chain) < 3:
                    chain.append(p.name)
                    p = p.cpu_parent
                where[" < ".join(chain)] += 1
        return n, where

    layer = LocalLayer()
    out: dict[str, dict[str, object]] = {}
    for det in (False, True):
        x = torch.randn(seq, batch, hidden, requires_grad=True)
        held: dict[str, object] = {}
        nf, wf = fills(lambda x=x, held=held: held.setdefault("y", layer(x)), det)
        y = held["y"]
        g = torch.randn_like(y)
        nb, wb = fills(lambda y=y, g=g: y.backward(g), det)
        out["deterministic" if det else "default"] = {"forward": nf, "backward": nb, "forward_where": dict(wf),
                                                      "backward_where": dict(wb)}
    return out


def main() -> int:
    import json

    r = count()
    print(json.dumps(r, indent=1))
    for way in ("forward", "backward"):
        print(f"{way}: {r['deterministic'][way] - r['default'][way]} fills added by deterministic mode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
