"""Sweeps: spec parsing, the resumable parquet dataset, kill/interrupt + resume, executors (Dask LocalCluster)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.report.plots import standard_figures
from dcpsim.run.executors import SlurmOptions, make_executor, slurm_job_script
from dcpsim.run.sweep import (
    BatchSizer,
    SweepOptions,
    load_results,
    load_sweep_spec,
    run_sweep,
    sweep_spec_from_dict,
)

# A small run: 32 GPUs (TP1 PP4 CP2 DP4), 32 sequences of at most 16K tokens; a few tens of ms to simulate.
SMALL_BASE = """
[base]
model.name = "llama-13b"
cluster.gpus = 32
parallel = {tp = 1, pp = 4, cp = 2, max_tokens_per_rank = 8192}
workload = {name = "github", gbs = 32, max_len = 16384}
sim.iterations = 1
"""


def _spec_file(tmp_path: Path, axes: str, name: str = "spec.toml") -> Path:
    p = tmp_path / name
    p.write_text(SMALL_BASE + "\n[sweep]\nname = \"t\"\n" + axes)
    return p


# ---------------------------------------------------------------- spec
def test_grid_zip_random_counts_and_determinism(tmp_path):
    axes = """
[[axes]]
policy.name = ["packing", "dynamic"]
cluster.gpus = [32, 64]
[[axes]]
mode = "zip"
"workload.name" = ["github", "commoncrawl"]
workload.gbs = [32, 64]
[[axes]]
mode = "random"
samples = 3
seed = 7
sim.seed = {dist = "randint", low = 0, high = 10000}
hardware.network_scale = {dist = "loguniform", low = 0.25, high = 4.0}
parallel.min_cp = {choices = [1, 2], weights = [1, 0]}
"""
    spec = load_sweep_spec(_spec_file(tmp_path, axes))
    assert spec.axis_fields == ["policy.name", "cluster.gpus", "workload.name", "workload.gbs", "sim.seed",
                                "hardware.network_scale", "parallel.min_cp"]
    runs = spec.runs()
    assert len(runs) == 2 * 2 * 2 * 3
    assert len({r.run_hash for r in runs}) == len(runs)
    # zip keeps pairs together
    assert {(r.axes["workload.name"], r.axes["workload.gbs"]) for r in runs} == {("github", 32), ("commoncrawl", 64)}
    draws = [(r.axes["sim.seed"], r.axes["hardware.network_scale"], r.axes["parallel.min_cp"]) for r in runs]
    assert all(0 <= s <= 10000 and 0.25 <= n < 4.0 and m == 1 for s, n, m in draws)  # weight 0 never drawn
    assert len({d[:2] for d in draws}) == 3
    # the same seed gives the same runs; another seed other draws
    assert [r.run_hash for r in load_sweep_spec(_spec_file(tmp_path, axes, "b.toml")).runs()] == [r.run_hash for r in runs]
    other = load_sweep_spec(_spec_file(tmp_path, axes.replace("seed = 7", "seed = 8"), "c.toml")).runs()
    assert {r.axes["sim.seed"] for r in other} != {r.axes["sim.seed"] for r in runs}
    # each run's config carries its axis values
    r0 = runs[0]
    assert r0.config.policy.name == r0.axes["policy.name"] and r0.config.cluster.gpus == r0.axes["cluster.gpus"]
    assert r0.run_hash == r0.config.config_hash()


@pytest.mark.parametrize("axes, field", [
    ('[axes]\nparallel.nope = [1, 2]', "axes[0].parallel.nope"),
    ('[axes]\nmode = "zip"\nparallel.cp = [1, 2]\nworkload.gbs = [32]', "axes[0]"),
    ('[axes]\nmode = "random"\nparallel.cp = [1, 2]', "axes[0].samples"),
    ('[axes]\nmode = "random"\nsamples = 2\nparallel.cp = {dist = "normal", low = 1, high = 2}', "axes[0].parallel.cp.dist"),
    ('[axes]\nmode = "diagonal"\nparallel.cp = [1]', "axes[0].mode"),
    ('[[axes]]\nparallel.cp = [1]\n[[axes]]\nparallel.cp = [2]', "axes[1].parallel.cp"),
    ('[axes]\nparallel.cp = []', "axes[0].parallel.cp"),
    ('[axes]\nparallel = [1]', "axes[0].parallel"),
])
def test_bad_specs_name_the_field(tmp_path, axes, field):
    with pytest.raises(ConfigError) as ei:
        load_sweep_spec(_spec_file(tmp_path, axes))
    assert ei.value.field == field


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_sweep_name_is_refused(name):
    """[sweep] name = "" printed ': 24 runs' and ran; refused like every empty text in a run config."""
    with pytest.raises(ConfigError, match="non-empty text") as ei:
        sweep_spec_from_dict({"sweep": {"name": name}, "axes": {"cluster.gpus": [32]}})
    assert ei.value.field == "sweep.name"
    assert sweep_spec_from_dict({"axes": {"cluster.gpus": [32]}}).name == "sweep"  # no name: the default


def test_base_from_file_and_invalid_combination_is_a_row(tmp_path):
    (tmp_path / "run.toml").write_text(SMALL_BASE.replace("[base]", ""))
    spec = sweep_spec_from_dict({"base": "run.toml", "axes": {"cluster.gpus": [32, 36]}}, base_dir=tmp_path)
    runs = spec.runs()
    assert runs[0].config is not None and runs[0].config.cluster.gpus == 32
    assert runs[1].config is None and runs[1].run_hash.startswith("invalid-")
    assert "multiple of tp*pp*cp" in runs[1].error
    with pytest.raises(ConfigError, match="top-level"):
        sweep_spec_from_dict({"bse": {}})


def test_batch_sizer_learns_run_time():
    s = BatchSizer(workers=2, target_s=1.5)
    assert s.next_size(100) == 1  # nothing known yet: probe
    s.observe([{"wall_s": 0.01}] * 4)
    assert s.next_size(1000) == 150  # 1.5 s of 10 ms runs
    assert s.next_size(100) == 25  # but leave work for both workers: 100 / (2 x 2)
    assert s.next_size(30) == 20  # yet no task under 0.2 s (min_s): the tail is not one part file per run
    assert s.next_size(4) == 4
    assert BatchSizer(2, fixed=7).next_size(5) == 5


# ---------------------------------------------------------------- running (real simulator)
def test_sweep_rows_resume_and_figures(tmp_path):
    axes = '[axes]\npolicy.name = ["packing", "dynamic"]\ncluster.gpus = [32, 64, 36]\n'
    spec = load_sweep_spec(_spec_file(tmp_path, axes))
    out = tmp_path / "out"
    res = run_sweep(spec, out, SweepOptions(jobs=1, progress=False, figures=standard_figures))
    assert res.n_runs == 6 and res.n_done == 6 and res.counts == {"ok": 4, "error": 2}
    df = load_results(out)
    assert len(df) == 6 and df["config_hash"].is_unique
    ok = df[df["status"] == "ok"]
    assert (ok["tflops_per_gpu"] > 0).all() and (ok["iteration_time_s"] > 0).all()
    assert set(ok["policy.name"]) == {"packing", "dynamic"} and set(ok["cluster.gpus"]) == {32, 64}
    assert (ok["policy"] == ok["policy.name"]).all() and (ok["gpus"] == ok["cluster.gpus"]).all()
    bad = df[df["status"] == "error"]
    assert (bad["cluster.gpus"] == 36).all() and bad["reason"].str.contains("cluster.gpus").all()
    assert json.loads(ok["cp_hist"].iloc[0])  # dicts stored as JSON text
    assert (out / "spec.toml").read_text() == spec.source_text
    meta = json.loads((out / "sweep.json").read_text())
    assert len(meta["runs"]) == 6 and meta["base_hash"] == spec.base.config_hash()
    assert isinstance(res.figures["speedup_vs_gpus"], list) and Path(res.figures["speedup_vs_gpus"][0]).is_file()
    assert isinstance(res.figures["time_breakdown"], list) and isinstance(res.figures["cp_mix"], list)
    # the same sweep again: nothing to do
    again = run_sweep(spec, out, SweepOptions(jobs=1, progress=False, figures=False))
    assert again.n_skipped == 6 and again.n_done == 0
    # extend an axis: only the new runs run
    spec2 = load_sweep_spec(_spec_file(tmp_path, axes.replace("36]", "36, 128]"), "s2.toml"))
    more = run_sweep(spec2, out, SweepOptions(jobs=1, progress=False, figures=False))
    assert more.n_skipped == 6 and more.n_done == 2 and more.n_other == 0
    # a spec that drops runs is another sweep: refused without force
    with pytest.raises(ConfigError, match="--force"):
        run_sweep(spec2.__class__(spec2.base, spec2.groups[:0]), out, SweepOptions(jobs=1, progress=False, figures=False))
    fewer = run_sweep(spec2.__class__(spec2.base, spec2.groups[:0]), out, SweepOptions(jobs=1, progress=False, figures=False,
                      force=True))
    assert fewer.n_runs == 1 and fewer.n_other == 7  # the base run alone; the rest are kept, and counted
    assert len(load_results(out)) == 8


def _flaky(cfg):
    """A runner that fails in three ways, to check the rows a sweep records (not a simulator)."""
    if cfg.sim.seed == 1:
        raise InfeasibleError("memory", "pack needs 90 GiB")
    if cfg.sim.seed == 2:
        raise ConfigError("policy.options.x", 3, "something else")
    if cfg.sim.seed == 3 and not os.environ.get("DCPSIM_TEST_FIXED"):
        raise RuntimeError("boom")
    return {"tflops_per_gpu": 100.0 + cfg.sim.seed, "iteration_time_s": 1.0, "cp_hist": {1: 2}}


def test_infeasible_error_and_failed_rows(tmp_path, monkeypatch):
    spec = load_sweep_spec(_spec_file(tmp_path, "[axes]\nsim.seed = [0, 1, 2, 3]\n"))
    out = tmp_path / "o"
    res = run_sweep(spec, out, SweepOptions(jobs=1, progress=False, figures=False, runner=_flaky))
    assert res.counts == {"ok": 1, "infeasible": 1, "error": 1, "failed": 1}
    df = load_results(out).set_index("sim.seed")
    assert df.loc[1, "status"] == "infeasible" and df.loc[1, "reason"] == "memory: pack needs 90 GiB"
    assert df.loc[2, "status"] == "error" and "policy.options.x" in df.loc[2, "reason"]
    assert df.loc[3, "status"] == "failed" and df.loc[3, "reason"].startswith("RuntimeError: boom")
    # failed runs (bugs) are retried on resume; the others are not
    monkeypatch.setenv("DCPSIM_TEST_FIXED", "1")
    res2 = run_sweep(spec, out, SweepOptions(jobs=1, progress=False, figures=False, runner=_flaky))
    assert res2.n_skipped == 3 and res2.counts == {"ok": 1}
    df2 = load_results(out)
    assert len(df2) == 4 and df2.set_index("sim.seed").loc[3, "tflops_per_gpu"] == 103.0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "dcpsim.cli", *args]


# The interrupted-sweep tests stop a sweep part-way, so it must still be running when they do, on a host of any
# speed: the CLI runs with each simulation held back 50 ms (a sweep of 120 runs lasts at least 6 s), results unchanged.
_PACED = ("import sys, time\nimport dcpsim.run.single as single\n_run = single.run_simulation\n"
          "def paced(*args, **kwargs):\n    time.sleep(0.05)\n    return _run(*args, **kwargs)\n"
          "single.run_simulation = paced\nfrom dcpsim.cli import main\nsys.exit(main(sys.argv[1:]))\n")


def _cli_paced(*args: str) -> list[str]:
    """``dcpsim *args`` with every run held back 50 ms (see _PACED)."""
    return [sys.executable, "-c", _PACED, *args]


def _parts(out: Path) -> list[Path]:
    return sorted((out / "results").glob("part-*.parquet"))


def _start_and_wait(cmd: list[str], out: Path, min_parts: int, timeout_s: float = 60.0) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.monotonic()
    while len(_parts(out)) < min_parts:
        assert proc.poll() is None, f"sweep ended before it could be stopped: {proc.communicate()}"
        assert time.monotonic() - t0 < timeout_s, "no results appeared"
        time.sleep(0.02)
    return proc


def _kill_spec(tmp_path: Path, n_seeds: int) -> Path:
    seeds = ", ".join(str(i) for i in range(n_seeds))
    return _spec_file(tmp_path, f'[axes]\npolicy.name = ["packing", "dynamic"]\nsim.seed = [{seeds}]\n', "kill.toml")


@pytest.mark.slow  # an integration run of many seconds; CI runs it (make test-slow)
def test_resume_after_sigkill(tmp_path):
    spec = _kill_spec(tmp_path, 60)
    out = tmp_path / "killed"
    cmd = _cli_paced("sweep", str(spec), "--out", str(out), "-j", "1", "--batch-size", "2", "--no-progress",
                     "--no-figures", "--json")
    proc = _start_and_wait(cmd, out, min_parts=3)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole sweep, no chance to clean up
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    before = load_results(out, dedupe=False)
    assert 0 < len(before) < 120
    first_session = set(before["sweep_session"])
    assert len(first_session) == 1

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["skipped_already_done"] == len(before) and summary["ran"] == 120 - len(before)
    after = load_results(out, dedupe=False)
    assert len(after) == 120 and after["config_hash"].is_unique  # every run exactly once
    # the CLI reads the bare GPU name as its calibrated profile (dcpsim.hardware.defaults)
    from dcpsim.commands.sweep import with_default_profiles

    assert set(after["config_hash"]) == {r.run_hash for r in with_default_profiles(load_sweep_spec(spec)).runs()}
    kept = after[after["config_hash"].isin(before["config_hash"])]
    # the rows finished before the kill are the original rows: not rerun
    assert (kept["sweep_session"].isin(first_session)).all()
    assert not list((out / "results").glob("*.tmp"))


def test_ctrl_c_finishes_writing_and_says_how_to_resume(tmp_path):
    spec = _kill_spec(tmp_path, 60)
    out = tmp_path / "int"
    cmd = _cli_paced("sweep", str(spec), "--out", str(out), "-j", "1", "--batch-size", "2", "--no-progress",
                     "--no-figures")
    proc = _start_and_wait(cmd, out, min_parts=1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "run the same command again to resume" in err
    n = len(load_results(out))
    assert 0 < n < 120 and n % 2 == 0  # whole batches only


# ---------------------------------------------------------------- executors
@pytest.mark.slow  # an integration run of many seconds; CI runs it (make test-slow)
def test_dask_local_cluster_sweep(tmp_path):
    pytest.importorskip("distributed")
    spec = load_sweep_spec(_spec_file(tmp_path, '[axes]\npolicy.name = ["packing", "dynamic"]\nsim.seed = [0, 1]\n'))
    ex = make_executor(dask_local=2)
    try:
        assert ex.n_workers == 2
        addr = ex.client.scheduler.address
        assert addr.startswith("tcp://127.0.0.1:")
        res = run_sweep(spec, tmp_path / "dask", SweepOptions(executor=ex, progress=False, figures=False))
    finally:
        ex.close()
    assert res.counts == {"ok": 4} and res.workers == 2
    df = load_results(tmp_path / "dask")
    serial = run_sweep(spec, tmp_path / "serial", SweepOptions(jobs=1, progress=False, figures=False))
    assert serial.counts == {"ok": 4}
    ref = load_results(tmp_path / "serial").set_index("config_hash")["tflops_per_gpu"]
    # same runs, same results, wherever they ran
    assert df.set_index("config_hash")["tflops_per_gpu"].sort_index().equals(ref.sort_index())


def test_local_process_pool_matches_serial(tmp_path):
    spec = load_sweep_spec(_spec_file(tmp_path, '[axes]\npolicy.name = ["packing", "dynamic"]\nsim.seed = [5, 6]\n'))
    a = run_sweep(spec, tmp_path / "a", SweepOptions(jobs=2, progress=False, figures=False))
    b = run_sweep(spec, tmp_path / "b", SweepOptions(jobs=1, progress=False, figures=False))
    assert a.workers == 2 and a.counts == b.counts == {"ok": 4}
    ta = load_results(tmp_path / "a").set_index("config_hash")["iteration_time_s"].sort_index()
    tb = load_results(tmp_path / "b").set_index("config_hash")["iteration_time_s"].sort_index()
    assert ta.equals(tb)


def test_executor_options_checked():
    with pytest.raises(ConfigError, match="only one executor"):
        make_executor(dask_local=2, dask_address="tcp://127.0.0.1:1")
    with pytest.raises(ConfigError, match="--dask-address"):
        make_executor(dask_address="127.0.0.1:8786")
    with pytest.raises(ConfigError, match="-j"):
        make_executor(jobs=0)
    with pytest.raises(ConfigError, match="--slurm-walltime"):
        SlurmOptions(walltime="1 hour")


def test_slurm_job_script_carries_the_options():
    pytest.importorskip("dask_jobqueue")
    opts = SlurmOptions(jobs=3, cores=4, processes=2, memory="8GB", walltime="00:30:00", queue="cpu",
                        account="proj42", job_extra=("--exclusive",), prologue=("source /opt/venv/bin/activate",))
    script = slurm_job_script(opts)
    for line in ("#SBATCH -p cpu", "#SBATCH -A proj42", "#SBATCH -t 00:30:00", "#SBATCH --exclusive",
                 "source /opt/venv/bin/activate", "--nworkers 2", "--nthreads 2"):
        assert line in script, (line, script)
    assert opts.workers == 6


def test_cli_sweep_and_plot(tmp_path):
    from dcpsim.cli import main

    spec = _spec_file(tmp_path, '[axes]\npolicy.name = ["packing", "dynamic"]\ncluster.gpus = [32, 64]\n')
    out = tmp_path / "cli"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--no-progress"]) == 0
    assert (out / "figures" / "speedup_vs_gpus.png").is_file()
    assert main(["plot", str(out), "--x", "gpus", "--y", "tflops_per_gpu", "--hue", "policy",
                 "--out", str(tmp_path / "p.pdf")]) == 0
    assert (tmp_path / "p.pdf").stat().st_size > 1000
    assert main(["plot", str(out), "--x", "gpus", "--y", "no_such_column"]) == 2
    assert main(["sweep", str(spec), "--out", str(out), "--slurm-account", "a"]) == 2  # needs --slurm


def _busy(seconds: float) -> int:
    import time

    end, n = time.process_time() + seconds, 0
    while time.process_time() < end:
        n += 1
    return n


def _parent_and_busy(seconds: float) -> tuple[int, int]:
    import os

    return os.getppid(), _busy(seconds)


def test_fork_pool_workers_are_children_of_this_process():
    """``LocalExecutor(fork=True)`` (what `dcpsim plan` asks for): in a one-thread process its workers are forked
    from this process (no fork server), so closing the pool reaps them here and their CPU time counts in this
    process's children's time; with another thread running it falls back to the fork server."""
    import os
    import resource
    import threading

    from dcpsim.run.executors import LocalExecutor
    from dcpsim.run.pool import fork_safe

    if not fork_safe():
        pytest.skip("this test process runs more than one thread or has no fork")
    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    before = children_cpu()
    ex = LocalExecutor(jobs=1, fork=True)
    parent, n = ex.submit(_parent_and_busy, 0.3).result()
    ex.close()
    assert parent == os.getpid() and n > 0
    assert children_cpu() - before >= 0.25
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not fork_safe()
        ex = LocalExecutor(jobs=1, fork=True)
        parent, _ = ex.submit(_parent_and_busy, 0.01).result()
        ex.close()
        assert parent != os.getpid()  # the fork server's child
    finally:
        stop.set()
        t.join()


def test_fork_server_reaped_once_no_pool_runs():
    """reap_fork_server (what `dcpsim plan` calls after its pool): refused while a pool runs; once none does,
    the fork server is stopped and reaped by this process, so the workers' CPU time (reaped by it) counts
    in this process's children's time; a later pool starts a fresh fork server."""
    import os
    import resource
    from multiprocessing import forkserver

    from dcpsim.run.executors import LocalExecutor
    from dcpsim.run.pool import reap_fork_server

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    ex = LocalExecutor(jobs=1)
    assert ex.submit(_busy, 0.3).result() > 0
    server = forkserver._forkserver._forkserver_pid
    assert server and not reap_fork_server()  # the pool still runs
    ex.close()
    assert reap_fork_server() and forkserver._forkserver._forkserver_pid is None
    with pytest.raises(ChildProcessError):  # already reaped: not our child any more
        os.waitpid(server, os.WNOHANG)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before >= 0.25
    again = LocalExecutor(jobs=1)
    assert again.submit(_busy, 0.01).result() > 0
    again.close()


def test_runs_of_a_task_share_parts_and_give_the_same_rows(monkeypatch):
    """A task's runs reuse the cost model, layout and simulator of the runs before them (dcpsim.run.reuse) and
    give the rows of runs built afresh; a run with faults has its own simulator, a run with an inline table none."""
    import tomllib

    import dcpsim.run.single as single
    from dcpsim.run.sweep import execute_batch, execute_run

    base = tomllib.loads(SMALL_BASE)["base"] | {"sim": {"iterations": 2}}
    spec = sweep_spec_from_dict({"base": base, "axes": [
        {"policy.name": ["packing", "dynamic"]}, {"sim.seed": [1, 2]},
        {"mode": "zip", "sim.straggler_fraction": [0.0, 0.25], "sim.straggler_slowdown": [1.0, 1.5]}]})
    runs = spec.runs()
    host = {"wall_s", "cpu_s", "sim_wall_s", "planning_wall_s", "events_per_s"}
    fresh = [{k: v for k, v in execute_run(rs).items() if k not in host} for rs in runs]
    built = {"cost": 0, "sim": 0}
    for name, what in (("build_cost_model", "cost"), ("build_simulator", "sim")):
        real = getattr(single, name)
        monkeypatch.setattr(single, name, lambda *a, _real=real, _w=what, **k: built.update({_w: built[_w] + 1})
                            or _real(*a, **k))
    shared = [{k: v for k, v in r.items() if k not in host} for r in execute_batch(runs)]
    assert shared == fresh and {r["status"] for r in shared} == {"ok"}
    # a cost model per configuration without seed and policy (with and without stragglers); a simulator for the
    # runs without faults and one per seed for those with stragglers
    assert built == {"cost": 2, "sim": 3}


def test_sweep_runs_resolve_as_with_updates():
    """SweepSpec.runs' resolver (the changed sections validated alone, the id from per-section JSON texts) gives
    what ``check_config(base.with_updates(a))`` and ``config_hash()`` give: equal configurations, equal ids, the
    same error where one is refused (types kept apart: True, 1 and 1.0; tables; policy options; bad paths)."""
    import tomllib

    from dcpsim.run.load import check_config, config_from_dict
    from dcpsim.run.sweep_spec import _Resolver

    base = config_from_dict(tomllib.loads(SMALL_BASE)["base"])
    cases = [{"policy.name": p, "sim.seed": s} for p in ("packing", "dynamic") for s in (0, 2**32 - 1)] + [
        {"parallel.cp": 3}, {"parallel.cp": 4, "cluster.gpus": 64}, {"sim.host_timeline": 1}, {"sim.host_timeline": True},
        {"parallel.tp": True}, {"parallel.tp": 2}, {"hardware.network_scale": 1}, {"hardware.network_scale": 1.0},
        {"policy.options": {"nope": 1}}, {"policy.options.nope": 1}, {"sim.bogus": 1}, {"workload.name": "fixed"},
        {"workload.name": "fixed", "workload.seq_len": 4096, "workload.max_len": None, "workload.min_len": None},
        {"parallel.min_cp": 3}, {"parallel.vp": 2}, {"workload.gbs": 2}, {"sim.engine": "nope"}, {"policy.name": "nope"},
        {"model.name": "llama-70b"}, {"step.deterministic": True}, {"sim.seed": -1}, {"sim.noise_cv": float("nan")},
        {"parallel.max_tokens_per_rank": "auto"}]
    resolve = _Resolver(base)

    def outcome(make, a):
        try:
            return check_config(make(a)), None
        except ConfigError as exc:
            return None, str(exc)

    for a in cases * 2:  # twice: the second time from the resolver's cache of validated sections
        (want, werr), (got, gerr) = outcome(base.with_updates, a), outcome(resolve.config, a)
        assert (got, gerr) == (want, werr), a
        if got is not None:
            assert resolve.hash(got) == want.config_hash() == got.config_hash(), a


def test_run_streams_are_the_spawned_children():
    """dcpsim.run.streams builds each stream alone, on first access: the generators of
    ``SeedSequence(seed).spawn(4)`` (the same state, the same draws)."""
    import numpy as np

    from dcpsim.run.streams import NAMES, Streams

    for seed in (0, 7, 2**32 - 1):
        spawned = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(NAMES))]
        lazy = Streams(seed)
        assert not lazy
        for name, ref in zip(reversed(NAMES), reversed(spawned), strict=True):
            assert lazy[name].bit_generator.state == ref.bit_generator.state
            assert np.array_equal(lazy[name].random(8), ref.random(8))


def test_sweep_names_why_its_runs_are_errors_and_an_unknown_gpu(tmp_path, capsys):
    """A [base] GPU that is no profile printed 'profile nosuch: UNCALIBRATED ... datasheet figures', then every run was
    an error row and the command exited 0 without a word on why."""
    from dcpsim.cli import main

    spec = tmp_path / "s.toml"
    spec.write_text(SMALL_BASE.replace('model.name = "llama-13b"', 'model.name = "llama-13b"\nhardware.gpu = "nosuch"')
                    + '[sweep]\nname = "t"\n[axes]\npolicy.name = ["packing", "dynamic"]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1", "--no-figures", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "profile nosuch: NOT A PROFILE" in out and "UNCALIBRATED" not in out, out
    assert "2 run(s) of this sweep are invalid configurations" in err and "2 x gpu: got 'nosuch'" in err, err


def test_a_sweep_inside_another_sweeps_results_is_refused(tmp_path, capsys):
    """`dcpsim sweep SPEC --out A/results` (A a sweep) wrote spec.toml, sweep.json and results/ inside A's parquet
    dataset: pd.read_parquet('A/results') then failed ('Parquet magic bytes not found ... spec.toml')."""
    from dcpsim.cli import main

    spec = _spec_file(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
    a = tmp_path / "a"
    argv = ["sweep", str(spec), "-j", "1", "--no-figures", "--no-progress"]
    assert main([*argv, "--out", str(a)]) == 0
    before = sorted(p.name for p in (a / "results").iterdir())
    for inner in (a / "results", a / "results" / "x" / "y"):
        assert main([*argv, "--out", str(inner)]) == 2
        assert capsys.readouterr().err.startswith(f"dcpsim: error: --out: got '{inner}'; expected a folder outside")
    assert sorted(p.name for p in (a / "results").iterdir()) == before
    assert main([*argv, "--out", str(a / "b")]) == 0  # beside the results: fine


def test_load_results_of_a_missing_folder_is_refused_not_an_empty_table(tmp_path):
    """load_results('typo') returned an empty DataFrame, read by a caller as a sweep with no rows yet."""
    with pytest.raises(ConfigError, match="an existing sweep folder") as ei:
        load_results(tmp_path / "no-such-sweep")
    assert ei.value.field == "out_dir"
    (tmp_path / "empty").mkdir()
    assert load_results(tmp_path / "empty").empty  # an existing folder with no parts yet is still an empty table


@pytest.mark.parametrize("options, field", [({"jobs": 1}, "options"), (("executor", "nope"), "options.executor"),
                                            (("batch_size", 0), "options.batch_size"),
                                            (("target_task_s", float("nan")), "options.target_task_s")])
def test_run_sweep_checks_its_options_before_any_folder_is_made(tmp_path, options, field):
    """A dict of options raised "'dict' object has no attribute 'executor'", an executor named by a string
    "'str' object has no attribute 'n_workers'", target_task_s=nan numpy's 'cannot convert float NaN to
    integer', and batch_size=0 ran with adaptive batches (read as unset)."""
    import dataclasses

    from dcpsim.run.sweep import SweepOptions, run_sweep

    opts = options if isinstance(options, dict) else dataclasses.replace(SweepOptions(jobs=1), **dict([options]))
    spec = _spec_file(tmp_path, '[axes]\npolicy.name = ["packing"]\n', "opts.toml")
    with pytest.raises(ConfigError) as ei:
        run_sweep(spec, tmp_path / "out", opts)
    assert ei.value.field == field and not (tmp_path / "out").exists()


