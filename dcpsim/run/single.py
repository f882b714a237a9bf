"""One run from one :class:`~dcpsim.run.config.RunConfig`: sample batches, plan, simulate, tabulate.

::

    from dcpsim.run import load_config
    from dcpsim.run.single import run_simulation

    res = run_simulation(load_config("experiments/simulate_default.toml"), trace_path="trace.json")
    print(res.summary["tflops_per_gpu"], res.summary["iteration_time_s"])
    res.write("out/")        # iterations.parquet, ranks.parquet, config.json, summary.json

Random streams. ``sim.seed`` seeds a :class:`numpy.random.SeedSequence`
spawned into four independent streams: the global batches (one fresh batch
per iteration), the policy, the kernel noise, and the faults (straggler GPUs
and the degraded link, drawn once per run). With noise and faults off the
seed only changes the sampled batches (and whatever the policy randomises).

Policies without steps. A policy that returns a plan without microbatch
steps but with ``lower_bound_s`` (the ``bound`` policy) is not simulated: its
iteration row reports ``iteration_time_s = lower_bound_s`` and throughput from
it with the FLOPs of the whole batch (the bound lists every sequence as
"dropped" only because it schedules none), ``simulated = False``, NaN
breakdown, and no per-rank rows. The bound covers the pipeline, not the
gradient synchronisation. A plan with
neither raises :class:`~dcpsim.errors.ConfigError` naming ``policy.name``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.cost import CostModel, CostSettings
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.hardware import get_profile
from dcpsim.model import get_model
from dcpsim.model.accounting import throughput
from dcpsim.pipeline import activations_in_flight
from dcpsim.policies.plan import Layout, Plan, cp_histogram_of
from dcpsim.run.config import RunConfig
from dcpsim.run.given import batch_lengths, check_given
from dcpsim.run.reuse import reused, run_key, simulator_part
from dcpsim.run.streams import NAMES, Streams, stream
from dcpsim.sim import (
    BREAKDOWN,
    ClusterSimulator,
    IterationRecord,
    SimResult,
    SimSettings,
    Topology,
    iteration_row,
    rank_arrays,
    rank_rows,
    sample_faults,
)
from dcpsim.sim.metrics import IterationColumns


def cost_settings(cfg: RunConfig, *, dp_cp: int | None = None, profile=None) -> CostSettings:
    """The cost-model settings of ``cfg``: the one place a configuration becomes :class:`CostSettings`
    (``dp_cp`` overrides DP×CP, the optimizer sharding; ``profile``: ``get_profile(cfg.hardware.gpu)`` already
    resolved)."""
    p = cfg.parallel
    return CostSettings(
        get_profile(cfg.hardware.gpu) if profile is None else profile, get_model(cfg.model.name), tp=p.tp, pp=p.pp,
        dp_cp=cfg.dp * p.cp if dp_cp is None else dp_cp, cp_comm=p.cp_comm, recompute=p.recompute,
        precision=p.precision, tp_comm_overlap=cfg.sim.tp_comm_overlap, first_stage_layers=p.first_stage_layers,
        last_stage_layers=p.last_stage_layers, attention=p.attention, cross_entropy=p.cross_entropy,
        microbatches_in_flight=activations_in_flight(p.pp, p.vp) if p.vp > 1 else None,
        grad_bytes_per_param=cfg.sim.grad_reduce_bytes_per_param, deterministic_fill=bool(cfg.step.deterministic),
        rope_fusion=p.rope_fusion, transformer_impl=cfg.step.transformer_impl, test_mode_qk_checks=cfg.step.test_mode_qk_checks,
        attention_mask=cfg.step.attention_mask_in_dataloader and cfg.is_fixed)


def build_cost_model(cfg: RunConfig, *, dp_cp: int | None = None, profile=None) -> CostModel:
    """The cost model of ``cfg`` (:func:`cost_settings`); refuses a ``parallel.vp`` that does not divide every
    stage's layers."""
    cost = CostModel(cost_settings(cfg, dp_cp=dp_cp, profile=profile))
    check_vp_layers(cfg.parallel.vp, cost.stage_layers)
    return cost


def sim_settings(cfg: RunConfig) -> SimSettings:
    """The simulator settings of ``cfg``: every :class:`SimSettings` field read by name from ``cfg.sim``."""
    return SimSettings(**{f.name: getattr(cfg.sim, f.name) for f in fields(SimSettings)})


