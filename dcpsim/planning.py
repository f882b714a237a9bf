"""Capacity planning: which GPU type, how many, and which policy, to train on N tokens by a deadline.

For every GPU type (with its price per GPU-hour), cluster size and policy,
:func:`plan_capacity` simulates a few iterations of the model on the workload
(:func:`dcpsim.run.single.run_simulation`) and turns the simulated throughput
into:

* ``time_to_train_h`` -- ``tokens / tokens_per_s`` (no failures), hours;
* ``goodput`` -- the fraction of wall time that is useful training once
  failures, checkpoints and restarts are counted (:class:`FailureModel`);
* ``effective_time_h`` / ``effective_days`` -- time to train divided by goodput;
* ``gpu_hours`` -- GPUs × effective hours; ``cost`` -- GPU-hours × price;
* ``tflops_per_gpu`` and ``scaling_efficiency`` -- throughput per GPU relative
  to the smallest feasible size of the same GPU type and policy;
* ``meets_deadline`` and ``pareto`` (not beaten in both effective time and cost).

:func:`recommend` states the choice in one line: the cheapest configuration
that meets the deadline, else the fastest.

Layout per size (:func:`choose_layout`), unless ``tp``/``pp``/``cp`` are given:
static CP = the smallest power of two with CP × M ≥ maximum length (M =
``max_tokens_per_rank``); TP = 1 (raised to 2, 4, 8 only if nothing fits);
PP = the smallest power of two dividing the layer count for which the model
states plus M tokens of activations (``dcpsim.model.memory_per_gpu``, PP
microbatches in flight) fit the cost model's memory limit. DP = the rest.

Global batch: ``gbs`` sequences at the smallest size, grown in proportion to
the GPU count by default (``batch_scaling="proportional"``: the same work per
GPU, as large runs do); ``"fixed"`` keeps it, which shows the strong-scaling
limit (few microbatches per DP rank, the pipeline bubble dominates).

This module lives at ``dcpsim/planning.py`` (one module, above ``run`` in the
data flow; ``dcpsim.policies.plan`` is something else: one iteration's schedule).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.run.config import RunConfig

# Llama 3 (Meta, 2024): 419 unexpected interruptions in 54 days of pre-training on 16,384 GPUs (issue 6).
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16384
DEFAULT_POLICIES = ("packing", "dynamic")
DEFAULT_ITERATIONS = 3  # simulated iterations per configuration (fresh global batch each)


def llama3_gpu_mtbf_hours() -> float:
    """Per-GPU mean time between failures implied by the Llama 3 report (GPU-hours per interruption)."""
    return LLAMA3_DAYS * 24.0 * LLAMA3_GPUS / LLAMA3_INTERRUPTIONS


@dataclass(frozen=True)
class FailureModel:
    """Failures, checkpoints and restarts (first-order Young/Daly model).

    gpu_mtbf_h:   mean time between failures of one GPU (with its share of host, network, ...), hours;
                  default from the Llama 3 report (:func:`llama3_gpu_mtbf_hours`).
    checkpoint_s: time training stops to write one checkpoint, seconds (assumed 60 s).
    restart_s:    time from a failure to training again (detect, reschedule, load), seconds (assumed 600 s).

    With N GPUs the job fails every M = gpu_mtbf_h·3600/N seconds on average.
    Checkpoints every τ = √(2·δ·M) seconds of work (Young's optimum, δ =
    checkpoint_s). Per unit of useful work the job spends δ/τ checkpointing,
    and each failure loses R = restart_s plus on average half a segment
    (τ+δ)/2, so wall = work·(1 + δ/τ) / (1 − (R + (τ+δ)/2)/M) and goodput =
    work / wall (0 when failures come faster than the job can progress).
    """

    gpu_mtbf_h: float = field(default_factory=llama3_gpu_mtbf_hours)
    checkpoint_s: float = 60.0
    restart_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.gpu_mtbf_h > 0:
            raise ConfigError("--mtbf-gpu-hours", self.gpu_mtbf_h, "a positive number of hours")
        if self.checkpoint_s < 0 or self.restart_s < 0:
            raise ConfigError("--checkpoint-s/--restart-s", (self.checkpoint_s, self.restart_s), "non-negative seconds")

    def system_mtbf_s(self, gpus: int) -> float:
        return self.gpu_mtbf_h * 3600.0 / gpus

    def checkpoint_interval_s(self, gpus: int) -> float:
        return math.sqrt(2.0 * self.checkpoint_s * self.system_mtbf_s(gpus))

    def goodput(self, gpus: int) -> float:
        """Useful fraction of wall time on ``gpus`` GPUs (0..1)."""
        m = self.system_mtbf_s(gpus)
        d = self.checkpoint_s
        tau = self.checkpoint_interval_s(gpus)
        ckpt = d / tau if tau > 0 else 0.0
        lost = (self.restart_s + (tau + d) / 2.0) / m
        if lost >= 1.0:
            return 0.0
        return (1.0 - lost) / (1.0 + ckpt)


def parse_gpu_prices(text: str) -> dict[str, float]:
    """``"h100-sxm:2.5,h200-sxm:3.5"`` -> ``{"h100-sxm": 2.5, "h200-sxm": 3.5}`` (price per GPU-hour)."""
    out: dict[str, float] = {}
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        name, sep, price = item.rpartition(":")
        try:
            p = float(price)
        except ValueError:
            p = -1.0
        if not sep or not name or p < 0 or not math.isfinite(p):
            raise ConfigError("--gpus", item, "GPU:PRICE pairs, e.g. h100-sxm:2.5 (price per GPU-hour, >= 0)")
        out[name] = p
    if not out:
        raise ConfigError("--gpus", text, "at least one GPU:PRICE pair")
    return out


def parse_duration_days(text: str | float | None) -> float | None:
    """``"30d"``, ``"720h"``, ``"4w"`` or a plain number of days -> days."""
    if text is None:
        return None
    s = str(text).strip().lower()
    units = {"d": 1.0, "h": 1 / 24.0, "w": 7.0}
    mult = units.get(s[-1:], None)
    num = s[:-1] if mult is not None else s
    try:
        v = float(num) * (mult or 1.0)
    except ValueError:
        v = -1.0
    if not v > 0 or not math.isfinite(v):
        raise ConfigError("--deadline", text, "a positive duration such as 30d, 720h or 4w")
    return v


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, x))))


def choose_layout(base: RunConfig, gpus: int, *, tp: int | None = None, pp: int | None = None,
                  cp: int | None = None) -> tuple[int, int, int]:
    """(tp, pp, cp) for ``gpus`` GPUs of ``base``'s model and hardware (see the module docstring)."""
    from dcpsim.cost import CostModel
    from dcpsim.model import get_model, memory_per_gpu

    model = get_model(base.model.name)
    M = base.parallel.max_tokens_per_rank or 65536
    max_len = base.workload.max_len or M
    cp_ = cp or _pow2_at_least(max_len / M)
    limit = CostModel(base.hardware.gpu, model, tp=1, pp=1, dp_cp=1).memory_limit_bytes
    tps = [tp] if tp else [t for t in (1, 2, 4, 8) if model.n_heads % t == 0 and model.n_kv_heads % t == 0]
    pps = [pp] if pp else [p for p in (1, 2, 4, 8, 16, 32, 64) if model.n_layers % p == 0]
    for t in tps:
        for p in pps:
            if gpus % (t * p * cp_):
                continue
            dp = gpus // (t * p * cp_)
            mem = memory_per_gpu(model, tokens_per_rank=M, tp=t, pp=p, dp=dp, cp=cp_,
                                 recompute=base.parallel.recompute).total_bytes
            if mem <= limit or (tp and pp):
                return t, p, cp_
    raise InfeasibleError("memory", f"no tp in {tps}, pp in {pps} with cp={cp_} fits {model.name} with "
                                    f"M={M} tokens per rank on {gpus} x {base.hardware.gpu}")


