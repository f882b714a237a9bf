"""Candidate configurations at a fraction of ``RunConfig.with_updates``' cost, and hashable keys of their sections.

The planner checks ~10,000 candidate layouts per search: :func:`light_config` builds each one's configuration
from cached, validated sections (:func:`dcpsim.planning.space.check_candidate`), and the memos of the screen
(:mod:`dcpsim.planning.screen`) find a configuration's figures again by :func:`cost_key` and :func:`section_key`.
"""

from __future__ import annotations

import operator
from functools import cache
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.run.config import ParallelSection, RunConfig


@cache
def _field_names(model: type) -> tuple[str, ...]:
    """A pydantic model class's field names, read once (``model_fields`` is a computed property)."""
    return tuple(model.model_fields)


_SECTIONS: dict[tuple, tuple[Any, Any]] = {}
_DUMPS: dict[int, tuple[Any, dict[str, Any]]] = {}


def _dump(section: Any) -> dict[str, Any]:
    """``section.model_dump()``, once per section object (held, so its id is not reused); a copy."""
    hit = _DUMPS.get(id(section))
    if hit is None or hit[0] is not section:
        if len(_DUMPS) > 4096:
            _DUMPS.clear()
        hit = _DUMPS[id(section)] = (section, section.model_dump(mode="python"))
    return dict(hit[1])


def _sections(base: RunConfig, specs: tuple[tuple[str, str], ...], values: tuple) -> dict[str, Any]:
    """The sections the updates ``specs`` ((section, field), ...) = ``values`` change, each validated by its own
    class; cached by the values (the updates every candidate of a search shares: the data, the policy, the GPU
    count)."""
    key, hit = _lookup(_SECTIONS, (id(base), specs), values)
    if hit is None or hit[0] is not base:
        from dcpsim.schema import parse_model

        if len(_SECTIONS) > 16384:
            _SECTIONS.clear()
        by_sec: dict[str, dict[str, Any]] = {}
        for (sec, leaf), value in zip(specs, values, strict=True):
            by_sec.setdefault(sec, {})[leaf] = value
        new = {sec: _interned(parse_model(type(getattr(base, sec)), {**_dump(getattr(base, sec)), **ch}))
               for sec, ch in by_sec.items()}
        hit = _SECTIONS[key] = (base, new)
    return hit[1]


_INTERNED: dict[tuple, Any] = {}


def _interned(section: Any) -> Any:
    """The first section object built with equal values (its class and the ``repr`` of its Python-mode dump: types
    told apart, ``True`` from ``1``, a tuple from a list), else ``section``: the searches of one GPU type share
    their sections (the simulation section of every cluster size and policy), so the memos keyed by section
    objects (:func:`section_key`, :func:`cost_key`) find them again."""
    key = (type(section), repr(section.model_dump(mode="python")))
    hit = _INTERNED.get(key)
    if hit is None:
        if len(_INTERNED) > 4096:
            _INTERNED.clear()
        hit = _INTERNED[key] = section
    return hit


_BASE_SECTIONS: dict[int, tuple[RunConfig, dict[str, Any]]] = {}


def _base_sections(base: RunConfig) -> dict[str, Any]:
    """``base``'s sections, each the first equal one built (:func:`_interned`), once per base object (held): the
    light configurations of every search of a GPU type share them though each search has its own base."""
    hit = _BASE_SECTIONS.get(id(base))
    if hit is None or hit[0] is not base:
        if len(_BASE_SECTIONS) > 256:
            _BASE_SECTIONS.clear()
        hit = _BASE_SECTIONS[id(base)] = (base, {name: _interned(getattr(base, name))
                                                 for name in _field_names(RunConfig)})
    return hit[1]


def _lookup(memo: dict, head: tuple, values: tuple) -> tuple[tuple, Any]:
    """(the key of update ``values`` after ``head``, its entry in ``memo`` or None). The key tells values apart as
    ``repr`` does (``True`` from ``1``, ``1`` from ``1.0``: their types are part of it); ``repr`` itself for
    unhashable values."""
    key = (*head, values, tuple(map(type, values)))
    try:
        return key, memo.get(key)
    except TypeError:  # unhashable values: their repr
        key = (*head, repr(values), None)
        return key, memo.get(key)


