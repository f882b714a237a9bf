"""Shared fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest rewrites the asserts of every module of a distribution that declares a pytest plugin, hypothesis's ~90
# modules included: about a second of each xdist worker's start-up (no rewritten bytecode is cached where
# PYTHONDONTWRITEBYTECODE is set, as on the reference host). hypothesis's asserts are its own internal checks, so it
# is imported with pytest's rewriting import hook set aside; the hook is back before any test module is imported,
# and the tests' asserts are rewritten as before.
_rewriters = [h for h in sys.meta_path if type(h).__name__ == "AssertionRewritingHook"]
for _h in _rewriters:
    sys.meta_path.remove(_h)
try:
    from hypothesis import settings
finally:
    sys.meta_path[:0] = _rewriters

# One seed, one result: property tests draw the same examples on every run and machine
# (CI must not turn red because hypothesis explored somewhere new today).
settings.register_profile("dcpsim", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("dcpsim")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


def _load_script(path: Path, name: str):
    """The module of a script that is not on the import path (``experiments/``): loaded from ``path`` as ``name``
    and registered in ``sys.modules`` (a script's dataclasses resolve their module by name)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def load_script():
    """:func:`_load_script`: ``load_script(path, name)`` gives the module of an experiment script."""
    return _load_script


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory):
    """dcpsim's per-user state (the single-file registry, dcpsim.outdir) goes to a temporary folder, not ~."""
    import os

    old = os.environ.get("DCPSIM_STATE_DIR")
    os.environ["DCPSIM_STATE_DIR"] = str(tmp_path_factory.mktemp("dcpsim-state"))
    yield
    if old is None:
        os.environ.pop("DCPSIM_STATE_DIR", None)
    else:
        os.environ["DCPSIM_STATE_DIR"] = old
