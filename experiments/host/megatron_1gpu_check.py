"""Held-out check of dcpsim's host + device step against Megatron-LM's own step on one H100.

Run: ``python experiments/host/megatron_1gpu_check.py [--host-json PATH] [--json PATH] [--breakdown RUN]``

Measured (``profiles/h100-sxm-measured/megatron_steps.json``, MEASURED.md section "Megatron-LM's own step on one
H100"): Megatron-LM's ``pretrain_gpt.py`` (NVIDIA/Megatron-LM d98e8a64) on ONE lent H100, the flags of the CI
case ``gpt3_mcore_tp1_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce_param_gather`` and 5 variants of
them; per run the median step time over iterations 11-60 (quartiles beside it) and the run's full argument
list. Runs ``timers0/*`` had Megatron's timers off; ``timers2/*`` ran with ``--timing-log-level 2`` (timers
that add syncs) and are shown apart, as secondary rows.

Simulated: each run read from its OWN argument list by dcpsim's Megatron-LM reader (``dcpsim.export.reader``,
the reader ``dcpsim simulate --megatron-args`` uses), plus the two flags the launcher added to every run
(:data:`LAUNCHER_FLAGS`, ``benchmarks/device/megatron_ci_1gpu.sh``), on 1 GPU (world size 1: DP1, so global
batch 32 at micro-batch 4 is 8 microbatches), fixed 1,024-token sequences (``--mock-data``). A flag the reader
refuses would be dropped and listed (:func:`read_run`); with these runs none is.

Profile: the shipped ``h100-sxm`` with its ``[host]`` table rebuilt by ``profiles/build_public_profiles.py``
``host_values()`` from ``host_vm2.json`` -- the plain-PyTorch host figures of the SAME machine the Megatron runs
ran on -- times the Megatron-LM ratio the shipped tables carry (``megatron_module_scale()``, read from
``megatron_ratio.json``), instead of the first machine's ``host.json`` the shipped table is built from. Device
tables, everything else: h100-sxm as shipped. The measured step times are only compared.

The ratio: ``--solve`` (:func:`solve_ratio`, :func:`write_ratio`) finds, on each of ``host_vm2.json`` and
``host_vm2_repeat.json``, the ratio at which dcpsim's step grows per added layer pass as Megatron-LM's did
(runs ``a_mb8`` and ``d_mb8_24l``: 24 vs 12 layers at 8 microbatches), and writes their mean to
``megatron_ratio.json``. So those two rows are in-sample; held out: ``b1_mb1``, ``c_mb8_nosync``, ``e_h2048``,
``f_mb8_bf16`` (and the ``timers2`` rows).
Error = simulated / measured - 1 (negative: dcpsim's step is shorter).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MEASURED_DIR = ROOT / "profiles" / "h100-sxm-measured"
STEPS_JSON = MEASURED_DIR / "megatron_steps.json"
HOST_VM2 = MEASURED_DIR / "host_vm2.json"
BASE_PROFILE = "h100-sxm"
# Added to every run's argument list by benchmarks/device/megatron_ci_1gpu.sh (apex's fused kernels were not
# installed). Its ``--train-iters`` is not added: it only decides whether evaluation falls inside the run
# (--eval-interval 1000 > any run's iterations: it does not), and the timed-out d_mb8_24l logged 42 of 60.
LAUNCHER_FLAGS = ("--no-masked-softmax-fusion", "--no-persist-layer-norm")
# The launcher's environment the reader looks at (benchmarks/device/megatron_ci_1gpu.sh)
LAUNCHER_ENV = {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
GPUS = 1
# Runs the Megatron-LM host ratio is solved on (solve_ratio; build_public_profiles.megatron_module_scale)
IN_SAMPLE = ("a_mb8", "d_mb8_24l")
CHANGES = {  # each run's change from the CI flags (benchmarks/device/megatron_ci_1gpu.sh, MEASURED.md)
    "b1_mb1": "global batch 4: one microbatch (the CI's DP8 per-rank work)",
    "a_mb8": "none (global batch 32: 8 microbatches)",
    "c_mb8_nosync": "no --log-params-norm, --log-num-zeros-in-grad, --deterministic-mode",
    "d_mb8_24l": "24 layers",
    "e_h2048": "hidden 2048, 16 heads, global batch 16 (4 microbatches)",
    "f_mb8_bf16": "BF16 instead of FP16 (no loss scaling)",
}
VM2_MEASURED = ("measured on the lent H100 80GB HBM3 the Megatron-LM steps ran on (KVM, 16 vCPUs of an Intel Xeon, "
                "torch 2.11.0+cu130, NCCL 2.28.9), 2026-11-27 (profiles/h100-sxm-measured/{name}, env_vm2.txt, "
                "MEASURED.md; plain-PyTorch modules, no Transformer Engine)")
_REFUSED = "a flag dcpsim can model ("


@dataclass
class Run:
    """One measured Megatron-LM run: its key (``timers0/a_mb8``), medians and quartiles (seconds), arguments."""

    key: str
    args: list[str]
    median_s: float
    p25_s: float
    p75_s: float
    n: int
    timing_log_level: int

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]

    @property
    def split(self) -> str:
        if self.key.startswith("timers2/"):
            return "secondary (timers on)"
        return "in-sample (ratio)" if self.name in IN_SAMPLE else "held-out"


@dataclass
class ReadRun:
    """A run as dcpsim read it: the config, the flags dropped (refused by the reader), the reader's notes."""

    config: Any
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def measured_runs(path: Path = STEPS_JSON) -> list[Run]:
    """Every run of ``megatron_steps.json`` in a fixed order: timers0 runs (by name), then timers2 runs."""
    data = json.loads(Path(path).read_text())
    runs = [Run(k, list(v["args"]), float(v["median_s"]), float(v["p25_s"]), float(v["p75_s"]), int(v["n"]),
                int(v.get("timing_log_level", 0))) for k, v in data.items() if "median_s" in v]
    return sorted(runs, key=lambda r: (r.key.startswith("timers2/"), r.name))


