"""Capacity planning: every GPU type × cluster size × policy, its best layouts, time to train and cost.

:func:`plan_capacity` runs named phases:

1. :func:`plan_tasks` -- one task per (GPU type, size, policy) with its global batch;
2. per task, in worker processes with a progress bar: :func:`dcpsim.planning.search.search_layouts`
   (enumerate, prune, screen, simulate) on the ideal network, then
   :func:`dcpsim.planning.evaluate.evaluate_best` -- the best layout under the configured network
   (``sim.network``) with its throughput seeds and the long-run fault simulation over the planned
   duration (``sim.long_run_seeds`` runs: failures, checkpoints, restarts, slow-GPU and degraded-link
   episodes);
3. :func:`cost_table` -- time to train (``tokens / tokens_per_s``), goodput (the long run's mean; the
   first-order Young/Daly figure of the same inputs beside it), GPU-hours, cost, days, their spread over
   seeds, expected failures, scaling efficiency, deadline and Pareto front;
4. :func:`recommend` -- one sentence: the cheapest configuration meeting the deadline, else the fastest.
   Only trainable policies are picked (``trainable``): ``bound`` is a lower bound on the iteration time, kept
   as a reference row, never recommended and never on the Pareto front.

Columns of ``CapacityPlan.rows`` (one per GPU type × size × policy, its best simulated layout):
``network`` (the mode of the row's throughput; the search ran ``search_network`` = ideal, its figure is
``tokens_per_s_search``), ``time_to_train_h`` (no failures), ``goodput`` (useful fraction of wall time:
the long run's mean, ``goodput_source`` says so) with ``goodput_std``/``_min``/``_max`` over the long
runs and ``goodput_young_daly`` (analytic), ``effective_time_h`` / ``effective_days`` (with failures;
``effective_days_std`` over the long runs, ``effective_days_young_daly``), ``gpu_hours``, ``cost``
(``cost_std``), ``*_min``/``*_max`` (fastest throughput seed at the best long run / slowest at the worst),
``iterations`` (global batches to train on ``tokens``), ``expected_failures`` (Poisson: wall time / job
MTBF) and ``failures_sim`` (the long runs' mean, scaled to the effective time), ``long_run_horizon_h``,
``meets_deadline`` (``None`` without a deadline), ``pareto`` (over all rows) and ``pareto_gpu`` (within
the row's GPU type).
Trust columns (:mod:`dcpsim.planning.trust`): ``profile_label``, the prediction band of every figure
(``<figure>_band_lo``/``_hi`` with ``band_runs``, ``band_basis`` or ``band_reason``) and the published-MFU
sanity bound (``best_published_mfu``, ``above_published_mfu``; a warning per row above it).
``CapacityPlan.layouts`` holds every simulated layout of the search (ideal network; ``rank`` 1 = best)
with its time breakdown and ``why`` it beats the next one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.planning.failures import FailureModel
from dcpsim.planning.inputs import DataSpec, check_request_values, make_data_spec, parse_gpu_prices
from dcpsim.planning.search import DEFAULT_SIMULATE, search_layouts
from dcpsim.planning.space import SearchSpace
from dcpsim.planning.tasks import Task, TaskSettings
from dcpsim.run.config import RunConfig

DEFAULT_POLICIES = ("packing", "dynamic")
SERIAL_TASKS = 3  # this many searches or fewer run in this process


@dataclass
class CapacityPlan:
    """Best layout per GPU type × size × policy (``rows``), every simulated layout, the choice, the request."""

    rows: Any  # pandas DataFrame
    recommendation: str
    request: dict[str, Any]
    layouts: Any = None  # pandas DataFrame
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        import json

        out = {"request": self.request, "recommendation": self.recommendation, "warnings": self.warnings,
               "rows": json.loads(self.rows.to_json(orient="records"))}
        if self.layouts is not None:
            out["layouts"] = json.loads(self.layouts.to_json(orient="records"))
        return out


def trainable(policy: str) -> bool:
    """Whether ``policy``'s plans are schedules a run can train with (``bound`` is a lower bound, not one)."""
    from dcpsim.policies.base import policy_class

    return bool(getattr(policy_class(policy), "executable", True))