_PARALLEL: dict[tuple, Any] = {}
_PARALLEL_TOKENS: dict[int, tuple[Any, str]] = {}


def _parallel_section(base: RunConfig, leaves: tuple[str, ...], values: tuple):
    """``base.parallel`` with the fields ``leaves`` = ``values`` validated by its class; cached by the base
    section's values and the updates (a layout's section is the same at every cluster size and policy)."""
    sec = base.parallel
    tok = _PARALLEL_TOKENS.get(id(sec))
    if tok is None or tok[0] is not sec:
        if len(_PARALLEL_TOKENS) > 4096:
            _PARALLEL_TOKENS.clear()
        tok = _PARALLEL_TOKENS[id(sec)] = (sec, repr(_dump(sec)))
    key, hit = _lookup(_PARALLEL, (tok[1], leaves), values)
    if hit is None:
        from dcpsim.schema import parse_model

        if len(_PARALLEL) > 65536:
            _PARALLEL.clear()
        hit = _PARALLEL[key] = parse_model(ParallelSection, {**_dump(sec), **dict(zip(leaves, values, strict=True))})
    return hit


def _getter(idx: tuple[int, ...]):
    """``values -> tuple(values[i] for i in idx)`` at C speed."""
    if len(idx) > 1:
        return operator.itemgetter(*idx)
    if idx:
        i = idx[0]
        return lambda v: (v[i],)
    return lambda v: ()


_SPLITS: dict[tuple[str, ...], tuple | None] = {}


def _split(paths: tuple[str, ...]) -> tuple | None:
    """Update paths as (parallel fields, their getter, ((section, field), ...) of the others, their getter); a
    getter takes the updates' values in path order. None when a path is not a ``section.field`` of RunConfig
    (policy options and anything unusual)."""
    hit = _SPLITS.get(paths, False)
    if hit is not False:
        return hit
    par, rest = [], []
    out: tuple | None = None
    for i, path in enumerate(paths):
        sec, _, leaf = path.partition(".")
        if not leaf or "." in leaf or sec not in _field_names(RunConfig):
            break
        if sec == "parallel":
            par.append((i, leaf))
        else:
            rest.append((i, (sec, leaf)))
    else:
        out = (tuple(x[1] for x in par), _getter(tuple(x[0] for x in par)), tuple(x[1] for x in rest),
               _getter(tuple(x[0] for x in rest)))
    if len(_SPLITS) > 1024:
        _SPLITS.clear()
    _SPLITS[paths] = out
    return out


def light_config(base: RunConfig, updates: dict[str, Any]) -> RunConfig:
    """``base.with_updates(updates)`` at a fraction of its cost: only the sections ``updates`` changes are
    validated (each by its own class: the same field checks; cached by their values), and the whole run's
    checks (:meth:`RunConfig._check_layout`: divisibility, the batch, the registered names of the policy,
    network and engine) run on the result. The same configuration (equal, the same hash) and the same
    accepted layouts as ``with_updates`` (tested); where anything is refused, ``with_updates`` itself is run,
    so the error is its own.

    The planner checks ~10,000 candidate layouts per search this way; each simulated one is validated
    once more in full (:func:`validated`) before it runs.
    """
    split = _split(tuple(updates))
    if split is None:
        return base.with_updates(updates)  # policy options and anything unusual: the full path
    vals = tuple(updates.values())
    par_leaves, par_get, rest_specs, rest_get = split
    try:
        new = {**_base_sections(base), **_sections(base, rest_specs, rest_get(vals))}
        if par_leaves:
            new["parallel"] = _parallel_section(base, par_leaves, par_get(vals))
        cfg = _copy_with(base, new)
        cfg._check_layout()
    except (ConfigError, ValueError, TypeError):
        return base.with_updates(updates)  # refused: with_updates raises its own one-line error
    return cfg


