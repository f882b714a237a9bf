"""Held-out check of dcpsim's host + device step model against the H100 host measurements.

Run: ``python experiments/host/heldout_check.py [--profile h100-sxm] [--json PATH]``

Measured (``profiles/h100-sxm-measured/``, MEASURED.md): a plain-PyTorch GPT (LayerNorm, biases, GELU MLP
4h, learned positions, untied output layer, SDPA cuDNN causal attention, ``logits.float()`` then
``F.cross_entropy``, BF16 weights, fused Adam) on one H100: per microbatch the host's issue time (eager) and the
device time (the microbatch as one CUDA graph, replayed), and a step of ``microbatches`` microbatches + one
loss read (``.item()``) + ``clip_grad_norm_`` + Adam, eager and with each microbatch one CUDA graph.
``host.json`` (12 layers, hidden 512) is the row the host parameters were taken from (in-sample);
``host_check.json`` holds 8 other shapes measured in a second run, used for no parameter (held out).
``--measured profiles/h200-sxm-measured``: the same tiny GPT measured on a lent H200 machine (host.json only),
split ``other-machine``: no [host] figure was taken from that machine.

Simulated: the same step on 1 GPU (TP1 PP1 CP1 DP1), model spec of the measured shape (``gated_mlp = false``,
``ffn_hidden = 4h``, untied embeddings, vocab 50304), the fixed workload (``mbs`` sequences of ``seq``
tokens per microbatch, ``gbs = mbs x microbatches``), no recomputation, flash attention, unfused cross
entropy, eager (``step.cuda_graphs = "none"``) and graphed (``"local"``), the step's flags set to what the
measured loop does (no per-microbatch loss NaN check; one loss read every step = ``log_interval = 1``;
``clip_grad = 1``). Nothing measured is an input of the simulation: the measured values are only compared.

What dcpsim cannot express (say so beside the numbers): its kernel counts per layer are Megatron-Core with
Transformer Engine (12 forward + 20 backward; the plain-torch block launches 11 + 42), its host per-kernel
costs are the plain-torch block's per-kernel means, so a layer's host time is priced at 32 kernels; its
CUDA graphs capture each transformer layer (embedding, head, loss and per-microbatch Python stay eager)
where the measurement captured the whole microbatch; its optimizer is Megatron's mixed-precision Adam
(FP32 main weights and states) where the measured Adam runs on BF16 weights; LayerNorm vs RMSNorm, biases
and learned position embeddings are not distinguished (their FLOPs and bytes are small here).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MEASURED_DIR = ROOT / "profiles" / "h100-sxm-measured"
DEFAULT_PROFILE = "h100-sxm"  # the shipped profile whose [host] table is the H100 host measurement
# The shipped [host] table prices Megatron-LM's modules: the plain-PyTorch measurement times the measured ratio of
# a Megatron-LM layer's host cost to the plain block's (profiles/build_public_profiles.py megatron_module_scale).
# The rows checked here are plain PyTorch, so they are simulated with that ratio taken back out (plain_profile).
_PLAIN: dict[str, str] = {}
# columns compared: (key, measured field in the JSON rows, label)
COLUMNS = (("eager_step_s", "eager_step_s", "eager step"),
           ("graphed_step_s", "graphed_step_s", "graphed step"),
           ("micro_host_s", "micro_issue_host_s", "micro host issue"),
           ("micro_device_s", "micro_graph_device_s", "micro device"))


@dataclass(frozen=True)
class Shape:
    """One measured run's shape (the measured script's names)."""

    layers: int
    hidden: int
    heads: int
    seq: int
    micro_batch: int
    microbatches: int
    vocab: int

    @property
    def label(self) -> str:
        return f"L{self.layers} h{self.hidden} s{self.seq} mbs{self.micro_batch} x{self.microbatches}"


def measured_rows(measured_dir: Path = MEASURED_DIR) -> list[dict[str, Any]]:
    """The in-sample row (``host.json`` tiny GPT, ``split = "in-sample"``) and the held-out rows
    (``host_check.json``, ``split = "held-out"``): shape and the measured medians (seconds)."""
    rows = []
    # host.json's row is in-sample only on the machine the shipped [host] tables were measured on
    first = "in-sample" if measured_dir.resolve() == MEASURED_DIR.resolve() else "other-machine"
    src = [(measured_dir / "host.json", first), (measured_dir / "host_check.json", "held-out")]
    for path, split in src:
        if split == "held-out" and not path.exists():  # a machine measured with dcpsim.profiling.host alone
            continue
        data = json.loads(path.read_text())
        raw = [data["tiny_gpt"]] if "tiny_gpt" in data else list(data["rows"])
        for r in raw:
            row = {"split": split, "source": path.name, "shape": Shape(**r["shape"]),
                   "kernels_measured": r.get("micro_kernels")}
            for key, field, _ in COLUMNS:
                row[f"measured_{key}"] = float(r[field]["median_s"]) if field in r else math.nan
            rows.append(row)
    return rows


def run_config(shape: Shape, profile: str, cuda_graphs: str):
    """The dcpsim run of one measured step (see the module docstring for the choices)."""
    from dcpsim.run.load import config_from_dict

    model = {"name": f"plain-gpt-L{shape.layers}-h{shape.hidden}", "n_layers": shape.layers, "hidden": shape.hidden,
             "n_heads": shape.heads, "ffn_hidden": 4 * shape.hidden, "vocab": shape.vocab, "gated_mlp": False,
             "tied_embeddings": False,
             "source": "plain-PyTorch GPT of dcpsim.profiling.host (LayerNorm, biases, GELU, learned positions)"}
    return config_from_dict({
        "model": {"name": model},
        "hardware": {"gpu": profile},
        "cluster": {"gpus": 1},
        "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": shape.micro_batch, "recompute": "none",
                     "attention": "flash", "cross_entropy": "unfused", "precision": "bf16"},
        "workload": {"name": "fixed", "seq_len": shape.seq, "gbs": shape.micro_batch * shape.microbatches},
        "policy": {"name": "packing"},
        "sim": {"iterations": 1, "seed": 0},
        "step": {"cuda_graphs": cuda_graphs, "transformer_impl": "local", "log_interval": 1, "clip_grad": 1.0,
                 "check_for_nan_in_loss_and_grad": False},
    })


def megatron_module_scale() -> float:
    """The ratio the shipped [host] tables carry (Megatron-LM layer over plain-PyTorch block, measured)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_public_profiles", ROOT / "profiles" / "build_public_profiles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return float(mod.megatron_module_scale()[0])


