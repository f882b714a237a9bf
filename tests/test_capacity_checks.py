"""The capacity checks' machinery (experiments/capacity_checks/checks.py): Llama 2 GPU-hours and published layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "capacity_checks" / "checks.py"


@pytest.fixture(scope="module")
def checks(load_script):
    return load_script(SCRIPT, "capacity_checks")


def test_llama2_ratio_is_computed_not_fed(checks, monkeypatch):
    from dcpsim.planning import SearchSpace

    space = SearchSpace(tp=[1, 2], pp=[1], cp=[1], mbs=[1])
    r = checks.llama2_check("llama2-7b", sizes=(256, 512), jobs=1, space=space)
    ok = [s for s in r["sizes"] if s["status"] == "ok"]
    assert ok and r["picked_gpus"] in (256, 512)
    assert r["gpu_hours"] == min(s["gpu_hours"] for s in ok)
    assert r["ratio"] == pytest.approx(r["gpu_hours"] / 184_320) and r["profile"] == "a100-sxm-80gb"
    for s in ok:  # GPU-hours = GPUs x days x 24, failures included (goodput < 1)
        assert s["gpu_hours"] == pytest.approx(s["gpus"] * s["days"] * 24)
        assert s["gpu_hours"] > s["gpu_hours_no_failures"] and 0 < s["goodput"] < 1
    # the published figure is a reference only: changing it changes the ratio, not the plan
    monkeypatch.setitem(checks.LLAMA2_GPU_HOURS, "llama2-7b", 1.0)
    r2 = checks.llama2_check("llama2-7b", sizes=(256, 512), jobs=1, space=space)
    assert r2["gpu_hours"] == r["gpu_hours"] and r2["ratio"] == pytest.approx(r["gpu_hours"])


def test_published_row_search_is_at_least_as_fast(checks):
    r = checks.published_row_check(44, simulate=2)  # Nemotron-4 15B on 16 H100s (small, quick)
    assert r["status"] == "ok", r
    assert r["at_least_as_fast"] and r["picked_sim"] >= r["published_sim"]
    assert r["speedup"] == pytest.approx(r["picked_sim"] / r["published_sim"])
    assert isinstance(r["found_published"], bool) and r["counts"]["fit"] >= 1
    s = checks.summarize([r, {"row": 0, "status": "unexpressible", "reason": "x"}])
    assert s["rows"] == 2 and s["compared"] == 1 and s["unexpressible"] == 1
