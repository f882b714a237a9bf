"""The cost terms of every (pipeline stage, group) cell of an iteration, from one ``batch_cost`` call per link class.

:meth:`dcpsim.sim.durations.DurationModel.work` costs the plan's packs once per link class (NVLink-only
cells, then each network factor; see that module's docstring). The classes partition the cells: each
cell takes its row of its class's :class:`~dcpsim.cost.breakdown.BatchCost`. :class:`PackTerms` keeps
the classes' costs and the cell-to-row map, and gathers a term's ``(PP, G)`` array (seconds) only when
it is read (the shared network's ring terms are not read on the ideal one; the embedding and output
layer terms are read on one stage), once per term (one row broadcast over the stages where every group is in
the same class on every stage). The values are the batch costs' own: no arithmetic. :func:`ring_terms`
derives the shared network's CP ring traffic and windows from them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dcpsim.cost.breakdown import BatchCost

TERMS = ("layer_fwd_s", "layer_bwd_s", "overhead_fwd_s", "overhead_bwd_s", "cp_fwd_exposed_s", "cp_bwd_exposed_s",
         "head_fwd_s", "head_bwd_s", "embed_fwd_s", "embed_bwd_s", "cp_fwd_comm_s", "cp_comm_total_s", "attn_fwd_s",
         "attn_bwd_s")


class PackTerms:
    """Per (stage, group) cost terms, ``(PP, G)`` seconds (0 for the groups ``P..G-1`` past the real ones).

    ``costs``: the link classes' batch costs; ``row[p, g]`` (``(PP, P)``): the cell's row in those costs
    laid end to end.
    """

    def __init__(self, costs: list[BatchCost], row: np.ndarray, G: int) -> None:
        self.costs, self.row, self.G = costs, row, G
        # every group in the same class on every stage (the usual case): one gather of G rows a term
        self.same_on_stages = row.shape[0] <= 1 or row.strides[0] == 0 or bool((row == row[:1]).all())
        self._full: dict[str, np.ndarray] = {}

    def _values(self, name: str) -> np.ndarray:
        vals = [getattr(bc, name) for bc in self.costs]
        return vals[0] if len(vals) == 1 else np.concatenate(vals)  # (read only: gathered from)

    def __getitem__(self, name: str) -> np.ndarray:
        """The term's ``(PP, G)`` array (gathered on first read, read-only; where every group is in the same
        class on every stage, one row broadcast over the stages)."""
        out = self._full.get(name)
        if out is None:
            pp, P = self.row.shape
            out = np.zeros(self.G if self.same_on_stages else (pp, self.G))
            if self.costs and P:
                vals = self._values(name)
                out[..., :P] = vals.take(self.row[0] if self.same_on_stages else self.row)
            out = np.broadcast_to(out, (pp, self.G))  # read-only (a view when one row)
            self._full[name] = out
        return out

    def stage(self, name: str, p: int) -> np.ndarray:
        """The term on stage ``p``, ``(G,)`` (a new array)."""
        if name in self._full:
            return self._full[name][p].copy()
        out = np.zeros(self.G)
        if self.costs and self.row.shape[1]:
            out[:self.row.shape[1]] = self._values(name).take(self.row[p])
        return out


def _distinct(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` of a float array with few distinct values (network factors), by one pass per value (a
    sort past 8 of them)."""
    if x.size < 4096 or np.isnan(x).any():
        return np.unique(x)
    out, rest = [], x
    while rest.size:
        if len(out) == 8:
            return np.unique(x)
        out.append(rest.min())
        rest = rest[rest != out[-1]]
    return np.asarray(out)