def read_run(args: list[str], gpu: str, gpus: int = GPUS) -> ReadRun:
    """The run of a Megatron-LM argument list (plus :data:`LAUNCHER_FLAGS`) read by dcpsim's reader on ``gpu``.
    A flag the reader refuses (a ConfigError naming it as one dcpsim cannot model) is dropped and listed; any
    other error (a value it cannot express) is raised."""
    from dcpsim.errors import ConfigError
    from dcpsim.export.reader import megatron_config, parse_flags

    flags = parse_flags(list(args) + [f for f in LAUNCHER_FLAGS if f not in args])
    dropped: list[str] = []
    for _ in range(len(flags) + 1):
        try:
            run = megatron_config(flags, gpus=gpus, gpu=gpu, env=LAUNCHER_ENV, where="megatron_steps.json args")
        except ConfigError as exc:
            if not (exc.expected.startswith(_REFUSED) and exc.field in flags):
                raise
            dropped.append(f"{exc.field}: {exc.expected[len(_REFUSED):-1]}")
            flags = {k: v for k, v in flags.items() if k != exc.field}
            continue
        return ReadRun(run.config, dropped, list(run.notes))
    raise AssertionError("unreachable: every flag dropped")


def _build_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_public_profiles", ROOT / "profiles" / "build_public_profiles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_profile(folder: Path, host_json: Path = HOST_VM2, base: str = BASE_PROFILE,
                 scale: float | None = None) -> Path:
    """``base`` (a shipped x86 profile) with its ``[host]`` table rebuilt from ``host_json`` by
    ``build_public_profiles.host_values`` (the same derivation, the same Megatron-LM ratio), written under
    ``folder``; returns the profile folder. With the shipped host.json it reproduces ``base``'s table."""
    from dcpsim.hardware import get_profile
    from dcpsim.hardware.host import HostCosts
    from dcpsim.hardware.profile import write_profile

    bpp = _build_module()
    host_json = Path(host_json)
    vals, src = bpp.host_values(host_json, VM2_MEASURED.format(name=host_json.name), scale=scale)
    prof = get_profile(base)
    if prof.host is None or prof.host.cpu != "x86":
        raise ValueError(f"{base}: an x86 profile with a [host] table expected")
    sources = {k: v for k, v in prof.sources.items() if not k.startswith("host.")}
    sources.update({f"host.{k}": v for k, v in src.items()})
    tag = host_json.stem.replace("_", "-") + ("" if scale is None else f"-r{scale:.6f}")
    new = replace(prof, name=f"{prof.name}-{tag}", host=HostCosts(cpu="x86", **vals), sources=sources,
                  description=f"{prof.name} with its [host] table rebuilt from {host_json.name} (build_public_profiles."
                              "host_values; experiments/host/megatron_1gpu_check.py)")
    return write_profile(new, Path(folder) / new.name)


