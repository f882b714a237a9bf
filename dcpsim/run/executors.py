"""Where sweep runs execute: this process, local worker processes, or a Dask cluster.

Every executor has the same small interface, used by
:func:`dcpsim.run.sweep.run_sweep`:

* ``n_workers`` -- how many tasks run at once (the sweep keeps twice that many in flight);
* ``submit(fn, *args)`` -> a future with ``done()``, ``result()``, ``cancel()``;
* ``wait_any(futures, timeout)`` -> ``(finished, still_running)``;
* ``cancel_pending(futures)`` -> the futures that had already started (the rest are cancelled);
* ``abandon()`` (optional) -- stop the tasks still running at once (after Ctrl-C);
* ``close()``.

Executors (pick one with :func:`make_executor`):

``SerialExecutor``   ``-j 1``: runs each task in this process when it is submitted.
``LocalExecutor``    ``-j N`` (default and most: all cores): a pool of N worker
                     processes from :func:`dcpsim.run.pool.worker_pool` (they die
                     with the driver and ignore SIGINT, so Ctrl-C reaches only the
                     sweep, which finishes what is running). A worker killed from
                     outside breaks the pool; :meth:`LocalExecutor.restart` starts
                     a fresh one (the sweep retries or records the lost tasks).
``DaskExecutor``     ``--dask-address tcp://HOST:PORT``: an existing Dask cluster
                     (every worker must be able to ``import dcpsim``);
                     ``--dask-local N``: a ``distributed.LocalCluster`` of N
                     single-threaded worker processes, listening on 127.0.0.1 only;
                     ``--slurm``: workers started as SLURM jobs by ``dask_jobqueue``
                     (see :class:`SlurmOptions`).

Dask is imported only when a Dask executor is asked for. An unreachable
scheduler (``DASK_CONNECT_TIMEOUT_S``) and ``--slurm`` without ``sbatch`` on
``PATH`` are one-line errors before any work.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import re
import shutil
from dataclasses import dataclass
from typing import Any

from dcpsim.errors import ConfigError
from dcpsim.run.pool import available_cores, cap_jobs, worker_pool

DASK_CONNECT_TIMEOUT_S = 5
"""Seconds to wait for a Dask scheduler given by ``--dask-address`` to answer before giving up."""
DASK_WORKER_WAIT_S = 60.0
"""Seconds to wait for the first worker of a scheduler given by ``--dask-address`` (``--dask-wait``)."""
_PRELOAD = ("dcpsim.run.sweep", "dcpsim.run.single", "dcpsim.workload", "dcpsim.policies", "dcpsim.sim.engines.auto",
            "dcpsim.sim.engines.fast", "dcpsim.sim.engines.events", "dcpsim.sim.networks.ideal", "dcpsim.sim.longrun",
            "numpy.random", "numpy.ma")
"""Imported once in the fork server, so every worker starts with what a run imports (its first run no longer
imports the simulator's engines, the ideal network and the long-run module itself, nor numpy's random module
(the run's streams) and masked arrays (``np.unique`` imports them on first use): ~40 ms per worker and sweep)."""


def default_jobs() -> int:
    """All cores this process may use."""
    return available_cores()


class SerialExecutor:
    """Runs each task in this process at submission (``-j 1``): no pickling, no start-up cost."""

    n_workers = 1
    name = "serial"

    def submit(self, fn, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(exc, KeyboardInterrupt):
                raise
            fut.set_exception(exc)
        return fut

    def wait_any(self, futures: list, timeout: float) -> tuple[list, list]:
        return list(futures), []

    def cancel_pending(self, futures: list) -> list:
        return list(futures)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalExecutor(SerialExecutor):
    """A pool of worker processes on this machine (:func:`dcpsim.run.pool.worker_pool`)."""

    name = "local"

    def __init__(self, jobs: int | None = None, *, fork: bool = False):
        self.n_workers = cap_jobs(jobs)
        self.generation = 0
        self._fork = fork
        self._pool = worker_pool(self.n_workers, preload=_PRELOAD, fork=fork)

    def restart(self) -> None:
        """Replace a broken pool (a worker was killed) with a fresh one; ``generation`` counts up."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = worker_pool(self.n_workers, preload=_PRELOAD, fork=self._fork)
        self.generation += 1

    def submit(self, fn, *args) -> cf.Future:
        return self._pool.submit(fn, *args)

    def wait_any(self, futures: list, timeout: float) -> tuple[list, list]:
        done, not_done = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [f for f in futures if f in done], [f for f in futures if f in not_done]

    def cancel_pending(self, futures: list) -> list:
        return [f for f in futures if not f.cancel()]

    def abandon(self) -> None:
        """Stop now: kill the workers (their tasks are lost; the sweep reruns them on resume)."""
        for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                proc.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._abandoned = True

    def close(self) -> None:
        self._pool.shutdown(wait=not getattr(self, "_abandoned", False), cancel_futures=True)


class DaskExecutor(SerialExecutor):
    """Tasks sent to a Dask cluster through a ``distributed.Client``."""

    name = "dask"

    def __init__(self, client, cluster=None, expected_workers: int | None = None):
        self.client = client
        self.cluster = cluster
        self._expected = expected_workers

    @property
    def n_workers(self) -> int:  # type: ignore[override]
        try:
            threads = sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values())
        except Exception:  # noqa: BLE001 - scheduler not reachable yet: fall back to what was asked for
            threads = 0
        return max(1, threads, self._expected or 0)

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def wait_any(self, futures: list, timeout: float) -> tuple[list, list]:
        from distributed import wait

        if not futures:
            return [], []
        try:
            wait(futures, timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        done = [f for f in futures if f.done()]
        return done, [f for f in futures if not f.done()]

    def cancel_pending(self, futures: list) -> list:
        # Dask does not say whether a pending task has started; cancel all
        # (they are simply run again when the sweep resumes).
        if futures:
            self.client.cancel(futures)
        return []

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


@dataclass(frozen=True)
class SlurmOptions:
    """How ``--slurm`` asks SLURM for Dask workers (``dask_jobqueue.SLURMCluster``).

    jobs:        number of SLURM jobs (each runs ``processes`` worker processes)   [--slurm-jobs]
    cores:       CPU cores per job                                                 [--slurm-cores]
    processes:   worker processes per job (default: one per core, one thread each)[--slurm-processes]
    memory:      memory per job, e.g. "32GB"                                       [--slurm-memory]
    walltime:    time limit per job, "HH:MM:SS"                                    [--slurm-walltime]
    queue:       partition (``#SBATCH -p``)                                        [--slurm-queue]
    account:     account to charge (``#SBATCH -A``)                                [--slurm-account]
    interface:   network interface the workers listen on, e.g. "ib0"              [--slurm-interface]
    job_extra:   extra ``#SBATCH`` directives, e.g. ("--gres=none",)               [--slurm-extra]
    prologue:    shell lines run before the worker starts, e.g. activating the venv [--slurm-prologue]
    python:      Python executable on the compute nodes (default: this one)        [--slurm-python]
    local_directory: scratch directory for the workers                             [--slurm-local-dir]
    """

    jobs: int = 1
    cores: int = 16
    processes: int | None = None
    memory: str = "32GB"
    walltime: str = "01:00:00"
    queue: str | None = None
    account: str | None = None
    interface: str | None = None
    job_extra: tuple[str, ...] = ()
    prologue: tuple[str, ...] = ()
    python: str | None = None
    local_directory: str | None = None

    def __post_init__(self) -> None:
        self._check_text()
        for f in ("jobs", "cores"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"--slurm-{f}", v, "a positive integer")
        if self.processes is not None and not (1 <= self.processes <= self.cores):
            raise ConfigError("--slurm-processes", self.processes, f"an integer in [1, --slurm-cores={self.cores}]")
        parts = self.walltime.split(":")
        if not (1 <= len(parts) <= 4 and all(p.isdigit() for p in parts)):
            raise ConfigError("--slurm-walltime", self.walltime, "a SLURM time such as 01:00:00")

    def _check_text(self) -> None:
        """Every text option ends up in a shell script: allow only what SLURM needs, never a line break."""
        for f, (pattern, expected) in _SAFE.items():
            v = getattr(self, f)
            if v is not None and not re.fullmatch(pattern, str(v)):
                raise ConfigError(f"--slurm-{f.replace('_', '-').replace('local-directory', 'local-dir')}", v, expected)
        for flag, items, pattern, expected in (
                ("--slurm-extra", self.job_extra, _EXTRA, "an #SBATCH option such as --gres=gpu:1 (no spaces, quotes, "
                 "line breaks or shell characters)"),
                ("--slurm-prologue", self.prologue, _PROLOGUE, "one shell line (no line breaks or control characters)")):
            for v in items:
                if not re.fullmatch(pattern, str(v)):
                    raise ConfigError(flag, v, expected)

    @property
    def workers(self) -> int:
        return self.jobs * (self.processes or self.cores)

    def job_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``dask_jobqueue.SLURMCluster`` (and its ``SLURMJob``)."""
        import sys

        kw: dict[str, Any] = {
            "cores": self.cores,
            "processes": self.processes or self.cores,
            "memory": self.memory,
            "walltime": self.walltime,
            "job_extra_directives": list(self.job_extra),
            "job_script_prologue": list(self.prologue),
            "python": self.python or sys.executable,
        }
        for k in ("queue", "account", "interface", "local_directory"):
            if getattr(self, k) is not None:
                kw[k] = getattr(self, k)
        return kw


_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.,:+-]{0,127}"
_PATH = r"[A-Za-z0-9_./~+-][A-Za-z0-9_./~+-]{0,1023}"
_SAFE = {
    "queue": (_NAME, "a partition name (letters, digits, _ . , : + -)"),
    "account": (_NAME, "an account name (letters, digits, _ . , : + -)"),
    "interface": (r"[A-Za-z0-9_.:-]{1,64}", "a network interface name such as ib0"),
    "memory": (r"[0-9]+(\.[0-9]+)?\s?[KMGTP]?i?B?", "a memory size such as 32GB"),
    "python": (_PATH, "a path to a Python executable (no spaces or shell characters)"),
    "local_directory": (_PATH, "a folder path (no spaces or shell characters)"),
}
_EXTRA = r"--?[A-Za-z][A-Za-z0-9-]*(=[A-Za-z0-9_.,:/+=@%-]+)?"
_PROLOGUE = r"[^\x00-\x1f\x7f]{1,4096}"


def slurm_job_script(opts: SlurmOptions, scheduler_address: str = "tcp://127.0.0.1:8786") -> str:
    """The batch script one SLURM job would run (for checking options without a cluster)."""
    from dask_jobqueue.slurm import SLURMJob

    return SLURMJob(scheduler=scheduler_address, name="dcpsim-worker", **opts.job_kwargs()).job_script()


def make_executor(
    *,
    jobs: int | None = None,
    dask_address: str | None = None,
    dask_local: int | None = None,
    slurm: SlurmOptions | None = None,
    dask_wait_s: float | None = None,
    fork: bool = False,
):
    """The executor for the given options (at most one of ``dask_address``, ``dask_local``, ``slurm``).

    ``fork``: local workers forked from this process where safe (:func:`dcpsim.run.pool.worker_pool`).

    ``dask_wait_s``: seconds to wait for a worker to join the scheduler at
    ``dask_address`` (default :data:`DASK_WORKER_WAIT_S`); a scheduler
    without workers is then a one-line error instead of a sweep that waits forever.
    """
    chosen = [n for n, v in (("--dask-address", dask_address), ("--dask-local", dask_local), ("--slurm", slurm))
              if v is not None]
    if len(chosen) > 1:
        raise ConfigError(chosen[1], "", f"only one executor option (also got {chosen[0]})")
    if dask_wait_s is not None and dask_address is None:
        raise ConfigError("--dask-wait", dask_wait_s, "--dask-address as well (it bounds the wait for its workers)")
    if dask_address is not None:
        client = _connect(dask_address)
        _wait_for_workers(client, dask_address, DASK_WORKER_WAIT_S if dask_wait_s is None else dask_wait_s)
        return DaskExecutor(client)
    if dask_local is not None:
        dask_local = cap_jobs(dask_local, "--dask-local")
        Client, LocalCluster = _import_dask("--dask-local")

        cluster = LocalCluster(n_workers=dask_local, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, worker_dashboard_address=None)
        return DaskExecutor(Client(cluster), cluster, expected_workers=dask_local)
    if slurm is not None:
        return _slurm_executor(slurm)
    n = cap_jobs(jobs)
    return SerialExecutor() if n == 1 else LocalExecutor(n, fork=fork)


def _import_dask(flag: str):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError(flag, "", "the 'distributed' extra installed (pip install 'dcpsim[distributed]')") from None
    return Client, LocalCluster


def _probe_tcp(address: str, timeout_s: float) -> None:
    """A Dask scheduler greets a new TCP connection at once; a listener that stays silent (or hangs up) is not one.

    ``distributed.Client`` waits without a bound for that greeting, so an
    address of some other service (a dashboard port, a web server) would hang
    the sweep; this check bounds it at ``timeout_s``.
    """
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError("--dask-address", address, f"a scheduler address such as tcp://HOST:8786 ({exc})") from None
    if not host or port is None:
        raise ConfigError("--dask-address", address, "a scheduler address with a port, such as tcp://HOST:8786")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            greeting = sock.recv(16)
    except TimeoutError:
        raise ConfigError("--dask-address", address, f"a Dask scheduler (something listens there but sent no Dask "
                          f"greeting within {timeout_s:g} s; is this the dashboard port? the scheduler's is "
                          "usually 8786)") from None
    except OSError as exc:
        raise ConfigError("--dask-address", address, f"a running Dask scheduler (cannot connect: "
                          f"{exc.strerror or type(exc).__name__})") from None
    if not greeting:
        raise ConfigError("--dask-address", address, "a Dask scheduler (the listener there closed the connection "
                          "without a Dask greeting)")


def _connect(address: str):
    """A Client of the scheduler at ``address``; one-line ConfigError when it does not answer in time."""
    if not re.fullmatch(r"[a-z+]+://[^\s]+", address):
        raise ConfigError("--dask-address", address, "a scheduler address such as tcp://HOST:8786")
    Client, _ = _import_dask("--dask-address")
    if address.startswith("tcp://"):
        _probe_tcp(address, DASK_CONNECT_TIMEOUT_S)
    try:
        return Client(address, timeout=f"{DASK_CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError) as exc:
        raise ConfigError("--dask-address", address, f"a running Dask scheduler (none answered within "
                          f"{DASK_CONNECT_TIMEOUT_S} s: {type(exc).__name__})") from None
    except ValueError as exc:
        raise ConfigError("--dask-address", address, f"a scheduler address such as tcp://HOST:8786 ({exc})") from None


def _wait_for_workers(client, address: str, wait_s: float) -> None:
    """Wait up to ``wait_s`` seconds for one worker; a scheduler without workers is a one-line error."""
    try:
        client.wait_for_workers(1, timeout=wait_s)
    except TimeoutError:
        client.close()
        raise ConfigError("--dask-address", address, f"a scheduler with at least one worker (none joined within "
                          f"{wait_s:g} s; start workers with `dask worker {address}` or raise --dask-wait)") from None


def _slurm_executor(slurm: SlurmOptions) -> DaskExecutor:
    if shutil.which("sbatch") is None:
        raise ConfigError("--slurm", "sbatch", "SLURM's sbatch on PATH (run on a SLURM login node)")
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ConfigError("--slurm", "", "the 'distributed' extra installed (pip install 'dcpsim[distributed]')") from None
    Client, _ = _import_dask("--slurm")
    cluster = SLURMCluster(**slurm.job_kwargs())
    cluster.scale(jobs=slurm.jobs)
    return DaskExecutor(Client(cluster), cluster, expected_workers=slurm.workers)
