"""benchmarks/device/membound_curve.py: the sizes it measures, the bytes it counts and a CPU dry run's output
(structure only: no figure of this host is checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device" / "membound_curve.py"


@pytest.fixture(scope="module")
def mc(load_script):
    return load_script(SCRIPT, "membound_curve")


def test_shapes_hold_each_size_at_each_hidden(mc):
    got = mc.shapes([64 << 10, 1 << 20], (512, 8192))
    assert got == [(64, 512), (4, 8192), (1024, 512), (64, 8192)]
    assert all(r * h * 2 in (64 << 10, 1 << 20) for r, h in got)
    assert mc.shapes([1 << 10], (8192,)) == []  # smaller than one row: skipped


def test_cpu_dry_run_writes_every_op_and_size(mc, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "m.json"
    assert mc.main(["--out", str(out), "--device", "cpu", "--reps", "2", "--rounds", "2", "--max-bytes",
                    str(256 << 10)]) == 0
    d = json.loads(out.read_text())
    assert "not a device measurement" in d["_provenance"]["timing"]
    rows = d["rows"]
    assert {r["op"] for r in rows} == set(mc.OPS)
    assert len(rows) == len(mc.OPS) * len(mc.shapes([64 << 10, 256 << 10]))
    for r in rows:
        assert r["bytes_moved"] == mc.OPS[r["op"]] * r["rows"] * r["hidden"] * 2
        assert r["kernel_s"] > 0 and r["kernel_min_max_s"][0] <= r["kernel_s"] <= r["kernel_min_max_s"][1]


def test_bad_arguments_are_named(mc, tmp_path, capsys):
    with pytest.raises(SystemExit):
        mc.main(["--out", str(tmp_path / "x.json"), "--device", "cpu", "--reps", "0"])
    assert "--reps 0" in capsys.readouterr().err
