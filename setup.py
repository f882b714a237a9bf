"""Build step that ships the repository's data folders inside the wheel (everything else is in pyproject.toml).

``profiles/``, ``experiments/`` and ``examples/`` at the top of the repository
are the source of truth. A plain (non-editable) build copies them into the
wheel as ``dcpsim/_data/<name>``, where :func:`dcpsim.resources.data_dir`
finds them with ``importlib.resources``. An editable install skips the copy:
it runs from the checkout and reads the folders in place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = ("profiles", "experiments", "examples")  # = dcpsim.resources.DATA_FOLDERS
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".dcpsim-*", "*.parquet.tmp")


class BuildPyWithData(build_py):
    """``build_py`` plus a copy of the data folders into ``<build_lib>/dcpsim/_data``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "dcpsim" / "_data"
        for name in DATA_FOLDERS:
            src = HERE / name
            if src.is_dir():
                shutil.copytree(src, target / name, ignore=SKIP, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithData})
