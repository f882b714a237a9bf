"""Benchmark: one simulated iteration of Llama-13B, gbs 2048 (targets: < 2 s at 4,096 GPUs, < 10 s at 16,384).

Run: ``.venv/bin/python -m pytest -m benchmark --benchmark-enable benchmarks/bench_sim.py``
(``benchmarks/scale_sim.py`` prints the whole 512..16,384 table).

Each case runs the whole :func:`~dcpsim.run.single.run_simulation` (sampling,
planning, durations, SimPy events, tables); the simulator-only time, planning
time and event counts go into the benchmark's ``extra_info``.
"""

from __future__ import annotations

import pytest

TARGET_S = {4096: 2.0, 16384: 10.0}


def _cfg(gpus: int, policy: str):
    from dcpsim.run import RunConfig

    return RunConfig().with_updates({"cluster.gpus": gpus, "parallel.pp": 8, "parallel.cp": 8,
                                     "policy.name": policy, "sim.iterations": 1, "sim.engine": "events"})


@pytest.mark.benchmark
@pytest.mark.parametrize("policy", ["packing", "dynamic"])
@pytest.mark.parametrize("gpus", [512, 4096, 16384])
def test_one_iteration(benchmark, gpus, policy):
    from dcpsim.run.single import run_simulation

    cfg = _cfg(gpus, policy)
    res = benchmark.pedantic(run_simulation, args=(cfg,), rounds=5, iterations=1, warmup_rounds=1)
    s = res.summary
    benchmark.extra_info.update({k: s[k] for k in ("events", "events_per_s", "sim_wall_s", "planning_wall_s", "steps")})
    assert s["gpus"] == gpus and s["sequences"] == 2048 and s["events"] > 0
    if gpus in TARGET_S and benchmark.stats is not None:
        assert benchmark.stats.stats.median < TARGET_S[gpus]


@pytest.mark.benchmark
@pytest.mark.parametrize("policy", ["packing", "dynamic"])
def test_wall_grows_no_faster_than_gpus(policy):
    import time

    from dcpsim.run.single import run_simulation

    def wall(gpus: int) -> float:
        cfg = _cfg(gpus, policy)
        run_simulation(cfg)
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            run_simulation(cfg)
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[1]

    assert wall(16384) / wall(512) <= 16384 / 512