def check_vp_layers(vp: int, stage_layers) -> None:
    """Refuse ``parallel.vp`` unless it divides every pipeline stage's layer count (each of a rank's ``vp`` model
    chunks holds the same whole number of layers: Megatron's interleaved schedule, and how the simulator splits
    a stage's time)."""
    if vp <= 1:
        return
    counts = [int(n) for n in stage_layers]
    bad = sorted({n for n in counts if n % vp})
    if bad:
        where = f"{counts[0]} layers per stage" if len(set(counts)) == 1 else f"stages of {counts} layers"
        raise ConfigError("parallel.vp", vp, f"a divisor of every pipeline stage's layer count ({where}; "
                          f"{bad[0]} is not a multiple of {vp})")


def nvlink_domain(cfg: RunConfig, cost: CostModel) -> int:
    """GPUs per NVLink domain: the config's, or the hardware profile's when it says ``"profile"``."""
    n = cfg.hardware.nvlink_domain_gpus
    return cost.profile.nvlink_domain_gpus if n == "profile" else n


def pod_gpus(cfg: RunConfig) -> int:
    """GPUs per full-bandwidth pod as the topology takes it (0: one flat fabric)."""
    n = cfg.hardware.pod_gpus
    return 0 if n == "flat" else n


def build_layout(cfg: RunConfig, cost: CostModel) -> Layout:
    p = cfg.parallel
    return Layout(dp=cfg.dp, cp=p.cp, max_tokens_per_rank=cfg.max_tokens_per_rank, tp=p.tp, pp=p.pp,
                  min_cp=p.min_cp, gpus_per_domain=nvlink_domain(cfg, cost), vp=p.vp)


def build_simulator(cfg: RunConfig, cost: CostModel | None = None,
                    fault_rng: np.random.Generator | None = None) -> ClusterSimulator:
    """The cluster simulator of ``cfg`` (faults drawn from ``fault_rng``; default: the run's fault stream)."""
    cost = cost or build_cost_model(cfg)
    topo, faults, settings, host = _simulator_parts(cfg, cost, fault_rng)
    return ClusterSimulator(cost, topo, faults=faults, settings=settings, host_flags=host)


def build_sync_cost(cfg: RunConfig, cost: CostModel):
    """``build_simulator(cfg, cost).sync`` (:class:`~dcpsim.sim.durations.SyncCost`) without the rest of the
    simulator: the same topology, faults, settings and host flags, the same checks (the planner's screen prices
    the gradient sync of thousands of layouts)."""
    from dcpsim.sim.durations import DurationModel
    from dcpsim.sim.simulator import check_topology

    topo, faults, settings, host = _simulator_parts(cfg, cost, None)
    check_topology(cost, topo)
    return DurationModel(cost, topo, faults=faults, settings=settings, host_flags=host).sync_cost()


def _simulator_parts(cfg: RunConfig, cost: CostModel, fault_rng: np.random.Generator | None):
    """(topology, faults, simulator settings, host flags): what :func:`build_simulator` gives the simulator."""
    s, h, p = cfg.sim, cfg.hardware, cfg.parallel
    faults = sample_faults(cfg.cluster.gpus, straggler_fraction=s.straggler_fraction,
                           straggler_slowdown=s.straggler_slowdown, degraded_link_scale=s.degraded_link_scale,
                           rng=_fault_stream(s.seed) if fault_rng is None else fault_rng)
    topo = Topology(tp=p.tp, pp=p.pp, dp=cfg.dp, cp=p.cp, gpus_per_node=cost.profile.gpus_per_node,
                    nvlink_domain_gpus=nvlink_domain(cfg, cost), pod_gpus=pod_gpus(cfg), oversubscription=h.oversubscription,
                    network_scale=h.network_scale, degraded_gpu=faults.degraded_gpu,
                    degraded_link_scale=s.degraded_link_scale, vp=p.vp)
    from dcpsim.cost.host import StepFlags

    host = StepFlags.from_settings(cfg.step, packed=not cfg.is_fixed) if cfg.sim.host_timeline else None
    return topo, faults, sim_settings(cfg), host


def _streams(seed: int) -> dict[str, np.random.Generator]:
    return Streams(seed)  # dcpsim.run.streams: each stream made when first read