def check_policies(policies: Sequence[str]) -> None:
    """Known policy names, at least one of them trainable (ConfigError naming --policies)."""
    from dcpsim.policies.base import list_policies, policy_class

    for pol in policies:
        try:
            policy_class(pol)
        except ConfigError:
            raise ConfigError("--policies", pol, f"policies from {list_policies()}") from None
    if not any(trainable(p) for p in policies):
        raise ConfigError("--policies", ",".join(policies),
                          "at least one trainable policy: 'bound' is a lower bound on the iteration time, shown "
                          "beside trainable policies as a reference column, never recommended")


def plan_tasks(prices: Mapping[str, float], sizes: Sequence[int], policies: Sequence[str], data: DataSpec,
               batch_scaling: str) -> list[Task]:
    """Every (GPU type, size, policy) with its batch (``proportional``: grows with the GPU count)."""
    out = []
    for gpu, price in prices.items():
        for n in sizes:
            gbs = data.gbs if batch_scaling == "fixed" else max(1, round(data.gbs * n / sizes[0]))
            out += [Task(gpu, price, n, pol, gbs) for pol in policies]
    return out


def run_task(task: Task, settings: TaskSettings) -> dict[str, Any]:
    """Search one task on the ideal network, then evaluate its best layout under the configured network with
    seeds and the long run (:func:`~dcpsim.planning.evaluate.evaluate_best`; a worker's unit of work)."""
    import time

    from dcpsim.planning.evaluate import SEARCH_UPDATES, evaluate_best

    cpu0 = time.process_time()
    cfg = settings.base.with_updates({"hardware.gpu": task.gpu})
    res = search_layouts(cfg.with_updates(SEARCH_UPDATES), task.gpus, settings.data, policy=task.policy,
                         space=settings.space, gbs=task.gbs, simulate=settings.simulate, runner=settings.runner)
    final = evaluate_best(res, cfg, task, settings)
    return {"task": task, "rows": res.rows, "counts": res.counts, "reason": res.reason, "final": final,
            "cpu_s": time.process_time() - cpu0}


def run_task_group(tasks: Sequence[Task], settings: TaskSettings) -> list[dict[str, Any]]:
    """:func:`run_task` of each task, in order, in one process (a worker's unit of work: see :func:`task_groups`).

    Python's cyclic garbage collector is paused meanwhile (:func:`dcpsim.policies.base.gc_paused`): the searches
    build hundreds of thousands of long-lived memo entries that its passes keep scanning (12% of the README
    example's CPU time, eight full passes over ~260,000 objects) and find almost nothing (a few hundred objects
    in cycles over the whole example: reference counting frees the rest); it runs again when the group is done."""
    from dcpsim.policies.base import gc_paused

    with gc_paused():
        return [run_task(t, settings) for t in tasks]


def task_groups(tasks: Sequence[Task], workers: int = 1) -> list[list[int]]:
    """The tasks' indices grouped by GPU type -- by (GPU type, policy) when there are fewer GPU types than
    ``workers`` -- in order of first appearance. A worker runs a group in one process, so its searches share
    that process's caches (the GPU type's cost models, the screen's stage times of a layout, which do not depend
    on the cluster size, and whole screens, which the policies of one size share) instead of every worker
    building them."""
    by_gpu = len({t.gpu for t in tasks}) >= workers
    groups: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(tasks):
        groups.setdefault((t.gpu, "" if by_gpu else t.policy), []).append(i)
    return list(groups.values())