def test_resume_refuses_rows_of_a_lengths_file_that_changed(tmp_path):
    """A run's id names a lengths file by its path: after the file was rewritten, a resumed sweep skipped the
    finished run and kept its row of the old contents (11.87 s where a fresh folder gives 24.36 s). sweep.json now
    records each input's SHA-256 and a resume whose inputs changed is refused, naming the file."""
    lengths = tmp_path / "l.txt"
    lengths.write_text("4096\n" * 32)
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SMALL_BASE.replace('name = "github", ', f'name = "{lengths.as_posix()}", ')
                         + '\n[sweep]\nname = "t"\n[axes]\npolicy.name = ["packing"]\n')
    out = tmp_path / "out"
    opts = SweepOptions(jobs=1, progress=False, figures=None)
    assert run_sweep(load_sweep_spec(spec_path), out, opts).n_done == 1
    assert json.loads((out / "sweep.json").read_text())["inputs"] == {
        lengths.as_posix(): hashlib.sha256(lengths.read_bytes()).hexdigest()}
    assert run_sweep(load_sweep_spec(spec_path), out, opts).n_skipped == 1  # unchanged: resumed, nothing re-run
    lengths.write_text("8192\n" * 32)
    with pytest.raises(ConfigError, match=r"--out.*l\.txt' changed since they ran"):
        run_sweep(load_sweep_spec(spec_path), out, opts)
