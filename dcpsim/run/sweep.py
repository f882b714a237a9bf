"""Sweeps: many runs from one base configuration, results in a resumable parquet dataset.

By concern: the spec and its runs (:mod:`dcpsim.run.sweep_spec`), the results dataset and the folder
lock (:mod:`dcpsim.run.sweep_store`), stop signals (:mod:`dcpsim.run.sweep_signals`), the worker-death
policy (:mod:`dcpsim.run.pool`); this module drives the runs (and re-exports the public names).

The spec format (grid, zip and random axis groups; run ids from ``RunConfig.config_hash()``) is documented
in :mod:`dcpsim.run.sweep_spec`, the output directory and its file rules in :mod:`dcpsim.run.sweep_store`.

One row per run: the simulator's ``summary`` (flat; dict and list values as
JSON strings), the swept values (columns named by dotted path), and
``config_hash``, ``status`` (``ok`` | ``infeasible`` | ``error`` | ``failed``),
``reason``, ``wall_s`` (seconds the run took), ``cpu_s`` (CPU seconds of the
worker process during the run), ``sweep_session`` and
``finished_at`` (Unix seconds). ``infeasible`` is an
:class:`~dcpsim.errors.InfeasibleError`, ``error`` any other dcpsim error
(bad configuration), ``failed`` an unexpected exception (a bug: reported,
and retried when the sweep is started again). Starting a sweep again on the
same directory skips every run already recorded as ok, infeasible or error.
"""

from __future__ import annotations

import json
import math
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError, DcpsimError, InfeasibleError
from dcpsim.run.config import RunConfig
from dcpsim.run.pool import WORKER_ATTEMPTS, is_worker_death, restart_broken, retry_alone
from dcpsim.run.sweep_signals import STOP_GRACE_S, _Preempted, _StopFlag  # noqa: F401 - re-exported
from dcpsim.run.sweep_spec import (  # noqa: F401 - re-exported: the sweep API is dcpsim.run.sweep
    AXIS_MODES,
    RANDOM_DISTS,
    AxisGroup,
    RandomDist,
    RunSpec,
    SweepSpec,
    _jsonable,
    check_sweep_size,
    count_runs,
    flat_value,
    load_sweep_spec,
    spec_hash,
    sweep_spec_from_dict,
)
from dcpsim.run.sweep_store import (  # noqa: F401 - re-exported
    DONE_STATUSES,
    PART_GLOB,
    RESULTS_DIR,
    PartWriter,
    _clean_temporaries,
    _dir_lock,
    _is_part,
    _warn_foreign,
    _write_json_atomic,
    compact_results,
    finished_hashes,
    foreign_parts,
    load_results,
    results_dir,
    write_part,
)

Runner = Callable[[RunConfig], Any]


def _resolve_runner(runner: Runner | str | None) -> Runner:
    if runner is None:
        from dcpsim.run.single import run_simulation

        return run_simulation
    if isinstance(runner, str):
        import importlib

        mod, _, fn = runner.partition(":")
        return getattr(importlib.import_module(mod), fn)
    return runner