def run_tasks(tasks: list[Task], settings: TaskSettings, *, jobs: int | None, progress: bool) -> list[dict[str, Any]]:
    """Every task, in worker processes (``jobs``; 1 = in this process) by groups of :func:`task_groups`,
    results in task order."""
    from dcpsim.errors import DcpsimError
    from dcpsim.progress import ProgressDisplay
    from dcpsim.run.executors import make_executor
    from dcpsim.run.pool import is_worker_death, reap_fork_server, restart_broken, retry_alone

    results: dict[int, dict[str, Any]] = {}
    # a worker pool costs each worker a fresh interpreter and imports (~1-2 s): not worth it for a few tasks
    n_workers = 1 if jobs == 1 or len(tasks) <= SERIAL_TASKS else min(jobs or 2, len(tasks))
    groups = [[i] for i in range(len(tasks))] if n_workers == 1 else task_groups(tasks, n_workers)
    # forked from here (no fork server importing everything again), every worker at once, before the progress
    # bar's refresh thread runs (pool.worker_pool, pool.fork_safe)
    ex = make_executor(jobs=n_workers, fork=True)
    futs: dict[Any, tuple[int, int, int]] = {}  # future -> (group, attempt, pool generation)

    def submit(g: int, attempt: int = 1) -> None:
        f = ex.submit(run_task_group, [tasks[i] for i in groups[g]], settings)
        futs[f] = (g, attempt, getattr(ex, "generation", 0))

    def give_up(lost, exc) -> None:
        t = tasks[groups[lost[0]][0]]
        raise DcpsimError(f"a worker process died twice planning {t.gpu} x {t.gpus} "
                          f"({exc}); run again with fewer sizes or -j 1") from None

    bar = None
    try:
        bar = ProgressDisplay("searching", len(tasks), None if progress else False).__enter__()
        for g in range(len(groups)):  # with one worker each task runs here as it is submitted: under the bar
            submit(g)
        while futs:
            done, _ = ex.wait_any(list(futs), timeout=0.5)
            for f in done:
                g, attempt, gen = futs.pop(f)
                try:
                    out = f.result()
                except Exception as exc:
                    if not is_worker_death(exc):  # a worker was killed (e.g. out of memory): retried alone
                        raise
                    restart_broken(ex, gen)
                    retry_alone([g], attempt, exc, resubmit=submit, give_up=give_up)
                    continue
                results.update(zip(groups[g], out, strict=True))
                bar.advance(len(out))
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
        ex.close()
        reap_fork_server()  # the workers' processes end here, their CPU time counted as this process's children's
    return [results[i] for i in range(len(tasks))]


FINAL_KEYS = ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_memory_gib")
LONG_RUN_KEYS = {"goodput_mean": "goodput_sim", "goodput_std": "goodput_std", "goodput_min": "goodput_min",
                 "goodput_max": "goodput_max", "young_daly_goodput": "goodput_young_daly",
                 "renewal_goodput": "goodput_renewal", "failures_mean": "failures_per_run",
                 "failures_std": "failures_per_run_std", "inv_goodput_std": "inv_goodput_std",
                 "horizon_h": "long_run_horizon_h", "horizon": "long_run_horizon", "long_run_seeds": "long_run_seeds",
                 "checkpoint_every_iterations": "checkpoint_every_iterations", "slow_gpu_ratio": "slow_gpu_ratio",
                 "degraded_link_ratio": "degraded_link_ratio"}


def _final_columns(final: dict[str, Any]) -> dict[str, Any]:
    """The final evaluation's figures as row columns (the search's own kept as ``*_search``)."""
    from dcpsim.sim import BREAKDOWN

    s = final["final"]
    out: dict[str, Any] = {k: float(s[k]) for k in (*FINAL_KEYS, *BREAKDOWN) if isinstance(s.get(k), (int, float))}
    tps = final["seed_tokens_per_s"]
    out |= {"network": final["network"], "tokens_per_s_min": min(tps), "tokens_per_s_max": max(tps), "seeds": len(tps),
            "long_run_sample_iterations": final["long_run_sample_iterations"]}
    out |= {new: final["long_run"][old] for old, new in LONG_RUN_KEYS.items() if old in final.get("long_run", {})}
    return out


