"""The published-throughput suite: rows of ``experiments/published_throughput`` as run configurations.

Each CSV row is one published Megatron-LM / NeMo training run. :func:`load_suite`
reads the rows and ``suite.toml`` (families, fit/held-out split, source
groups); :func:`row_config` turns a row into a :class:`~dcpsim.run.config.RunConfig`
for :func:`dcpsim.run.single.run_simulation` (the code path of ``dcpsim
simulate``), or says why the row cannot be expressed yet.

Reading a row (every assumption is recorded in the row's ``assumptions``):

* model: an inline spec from the row's dimensions (layers, hidden, heads,
  KV heads, ffn, vocab), head_dim = hidden / heads, MLP type and embedding
  tying from the family (``suite.toml``); the vocabulary is padded as
  Megatron does (``--make-vocab-size-divisible-by 128`` times TP). ``~50k``
  is read as GPT-2 BPE (50,257; the NeMo GPT-3 recipes use it).
* data: fixed-length windows of ``seq_len`` (full causal window, Megatron's
  default mask), ``mbs`` windows per microbatch (1 where not published),
  static CP (the ``packing`` policy).
* recompute: ``not stated`` is Megatron's default, none.
* precision: FP16 (A100 rows) runs at the BF16 rate (same tensor-core peak).
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.schema import read_toml

SUITE_DIR_NAME = "experiments/published_throughput"
VOCAB_DIVISOR = 128  # Megatron --make-vocab-size-divisible-by default
GPT2_BPE_VOCAB = 50257
GPU_PROFILES = {"H100-SXM-80GB": "h100-sxm", "A100-SXM-80GB": "a100-sxm-80gb"}


def default_suite_dir() -> Path:
    """``experiments/published_throughput`` of the checkout, or of the installed wheel (:mod:`dcpsim.resources`)."""
    from dcpsim.resources import data_dir

    return data_dir("experiments") / Path(SUITE_DIR_NAME).name


def parse_ranges(text: str) -> list[int]:
    """``"1-3,7"`` -> ``[1, 2, 3, 7]``."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


@dataclass
class Row:
    """One published run (CSV fields kept verbatim in ``raw``) and how the suite classifies it."""

    id: int
    raw: dict[str, str]
    family: str
    split: str  # "fit" | "held-out"
    source_group: str
    family_spec: dict[str, Any]
    settings: list[dict[str, Any]] = field(default_factory=list)  # suite.toml [[settings]] entries naming this row

    @property
    def model(self) -> str:
        return self.raw["model"]

    @property
    def gpus(self) -> int:
        return int(self.raw["gpus"])

    @property
    def measured(self) -> float:
        """Published tokens/s per GPU."""
        return float(self.raw["tokens_per_s_per_gpu"])

    @property
    def gpu_name(self) -> str:
        return self.raw["gpu"].split(" (")[0].strip()

    @property
    def precision(self) -> str:
        p = self.raw["precision"].upper()
        return "fp8" if p.startswith("FP8") else "fp16" if p.startswith("FP16") else "bf16"

    @property
    def group(self) -> str:
        """GPU x precision x source (the unit the error table averages over)."""
        return f"{self.gpu_name} {self.precision.upper()} {self.source_group}"

    @property
    def trust(self) -> str:
        m = re.match(r"\[trust ([^\]\s;]+)", self.raw["notes"])
        return m.group(1) if m else "?"

    def intval(self, key: str, default: int | None = None) -> int | None:
        v = self.raw.get(key, "").strip()
        return int(float(v)) if v else default

    @property
    def layout(self) -> str:
        r = self
        s = f"TP{r.intval('tp')} PP{r.intval('pp')} CP{r.intval('cp', 1)} DP{r.intval('dp')}"
        vp = r.intval("vp")
        return s + (f" VP{vp}" if vp and vp > 1 else "")


