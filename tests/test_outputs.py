"""Output folders and files: one sweep per folder, ownership by content, no collisions, single files stay single."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_sweep import SMALL_BASE

from dcpsim.cli import main
from dcpsim.errors import ConfigError
from dcpsim.outdir import MANIFEST, check_out_dir, check_out_file, is_owned, write_text
from tests.test_files import _one_line_error  # one definition of the one-line error check

REPO = Path(__file__).resolve().parents[1]
RUN_TOML = REPO / "examples" / "simulate_default.toml"


def _stub(cfg) -> dict:
    """A sweep runner that does no simulation (these tests are about files, not results)."""
    return {"tflops_per_gpu": float(cfg.sim.seed), "iteration_time_s": 1.0}


def _spec(tmp_path: Path, axes: str, name: str) -> Path:
    p = tmp_path / name
    p.write_text(SMALL_BASE + f'\n[sweep]\nname = "{name}"\n' + axes)
    return p


# ---------------------------------------------------------------- one sweep per folder
def test_another_sweep_into_the_same_folder_is_refused_unless_it_extends_or_force(tmp_path, capsys):
    from dcpsim.run.sweep import SweepOptions, load_results, load_sweep_spec, run_sweep

    out = tmp_path / "o"
    a = load_sweep_spec(_spec(tmp_path, "[axes]\nsim.seed = [0, 1]\n", "a.toml"))
    run_sweep(a, out, SweepOptions(jobs=1, progress=False, figures=False, runner=_stub))
    spec_before = (out / "spec.toml").read_text()
    other = _spec(tmp_path, "[axes]\nsim.seed = [7, 8]\n", "b.toml")
    rc = main(["sweep", str(other), "--out", str(out), "-j", "1", "--no-progress", "--no-figures"])
    _one_line_error(capsys, rc, "--out", "--force", "spec")
    assert (out / "spec.toml").read_text() == spec_before and len(load_results(out)) == 2  # nothing changed
    # the same runs under another file name and comments: the same sweep
    same = _spec(tmp_path, "# renamed\n[axes]\nsim.seed = [0, 1]\n", "c.toml")
    assert run_sweep(load_sweep_spec(same), out, SweepOptions(jobs=1, progress=False, figures=False, runner=_stub)).n_skipped == 2
    # a grown axis extends the sweep: only the new run runs
    grown = load_sweep_spec(_spec(tmp_path, "[axes]\nsim.seed = [0, 1, 2]\n", "d.toml"))
    res = run_sweep(grown, out, SweepOptions(jobs=1, progress=False, figures=False, runner=_stub))
    assert res.n_skipped == 2 and res.n_done == 1
    # --force: the other spec's rows go beside the old ones
    res = run_sweep(load_sweep_spec(other), out, SweepOptions(jobs=1, progress=False, figures=False, runner=_stub, force=True))
    assert res.n_done == 2 and res.n_other == 3


# ---------------------------------------------------------------- ownership by content
def test_a_file_edited_by_the_user_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "o"
    write_text(out / "summary.json", '{"summary": {}}\n')
    assert is_owned(out / "summary.json")
    (out / "summary.json").write_text('{"my": "notes, same name"}\n')
    assert not is_owned(out / "summary.json")
    with pytest.raises(ConfigError, match="changed since dcpsim wrote it"):
        check_out_dir(out)
    with pytest.raises(ConfigError, match="changed since dcpsim wrote it"):
        write_text(out / "summary.json", "{}")
    assert json.loads((out / "summary.json").read_text()) == {"my": "notes, same name"}
    rc = main(["simulate", str(RUN_TOML), "--out", str(out), "--set", "workload.gbs=16", "--set", "cluster.gpus=16"])
    _one_line_error(capsys, rc, "--out", "summary.json", "changed since dcpsim wrote it", "--force")
    assert json.loads((out / "summary.json").read_text()) == {"my": "notes, same name"}


def test_a_rewrite_of_the_same_size_is_caught_by_the_content_hash(tmp_path):
    import os

    p = write_text(tmp_path / "a.json", "1234")
    st = p.stat()
    p.write_text("5678")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, another time: the hash decides
    assert not is_owned(p)
    write_text(tmp_path / "b.json", "abcd")
    os.utime(tmp_path / "b.json", ns=(st.st_atime_ns, st.st_mtime_ns + 5))  # touched, content unchanged: still dcpsim's
    assert is_owned(tmp_path / "b.json")


def test_an_old_size_only_manifest_entry_still_counts(tmp_path):
    (tmp_path / "a.txt").write_text("four")
    (tmp_path / MANIFEST).write_text(json.dumps({"files": {"a.txt": 4}}))
    assert is_owned(tmp_path / "a.txt")
    check_out_dir(tmp_path)


# ---------------------------------------------------------------- collisions
def test_trace_inside_out_on_one_of_its_files_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    rc = main(["simulate", str(RUN_TOML), "--out", str(out), "--trace", str(out / "summary.json")])
    _one_line_error(capsys, rc, "--trace", "summary.json", "--out")
    assert not out.exists()


def test_plan_plot_and_csv_on_one_file_are_refused(tmp_path, capsys):
    rc = main(["plan", "--plot", str(tmp_path / "x.png"), "--csv", str(tmp_path / "x.png"), "--no-progress"])
    _one_line_error(capsys, rc, "--csv", "--plot")


# ---------------------------------------------------------------- single files
@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    from dcpsim.run.sweep import SweepOptions, load_sweep_spec, run_sweep

    tmp = tmp_path_factory.mktemp("plotsweep")
    spec = load_sweep_spec(_spec(tmp, "[axes]\nsim.seed = [0, 1, 2]\n", "p.toml"))
    run_sweep(spec, tmp / "sw", SweepOptions(jobs=1, progress=False, figures=False, runner=_stub))
    return tmp / "sw"


def test_plot_out_with_an_unsupported_suffix_is_refused_not_made_a_folder(sweep_dir, tmp_path, capsys):
    rc = main(["plot", str(sweep_dir), "--x", "sim.seed", "--out", str(tmp_path / "f.jpg")])
    _one_line_error(capsys, rc, "--out", "f.jpg", ".png")
    assert not (tmp_path / "f.jpg").exists()


def test_plot_out_file_is_a_file_and_leaves_no_manifest_in_the_users_folder(sweep_dir, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my folder\n")
    target = mine / "f.png"
    assert main(["plot", str(sweep_dir), "--x", "sim.seed", "--out", str(target)]) == 0
    assert target.is_file() and sorted(p.name for p in mine.iterdir()) == ["f.png", "notes.txt"]
    # written again without --force: dcpsim knows it wrote it (per-user registry, not a manifest in the folder)
    assert main(["plot", str(sweep_dir), "--x", "sim.seed", "--out", str(target)]) == 0
    target.write_bytes(b"user's own picture")
    rc = main(["plot", str(sweep_dir), "--x", "sim.seed", "--out", str(target)])
    _one_line_error(capsys, rc, "--out", "changed since dcpsim wrote it")
    assert target.read_bytes() == b"user's own picture"
    assert sorted(p.name for p in mine.iterdir()) == ["f.png", "notes.txt"]


def test_check_out_file_alone_writes_nothing(tmp_path):
    check_out_file(tmp_path / "a" / "x.png")
    assert list(tmp_path.iterdir()) == []
