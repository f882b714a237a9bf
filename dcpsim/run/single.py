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

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dcpsim.cost import CostModel
from dcpsim.errors import ConfigError
from dcpsim.model.accounting import throughput
from dcpsim.policies.plan import Layout, Plan
from dcpsim.run.config import RunConfig
from dcpsim.sim import (
    BREAKDOWN,
    ClusterSimulator,
    IterationRecord,
    SimOptions,
    SimResult,
    Topology,
    iteration_row,
    rank_arrays,
    rank_rows,
    sample_faults,
)


def build_cost_model(cfg: RunConfig) -> CostModel:
    p = cfg.parallel
    return CostModel(cfg.hardware.gpu, cfg.model.name, tp=p.tp, pp=p.pp, dp_cp=cfg.dp * p.cp,
                     cp_comm=p.cp_comm, recompute=p.recompute, precision=p.precision,
                     tp_comm_overlap=cfg.sim.tp_comm_overlap, first_stage_layers=p.first_stage_layers,
                     last_stage_layers=p.last_stage_layers, attention=p.attention)


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
    s, h, p = cfg.sim, cfg.hardware, cfg.parallel
    if fault_rng is None:
        fault_rng = _streams(s.seed)["faults"]
    faults = sample_faults(cfg.cluster.gpus, straggler_fraction=s.straggler_fraction,
                           straggler_slowdown=s.straggler_slowdown, degraded_link_scale=s.degraded_link_scale,
                           rng=fault_rng)
    topo = Topology(tp=p.tp, pp=p.pp, dp=cfg.dp, cp=p.cp, gpus_per_node=cost.profile.gpus_per_node,
                    nvlink_domain_gpus=nvlink_domain(cfg, cost), pod_gpus=pod_gpus(cfg), oversubscription=h.oversubscription,
                    network_scale=h.network_scale, degraded_gpu=faults.degraded_gpu,
                    degraded_link_scale=s.degraded_link_scale, vp=p.vp)
    opts = SimOptions(overlap_grad_sync=s.overlap_grad_sync, noise_cv=s.noise_cv, planning=s.planning,
                      grad_reduce_bytes_per_param=s.grad_reduce_bytes_per_param,
                      overlap_param_gather=s.overlap_param_gather, grad_bucket_params=s.grad_bucket_params, engine=s.engine,
                      dynamic_cp_exchange=s.dynamic_cp_exchange, cp_switch_s=s.cp_switch_s,
                      microbatch_overhead_s=s.microbatch_overhead_s)
    return ClusterSimulator(cost, topo, faults=faults, options=opts)


def _streams(seed: int) -> dict[str, np.random.Generator]:
    names = ("workload", "policy", "noise", "faults")
    return {n: np.random.default_rng(s) for n, s in zip(names, np.random.SeedSequence(seed).spawn(len(names)), strict=True)}


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
    from dcpsim.cost.padding import padded_lengths

    tp = cfg.parallel.tp
    padded = padded_lengths(lengths, layout.ranks_per_stage, tp if tp > 1 else 1)
    plan = policy.plan(padded, layout, cost, rng=rng)
    plan.counted_lengths = np.asarray(lengths, dtype=np.int64)
    return plan


def _workload_name(cfg: RunConfig) -> str:
    w = cfg.workload.name
    return w if isinstance(w, str) else "custom"


