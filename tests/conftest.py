"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# One seed, one result: property tests draw the same examples on every run and machine
# (CI must not turn red because hypothesis explored somewhere new today).
settings.register_profile("dcpsim", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("dcpsim")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


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