def _fault_stream(seed: int) -> np.random.Generator:
    return stream(seed, NAMES.index("faults"))  # _streams(seed)["faults"] alone


def _get_policy(cfg: RunConfig):
    try:
        from dcpsim.policies import get_policy
    except ImportError:
        raise ConfigError("policy.name", cfg.policy.name, "a registered policy (dcpsim.policies has no registry yet)") from None
    return get_policy(cfg.policy.name, **dict(cfg.policy.options))


def plan_batch(policy, lengths: np.ndarray, layout: Layout, cost: CostModel, rng, cfg: RunConfig) -> Plan:
    """Plan one batch; with ``sim.dynamic_cp_padding`` a dynamic policy plans (and the simulator times) the
    samples padded as Megatron's dynamic-CP data path pads them, while FLOPs stay those of the real lengths."""
    if not (cfg.sim.dynamic_cp_padding and policy.dynamic):
        return policy.plan(lengths, layout, cost, rng=rng)
    from dcpsim.padding import padded_lengths

    tp = cfg.parallel.tp
    padded = padded_lengths(lengths, layout.ranks_per_stage, tp if tp > 1 else 1)
    plan = policy.plan(padded, layout, cost, rng=rng)
    plan.counted_lengths = np.asarray(lengths, dtype=np.int64)
    return plan


def _workload_name(cfg: RunConfig) -> str:
    return cfg.workload.name if isinstance(cfg.workload.name, str) else "custom"


@dataclass
class _Run:
    """What the phases of :func:`run_simulation` share (built by :func:`_prepare`)."""

    cfg: RunConfig
    cost: CostModel
    layout: Layout
    streams: dict[str, np.random.Generator]
    sim: ClusterSimulator
    n_iter: int
    plans: Sequence[Plan] | None = None
    batches: Sequence[np.ndarray] | None = None
    policy: Any = None
    dist: Any = None
    fixed: Any = None


@dataclass
class _Loop:
    """Per-iteration outputs of :func:`_iterate`."""

    rows: list[dict] = field(default_factory=list)
    rank_cols: list[tuple[IterationRecord, dict[str, np.ndarray]]] = field(default_factory=list)  # (record, rank_arrays)
    tp: int = 1
    records: list[IterationRecord] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    cp_hist: dict[int, int] = field(default_factory=dict)
    planning_wall_s: float = 0.0


def run_simulation(cfg: RunConfig, *, trace_path: str | Path | None = None,
                   batches: Sequence[np.ndarray] | None = None, plans: Sequence[Plan] | None = None,
                   trace_max_tracks: int = 64, allow_infeasible: bool = False, config_hash: str | None = None) -> SimResult:
    """Simulate ``cfg.sim.iterations`` iterations of ``cfg`` and return tables and a summary.

    ``batches`` (one array of lengths per iteration) replaces sampling from
    the workload; ``plans`` replaces the policy too (hand-built plans, tests).
    ``trace_path`` writes a Chrome/Perfetto trace of the simulated timeline.

    Memory. A configuration whose model states, or any simulated pack, need
    more than the usable HBM (``CostModel.memory_limit_bytes``) is
    infeasible: :class:`~dcpsim.errors.InfeasibleError` (``kind = "memory"``,
    the figures in the message) instead of a throughput. Model states are
    checked before any work. ``allow_infeasible=True`` (diagnostics, e.g.
    comparing with a published run that did fit) returns the result with
    ``summary["status"] = "infeasible"`` and the reason instead of raising.
    ``config_hash``: ``cfg.config_hash()`` when the caller has it already (a sweep's run id).
    The resolved configuration (``SimResult.config``) is built on first use.
    """
    t_run = time.perf_counter()
    check_given(cfg, batches, plans, trace_max_tracks=trace_max_tracks, config_hash=config_hash)
    run = _prepare(cfg, batches, plans)
    states = _model_states_verdict(run.cost)
    if states and not allow_infeasible:
        raise InfeasibleError("memory", states)
    loop = _iterate(run)
    iterations = IterationColumns(loop.rows)  # the summary's figures; the DataFrames are built if asked for
    trace_file = None
    if trace_path is not None:
        from dcpsim.sim.trace import write_chrome_trace

        trace_file = str(write_chrome_trace(loop.records, trace_path, run.sim.topology, max_tracks=trace_max_tracks))
    config_hash = config_hash or cfg.config_hash()
    summary = _summary(cfg, iterations, loop.cp_hist, cfg.cluster.gpus, run.cost.profile.peak_bf16_flops,
                       config_hash=config_hash)
    reason = states or _packs_verdict(run.cost, summary, fixed=cfg.is_fixed)
    if reason and not allow_infeasible:
        raise InfeasibleError("memory", reason)
    summary["status"], summary["reason"] = ("infeasible", f"memory: {reason}") if reason else ("ok", "")
    meta = _meta(run, iterations, loop, trace_file, time.perf_counter() - t_run)
    summary.update({k: meta[k] for k in ("events", "events_per_s", "sim_wall_s", "planning_wall_s", "wall_s")})
    summary.update(_long_run(cfg, run.sim, loop.plans, loop.records, iterations))
    return SimResult(summary=summary, iterations=functools.partial(_iterations_frame, loop),
                     ranks=functools.partial(_ranks_frame, loop), config=cfg.resolved,
                     config_hash=config_hash, meta=meta, records=loop.records, plans=loop.plans,
                     iteration_rows=loop.rows)