def execute_run(rs: RunSpec, runner: Runner | str | None = None) -> dict[str, Any]:
    """Run one configuration and return its row (never raises for a configuration that cannot run)."""
    t0, c0 = time.perf_counter(), time.process_time()
    row: dict[str, Any] = {}
    status, reason = "ok", ""
    if rs.config is None:
        status, reason = "error", rs.error or "invalid configuration"
    else:
        cfg = rs.config
        row |= {"policy": cfg.policy.name, "gpus": cfg.cluster.gpus,
                "workload": flat_value(cfg.workload.name), "gpu": cfg.hardware.gpu, "model": flat_value(cfg.model.name)}
        try:
            if runner is None:  # the default runner gets the run id the spec computed (cfg.config_hash(), not redone)
                from dcpsim.run.single import run_simulation

                res = run_simulation(cfg, config_hash=rs.run_hash)
            else:
                res = _resolve_runner(runner)(cfg)
            summary = res.summary if hasattr(res, "summary") else res
            row |= {str(k): flat_value(v) for k, v in dict(summary).items()}
        except InfeasibleError as exc:
            status, reason = "infeasible", f"{exc.kind}: {exc.reason}"
        except DcpsimError as exc:
            status, reason = "error", str(exc)
        except Exception as exc:  # a bug in a lower layer: record it, keep the sweep going
            tb = traceback.extract_tb(exc.__traceback__)
            at = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
            status, reason = "failed", f"{type(exc).__name__}: {exc}{at}"
    for k, v in rs.axes.items():
        row[k] = flat_value(v)
    row |= {"config_hash": rs.run_hash, "status": status, "reason": reason,
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    return row


def execute_batch(batch: list[RunSpec], runner: Runner | str | None = None) -> list[dict[str, Any]]:
    """Run a batch of configurations in order (the unit of work sent to an executor); the runs share the parts
    that do not depend on their seed or policy (:func:`dcpsim.run.reuse.shared_parts`)."""
    from dcpsim.run.reuse import shared_parts

    with shared_parts():
        return [execute_run(rs, runner) for rs in batch]


# ====================================================================== running
class SweepInterrupted(DcpsimError):
    """The sweep was stopped (Ctrl-C / SIGTERM) after writing every finished batch."""

    def __init__(self, result: SweepResult):
        self.result = result
        super().__init__(f"interrupted: {result.n_finished} of {result.n_runs} runs are in {result.out_dir}; "
                         f"run the same command again to resume (finished runs are skipped)")


@dataclass
class SweepResult:
    """What one call of :func:`run_sweep` did."""

    out_dir: Path
    n_runs: int
    n_skipped: int = 0
    n_done: int = 0
    n_other: int = 0  # rows already in the directory that the current spec does not produce (an earlier spec)
    counts: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    wall_s: float = 0.0
    batches: int = 0
    workers: int = 1
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def n_finished(self) -> int:
        return self.n_skipped + self.counts.get("ok", 0) + self.counts.get("infeasible", 0) + self.counts.get("error", 0)

    def results(self):
        return load_results(self.out_dir)

    def as_dict(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "runs": self.n_runs, "skipped_already_done": self.n_skipped,
                "ran": self.n_done, "rows_from_other_specs": self.n_other, "counts": dict(self.counts), "interrupted": self.interrupted,
                "wall_s": self.wall_s, "batches": self.batches, "workers": self.workers,
                "runs_per_min": 60.0 * self.n_done / self.wall_s if self.wall_s > 0 else None,
                "figures": self.figures}


class BatchSizer:
    """Chooses how many runs go into the next task.

    Tasks should last about ``target_s`` seconds so that scheduling and
    part-file overhead stay negligible, yet be small enough that every worker
    has work until the end (at most ``remaining / (2 × workers)`` runs), but
    never shorter than ``min_s`` (the tail of a sweep of short runs would
    otherwise write a part file, with its fsyncs, per run or two). The
    per-run time is learned from the rows that come back (the first tasks
    hold one run each).
    """

    def __init__(self, workers: int, target_s: float = 1.5, fixed: int | None = None, min_s: float = 0.2):
        self.workers = max(1, workers)
        self.target_s = target_s
        self.min_s = min_s
        self.fixed = fixed
        self._sum_s = 0.0
        self._n = 0

    def observe(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            self._sum_s += float(r.get("wall_s") or 0.0)
            self._n += 1

    @property
    def mean_run_s(self) -> float | None:
        return self._sum_s / self._n if self._n else None

    def next_size(self, remaining: int) -> int:
        if self.fixed:
            return max(1, min(self.fixed, remaining))
        mean = self.mean_run_s
        if mean is None:
            return 1
        want = max(1, math.ceil(self.target_s / max(mean, 1e-6)))
        fair = max(1, math.ceil(remaining / (2 * self.workers)))
        least = math.ceil(self.min_s / max(mean, 1e-6))
        return max(1, min(max(min(want, fair), least), remaining))


class _NoProgress:
    """What :func:`_progress` gives when it is off: the calls of a rich ``Progress`` that do nothing (rich not
    imported)."""

    def update(self, *args: Any, **kw: Any) -> None:
        pass

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _progress(enabled: bool | None, total: int, description: str):
    if enabled is False:
        return _NoProgress(), 0
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    show = console.is_terminal if enabled is None else enabled
    prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                    TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console, disable=not show, transient=False)
    task = prog.add_task(description, total=total, note="")
    return prog, task


FigureWriter = Callable[..., dict[str, Any]]  # (results DataFrame, folder, axes=[...]) -> {figure: files or reason}


@dataclass(frozen=True)
class SweepOptions:
    """How :func:`run_sweep` runs a sweep (the spec says what); derive a variant with ``dataclasses.replace``.

    ``executor``: an executor from :mod:`dcpsim.run.executors` (default: local processes, ``jobs`` of them,
    default all cores; ``jobs=1`` runs in this process). ``batch_size`` fixes the runs per task (default:
    adaptive, tasks of about ``target_task_s`` seconds). ``progress``: rich progress bar on stderr (default:
    only on a terminal). ``figures``: called as ``figures(results, out_dir / "figures", axes=...)`` when the
    sweep completes (e.g. :func:`dcpsim.report.plots.standard_figures`, which the ``sweep`` command passes;
    run does not import report, a higher layer). ``compact``: merge the part files at the end. ``runner``:
    the function that simulates one configuration (default :func:`dcpsim.run.single.run_simulation`; a
    ``"module:function"`` string is imported in the worker). ``force``: write into a folder holding files
    dcpsim did not write. ``confirm_large``: allow more than :data:`dcpsim.limits.MAX_SWEEP_RUNS` runs.
    """

    executor: Any = None
    jobs: int | None = None
    batch_size: int | None = None
    target_task_s: float = 1.5
    progress: bool | None = None
    figures: FigureWriter | None = None
    compact: bool = True
    runner: Runner | str | None = None
    force: bool = False
    confirm_large: bool = False


def _checked(o: SweepOptions) -> SweepOptions:
    """``o``, checked before any folder is made: a dict, an executor given by name, ``batch_size=0`` (read as
    the adaptive default) and a NaN task target failed deep inside or meant something else."""
    if not isinstance(o, SweepOptions):
        raise ConfigError("options", type(o).__name__, "a dcpsim.run.sweep.SweepOptions (e.g. SweepOptions(jobs=4))")
    if o.executor is not None and not hasattr(o.executor, "n_workers"):
        raise ConfigError("options.executor", o.executor, "an executor from dcpsim.run.executors or None (local)")
    b, t = o.batch_size, o.target_task_s
    if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
        raise ConfigError("options.batch_size", b, "a positive number of runs per task (or None: adaptive)")
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
        raise ConfigError("options.target_task_s", t, "a positive, finite number of seconds per task")
    return o


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, options: SweepOptions = SweepOptions()) -> SweepResult:
    """Run (or resume) a sweep into ``out_dir``; return what was done.

    ``options``: executor, workers, batching, progress, figures, runner (:class:`SweepOptions`).

    ``out_dir`` is checked first (:func:`check_sweep_out`): it may hold only
    files dcpsim wrote, unless ``force``; part files in ``results/`` that it
    did not write are ignored and named in a warning, never merged or deleted.
    A sweep of more than :data:`dcpsim.limits.MAX_SWEEP_RUNS` runs is refused
    (with an estimate of its size) unless ``confirm_large``. A task whose worker
    process dies is retried once, run by run; a run that loses its worker twice
    is recorded as ``failed`` (and retried when the sweep is started again).

    Raises :class:`SweepInterrupted` after SIGINT/SIGTERM, once every
    finished batch is written.

    Local worker processes are forked from this process when it runs one thread (before the sweep starts its
    own threads), else started by the ``forkserver``: a script that calls this with ``jobs > 1`` needs the
    usual ``if __name__ == "__main__":`` guard, as any multiprocessing code.
    """
    o = _checked(options)
    executor, runner, progress, figures = o.executor, o.runner, o.progress, o.figures
    if not isinstance(spec, SweepSpec):
        spec = load_sweep_spec(spec)
    out = check_sweep_out(out_dir, force=o.force, spec=spec)
    check_sweep_size(spec, confirmed=o.confirm_large)
    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    own_executor = executor is None
    if own_executor:  # first: local workers forked from this process while it runs one thread (else a fork
        from dcpsim.run.executors import make_executor  # server's imports overlap the runs' resolution)

        executor = make_executor(jobs=o.jobs, fork=True)
    try:
        with _dir_lock(out):
            session = None
            try:
                _clean_temporaries(out)
                _warn_foreign(out)
                runs = _write_spec(spec, out)
                result, pending = _plan_session(out, runs)
                session = _Session(out, result, uuid.uuid4().hex[:12])
                invalid = [r for r in pending if r.config is None]
                if invalid:
                    session.record(execute_batch(invalid))
                queue = deque(r for r in pending if r.config is not None)
                _drive(session, executor, queue, runner, BatchSizer(executor.n_workers, target_s=o.target_task_s,
                                                                     fixed=o.batch_size), progress, spec.name)
            finally:
                try:
                    if session is not None:
                        session.close()
                finally:
                    if own_executor:
                        executor.close()
            if result.interrupted:
                result.wall_s = time.perf_counter() - t_start
                raise SweepInterrupted(result)
            if o.compact:
                compact_results(out)
            if figures:
                result.figures = _figures(out, spec, figures)
            result.wall_s = time.perf_counter() - t_start
    finally:
        if own_executor:  # a folder another sweep holds (its lock refused): the pool goes too (closing is idempotent)
            executor.close()
    return result