def pack_costs(cost_for: Callable[[float], object], lens: np.ndarray, pids: np.ndarray, cps: np.ndarray,
               spans: np.ndarray, factor: np.ndarray,
               idle_memory_bytes: float) -> tuple[PackTerms, np.ndarray, np.ndarray, int]:
    """(terms, local tokens ``(G,)``, peak memory bytes ``(G,)``, batch_cost calls) of the real groups ``0..P-1``
    (``P = cps.size``; ``lens``/``pids``: the packs' sequence lengths and pack ids, as :meth:`Plan.packs`).

    ``cost_for(f)``: the cost model with the network bandwidths scaled by ``f``; ``spans``/``factor``
    ``(PP, G)``: whether a cell's CP group leaves its NVLink domain, and its network factor. A group costed
    in several classes takes the last one's local tokens and memory. A class that holds at least 90% of the
    packs is costed on every pack (a pack's costs are its own whatever the others': the same values; its
    rows past the class's are not read), the others on their packs' documents. ``spans`` and ``factor`` of one
    row broadcast (every stage alike): the classes found on that row, the cell-to-row map broadcast the same way.
    """
    (pp, G), P = spans.shape, cps.size
    if spans.strides[0] == 0 and factor.strides[0] == 0:
        spans, factor = spans[:1], factor[:1]
    local = np.zeros(G)
    mem = np.full(G, float(idle_memory_bytes))
    classes: list[tuple[float, bool, np.ndarray]] = [(1.0, False, ~spans[:, :P])]
    for f in _distinct(factor[:, :P][spans[:, :P]]):
        classes.append((float(f), True, spans[:, :P] & (factor[:, :P] == f)))
    row, done = np.zeros((spans.shape[0], P), dtype=np.int64), []
    for f, on_network, where in classes:
        need = where.any(axis=0)
        if not need.any():
            continue
        sel = np.nonzero(need)[0]
        if 10 * sel.size >= 9 * P:  # (nearly) every pack: the plan's own arrays, no gathers (the same values)
            bc: BatchCost = cost_for(f).batch_cost(lens, pids, cps, np.full(P, on_network))
            remap = np.arange(P)
            local[sel], mem[sel] = bc.local_tokens.take(sel), bc.peak_memory_bytes.take(sel)
        else:
            remap = np.full(P, -1, dtype=np.int64)
            remap[sel] = np.arange(sel.size)
            doc = need.take(pids)
            bc = cost_for(f).batch_cost(lens[doc], remap.take(pids[doc]), cps[sel], np.full(sel.size, on_network))
            local[sel], mem[sel] = bc.local_tokens, bc.peak_memory_bytes
        if done:
            np.copyto(row, (remap + sum(len(b) for b in done))[None, :], where=where)
        else:  # the first class costed: every cell (the classes partition the cells; the later ones overwrite theirs)
            row[...] = remap
        done.append(bc)
    return PackTerms(done, np.broadcast_to(row, (pp, P)), G), local, mem, len(done)


def ring_terms(per: PackTerms, spans: np.ndarray, scale: np.ndarray, cps: np.ndarray, G: int,
               cp_comm: str) -> tuple[np.ndarray, ...]:
    """Shared network: (forward ring traffic, backward ring traffic, forward window, backward window) per op,
    ``(PP, G)`` each, for the groups whose CP ring leaves its NVLink domain (0 elsewhere; ``scale``: each stage's
    layer scale, ``(PP, 1)``; ``cps``: the real groups' CP sizes).

    Traffic ``W`` is the ring's transfers of the op at the NIC's own speed (``(c − 1)`` steps per layer).
    The window ``R`` is the time the op's ring steps take alone: with ``p2p`` each step overlaps that
    step's attention block ``a`` (``attn/c``), so ``R = L·(c − 1)·max(tx, a)`` = exposed + ``attn·(c − 1)/c``;
    the ``all_gather``/``a2a`` collectives overlap nothing (``R = W``). With ``recompute = "full"`` the
    backward first repeats the forward ring (:attr:`dcpsim.sim.durations.IterationWork.cp_recompute_ring`).
    """
    ring_f = np.where(spans, per["cp_fwd_comm_s"] * scale, 0.0)
    ring_b = np.where(spans, (per["cp_comm_total_s"] - per["cp_fwd_comm_s"]) * scale, 0.0)
    win_f, win_b = ring_f.copy(), ring_b.copy()
    if cp_comm == "p2p":
        c = np.ones(G)
        c[:cps.size] = cps
        over = (c - 1.0) / c
        win_f = np.where(spans, (per["cp_fwd_exposed_s"] + per["attn_fwd_s"] * over) * scale, 0.0)
        win_b = np.where(spans, (per["cp_bwd_exposed_s"] + per["attn_bwd_s"] * over) * scale, 0.0)
    return ring_f, ring_b, np.maximum(win_f, ring_f), np.maximum(win_b, ring_b)
