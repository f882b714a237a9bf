"""A sweep's standard figures, redrawn only when what they show changed.

Drawing the figures (importing matplotlib, laying out and rendering a PNG and a PDF each) is most of the
time of a sweep started again on a finished folder, where no row changed. :func:`sweep_figures` keys the
figures by a digest of what they are drawn from: the results table (every column and row, in order), the
sweep's axes, the figure writer, dcpsim's version and matplotlib's. The key and the writer's answer go to
``figures/.dcpsim-figures.json``; the next call with the same key returns that answer without drawing,
provided every file it names is still there and unchanged since dcpsim wrote it
(:func:`dcpsim.outdir.is_owned`). Anything else (a new row, a deleted or edited figure, another
matplotlib) draws them again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAMP = ".dcpsim-figures.json"  # in the figures folder: {"key": digest, "figures": the writer's answer}


def figures_key(df, axes, writer: Callable) -> str | None:
    """Digest of what the figures show: ``df``'s columns, dtypes and rows, ``axes``, the writer and versions
    (None where a cell cannot be hashed: the figures are then drawn every time)."""
    from importlib.metadata import PackageNotFoundError, version

    import pandas as pd

    from dcpsim._version import __version__

    try:
        mpl = version("matplotlib")
    except PackageNotFoundError:
        mpl = "absent"
    h = hashlib.sha256()
    head = [__version__, mpl, f"{getattr(writer, '__module__', '')}.{getattr(writer, '__qualname__', repr(writer))}",
            list(axes or ()), [str(c) for c in df.columns], [str(t) for t in df.dtypes], len(df)]
    h.update(json.dumps(head).encode())
    if len(df):
        try:
            h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
        except TypeError:  # an unhashable cell (a list or dict object)
            return None
    return h.hexdigest()


def _stored(answer: dict[str, Any], fig_dir: Path) -> dict[str, Any] | None:
    """The answer with its figure paths as names in ``fig_dir`` (None: a path elsewhere, not stored)."""
    out: dict[str, Any] = {}
    for k, v in answer.items():
        if isinstance(v, list):
            if not all(isinstance(p, str) and Path(p).parent == fig_dir for p in v):
                return None
            v = [Path(p).name for p in v]
        out[k] = v
    return out


def _restored(stored: Any, fig_dir: Path) -> dict[str, Any] | None:
    """The stored answer with paths under ``fig_dir`` again, if every figure is there and unchanged."""
    from dcpsim.outdir import is_owned

    if not isinstance(stored, dict):
        return None
    out: dict[str, Any] = {}
    for k, v in stored.items():
        if isinstance(v, list):
            paths = [fig_dir / n for n in v if isinstance(n, str) and n == Path(n).name]
            if len(paths) != len(v) or not all(p.is_file() and is_owned(p) for p in paths):
                return None
            v = [str(p) for p in paths]
        out[str(k)] = v
    return out


def cached_figures(fig_dir: Path, key: str) -> dict[str, Any] | None:
    """The writer's stored answer when ``key`` matches and every figure it names is intact, else None."""
    try:
        stamp = json.loads((fig_dir / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("key") != key:
        return None
    return _restored(stamp.get("figures"), fig_dir)


def sweep_figures(df, fig_dir: Path, axes, writer: Callable) -> dict[str, Any]:
    """``writer(df, fig_dir, axes=axes)``, or its stored answer when nothing it draws from changed."""
    from dcpsim.outdir import remove_owned, write_json

    key = figures_key(df, axes, writer)
    got = cached_figures(fig_dir, key) if key is not None else None
    if got is not None:
        return got
    if (fig_dir / STAMP).is_file():  # drawn again: the old stamp no longer describes the figures
        remove_owned(fig_dir / STAMP)
    answer = writer(df, fig_dir, axes=axes)
    if key is None:
        return answer
    stored = _stored(answer, fig_dir) if isinstance(answer, dict) else None
    try:
        json.dumps(stored)
    except (TypeError, ValueError):
        stored = None
    if stored is not None and fig_dir.is_dir():  # else (a custom writer's answer): drawn every time
        write_json(fig_dir / STAMP, {"key": key, "figures": stored})
    return answer
