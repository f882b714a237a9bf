"""File safety and bounded work: dcpsim writes only inside --out, only its own files, atomically; big work is confirmed.

Every rule of dcpsim.outdir / dcpsim.limits / dcpsim.run.pool has a test here,
through the CLI where a user would meet it (one line on stderr, exit 2, nothing
written or changed).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_sweep import SMALL_BASE  # the one small sweep base of the tests

from dcpsim.cli import main
from dcpsim.errors import ConfigError
from dcpsim.outdir import MANIFEST, TMP_PREFIX, check_out_dir, foreign_files, write_text, write_with

REPO = Path(__file__).resolve().parents[1]
RUN_TOML = REPO / "examples" / "simulate_default.toml"

SMALL_SWEEP = SMALL_BASE + """
[sweep]
name = "files"
"""


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capsys, rc: int, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("dcpsim: error:") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


def _spec(tmp_path: Path, axes: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(SMALL_SWEEP + axes)
    return p


# ---------------------------------------------------------------- foreign files are never touched
def test_export_refuses_a_folder_with_foreign_files_and_leaves_them(tmp_path, capsys):
    (tmp_path / "README.md").write_text("my notes\n")
    before = _snapshot(tmp_path)
    rc = main(["export", "--config", str(RUN_TOML), "--out", str(tmp_path), "--no-simulate"])
    _one_line_error(capsys, rc, "--out", "README.md", "--force")
    assert _snapshot(tmp_path) == before  # nothing written, nothing changed


def test_export_force_writes_and_rerun_into_own_folder_works(tmp_path, capsys):
    (tmp_path / "README.md").write_text("my notes\n")
    assert main(["export", "--config", str(RUN_TOML), "--out", str(tmp_path), "--no-simulate", "--force"]) == 0
    assert (tmp_path / "launch.sh").stat().st_mode & 0o111
    owned = json.loads((tmp_path / MANIFEST).read_text())["files"]
    assert {"README.md", "launch.sh", "lengths.csv"} <= set(owned)
    own = tmp_path / "own"
    for _ in range(2):  # a rerun into the folder dcpsim wrote needs no --force
        assert main(["export", "--config", str(RUN_TOML), "--out", str(own), "--no-simulate"]) == 0
    capsys.readouterr()


def test_simulate_does_not_overwrite_a_foreign_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"mine": true}')
    rc = main(["simulate", str(RUN_TOML), "--iterations", "1", "--out", str(tmp_path)])
    _one_line_error(capsys, rc, "config.json")
    assert (tmp_path / "config.json").read_text() == '{"mine": true}'


def _no_work(*args, **kwargs):
    raise AssertionError("the work started before the output path was checked")


def test_bad_out_paths_fail_before_any_work(tmp_path, capsys, monkeypatch):
    # the work itself (simulations, batch draws, workload sampling) must never be reached
    monkeypatch.setattr("dcpsim.run.single.run_simulation", _no_work)
    monkeypatch.setattr("dcpsim.workload.sample_global_batch", _no_work)
    monkeypatch.setattr("dcpsim.workload.get_workload", _no_work)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["simulate", str(RUN_TOML), "--out", str(a_file)], "is a file"),
        (["simulate", str(RUN_TOML), "--out", str(a_file / "sub")], "not a folder"),
        (["export", "--config", str(RUN_TOML), "--out", str(a_file)], "is a file"),
        (["reproduce", "--quick", "--out", str(a_file)], "is a file"),
        (["schedule", "--out", str(tmp_path)], "folder"),
        (["simulate", str(RUN_TOML), "--trace", str(a_file / "t.json")], "not a folder"),
        (["workload", "show", "github", "--plot", str(tmp_path / "x.txt")], ".png"),
        (["plan", "--csv", str(a_file / "x.csv")], "not a folder"),
        (["simulate", str(RUN_TOML), "--out", ""], "a path"),
        (["demo", "--trace", " "], "a path"),
    ]
    for argv, words in cases:
        rc = main(argv)
        _one_line_error(capsys, rc, words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_plot_out_folder_writes_only_inside(tmp_path, capsys):
    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing", "dynamic"]\ncluster.gpus = [32, 64]\n')
    sweep = tmp_path / "sw"
    assert main(["sweep", str(spec), "--out", str(sweep), "-j", "1", "--no-progress", "--no-figures"]) == 0
    figs = tmp_path / "figs"
    figs.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["plot", str(sweep), "--x", "gpus", "--hue", "policy", "--out", str(figs)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no figs.png beside the folder
    assert {p.suffix for p in figs.iterdir() if p.name != MANIFEST} == {".png", ".pdf"}
    # a folder holding someone else's files is refused as --out, as for every command
    (figs / "theirs.txt").write_text("x")
    rc = main(["plot", str(sweep), "--x", "gpus", "--out", str(figs)])
    _one_line_error(capsys, rc, "theirs.txt")
    # one column on two groupings (--x gpus --hue gpus) was a pandas traceback ('cannot insert gpus, already exists')
    for extra in (["--hue", "gpus"], ["--col", "gpus"], ["--hue", "policy", "--col", "policy"]):
        rc = main(["plot", str(sweep), "--x", "gpus", *extra, "--out", str(tmp_path / "same.png")])
        _one_line_error(capsys, rc, "a column other than")
    assert not (tmp_path / "same.png").exists()


# ---------------------------------------------------------------- sweeps
def test_sweep_ignores_and_names_foreign_parts(tmp_path, capsys):
    import pandas as pd

    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing", "dynamic"]\n')
    out = tmp_path / "o"
    (out / "results").mkdir(parents=True)
    foreign = out / "results" / "part-000000-deadbeef.parquet"
    pd.DataFrame([{"config_hash": "x", "status": "ok", "tflops_per_gpu": 1e9}]).to_parquet(foreign)
    junk = out / "results" / "part-000001-00000000.parquet"
    junk.write_bytes(b"PAR1 not really")
    before = {p: p.read_bytes() for p in (foreign, junk)}
    with pytest.warns(UserWarning, match="did not write"):
        assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--no-progress", "--no-figures"]) == 0
    assert {p: p.read_bytes() for p in (foreign, junk)} == before  # never merged, rewritten or deleted
    from dcpsim.run.sweep import load_results

    with pytest.warns(UserWarning):
        df = load_results(out)
    assert len(df) == 2 and "x" not in set(df["config_hash"])
    capsys.readouterr()


def test_truncated_own_part_is_reported_and_its_runs_run_again(tmp_path, capsys):
    from dcpsim.run.sweep import load_results

    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing", "dynamic"]\n')
    out = tmp_path / "o"
    argv = ["sweep", str(spec), "--out", str(out), "-j", "1", "--no-progress", "--no-figures"]
    assert main(argv) == 0
    (part,) = list((out / "results").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])  # a disk that lost the end of the file
    with pytest.warns(UserWarning, match="unreadable"):
        assert main(argv) == 0
    assert len(load_results(out)) == 2 and "Traceback" not in capsys.readouterr().err


def test_sweep_refuses_foreign_top_level_files(tmp_path, capsys):
    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "spec.toml").write_text("# mine")
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1", "--no-progress"])
    _one_line_error(capsys, rc, "spec.toml")
    assert (tmp_path / "o" / "spec.toml").read_text() == "# mine"


def test_huge_sweep_is_estimated_before_it_is_built(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("dcpsim.run.sweep.SweepSpec.runs", _no_work)  # the runs are never built
    vals = ", ".join(str(i) for i in range(1, 1001))  # valid values (each is checked against its field)
    spec = _spec(tmp_path, f"[axes]\nsim.seed = [{vals}]\nworkload.gbs = [{vals}]\n")
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1", "--no-progress"])
    _one_line_error(capsys, rc, "1,000,000 runs", "--yes")
    assert not (tmp_path / "o").exists()


def test_jobs_capped_at_the_cores(tmp_path):
    from dcpsim.run.executors import make_executor
    from dcpsim.run.pool import available_cores, cap_jobs

    with pytest.warns(UserWarning, match="capped"):
        assert cap_jobs(10_000) == available_cores()
    with pytest.raises(ConfigError, match="-j"):
        cap_jobs(0)
    with pytest.warns(UserWarning, match="capped"):
        ex = make_executor(jobs=10_000)
    try:
        assert ex.n_workers == available_cores()
    finally:
        ex.close()


def test_workload_samples_huge_refused(capsys, monkeypatch):
    monkeypatch.setattr("dcpsim.workload.get_workload", _no_work)  # nothing is drawn
    rc = main(["workload", "show", "github", "--samples", "1000000000"])
    _one_line_error(capsys, rc, "--samples", "--yes", "GB")
    with pytest.raises(SystemExit) as ei:  # 1e9 is not an integer flag value: argparse's one line
        main(["workload", "show", "github", "--samples", "1e9"])
    assert ei.value.code == 2 and "--samples" in capsys.readouterr().err


# ---------------------------------------------------------------- executors and injection
def test_slurm_option_injection_refused(tmp_path, capsys):
    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
    for flag, bad in (("--slurm-queue", "cpu\n#SBATCH --wrap=id"), ("--slurm-account", "a;id"),
                      ("--slurm-extra", "--x\nrm -rf ~"), ("--slurm-prologue", "source a\nid"),
                      ("--slurm-memory", "32GB $(id)"), ("--slurm-python", "python -c x")):
        rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--slurm", f"{flag}={bad}"])
        _one_line_error(capsys, rc, flag)
    assert not (tmp_path / "o").exists()


def test_slurm_without_sbatch_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--slurm"])
    _one_line_error(capsys, rc, "sbatch")


def test_unreachable_dask_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("dcpsim.run.executors.DASK_CONNECT_TIMEOUT_S", 1)
    spec = _spec(tmp_path, '[axes]\npolicy.name = ["packing"]\n')
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dask-address", "tcp://127.0.0.1:9"])
    _one_line_error(capsys, rc, "--dask-address")


def test_profile_table_path_traversal_refused(tmp_path):
    from dcpsim.errors import ProfileError
    from dcpsim.hardware import load_profile

    src = REPO / "profiles" / "h100-sxm"
    for bad in ("../../etc/passwd", "/etc/passwd", "sub/gemm.csv", ".."):
        d = tmp_path / f"p{abs(hash(bad))}"
        d.mkdir()
        for f in src.glob("*.csv"):
            (d / f.name).write_bytes(f.read_bytes())
        (d / "profile.toml").write_text((src / "profile.toml").read_text().replace(
            'gemm = "gemm.csv"', f'gemm = "{bad}"'))
        with pytest.raises(ProfileError, match="tables.gemm") as ei:
            load_profile(d)
        assert "root:" not in str(ei.value)


# ---------------------------------------------------------------- atomic writes
def test_atomic_write_leaves_no_temporaries_and_keeps_the_old_file_on_failure(tmp_path):
    p = write_text(tmp_path / "a.json", "one")
    assert p.read_text() == "one"

    def broken(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_with(p, broken)
    assert p.read_text() == "one"  # the old file, whole
    assert not [q for q in tmp_path.iterdir() if q.name.startswith(TMP_PREFIX)]
    write_text(p, "two")
    assert p.read_text() == "two"
    assert sorted(q.name for q in tmp_path.iterdir()) == [MANIFEST, "a.json"]


def test_library_writes_refuse_foreign_files(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="--force"):
        write_text(tmp_path / "mine.txt", "overwritten")
    assert (tmp_path / "mine.txt").read_text() == "keep"
    assert [p.name for p in foreign_files(tmp_path)] == ["mine.txt"]
    with pytest.raises(ConfigError):
        check_out_dir(tmp_path)
    check_out_dir(tmp_path / "new" / "deeper")  # creatable: fine, and nothing is created by the check
    assert not (tmp_path / "new").exists()
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / ".gitignore").write_text("*.csv\n")  # a version-control marker does not make a folder someone else's
    check_out_dir(marked)
    with pytest.raises(ConfigError):
        write_text(marked / ".gitignore", "x")  # ... and dcpsim never writes it


# ---------------------------------------------------------------- worker processes
def _killer(marker: str | None, cfg):
    """A sweep runner whose worker dies (SIGKILL) on seed 1: once when ``marker`` names a file, else always."""
    if cfg.sim.seed == 1 and (not marker or not Path(marker).exists()):
        if marker:
            Path(marker).write_text("killed once")
        os.kill(os.getpid(), signal.SIGKILL)
    return {"tflops_per_gpu": float(cfg.sim.seed), "iteration_time_s": 1.0}


@pytest.mark.slow  # kills a pool worker and waits for the retry (~7 s): in make test-slow, which CI runs
def test_killed_worker_is_retried_then_recorded(tmp_path):
    from dcpsim.run.sweep import SweepOptions, load_results, run_sweep

    spec = _spec(tmp_path, "[axes]\nsim.seed = [0, 1, 2, 3]\n")
    once = functools.partial(_killer, str(tmp_path / "marker"))
    res = run_sweep(spec, tmp_path / "once", SweepOptions(jobs=2, progress=False, figures=False, runner=once))
    assert res.counts == {"ok": 4}  # the run that lost its worker was run again
    always = functools.partial(_killer, None)
    res = run_sweep(spec, tmp_path / "always", SweepOptions(jobs=2, progress=False, figures=False, runner=always))
    df = load_results(tmp_path / "always").set_index("sim.seed")
    assert res.counts.get("failed") == 1 and df.loc[1, "status"] == "failed"
    assert "worker process died" in df.loc[1, "reason"]
    assert (df.drop(index=1)["status"] == "ok").all()


def _cell_killer(cell):
    """A reproduce cell runner whose worker dies on seed 1 (every time)."""
    if cell.seed == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"dataset": cell.dataset, "policy": cell.policy, "seed": cell.seed, "status": "ok"}


@pytest.mark.parametrize("jobs", [2, 1])  # with 1 worker, seed 2 always waits in the pool seed 1's death breaks
def test_reproduce_pool_records_a_cell_whose_worker_dies(jobs):
    from dcpsim.reproduction.runner import CellSpec, _run_pooled
    from dcpsim.run import RunConfig

    cells = [CellSpec(dataset="d", policy="packing", seed=s, config=RunConfig()) for s in range(3)]
    rows = sorted(_run_pooled(cells, jobs, None, fn=_cell_killer), key=lambda r: r["seed"])
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert "worker process died" in rows[1]["reason"]


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.add(int(d.name))
    return out


def _descendants(pid: int) -> set[int]:
    todo, seen = [pid], set()
    while todo:
        for c in _children(todo.pop()):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return seen


@pytest.mark.slow  # an integration run of many seconds; CI runs it (make test-slow)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_workers_die_with_the_driver(tmp_path):
    seeds = ", ".join(str(i) for i in range(200))
    spec = _spec(tmp_path, f'[axes]\npolicy.name = ["packing", "dynamic"]\nsim.seed = [{seeds}]\n')
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "dcpsim.cli", "sweep", str(spec), "--out", str(out), "-j", "2",
                             "--no-progress", "--no-figures"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not list((out / "results").glob("part-*.parquet")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < 90, "no results appeared"
        time.sleep(0.05)
    workers = _descendants(proc.pid)
    assert workers, "the sweep should run worker processes"
    proc.kill()  # SIGKILL to the driver only: no chance to clean up
    proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = {p for p in workers if Path(f"/proc/{p}").exists()
                 and "Z" not in (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[:1] or ["Z"])}
        time.sleep(0.2)
    assert not alive, f"workers still running after the driver died: {alive}"