def plain_profile(folder: Path, base: str = DEFAULT_PROFILE) -> Path:
    """``base`` with its framework-Python host costs divided by :func:`megatron_module_scale`: the plain-PyTorch
    host table measured in host.json, which is what the checked rows ran (a profile written under ``folder``)."""
    from dataclasses import replace

    from dcpsim.hardware import get_profile
    from dcpsim.hardware.profile import write_profile
    from dcpsim.published.fitting import HOST_SCALED

    prof, r = get_profile(base), megatron_module_scale()
    host = replace(prof.host, **{k: getattr(prof.host, k) / r for k in HOST_SCALED})
    return write_profile(replace(prof, name=f"{prof.name}-plain-torch", host=host,
                                 description=f"{prof.name} with its [host] table's Megatron-LM ratio {r:.3f} "
                                             "taken out (plain-PyTorch modules)"), folder / f"{prof.name}-plain")


def simulate(shape: Shape, profile: str | None = None) -> dict[str, float]:
    """Simulated step times (eager, graphed) and the first microbatch's host issue and device time (seconds),
    from the per-rank step breakdown (:func:`dcpsim.report.host.rank_step`) of the eager run. ``profile``
    None: the shipped h100-sxm as plain PyTorch (:func:`plain_profile`, written once to a temporary folder)."""
    from dcpsim.report.host import rank_step
    from dcpsim.run.single import run_simulation

    if profile is None:
        if "path" not in _PLAIN:
            import tempfile

            _PLAIN["path"] = str(plain_profile(Path(tempfile.mkdtemp(prefix="dcpsim-plain-"))))
        profile = _PLAIN["path"]
    out: dict[str, float] = {}
    for graphs, key in (("none", "eager_step_s"), ("local", "graphed_step_s")):
        res = run_simulation(run_config(shape, profile, graphs))
        out[key] = float(res.summary["iteration_time_s"])
        if graphs == "none":
            step = rank_step(res.records[0], stage=0, rank=0)
            first = [r for r in step.rows if r["microbatch"] == step.rows[0]["microbatch"]]
            out["micro_host_s"] = sum(r["host_s"] for r in first)
            out["micro_device_s"] = sum(r["device_s"] for r in first)
            out["microbatches_simulated"] = float(len({r["microbatch"] for r in step.rows}))
    return out