def simulate(cfg, breakdown: bool = False) -> dict[str, Any]:
    """Simulated step (seconds) and rank 0's host/device split (:func:`dcpsim.report.host.rank_step`); with
    ``breakdown`` also the step's Markdown table (ops, step end, summary)."""
    from dcpsim.report.host import rank_step, step_table_markdown
    from dcpsim.run.single import build_simulator, run_simulation

    res = run_simulation(cfg)
    step = rank_step(res.records[0], stage=0, rank=0, sim=build_simulator(cfg) if breakdown else None)
    summ = step.summary()
    out: dict[str, Any] = {**summ, "step_s": float(res.summary["iteration_time_s"]), "rank_step_s": summ["step_s"],
                           "microbatches": len({r["microbatch"] for r in step.rows})}
    if breakdown:
        out["table"] = step_table_markdown(step)
    return out


def relative_error(simulated: float, measured: float) -> float:
    """simulated / measured - 1; NaN when either is missing or the measurement is not positive."""
    if not (math.isfinite(simulated) and math.isfinite(measured)) or measured <= 0:
        return math.nan
    return simulated / measured - 1.0


def compare(runs: list[Run], sims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run: measured median and quartiles, simulated step, signed error, inside the quartiles?"""
    out = []
    for r, s in zip(runs, sims, strict=True):
        sim = float(s["step_s"])
        out.append({"run": r.key, "name": r.name, "split": r.split, "change": CHANGES.get(r.name, ""),
                    "measured_s": r.median_s, "p25_s": r.p25_s, "p75_s": r.p75_s, "n": r.n, "simulated_s": sim,
                    "error": relative_error(sim, r.median_s), "in_quartiles": r.p25_s <= sim <= r.p75_s,
                    **{k: s[k] for k in ("forward_backward_s", "host_busy_s", "device_busy_s", "step_end_s",
                                         "microbatches") if k in s}})
    return out


def stats(rows: list[dict[str, Any]], split: str) -> dict[str, float]:
    """Mean |error|, worst |error|, mean signed error and the count over the rows of ``split``."""
    e = [r["error"] for r in rows if r["split"] == split and math.isfinite(r["error"])]
    return {"n": float(len(e)), "mean_abs": sum(map(abs, e)) / len(e) if e else math.nan,
            "worst_abs": max(map(abs, e), default=math.nan), "mean_signed": sum(e) / len(e) if e else math.nan}


def table_markdown(rows: list[dict[str, Any]], extra: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """The comparison as Markdown (milliseconds); ``extra``: other profiles' rows (same order) as more columns."""
    extra = extra or {}
    head = ("| run | split | change from the CI flags | measured median ms (p25-p75) | simulated ms | error | "
            "sim host busy / device busy ms |" + "".join(f" {k}: sim ms (error) |" for k in extra))
    lines = [head, "|---|---|---|---:|---:|---:|---:|" + "---:|" * len(extra)]
    for i, r in enumerate(rows):
        cells = [r["run"], r["split"], r["change"],
                 f"{r['measured_s'] * 1e3:.0f} ({r['p25_s'] * 1e3:.0f}-{r['p75_s'] * 1e3:.0f})",
                 f"{r['simulated_s'] * 1e3:.1f}", f"{r['error']:+.1%}",
                 f"{r.get('host_busy_s', math.nan) * 1e3:.1f} / {r.get('device_busy_s', math.nan) * 1e3:.1f}"]
        cells += [f"{x[i]['simulated_s'] * 1e3:.1f} ({x[i]['error']:+.1%})" for x in extra.values()]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| rows | n | mean abs error | worst abs error | mean signed error |" + "".join(
        f" {k}: mean abs / signed |" for k in extra), "|---|---:|---:|---:|---:|" + "---:|" * len(extra)]
    for split in ("in-sample (ratio)", "held-out", "secondary (timers on)"):
        st = stats(rows, split)
        if not st["n"]:
            continue
        cells = [split, f"{st['n']:.0f}", f"{st['mean_abs']:.1%}", f"{st['worst_abs']:.1%}", f"{st['mean_signed']:+.1%}"]
        for x in extra.values():
            sx = stats(x, split)
            cells.append(f"{sx['mean_abs']:.1%} / {sx['mean_signed']:+.1%}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def layer_pass_slope(rows: list[dict[str, Any]], short: str = "timers0/a_mb8", long: str = "timers0/d_mb8_24l",
                     passes: int = 12 * 8) -> tuple[float, float]:
    """(measured, simulated) step growth per added layer pass (seconds): ``long`` - ``short`` over ``passes``
    (24 vs 12 layers at 8 microbatches: 96 layer passes), the quantity the Megatron-LM host ratio came from."""
    by = {r["run"]: r for r in rows}
    return ((by[long]["measured_s"] - by[short]["measured_s"]) / passes,
            (by[long]["simulated_s"] - by[short]["simulated_s"]) / passes)