def _prepare(cfg: RunConfig, batches, plans) -> _Run:
    """Cost model, layout, random streams, simulator, and the source of plans (policy + workload)."""
    key = run_key(cfg)  # inside a sweep task (dcpsim.run.reuse): the parts earlier runs built are reused
    cost, layout = reused(key, "cost", lambda: (c := build_cost_model(cfg), build_layout(cfg, c)))
    streams = _streams(cfg.sim.seed)
    sim = reused(key, simulator_part(cfg), lambda: build_simulator(cfg, cost, streams["faults"]))
    run = _Run(cfg, cost, layout, streams, sim, cfg.sim.iterations if plans is None else len(plans), plans, batches)
    if plans is not None:
        return run
    run.policy = _get_policy(cfg)
    if batches is None and cfg.is_fixed:
        run.fixed = _fixed_workload(cfg)
    elif batches is None:
        from dcpsim.workload import get_workload

        w = cfg.workload
        run.dist = get_workload(w.name, min_len=w.min_len, max_len=w.max_len, clip=w.clip)
    elif len(batches) < run.n_iter:
        raise ConfigError("batches", len(batches), f"one array of lengths per iteration ({run.n_iter})")
    return run


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _capacity(cost: CostModel) -> str:
    return f"{_gib(cost.memory_limit_bytes)} usable of the {_gib(cost.profile.hbm_bytes)} HBM of {cost.profile.name}"


def microbatch_sum_sq(cfg: RunConfig) -> float:
    """Σ L² of a full microbatch (unfused attention's score memory): ``mbs`` whole windows of a fixed workload,
    else the worst case of ``max_tokens_per_rank`` tokens, one document filling them."""
    if cfg.is_fixed:
        return float(cfg.parallel.mbs) * float(cfg.workload.seq_len) ** 2
    return float(cfg.max_tokens_per_rank) ** 2


def check_memory(cfg: RunConfig, *, full_microbatch: bool = False) -> None:
    """Raise :class:`InfeasibleError` (memory) if the model states do not fit, or (``full_microbatch``)
    one microbatch of ``max_tokens_per_rank`` tokens per rank does not: checks that need no simulation."""
    cost = build_cost_model(cfg)
    why = _model_states_verdict(cost)
    M = cfg.max_tokens_per_rank
    peak = float(cost.peak_memory_bytes([M], [microbatch_sum_sq(cfg)])[0])
    if not why and full_microbatch and peak > cost.memory_limit_bytes:
        why = (f"a full microbatch (parallel.max_tokens_per_rank = {M} tokens per rank) peaks at {_gib(peak)} "
               f"per GPU > {_capacity(cost)}")
    if why:
        raise InfeasibleError("memory", why)


def _model_states_verdict(cost: CostModel) -> str:
    """Why the model states alone (weights, gradients, optimizer) do not fit; '' when they do."""
    states = float(cost.peak_memory_bytes([0])[0])
    if states <= cost.memory_limit_bytes:
        return ""
    return (f"model states need {_gib(states)} per GPU > {_capacity(cost)} "
            f"(tp={cost.tp}, pp={cost.pp}, dp*cp={cost.dp_cp}; shard more: larger tp/pp/dp)")


