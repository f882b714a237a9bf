"""The one way dcpsim starts local worker processes: a pool whose workers die with the process that started it.

:func:`worker_pool` is used by every local parallel path (sweep executors,
``dcpsim reproduce``, ``dcpsim plan`` through the executors).

Workers are started with ``forkserver`` (``spawn`` where that is missing), so
their parent is the fork server, not the driver (a pool may ask for workers
forked from the driver itself, ``fork=True``, when it runs one thread: ``dcpsim plan``,
a sweep's own pool). Each worker therefore
watches the driver itself: on Linux the kernel sends it SIGKILL when its
parent (the fork server, which exits when the driver is gone) dies
(``PR_SET_PDEATHSIG``), and a watchdog thread checks every
``WATCH_INTERVAL_S`` seconds that the driver's process id is still alive.
Killing the driver with SIGKILL therefore leaves no worker behind.

A worker that dies under a task (killed, out of memory) is handled the same
way by every driver (sweeps, ``dcpsim plan``, ``dcpsim reproduce``):
:func:`is_worker_death` recognises it, :func:`restart_broken` replaces a
broken local pool once, and :func:`retry_alone` runs each of the lost tasks
again on its own, up to :data:`WORKER_ATTEMPTS` tries, then hands them to the
driver's ``give_up`` (a ``failed`` row, or an error).

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
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from dcpsim.errors import ConfigError, DcpsimWarning

T = TypeVar("T")

__all__ = ["WATCH_INTERVAL_S", "WORKER_ATTEMPTS", "available_cores", "cap_jobs", "fork_safe", "is_worker_death",
           "reap_fork_server",
           "restart_broken", "retry_alone", "worker_pool"]

WATCH_INTERVAL_S = 1.0
WORKER_ATTEMPTS = 2
"""Times a task is tried when its worker process dies under it (the retries each task alone)."""
_PR_SET_PDEATHSIG = 1
_POOLS: weakref.WeakSet = weakref.WeakSet()  # the pools worker_pool made (shut down or not)


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
                initargs: tuple = (), fork: bool = False) -> cf.ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` of ``workers`` processes that die with this process (see the module docstring).

    ``preload``: modules imported once in the fork server so each worker starts
    warm. ``initializer(*initargs)`` runs in each worker after the safety set-up.
    ``fork``: the workers are forked from this process itself where that is safe (see :func:`fork_safe`),
    ``preload`` imported here first: no fork server, whose fresh interpreter imports numpy, pydantic and the
    configuration again (~0.5-1 CPU s; worth it for a one-off pool such as ``dcpsim plan``'s). The workers'
    parent is then this process, so ``PR_SET_PDEATHSIG`` alone ends them with it. Otherwise the fork server
    is started here, in the background (its imports, ~1 s of one core on a cold start, overlap
    whatever the caller does before its first ``submit``); the workers start at the first tasks.
    """
    import multiprocessing as mp

    if workers < 1:
        raise ConfigError("jobs", workers, "a positive number of worker processes")
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    if fork and fork_safe():
        import importlib

        for name in preload:
            with contextlib.suppress(ImportError):  # as the fork server's preload does
                importlib.import_module(name)
        method = "fork"
    ctx = mp.get_context(method)
    if method == "forkserver":
        if preload:
            ctx.set_forkserver_preload(list(preload))
        _start_fork_server()
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                  initargs=(os.getpid(), initializer, initargs))
    if method == "fork":  # every worker forked now, while this process runs one thread (a fork pool launches
        pool.submit(int)  # all of its workers at its first task, here a no-op)
    _POOLS.add(pool)
    return pool


def fork_safe() -> bool:
    """Whether workers may be forked from this process: the platform has ``fork`` and this process runs one
    thread (forking a threaded process can copy a lock another thread holds; a pool started with
    ``fork`` launches its workers before its own management thread)."""
    import multiprocessing as mp

    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


def _start_fork_server() -> None:
    """Start the fork server now, in the background (no wait: it imports its preload modules while the caller
    prepares its first tasks; the first worker's start waits for what is left of that). A no-op when it runs."""
    from multiprocessing import forkserver

    with _sigint_ignored_by_children():
        with contextlib.suppress(Exception):  # the first submit starts it anyway (and reports what went wrong)
            forkserver.ensure_running()


@contextlib.contextmanager
def _sigint_ignored_by_children():
    """Processes started in this block ignore SIGINT from their first instruction; this process does not lose one.

    The fork server imports its preload modules before it ignores SIGINT itself, so a Ctrl-C to the process group
    in that second (a sweep stopped as it starts) printed its KeyboardInterrupt traceback. An ignored disposition
    is inherited across exec (Python then installs no KeyboardInterrupt handler); its workers ignore SIGINT anyway
    (:func:`_worker_init`). Here SIGINT is blocked meanwhile (a blocked signal stays pending on Linux even while
    ignored), so a Ctrl-C in these milliseconds reaches this process's own handler afterwards. Main thread only
    (elsewhere signal handlers cannot be set: nothing changes)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def reap_fork_server() -> bool:
    """Stop and reap this process's fork server (and multiprocessing's resource tracker) when no pool of
    :func:`worker_pool` is still running (however they were shut down); True if it did.

    Then no worker process outlives the driver's work, and the workers' CPU time (the fork server reaps
    them) counts in this process's children's time (``dcpsim plan -j 2`` calls it when its pool is
    closed). The next pool starts a fresh fork server (its imports again, ~1-2 s), so a process that
    runs many sweeps keeps it (the pools do not call this themselves).
    """
    if not all(getattr(p, "_shutdown_thread", False) for p in list(_POOLS)):  # a pool is still running
        return False
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)  # CPython's own shutdown of it (closes its pipe, waits for it)
    if stop is None or getattr(server, "_forkserver_pid", None) is None:
        return False
    with contextlib.suppress(Exception):
        stop()
    # multiprocessing's resource tracker (started with the first pool) has nothing left to track: stopped and
    # reaped too (a later pool starts it again)
    from multiprocessing import resource_tracker

    tracker_stop = getattr(getattr(resource_tracker, "_resource_tracker", None), "_stop", None)
    if tracker_stop is not None:
        with contextlib.suppress(Exception):
            tracker_stop()
    return True


def is_worker_death(exc: BaseException) -> bool:
    """Whether ``exc`` (from a task's future) says the worker process died: a broken local pool, or Dask's
    ``KilledWorker``."""
    from concurrent.futures.process import BrokenProcessPool

    return isinstance(exc, BrokenProcessPool) or type(exc).__name__ == "KilledWorker"


def restart_broken(executor: Any, generation: int) -> None:
    """Replace ``executor``'s broken local pool, once: only when the task that saw it ran in the current pool
    (``generation``; executors that cannot restart are left alone)."""
    if generation == getattr(executor, "generation", 0) and hasattr(executor, "restart"):
        executor.restart()


def retry_alone(tasks: Sequence[T], attempt: int, exc: BaseException, *, resubmit: Callable[[T, int], Any],
                give_up: Callable[[Sequence[T], BaseException], Any], attempts: int = WORKER_ATTEMPTS) -> None:
    """After the worker running ``tasks`` (their ``attempt``-th try) died with ``exc``: submit each task again
    on its own (``resubmit(task, attempt + 1)``), so a task that only shared the dead worker is not charged
    with the death; after ``attempts`` tries ``give_up(tasks, exc)``."""
    if attempt < attempts:
        for task in tasks:
            resubmit(task, attempt + 1)
    else:
        give_up(tasks, exc)