def relative_error(simulated: float, measured: float) -> float:
    """(simulated - measured) / measured; NaN when either is missing or the measurement is not positive."""
    if not (math.isfinite(simulated) and math.isfinite(measured)) or measured <= 0:
        return math.nan
    return (simulated - measured) / measured


def compare(rows: list[dict[str, Any]], sims: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Rows with ``simulated_<col>`` and ``error_<col>`` (relative, signed) added for every column."""
    out = []
    for row, sim in zip(rows, sims, strict=True):
        r = dict(row)
        for key, _, _ in COLUMNS:
            r[f"simulated_{key}"] = float(sim.get(key, math.nan))
            r[f"error_{key}"] = relative_error(r[f"simulated_{key}"], r[f"measured_{key}"])
        out.append(r)
    return out


def stats(rows: list[dict[str, Any]], split: str = "held-out") -> dict[str, dict[str, float]]:
    """Per column over the ``split`` rows: mean |error|, worst |error|, mean signed error and the row count."""
    out = {}
    for key, _, _ in COLUMNS:
        e = [r[f"error_{key}"] for r in rows if r["split"] == split and math.isfinite(r[f"error_{key}"])]
        out[key] = {"n": float(len(e)), "mean_abs": sum(abs(x) for x in e) / len(e) if e else math.nan,
                    "worst_abs": max((abs(x) for x in e), default=math.nan),
                    "mean_signed": sum(e) / len(e) if e else math.nan}
    return out


def table_markdown(rows: list[dict[str, Any]]) -> str:
    """The comparison as Markdown: milliseconds measured / simulated and the signed error per column."""
    head = "| split | shape | " + " | ".join(f"{lab} ms meas / sim (err)" for _, _, lab in COLUMNS) + " |"
    lines = [head, "|---|---|" + "---:|" * len(COLUMNS)]
    for r in rows:
        cells = []
        for key, _, _ in COLUMNS:
            m, s, e = r[f"measured_{key}"], r[f"simulated_{key}"], r[f"error_{key}"]
            cells.append(f"{m * 1e3:.1f} / {s * 1e3:.1f} ({e:+.0%})")
        lines.append(f"| {r['split']} | {r['shape'].label} | " + " | ".join(cells) + " |")
    st = stats(rows)
    lines += ["", "| held-out (8 rows) | " + " | ".join(lab for _, _, lab in COLUMNS) + " |",
              "|---|" + "---:|" * len(COLUMNS)]
    for name, k in (("mean abs error", "mean_abs"), ("worst abs error", "worst_abs"), ("mean signed error", "mean_signed")):
        lines.append(f"| {name} | " + " | ".join(f"{st[c][k]:.0%}" for c, _, _ in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def measured_device_profile(folder: Path, host_from: str = DEFAULT_PROFILE, measured_dir: Path = MEASURED_DIR) -> Path:
    """A profile folder (written under ``folder``) with the kernel tables of ``h100-sxm-measured`` (GEMM and
    attention measured on an H100 with ``dcpsim profile``; collectives and peaks copied from h100-sxm) and the
    ``[host]`` table of ``host_from`` (its per-kernel launch floor 0, as a [host] table requires). The device
    tables are the measured ones, not a fit: the variant asks how much of the device column is the public
    tables'."""
    from dataclasses import replace

    from dcpsim.hardware import get_profile
    from dcpsim.hardware.profile import write_profile

    dev, base = get_profile(str(measured_dir)), get_profile(host_from)
    sources = {k: v for k, v in dev.sources.items() if not k.startswith("host.")}
    sources.update({k: v for k, v in base.sources.items() if k.startswith("host.") or k == "host_cpu"})
    sources["timing.per_kernel_overhead_s"] = "0: kernel launches are priced by the [host] table"
    # timing fields the measured profile predates (no source there): the base profile's value and source
    from dataclasses import fields

    missing = {f.name: getattr(base.timing, f.name) for f in fields(dev.timing)
               if f"timing.{f.name}" not in sources and f"timing.{f.name}" in base.sources}
    sources.update({f"timing.{k}": base.sources[f"timing.{k}"] for k in missing})
    prof = replace(dev, name=f"{dev.name}-with-host", host=base.host, host_cpu=base.host_cpu,
                   timing=replace(dev.timing, per_kernel_overhead_s=0.0, **missing), sources=sources,
                   description=f"{dev.name} kernel tables with the [host] table of {host_from}")
    return write_profile(prof, folder / f"{dev.name}-with-host")


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=DEFAULT_PROFILE, help="hardware profile with a [host] table (literal name "
                    "or folder; default h100-sxm, the shipped profile carrying the measured H100 host table)")
    ap.add_argument("--measured-device-tables", action="store_true", help="use the --measured folder's GEMM/attention "
                    "tables with --profile's [host] table (a profile written to a temporary folder)")
    ap.add_argument("--as-shipped", action="store_true", help="keep --profile's [host] table as shipped (Megatron-LM "
                    "modules) instead of taking the measured Megatron-LM ratio back out (plain PyTorch, the default)")
    ap.add_argument("--measured", default=str(MEASURED_DIR), help="measured profile folder whose host.json (and "
                    "host_check.json, when there) hold the measured rows; default profiles/h100-sxm-measured")
    ap.add_argument("--json", default=None, help="also write the rows and statistics here (JSON)")
    a = ap.parse_args(argv)
    measured = Path(a.measured)
    if not (measured / "host.json").is_file():
        ap.error(f"--measured {a.measured!r}: expected a folder holding host.json (dcpsim.profiling.host's output)")
    rows = measured_rows(measured)
    with tempfile.TemporaryDirectory(prefix="dcpsim-heldout-") as tmp:
        profile = a.profile if a.as_shipped else str(plain_profile(Path(tmp), a.profile))
        profile = str(measured_device_profile(Path(tmp), profile, measured)) if a.measured_device_tables else profile
        done = compare(rows, [simulate(r["shape"], profile) for r in rows])
    label = a.profile + ("" if a.as_shipped else " (Megatron-LM host ratio taken out: plain PyTorch)")
    label = f"{measured.name} kernel tables + [host] of {label}" if a.measured_device_tables else label
    label += f"; measured rows: {measured}"
    print(f"profile: {label}\n")
    print(table_markdown(done))
    if a.json:
        payload = {"profile": label, "stats_held_out": stats(done), "stats_in_sample": stats(done, "in-sample"),
                   "stats_other_machine": stats(done, "other-machine"),
                   "rows": [{**r, "shape": r["shape"].__dict__} for r in done]}
        Path(a.json).write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