def check_sweep_out(out_dir: str | Path, *, force: bool = False, spec: SweepSpec | None = None) -> Path:
    """Check ``out_dir`` before a sweep starts (:func:`dcpsim.outdir.check_out_dir`; foreign parts are not a reason to refuse).

    With ``spec``: a folder that holds another sweep (``sweep.json`` with a
    different :func:`spec_hash`) is refused unless ``spec`` extends it (every
    run of the old spec is one of the new one's: an axis grew) or ``force``
    (then the old rows are kept beside the new ones and counted as rows of
    another spec).
    """
    from dcpsim.outdir import check_out_dir, is_owned

    host = None if force else _results_holding(Path(out_dir))
    if host is not None:  # pyarrow/pandas read results/ recursively: the inner sweep's files would break it
        raise ConfigError("--out", str(out_dir), f"a folder outside the results/ of sweep {host} (its parquet "
                          "dataset, read whole by pandas/pyarrow); pick another folder")
    out = check_out_dir(out_dir, force=force, ignore=_is_part)
    meta = out / "sweep.json"
    if spec is None or force or not meta.is_file() or not is_owned(meta):
        return out
    try:
        old = json.loads(meta.read_text(encoding="utf-8"))
        old_hash = old.get("spec_hash") or spec_hash(old)
    except (OSError, ValueError, AttributeError):
        return out
    new_hash = spec_hash(spec.to_dict())
    if old_hash != new_hash and not _extends(spec, old):
        raise ConfigError("--out", str(out), f"a new folder or one of this same sweep (it holds sweep "
                          f"{old.get('name')!r}, spec {old_hash}; this spec is {new_hash}: other seed, base or axes); "
                          "pick another folder, or pass --force to add this sweep's rows beside the old ones")
    from dcpsim.run.sweep_inputs import check_inputs_unchanged

    check_inputs_unchanged(old, spec.to_dict(), out)  # finished rows of a lengths file's old contents: refused
    return out