@dataclass
class Suite:
    rows: list[Row]
    path: Path
    data_sha256: str
    meta: dict[str, Any] = field(default_factory=dict)

    def select(self, ids: list[int] | None) -> list[Row]:
        if ids is None:
            return list(self.rows)
        known = {r.id: r for r in self.rows}
        bad = [i for i in ids if i not in known]
        if bad:
            raise ConfigError("--rows", bad, f"row ids in 1..{len(self.rows)}")
        return [known[i] for i in ids]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_suite(suite_dir: str | Path | None = None) -> Suite:
    """Read ``suite.toml`` and its CSV; check the data hash."""
    d = Path(suite_dir) if suite_dir is not None else default_suite_dir()
    meta_path = d / "suite.toml"
    if not meta_path.is_file():
        raise ConfigError("--suite", str(d), "a folder with suite.toml and the published CSV "
                          f"(the source tree's {SUITE_DIR_NAME})")
    meta = read_toml(meta_path, "suite.toml")
    data = d / meta.get("data", "published_throughput.csv")
    if not data.is_file():
        raise ConfigError("suite.toml data", str(data), "an existing CSV file")
    sha = _sha256(data)
    if meta.get("data_sha256") and meta["data_sha256"] != sha:
        raise ConfigError("suite.toml data_sha256", meta["data_sha256"], f"the hash of {data.name} ({sha})")
    with data.open(newline="") as fh:
        raw_rows = list(csv.DictReader(fh))
    fam_of: dict[int, str] = {}
    for name, fam in meta.get("families", {}).items():
        for i in parse_ranges(fam["rows"]):
            fam_of[i] = name
    rows = []
    for i, raw in enumerate(raw_rows, start=1):
        fam = fam_of.get(i)
        if fam is None:
            raise ConfigError("suite.toml families", i, "every CSV row in exactly one family")
        spec = meta["families"][fam]
        held = set(parse_ranges(spec.get("held_out_rows", "")))
        split = "held-out" if spec.get("split") == "held-out" or i in held else "fit"
        src = next((g for g, prefix in meta.get("sources", {}).items() if raw["source"].startswith(prefix)), "other")
        settings = [st for st in meta.get("settings", []) if i in parse_ranges(st["rows"])]
        rows.append(Row(i, raw, fam, split, src, spec, settings))
    return Suite(rows, data, sha, meta)


# ---------------------------------------------------------------- row -> config
def parse_vocab(text: str) -> tuple[int, str | None]:
    """The vocabulary size of a row (before Megatron's padding) and the assumption made, if any."""
    t = str(text).strip()
    if re.fullmatch(r"\d+", t):
        return int(t), None
    m = re.match(r"(\d+)\s*\(", t)
    if m:
        return int(m.group(1)), f"vocab '{t}': {m.group(1)} tokens before Megatron's padding"
    if t.lower() in ("~50k", "50k"):
        return GPT2_BPE_VOCAB, f"vocab '{t}' read as GPT-2 BPE ({GPT2_BPE_VOCAB}), as the NeMo GPT-3 recipes use"
    raise ConfigError("vocab", t, "a token count, 'N (...)' or '~50k'")


def padded_vocab(vocab: int, tp: int) -> int:
    """Megatron's padded vocabulary: a multiple of 128 * TP."""
    q = VOCAB_DIVISOR * tp
    return int(math.ceil(vocab / q) * q)


def model_spec(row: Row) -> tuple[dict[str, Any], list[str]]:
    """Inline model spec (ModelSpec fields) from the row's dimensions, and the assumptions made."""
    r = row.raw
    notes: list[str] = []
    vocab, note = parse_vocab(r["vocab"])
    if note:
        notes.append(note)
    tp = row.intval("tp", 1)
    pv = padded_vocab(vocab, tp)
    if pv != vocab:
        notes.append(f"vocab padded {vocab} -> {pv} (multiple of 128*TP)")
    fam = row.family_spec
    spec = {
        "name": r["model"],
        "n_layers": int(r["n_layers"]),
        "hidden": int(r["hidden"]),
        "n_heads": int(r["n_heads"]),
        "n_kv_heads": int(r["n_kv_heads"] or r["n_heads"]),
        "ffn_hidden": int(r["ffn"]),
        "vocab": pv,
        "gated_mlp": bool(fam.get("gated_mlp", False)),
        "tied_embeddings": bool(fam.get("tied_embeddings", False)),
        "hidden_dropout": float(fam.get("hidden_dropout", 0.0)),
        "source": f"published_throughput.csv row {row.id} ({fam.get('arch', row.family)})",
    }
    return spec, notes


@dataclass
class RowConfig:
    """A row turned into a run configuration, or the reason it cannot be expressed yet."""

    row: Row
    config: Any | None  # RunConfig
    reason: str | None
    assumptions: list[str]