def _best_row(res: dict[str, Any]) -> dict[str, Any]:
    t: Task = res["task"]
    row: dict[str, Any] = {"gpu": t.gpu, "price_per_gpu_h": t.price, "gpus": t.gpus, "policy": t.policy, "gbs": t.gbs}
    best = res["rows"][0] if res["rows"] else None
    if best is None or best["status"] != "ok":
        return row | {"status": "infeasible", "reason": res["reason"] or (best or {}).get("reason", "")}
    row |= {k: v for k, v in best.items() if k not in ("why",)}
    row |= {"search_network": "ideal", "tokens_per_s_search": best["tokens_per_s"],
            "layouts_enumerated": res["counts"].get("enumerated", 0), "layouts_fit": res["counts"].get("fit", 0),
            "layouts_simulated": res["counts"].get("simulated", 0), "search_cpu_s": res.get("cpu_s")}
    final = res.get("final") or {}
    if "final_error" in final:
        return row | {"status": "infeasible", "reason": final["final_error"]}
    if final:
        row |= _final_columns(final)
    if "long_run_error" in final:
        row |= {"status": "infeasible", "reason": final["long_run_error"]}
    return row


def _layout_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for res in results:
        t: Task = res["task"]
        for i, r in enumerate(res["rows"], start=1):
            out.append({"gpu": t.gpu, "gpus": t.gpus, "policy": t.policy, "gbs": t.gbs, "rank": i, **r})
    return out


def _goodput_columns(df, failures: FailureModel) -> None:
    """``goodput``: the long-run simulation's mean where the row has one, else the first-order Young/Daly
    figure (``goodput_source`` says which); ``goodput_young_daly`` always (the analytic check)."""
    import numpy as np
    import pandas as pd

    yd = pd.Series([failures.goodput(int(g)) for g in df["gpus"]], index=df.index, dtype=float)
    if "goodput_young_daly" in df.columns:  # the long run's own (checkpoints rounded to whole iterations)
        yd = df["goodput_young_daly"].astype(float).fillna(yd)
    na = yd <= 0  # the formula's clamp: no figure where a failure loses more than the job MTBF
    df["goodput_young_daly"] = yd.where(~na)
    df["goodput_young_daly_note"] = [failures.first_order_note(int(g)) if n else None
                                     for g, n in zip(df["gpus"], na, strict=True)]
    for c in ("goodput_sim", "goodput_std", "goodput_min", "goodput_max", "inv_goodput_std", "failures_per_run",
              "long_run_horizon_h", "long_run_seeds"):
        if c not in df.columns:
            df[c] = np.nan
    sim = df["goodput_sim"].notna()
    df["goodput"] = np.where(sim, df["goodput_sim"], yd)
    df["goodput_source"] = [f"long-run simulation, {int(k)} seeds" if s else "Young/Daly (first order)"
                            for s, k in zip(sim, df["long_run_seeds"].fillna(0), strict=True)]
    df["checkpoint_interval_min"] = [failures.checkpoint_interval_s(int(g)) / 60.0 for g in df["gpus"]]
    df["system_mtbf_h"] = [failures.system_mtbf_s(int(g)) / 3600.0 for g in df["gpus"]]


def _time_columns(df, tokens: float, ok) -> None:
    """Effective time, GPU-hours and cost: mean (at the mean goodput), min/max (fastest seed at the best
    long run, slowest at the worst), std (over the long runs), and the Young/Daly figure."""
    import numpy as np

    n = df["gpus"].astype(float)
    good = df["goodput"].where(df["goodput"] > 0)
    g_hi = df["goodput_max"].fillna(df["goodput"]).where(lambda x: x > 0)
    g_lo = df["goodput_min"].fillna(df["goodput"]).where(lambda x: x > 0)
    for suffix, col, g in (("", "tokens_per_s", good), ("_min", "tokens_per_s_max", g_hi),
                           ("_max", "tokens_per_s_min", g_lo)):
        eff_h = np.where(ok, tokens / df[col] / 3600.0 / g, np.nan)  # fastest seed gives the shortest time
        df["effective_time_h" + suffix] = eff_h
        df["effective_days" + suffix] = eff_h / 24.0
        df["gpu_hours" + suffix] = n * eff_h
        df["cost" + suffix] = df["gpu_hours" + suffix] * df["price_per_gpu_h"]
    std_h = np.where(ok, df["time_to_train_h"] * df["inv_goodput_std"].fillna(0.0), np.nan)
    df["effective_days_std"] = std_h / 24.0
    df["cost_std"] = n * std_h * df["price_per_gpu_h"]
    yd = df["goodput_young_daly"].where(df["goodput_young_daly"] > 0)
    df["effective_days_young_daly"] = np.where(ok, df["time_to_train_h"] / yd / 24.0, np.nan)


