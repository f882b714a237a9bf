"""Sweep specs: parsing and validating a spec, and expanding its axes into runs (:class:`RunSpec`).

The driver is :mod:`dcpsim.run.sweep`; the results dataset :mod:`dcpsim.run.sweep_store`.

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
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import numpy as np
from pydantic import Field, model_validator

from dcpsim.errors import ConfigError, DcpsimError
from dcpsim.run.config import RunConfig, StepSection
from dcpsim.run.load import check_config, config_from_dict, load_config
from dcpsim.schema import InputModel, parse_model
from dcpsim.serialize import to_jsonable

AXIS_MODES = ("grid", "zip", "random")
RandomDist = Literal["uniform", "loguniform", "randint"]
RANDOM_DISTS = get_args(RandomDist)
_GROUP_KEYS = {"mode", "samples", "seed"}

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
        """The distinct runs, in spec order (combinations that resolve to the same configuration run once).

        Each configuration is ``base.with_updates(assignment)`` (:class:`_Resolver`: only the sections an
        assignment changes are validated again) checked by :func:`check_config`, its id ``config_hash()``."""
        base_hash = self.base.config_hash()
        seen: set[str] = set()
        out = []
        resolve = _Resolver(self.base)
        for assign in self.assignments():
            try:
                cfg = check_config(resolve.config(assign))
                rs = RunSpec(resolve.hash(cfg), assign, cfg)
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


class _Resolver:
    """A sweep's configurations and their ids, as ``base.with_updates`` and ``config_hash()`` give them, faster.

    :meth:`config`: the sections an assignment changes are validated by their own classes (the same field
    checks) and the run's checks (``RunConfig._check_layout``) run on the result; the other sections are the
    base's own objects. An equal configuration (tested). An assignment of anything else (policy options) or
    one that is refused goes through ``with_updates`` itself, so a refusal is its error. :meth:`hash`: the
    JSON text ``config_hash`` hashes, put together from each section's text (a section object serialised
    once), the same bytes.
    """

    def __init__(self, base: RunConfig) -> None:
        self.base = base
        self._sections: dict[tuple, Any] = {}  # (section, updates) -> the validated section
        self._text: dict[int, tuple[Any, str]] = {}  # id(section) -> (section, its part of the JSON text)

    def config(self, assign: dict[str, Any]) -> RunConfig:
        base = self.base
        by_sec: dict[str, dict[str, Any]] = {}
        for path, value in assign.items():
            sec, _, leaf = path.partition(".")
            if sec not in _SECTIONS or leaf not in _SECTIONS[sec].model_fields:
                return base.with_updates(assign)  # policy options, a mistyped path: the full path and its error
            by_sec.setdefault(sec, {})[leaf] = value
        try:
            new = {sec: self._section(sec, upd) for sec, upd in by_sec.items()}
            cfg = RunConfig.model_construct(_fields_set=set(_SECTIONS), **{**base.__dict__, **new})
            cfg._check_layout()
        except (ConfigError, ValueError, TypeError):
            return base.with_updates(assign)  # refused: with_updates raises its own one-line error
        return cfg

    def _section(self, sec: str, upd: dict[str, Any]) -> Any:
        from dcpsim.schema import parse_model

        old = getattr(self.base, sec)
        try:
            key: tuple | None = (sec, tuple((k, type(v), v) for k, v in upd.items()))  # True, 1, 1.0: apart
            hit = self._sections.get(key)  # type: ignore[arg-type]
        except TypeError:  # a list or table value: validated every time
            key, hit = None, None
        if hit is None:
            hit = parse_model(type(old), {**old.model_dump(mode="python"), **upd})
            if key is not None and len(self._sections) < 4096:
                self._sections[key] = hit
        return hit

    def hash(self, cfg: RunConfig) -> str:
        """``cfg.config_hash()``: the same JSON text (keys sorted, no spaces), one section at a time."""
        skip = "step" if cfg.step == _DEFAULT_STEP else None
        parts = []
        for name in _SORTED:
            if name == skip:
                continue
            sec = getattr(cfg, name)
            got = self._text.get(id(sec))
            if got is None or got[0] is not sec:
                got = (sec, f'"{name}":' + json.dumps(sec.model_dump(mode="json"), sort_keys=True, separators=(",", ":")))
                if len(self._text) < 4096:
                    self._text[id(sec)] = got
            parts.append(got[1])
        return hashlib.sha256(("{" + ",".join(parts) + "}").encode()).hexdigest()[:12]


_SECTIONS = {name: f.annotation for name, f in RunConfig.model_fields.items()}  # section name -> its class
_SORTED = sorted(_SECTIONS)
_DEFAULT_STEP = StepSection()


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
    from dcpsim.schema import read_text

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


def _sweep_table(meta: Any, where: str | None) -> tuple[str, int]:
    """The [sweep] table's name (non-empty: it heads every line about the sweep) and seed."""
    if not isinstance(meta, dict) or set(meta) - {"name", "seed"}:
        raise ConfigError("sweep", meta, "a table with optional keys name and seed", where=where)
    name = str(meta.get("name", "sweep"))
    if not name.strip():  # printed ': 24 runs' before
        raise ConfigError("sweep.name", name, "non-empty text (or no name: 'sweep')", where=where)
    seed = meta.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError("sweep.seed", seed, "a non-negative integer", where=where)
    return name, seed


def sweep_spec_from_dict(d: dict[str, Any], *, where: str | None = None, base_dir: str | Path | None = None) -> SweepSpec:
    """Build a :class:`SweepSpec` from the parsed TOML (``base``, ``sweep``, ``axes`` keys)."""
    unknown = set(d) - {"base", "sweep", "axes"}
    if unknown:
        raise ConfigError("spec", sorted(unknown), "only the top-level keys base, sweep and axes", where=where)
    name, seed = _sweep_table(d.get("sweep", {}), where)

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
    from dcpsim.schema import check_value

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
    parse_model(_Choices if "choices" in dist else _Range, dist, where=where, prefix=label)
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
