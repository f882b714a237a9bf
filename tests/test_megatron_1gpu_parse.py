"""benchmarks/device/megatron_ci_1gpu_parse.py: the split of a run whose NaN fill was switched on and off."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device" / "megatron_ci_1gpu_parse.py"


@pytest.fixture(scope="module")
def parse():
    spec = importlib.util.spec_from_file_location("megatron_ci_1gpu_parse", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _log(times_ms: list[float], start_s: float = 0.0) -> str:
    """Megatron-style log lines, one per iteration, stamped at the end of each iteration."""
    lines, t = [], start_s
    for i, ms in enumerate(times_ms, 1):
        t += ms / 1e3
        stamp = f"2026-11-27 10:00:{t:09.6f}"
        lines.append(f" [{stamp}] iteration {i:8d}/{len(times_ms):8d} | consumed samples: 32 | "
                     f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 0")
    return "\n".join(lines)


def test_alt_split_keeps_whole_iterations_of_one_state_and_the_training_process(parse):
    # ten 1 s iterations from t=0; the training process (pid 1, first line) switches on at 0, off at 4.5, on at 7.5;
    # pid 2 (a compile worker) switches at other times and must be ignored
    log = _log([1000.0] * 10)
    fill = ["2026-11-27 10:00:00.000000 1 1", "2026-11-27 10:00:02.200000 0 2",
            "2026-11-27 10:00:04.500000 0 1", "2026-11-27 10:00:07.500000 1 1"]
    out = parse.alt_split(log, fill, skip=0)
    assert out["pids"] is True
    # iterations span (i-1, i] for i = 2..10 (the first has no start): on for 2..4, off for 6..7, on for 9..10
    assert out["fill_on"]["n"] == 5 and out["fill_off"]["n"] == 2 and out["mixed_dropped"] == 2
    assert out["fill_on"]["median_s"] == pytest.approx(1.0)


def test_alt_split_separates_the_states_times_and_flags_logs_without_pids(parse):
    times = [900.0, 900.0, 800.0, 800.0, 800.0, 900.0, 900.0, 900.0]
    log = _log(times)
    fill = ["2026-11-27 10:00:00.000000 1", "2026-11-27 10:00:01.850000 0", "2026-11-27 10:00:04.300000 1"]
    out = parse.alt_split(log, fill, skip=0)
    assert out["pids"] is False
    assert out["fill_off"]["median_s"] == pytest.approx(0.8)
    assert out["fill_on"]["median_s"] == pytest.approx(0.9)
    assert parse.alt_split(log, fill, skip=7)["fill_on"]["n"] == 1


def test_alt_split_window_paired_difference_cancels_slow_drift(parse):
    # windows of 3 one-second iterations alternate off/on while the step time drifts up 30 ms per window; the fill
    # adds 50 ms: each interior window against its neighbours' mean gives exactly +50 ms, drift cancelled, while the
    # plain difference of medians carries the drift
    times, fill, t = [], [], 0.0
    for w in range(8):
        on = w % 2 == 1
        fill.append(f"2026-11-27 10:00:{t + 0.0005:09.6f} {int(on)} 7")
        for _ in range(3):
            ms = 1000.0 + 30.0 * w + (50.0 if on else 0.0)
            times.append(ms)
            t += ms / 1e3
    out = parse.alt_split(_log(times), fill, skip=0)["on_minus_off_s"]
    assert out["window_paired"]["n"] == 6
    assert out["window_paired"]["mean_s"] == pytest.approx(0.050)
    assert out["window_paired"]["median_s"] == pytest.approx(0.050)
    assert out["window_paired"]["se_s"] == pytest.approx(0.0, abs=1e-9)
    assert out["medians"]["diff_s"] == pytest.approx(0.080)
    lo, hi = out["medians"]["ci95_s"]
    assert lo <= 0.080 <= hi
