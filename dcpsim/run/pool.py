"""The one way dcpsim starts local worker processes: a pool whose workers die with the process that started it.

:func:`worker_pool` is used by every local parallel path (sweep executors,
``dcpsim reproduce``, ``dcpsim plan`` through the executors).

Workers are started with ``forkserver`` (``spawn`` where that is missing), so
their parent is the fork server, not the driver. Each worker therefore
watches the driver itself: on Linux the kernel sends it SIGKILL when its
parent (the fork server, which exits when the driver is gone) dies
(``PR_SET_PDEATHSIG``), and a watchdog thread checks every
``WATCH_INTERVAL_S`` seconds that the driver's process id is still alive.
Killing the driver with SIGKILL therefore leaves no worker behind.

Workers ignore SIGINT: Ctrl-C in a terminal signals the whole process group
and only the driver should react (a sweep finishes what is running).

:func:`cap_jobs` caps a requested worker count at the cores this process may
use, with a warning.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import sys
import threading
import time
import warnings

from dcpsim.errors import ConfigError, DcpsimWarning

__all__ = ["WATCH_INTERVAL_S", "available_cores", "cap_jobs", "worker_pool"]

WATCH_INTERVAL_S = 1.0
_PR_SET_PDEATHSIG = 1


def available_cores() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def cap_jobs(jobs: int | None, field: str = "-j/--jobs") -> int:
    """``jobs`` (default: all cores) checked and capped at :func:`available_cores`, with a warning when capped."""
    cores = available_cores()
    if jobs is None:
        return cores
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(field, jobs, "a positive number of worker processes")
    if jobs > cores:
        warnings.warn(f"{field} {jobs} capped at {cores}, the cores this process may use", DcpsimWarning, stacklevel=2)
        return cores
    return jobs


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (pid reused): treat as gone
        return False
    return True


def _watch_driver(driver_pid: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if not _alive(driver_pid):
            os._exit(1)


def _worker_init(driver_pid: int, user_init=None, user_args: tuple = ()) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if not _alive(driver_pid):  # the driver died while this worker started
        os._exit(1)
    threading.Thread(target=_watch_driver, args=(driver_pid,), name="dcpsim-watch-driver", daemon=True).start()
    if user_init is not None:
        user_init(*user_args)


def worker_pool(workers: int, *, preload: tuple[str, ...] = (), initializer=None,
                initargs: tuple = ()) -> cf.ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` of ``workers`` processes that die with this process (see the module docstring).

    ``preload``: modules imported once in the fork server so each worker starts
    warm. ``initializer(*initargs)`` runs in each worker after the safety set-up.
    """
    import multiprocessing as mp

    if workers < 1:
        raise ConfigError("jobs", workers, "a positive number of worker processes")
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver" and preload:
        ctx.set_forkserver_preload(list(preload))
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                  initargs=(os.getpid(), initializer, initargs))
