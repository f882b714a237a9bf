"""Stopping a sweep: SIGINT/SIGTERM set a flag the driver polls (:mod:`dcpsim.run.sweep`)."""

from __future__ import annotations

import signal
import threading
from typing import Any

STOP_GRACE_S = 1.0
"""After Ctrl-C/SIGTERM, seconds the tasks already running get to finish (and be written) before they are abandoned."""


class _Preempted(KeyboardInterrupt):
    """Raised by the signal handler inside a run that executes in this process (``-j 1``)."""


class _StopFlag:
    """SIGINT/SIGTERM set a flag (the loop writes what is done); a second SIGINT raises at once.

    While ``preempt`` is true (a run executing in this process), the first
    signal also raises :class:`_Preempted` there, so the run is abandoned at
    once instead of being waited for; its runs stay pending for a resume.
    """

    def __init__(self) -> None:
        self.set = False
        self.preempt = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.set and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.set = True
        if self.preempt:
            self.preempt = False
            raise _Preempted

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
