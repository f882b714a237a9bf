"""GPU and cluster hardware profiles (see :mod:`dcpsim.hardware.profile` for the format)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from dcpsim.errors import ConfigError
from dcpsim.hardware.profile import (
    COLLECTIVE_OPS,
    FORMAT_VERSION,
    TIERS,
    Curve,
    HardwareProfile,
    Timing,
    bus_factor,
    load_profile,
    write_profile,
)
from dcpsim.resources import data_dir

__all__ = [
    "COLLECTIVE_OPS",
    "FORMAT_VERSION",
    "TIERS",
    "Curve",
    "HardwareProfile",
    "Timing",
    "bus_factor",
    "get_profile",
    "list_profiles",
    "load_profile",
    "default_user_profile_dir",
    "profile_dirs",
    "user_profile_dir",
    "write_profile",
]


def _env_profile_dirs() -> list[Path]:
    return [Path(p) for p in os.environ.get("DCPSIM_PROFILES", "").split(os.pathsep) if p]


def default_user_profile_dir() -> Path:
    """``$XDG_DATA_HOME/dcpsim/profiles`` (default ``~/.local/share/dcpsim/profiles``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dcpsim" / "profiles"


def user_profile_dir() -> Path:
    """Where a user's own named profiles go (``dcpsim calibrate --apply``): the first ``$DCPSIM_PROFILES``
    folder, else :func:`default_user_profile_dir`. Never the shipped ``profiles/``."""
    env = _env_profile_dirs()
    return env[0] if env else default_user_profile_dir()


def profile_dirs() -> list[Path]:
    """Folders searched for named profiles: ``$DCPSIM_PROFILES`` (``:``-separated), the shipped ``profiles/``,
    then :func:`default_user_profile_dir` (after the shipped ones: a user profile never hides a shipped name)."""
    dirs = _env_profile_dirs()
    dirs.append(data_dir("profiles"))
    user = default_user_profile_dir()
    if user not in dirs:
        dirs.append(user)
    return dirs


def list_profiles() -> list[str]:
    names: list[str] = []
    for d in profile_dirs():
        if d.is_dir():
            for sub in sorted(d.iterdir()):
                if (sub / "profile.toml").is_file() and sub.name not in names:
                    names.append(sub.name)
    return names


DATASHEET_SUFFIX = "-datasheet"


def datasheet_base(name: str) -> str | None:
    """``h100-sxm`` for ``h100-sxm-datasheet`` (a known base profile), else None (see
    :mod:`dcpsim.hardware.defaults`)."""
    if not str(name).endswith(DATASHEET_SUFFIX):
        return None
    base = str(name).removesuffix(DATASHEET_SUFFIX)
    return base if base in list_profiles() else None


@lru_cache(maxsize=64)
def _cached(path: str, mtime: float) -> HardwareProfile:
    return load_profile(path)


def get_profile(name_or_path: str | Path | HardwareProfile) -> HardwareProfile:
    """A profile by shipped name (``h100-sxm``; ``h100-sxm-datasheet`` is the same profile) or by folder path.

    Names are literal here; the commands' default (a bare name means the calibrated profile) is
    :func:`dcpsim.hardware.defaults.resolve_gpu`.
    """
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    if not isinstance(name_or_path, str | os.PathLike):  # else Path() raised a bare TypeError
        raise ConfigError("gpu", name_or_path, f"a profile name ({', '.join(list_profiles())}), a profile folder "
                          "or a HardwareProfile")
    p = Path(name_or_path)
    if not (p.is_dir() or p.suffix == ".toml"):
        name_or_path = datasheet_base(str(name_or_path)) or name_or_path  # <gpu>-datasheet: the base profile
        for d in profile_dirs():
            if (d / str(name_or_path) / "profile.toml").is_file():
                p = d / str(name_or_path)
                break
        else:
            raise ConfigError("gpu", str(name_or_path), f"a profile name ({', '.join(list_profiles())}) or a profile folder")
    folder = p.parent if p.suffix == ".toml" else p
    meta = folder / "profile.toml"
    return _cached(str(folder.resolve()), meta.stat().st_mtime if meta.exists() else 0.0)