def run_simulation(cfg: RunConfig, *, trace_path: str | Path | None = None,
                   batches: Sequence[np.ndarray] | None = None, plans: Sequence[Plan] | None = None,
                   trace_max_tracks: int = 64) -> SimResult:
    """Simulate ``cfg.sim.iterations`` iterations of ``cfg`` and return tables and a summary.

    ``batches`` (one array of lengths per iteration) replaces sampling from
    the workload; ``plans`` replaces the policy too (hand-built plans, tests).
    ``trace_path`` writes a Chrome/Perfetto trace of the simulated timeline.
    """
    import pandas as pd

    t_run = time.perf_counter()
    cost = build_cost_model(cfg)
    layout = build_layout(cfg, cost)
    streams = _streams(cfg.sim.seed)
    sim = build_simulator(cfg, cost, streams["faults"])
    n_iter = len(plans) if plans is not None else cfg.sim.iterations
    policy = None
    dist = None
    fixed = None
    if plans is None:
        policy = _get_policy(cfg)
        if batches is None and cfg.is_fixed:
            fixed = _fixed_workload(cfg)
        elif batches is None:
            from dcpsim.workload import get_workload

            w = cfg.workload
            dist = get_workload(w.name, min_len=w.min_len, max_len=w.max_len, clip=w.clip)
        elif len(batches) < n_iter:
            raise ConfigError("batches", len(batches), f"one array of lengths per iteration ({n_iter})")

    gpus = cfg.cluster.gpus
    peak = cost.profile.peak_bf16_flops
    records: list[IterationRecord] = []
    used_plans: list[Plan] = []
    rows: list[dict] = []
    rank_cols: list[dict[str, np.ndarray]] = []
    cp_hist: dict[int, int] = {}
    offset = 0.0
    prev: float | None = None
    planning_wall = 0.0
    for i in range(n_iter):
        if plans is not None:
            plan = plans[i]
        else:
            t0 = time.perf_counter()
            if fixed is not None and fixed.per_document:
                plan = _window_plan(cfg, fixed, layout, streams["workload"])
            else:
                lengths = _batch_lengths(cfg, i, batches, dist, fixed, streams["workload"])
                t0 = time.perf_counter()
                plan = plan_batch(policy, lengths, layout, cost, streams["policy"], cfg)
            planning_wall += time.perf_counter() - t0
        used_plans.append(plan)
        for c, n in plan.cp_histogram().items():
            cp_hist[int(c)] = cp_hist.get(int(c), 0) + int(n)
        if not plan.steps:
            row = _bound_row(plan, i, cost, gpus, peak)
            rows.append(row)
            offset += row["iteration_time_s"]
            prev = row["iteration_time_s"]
            continue
        # policies validate their plans (Policy.plan); hand-made plans are checked here
        rec = sim.simulate(plan, index=i, offset_s=offset, previous_iteration_s=prev, rng=streams["noise"],
                           validate=plans is not None)
        ranks = rank_arrays(rec)
        row = iteration_row(rec, gpus, peak, ranks)
        row["simulated"] = True
        rows.append(row)
        rank_cols.append(rank_rows(rec, cfg.parallel.tp, ranks))
        records.append(rec)
        offset += rec.iteration_time_s
        prev = rec.iteration_time_s

    iterations = pd.DataFrame(rows)
    if rank_cols:
        ranks_df = pd.DataFrame({k: np.concatenate([c[k] for c in rank_cols]) for k in rank_cols[0]})
    else:
        ranks_df = pd.DataFrame(columns=["iteration", "stage", "stage_rank"])
    trace_file = None
    if trace_path is not None:
        from dcpsim.sim.trace import write_chrome_trace

        trace_file = str(write_chrome_trace(records, trace_path, sim.topology, max_tracks=trace_max_tracks))
    wall = time.perf_counter() - t_run
    summary = _summary(cfg, iterations, cp_hist, gpus, peak)
    sim_wall = float(iterations["sim_wall_s"].sum()) if "sim_wall_s" in iterations else 0.0
    events = int(iterations["events"].sum()) if "events" in iterations else 0
    meta = {
        "events": events,
        "events_per_s": events / sim_wall if sim_wall > 0 else None,
        "sim_wall_s": sim_wall,
        "planning_wall_s": planning_wall,
        "wall_s": wall,
        "trace": trace_file,
        "topology": sim.topology.describe(),
        "cost_model": cost.describe(),
        "faults": {"straggler_gpus": [int(g) for g in sim.durations.faults.straggler_gpus],
                   "degraded_gpu": sim.durations.faults.degraded_gpu},
        "dcpsim_version": _version(),
    }
    summary.update({k: meta[k] for k in ("events", "events_per_s", "sim_wall_s", "planning_wall_s", "wall_s")})
    summary.update(_long_run(cfg, sim, used_plans, records, iterations))
    return SimResult(summary=summary, iterations=iterations, ranks=ranks_df, config=cfg.resolved(),
                     config_hash=cfg.config_hash(), meta=meta, records=records, plans=used_plans)