def _results_holding(out: Path) -> Path | None:
    """The sweep folder whose ``results/`` holds ``out`` (or is it), if any: sweep.json written by dcpsim beside it."""
    from dcpsim.outdir import is_owned

    p = out.absolute()
    for q in (p, *p.parents):
        if q.name == "results" and (q.parent / "sweep.json").is_file() and is_owned(q.parent / "sweep.json"):
            return q.parent
    return None


def _extends(spec: SweepSpec, old: dict[str, Any]) -> bool:
    """Whether every run listed in an old ``sweep.json`` is also a run of ``spec``."""
    old_runs = {r.get("config_hash") for r in old.get("runs", []) if isinstance(r, dict)}
    return bool(old_runs) and old_runs <= {r.run_hash for r in spec.runs()}


def _write_spec(spec: SweepSpec, out: Path) -> list[RunSpec]:
    """Copy the spec, resolve its runs and write ``sweep.json``; returns the runs."""
    from dcpsim.outdir import write_text

    if spec.source_text is not None:
        write_text(out / "spec.toml", spec.source_text)
    from dcpsim.run.sweep_inputs import input_digests

    runs = spec.runs()
    d = spec.to_dict()
    _write_json_atomic(out / "sweep.json", d | {
        "spec_hash": spec_hash(d), "inputs": input_digests(d),
        "runs": [{"config_hash": r.run_hash, "updates": r.axes, "error": r.error} for r in runs]})
    return runs