def cost_table(rows: list[dict[str, Any]], *, tokens: float, data: DataSpec, failures: FailureModel,
               deadline_days: float | None):
    """The rows as a DataFrame with time to train, failures, GPU-hours, cost, spread, deadline and Pareto."""
    import numpy as np
    import pandas as pd

    df = pd.DataFrame(rows)
    for c in ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "tokens_per_s_min", "tokens_per_s_max", "reason"):
        if c not in df.columns:
            df[c] = np.nan if c != "reason" else ""
    df["trainable"] = [trainable(p) for p in df["policy"]] if "policy" in df else True
    ok = df["status"] == "ok"
    df["gbs_tokens"] = df["gbs"] * data.mean_len
    df["iterations"] = np.where(ok, np.ceil(tokens / df["gbs_tokens"]), np.nan)
    df["time_to_train_h"] = np.where(ok, tokens / df["tokens_per_s"] / 3600.0, np.nan)
    _goodput_columns(df, failures)
    no_progress = ok & (df["goodput"] <= 0)
    df.loc[no_progress, "status"] = "infeasible"
    df.loc[no_progress, "reason"] = "failures: the job fails faster than it can checkpoint and restart"
    ok = df["status"] == "ok"
    _time_columns(df, tokens, ok)
    mtbf_s = df["system_mtbf_h"] * 3600.0
    df["expected_failures"] = np.where(ok, df["effective_time_h"] * 3600.0 / mtbf_s, np.nan)  # Poisson, analytic
    df["failures_sim"] = np.where(ok, df["failures_per_run"] * df["effective_time_h"] / df["long_run_horizon_h"], np.nan)
    df["scaling_efficiency"] = np.nan
    for _, g in df[ok].groupby(["gpu", "policy"]):
        g = g.sort_values("gpus")
        ref = g["tokens_per_s"].iloc[0] / g["gpus"].iloc[0]
        df.loc[g.index, "scaling_efficiency"] = (g["tokens_per_s"] / g["gpus"]) / ref
    if deadline_days is None:
        df["meets_deadline"] = None
    else:
        df["meets_deadline"] = ok & (df["effective_days"] <= deadline_days)
    pick = ok & df["trainable"]  # a lower bound (policy bound) is a reference, never on the front
    df["pareto"] = pareto_front(df, pick)
    df["pareto_gpu"] = False  # not beaten by another row of the same GPU type
    for _, g in df.groupby("gpu"):
        df.loc[g.index, "pareto_gpu"] = pareto_front(g, pick.loc[g.index]).to_numpy()
    return df


