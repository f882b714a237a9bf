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

import functools
from importlib import resources
from pathlib import Path

__all__ = ["DATA_FOLDERS", "EXAMPLE_PREFIX", "data_dir", "examples", "is_shipped", "resolve_input", "source_root"]

DATA_FOLDERS = ("profiles", "experiments", "examples")
"""Top-level folders shipped inside the wheel as ``dcpsim/_data/<name>``."""


@functools.lru_cache(maxsize=1)  # where this module lies does not change while it runs (every profile look-up asks)
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


EXAMPLE_PREFIX = "example:"
"""``example:NAME`` names a shipped example wherever dcpsim is installed (``dcpsim examples`` lists them)."""
_EXAMPLE_PLACES = (("examples", "*.toml"), ("experiments", "sweeps/*.toml"))


def examples() -> dict[str, Path]:
    """The shipped example files by name: ``default`` (examples/simulate_default.toml), ``example_sweep``, ...

    A name is the file's stem without a ``simulate_`` prefix.
    """
    out: dict[str, Path] = {}
    for folder, pattern in _EXAMPLE_PLACES:
        for f in sorted(data_dir(folder).glob(pattern)):
            out[f.stem.removeprefix("simulate_")] = f
    return out


def resolve_input(path: str | Path) -> Path:
    """The file an input argument means: ``example:NAME``, the path itself, or a shipped data file.

    ``examples/simulate_default.toml`` or ``experiments/sweeps/...`` that do not
    exist where dcpsim runs (a scratch folder after ``pip install``) are read
    from the installed package's copy, so the README's commands work anywhere.
    """
    from dcpsim.errors import ConfigError

    text = str(path)
    if text.startswith(EXAMPLE_PREFIX):
        name = text[len(EXAMPLE_PREFIX):]
        found = examples()
        key = name.removeprefix("simulate_").removesuffix(".toml")
        if key not in found:
            raise ConfigError("example", name, f"one of {', '.join(EXAMPLE_PREFIX + n for n in found)} "
                              "(`dcpsim examples` lists them)")
        return found[key]
    p = Path(text)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] not in DATA_FOLDERS:
        return p
    shipped = data_dir(p.parts[0]).joinpath(*p.parts[1:])
    return shipped if shipped.is_file() else p


def is_shipped(path: str | Path) -> bool:
    """Whether ``path`` lies inside data dcpsim ships (a :data:`DATA_FOLDERS` folder of the checkout or of the
    installed wheel, or the installed package itself): such files are never written by a command."""
    p = Path(path).resolve()
    roots = [data_dir(n).resolve() for n in DATA_FOLDERS]
    if source_root() is None:  # an installed package: everything under it is shipped
        roots.append(Path(__file__).resolve().parent)
    return any(p == r or r in p.parents for r in roots)
