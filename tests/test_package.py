"""The package: version, public API, license, shipped data found in a checkout and in an installed wheel."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dcpsim
from dcpsim.resources import DATA_FOLDERS, data_dir, source_root

REPO = Path(__file__).resolve().parents[1]


def test_version_and_public_api():
    from dcpsim._version import __version__

    assert dcpsim.__version__ == __version__ and __version__.count(".") == 2
    py = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in py["project"]["dynamic"]  # one source: dcpsim/_version.py
    assert py["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "dcpsim._version.__version__"
    for name in dcpsim.__all__:
        assert getattr(dcpsim, name) is not None, name
    with pytest.raises(AttributeError):
        dcpsim.no_such_thing  # noqa: B018


def test_license_file_matches_the_declared_license():
    py = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert py["project"]["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text


def test_data_folders_found_in_the_checkout():
    assert source_root() == REPO
    for name in DATA_FOLDERS:
        assert data_dir(name) == REPO / name and data_dir(name).is_dir()
    from dcpsim.hardware import list_profiles

    assert "h100-sxm" in list_profiles()
    with pytest.raises(ValueError):
        data_dir("../etc")


@pytest.mark.slow
def test_wheel_install_runs_demo_and_quick_reproduce(tmp_path):
    """``pip install <checkout>`` (not editable) into a fresh venv; demo and reproduce --quick run outside the checkout.
    Every child runs without PYTHONPATH, so a checkout on the caller's path cannot stand in for the installed copy."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess_run = functools.partial(subprocess.run, env=env)
    venv = tmp_path / "venv"
    subprocess_run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess_run([str(venv / "bin" / "pip"), "install", "-q", str(REPO)], capture_output=True, text=True,
                         timeout=1200)
    assert pip.returncode == 0, pip.stderr[-3000:]
    exe = str(venv / "bin" / "dcpsim")
    site = subprocess_run([str(venv / "bin" / "python"), "-c", "import dcpsim, sys; print(dcpsim.__file__)"],
                          capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    assert str(venv) in site  # the installed copy, not the checkout
    work = tmp_path / "elsewhere"
    work.mkdir()
    demo = subprocess_run([exe, "demo", "--iterations", "1"], capture_output=True, text=True, cwd=work, timeout=600)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "speedup over packing" in demo.stdout
    rep = subprocess_run([exe, "reproduce", "--quick", "--no-progress", "--out", str(tmp_path / "rq")],
                         capture_output=True, text=True, cwd=work, timeout=1200)
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (tmp_path / "rq" / "summary.csv").is_file()
    prof = subprocess_run([exe, "profiles"], capture_output=True, text=True, cwd=work, timeout=300)
    assert prof.returncode == 0 and "h100-sxm" in prof.stdout
    # the README tour from a scratch folder: the shipped examples by name, by their README path, and `python -m`
    small = ["--set", "workload.gbs=64", "--set", "cluster.gpus=16"]
    for cmd in ([exe, "simulate", "example:default", *small], [exe, "simulate", "examples/simulate_default.toml", *small],
                [str(venv / "bin" / "python"), "-m", "dcpsim", "simulate", "example:default", *small]):
        sim = subprocess_run(cmd, capture_output=True, text=True, cwd=work, timeout=600)
        assert sim.returncode == 0 and "TFLOPS/GPU" in sim.stdout, (cmd, sim.stderr[-3000:])
    assert not list(work.iterdir())  # nothing written where it was not asked to
    ex = subprocess_run([exe, "examples", "--out", str(tmp_path / "ex")], capture_output=True, text=True, cwd=work,
                        timeout=300)
    assert ex.returncode == 0 and (tmp_path / "ex" / "simulate_default.toml").is_file(), ex.stderr[-3000:]