@dataclass(frozen=True)
class CapacityRequest:
    """What to plan (see :func:`plan_capacity`); derive a variant with ``dataclasses.replace``.

    The data: ``data`` or (``seq_len`` for fixed windows | ``workload`` for variable lengths, default
    fixed 4,096-token windows) with the batch as ``gbs`` sequences or ``gbs_tokens`` (default 4M tokens,
    the same at every size; ``batch_scaling="proportional"`` grows it with the GPU count). ``tokens``: tokens
    to train on. ``gpu_prices``: GPU type -> price per GPU-hour (or ``"h100-sxm:2.5,..."``). ``sizes``: GPU
    counts. ``space``: the layout search space (forced values narrow it). ``iterations``: simulated
    iterations per layout (default 1 for fixed windows, 2 otherwise). ``seeds``: seeds for the best layout's
    throughput spread. ``max_gbs_tokens``: the batch the user knows still converges; larger batches give a
    warning. ``simulate``: screened layouts simulated per search. ``deadline_days``: days to train in.

    Failures and the network are the base configuration's ``sim.*`` fields (``failures`` and
    ``long_run_seeds``, when given, set ``sim.gpu_mtbf_h``/``checkpoint_s``/``restart_s``/
    ``checkpoint_interval_s`` and ``sim.long_run_seeds``).
    """

    model: str = "llama-13b"
    workload: str | dict | None = None
    tokens: float = 1e12
    gpu_prices: Mapping[str, float] | str = "h100-sxm:2.5"
    sizes: Sequence[int] = (512, 1024, 2048, 4096)
    data: DataSpec | None = None
    seq_len: int | None = None
    gbs: int | None = None
    gbs_tokens: int | None = None
    max_gbs_tokens: int | None = None
    policies: Sequence[str] = DEFAULT_POLICIES
    deadline_days: float | None = None
    space: SearchSpace | None = None
    base: RunConfig | None = None
    batch_scaling: str = "fixed"
    iterations: int | None = None
    seed: int | None = None
    seeds: int = 3
    failures: FailureModel | None = None
    long_run_seeds: int | None = None
    simulate: int = DEFAULT_SIMULATE


def plan_capacity(request: CapacityRequest, *, jobs: int | None = 1, progress: bool = False,
                  runner=None) -> CapacityPlan:
    """Search, simulate and cost every (GPU type, size, policy) of ``request``; see the module docstring.

    ``jobs``: worker processes (1 = in this process); ``runner``: the simulation function (default
    ``run_simulation``). Layouts are searched on the ideal network, the best per (GPU type, size, policy)
    evaluated under ``sim.network`` with the long-run fault simulation (:mod:`dcpsim.planning.evaluate`).
    """
    r = request
    check_request_values(r)
    model, workload, tokens, gpu_prices, sizes = r.model, r.workload, r.tokens, r.gpu_prices, r.sizes
    data, seq_len, gbs, gbs_tokens, max_gbs_tokens = r.data, r.seq_len, r.gbs, r.gbs_tokens, r.max_gbs_tokens
    policies, deadline_days, space, base, batch_scaling = r.policies, r.deadline_days, r.space, r.base, r.batch_scaling
    iterations, seed, seeds, failures, long_run_seeds = r.iterations, r.seed, r.seeds, r.failures, r.long_run_seeds
    simulate = r.simulate
    prices = parse_gpu_prices(gpu_prices) if isinstance(gpu_prices, str) else dict(gpu_prices)
    if not prices:
        raise ConfigError("--gpus", gpu_prices, "at least one GPU type with a price")
    if not tokens or tokens <= 0 or not math.isfinite(tokens):
        raise ConfigError("--tokens", tokens, "a positive number of training tokens")
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 1:
        raise ConfigError("--sizes", sizes, "positive GPU counts")
    if not policies:
        raise ConfigError("--policies", policies, "at least one policy")
    check_policies(policies)
    if batch_scaling not in ("proportional", "fixed"):
        raise ConfigError("--batch-scaling", batch_scaling, "proportional or fixed")
    if seeds < 1:
        raise ConfigError("--seeds", seeds, "at least 1")
    if data is None:
        if seq_len is None and workload is None:
            seq_len = 4096
        data = make_data_spec(seq_len=seq_len, workload=workload, gbs=gbs, gbs_tokens=gbs_tokens,
                              max_len=None if base is None or workload is None else base.workload.max_len)
    space = space or SearchSpace()
    base = (base or RunConfig()).with_updates({"model.name": model})
    upd: dict[str, Any] = {"sim.iterations": iterations or (1 if data.fixed else 2)}
    if seed is not None:
        upd["sim.seed"] = seed
    if failures is not None:  # the API's FailureModel is the config's sim.* failure fields (one concept)
        upd |= _failure_updates(failures, base)
    if long_run_seeds is not None:
        upd["sim.long_run_seeds"] = long_run_seeds
    base = base.with_updates(upd)
    fm = FailureModel.from_settings(base.sim)

    tasks = plan_tasks(prices, sizes, policies, data, batch_scaling)
    settings = TaskSettings(base, data, space, simulate=simulate, seeds=seeds, tokens=tokens, runner=runner)
    results = run_tasks(tasks, settings, jobs=jobs, progress=progress)
    df = cost_table([_best_row(r) for r in results], tokens=tokens, data=data, failures=fm,
                    deadline_days=deadline_days)
    import pandas as pd

    layouts = pd.DataFrame(_layout_rows(results))
    from dcpsim.planning.trust import annotate

    warnings = batch_warnings(df, max_gbs_tokens) + annotate(df, model)
    req = {"model": model, "data": data.describe(), "seq_len": data.seq_len, "workload": data.workload if not data.fixed
           else "fixed", "max_len": data.max_len, "gbs": data.gbs, "gbs_tokens": data.gbs_tokens, "tokens": tokens,
           "gpu_prices": prices, "sizes": sizes, "policies": list(policies), "deadline_days": deadline_days,
           "batch_scaling": batch_scaling, "iterations": base.sim.iterations, "seed": base.sim.seed, "seeds": seeds,
           "simulated_layouts_per_search": simulate, "max_gbs_tokens": max_gbs_tokens,
           "search_space": space_description(space), "failures": fm.describe(),
           "network": {"search": "ideal", "final": base.sim.network}, "long_run": long_run_request(base)}
    return CapacityPlan(df, recommend(df, deadline_days), req, layouts=layouts, warnings=warnings)