def solve_ratio(folder: Path, host_json: Path = HOST_VM2, iterations: int = 6) -> dict[str, Any]:
    """The Megatron-LM ratio ``r`` at which dcpsim's step on ``host_json``'s [host] table (x ``r``) grows per added
    layer pass (d_mb8_24l - a_mb8, 96 passes) as Megatron-LM's measured step did: fixed-point iterations
    ``r <- r x measured / simulated`` from 1 (the step is host-bound, so the growth is nearly proportional to r)."""
    runs = {r.key: r for r in measured_runs()}
    pair = [runs["timers0/a_mb8"], runs["timers0/d_mb8_24l"]]
    reads = None
    r, trace = 1.0, []
    for _ in range(iterations):
        prof = str(host_profile(folder, host_json, scale=r))
        reads = [read_run(x.args, prof) for x in pair]
        rows = compare(pair, [simulate(x.config) for x in reads])
        meas, sim = layer_pass_slope(rows)
        trace.append({"ratio": r, "simulated_per_pass_s": sim, "measured_per_pass_s": meas})
        if abs(sim / meas - 1) < 1e-4:
            break
        r *= meas / sim
    return {"host_json": Path(host_json).name, "ratio": trace[-1]["ratio"], "iterations": trace,
            "unscaled_per_pass_s": trace[0]["simulated_per_pass_s"], "measured_per_pass_s": trace[0]["measured_per_pass_s"]}