def _packs_verdict(cost: CostModel, summary: dict, *, fixed: bool = False) -> str:
    """Why some simulated pack does not fit in memory ('' when every one does); ``fixed``: windows, no M."""
    over = int(summary.get("packs_over_memory") or 0)
    if not over:
        return ""
    peak, lower = float(summary.get("peak_memory_gib") or float("nan")) * 2**30, "workload.seq_len or parallel.mbs"
    return (f"peak {_gib(peak)} per GPU > {_capacity(cost)} ({over} microbatch pack(s) over; "
            f"lower {lower if fixed else 'parallel.max_tokens_per_rank'} or raise cp/pp)")


def _next_plan(run: _Run, i: int) -> tuple[Plan, float]:
    """The plan of iteration ``i`` and the host seconds spent making it (host info only)."""
    if run.plans is not None:
        return run.plans[i], 0.0
    if run.fixed is not None and run.fixed.per_document:
        t0 = time.perf_counter()
        plan = _window_plan(run.cfg, run.fixed, run.layout, run.streams["workload"])
        return plan, time.perf_counter() - t0
    lengths = batch_lengths(run.cfg, i, run.batches, run.dist, run.fixed, run.streams["workload"])
    t0 = time.perf_counter()
    plan = plan_batch(run.policy, lengths, run.layout, run.cost, run.streams["policy"], run.cfg)
    return plan, time.perf_counter() - t0


def _iterate(run: _Run) -> _Loop:
    """Plan and simulate every iteration; the clock carries over (offset, previous iteration time).

    With ``sim.planning = "sampler"`` the forked sampler looks ahead (:mod:`dcpsim.sim.sampler`): batches
    after the last simulated one are planned too (their microbatch counts and planning times only; with
    given batches or plans the look-ahead cycles through them)."""
    cfg, gpus, peak = run.cfg, run.cfg.cluster.gpus, run.cost.profile.peak_bf16_flops
    loop = _Loop(tp=cfg.parallel.tp)
    offset = 0.0
    prev: float | None = None
    made: list[Plan] = []

    def plan_of(j: int) -> Plan:
        while len(made) <= j:
            k = len(made)
            if k >= run.n_iter and (run.plans is not None or run.batches is not None):
                made.append(made[k % run.n_iter])
                continue
            p, wall = _next_plan(run, k)
            loop.planning_wall_s += wall
            made.append(p)
        return made[j]

    sampler = None
    if cfg.sim.planning == "sampler":
        from dcpsim.sim.sampler import PrefetchSampler

        sampler = PrefetchSampler(cfg.sim.sampler_prefetch,
                                  lambda j: (plan_of(j).n_steps, plan_of(j).planning_time_s))
    for i in range(run.n_iter):
        plan = plan_of(i)
        loop.plans.append(plan)
        if not plan.steps:
            _add_hist(loop.cp_hist, plan.cp_histogram())
            row = _bound_row(plan, i, run.cost, gpus, peak)
        else:
            stall = sampler.stall(i, offset) if sampler is not None else None
            # policies validate their plans (Policy.plan); hand-made plans are checked here
            rec = run.sim.simulate(plan, index=i, offset_s=offset, previous_iteration_s=prev,
                                   rng=run.streams["noise"] if cfg.sim.noise_cv > 0 else None,  # drawn from only with noise
                                   validate=run.plans is not None, planning_stall_s=stall)
            _add_hist(loop.cp_hist, cp_histogram_of(rec.work.table.size, rec.work.table.n_seqs))  # the plan's groups
            ranks = rank_arrays(rec)
            row = iteration_row(rec, gpus, peak, ranks)
            row["simulated"] = True
            loop.rank_cols.append((rec, ranks))  # the per-rank table's columns are built only if it is asked for
            loop.records.append(rec)
        loop.rows.append(row)
        offset += row["iteration_time_s"]
        prev = row["iteration_time_s"]
    return loop


def _add_hist(total: dict[int, int], hist: dict[int, int]) -> None:
    """Add one plan's sequences per CP size to the run's."""
    for c, n in hist.items():
        total[int(c)] = total.get(int(c), 0) + int(n)


def _iterations_frame(loop: _Loop):
    """The iterations DataFrame of the loop's rows."""
    import pandas as pd

    return pd.DataFrame(loop.rows)


