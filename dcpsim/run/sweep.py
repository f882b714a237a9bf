"""Sweeps: many runs from one base configuration, results in a resumable parquet dataset.

A sweep spec is a TOML file::

    # the base run: a RunConfig table (see dcpsim/run/config.py) ...
    [base]
    cluster.gpus = 64
    workload.gbs = 256
    # ... or a path to a run file, relative to the spec:  base = "run.toml"

    [sweep]                     # optional
    name = "example"
    seed = 0                    # default seed of random axis groups

    # One axis group (a table), or several ([[axes]], an array of tables).
    # Groups combine as a Cartesian product; a field may appear in one group only.
    [[axes]]                    # grid (default): every combination of the lists
    policy.name = ["packing", "dynamic"]
    cluster.gpus = [64, 128]

    [[axes]]
    mode = "zip"                # lists of equal length move together
    workload.name = ["github", "commoncrawl"]
    workload.max_len = [131072, 65536]

    [[axes]]
    mode = "random"             # `samples` seeded draws
    samples = 8
    seed = 1
    hardware.network_scale = {dist = "loguniform", low = 0.25, high = 4.0}
    sim.seed = {dist = "randint", low = 0, high = 999}      # both ends included
    parallel.min_cp = {choices = [1, 2], weights = [3, 1]}  # or a plain list

Axis fields are dotted paths into the run configuration (TOML turns an
unquoted ``policy.name`` into a nested table; both spellings are accepted).
Random distributions: ``uniform`` and ``loguniform`` (floats in [low, high)),
``randint`` (integers in [low, high]) and ``choices`` (optional ``weights``).

Each run is identified by ``RunConfig.config_hash()`` of its resolved
configuration; a combination that fails validation gets the id
``invalid-<hash of base + updates>`` and becomes a row with ``status="error"``.

Output directory::

    DIR/spec.toml          copy of the spec file (when the spec came from a file)
    DIR/sweep.json         resolved spec: base configuration, axes, every run's id and updates
    DIR/results/part-*.parquet   one part per finished batch (written to a temporary
                                 file and renamed, so a killed sweep loses nothing finished)
    DIR/figures/           standard figures (see dcpsim.report.plots.standard_figures)
    DIR/**/.dcpsim-manifest.json  the files dcpsim wrote in each folder (see dcpsim.outdir)
    DIR/.dcpsim-lock       held while a sweep runs (one sweep per folder)

DIR may not hold files dcpsim did not write (refused before any work unless
``force``); part files in ``results/`` that this sweep did not write are
ignored and named in a warning, never read, merged or deleted. An unreadable
part of its own (a truncated disk write) is reported and its runs run again.

One row per run: the simulator's ``summary`` (flat; dict and list values as
JSON strings), the swept values (columns named by dotted path), and
``config_hash``, ``status`` (``ok`` | ``infeasible`` | ``error`` | ``failed``),
``reason``, ``wall_s`` (seconds the run took), ``cpu_s`` (CPU seconds of the
worker process during the run), ``sweep_session`` and
``finished_at`` (Unix seconds). ``infeasible`` is an
:class:`~dcpsim.errors.InfeasibleError`, ``error`` any other dcpsim error
(bad configuration), ``failed`` an unexpected exception (a bug: reported,
and retried when the sweep is started again). Starting a sweep again on the
same directory skips every run already recorded as ok, infeasible or error.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import itertools
import json
import math
import os
import signal
import threading
import time
import tomllib
import traceback
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import numpy as np
from pydantic import Field, model_validator

from dcpsim.errors import ConfigError, DcpsimError, DcpsimWarning, InfeasibleError
from dcpsim.run.config import RunConfig, config_from_dict, load_config
from dcpsim.run.pool import WORKER_ATTEMPTS, is_worker_death, restart_broken, retry_alone
from dcpsim.serialize import to_jsonable
from dcpsim.validation import InputModel, validate_model

AXIS_MODES = ("grid", "zip", "random")
RandomDist = Literal["uniform", "loguniform", "randint"]
RANDOM_DISTS = get_args(RandomDist)
_GROUP_KEYS = {"mode", "samples", "seed"}
DONE_STATUSES = ("ok", "infeasible", "error")
RESULTS_DIR = "results"
PART_GLOB = "part-*.parquet"

Runner = Callable[[RunConfig], Any]


# ====================================================================== spec
@dataclass(frozen=True)
class AxisGroup:
    """One group of swept fields.

    ``values[i]`` belongs to ``fields[i]``: a list of values (grid, zip) or a
    distribution table (random; see the module docstring).
    """

    mode: str
    fields: tuple[str, ...]
    values: tuple[Any, ...]
    samples: int = 0
    seed: int = 0

    def assignments(self) -> list[dict[str, Any]]:
        """Every assignment of this group, as ``{dotted field: value}`` dicts, in a fixed order."""
        if self.mode == "grid":
            return [dict(zip(self.fields, combo, strict=True)) for combo in itertools.product(*self.values)]
        if self.mode == "zip":
            return [dict(zip(self.fields, combo, strict=True)) for combo in zip(*self.values, strict=True)]
        rng = np.random.default_rng(self.seed)
        out = []
        for _ in range(self.samples):
            out.append({f: _draw(f, d, rng) for f, d in zip(self.fields, self.values, strict=True)})
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mode": self.mode, "fields": dict(zip(self.fields, self.values, strict=True))}
        if self.mode == "random":
            d |= {"samples": self.samples, "seed": self.seed}
        return d


@dataclass(frozen=True)
class RunSpec:
    """One resolved run of a sweep: its id, the swept values, and its configuration (or why it has none)."""

    run_hash: str
    axes: dict[str, Any]
    config: RunConfig | None
    error: str | None = None


@dataclass(frozen=True)
class SweepSpec:
    """A base configuration and the axis groups swept over it."""

    base: RunConfig
    groups: tuple[AxisGroup, ...] = ()
    name: str = "sweep"
    seed: int = 0
    source: str | None = None
    source_text: str | None = None

    @property
    def axis_fields(self) -> list[str]:
        return [f for g in self.groups for f in g.fields]

    def assignments(self) -> list[dict[str, Any]]:
        """Every combination of the groups' assignments (Cartesian product across groups)."""
        combos: list[dict[str, Any]] = [{}]
        for g in self.groups:
            combos = [c | a for c in combos for a in g.assignments()]
        return combos

    def runs(self) -> list[RunSpec]:
        """The distinct runs, in spec order (combinations that resolve to the same configuration run once)."""
        base_hash = self.base.config_hash()
        seen: set[str] = set()
        out = []
        for assign in self.assignments():
            try:
                cfg = self.base.with_updates(assign)
                rs = RunSpec(cfg.config_hash(), assign, cfg)
            except DcpsimError as exc:
                blob = json.dumps([base_hash, _jsonable(assign)], sort_keys=True, default=str)
                rs = RunSpec("invalid-" + hashlib.sha256(blob.encode()).hexdigest()[:12], assign, None, str(exc))
            if rs.run_hash not in seen:
                seen.add(rs.run_hash)
                out.append(rs)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seed": self.seed,
            "source": self.source,
            "base": self.base.resolved(),
            "base_hash": self.base.config_hash(),
            "axes": [g.to_dict() for g in self.groups],
        }


