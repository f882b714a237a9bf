"""Where the shipped data lives: ``profiles/``, ``experiments/`` and ``examples/``, in a checkout or in a wheel.

The top-level folders of the repository are the source of truth. A checkout
(and an editable install, which points into it) reads them in place. A
plain ``pip install .`` copies them into the wheel as ``dcpsim/_data/<name>``
(``setup.py``'s ``build_py`` step), where they are found with
:mod:`importlib.resources`. :func:`data_dir` returns whichever exists,
checkout first, so the same code runs from a clone, an editable install and
an installed wheel.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DATA_FOLDERS", "data_dir", "source_root"]

DATA_FOLDERS = ("profiles", "experiments", "examples")
"""Top-level folders shipped inside the wheel as ``dcpsim/_data/<name>``."""


def source_root() -> Path | None:
    """The repository root when dcpsim runs from a checkout (it has ``pyproject.toml`` and ``profiles/``), else None."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "profiles").is_dir() else None


def data_dir(name: str) -> Path:
    """The folder ``name`` (one of :data:`DATA_FOLDERS`): the checkout's, else the installed wheel's copy.

    When neither exists the checkout path is returned (callers report it as missing).
    """
    if name not in DATA_FOLDERS:
        raise ValueError(f"unknown data folder {name!r}; expected one of {DATA_FOLDERS}")
    root = source_root()
    if root is not None:
        return root / name
    packaged = Path(str(resources.files("dcpsim") / "_data" / name))
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[1] / name