def _ranks_frame(loop: _Loop):
    """The ranks DataFrame of the loop's per-rank columns."""
    import pandas as pd

    if loop.rank_cols:
        cols = [rank_rows(rec, loop.tp, ranks) for rec, ranks in loop.rank_cols]
        return pd.DataFrame({k: np.concatenate([c[k] for c in cols]) for k in cols[0]})
    return pd.DataFrame(columns=["iteration", "stage", "stage_rank"])


def _meta(run: _Run, iterations: IterationColumns, loop: _Loop, trace_file: str | None, wall: float) -> dict:
    """Host information (wall clock, event rate: never part of a simulated time) and the run's context."""
    sim_wall = float(iterations.sum("sim_wall_s")) if "sim_wall_s" in iterations else 0.0
    events = int(iterations.sum("events")) if "events" in iterations else 0
    faults = run.sim.durations.faults
    return {
        "events": events,
        "events_per_s": events / sim_wall if sim_wall > 0 else None,
        "sim_wall_s": sim_wall,
        "planning_wall_s": loop.planning_wall_s,
        "wall_s": wall,
        "trace": trace_file,
        "topology": run.sim.topology.describe(),
        "cost_model": run.cost.describe(),
        "faults": {"straggler_gpus": [int(g) for g in faults.straggler_gpus], "degraded_gpu": faults.degraded_gpu},
        "dcpsim_version": _version(),
    }


def _long_run(cfg: RunConfig, sim, plans: list[Plan], records: list, iterations) -> dict:
    """Goodput over ``sim.long_run_hours`` of training (dcpsim.sim.longrun), the simulated iterations cycled;
    nothing when the mode is off or no iteration was simulated."""
    from dcpsim.sim.longrun import long_run_summary

    s = cfg.sim
    if s.long_run_hours <= 0 or not records:
        return {}
    lr = measured_long_run(cfg, s.long_run_hours, sim=sim, plan=next(p for p in plans if p.steps))
    out = long_run_summary(iterations.col("iteration_time_s"), cfg.cluster.gpus, lr, s.long_run_seeds, s.seed)
    out.update({"slow_gpu_ratio": lr.slow_gpu.ratio, "degraded_link_ratio": lr.degraded_link.ratio})
    return out


def measured_long_run(cfg: RunConfig, hours: float, *, plan: Plan, sim=None):
    """The :class:`~dcpsim.sim.longrun.LongRun` of ``cfg``'s failure fields over ``hours``, its slow-GPU and
    degraded-link ratios measured with the simulator on ``plan`` (only for the episode kinds that are on;
    ``sim``: the run's simulator, default built from ``cfg``)."""
    from dcpsim.sim.longrun import long_run_from_settings, slowdown_ratios

    s = cfg.sim
    if s.slow_gpu_per_day > 0 or s.degraded_link_per_day > 0:
        sim = sim if sim is not None else build_simulator(cfg)
        slow, link = slowdown_ratios(sim, plan,
                                     slow_gpu_slowdown=s.slow_gpu_slowdown if s.slow_gpu_per_day > 0 else 1.0,
                                     degraded_link_scale=s.degraded_link_episode_scale if s.degraded_link_per_day > 0
                                     else 1.0)
    else:
        slow, link = 1.0, 1.0
    return long_run_from_settings(s, hours, slow, link)


def _fixed_workload(cfg: RunConfig):
    """The fixed-length workload of ``cfg``; per-document windows need the ``packing`` policy."""
    from dcpsim.workload.fixed import fixed_from_config

    fixed = fixed_from_config(cfg.workload)
    if fixed.per_document and cfg.policy.name != "packing":
        raise ConfigError("policy.name", cfg.policy.name, "'packing' with per-document fixed windows "
                          "(workload.documents): a microbatch is mbs whole windows")
    return fixed