def spec_hash(d: dict[str, Any]) -> str:
    """The id of a sweep spec from its :meth:`SweepSpec.to_dict` (or a ``sweep.json``): seed, base and axes.

    The spec's name and file path do not count: the same runs are the same sweep.
    """
    keep = {k: d.get(k) for k in ("seed", "base_hash", "axes")}
    text = json.dumps(json.loads(json.dumps(_jsonable(keep), default=str)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_sweep_spec(path: str | Path) -> SweepSpec:
    """Read a sweep spec from a TOML file (see the module docstring for the format; ``example:NAME`` works)."""
    from dcpsim.resources import resolve_input
    from dcpsim.validation import read_text

    p = resolve_input(path)
    if not p.is_file():
        raise ConfigError("spec", str(p), "an existing sweep spec TOML file")
    text = read_text(p, "spec")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("spec", str(p), f"valid TOML ({exc})") from None
    spec = sweep_spec_from_dict(data, where=str(p), base_dir=p.parent)
    return SweepSpec(spec.base, spec.groups, spec.name, spec.seed, source=str(p), source_text=text)


def sweep_spec_from_dict(d: dict[str, Any], *, where: str | None = None, base_dir: str | Path | None = None) -> SweepSpec:
    """Build a :class:`SweepSpec` from the parsed TOML (``base``, ``sweep``, ``axes`` keys)."""
    unknown = set(d) - {"base", "sweep", "axes"}
    if unknown:
        raise ConfigError("spec", sorted(unknown), "only the top-level keys base, sweep and axes", where=where)
    meta = d.get("sweep", {})
    if not isinstance(meta, dict) or set(meta) - {"name", "seed"}:
        raise ConfigError("sweep", meta, "a table with optional keys name and seed", where=where)
    name = str(meta.get("name", "sweep"))
    seed = meta.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError("sweep.seed", seed, "a non-negative integer", where=where)

    base_raw = d.get("base", {})
    if isinstance(base_raw, str):
        bp = Path(base_raw)
        if not bp.is_absolute() and base_dir is not None:
            bp = Path(base_dir) / bp
        base = load_config(bp)
    elif isinstance(base_raw, dict):
        base = config_from_dict(base_raw, where=f"{where}: [base]" if where else "[base]")
    else:
        raise ConfigError("base", base_raw, "a RunConfig table or a path to a run TOML file", where=where)

    axes_raw = d.get("axes", [])
    if isinstance(axes_raw, dict):
        axes_raw = [axes_raw]
    if not isinstance(axes_raw, list):
        raise ConfigError("axes", axes_raw, "a table or an array of tables ([[axes]])", where=where)
    base_dict = base.model_dump(mode="python")
    groups = []
    owner: dict[str, int] = {}
    for i, raw in enumerate(axes_raw):
        g = _parse_group(raw, i, seed, base_dict, where)
        for f in g.fields:
            if f in owner:
                raise ConfigError(f"axes[{i}].{f}", "", f"a field swept by one axis group only (also in axes[{owner[f]}])", where=where)
            owner[f] = i
        groups.append(g)
    return SweepSpec(base, tuple(groups), name, seed)


def _parse_group(raw: Any, i: int, default_seed: int, base_dict: dict, where: str | None) -> AxisGroup:
    label = f"axes[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(label, raw, "a table of dotted field = values", where=where)
    mode = raw.get("mode", "grid")
    if mode not in AXIS_MODES:
        raise ConfigError(f"{label}.mode", mode, f"one of {AXIS_MODES}", where=where)
    fields_map = _flatten_axis_fields({k: v for k, v in raw.items() if k not in _GROUP_KEYS}, mode)
    if not fields_map:
        raise ConfigError(label, raw, "at least one swept field", where=where)
    for f in fields_map:
        _check_field_path(f, base_dict, f"{label}.{f}", where)
    samples, seed = 0, default_seed
    if mode == "random":
        samples, seed = _random_group(raw, fields_map, label, default_seed, where)
    else:
        _list_group(raw, fields_map, mode, label, where)
    return AxisGroup(mode, tuple(fields_map), tuple(fields_map.values()), samples, seed)


def _random_group(raw: dict, fields_map: dict, label: str, default_seed: int, where: str | None) -> tuple[int, int]:
    """(samples, seed) of a random group; every field's distribution checked."""
    samples = raw.get("samples")
    if type(samples) is not int or samples < 1:
        raise ConfigError(f"{label}.samples", samples, "a positive integer (number of random draws)", where=where)
    seed = raw.get("seed", default_seed)
    if type(seed) is not int or seed < 0:
        raise ConfigError(f"{label}.seed", seed, "a non-negative integer", where=where)
    for f, dist in fields_map.items():
        _check_dist(dist, f"{label}.{f}", where)
        if isinstance(dist, (list, dict)) and "dist" not in dist:
            choices = dist if isinstance(dist, list) else dist["choices"]
            _check_values(f, choices, f"{label}.{f}", where)
    return samples, seed


def _check_values(path: str, values: list, label: str, where: str | None) -> None:
    """Each swept value has the field's declared type and bounds (cross-field rules are checked per run)."""
    from dcpsim.run.config import field_info
    from dcpsim.validation import check_value

    if path.startswith("policy.options."):
        return  # checked against the policy per run
    info = field_info(path)
    ann = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    for j, v in enumerate(values):
        check_value(ann, v, f"{label}[{j}]", where=where)


def _list_group(raw: dict, fields_map: dict, mode: str, label: str, where: str | None) -> None:
    """A grid or zip group: non-empty lists (of equal length for zip), no random-only keys."""
    for f, vals in fields_map.items():
        if not isinstance(vals, list) or not vals:
            raise ConfigError(f"{label}.{f}", vals, "a non-empty list of values", where=where)
        _check_values(f, vals, f"{label}.{f}", where)
    if mode == "zip":
        lens = {f: len(v) for f, v in fields_map.items()}
        if len(set(lens.values())) > 1:
            raise ConfigError(label, lens, "lists of equal length in a zip group", where=where)
    for k in ("samples", "seed"):
        if k in raw:
            raise ConfigError(f"{label}.{k}", raw[k], "no such key outside mode = \"random\"", where=where)


def _is_dist_table(v: Any) -> bool:
    return isinstance(v, dict) and ("dist" in v or "choices" in v)


def _flatten_axis_fields(d: dict[str, Any], mode: str, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and not (mode == "random" and _is_dist_table(v)):
            out |= _flatten_axis_fields(v, mode, path + ".")
        else:
            out[path] = v
    return out


def _check_field_path(path: str, base_dict: dict, label: str, where: str | None) -> None:
    keys = path.split(".")
    cur: Any = base_dict
    for j, k in enumerate(keys):
        if isinstance(cur, dict) and k in cur:
            cur = cur[k]
            continue
        if j >= 2 and keys[0] == "policy" and keys[1] == "options":
            return  # free-form policy options
        known = sorted(cur) if isinstance(cur, dict) else []
        raise ConfigError(label, path, f"a dotted path to a run-config field (known here: {known})", where=where)
    if isinstance(cur, dict) and not (keys[0] == "policy" and keys[-1] == "options"):
        raise ConfigError(label, path, "a field, not a whole section", where=where)


class _Choices(InputModel):
    """``{choices = [...], weights = [...]}``: one of the choices, optionally weighted."""

    choices: list[Any] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0)]] | None = None

    @model_validator(mode="after")
    def _weights(self) -> _Choices:
        if self.weights is not None and (len(self.weights) != len(self.choices) or sum(self.weights) <= 0):
            raise ConfigError("weights", self.weights, "non-negative numbers, one per choice, not all zero")
        return self