def _long_run(cfg: RunConfig, sim, plans: list[Plan], records: list, iterations) -> dict:
    """Goodput over ``sim.long_run_hours`` of training (dcpsim.sim.longrun), the simulated iterations cycled;
    nothing when the mode is off or no iteration was simulated."""
    from dcpsim.sim.longrun import Episodes, LongRun, long_run_summary, slowdown_ratios

    s = cfg.sim
    if s.long_run_hours <= 0 or not records:
        return {}
    plan = next(p for p in plans if p.steps)
    slow, link = slowdown_ratios(sim, plan, slow_gpu_slowdown=s.slow_gpu_slowdown if s.slow_gpu_per_day > 0 else 1.0,
                                 degraded_link_scale=s.degraded_link_episode_scale if s.degraded_link_per_day > 0 else 1.0)
    lr = LongRun(hours=s.long_run_hours, gpu_mtbf_h=s.gpu_mtbf_h, checkpoint_s=s.checkpoint_s, restart_s=s.restart_s,
                 checkpoint_interval_s=None if s.checkpoint_interval_s == "young" else float(s.checkpoint_interval_s),
                 slow_gpu=Episodes(s.slow_gpu_per_day, s.slow_gpu_episode_s, slow),
                 degraded_link=Episodes(s.degraded_link_per_day, s.degraded_link_episode_s, link))
    out = long_run_summary(iterations["iteration_time_s"].to_numpy(), cfg.cluster.gpus, lr, s.long_run_seeds, s.seed)
    out.update({"slow_gpu_ratio": slow, "degraded_link_ratio": link})
    return out


def _fixed_workload(cfg: RunConfig):
    """The fixed-length workload of ``cfg``; per-document windows need the ``packing`` policy."""
    from dcpsim.workload.fixed import fixed_from_config

    fixed = fixed_from_config(cfg.workload)
    if fixed.per_document and cfg.policy.name != "packing":
        raise ConfigError("policy.name", cfg.policy.name, "'packing' with per-document fixed windows "
                          "(workload.documents): a microbatch is mbs whole windows")
    return fixed


def _batch_lengths(cfg: RunConfig, i: int, batches, dist, fixed, rng: np.random.Generator) -> np.ndarray:
    """Sequence lengths of iteration ``i``: given, full fixed-length windows, or sampled."""
    if batches is not None:
        return np.asarray(batches[i], dtype=np.int64)
    if fixed is not None:
        return fixed.sample_windows(cfg.workload.gbs, rng)[0]
    from dcpsim.workload import sample_global_batch

    return sample_global_batch(dist, cfg.workload.gbs, rng)


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


def _summary(cfg: RunConfig, it, cp_hist: dict[int, int], gpus: int, peak: float) -> dict:
    p = cfg.parallel
    T = float(it["iteration_time_s"].sum())
    flops = float(it["flops"].sum())
    out = {
        "config_hash": cfg.config_hash(),
        "policy": cfg.policy.name if not len(it) else str(it["policy"].iloc[0]),
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
        "iterations": int(len(it)),
        "seed": cfg.sim.seed,
        "simulated": bool(it["simulated"].all()) if len(it) else False,
        "iteration_time_s": T / max(len(it), 1),
        **throughput(flops, float(it["tokens"].sum()), T, gpus, peak),
    }
    for k in BREAKDOWN:
        s = float(it[k].sum(skipna=False))  # NaN for runs that were not simulated (bound)
        out[k] = s / max(len(it), 1)
        out["frac_" + k.removesuffix("_s")] = s / T if T > 0 else float("nan")
    for k in ("steps", "groups", "mean_cp"):
        if k in it:
            out[k] = float(it[k].mean())
    for k, agg in (("max_cp", "max"), ("peak_memory_gib", "max"), ("packs_over_memory", "sum"), ("dropped", "sum"),
                   ("sequences", "sum"), ("planning_time_s", "mean")):
        if k in it:
            v = getattr(it[k], agg)()
            out[k] = v.item() if hasattr(v, "item") else v
    out["cp_hist"] = {int(k): int(v) for k, v in sorted(cp_hist.items())}
    return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dcpsim")
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"