def _plan_session(out: Path, runs: list[RunSpec]) -> tuple[SweepResult, list[RunSpec]]:
    done = finished_hashes(out)
    pending = [r for r in runs if r.run_hash not in done]
    result = SweepResult(out, len(runs), n_skipped=len(runs) - len(pending))
    result.n_other = len(done - {r.run_hash for r in runs})
    return result, pending


@dataclass
class _Session:
    """Where finished rows go: stamped, counted and handed to the part writer (:class:`PartWriter`: a
    background thread; the rows of the batches that finish while a part is written share the next part)."""

    out: Path
    result: SweepResult
    session: str
    writer: PartWriter = field(init=False)

    def __post_init__(self) -> None:
        self.writer = PartWriter(self.out)

    def record(self, rows: list[dict[str, Any]]) -> None:
        now = time.time()
        for r in rows:
            r["sweep_session"] = self.session
            r["finished_at"] = now
            self.result.counts[r["status"]] = self.result.counts.get(r["status"], 0) + 1
        self.writer.put(rows)
        self.result.n_done += len(rows)
        self.result.batches += 1

    def close(self) -> None:
        """Every recorded row in a part file (raises the error of a failed write)."""
        self.writer.close()


def lost_worker_rows(batch: list[RunSpec], exc: BaseException) -> list[dict[str, Any]]:
    """``failed`` rows for runs whose worker process died (killed, out of memory, ...)."""
    reason = f"worker process died ({type(exc).__name__}: {exc}); tried {WORKER_ATTEMPTS} times"
    return [{**{k: flat_value(v) for k, v in rs.axes.items()}, "config_hash": rs.run_hash, "status": "failed",
             "reason": reason, "wall_s": float("nan"), "cpu_s": float("nan")} for rs in batch]


class _InFlight:
    """Tasks submitted to an executor, with their runs and attempt counts."""

    def __init__(self, executor, runner: Runner | str | None):
        self.ex = executor
        self.runner = runner
        self.tasks: dict[Any, tuple[list[RunSpec], int, int]] = {}
        # runs whose worker died, to run again one at a time with nothing beside them: a pool breaks for every
        # task in it, so only a run alone in its pool can be charged with a death (or cleared of it)
        self.retries: deque[tuple[list[RunSpec], int]] = deque()

    @property
    def generation(self) -> int:
        """Which pool of the executor is current (a restarted local pool counts up)."""
        return getattr(self.ex, "generation", 0)

    def submit(self, batch: list[RunSpec], attempt: int = 1) -> None:
        self.tasks[self.ex.submit(execute_batch, batch, self.runner)] = (batch, attempt, self.generation)

    def __len__(self) -> int:
        return len(self.tasks)

    def finished(self, timeout: float) -> list[tuple[list[RunSpec], int, Any]]:
        """``(batch, attempt, rows or the exception)`` of the tasks that ended.

        A broken local pool (a worker died) is replaced once, by the first of its tasks seen here.
        """
        done, _ = self.ex.wait_any(list(self.tasks), timeout=timeout)
        out = []
        for fut in done:
            batch, attempt, gen = self.tasks.pop(fut)
            try:
                out.append((batch, attempt, fut.result()))
            except Exception as exc:  # noqa: BLE001 - the worker died (BrokenProcessPool, KilledWorker, ...)
                if is_worker_death(exc):
                    restart_broken(self.ex, gen)
                out.append((batch, attempt, exc))
        return out

    def cancel_pending(self) -> None:
        running = set(self.ex.cancel_pending(list(self.tasks)))
        self.tasks = {f: v for f, v in self.tasks.items() if f in running}