def write_ratio(path: Path, folder: Path) -> dict[str, Any]:
    """Solve the ratio on both plain-PyTorch measurements of the Megatron-LM machine and write their mean, with its
    derivation, to ``path`` (``profiles/h100-sxm-measured/megatron_ratio.json``, read by build_public_profiles)."""
    import statistics

    solved = [solve_ratio(folder, MEASURED_DIR / f) for f in ("host_vm2.json", "host_vm2_repeat.json")]
    ratio = statistics.fmean(s["ratio"] for s in solved)
    runs = {r.key: r for r in measured_runs()}
    a, d = runs["timers0/a_mb8"], runs["timers0/d_mb8_24l"]
    per = (d.median_s - a.median_s) / 96
    derivation = (
        "Megatron-LM's layer host cost over dcpsim's pricing of the same layer from plain-PyTorch figures, measured on "
        "one lent H100 80GB HBM3 (KVM, 16 vCPUs of an Intel Xeon, torch 2.11.0+cu130), 2026-11-27: pretrain_gpt.py at "
        "d98e8a64, local transformer impl, the CI case gpt3_mcore_tp1_pp1_..._overlap_grad_reduce_param_gather's "
        f"flags on one GPU, 24 vs 12 layers at 8 microbatches, {d.median_s * 1e3:.0f} vs {a.median_s * 1e3:.0f} ms "
        f"per step (medians of {d.n} and {a.n}): {per * 1e3:.2f} ms per added layer pass; dcpsim's step on the same "
        "machine's plain-PyTorch [host] table (dcpsim.profiling.host: "
        + ", ".join(f"{s['host_json']} {s['unscaled_per_pass_s'] * 1e3:.2f} ms per pass, ratio {s['ratio']:.3f}"
                    for s in solved)
        + f") grows by that at x {ratio:.3f} (mean); experiments/host/megatron_1gpu_check.py --solve, "
        "profiles/h100-sxm-measured/megatron_steps.json, host_vm2*.json, megatron_ratio.json, MEASURED.md")
    out = {"ratio": ratio, "derivation": derivation, "solved": solved}
    Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def check(profile: str, runs: list[Run]) -> tuple[list[dict[str, Any]], list[ReadRun]]:
    """Read and simulate every run on ``profile``; the compared rows and what was read."""
    read = [read_run(r.args, profile) for r in runs]
    return compare(runs, [simulate(x.config) for x in read]), read


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host-json", default=str(HOST_VM2), help="plain-PyTorch host figures the [host] table is "
                    "rebuilt from (default host_vm2.json: the machine the Megatron-LM runs ran on)")
    ap.add_argument("--compare", nargs="*", default=["host_vm2_repeat.json", BASE_PROFILE],
                    help="extra columns: a host JSON in h100-sxm-measured/ (rebuilt the same way) or a profile name")
    ap.add_argument("--breakdown", default="timers0/b1_mb1", help="run whose simulated step is broken down "
                    "(host vs device, dcpsim.report.host); '' for none")
    ap.add_argument("--json", default=None, help="also write the rows and statistics here (JSON)")
    ap.add_argument("--solve", default=None, metavar="PATH", help="solve the Megatron-LM ratio (see solve_ratio) on "
                    "host_vm2.json and host_vm2_repeat.json, write it to PATH (profiles/h100-sxm-measured/"
                    "megatron_ratio.json) and stop")
    a = ap.parse_args(argv)
    if a.solve:
        with tempfile.TemporaryDirectory(prefix="dcpsim-mlm1gpu-") as tmp:
            out = write_ratio(Path(a.solve), Path(tmp))
        for s in out["solved"]:
            print(f"{s['host_json']}: " + ", ".join(f"x {t['ratio']:.4f} -> {t['simulated_per_pass_s'] * 1e3:.3f} ms"
                                                    for t in s["iterations"]))
        print(f"ratio {out['ratio']:.4f} -> {a.solve}")
        return 0
    runs = measured_runs()
    with tempfile.TemporaryDirectory(prefix="dcpsim-mlm1gpu-") as tmp:
        profile = str(host_profile(Path(tmp), Path(a.host_json)))
        rows, read = check(profile, runs)
        extra = {}
        for c in a.compare:
            prof = str(host_profile(Path(tmp), MEASURED_DIR / c)) if c.endswith(".json") else c
            extra[c.replace(".json", "") + " [host]" if c.endswith(".json") else c + " (shipped)"] = check(prof, runs)[0]
        bd = None
        if a.breakdown:
            i = [r.key for r in runs].index(a.breakdown)
            bd = simulate(read[i].config, breakdown=True)
    dropped = sorted({d for x in read for d in x.dropped})
    print(f"profile: {BASE_PROFILE} with [host] rebuilt from {Path(a.host_json).name} (x Megatron-LM ratio "
          f"{_build_module().megatron_module_scale()[0]:.3f}); flags dropped: {dropped or 'none'}\n")
    print("reader notes (every run): " + "; ".join(read[0].notes) + "\n")
    print(table_markdown(rows, extra))
    meas, sim = layer_pass_slope(rows)
    print(f"Per added layer pass (d_mb8_24l - a_mb8) / 96: measured {meas * 1e3:.2f} ms, simulated {sim * 1e3:.2f} ms "
          f"({sim / meas - 1:+.0%})\n")
    if bd is not None:
        print(f"Simulated step of {a.breakdown}, stage 0 rank 0 (host vs device):\n\n{bd['table']}")
    if a.json:
        payload = {"host_json": Path(a.host_json).name, "dropped": dropped, "rows": rows,
                   "stats": {s: stats(rows, s) for s in ("in-sample (ratio)", "held-out", "secondary (timers on)")},
                   "extra": extra, "layer_pass_slope_s": dict(zip(("measured", "simulated"), layer_pass_slope(rows), strict=True)),
                   "breakdown": {k: v for k, v in (bd or {}).items() if k != "table"}}
        Path(a.json).write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
