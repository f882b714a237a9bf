"""The package's modules parsed once per test process: test_code_shape, test_layers and test_settings each walk
the syntax tree of every module in dcpsim/ (parsing them all takes about a second), and share these trees.
Callers only read a tree, never change it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "dcpsim"


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of the source file ``path`` (parsed on the first call for that path)."""
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