def _copy_with(base: RunConfig, new: dict[str, Any]) -> RunConfig:
    """``base.model_copy(update=new)`` (``new``: whole sections) without pydantic's generic copy: the same
    ``__dict__``, fields set, extra and private values. pydantic's own ``model_copy`` where the model has extra
    or private values (never for a RunConfig today)."""
    if getattr(base, "__pydantic_extra__", None) is not None or getattr(base, "__pydantic_private__", None) is not None:
        return base.model_copy(update=new)
    cls = type(base)
    m = cls.__new__(cls)
    d = dict(base.__dict__)
    d.update(new)
    object.__setattr__(m, "__dict__", d)
    object.__setattr__(m, "__pydantic_extra__", None)
    object.__setattr__(m, "__pydantic_fields_set__", base.__pydantic_fields_set__ | new.keys())
    object.__setattr__(m, "__pydantic_private__", None)
    return m


def validated(cfg: RunConfig) -> RunConfig:
    """``cfg`` validated in full, as a configuration read from a file is (an equal configuration)."""
    from dcpsim.run.load import config_from_dict

    return config_from_dict(cfg.model_dump(mode="python"))


def _cost_key(cfg: RunConfig, drop: tuple[str, ...] = ()) -> str:
    """The inputs of ``build_cost_model(cfg)`` (all of model, hardware, parallel and sim; DP), less ``drop``."""
    d = cfg.model_dump(mode="json")
    keep = {k: d[k] for k in ("model", "hardware", "parallel", "sim")}
    for name in drop:
        keep["parallel"].pop(name, None)
        keep["sim"].pop(name, None)
    if "dp" not in drop:
        keep["dp"] = cfg.dp
    return repr(keep)


_SECTION_REPRS: dict[tuple, tuple[Any, Any]] = {}


def section_key(section: Any, drop: tuple[str, ...] = ()) -> Any:
    """A hashable key of a config section's values less the fields ``drop`` (equal values, equal keys).

    The parallel section as a tuple of its values, the others as their JSON form; computed once per section
    object (held, so its id is not reused): the candidates of a search share the base's sections or
    :func:`light_config`'s cached ones, and a layout's parallel section is shared by every cluster size."""
    k = (id(section), drop)
    hit = _SECTION_REPRS.get(k)
    if hit is None or hit[0] is not section:
        if len(_SECTION_REPRS) > 65536:
            _SECTION_REPRS.clear()
        if isinstance(section, ParallelSection):
            key: Any = tuple((f, getattr(section, f)) for f in _field_names(ParallelSection) if f not in drop)
        else:
            d = section.model_dump(mode="json")
            for name in drop:
                d.pop(name, None)
            key = repr(d)
        hit = _SECTION_REPRS[k] = (section, key)
    return hit[1]


_COST_KEYS: dict[tuple, tuple[tuple, tuple]] = {}


def cost_key(cfg: RunConfig, drop: tuple[str, ...] = ()) -> tuple:
    """What :func:`_cost_key` says (model, hardware, parallel and sim less ``drop``; DP unless dropped) as a
    tuple of :func:`section_key` parts: the same equal-or-not verdict at a fraction of the cost. The parts are
    found again by the four section objects (held, so their ids are not reused)."""
    secs = (cfg.model, cfg.hardware, cfg.parallel, cfg.sim)
    k = (id(secs[0]), id(secs[1]), id(secs[2]), id(secs[3]), drop)
    hit = _COST_KEYS.get(k)
    if hit is None or hit[0][0] is not secs[0] or hit[0][1] is not secs[1] or hit[0][2] is not secs[2] \
            or hit[0][3] is not secs[3]:
        if len(_COST_KEYS) > 65536:
            _COST_KEYS.clear()
        hit = _COST_KEYS[k] = (secs, tuple(section_key(sec, drop) for sec in secs))
    return hit[1] if "dp" in drop else hit[1] + (cfg.dp,)