class _Range(InputModel):
    """``{dist = "uniform"|"loguniform"|"randint", low = ..., high = ...}``."""

    dist: RandomDist
    low: float
    high: float

    @model_validator(mode="after")
    def _bounds(self) -> _Range:
        if self.low > self.high or (self.dist != "randint" and self.low == self.high):
            raise ConfigError("high", self.high, f"> low ({self.low:g}) (randint: >= low)")
        if self.dist == "loguniform" and self.low <= 0:
            raise ConfigError("low", self.low, "a positive number for loguniform")
        return self


def _check_dist(dist: Any, label: str, where: str | None) -> None:
    """A random axis: a non-empty list of choices, a {choices, weights} table or a {dist, low, high} table."""
    if isinstance(dist, list):
        if not dist:
            raise ConfigError(label, dist, "a non-empty list of choices", where=where)
        return
    if not isinstance(dist, dict):
        raise ConfigError(label, dist, "a list of choices or a table {dist=..., low=..., high=...} or {choices=[...]}", where=where)
    validate_model(_Choices if "choices" in dist else _Range, dist, where=where, prefix=label)
    if dist.get("dist") == "randint" and not all(type(dist[k]) is int for k in ("low", "high")):
        raise ConfigError(label, dist, "integers low and high for randint", where=where)