def _fields(section: str) -> set[str]:
    from dcpsim.run.config import RunConfig

    return set(RunConfig.model_fields[section].annotation.model_fields)


def _layout_reason(row: Row) -> str | None:
    tp, pp, cp, dp = (row.intval(k, 1) for k in ("tp", "pp", "cp", "dp"))
    ep = row.intval("ep", 1)
    if ep != 1:
        return f"expert parallelism (ep={ep}) is not modelled"
    if tp * pp * cp * dp != row.gpus:
        return f"layout tp*pp*cp*dp = {tp * pp * cp * dp} != {row.gpus} GPUs"
    return None


def _recompute(row: Row, notes: list[str]) -> str:
    text = row.raw["recompute"].strip()
    for mode in ("full", "selective"):
        if text.lower().startswith(mode):
            return mode
    notes.append(f"recompute '{text}': Megatron's default, none")
    return "none"


def _parallel(row: Row, notes: list[str]) -> tuple[dict[str, Any], str | None]:
    """The [parallel] section of a row, and the mechanism it needs that this build lacks (if any)."""
    par = _fields("parallel")
    mbs = row.intval("mbs")
    if mbs is None:
        mbs = 1
        notes.append("mbs not published: 1")
    parallel: dict[str, Any] = {"tp": row.intval("tp"), "pp": row.intval("pp"), "cp": row.intval("cp", 1),
                                "mbs": mbs, "recompute": _recompute(row, notes), "cp_comm": "p2p"}
    missing = None
    vp = row.intval("vp", 1) or 1
    if vp > 1:
        if "vp" in par:
            parallel["vp"] = vp
        else:
            missing = f"needs the interleaved pipeline (vp={vp}; no parallel.vp in this build)"
    if row.precision == "fp8":
        if "precision" in par:
            parallel["precision"] = "fp8"
        else:
            missing = missing or "needs FP8 GEMMs (no parallel.precision in this build)"
    elif row.precision == "fp16":
        notes.append("FP16 mixed precision at the BF16 rate (same tensor-core peak)")
    for st in row.settings:  # per-release kernel choices with their source (suite.toml [[settings]] parallel = {...})
        parallel.update({k: v for k, v in st.get("parallel", {}).items() if k in par})
    return parallel, missing


def _sim(row: Row, notes: list[str]) -> dict[str, Any]:
    sim_fields = _fields("sim")
    sim: dict[str, Any] = {"iterations": 1, "seed": 0, "planning": "ignore"}
    sim.update({k: v for k, v in row.family_spec.get("sim", {}).items() if k in sim_fields})
    for st in row.settings:  # per-release settings with their source (suite.toml [[settings]])
        sim.update({k: v for k, v in st.get("sim", {}).items() if k in sim_fields})
        notes.append(st["note"])
    if "--tp-comm-overlap" in row.raw["notes"] and "tp_comm_overlap" in sim_fields:
        sim["tp_comm_overlap"] = True
    return sim


def row_dict(row: Row) -> tuple[dict[str, Any], list[str], str | None]:
    """The config dict of a row, its assumptions, and a reason when a needed mechanism is missing."""
    spec, notes = model_spec(row)
    parallel, missing = _parallel(row, notes)
    reason = _layout_reason(row) or missing
    gpu = GPU_PROFILES.get(row.gpu_name)
    if gpu is None:
        reason = reason or f"no hardware profile for {row.gpu_name}"
    d = {
        "model": {"name": spec},
        "hardware": {"gpu": gpu or "h100-sxm"},
        "cluster": {"gpus": row.gpus},
        "parallel": parallel,
        "workload": {"name": "fixed", "seq_len": int(row.raw["seq_len"]), "gbs": int(row.raw["gbs"])},
        "policy": {"name": "packing"},
        "sim": _sim(row, notes),
    }
    return d, notes, reason


def row_config(row: Row) -> RowConfig:
    """A validated RunConfig for ``row``, or the reason it cannot be expressed (never an exception)."""
    from dcpsim.errors import DcpsimError
    from dcpsim.run.load import config_from_dict

    d, notes, reason = row_dict(row)
    if reason is not None:
        return RowConfig(row, None, reason, notes)
    try:
        cfg = config_from_dict(d, where=f"published row {row.id}")
    except DcpsimError as exc:
        return RowConfig(row, None, f"invalid layout: {exc}", notes)
    return RowConfig(row, cfg, None, notes)