@dataclass
class CapacityPlan:
    """Rows (one per GPU type × size × policy), the recommendation, and what was asked."""

    rows: Any  # pandas DataFrame
    recommendation: str
    request: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        import json

        return {"request": self.request, "recommendation": self.recommendation,
                "rows": json.loads(self.rows.to_json(orient="records"))}


def plan_capacity(  # noqa: C901 - temporary, split by planning
    model: str = "llama-13b",
    workload: str = "github",
    tokens: float = 1e12,
    gpu_prices: Mapping[str, float] | str = "h100-sxm:2.5",
    sizes: Sequence[int] = (512, 1024, 2048, 4096),
    *,
    policies: Sequence[str] = DEFAULT_POLICIES,
    deadline_days: float | None = None,
    tp: int | None = None,
    pp: int | None = None,
    cp: int | None = None,
    base: RunConfig | None = None,
    gbs: int | None = None,
    batch_scaling: str = "proportional",
    iterations: int | None = None,
    seed: int | None = None,
    failures: FailureModel | None = None,
    jobs: int | None = 1,
    runner=None,
) -> CapacityPlan:
    """Simulate every (GPU type, size, policy) and cost it (see the module docstring).

    ``base``: a run configuration for everything not named here (default:
    RunConfig defaults). ``gbs`` (default: the base's) is the global batch
    at the smallest size; ``batch_scaling="proportional"`` grows it with the
    GPU count (same sequences per GPU: weak scaling), ``"fixed"`` keeps it
    (strong scaling: few microbatches per rank at large sizes, so throughput
    per GPU falls). ``iterations``: simulated iterations per configuration
    (default 3). ``jobs``: worker processes for the simulations.
    ``runner``: the simulation function (default ``run_simulation``).
    Configurations that cannot run are rows with ``status`` and ``reason``.
    """
    import numpy as np
    import pandas as pd

    from dcpsim.run.executors import make_executor
    from dcpsim.run.sweep import RunSpec, execute_batch

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
    if batch_scaling not in ("proportional", "fixed"):
        raise ConfigError("--batch-scaling", batch_scaling, "proportional or fixed")
    fm = failures or FailureModel()
    base = base or RunConfig()
    upd: dict[str, Any] = {"model.name": model, "workload.name": workload}
    if gbs is not None:
        upd["workload.gbs"] = gbs
    upd["sim.iterations"] = DEFAULT_ITERATIONS if iterations is None else iterations
    if seed is not None:
        upd["sim.seed"] = seed
    base = base.with_updates(upd)

    specs: list[tuple[dict[str, Any], RunSpec | None, str]] = []
    gbs0 = base.workload.gbs
    for gpu, price in prices.items():
        for n in sizes:
            batch = gbs0 if batch_scaling == "fixed" else max(1, round(gbs0 * n / sizes[0]))
            layout_err = ""
            try:
                t, p, c = choose_layout(base.with_updates({"hardware.gpu": gpu}), n, tp=tp, pp=pp, cp=cp)
            except (InfeasibleError, ConfigError) as exc:
                t = p = c = None
                layout_err = str(exc)
            for pol in policies:
                ident = {"gpu": gpu, "price_per_gpu_h": price, "gpus": n, "policy": pol, "tp": t, "pp": p, "cp": c,
                         "gbs": batch}
                if layout_err:
                    specs.append((ident, None, f"layout: {layout_err}"))
                    continue
                try:
                    cfg = base.with_updates({"hardware.gpu": gpu, "cluster.gpus": n, "policy.name": pol,
                                             "parallel.tp": t, "parallel.pp": p, "parallel.cp": c,
                                             "workload.gbs": batch})
                except ConfigError as exc:
                    specs.append((ident, None, str(exc)))
                    continue
                specs.append((ident | {"dp": cfg.dp}, RunSpec(cfg.config_hash(), {}, cfg), ""))

    # simulate each distinct configuration once (rows cached by config hash within this call)
    todo: dict[str, RunSpec] = {rs.run_hash: rs for _, rs, _ in specs if rs is not None}
    cache: dict[str, dict[str, Any]] = {}
    if todo:
        ex = make_executor(jobs=jobs)
        try:
            items = list(todo.values())
            n_chunks = max(1, min(len(items), 2 * ex.n_workers))
            chunks = [items[i::n_chunks] for i in range(n_chunks)]
            futs = [ex.submit(execute_batch, ch, runner) for ch in chunks]
            while futs:
                done, futs = ex.wait_any(futs, timeout=0.5)
                for f in done:
                    for r in f.result():
                        cache[r["config_hash"]] = r
        finally:
            ex.close()

    rows = []
    for ident, rs, err in specs:
        row = dict(ident)
        if rs is None:
            row |= {"status": "infeasible", "reason": err}
            rows.append(row)
            continue
        r = cache[rs.run_hash]
        row |= {"config_hash": rs.run_hash, "status": r["status"], "reason": r.get("reason", "")}
        if r["status"] == "ok":
            tps = float(r.get("tokens_per_s") or np.nan)
            row |= {"iteration_time_s": float(r.get("iteration_time_s", np.nan)), "tokens_per_s": tps,
                    "tflops_per_gpu": float(r.get("tflops_per_gpu", np.nan)), "mfu": r.get("mfu")}
        rows.append(row)
    df = pd.DataFrame(rows)
    for c in ("iteration_time_s", "tokens_per_s", "tflops_per_gpu"):
        if c not in df.columns:
            df[c] = np.nan
    ok = df["status"] == "ok"
    n = df["gpus"].astype(float)
    df["time_to_train_h"] = np.where(ok, tokens / df["tokens_per_s"] / 3600.0, np.nan)
    df["goodput"] = [fm.goodput(int(g)) for g in df["gpus"]]
    df["checkpoint_interval_min"] = [fm.checkpoint_interval_s(int(g)) / 60.0 for g in df["gpus"]]
    df["system_mtbf_h"] = [fm.system_mtbf_s(int(g)) / 3600.0 for g in df["gpus"]]
    no_progress = ok & (df["goodput"] <= 0)
    df.loc[no_progress, "status"] = "infeasible"
    df.loc[no_progress, "reason"] = "failures: the job fails faster than it can checkpoint and restart"
    ok = df["status"] == "ok"
    df["effective_time_h"] = np.where(ok, df["time_to_train_h"] / df["goodput"].where(df["goodput"] > 0), np.nan)
    df["effective_days"] = df["effective_time_h"] / 24.0
    df["gpu_hours"] = n * df["effective_time_h"]
    df["cost"] = df["gpu_hours"] * df["price_per_gpu_h"]
    # scaling efficiency: throughput per GPU relative to the smallest feasible size, per GPU type and policy
    df["scaling_efficiency"] = np.nan
    for _, g in df[ok].groupby(["gpu", "policy"]):
        g = g.sort_values("gpus")
        ref = g["tokens_per_s"].iloc[0] / g["gpus"].iloc[0]
        df.loc[g.index, "scaling_efficiency"] = (g["tokens_per_s"] / g["gpus"]) / ref
    df["meets_deadline"] = ok & (True if deadline_days is None else df["effective_days"] <= deadline_days)
    df["pareto"] = pareto_front(df, ok)
    req = {"model": model, "workload": workload, "tokens": tokens, "gpu_prices": prices, "sizes": sizes,
           "policies": list(policies), "deadline_days": deadline_days, "tp": tp, "pp": pp, "cp": cp,
           "gbs": gbs0, "batch_scaling": batch_scaling, "iterations": base.sim.iterations, "seed": base.sim.seed,
           "max_tokens_per_rank": base.parallel.max_tokens_per_rank, "max_len": base.workload.max_len,
           "failures": {"gpu_mtbf_h": fm.gpu_mtbf_h, "checkpoint_s": fm.checkpoint_s, "restart_s": fm.restart_s}}
    return CapacityPlan(df, recommend(df, deadline_days), req)


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
    return (f"{int(r['gpus'])} x {r['gpu']} with {r['policy']} (TP {int(r['tp'])}, PP {int(r['pp'])}, "
            f"CP {int(r['cp'])}, DP {int(r['dp'])}): {r['effective_days']:.1f} days including failures "
            f"(goodput {100 * r['goodput']:.1f}%), {r['gpu_hours']:,.0f} GPU-hours, cost {r['cost']:,.0f} "
            f"at {r['price_per_gpu_h']:g}/GPU-hour, {r['tflops_per_gpu']:.0f} TFLOPS/GPU")


def recommend(df, deadline_days: float | None = None) -> str:
    """One plain sentence: the cheapest configuration meeting the deadline, else the fastest."""
    ok = df[df["status"] == "ok"]
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
