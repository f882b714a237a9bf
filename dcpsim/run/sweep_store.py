"""A sweep's results dataset: part files, loading, compaction, the folder lock (driver: :mod:`dcpsim.run.sweep`).

Output directory::

    DIR/spec.toml          copy of the spec file (when the spec came from a file)
    DIR/sweep.json         resolved spec: base configuration, axes, every run's id and updates
    DIR/results/part-*.parquet   one part per finished batch (written to a temporary
                                 file and renamed, so a killed sweep loses nothing finished)
    DIR/figures/           standard figures (see dcpsim.report.plots.standard_figures)
    DIR/**/.dcpsim-manifest.json  the files dcpsim wrote in each folder (see dcpsim.outdir)
    DIR/.dcpsim-lock       held while a sweep runs (one sweep per folder)

DIR may not hold files dcpsim did not write (refused before any work unless
``force``); part files in ``results/`` that this sweep did not write are
ignored and named in a warning, never read, merged or deleted. An unreadable
part of its own (a truncated disk write) is reported and its runs run again.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dcpsim.errors import ConfigError, DcpsimWarning
from dcpsim.run.sweep_spec import _jsonable

DONE_STATUSES = ("ok", "infeasible", "error")
RESULTS_DIR = "results"
PART_GLOB = "part-*.parquet"


# ====================================================================== dataset
def results_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / RESULTS_DIR


def _is_part(p: Path) -> bool:
    return p.parent.name == RESULTS_DIR and fnmatch.fnmatch(p.name, PART_GLOB)


def _all_parts(out_dir: str | Path) -> list[Path]:
    d = results_dir(out_dir)
    return sorted(d.glob(PART_GLOB)) if d.is_dir() else []


def _part_files(out_dir: str | Path) -> list[Path]:
    """The part files this sweep wrote (listed in results/'s manifest), in write order."""
    from dcpsim.outdir import owned_names

    owned = owned_names(results_dir(out_dir))
    return [p for p in _all_parts(out_dir) if p.name in owned]


def foreign_parts(out_dir: str | Path) -> list[Path]:
    """Part files in ``results/`` that dcpsim did not write there: never read, merged or deleted."""
    from dcpsim.outdir import owned_names

    owned = owned_names(results_dir(out_dir))
    return [p for p in _all_parts(out_dir) if p.name not in owned]


def _warn_foreign(out_dir: str | Path) -> list[Path]:
    bad = foreign_parts(out_dir)
    if bad:
        names = ", ".join(p.name for p in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        warnings.warn(f"{results_dir(out_dir)}: ignored {len(bad)} part file(s) this sweep did not write ({names}); "
                      "they are left as they are", DcpsimWarning, stacklevel=3)
    return bad


def _read_part(p: Path, columns: list[str] | None = None):
    """A part as a pyarrow Table, or None (with a warning) when it cannot be read (truncated, not parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(p, columns=columns)
    except (OSError, pa.ArrowException, ValueError) as exc:
        warnings.warn(f"{p}: unreadable part file ignored ({type(exc).__name__}); its runs count as not done",
                      DcpsimWarning, stacklevel=3)
        return None


_NAN = float("nan")


def _column(values: list[Any]):
    """One column as pandas would build it from records, then hand to pyarrow (``Table.from_pandas``).

    Missing keys are NaN (``values`` holds them as NaN); NaN and None are nulls; a column of nulls only is
    of the null type when every value is an explicit None, else float64 (pandas' all-NaN column). Equality
    of the read-back tables with the pandas path on random rows: ``tests/test_sweep_store.py``.
    """
    import pyarrow as pa

    arr = pa.array(values, from_pandas=True)
    if arr.null_count == len(arr):
        return pa.nulls(len(arr), pa.null() if all(v is None for v in values) else pa.float64())
    return arr


def rows_table(rows: list[dict[str, Any]]):
    """Rows (dicts of Python scalars) as a pyarrow Table: columns in order of first appearance, as
    ``pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)`` reads back, without pandas."""
    import pyarrow as pa

    cols = dict.fromkeys(k for r in rows for k in r)
    return pa.table({c: _column([r.get(c, _NAN) for r in rows]) for c in cols})


def _next_seq(out_dir: str | Path) -> int:
    existing = _part_files(out_dir)
    return (int(existing[-1].stem.split("-")[1]) + 1) if existing else 0


def write_part(out_dir: str | Path, rows: list[dict[str, Any]], *, seq: int | None = None) -> Path:
    """Write rows as the next part file, atomically (temporary file, fsync, rename; :mod:`dcpsim.outdir`).

    ``seq``: the part's number when the caller keeps count (:class:`PartWriter`); by default one more than
    the last part's."""
    import pyarrow.parquet as pq

    from dcpsim.outdir import write_with

    seq = _next_seq(out_dir) if seq is None else seq
    final = results_dir(out_dir) / f"part-{seq:06d}-{uuid.uuid4().hex[:8]}.parquet"
    table = rows_table(rows)
    return write_with(final, lambda t: pq.write_table(table, t))


class PartWriter:
    """Writes a sweep's finished rows as part files from a background thread.

    :meth:`put` hands rows over and returns at once, so the driver keeps the workers fed while a part is
    converted and fsynced; rows handed over while a part is being written go together into the next part.
    :meth:`flush` returns once every row handed over is in a part file (and raises the error of a write
    that failed: disk full, folder removed); :meth:`put` raises it too. The caller holds the folder's lock.
    """

    def __init__(self, out_dir: str | Path):
        self.out = Path(out_dir)
        self.parts = 0
        self._seq = _next_seq(self.out)
        self._cond = threading.Condition()
        self._pending: list[dict[str, Any]] = []
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="dcpsim-part-writer", daemon=True)
        self._thread.start()

    def put(self, rows: list[dict[str, Any]]) -> None:
        with self._cond:
            self._raise()
            self._pending.extend(rows)
            self._cond.notify_all()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        with contextlib.suppress(ImportError):  # imported now, while the first tasks run (a cold import: ~0.5 CPU s)
            import pyarrow.parquet  # noqa: F401
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                rows, self._pending = self._pending, []
                self._busy = True
            try:
                write_part(self.out, rows, seq=self._seq)
                self._seq += 1
                self.parts += 1
            except BaseException as exc:  # noqa: BLE001 - handed to the driver by put/flush
                with self._cond:
                    self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if self._error is not None:
                return

    def flush(self) -> None:
        """Wait until every row handed over is written; raise the error of a failed write."""
        with self._cond:
            while (self._pending or self._busy) and self._error is None:
                self._cond.wait(0.1)
            self._raise()

    def close(self) -> None:
        """Flush, then end the thread (raises like :meth:`flush`)."""
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join(timeout=5.0)


def load_results(out_dir: str | Path, *, dedupe: bool = True, status: str | tuple[str, ...] | None = None,
                 warn: bool = True):
    """The sweep's rows as a pandas DataFrame (part files in write order).

    Only parts this sweep wrote are read (others are named in a warning).
    ``dedupe`` keeps the last row of each ``config_hash`` (a failed run that
    was retried, or a compaction interrupted before it removed old parts).
    ``status`` keeps only rows with that status (or statuses). ``warn=False``
    leaves the warning about foreign parts to the caller.
    """
    import pandas as pd

    if not Path(out_dir).is_dir():  # a mistyped folder read as a sweep with no rows yet
        raise ConfigError("out_dir", str(out_dir), "an existing sweep folder (the out_dir run_sweep wrote)")
    if warn:
        _warn_foreign(out_dir)
    tables = [t for t in (_read_part(p) for p in _part_files(out_dir)) if t is not None and t.num_rows]
    if not tables:
        return pd.DataFrame(columns=["config_hash", "status", "reason", "wall_s"])
    df = pd.concat([t.to_pandas() for t in tables], ignore_index=True, sort=False)
    if dedupe and len(df):
        df = df.drop_duplicates("config_hash", keep="last").reset_index(drop=True)
    if status is not None:
        keep = (status,) if isinstance(status, str) else tuple(status)
        df = df[df["status"].isin(keep)].reset_index(drop=True)
    return df


def finished_hashes(out_dir: str | Path) -> set[str]:
    """Ids of runs already recorded as ok, infeasible or error (failed runs are retried)."""
    done: dict[str, str] = {}
    for p in _part_files(out_dir):
        t = _read_part(p, ["config_hash", "status"])
        if t is None:
            continue
        for h, s in zip(t.column("config_hash").to_pylist(), t.column("status").to_pylist(), strict=True):
            done[h] = s
    return {h for h, s in done.items() if s in DONE_STATUSES}


def compact_results(out_dir: str | Path) -> Path | None:
    """Merge this sweep's part files into one (deduplicated).

    Safe to interrupt: old parts go only after the new one is in place. Parts
    dcpsim did not write are neither merged nor deleted.
    """
    from dcpsim.outdir import remove_owned

    parts = _part_files(out_dir)
    if len(parts) <= 1:
        return parts[0] if parts else None
    df = load_results(out_dir, warn=False)
    new = write_part(out_dir, df.to_dict("records"))
    for p in parts:
        remove_owned(p)
    return new


def _clean_temporaries(out_dir: Path) -> None:
    """Remove dcpsim's own temporary files left by a killed sweep (the caller holds the folder's lock)."""
    from dcpsim.outdir import TMP_PREFIX

    for d in (out_dir, results_dir(out_dir)):
        if d.is_dir():
            for t in d.glob(TMP_PREFIX + "*"):
                t.unlink(missing_ok=True)


def _write_json_atomic(path: Path, obj: Any) -> None:
    from dcpsim.outdir import write_text

    write_text(path, json.dumps(_jsonable(obj), indent=2, default=str) + "\n")


@contextlib.contextmanager
def _dir_lock(out_dir: Path) -> Iterator[None]:
    """One sweep process per output directory (the lock dies with the process, even on SIGKILL)."""
    import fcntl

    from dcpsim.outdir import OWN_PREFIX

    fh = open(out_dir / f"{OWN_PREFIX}lock", "w")  # noqa: SIM115 - held for the whole sweep
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError("--out", str(out_dir), "a directory no other running sweep is writing to") from None
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fh.close()