def _handle(session: _Session, flight: _InFlight, sizer: BatchSizer, batch: list[RunSpec], attempt: int,
            outcome: Any, *, retry: bool) -> None:
    """Write a finished task's rows; resubmit (one run per task) or record a task whose worker died."""
    if not isinstance(outcome, BaseException):
        sizer.observe(outcome)
        session.record(outcome)
        return
    retry_alone(batch, attempt, outcome, resubmit=lambda rs, n: flight.retries.append(([rs], n)),
                give_up=lambda lost, exc: session.record(lost_worker_rows(lost, exc)),
                attempts=WORKER_ATTEMPTS if retry else attempt)


def _drive(session: _Session, ex, queue: deque, runner, sizer: BatchSizer, progress: bool | None, name: str) -> None:
    """Keep the executor busy until the queue is empty or a stop signal; write every finished task."""
    result = session.result
    flight = _InFlight(ex, runner)
    prog, task = _progress(progress, result.n_runs, name)
    prog.update(task, completed=result.n_skipped + result.n_done)
    result.workers = ex.n_workers
    in_process = getattr(ex, "name", "") == "serial"
    most = 1 if in_process else 2 * ex.n_workers  # in this process: each task's rows recorded before the next starts
    with _StopFlag() as stop, prog:
        while (queue or flight or flight.retries) and not stop.set:
            if flight.retries:  # a worker died: its runs again, each alone in the pool, before anything new
                if not flight:
                    flight.submit(*flight.retries.popleft())
            while queue and not flight.retries and len(flight) < most and not stop.set:
                batch = [queue.popleft() for _ in range(sizer.next_size(len(queue)))]
                stop.preempt = in_process  # only a run in this process is abandoned mid-way (never pool internals)
                try:
                    flight.submit(batch)
                except _Preempted:  # Ctrl-C inside a run of this process: drop it (its runs stay pending)
                    break
                finally:
                    stop.preempt = False
            for batch, attempt, outcome in flight.finished(timeout=0.25):
                _handle(session, flight, sizer, batch, attempt, outcome, retry=True)
                bad = sum(result.counts.get(s, 0) for s in ("infeasible", "error", "failed"))
                prog.update(task, completed=result.n_skipped + result.n_done, note=f"{bad} not ok" if bad else "")
        if stop.set:
            # write what finishes within STOP_GRACE_S; drop what has not started; abandon the rest
            flight.cancel_pending()
            deadline = time.monotonic() + STOP_GRACE_S
            while flight and time.monotonic() < deadline:
                for batch, attempt, outcome in flight.finished(timeout=min(0.1, STOP_GRACE_S)):
                    if not isinstance(outcome, BaseException):
                        _handle(session, flight, sizer, batch, attempt, outcome, retry=False)
            if flight and hasattr(ex, "abandon"):
                ex.abandon()
            result.interrupted = True
        session.writer.flush()  # every finished row on disk while a signal still only sets the flag


def _figures(out: Path, spec: SweepSpec, writer: FigureWriter) -> dict[str, Any]:
    try:
        from dcpsim.run.sweep_figures import sweep_figures

        return sweep_figures(load_results(out, warn=False), out / "figures", spec.axis_fields, writer)
    except DcpsimError as exc:
        return {"all": f"failed: {exc} (run `dcpsim plot DIR --standard`)"}
    except Exception as exc:  # noqa: BLE001 - results are safe on disk; report, do not lose the sweep
        return {"all": f"failed: {type(exc).__name__}: {exc} (run `dcpsim plot DIR --standard`)"}


def describe_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing new"

