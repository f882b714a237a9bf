"""Reading a run configuration: the schema (:mod:`dcpsim.run.config`) plus what the named extensions accept.

The schema imports no policy, workload or simulator code, so it checks a policy, network or engine by its
registered name only. :func:`check_config` adds the checks that need the named code: a policy's options
(declared parameters, their types, ``nan`` refused) and a workload given as a distribution table (a known
type with valid parameters). :func:`config_from_dict` and :func:`load_config` do both, and so does every
command (:func:`dcpsim.commands._common.config_from_args`), each sweep run and
:func:`dcpsim.run.single.run_simulation`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.run.config import RunConfig, parse_config
from dcpsim.schema import read_toml


def check_config(cfg: RunConfig, *, where: str | None = None, names: Mapping[str, str] | None = None) -> RunConfig:
    """``cfg`` once its policy options and workload tables are valid for what they name; ConfigError otherwise
    (naming the user's field, or the flag in ``names``, and ``where`` it came from)."""
    try:
        _check_policy_options(cfg)
        _check_distribution_tables(cfg)
    except ConfigError as exc:
        field = (names or {}).get(exc.field, exc.field)
        raise ConfigError(field, exc.value, exc.expected, where=where or exc.where) from None
    return cfg


def _check_policy_options(cfg: RunConfig) -> None:
    """policy.options are options of policy.name, of the declared types (nan refused)."""
    from dcpsim.policies.base import policy_class
    from dcpsim.schema import check_options

    cls = policy_class(cfg.policy.name)
    params = list(_option_names(cls))
    for key, value in cfg.policy.options.items():
        if key not in params:
            raise ConfigError(f"policy.options.{key}", value, f"an option of policy {cfg.policy.name!r} (one of {params})")
    check_options(cls.__init__, cfg.policy.options, "policy.options")


@functools.lru_cache(maxsize=256)
def _option_names(cls: type) -> tuple[str, ...]:
    """The keyword options of a policy class (its ``__init__`` parameters but ``self``), read once per class."""
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")


def _check_distribution_tables(cfg: RunConfig) -> None:
    """A workload given as a table is a distribution of a known type with valid parameters."""
    w = cfg.workload
    tables = [(f, v) for f, v in (("workload.name", w.name), ("workload.documents", w.documents)) if isinstance(v, dict)]
    if not tables:
        return
    import dcpsim.workload  # noqa: F401  # registers every distribution type (dcpsim.workload.real too)
    from dcpsim.workload.distributions import check_distribution_table

    for field, value in tables:
        check_distribution_table(value, field)


def config_from_dict(d: Mapping[str, Any], where: str | None = None,
                     names: Mapping[str, str] | None = None) -> RunConfig:
    """Validate a parsed TOML table (or dict) as a :class:`RunConfig` (schema, then :func:`check_config`); one
    ConfigError in the user's words."""
    return check_config(parse_config(d, where=where, names=names), where=where, names=names)


def load_config(path: str | Path) -> RunConfig:
    """Read and validate a run TOML file (UTF-8); ``example:NAME`` and shipped ``examples/...`` paths work anywhere."""
    from dcpsim.resources import resolve_input

    given, path = path, resolve_input(path)
    data = read_toml(path, "config")
    if isinstance(data, Mapping) and {"sweep", "axes"} & set(data):  # a sweep spec: say so, not "unknown key"
        raise ConfigError("config", str(path), "a run file; this is a sweep spec ([sweep]/[axes] tables): run it with "
                          f"`dcpsim sweep {given} --out DIR`, or point at its base run file")
    return config_from_dict(data, where=str(path))