def _draw(field_: str, dist: Any, rng: np.random.Generator) -> Any:
    if isinstance(dist, list):
        return dist[int(rng.integers(len(dist)))]
    if "choices" in dist:
        ch = dist["choices"]
        w = dist.get("weights")
        p = None if w is None else np.asarray(w, float) / float(np.sum(w))
        return ch[int(rng.choice(len(ch), p=p))]
    kind, lo, hi = dist["dist"], dist["low"], dist["high"]
    if kind == "uniform":
        return float(rng.uniform(lo, hi))
    if kind == "loguniform":
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    return int(rng.integers(lo, hi + 1))


# ====================================================================== rows


def _jsonable(v: Any) -> Any:
    """JSON-safe copy that keeps nan/inf as they are (hashes and parquet cells of the values given)."""
    return to_jsonable(v, nonfinite_as_null=False)


def flat_value(v: Any) -> Any:
    """A value as a parquet cell: scalars as they are, containers as JSON text."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (dict, list, tuple, np.ndarray)):
        return json.dumps(_jsonable(v), sort_keys=True)
    if isinstance(v, Path):
        return str(v)
    return v


def _resolve_runner(runner: Runner | str | None) -> Runner:
    if runner is None:
        from dcpsim.run.single import run_simulation

        return run_simulation
    if isinstance(runner, str):
        import importlib

        mod, _, fn = runner.partition(":")
        return getattr(importlib.import_module(mod), fn)
    return runner


def execute_run(rs: RunSpec, runner: Runner | str | None = None) -> dict[str, Any]:
    """Run one configuration and return its row (never raises for a configuration that cannot run)."""
    t0, c0 = time.perf_counter(), time.process_time()
    row: dict[str, Any] = {}
    status, reason = "ok", ""
    if rs.config is None:
        status, reason = "error", rs.error or "invalid configuration"
    else:
        cfg = rs.config
        row |= {"policy": cfg.policy.name, "gpus": cfg.cluster.gpus,
                "workload": flat_value(cfg.workload.name), "gpu": cfg.hardware.gpu, "model": flat_value(cfg.model.name)}
        try:
            res = _resolve_runner(runner)(cfg)
            summary = res.summary if hasattr(res, "summary") else res
            row |= {str(k): flat_value(v) for k, v in dict(summary).items()}
        except InfeasibleError as exc:
            status, reason = "infeasible", f"{exc.kind}: {exc.reason}"
        except DcpsimError as exc:
            status, reason = "error", str(exc)
        except Exception as exc:  # a bug in a lower layer: record it, keep the sweep going
            tb = traceback.extract_tb(exc.__traceback__)
            at = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
            status, reason = "failed", f"{type(exc).__name__}: {exc}{at}"
    for k, v in rs.axes.items():
        row[k] = flat_value(v)
    row |= {"config_hash": rs.run_hash, "status": status, "reason": reason,
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    return row


def execute_batch(batch: list[RunSpec], runner: Runner | str | None = None) -> list[dict[str, Any]]:
    """Run a batch of configurations in order (the unit of work sent to an executor)."""
    return [execute_run(rs, runner) for rs in batch]


# ====================================================================== dataset
def results_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / RESULTS_DIR


def _is_part(p: Path) -> bool:
    return p.parent.name == RESULTS_DIR and fnmatch.fnmatch(p.name, PART_GLOB)


def _all_parts(out_dir: str | Path) -> list[Path]:
    d = results_dir(out_dir)
    return sorted(d.glob(PART_GLOB)) if d.is_dir() else []


def _part_files(out_dir: str | Path) -> list[Path]:
    """The part files this sweep wrote (listed in results/'s manifest), in write order."""
    from dcpsim.outdir import owned_names

    owned = owned_names(results_dir(out_dir))
    return [p for p in _all_parts(out_dir) if p.name in owned]


def foreign_parts(out_dir: str | Path) -> list[Path]:
    """Part files in ``results/`` that dcpsim did not write there: never read, merged or deleted."""
    from dcpsim.outdir import owned_names

    owned = owned_names(results_dir(out_dir))
    return [p for p in _all_parts(out_dir) if p.name not in owned]


def _warn_foreign(out_dir: str | Path) -> list[Path]:
    bad = foreign_parts(out_dir)
    if bad:
        names = ", ".join(p.name for p in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        warnings.warn(f"{results_dir(out_dir)}: ignored {len(bad)} part file(s) this sweep did not write ({names}); "
                      "they are left as they are", DcpsimWarning, stacklevel=3)
    return bad


def _read_part(p: Path, columns: list[str] | None = None):
    """A part as a pyarrow Table, or None (with a warning) when it cannot be read (truncated, not parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(p, columns=columns)
    except (OSError, pa.ArrowException, ValueError) as exc:
        warnings.warn(f"{p}: unreadable part file ignored ({type(exc).__name__}); its runs count as not done",
                      DcpsimWarning, stacklevel=3)
        return None


def write_part(out_dir: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows as the next part file, atomically (temporary file, fsync, rename; :mod:`dcpsim.outdir`)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dcpsim.outdir import write_with

    d = results_dir(out_dir)
    existing = _part_files(out_dir)
    seq = (int(existing[-1].stem.split("-")[1]) + 1) if existing else 0
    final = d / f"part-{seq:06d}-{uuid.uuid4().hex[:8]}.parquet"
    table = pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)
    return write_with(final, lambda t: pq.write_table(table, t))


def load_results(out_dir: str | Path, *, dedupe: bool = True, status: str | tuple[str, ...] | None = None,
                 warn: bool = True):
    """The sweep's rows as a pandas DataFrame (part files in write order).

    Only parts this sweep wrote are read (others are named in a warning).
    ``dedupe`` keeps the last row of each ``config_hash`` (a failed run that
    was retried, or a compaction interrupted before it removed old parts).
    ``status`` keeps only rows with that status (or statuses). ``warn=False``
    leaves the warning about foreign parts to the caller.
    """
    import pandas as pd

    if warn:
        _warn_foreign(out_dir)
    tables = [t for t in (_read_part(p) for p in _part_files(out_dir)) if t is not None and t.num_rows]
    if not tables:
        return pd.DataFrame(columns=["config_hash", "status", "reason", "wall_s"])
    df = pd.concat([t.to_pandas() for t in tables], ignore_index=True, sort=False)
    if dedupe and len(df):
        df = df.drop_duplicates("config_hash", keep="last").reset_index(drop=True)
    if status is not None:
        keep = (status,) if isinstance(status, str) else tuple(status)
        df = df[df["status"].isin(keep)].reset_index(drop=True)
    return df


def finished_hashes(out_dir: str | Path) -> set[str]:
    """Ids of runs already recorded as ok, infeasible or error (failed runs are retried)."""
    done: dict[str, str] = {}
    for p in _part_files(out_dir):
        t = _read_part(p, ["config_hash", "status"])
        if t is None:
            continue
        for h, s in zip(t.column("config_hash").to_pylist(), t.column("status").to_pylist(), strict=True):
            done[h] = s
    return {h for h, s in done.items() if s in DONE_STATUSES}


def compact_results(out_dir: str | Path) -> Path | None:
    """Merge this sweep's part files into one (deduplicated).

    Safe to interrupt: old parts go only after the new one is in place. Parts
    dcpsim did not write are neither merged nor deleted.
    """
    from dcpsim.outdir import remove_owned

    parts = _part_files(out_dir)
    if len(parts) <= 1:
        return parts[0] if parts else None
    df = load_results(out_dir, warn=False)
    new = write_part(out_dir, df.to_dict("records"))
    for p in parts:
        remove_owned(p)
    return new


def _clean_temporaries(out_dir: Path) -> None:
    """Remove dcpsim's own temporary files left by a killed sweep (the caller holds the folder's lock)."""
    from dcpsim.outdir import TMP_PREFIX

    for d in (out_dir, results_dir(out_dir)):
        if d.is_dir():
            for t in d.glob(TMP_PREFIX + "*"):
                t.unlink(missing_ok=True)


def _write_json_atomic(path: Path, obj: Any) -> None:
    from dcpsim.outdir import write_text

    write_text(path, json.dumps(_jsonable(obj), indent=2, default=str) + "\n")


@contextlib.contextmanager
def _dir_lock(out_dir: Path) -> Iterator[None]:
    """One sweep process per output directory (the lock dies with the process, even on SIGKILL)."""
    import fcntl

    from dcpsim.outdir import OWN_PREFIX

    fh = open(out_dir / f"{OWN_PREFIX}lock", "w")  # noqa: SIM115 - held for the whole sweep
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError("--out", str(out_dir), "a directory no other running sweep is writing to") from None
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fh.close()


# ====================================================================== running
class SweepInterrupted(DcpsimError):
    """The sweep was stopped (Ctrl-C / SIGTERM) after writing every finished batch."""

    def __init__(self, result: SweepResult):
        self.result = result
        super().__init__(f"interrupted: {result.n_finished} of {result.n_runs} runs are in {result.out_dir}; "
                         f"run the same command again to resume (finished runs are skipped)")


@dataclass
class SweepResult:
    """What one call of :func:`run_sweep` did."""

    out_dir: Path
    n_runs: int
    n_skipped: int = 0
    n_done: int = 0
    n_other: int = 0  # rows already in the directory that the current spec does not produce (an earlier spec)
    counts: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    wall_s: float = 0.0
    batches: int = 0
    workers: int = 1
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def n_finished(self) -> int:
        return self.n_skipped + self.counts.get("ok", 0) + self.counts.get("infeasible", 0) + self.counts.get("error", 0)

    def results(self):
        return load_results(self.out_dir)

    def as_dict(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "runs": self.n_runs, "skipped_already_done": self.n_skipped,
                "ran": self.n_done, "rows_from_other_specs": self.n_other, "counts": dict(self.counts), "interrupted": self.interrupted,
                "wall_s": self.wall_s, "batches": self.batches, "workers": self.workers,
                "runs_per_min": 60.0 * self.n_done / self.wall_s if self.wall_s > 0 else None,
                "figures": self.figures}


STOP_GRACE_S = 1.0
"""After Ctrl-C/SIGTERM, seconds the tasks already running get to finish (and be written) before they are abandoned."""


class _Preempted(KeyboardInterrupt):
    """Raised by the signal handler inside a run that executes in this process (``-j 1``)."""


class _StopFlag:
    """SIGINT/SIGTERM set a flag (the loop writes what is done); a second SIGINT raises at once.

    While ``preempt`` is true (a run executing in this process), the first
    signal also raises :class:`_Preempted` there, so the run is abandoned at
    once instead of being waited for; its runs stay pending for a resume.
    """

    def __init__(self) -> None:
        self.set = False
        self.preempt = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.set and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.set = True
        if self.preempt:
            self.preempt = False
            raise _Preempted

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class BatchSizer:
    """Chooses how many runs go into the next task.

    Tasks should last about ``target_s`` seconds so that scheduling and
    part-file overhead stay negligible, yet be small enough that every worker
    has work until the end (at most ``remaining / (2 × workers)`` runs). The
    per-run time is learned from the rows that come back (the first tasks
    hold one run each).
    """

    def __init__(self, workers: int, target_s: float = 1.5, fixed: int | None = None):
        self.workers = max(1, workers)
        self.target_s = target_s
        self.fixed = fixed
        self._sum_s = 0.0
        self._n = 0

    def observe(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            self._sum_s += float(r.get("wall_s") or 0.0)
            self._n += 1

    @property
    def mean_run_s(self) -> float | None:
        return self._sum_s / self._n if self._n else None

    def next_size(self, remaining: int) -> int:
        if self.fixed:
            return max(1, min(self.fixed, remaining))
        mean = self.mean_run_s
        if mean is None:
            return 1
        want = max(1, math.ceil(self.target_s / max(mean, 1e-6)))
        fair = max(1, math.ceil(remaining / (2 * self.workers)))
        return max(1, min(want, fair, remaining))


def _progress(enabled: bool | None, total: int, description: str):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    show = console.is_terminal if enabled is None else enabled
    prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                    TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console, disable=not show, transient=False)
    task = prog.add_task(description, total=total, note="")
    return prog, task


FigureWriter = Callable[..., dict[str, Any]]  # (results DataFrame, folder, axes=[...]) -> {figure: files or reason}


def run_sweep(
    spec: SweepSpec | str | Path,
    out_dir: str | Path,
    *,
    executor=None,
    jobs: int | None = None,
    batch_size: int | None = None,
    target_task_s: float = 1.5,
    progress: bool | None = None,
    figures: FigureWriter | None = None,
    compact: bool = True,
    runner: Runner | str | None = None,
    force: bool = False,
    confirm_large: bool = False,
) -> SweepResult:
    """Run (or resume) a sweep into ``out_dir``; return what was done.

    ``executor``: an executor from :mod:`dcpsim.run.executors` (default: local
    processes, ``jobs`` of them, default all cores; ``jobs=1`` runs in this
    process). ``batch_size`` fixes the runs per task (default: adaptive, tasks
    of about ``target_task_s`` seconds). ``progress``: rich progress bar on
    stderr (default: only on a terminal). ``figures``: called as
    ``figures(results, out_dir / "figures", axes=...)`` when the sweep
    completes (e.g. :func:`dcpsim.report.plots.standard_figures`, which the
    ``sweep`` command passes; run does not import report, a higher layer). ``runner``:
    the function that simulates one configuration (default
    :func:`dcpsim.run.single.run_simulation`; a ``"module:function"`` string
    is imported in the worker).

    ``out_dir`` is checked first (:func:`check_sweep_out`): it may hold only
    files dcpsim wrote, unless ``force``; part files in ``results/`` that it
    did not write are ignored and named in a warning, never merged or deleted.
    A sweep of more than :data:`dcpsim.limits.MAX_SWEEP_RUNS` runs is refused
    (with an estimate of its size) unless ``confirm_large``. A task whose worker
    process dies is retried once, run by run; a run that loses its worker twice
    is recorded as ``failed`` (and retried when the sweep is started again).

    Raises :class:`SweepInterrupted` after SIGINT/SIGTERM, once every
    finished batch is written.

    Local worker processes start with ``forkserver``: a script that calls
    this with ``jobs > 1`` needs the usual ``if __name__ == "__main__":``
    guard, as any multiprocessing code.
    """
    if not isinstance(spec, SweepSpec):
        spec = load_sweep_spec(spec)
    out = check_sweep_out(out_dir, force=force, spec=spec)
    check_sweep_size(spec, confirmed=confirm_large)
    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with _dir_lock(out):
        _clean_temporaries(out)
        _warn_foreign(out)
        runs = _write_spec(spec, out)
        result, pending = _plan_session(out, runs)
        session = _Session(out, result, uuid.uuid4().hex[:12])
        invalid = [r for r in pending if r.config is None]
        if invalid:
            session.record(execute_batch(invalid))
        queue = deque(r for r in pending if r.config is not None)
        own_executor = executor is None
        if own_executor:
            from dcpsim.run.executors import make_executor

            executor = make_executor(jobs=jobs)
        try:
            _drive(session, executor, queue, runner, BatchSizer(executor.n_workers, target_s=target_task_s,
                                                                 fixed=batch_size), progress, spec.name)
        finally:
            if own_executor:
                executor.close()
        if result.interrupted:
            result.wall_s = time.perf_counter() - t_start
            raise SweepInterrupted(result)
        if compact:
            compact_results(out)
        if figures:
            result.figures = _figures(out, spec, figures)
        result.wall_s = time.perf_counter() - t_start
    return result


def check_sweep_out(out_dir: str | Path, *, force: bool = False, spec: SweepSpec | None = None) -> Path:
    """Check ``out_dir`` before a sweep starts (:func:`dcpsim.outdir.check_out_dir`; foreign parts are not a reason to refuse).

    With ``spec``: a folder that holds another sweep (``sweep.json`` with a
    different :func:`spec_hash`) is refused unless ``spec`` extends it (every
    run of the old spec is one of the new one's: an axis grew) or ``force``
    (then the old rows are kept beside the new ones and counted as rows of
    another spec).
    """
    from dcpsim.outdir import check_out_dir, is_owned

    out = check_out_dir(out_dir, force=force, ignore=_is_part)
    meta = out / "sweep.json"
    if spec is None or force or not meta.is_file() or not is_owned(meta):
        return out
    try:
        old = json.loads(meta.read_text(encoding="utf-8"))
        old_hash = old.get("spec_hash") or spec_hash(old)
    except (OSError, ValueError, AttributeError):
        return out
    new_hash = spec_hash(spec.to_dict())
    if old_hash != new_hash and not _extends(spec, old):
        raise ConfigError("--out", str(out), f"a new folder or one of this same sweep (it holds sweep "
                          f"{old.get('name')!r}, spec {old_hash}; this spec is {new_hash}: other seed, base or axes); "
                          "pick another folder, or pass --force to add this sweep's rows beside the old ones")
    return out


def _extends(spec: SweepSpec, old: dict[str, Any]) -> bool:
    """Whether every run listed in an old ``sweep.json`` is also a run of ``spec``."""
    old_runs = {r.get("config_hash") for r in old.get("runs", []) if isinstance(r, dict)}
    return bool(old_runs) and old_runs <= {r.run_hash for r in spec.runs()}


def count_runs(spec: SweepSpec) -> int:
    """How many combinations ``spec`` has, without building them (an upper bound on its distinct runs)."""
    n = 1
    for g in spec.groups:
        n *= g.samples if g.mode == "random" else (len(g.values[0]) if g.mode == "zip" else math.prod(len(v) for v in g.values))
    return n


def check_sweep_size(spec: SweepSpec, *, confirmed: bool = False) -> int:
    """The number of runs; ConfigError above :data:`dcpsim.limits.MAX_SWEEP_RUNS` unless ``confirmed``."""
    from dcpsim.limits import MAX_SWEEP_RUNS, SWEEP_RUN_BYTES, SWEEP_RUN_PREP_S, require_confirmation

    n = count_runs(spec)
    require_confirmation(n, MAX_SWEEP_RUNS, field="sweep size", what="runs", bytes_each=SWEEP_RUN_BYTES,
                         seconds_each=SWEEP_RUN_PREP_S, confirmed=confirmed)
    return n


def _write_spec(spec: SweepSpec, out: Path) -> list[RunSpec]:
    """Copy the spec, resolve its runs and write ``sweep.json``; returns the runs."""
    from dcpsim.outdir import write_text

    if spec.source_text is not None:
        write_text(out / "spec.toml", spec.source_text)
    runs = spec.runs()
    _write_json_atomic(out / "sweep.json", spec.to_dict() | {
        "spec_hash": spec_hash(spec.to_dict()), "runs": [{"config_hash": r.run_hash, "updates": r.axes, "error": r.error} for r in runs]})
    return runs


def _plan_session(out: Path, runs: list[RunSpec]) -> tuple[SweepResult, list[RunSpec]]:
    done = finished_hashes(out)
    pending = [r for r in runs if r.run_hash not in done]
    result = SweepResult(out, len(runs), n_skipped=len(runs) - len(pending))
    result.n_other = len(done - {r.run_hash for r in runs})
    return result, pending


@dataclass
class _Session:
    """Where finished rows go: stamped, counted and written as one part per batch."""

    out: Path
    result: SweepResult
    session: str

    def record(self, rows: list[dict[str, Any]]) -> None:
        now = time.time()
        for r in rows:
            r["sweep_session"] = self.session
            r["finished_at"] = now
            self.result.counts[r["status"]] = self.result.counts.get(r["status"], 0) + 1
        write_part(self.out, rows)
        self.result.n_done += len(rows)
        self.result.batches += 1


def lost_worker_rows(batch: list[RunSpec], exc: BaseException) -> list[dict[str, Any]]:
    """``failed`` rows for runs whose worker process died (killed, out of memory, ...)."""
    reason = f"worker process died ({type(exc).__name__}: {exc}); tried {WORKER_ATTEMPTS} times"
    return [{**{k: flat_value(v) for k, v in rs.axes.items()}, "config_hash": rs.run_hash, "status": "failed",
             "reason": reason, "wall_s": float("nan"), "cpu_s": float("nan")} for rs in batch]


class _InFlight:
    """Tasks submitted to an executor, with their runs and attempt counts."""

    def __init__(self, executor, runner: Runner | str | None):
        self.ex = executor
        self.runner = runner
        self.tasks: dict[Any, tuple[list[RunSpec], int, int]] = {}

    @property
    def generation(self) -> int:
        """Which pool of the executor is current (a restarted local pool counts up)."""
        return getattr(self.ex, "generation", 0)

    def submit(self, batch: list[RunSpec], attempt: int = 1) -> None:
        self.tasks[self.ex.submit(execute_batch, batch, self.runner)] = (batch, attempt, self.generation)

    def __len__(self) -> int:
        return len(self.tasks)

    def finished(self, timeout: float) -> list[tuple[list[RunSpec], int, Any]]:
        """``(batch, attempt, rows or the exception)`` of the tasks that ended.

        A broken local pool (a worker died) is replaced once, by the first of its tasks seen here.
        """
        done, _ = self.ex.wait_any(list(self.tasks), timeout=timeout)
        out = []
        for fut in done:
            batch, attempt, gen = self.tasks.pop(fut)
            try:
                out.append((batch, attempt, fut.result()))
            except Exception as exc:  # noqa: BLE001 - the worker died (BrokenProcessPool, KilledWorker, ...)
                if is_worker_death(exc):
                    restart_broken(self.ex, gen)
                out.append((batch, attempt, exc))
        return out

    def cancel_pending(self) -> None:
        running = set(self.ex.cancel_pending(list(self.tasks)))
        self.tasks = {f: v for f, v in self.tasks.items() if f in running}


def _handle(session: _Session, flight: _InFlight, sizer: BatchSizer, batch: list[RunSpec], attempt: int,
            outcome: Any, *, retry: bool) -> None:
    """Write a finished task's rows; resubmit (one run per task) or record a task whose worker died."""
    if not isinstance(outcome, BaseException):
        sizer.observe(outcome)
        session.record(outcome)
        return
    retry_alone(batch, attempt, outcome, resubmit=lambda rs, n: flight.submit([rs], n),
                give_up=lambda lost, exc: session.record(lost_worker_rows(lost, exc)),
                attempts=WORKER_ATTEMPTS if retry else attempt)


def _drive(session: _Session, ex, queue: deque, runner, sizer: BatchSizer, progress: bool | None, name: str) -> None:
    """Keep the executor busy until the queue is empty or a stop signal; write every finished task."""
    result = session.result
    flight = _InFlight(ex, runner)
    prog, task = _progress(progress, result.n_runs, name)
    prog.update(task, completed=result.n_skipped + result.n_done)
    result.workers = ex.n_workers
    in_process = getattr(ex, "name", "") == "serial"
    most = 1 if in_process else 2 * ex.n_workers  # in this process: write each task's rows before the next starts
    with _StopFlag() as stop, prog:
        while (queue or flight) and not stop.set:
            while queue and len(flight) < most and not stop.set:
                batch = [queue.popleft() for _ in range(sizer.next_size(len(queue)))]
                stop.preempt = in_process  # only a run in this process is abandoned mid-way (never pool internals)
                try:
                    flight.submit(batch)
                except _Preempted:  # Ctrl-C inside a run of this process: drop it (its runs stay pending)
                    break
                finally:
                    stop.preempt = False
            for batch, attempt, outcome in flight.finished(timeout=0.25):
                _handle(session, flight, sizer, batch, attempt, outcome, retry=True)
                bad = sum(result.counts.get(s, 0) for s in ("infeasible", "error", "failed"))
                prog.update(task, completed=result.n_skipped + result.n_done, note=f"{bad} not ok" if bad else "")
        if stop.set:
            # write what finishes within STOP_GRACE_S; drop what has not started; abandon the rest
            flight.cancel_pending()
            deadline = time.monotonic() + STOP_GRACE_S
            while flight and time.monotonic() < deadline:
                for batch, attempt, outcome in flight.finished(timeout=min(0.1, STOP_GRACE_S)):
                    if not isinstance(outcome, BaseException):
                        _handle(session, flight, sizer, batch, attempt, outcome, retry=False)
            if flight and hasattr(ex, "abandon"):
                ex.abandon()
            result.interrupted = True


def _figures(out: Path, spec: SweepSpec, writer: FigureWriter) -> dict[str, Any]:
    try:
        return writer(load_results(out, warn=False), out / "figures", axes=spec.axis_fields)
    except DcpsimError as exc:
        return {"all": f"failed: {exc} (run `dcpsim plot DIR --standard`)"}
    except Exception as exc:  # noqa: BLE001 - results are safe on disk; report, do not lose the sweep
        return {"all": f"failed: {type(exc).__name__}: {exc} (run `dcpsim plot DIR --standard`)"}


def describe_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing new"

