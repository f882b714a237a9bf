"""Where sweep runs execute: this process, local worker processes, or a Dask cluster.

Every executor has the same small interface, used by
:func:`dcpsim.run.sweep.run_sweep`:

* ``n_workers`` -- how many tasks run at once (the sweep keeps twice that many in flight);
* ``submit(fn, *args)`` -> a future with ``done()``, ``result()``, ``cancel()``;
* ``wait_any(futures, timeout)`` -> ``(finished, still_running)``;
* ``cancel_pending(futures)`` -> the futures that had already started (the rest are cancelled);
* ``close()``.

Executors (pick one with :func:`make_executor`):

``SerialExecutor``   ``-j 1``: runs each task in this process when it is submitted.
``LocalExecutor``    ``-j N`` (default: all cores): a pool of N worker processes
                     (``forkserver`` start method; workers ignore SIGINT so that
                     Ctrl-C reaches only the sweep, which finishes what is running).
``DaskExecutor``     ``--dask-address tcp://HOST:PORT``: an existing Dask cluster
                     (every worker must be able to ``import dcpsim``);
                     ``--dask-local N``: a ``distributed.LocalCluster`` of N
                     single-threaded worker processes, listening on 127.0.0.1 only;
                     ``--slurm``: workers started as SLURM jobs by ``dask_jobqueue``
                     (see :class:`SlurmOptions`).

Dask is imported only when a Dask executor is asked for.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
from dataclasses import dataclass
from typing import Any

from dcpsim.errors import ConfigError


def default_jobs() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


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


def _worker_init() -> None:
    # Ctrl-C in a terminal signals the whole process group; only the sweep
    # driver should react (it lets running tasks finish and writes them).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor(SerialExecutor):
    """A pool of worker processes on this machine."""

    name = "local"

    def __init__(self, jobs: int | None = None):
        import multiprocessing as mp

        self.n_workers = int(jobs or default_jobs())
        if self.n_workers < 1:
            raise ConfigError("jobs", jobs, "a positive number of worker processes")
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            # imported once in the fork server, so each worker starts warm
            ctx.set_forkserver_preload(["dcpsim.run.sweep", "dcpsim.run.single", "dcpsim.workload", "dcpsim.policies"])
        self._pool = cf.ProcessPoolExecutor(max_workers=self.n_workers, mp_context=ctx, initializer=_worker_init)

    def submit(self, fn, *args) -> cf.Future:
        return self._pool.submit(fn, *args)

    def wait_any(self, futures: list, timeout: float) -> tuple[list, list]:
        done, not_done = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [f for f in futures if f in done], [f for f in futures if f in not_done]

    def cancel_pending(self, futures: list) -> list:
        return [f for f in futures if not f.cancel()]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


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
        for f in ("jobs", "cores"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"--slurm-{f}", v, "a positive integer")
        if self.processes is not None and not (1 <= self.processes <= self.cores):
            raise ConfigError("--slurm-processes", self.processes, f"an integer in [1, --slurm-cores={self.cores}]")
        parts = self.walltime.split(":")
        if not (1 <= len(parts) <= 4 and all(p.isdigit() for p in parts)):
            raise ConfigError("--slurm-walltime", self.walltime, "a SLURM time such as 01:00:00")

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
):
    """The executor for the given options (at most one of ``dask_address``, ``dask_local``, ``slurm``)."""
    chosen = [n for n, v in (("--dask-address", dask_address), ("--dask-local", dask_local), ("--slurm", slurm))
              if v is not None]
    if len(chosen) > 1:
        raise ConfigError(chosen[1], "", f"only one executor option (also got {chosen[0]})")
    if dask_address is not None:
        if "://" not in dask_address:
            raise ConfigError("--dask-address", dask_address, "a scheduler address such as tcp://HOST:8786")
        from distributed import Client

        return DaskExecutor(Client(dask_address))
    if dask_local is not None:
        if dask_local < 1:
            raise ConfigError("--dask-local", dask_local, "a positive number of workers")
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=dask_local, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, worker_dashboard_address=None)
        return DaskExecutor(Client(cluster), cluster, expected_workers=dask_local)
    if slurm is not None:
        from dask_jobqueue import SLURMCluster
        from distributed import Client

        cluster = SLURMCluster(**slurm.job_kwargs())
        cluster.scale(jobs=slurm.jobs)
        return DaskExecutor(Client(cluster), cluster, expected_workers=slurm.workers)
    if jobs is not None and jobs < 1:
        raise ConfigError("-j/--jobs", jobs, "a positive number of worker processes")
    n = int(jobs or default_jobs())
    return SerialExecutor() if n == 1 else LocalExecutor(n)
