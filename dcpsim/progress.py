"""The one progress display of dcpsim's long commands: a rich bar on stderr, quiet unless a person watches.

``sweep``, ``plan``, ``validate``, ``calibrate``, ``demo``, ``reproduce`` and
``profile`` draw their progress with rich. By default (``enabled=None``) the
bar is drawn only when both stdout and stderr are terminals: output piped
into a file, another program or a CI log gets no bar and no control
characters. ``enabled=True`` (a command's ``--progress``) forces it.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["ProgressDisplay", "show_progress"]


def show_progress(enabled: bool | None = None) -> bool:
    """Whether to draw: ``enabled`` when given, else only when stdout and stderr are both terminals."""
    if enabled is not None:
        return bool(enabled)
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


class ProgressDisplay:
    """A context manager: ``with ProgressDisplay("searching", total=8) as bar: bar.advance()``.

    ``total=None`` counts without a bar end (calibration: the number of simulations is not known up front).
    When not shown every method is a no-op (rich is not even imported).
    """

    def __init__(self, description: str, total: int | None = None, enabled: bool | None = None) -> None:
        self.description, self.total = description, total
        self.enabled = show_progress(enabled)
        self._p: Any = None
        self._task: Any = None
        self.done = 0

    def __enter__(self) -> ProgressDisplay:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                               console=Console(stderr=True), transient=False)
            self._p.__enter__()
            self._task = self._p.add_task(self.description, total=self.total, note="")
        return self

    def advance(self, n: int = 1, note: str | None = None) -> None:
        """``n`` more steps done (``note``: a short text after the bar, e.g. the row being simulated)."""
        self.done += n
        if self._p is not None:
            self._p.update(self._task, advance=n, **({"note": note} if note is not None else {}))

    def __exit__(self, *exc: Any) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)
            self._p = None
