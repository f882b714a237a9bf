"""Durations of every group op, transfer and gradient synchronisation (numpy, no events).

Group ops. One vectorised :meth:`CostModel.batch_cost` call per link class
gives, per pack, the forward and backward time of one stage (``n_layers/PP``
layers) per rank of the CP group. Every stage runs the same per-rank cost; the
last stage adds the output layer (``head_fwd_s``/``head_bwd_s``).

Network bandwidth of CP groups. A group that leaves its NVLink domain runs its
CP communication on the network tier. Its bandwidth factor (``network_scale``,
``1/oversubscription`` when it leaves a pod, ``degraded_link_scale`` when it
holds the degraded GPU; see :class:`~dcpsim.sim.topology.Topology`) is applied
by costing those packs with a copy of the hardware profile whose network
collective bandwidths are multiplied by the factor. This keeps the overlap
rule of the ring exact (exposed = max(0, transfer − attention) per step): a
post-hoc factor on the exposed time would not. One extra ``batch_cost`` call
per distinct factor (usually one or two per iteration).

Pipeline transfers. Between stages ``p`` and ``p+1`` each rank sends its
microbatch activations, ``s_local × hidden × 2 B / TP`` (sequence parallel),
point-to-point to the same coordinates one stage up; the backward sends the
same bytes of gradients back. NVLink when both GPUs share a domain, otherwise
the network (scaled as above). A group's transfer takes its slowest member's.

Gradient synchronisation (distributed optimizer, per stage, over the DP×CP
ranks of the stage for each TP rank; :func:`~dcpsim.cost.comm.group_collective_time_s`
with the number of NVLink domains the group spans):

* reduce-scatter of the gradients: ``params_stage/TP × grad_reduce_bytes_per_param``;
* all-gather of the updated bf16 parameters: ``params_stage/TP × 2 B``;
* optimizer step on the local shard, HBM-bound: it reads and writes bf16
  weights, fp32 gradients and 12 B of fp32 master weights + Adam moments,
  ``(2 + 4 + 12) × 2`` bytes per shard parameter at ``hbm_bw_bytes_per_s``.

``params_stage`` counts the stage's blocks, plus the embedding on the first
stage and the output layer and final norm on the last.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dcpsim.cost import CostModel, group_collective_time_s
from dcpsim.cost.model import BatchCost
from dcpsim.hardware import HardwareProfile
from dcpsim.policies.plan import Plan
from dcpsim.sim.schedule import GroupTable
from dcpsim.sim.topology import Topology
from dcpsim.sim.variability import Faults, lognormal_factors, slice_any

OPTIMIZER_BYTES_PER_PARAM = (2 + 4 + 12) * 2  # read + write of bf16 weight, fp32 grad, fp32 master + Adam m, v


@dataclass
class IterationWork:
    """Durations (seconds) of one iteration's group ops; arrays are ``(PP, G)`` unless noted.

    ``cp_fwd_s``/``cp_bwd_s`` are the exposed CP-communication parts of
    ``fwd_s``/``bwd_s`` (after noise and stragglers). ``xfer_s`` is ``(PP−1, G)``.
    Per-group arrays (``(G,)``): ``local_tokens``, ``peak_memory_bytes``,
    ``fits_memory``, ``tokens`` (unpadded sequence tokens of the whole group).
    """

    table: GroupTable
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    cp_fwd_s: np.ndarray
    cp_bwd_s: np.ndarray
    xfer_s: np.ndarray
    spans_network: np.ndarray
    local_tokens: np.ndarray
    tokens: np.ndarray
    peak_memory_bytes: np.ndarray
    fits_memory: np.ndarray
    flops: float
    n_seqs: int
    batch_cost_calls: int


@dataclass(frozen=True)
class SyncCost:
    """Per-stage gradient synchronisation times (seconds, arrays of length PP) and sizes."""

    reduce_scatter_s: np.ndarray
    all_gather_s: np.ndarray
    optimizer_s: np.ndarray
    params_per_gpu: np.ndarray
    domains: np.ndarray


def scale_network(profile: HardwareProfile, factor: float) -> HardwareProfile:
    """A copy of ``profile`` whose network-tier collective bandwidths are multiplied by ``factor``."""
    rows = [dict(r, busbw_gb_per_s=r["busbw_gb_per_s"] * factor) if r["tier"] == "network" else r
            for r in profile.collective_rows]
    return replace(profile, name=f"{profile.name}@net{factor:g}", collective_rows=rows, _gemm={}, _attn={}, _coll={})


def stage_params(cost: CostModel) -> np.ndarray:
    """Parameters per GPU of each pipeline stage (blocks / TP, embedding on the first, head on the last)."""
    m, tp, pp = cost.model, cost.tp, cost.pp
    block = cost.layers_per_stage * (m.linear_params_per_layer() / tp + 2 * m.hidden)
    out = np.full(pp, float(block))
    out[0] += m.vocab * m.hidden / tp
    out[-1] += m.vocab * m.hidden / tp + m.hidden
    return out


class DurationModel:
    """Turns plans into :class:`IterationWork` for one (cost model, topology, faults) setting."""

    def __init__(self, cost: CostModel, topology: Topology, *, faults: Faults | None = None,
                 grad_reduce_bytes_per_param: int = 4) -> None:
        self.cost = cost
        self.topo = topology
        self.faults = faults
        self.grad_reduce_bytes_per_param = int(grad_reduce_bytes_per_param)
        self._scaled: dict[float, CostModel] = {}
        # which stage ranks hold a straggler GPU (any of their TP ranks)
        R, pp = topology.ranks_per_stage, topology.pp
        self._slow_rank = np.zeros((pp, R), dtype=bool)
        if faults is not None and faults.straggler_gpus.size:
            g = faults.straggler_gpus
            stage = g // (topology.tp * R)
            rank = (g % (topology.tp * R)) // topology.tp
            self._slow_rank[stage, rank] = True
        self._p2p = [topology.p2p_links(p) for p in range(pp - 1)]

    # ---------------------------------------------------------- costs
    def _cost_for(self, factor: float) -> CostModel:
        if factor == 1.0:
            return self.cost
        if factor not in self._scaled:
            c = self.cost
            self._scaled[factor] = CostModel(
                scale_network(c.profile, factor), c.model, tp=c.tp, pp=c.pp, dp_cp=c.dp_cp,
                cp_comm=c.cp_comm, recompute=c.recompute, memory_limit_bytes=c.memory_limit_bytes,
            )
        return self._scaled[factor]

    def sync_cost(self) -> SyncCost:
        """Gradient reduce-scatter, parameter all-gather and optimizer step per stage."""
        cost, topo = self.cost, self.topo
        prof = cost.profile
        params = stage_params(cost)
        rs, ag, opt, doms = (np.zeros(topo.pp) for _ in range(4))
        for p in range(topo.pp):
            n, domains, factor = topo.stage_dp_group(p)
            doms[p] = domains
            rs[p] = float(group_collective_time_s(prof, "reduce_scatter", params[p] * self.grad_reduce_bytes_per_param, n,
                                                  domains=domains, network_scale=factor))
            ag[p] = float(group_collective_time_s(prof, "all_gather", params[p] * 2.0, n, domains=domains, network_scale=factor))
            opt[p] = params[p] / n * OPTIMIZER_BYTES_PER_PARAM / prof.hbm_bw_bytes_per_s
        return SyncCost(rs, ag, opt, params, doms)

    def work(self, plan: Plan, table: GroupTable, *, noise_cv: float = 0.0,  # noqa: C901 - temporary, split by pipeline
             rng: np.random.Generator | None = None) -> IterationWork:
        """Durations of every group op of ``plan`` (noise drawn from ``rng`` when ``noise_cv > 0``)."""
        topo, cost = self.topo, self.cost
        pp, G, P = topo.pp, table.n_groups, table.n_real
        lens, pids, cps, starts = plan.packs()

        spans = np.zeros((pp, G), dtype=bool)
        factor = np.ones((pp, G))
        for p in range(pp):
            spans[p, :P] = topo.group_spans_network(p, starts, cps) & (cps > 1)
            factor[p, :P] = np.where(spans[p, :P], topo.group_network_factor(p, starts, cps), 1.0)

        fields = ("fwd_s", "bwd_s", "cp_fwd_exposed_s", "cp_bwd_exposed_s", "head_fwd_s", "head_bwd_s")
        per = {f: np.zeros((pp, G)) for f in fields}
        local = np.zeros(G)
        mem = np.full(G, float(cost.peak_memory_bytes(np.zeros(1))[0]))
        calls = 0
        # one batch_cost per link class: NVLink-only packs, then each network factor
        classes: list[tuple[float, bool, np.ndarray]] = [(1.0, False, ~spans[:, :P])]
        for f in np.unique(factor[:, :P][spans[:, :P]]):
            classes.append((float(f), True, spans[:, :P] & (factor[:, :P] == f)))
        for f, on_network, where in classes:
            need = where.any(axis=0)
            if not need.any():
                continue
            sel = np.nonzero(need)[0]
            remap = np.full(P, -1, dtype=np.int64)
            remap[sel] = np.arange(sel.size)
            doc = need[pids]
            bc: BatchCost = self._cost_for(f).batch_cost(lens[doc], remap[pids[doc]], cps[sel],
                                                         np.full(sel.size, on_network))
            calls += 1
            for p in range(pp):
                cols = sel[where[p, sel]]
                rows = remap[cols]
                for name in fields:
                    per[name][p, cols] = getattr(bc, name)[rows]
            local[sel] = bc.local_tokens
            mem[sel] = bc.peak_memory_bytes
        fwd = per["fwd_s"]  # BatchCost.fwd_s / bwd_s: every term of the cost model, head excluded
        bwd = per["bwd_s"]
        fwd[pp - 1] += per["head_fwd_s"][pp - 1]
        bwd[pp - 1] += per["head_bwd_s"][pp - 1]
        cpf = per["cp_fwd_exposed_s"].copy()
        cpb = per["cp_bwd_exposed_s"].copy()

        # variability: stragglers (a group runs at its slowest member), then kernel noise
        if self.faults is not None and self.faults.straggler_gpus.size:
            for p in range(pp):
                hit = slice_any(self._slow_rank[p], table.start, table.size)
                mult = np.where(hit, self.faults.straggler_slowdown, 1.0)
                for a in (fwd, bwd, cpf, cpb):
                    a[p] *= mult
        if noise_cv > 0:
            if rng is None:
                raise ValueError("noise_cv > 0 needs an rng")
            nz = lognormal_factors(noise_cv, (2, pp, G), rng)
            fwd *= nz[0]
            cpf *= nz[0]
            bwd *= nz[1]
            cpb *= nz[1]

        # pipeline transfers: activations forward, their gradients backward (same bytes, same link)
        xfer = np.zeros((max(pp - 1, 0), G))
        if pp > 1:
            prof = cost.profile
            nbytes = local * cost.model.hidden * 2.0 / cost.tp
            t_nvl = prof.collective_time_s("sendrecv", "nvlink", nbytes, 2)
            t_net = prof.collective_time_s("sendrecv", "network", nbytes, 2)
            for p in range(pp - 1):
                cross, fac = self._p2p[p]
                g_cross = slice_any(cross, table.start, table.size)
                g_fac = np.full(G, float(topo.network_scale))
                for v in np.unique(fac[cross]):
                    if v < topo.network_scale:
                        g_fac = np.where(slice_any(cross & (fac <= v), table.start, table.size), np.minimum(g_fac, v), g_fac)
                xfer[p] = np.where(g_cross, t_net / g_fac, t_nvl)

        tokens = np.zeros(G)
        tokens[:P] = np.bincount(pids, weights=lens, minlength=P) if P else 0.0
        return IterationWork(
            table=table, fwd_s=fwd, bwd_s=bwd, cp_fwd_s=cpf, cp_bwd_s=cpb, xfer_s=xfer, spans_network=spans,
            local_tokens=local, tokens=tokens, peak_memory_bytes=mem, fits_memory=mem <= cost.memory_limit_bytes,
            flops=cost.model.flops(lens), n_seqs=int(lens.size), batch_cost_calls=calls,
        )
