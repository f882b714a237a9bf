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
ranks of the stage for each TP rank; :func:`~dcpsim.cost.communication.group_collective_time_s`
with the number of NVLink domains the group spans):

* reduce-scatter of the gradients: ``params_stage/TP × grad_reduce_bytes_per_param``;
* all-gather of the updated bf16 parameters: ``params_stage/TP × 2 B``;
* both in buckets of ``grad_bucket_params`` parameters (0: Megatron-Core's
  default ``max(40M, 1M × DP)``, ``DistributedDataParallelConfig.bucket_size``);
  Megatron turns bucketing off on every pipeline stage but the first (one
  bucket there), and with the interleaved schedule wraps each model chunk in
  its own DDP (one bucket per chunk, chunk 0 of the first stage bucketed). ``*_bucket_s`` is one bucket's time; the engine overlaps
  the rest (``--overlap-grad-reduce``, ``--overlap-param-gather``);
* optimizer step on the local shard, HBM-bound (``OPTIMIZER_BYTES_PER_PARAM``:
  fused Adam reads the fp32 gradient, master weight and both moments, 16 B,
  and writes the master weight, moments and the bf16 weight, 14 B), plus the
  gradient norm (reads the shard's fp32 gradients, 4 B), zeroing the full
  fp32 gradient buffer of the stage (4 B per stage parameter), FP8 weight
  casts once per iteration (FP8 only), ``KERNELS_ITERATION`` launches and
  the profile's ``iteration_overhead_s``. Gradient clipping only rescales
  when the norm exceeds the threshold (assumed rare: not priced); data
  loading is assumed hidden by prefetching workers.

``params_stage`` counts the stage's blocks (``CostModel.stage_layers``),
plus the embedding on the first stage and the output layer and final norm on
the last. Uneven stages: every layer term of a stage's op is the cost
model's ``layer_*`` time scaled by ``stage_layers[p] / layers_per_stage``;
the per-microbatch overhead is not scaled; the first stage adds the
embedding (``embed_*``), the last the output layer and loss (``head_*``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, is_dataclass, replace

import numpy as np

from dcpsim.cost import CostModel, group_collective_time_s
from dcpsim.cost.compute import fp8_weight_cast_bytes
from dcpsim.cost.host import (
    HostOps,
    HostTimeline,
    PassShape,
    StepEndWork,
    StepFlags,
    evaluate,
    host_ops,
    layer_collectives,
    step_end_ops,
)
from dcpsim.hardware import HardwareProfile
from dcpsim.model import stage_params as model_stage_params
from dcpsim.pipeline import chunk_durations, link_of_transfer
from dcpsim.policies.plan import Plan, PlanArrays
from dcpsim.sim.graph import GroupTable
from dcpsim.sim.networks import NetworkModel, get_network
from dcpsim.sim.packcosts import pack_costs, ring_terms
from dcpsim.sim.settings import SimSettings
from dcpsim.sim.topology import Topology
from dcpsim.sim.variability import Faults, lognormal_factors, slice_any

OPTIMIZER_BYTES_PER_PARAM = 16 + 14  # Adam reads fp32 grad, master, m, v (16 B); writes master, m, v, bf16 weight (14 B)
GRAD_NORM_BYTES_PER_PARAM = 4  # the shard's fp32 gradients read once for the norm
ZERO_GRAD_BYTES_PER_PARAM = 4  # the stage's full fp32 gradient buffer zeroed (per stage parameter, not per shard)
KERNELS_ITERATION = 20  # assumed: multi-tensor Adam and norm launches, scalar all-reduces, zeroing, loss scaling
DEFAULT_BUCKET_PARAMS = 40_000_000  # Megatron-Core bucket_size default: max(40M, 1M x DP) parameters


@dataclass
class IterationWork:
    """Durations (seconds) of one iteration's group ops; arrays are ``(PP, G)`` unless noted.

    ``cp_fwd_s``/``cp_bwd_s`` are the exposed CP-communication parts of
    ``fwd_s``/``bwd_s`` (after noise and stragglers); ``fwd_s``/``bwd_s`` are a
    rank's whole share (all its ``vp`` chunks, and on the last stage the output
    layer, ``head_fwd_s``/``head_bwd_s``). ``xfer_s`` is ``(n_links, G)``, links
    as in :attr:`Topology.n_links` (stage ``p`` → ``p+1``, then the
    interleaved schedule's wrap-around; read-only, one row broadcast, when every link is alike). Per-group arrays (``(G,)``):
    ``local_tokens``, ``peak_memory_bytes``, ``fits_memory``, ``tokens``
    (unpadded sequence tokens of the whole group). :meth:`virtual` gives the
    durations per virtual stage that the schedule runs.
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
    head_fwd_s: np.ndarray | None = None
    head_bwd_s: np.ndarray | None = None
    vp: int = 1
    embed_fwd_s: np.ndarray | None = None
    embed_bwd_s: np.ndarray | None = None
    idle_memory_bytes: float = 0.0  # a rank's peak memory in a step that leaves it out (weights, optimizer state)
    # one GPU pair's pipeline transfer per group: over the network alone (no pod or degraded-link factor;
    # the shared network applies those as link capacities) and over NVLink (seconds, (G,))
    p2p_network_alone_s: np.ndarray | None = None
    p2p_nvlink_s: np.ndarray | None = None
    # shared network: the whole CP ring traffic of each op of a group that leaves its NVLink domain, at
    # the NIC's own speed (``network_scale`` only), forward and backward, ``(PP, G)``; None when ideal
    cp_fwd_ring_s: np.ndarray | None = None
    cp_bwd_ring_s: np.ndarray | None = None
    # shared network: the time those rings' steps take alone, overlapped with attention (>= the traffic;
    # the ring is paced at traffic / window, see dcpsim.sim.network), ``(PP, G)``
    cp_fwd_window_s: np.ndarray | None = None
    cp_bwd_window_s: np.ndarray | None = None
    # shared network, ``recompute = "full"``: each backward op first repeats its forward ring (same traffic
    # and window), then runs its own
    cp_recompute_ring: bool = False
    # the host timeline's side of every group op (dcpsim.cost.host.HostOps, groups in table order); None:
    # the profile has no host model, ops run at their device times
    host: object | None = None

    def virtual(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(forward, backward, transfer) per virtual stage: ``(PP·vp, G)`` twice and ``(PP·vp − 1, G)``.

        A rank's layers split evenly over its ``vp`` chunks; the output layer runs on the last virtual
        stage and the embedding on the first; transfer ``s`` (virtual stage ``s`` → ``s + 1``) uses link ``s mod PP``.
        With ``vp = 1`` they are read-only views of this work's arrays.
        """
        pp = self.fwd_s.shape[0]
        if self.vp == 1:  # a rank's times and links as they are (read-only views, not chunk_durations' copies)
            f, b, x = (a.view() for a in (self.fwd_s, self.bwd_s, self.xfer_s[:max(pp - 1, 0)]))
            _read_only((f, b, x))
            return f, b, x
        f = chunk_durations(self.fwd_s, self.vp, self.head_fwd_s, self.embed_fwd_s)
        b = chunk_durations(self.bwd_s, self.vp, self.head_bwd_s, self.embed_bwd_s)
        x = self.xfer_s[link_of_transfer(pp, self.vp)] if pp * self.vp > 1 else np.zeros((0, self.fwd_s.shape[1]))
        return f, b, x


@dataclass(frozen=True)
class SyncCost:
    """Per-stage gradient synchronisation times (seconds, arrays of length PP) and sizes."""

    reduce_scatter_s: np.ndarray
    all_gather_s: np.ndarray
    optimizer_s: np.ndarray
    params_per_gpu: np.ndarray
    domains: np.ndarray
    reduce_scatter_bucket_s: np.ndarray | None = None
    all_gather_bucket_s: np.ndarray | None = None
    buckets: np.ndarray | None = None
    # one bucket's reduce-scatter at the NIC's own speed (``network_scale`` only, no pod or degraded-link
    # factor: the shared network applies those as link capacities); 0 where the group stays on NVLink
    reduce_scatter_bucket_alone_s: np.ndarray | None = None
    all_gather_bucket_alone_s: np.ndarray | None = None  # the same for one bucket's parameter all-gather


def scale_network(profile: HardwareProfile, factor: float) -> HardwareProfile:
    """A copy of ``profile`` whose network-tier collective bandwidths are multiplied by ``factor``."""
    rows = [dict(r, busbw_gb_per_s=r["busbw_gb_per_s"] * factor) if r["tier"] == "network" else r
            for r in profile.collective_rows]
    return replace(profile, name=f"{profile.name}@net{factor:g}", collective_rows=rows, _gemm={}, _attn={}, _coll={})


def stage_params(cost: CostModel) -> np.ndarray:
    """Parameters per GPU of each pipeline stage of ``cost`` (:func:`dcpsim.model.stage_params`)."""
    return model_stage_params(cost.model, cost.tp, cost.stage_layers)


def param_gather_bytes(cost: CostModel, stage: int, params: float, fp8_param_gather: bool = True) -> float:
    """Bytes per GPU the distributed optimizer all-gathers for pipeline stage ``stage`` (``params`` on it).

    2 B per parameter (BF16 weights), except with FP8 GEMMs and Megatron's ``--fp8-param-gather``
    (``dcpsim export`` emits it for FP8 runs): the block GEMM weights are gathered as FP8, 1 B each, and
    only the rest (embeddings, output layer, norms, biases) at 2 B (Megatron-Core
    ``DistributedDataParallelConfig.fp8_param_gather``; NeMo 2's ``bf16_with_fp8_mixed`` sets it).
    """
    if cost.precision != "fp8" or not fp8_param_gather:
        return 2.0 * params
    fp8 = float(cost.stage_layers[stage]) * cost.model.linear_params_per_layer() / cost.tp
    return 2.0 * params - min(fp8, params)


_SYNC_MEMO: dict[tuple, tuple] = {}  # DurationModel.sync_cost per equal inputs
STAGE_MEMO = True  # sync_cost: stages with equal inputs computed once (tests compare with every stage computed)
_STAGE_SYNC: dict[tuple, tuple] = {}  # one stage's sync per equal inputs, across models (_shared_stage_sync)


class DurationModel:
    """Turns plans into :class:`IterationWork` for one (cost model, topology, faults) setting."""

    def __init__(self, cost: CostModel, topology: Topology, *, faults: Faults | None = None,
                 settings: SimSettings | None = None, host_flags: StepFlags | None = None,
                 network: NetworkModel | None = None) -> None:
        self.cost = cost
        self.settings = settings or SimSettings()
        # the host timeline's flags (dcpsim.cost.host); None: no host timeline (device times alone)
        self.host_flags = host_flags if isinstance(host_flags, StepFlags) else None
        self.network = network if network is not None else get_network(self.settings.network, topology)
        self.flows = self.network.uses_flows  # CP rings' traffic and windows are needed by the flows
        self.topo = topology
        self.faults = faults
        self.stage_scale = cost.stage_layers / float(cost.layers_per_stage)
        self.step_end_inputs: dict[int, tuple[float, float, int]] = {}  # per stage: optimizer device s, params, buckets
        self._scaled: dict[float, CostModel] = {}
        # which stage ranks hold a straggler GPU (any of their TP ranks)
        R, pp = topology.ranks_per_stage, topology.pp
        self._slow_rank = np.zeros((pp, R), dtype=bool)
        if faults is not None and faults.straggler_gpus.size:
            g = faults.straggler_gpus
            stage = g // (topology.tp * R)
            rank = (g % (topology.tp * R)) // topology.tp
            self._slow_rank[stage, rank] = True
        self._p2p_links: list | None = None  # per pipeline link (topology.p2p_links), on first use
        # per group layout, what depends on it alone (_layout_memo): a sweep task's runs share a simulator
        self._by_layout: dict[tuple, list] = {}

    @property
    def _p2p(self) -> list:  # (crosses the network, factor) per pipeline link (a sync cost alone needs none)
        if self._p2p_links is None:
            self._p2p_links = [self.topo.p2p_links(p) for p in range(self.topo.n_links)]
        return self._p2p_links

    # ---------------------------------------------------------- costs
    def _cost_for(self, factor: float) -> CostModel:
        """The cost model with the network-tier bandwidths scaled by ``factor`` (every other setting carried)."""
        if factor == 1.0:
            return self.cost
        if factor not in self._scaled:
            self._scaled[factor] = self.cost.derive(profile=scale_network(self.cost.profile, factor))
        return self._scaled[factor]

    def sync_cost(self) -> SyncCost:
        """Gradient reduce-scatter, parameter all-gather and optimizer step per stage.

        Computed once per process for equal inputs (the cost settings, the topology, the sync settings and
        the host flags: a sweep's runs that differ by seed or policy share it); the cached arrays are
        read-only."""
        st = self.cost.settings
        key = (id(st.profile), id(st.model), tuple((f.name, getattr(st, f.name)) for f in fields(st)
                                                   if f.name not in ("profile", "model")),
               self.topo, self.settings.grad_bucket_params, self.settings.grad_reduce_bytes_per_param,
               self.settings.fp8_param_gather, self.host_flags, STAGE_MEMO)
        hit = _SYNC_MEMO.get(key)
        if hit is None or hit[0] is not st.profile or hit[1] is not st.model:
            sync = self._sync_cost()
            for a in vars(sync).values():
                if isinstance(a, np.ndarray):
                    a.flags.writeable = False
            if len(_SYNC_MEMO) > 256:
                _SYNC_MEMO.clear()
            hit = _SYNC_MEMO[key] = (st.profile, st.model, sync, dict(self.step_end_inputs))
        self.step_end_inputs.update(hit[3])
        return hit[2]

    def _sync_cost(self) -> SyncCost:
        cost, topo = self.cost, self.topo
        params = stage_params(cost)
        rs, ag, opt, doms, rs_b, ag_b, nb, rs_alone, ag_alone = (np.zeros(topo.pp) for _ in range(9))
        done: dict[tuple, tuple] = {}  # stages with the same inputs (the middle ones) computed once
        for p in range(topo.pp):
            n, domains, factor = topo.stage_dp_group(p)
            doms[p] = domains
            bucket = self.settings.grad_bucket_params or max(DEFAULT_BUCKET_PARAMS, 1_000_000 * n)
            # one DDP instance (grad buffer, >= 1 bucket) per model chunk; only chunk 0 of the first stage is
            # bucketed (training/training.py get_model at d98e8a64: per_chunk_disable_bucketing, bucket_size
            # None where pp_rank > 0)
            vp = max(int(topo.vp), 1)
            nb[p] = (max(1, math.ceil(params[p] / vp / bucket)) if p == 0 else 1) + (vp - 1)
            g, w = params[p] * self.settings.grad_reduce_bytes_per_param, param_gather_bytes(cost, p, params[p], self.settings.fp8_param_gather)
            key = (n, domains, factor, float(g), float(w), float(params[p]), float(nb[p]),
                   float(cost.stage_layers[p]), self.param_tensors(p))
            if key not in done or not STAGE_MEMO:
                done[key] = self._shared_stage_sync(p, key, g, w)
            rs_b[p], ag_b[p], rs[p], ag[p], rs_alone[p], ag_alone[p], opt_dev, opt[p] = done[key]
            self.step_end_inputs[p] = (opt_dev, float(params[p]), int(nb[p]))
        return SyncCost(rs, ag, opt, params, doms, rs_b, ag_b, nb, rs_alone, ag_alone)

    def _shared_stage_sync(self, p: int, key: tuple, g: float, w: float) -> tuple[float, ...]:
        """:meth:`_stage_sync` of stage ``p`` (``key``: its inputs as :meth:`_sync_cost` builds it), from a process-wide
        memo (:data:`STAGE_MEMO`: the planner's screen prices thousands of layouts whose stages repeat). Its key adds
        what _stage_sync reads besides its arguments (profile and model by identity, held to check it)."""
        cost, (n, domains, factor, _, _, params, nb) = self.cost, key[:7]
        full = (id(cost.profile), id(cost.model), cost.precision, cost.tp, float(self.topo.network_scale),
                self.host_flags, *key)
        hit = _STAGE_SYNC.get(full) if STAGE_MEMO else None
        if hit is None or hit[0] is not cost.profile or hit[1] is not cost.model:
            _STAGE_SYNC.clear() if len(_STAGE_SYNC) > 65536 else None
            hit = _STAGE_SYNC[full] = (cost.profile, cost.model, self._stage_sync(p, (n, domains, factor), g, w,
                                                                                 params, nb))
        return hit[2]

    def _stage_sync(self, p: int, group: tuple[int, int, float], g: float, w: float, params: float,
                    nb: float) -> tuple[float, ...]:
        """One stage's sync: (reduce-scatter per bucket, all-gather per bucket, their totals, both alone on the
        network, the optimizer's device time, the step end) in seconds; ``group``: its DP group (ranks,
        domains, network factor), ``g``/``w``: gradient / gathered bytes, ``nb`` buckets."""
        cost, topo, prof = self.cost, self.topo, self.cost.profile
        n, domains, factor = group
        bw = prof.hbm_bw_bytes_per_s
        fixed = KERNELS_ITERATION * prof.timing.per_kernel_overhead_s + prof.timing.iteration_overhead_s

        def t(op: str, nbytes: float, factor: float = factor) -> float:
            return float(group_collective_time_s(prof, op, nbytes, n, domains=domains, network_scale=factor))

        rs_b, ag_b = t("reduce_scatter", g / nb), t("all_gather", w / nb)
        rs_alone = ag_alone = 0.0
        if domains > 1:
            rs_alone = t("reduce_scatter", g / nb, factor=float(topo.network_scale))
            ag_alone = t("all_gather", w / nb, factor=float(topo.network_scale))
        opt = (params / n * (OPTIMIZER_BYTES_PER_PARAM + GRAD_NORM_BYTES_PER_PARAM)
               + params * ZERO_GRAD_BYTES_PER_PARAM) / bw + fixed
        if cost.precision == "fp8":
            opt += cost.stage_layers[p] * fp8_weight_cast_bytes(cost.model, cost.tp) / bw
        opt = float(opt)
        return rs_b, ag_b, nb * rs_b, nb * ag_b, rs_alone, ag_alone, opt, self.step_end_s(p, opt, params, int(nb))

    # ---------------------------------------------------------- the host (dcpsim.cost.host)
    def step_end_s(self, p: int, optimizer_device_s: float, params: float, buckets: int) -> float:
        """Stage ``p``'s step end after its gradient reduce-scatter: the optimizer's device time alone
        without a host model, else the host timeline of the step end (:func:`dcpsim.cost.host.step_end_ops`:
        grad checks, norm, optimizer, logging, with their syncs) around it."""
        tl = self.step_end_timeline(p, optimizer_device_s, params, buckets)
        return optimizer_device_s if tl is None else tl.end_s

    def step_end_timeline(self, p: int, optimizer_device_s: float, params: float, buckets: int) -> HostTimeline | None:
        """The host timeline of stage ``p``'s step end (None without a host model), from its start."""
        host = self.cost.profile.host
        if not host.enabled or self.host_flags is None:
            return None
        work = StepEndWork(optimizer_device_s=optimizer_device_s, param_tensors=self.param_tensors(p),
                           buckets=buckets, norm_device_s=2.0 * params / self.cost.profile.hbm_bw_bytes_per_s)
        return evaluate(step_end_ops(work, self.host_flags, host), host.sync_s)

    def param_tensors(self, p: int) -> int:
        """Parameter tensors on stage ``p`` (the step end's per-tensor loops): per layer the four GEMM weights
        and two norms, plus (plain MLP: GPT with biases and LayerNorm) four biases and two norm biases; the
        embedding on the first stage, final norm and output layer on the last."""
        cost = self.cost
        per_layer = 6 if cost.model.gated_mlp else 12
        n = int(cost.stage_layers[p]) * per_layer
        return n + (1 if p == 0 else 0) + (2 if p == cost.pp - 1 else 0)

    def host_ops(self, plan: Plan, table: GroupTable, cps: np.ndarray) -> HostOps | None:
        """The host side of every group op of ``plan`` (None without a host model in the profile)."""
        host = self.cost.profile.host
        if not host.enabled or self.host_flags is None:
            return None
        first = (table.step == table.step.min()) if table.n_groups else np.zeros(0, dtype=bool)
        dyn, flags = bool(plan.dynamic), replace(self.host_flags, thd=bool(plan.dynamic), dynamic_cp=bool(plan.dynamic))
        # host_ops reads a group's documents only as "more than one" under THD and the first step only under
        # Dynamic CP (both: dynamic plans; dcpsim.cost.host), so the ops are kept per CP sizes and those flags
        seen = np.concatenate([np.asarray(table.n_seqs) > 1, first]) if dyn else np.zeros(0, dtype=bool)
        return self._layout_memo(f"host{int(dyn)}", table.n_groups, np.asarray(cps), seen, lambda: (host_ops(
            pass_shape(self.cost, self.topo.vp, cps, n_seqs=table.n_seqs, first_step=first), host, flags, shared=True),))[0]

    def work(self, plan: Plan, table: GroupTable, *, noise_cv: float = 0.0,
             rng: np.random.Generator | None = None, arrays: PlanArrays | None = None) -> IterationWork:
        """Durations of every group op of ``plan`` (noise drawn from ``rng`` when ``noise_cv > 0``); ``arrays``:
        the plan's :meth:`~dcpsim.policies.plan.Plan.arrays` when the caller has them."""
        cost = self.cost
        G, P = table.n_groups, table.n_real
        lens, pids, cps, starts = plan.packs(arrays)
        spans, factor = self._spans(table, starts, cps)
        per, local, mem, calls = pack_costs(self._cost_for, lens, pids, cps, spans, factor,
                                            float(cost.peak_memory_bytes(np.zeros(1))[0]))
        pp = self.topo.pp
        # layer terms scaled to each stage's layer count, plus the per-microbatch overhead; the
        # embedding on the first stage, the output layer + loss on the last
        scale = self.stage_scale[:, None]
        fwd = per["layer_fwd_s"] * scale + per["overhead_fwd_s"]
        bwd = per["layer_bwd_s"] * scale + per["overhead_bwd_s"]
        embed_f, embed_b = per.stage("embed_fwd_s", 0), per.stage("embed_bwd_s", 0)
        fwd[0] += embed_f
        bwd[0] += embed_b
        head_f, head_b = per.stage("head_fwd_s", pp - 1), per.stage("head_bwd_s", pp - 1)
        fwd[pp - 1] += head_f
        bwd[pp - 1] += head_b
        cpf = per["cp_fwd_exposed_s"] * scale
        cpb = per["cp_bwd_exposed_s"] * scale
        rings = ring_terms(per, spans, scale, cps, G, cost.cp_comm) if self.flows else (None,) * 4
        if plan.dynamic:
            self._dynamic_cp_costs(plan, table, fwd, bwd, lens)
        if self.settings.microbatch_overhead_s > 0:
            fwd += self.settings.microbatch_overhead_s
        self._vary(table, (fwd, cpf), (bwd, cpb), ((pp - 1, head_f, head_b), (0, embed_f, embed_b)), noise_cv, rng)
        xfer = self._transfers(table, local)
        tokens = np.zeros(G)
        tokens[:P] = np.bincount(pids, weights=lens, minlength=P) if P else 0.0
        return IterationWork(
            table=table, fwd_s=fwd, bwd_s=bwd, cp_fwd_s=cpf, cp_bwd_s=cpb, xfer_s=xfer, spans_network=spans,
            local_tokens=local, tokens=tokens, peak_memory_bytes=mem, fits_memory=mem <= cost.memory_limit_bytes,
            flops=cost.model.flops(lens if plan.counted_lengths is None else plan.counted_lengths),
            n_seqs=int(lens.size), batch_cost_calls=calls,
            head_fwd_s=head_f, head_bwd_s=head_b, vp=self.topo.vp, embed_fwd_s=embed_f, embed_bwd_s=embed_b,
            idle_memory_bytes=float(cost.peak_memory_bytes(np.zeros(1))[0]),
            p2p_network_alone_s=self._p2p_alone[0], p2p_nvlink_s=self._p2p_alone[1],
            cp_fwd_ring_s=rings[0], cp_bwd_ring_s=rings[1], cp_fwd_window_s=rings[2], cp_bwd_window_s=rings[3],
            host=self.host_ops(plan, table, cps),
            cp_recompute_ring=self.flows and cost.recompute == "full",
        )

    def exchange_s(self, n_samples: int, tokens: float) -> float:
        """Per-iteration scheduler communication of a dynamic plan before its first microbatch (seconds).

        ``async`` (PR #2959's launch script: plans in a background process from the sampler, each rank
        loads its own samples): one all-reduce of two int64 counters over the DP×CP group. ``sync`` (its
        in-loop path): an all-gather of the samples' lengths (4 B each) and an all-to-all moving each
        rank's share of the batch's tokens, 28 B a token (tokens, labels and positions int64, loss mask
        fp32), to the ranks the plan gives them.
        """
        mode = self.settings.dynamic_cp_exchange
        if mode == "none":
            return 0.0
        n, domains, factor = self.topo.stage_dp_group(0)
        prof = self.cost.profile

        def t(op: str, nbytes: float) -> float:
            return float(group_collective_time_s(prof, op, nbytes, n, domains=domains, network_scale=factor))

        out = t("all_reduce", 16.0)
        if mode == "sync":
            out += t("all_gather", 4.0 * n_samples) + t("all_to_all", 28.0 * tokens / max(n, 1))
        return out

    def _dynamic_cp_costs(self, plan: Plan, table: GroupTable, fwd: np.ndarray, bwd: np.ndarray,
                          lens: np.ndarray) -> None:
        """Megatron's run-time costs of dynamic CP, in place: the per-iteration exchange delays the first
        microbatch on the first stage; a group whose ranks ran another CP size in the previous microbatch
        pays ``cp_switch_s`` forward and backward on every stage."""
        x = self.exchange_s(int(lens.size), float(lens.sum()))
        if x > 0:
            first = np.unique(table.gid[0][table.gid[0] >= 0])
            fwd[0, first] += x
        if self.settings.cp_switch_s > 0 and table.n_steps > 1:
            sizes = np.where(table.gid >= 0, table.size[np.maximum(table.gid, 0)], 0)  # (steps, ranks)
            moved = (sizes[1:] != sizes[:-1]) & (sizes[1:] > 0) & (sizes[:-1] > 0)
            hit = np.zeros(table.n_groups, dtype=bool)
            g = table.gid[1:][moved]
            hit[g] = True
            fwd[:, hit] += self.settings.cp_switch_s
            bwd[:, hit] += self.settings.cp_switch_s

    def _layout_memo(self, kind: str, G: int, starts: np.ndarray, sizes: np.ndarray, make) -> tuple:
        """``make()`` for these groups' ranks (``starts``/``sizes``, ``G`` groups), once per layout (read-only): kept
        under a checksum of the arrays (their sums) with copies of them, an entry taken when they are equal."""
        key = (kind, G, starts.dtype.str, sizes.dtype.str, starts.shape, sizes.shape, int(starts.sum()), int(sizes.sum()))
        for s_, z_, hit in self._by_layout.get(key, ()):
            if np.array_equal(s_, starts) and np.array_equal(z_, sizes):
                return hit
        _read_only(hit := make())
        self._by_layout.clear() if len(self._by_layout) >= 256 else None
        self._by_layout.setdefault(key, []).append((starts.copy(), sizes.copy(), hit))
        return hit

    def _spans(self, table: GroupTable, starts: np.ndarray, cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each real group leaves its NVLink domain, its network factor), ``(PP, G)`` (read-only; one row
        broadcast when every stage is alike)."""
        topo, G, P = self.topo, table.n_groups, table.n_real

        def make() -> tuple[np.ndarray, np.ndarray]:
            alike, rows = {}, []  # stages alike for the topology and the network: computed once, same rows
            for p in range(topo.pp):
                key = self.network.stage_class(p)
                rows.append(p if key is None else alike.setdefault((topo.stage_class(p), key), p))
            n = 1 if set(rows) == {0} else topo.pp  # every stage alike: one row broadcast over the stages
            spans, factor = np.zeros((n, G), dtype=bool), np.ones((n, G))
            for p, q in enumerate(rows[:n]):
                spans[p, :P] = topo.group_spans_network(p, starts, cps) & (cps > 1) if q == p else spans[q, :P]
                factor[p, :P] = np.where(spans[p, :P], self.network.cp_factor(p, starts, cps), 1.0) if q == p else factor[q, :P]
            return np.broadcast_to(spans, (topo.pp, G)), np.broadcast_to(factor, (topo.pp, G))

        return self._layout_memo("spans", G, starts, cps, make)

    def _vary(self, table: GroupTable, fwd_parts, bwd_parts, extras, noise_cv: float,
              rng: np.random.Generator | None) -> None:
        """Stragglers (a group runs at its slowest member), then kernel noise, in place; ``extras``
        ``(stage, fwd part, bwd part)`` (the output layer on the last stage, the embedding on the first)
        scale with their stage's op."""
        pp, G = self.topo.pp, table.n_groups
        if self.faults is not None and self.faults.straggler_gpus.size:
            for p in range(pp):
                hit = slice_any(self._slow_rank[p], table.start, table.size)
                mult = np.where(hit, self.faults.straggler_slowdown, 1.0)
                for a in (*fwd_parts, *bwd_parts):
                    a[p] *= mult
                for q, ef, eb in extras:
                    if q == p:
                        ef *= mult
                        eb *= mult
        if noise_cv > 0:
            if rng is None:
                raise ValueError("noise_cv > 0 needs an rng")
            nz = lognormal_factors(noise_cv, (2, pp, G), rng)
            for a in fwd_parts:
                a *= nz[0]
            for a in bwd_parts:
                a *= nz[1]
            for q, ef, eb in extras:
                ef *= nz[0, q]
                eb *= nz[1, q]

    def _transfers(self, table: GroupTable, local: np.ndarray) -> np.ndarray:
        """Pipeline transfer time per link and group, ``(n_links, G)``: activations forward, their
        gradients backward (same bytes, same link); one read-only row broadcast when every link is alike."""
        topo, cost, G = self.topo, self.cost, table.n_groups
        xfer = np.zeros((topo.n_links, G))
        if topo.n_links == 0:
            self._p2p_alone = (np.zeros(G), np.zeros(G))
            return xfer
        prof = cost.profile
        nbytes = local * cost.model.hidden * 2.0 / cost.tp
        t_nvl = prof.collective_time_s("sendrecv", "nvlink", nbytes, 2)
        t_net = prof.collective_time_s("sendrecv", "network", nbytes, 2)
        links = self._layout_memo("p2p", G, table.start, table.size, lambda: self._link_groups(table))
        if all(x is links[0] for x in links):  # every link alike: one row, read-only, seen by every link
            xfer = np.broadcast_to(np.where(links[0][0], t_net / links[0][1], t_nvl), xfer.shape)
        for p, (g_cross, g_fac) in enumerate(links if xfer.flags.writeable else ()):
            q = next(q for q in range(p + 1) if links[q] is links[p])  # a link alike an earlier one: the same row
            xfer[p] = xfer[q] if q < p else np.where(g_cross, t_net / g_fac, t_nvl)
        self._p2p_alone = (np.asarray(t_net, dtype=float) / topo.network_scale + np.zeros(G),
                           np.asarray(t_nvl, dtype=float) + np.zeros(G))
        return xfer

    def _link_groups(self, table: GroupTable) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """Per pipeline link: whether each group's send crosses the network, and its network factor, ``(G,)``."""
        topo, G, out, alike = self.topo, table.n_groups, [], {}
        for p in range(topo.n_links):
            cross, fac = self._p2p[p]
            if (q := alike.setdefault((cross.tobytes(), fac.tobytes()), p)) != p:  # a link alike an earlier one
                out.append(out[q])
                continue
            g_cross = slice_any(cross, table.start, table.size)
            g_fac = np.full(G, float(topo.network_scale))
            for v in np.unique(fac[cross]):
                if v < topo.network_scale:
                    g_fac = np.where(slice_any(cross & (fac <= v), table.start, table.size), np.minimum(g_fac, v), g_fac)
            out.append((g_cross, g_fac))
        return tuple(out)


def _read_only(x) -> None:
    """Every array of ``x`` (an array, a tuple or dataclass of them) made read-only (kept in a memo)."""
    if isinstance(x, np.ndarray):
        x.setflags(write=False)
    for y in x if isinstance(x, tuple) else (getattr(x, f.name) for f in fields(x)) if is_dataclass(x) else ():
        _read_only(y)


def pass_shape(cost, vp: int, cps, n_seqs=None, first_step=None) -> PassShape:
    """What the host issues per group op of packs of CP sizes ``cps`` under ``cost`` (one cost model's kernel
    and NCCL-call counts; :class:`dcpsim.cost.host.PassShape`): the one place the simulator and the planning
    screen build it."""
    from dcpsim.cost.fixed import (
        KERNELS_BWD,
        KERNELS_CROSS_ENTROPY_UNFUSED,
        KERNELS_EMBED,
        KERNELS_FWD,
        KERNELS_HEAD,
    )

    cps = np.asarray(cps)
    kf, kb = cost.kernels_per_layer(cps)
    cf, cb = layer_collectives(cost.tp, cps, cost.cp_comm)
    head = np.asarray(KERNELS_HEAD, dtype=float)
    if cost.cross_entropy == "unfused":
        head = head + np.asarray(KERNELS_CROSS_ENTROPY_UNFUSED, dtype=float)
    return PassShape(stage_layers=cost.stage_layers, vp=int(vp), tp=cost.tp, kernels_fwd=kf, kernels_bwd=kb,
                     collectives_fwd=cf, collectives_bwd=cb, recompute=cost.recompute, n_seqs=n_seqs,
                     first_step=first_step, kernels_head=(float(head[0]), float(head[1])),
                     kernels_base=(float(KERNELS_FWD), float(KERNELS_BWD)),
                     dp_cp=int(getattr(cost, "dp_cp", 1)), cps=cps,
                     kernels_embed=(float(KERNELS_EMBED[0]), float(KERNELS_EMBED[1])))