def _failure_updates(failures: FailureModel, base: RunConfig) -> dict[str, Any]:
    """``failures`` as ``sim.*`` updates; a base configuration that set one of them otherwise is refused."""
    default = RunConfig().sim
    for path, value in failures.settings().items():
        leaf = path.split(".", 1)[1]
        mine = getattr(base.sim, leaf)
        if mine != getattr(default, leaf) and mine != value:
            raise ConfigError("failures", f"{path}={value!r}", f"agreement with the base configuration's {path}="
                                                              f"{mine!r} or only one of them (they disagree)")
    return failures.settings()


def long_run_request(base: RunConfig) -> dict[str, Any]:
    """The long-run settings a plan used (horizon, seeds, slow-GPU and degraded-link episodes)."""
    s = base.sim
    return {"horizon_h": s.long_run_hours if s.long_run_hours > 0 else "planned duration per row",
            "seeds": s.long_run_seeds, "slow_gpu_per_day": s.slow_gpu_per_day, "slow_gpu_episode_s": s.slow_gpu_episode_s,
            "slow_gpu_slowdown": s.slow_gpu_slowdown, "degraded_link_per_day": s.degraded_link_per_day,
            "degraded_link_episode_s": s.degraded_link_episode_s,
            "degraded_link_episode_scale": s.degraded_link_episode_scale}


def space_description(space: SearchSpace) -> dict[str, Any]:
    """What each search dimension is (forced values, or 'searched')."""
    from dcpsim.planning.space import OVERLAP_FLAGS, optional_field

    out: dict[str, Any] = {}
    for name in ("tp", "pp", "vp", "cp", "mbs", "tokens_per_rank", "recompute", "precision"):
        v = getattr(space, name)
        if name == "vp" and not optional_field("vp"):
            out[name] = "1 (the time model has no virtual pipeline yet)"
        elif name == "precision" and not optional_field("precision"):
            out[name] = "bf16 (the time model has no precision setting yet)"
        else:
            out[name] = list(v) if v is not None else "searched"
    out["overlap_flags"] = [n for n in OVERLAP_FLAGS if optional_field(n)]
    return out


