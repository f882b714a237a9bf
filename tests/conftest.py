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