def sample_batches(cfg: RunConfig, n: int | None = None) -> list[np.ndarray]:
    """The first ``n`` (default ``sim.iterations``) global batches :func:`run_simulation` draws for ``cfg``: the
    same workload stream (``sim.seed``), the same code, in order, so a caller that simulates them with
    ``run_simulation(cfg, batches=...)`` gets what ``run_simulation(cfg)`` gets (``dcpsim export`` does).
    Per-document fixed windows are drawn with their documents inside the simulation: ConfigError."""
    n = cfg.sim.iterations if n is None else n
    rng = _streams(cfg.sim.seed)["workload"]
    dist = fixed = None
    if cfg.is_fixed:
        fixed = _fixed_workload(cfg)
        if fixed.per_document:
            raise ConfigError("workload.documents", cfg.workload.documents,
                              "unset to sample bare windows (per-document windows are drawn by the simulation)")
    else:
        from dcpsim.workload import get_workload

        w = cfg.workload
        dist = get_workload(w.name, min_len=w.min_len, max_len=w.max_len, clip=w.clip)
    return [batch_lengths(cfg, i, None, dist, fixed, rng) for i in range(n)]


def _window_plan(cfg: RunConfig, fixed, layout: Layout, rng: np.random.Generator) -> Plan:
    """Per-document fixed windows: ``mbs`` whole windows per microbatch (static packing of windows)."""
    from dcpsim.policies.static import window_plan

    lengths, windows = fixed.sample_windows(cfg.workload.gbs, rng)
    return window_plan(lengths, windows, cfg.parallel.mbs, layout)


def _bound_row(plan: Plan, i: int, cost: CostModel, gpus: int, peak: float) -> dict:
    if plan.lower_bound_s is None:
        raise ConfigError("policy.name", plan.policy, "a policy whose plans have microbatch steps or a lower bound")
    T = float(plan.lower_bound_s)
    lens = np.asarray(plan.lengths, dtype=np.int64)  # the bound covers the whole batch (it schedules nothing)
    flops = cost.model.flops(lens)
    row = {"iteration": i, "policy": plan.policy, "iteration_time_s": T, "sim_time_s": float("nan"),
           **throughput(flops, float(lens.sum()), T, gpus, peak), "flops": flops, "tokens": int(lens.sum()), "sequences": int(lens.size),
           "dropped": 0, "steps": 0, "planning_time_s": float(plan.planning_time_s),
           "events": 0, "sim_wall_s": 0.0, "simulated": False}
    for k in BREAKDOWN:
        row[k] = float("nan")
        row["frac_" + k.removesuffix("_s")] = float("nan")
    return row


def _summary(cfg: RunConfig, it: IterationColumns, cp_hist: dict[int, int], gpus: int, peak: float,
             config_hash: str | None = None) -> dict:
    p = cfg.parallel
    n = len(it)
    T = float(it.sum("iteration_time_s"))
    flops = float(it.sum("flops"))
    out = {
        "config_hash": config_hash or cfg.config_hash(),
        "policy": cfg.policy.name if not n else str(it.rows[0]["policy"]),
        "workload": _workload_name(cfg),
        "model": cfg.model.name if isinstance(cfg.model.name, str) else str(cfg.model.name.get("name", "custom")),
        "gpu": cfg.hardware.gpu,
        "gpus": gpus,
        "tp": p.tp,
        "pp": p.pp,
        "cp": p.cp,
        "dp": cfg.dp,
        "gbs": cfg.workload.gbs,
        "max_tokens_per_rank": cfg.max_tokens_per_rank,
        "iterations": int(n),
        "seed": cfg.sim.seed,
        "network": cfg.sim.network,
        "simulated": bool(it.col("simulated").all()) if n else False,
        "iteration_time_s": T / max(n, 1),
        **throughput(flops, float(it.sum("tokens")), T, gpus, peak),
    }
    for k in BREAKDOWN:
        s = float(it.sum(k, skipna=False))  # NaN for runs that were not simulated (bound)
        out[k] = s / max(n, 1)
        out["frac_" + k.removesuffix("_s")] = s / T if T > 0 else float("nan")
    for k in ("steps", "groups", "mean_cp"):
        if k in it:
            out[k] = float(it.mean(k))
    for k, agg in (("max_cp", "max"), ("peak_memory_gib", "max"), ("packs_over_memory", "sum"), ("dropped", "sum"),
                   ("sequences", "sum"), ("planning_time_s", "mean")):
        if k in it:
            v = getattr(it, agg)(k)
            out[k] = v.item() if hasattr(v, "item") else v
    out["cp_hist"] = {int(k): int(v) for k, v in sorted(cp_hist.items())}
    return out


@functools.lru_cache(maxsize=1)  # the installed version cannot change while running (5 ms a look-up)
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dcpsim")
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"