def batch_warnings(df, max_gbs_tokens: int | None) -> list[str]:
    """One warning per distinct batch above the user's convergence limit."""
    if not max_gbs_tokens:
        return []
    over = sorted({float(x) for x in df["gbs_tokens"] if x > max_gbs_tokens})
    return [f"warning: global batch of {x:,.0f} tokens exceeds the declared convergence limit "
            f"--max-gbs-tokens {max_gbs_tokens:,} (training may need more tokens to reach the same loss)"
            for x in over]


def pareto_front(df, mask=None):
    """Boolean Series: rows not dominated in (effective_time_h, cost) by another row (among ``mask``)."""
    import numpy as np
    import pandas as pd

    m = pd.Series(True, index=df.index) if mask is None else mask.copy()
    m &= df["effective_time_h"].notna() & df["cost"].notna()
    t = df["effective_time_h"].to_numpy(float)
    c = df["cost"].to_numpy(float)
    idx = np.flatnonzero(m.to_numpy())
    out = np.zeros(len(df), dtype=bool)
    for i in idx:
        dominated = ((t[idx] <= t[i]) & (c[idx] <= c[i]) & ((t[idx] < t[i]) | (c[idx] < c[i]))).any()
        out[i] = not dominated
    return pd.Series(out, index=df.index)


def _describe(r) -> str:
    lay = r.get("layout") or f"TP {int(r['tp'])}, PP {int(r['pp'])}, CP {int(r['cp'])}"
    return (f"{int(r['gpus'])} x {r['gpu']} with {r['policy']} ({lay}, DP {int(r['dp'])}): "
            f"{r['effective_days']:.1f} days including failures ({_goodput_text(r)}), {r['gpu_hours']:,.0f} GPU-hours, cost {r['cost']:,.0f} "
            f"at {r['price_per_gpu_h']:g}/GPU-hour, {r['tflops_per_gpu']:.0f} TFLOPS/GPU")


def _goodput_text(r) -> str:
    """``goodput 97.1% ± 0.3 (long run, 8 seeds; Young/Daly 97.0%)`` or the Young/Daly figure alone."""
    from dcpsim.report.plan_report import young_daly_text

    std = r.get("goodput_std")
    if isinstance(std, float) and std == std and r.get("goodput_sim") == r.get("goodput_sim"):
        return (f"goodput {100 * r['goodput']:.1f}% ± {100 * std:.1f} over {int(r['long_run_seeds'])} simulated long "
                f"runs; Young/Daly {young_daly_text(r)}; {r.get('network', 'ideal')} network")
    return f"goodput {100 * r['goodput']:.1f}% (Young/Daly)"


def recommend(df, deadline_days: float | None = None) -> str:
    """One plain sentence: the cheapest configuration meeting the deadline, else the fastest (trainable policies
    only: a ``bound`` row is a lower bound, a reference beside them)."""
    ok = df[(df["status"] == "ok") & (df["trainable"] if "trainable" in df else True)]
    if not len(ok):
        return "No configuration could run; see the reason column."
    if deadline_days is None:
        best = ok.sort_values(["cost", "effective_time_h"]).iloc[0]
        fastest = ok.sort_values(["effective_time_h", "cost"]).iloc[0]
        msg = f"Cheapest: {_describe(best)}."
        if fastest.name != best.name:
            msg += f" Fastest: {_describe(fastest)}."
        return msg
    meet = ok[ok["effective_days"] <= deadline_days]
    if len(meet):
        best = meet.sort_values(["cost", "effective_time_h"]).iloc[0]
        return f"Recommended (cheapest that meets the {deadline_days:g}-day deadline): {_describe(best)}."
    fastest = ok.sort_values(["effective_time_h", "cost"]).iloc[0]
    return (f"No configuration meets the {deadline_days:g}-day deadline; the fastest is {_describe(fastest)}. "
            f"Add larger sizes or faster GPUs.")
