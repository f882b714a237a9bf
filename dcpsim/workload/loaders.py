"""Reading sequence lengths (tokens per document) from files.

Supported formats, chosen by the file suffix (a trailing ``.gz``, ``.bz2``,
``.xz`` or ``.zst`` is decompressed transparently, except for Parquet):

* plain text (``.txt`` or no suffix): one integer per line; blank lines and
  ``#`` comments are ignored;
* ``.csv``: a header row is optional (the first row is taken as a header
  when none of its cells is a number); the column is ``column`` (a name, or
  a 0-based index), else the first of :data:`LENGTH_KEYS` present in the
  header, else the first column;
* ``.parquet``: the column ``column``, else the first of :data:`LENGTH_KEYS`
  present, else the only column;
* ``.jsonl`` / ``.ndjson``: the key ``column``, else the first of
  :data:`LENGTH_KEYS` present.

In Parquet and JSON lines a list value (e.g. token ids) counts as its length.

Every problem (missing or unreadable file, unknown suffix, missing column,
empty file, non-integer or non-positive length) raises
:class:`~dcpsim.errors.ConfigError` naming the field, the value and what was
expected. Plain text and CSV go through pandas' C parser: a million lines load
in well under a second.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.errors import ConfigError

LENGTH_CAP: int = 2**31 - 1
"""Largest length (tokens) a file may hold and a continuous distribution can produce.

An overflow guard only: ``LENGTH_CAP ** 2 < 2 ** 62`` so squared lengths stay
inside ``int64``. Defined here, the lowest workload module (distributions
import it)."""

__all__ = ["LENGTH_KEYS", "SUPPORTED_SUFFIXES", "read_lengths"]

LENGTH_KEYS: tuple[str, ...] = (
    "num_tokens",
    "length",
    "tokens",
    "len",
    "n_tokens",
    "token_count",
    "seq_len",
    "seqlen",
    "input_ids",
)
"""Column/key names tried, in order, when no ``column`` is given."""

_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
_TEXT, _CSV, _PARQUET, _JSONL = "text", "csv", "parquet", "jsonl"
_FORMATS = {"": _TEXT, ".txt": _TEXT, ".csv": _CSV, ".parquet": _PARQUET, ".jsonl": _JSONL, ".ndjson": _JSONL}
SUPPORTED_SUFFIXES: tuple[str, ...] = tuple(sorted(_FORMATS))
"""File suffixes :func:`read_lengths` understands (``""``: no suffix, plain text)."""


def read_lengths(
    path: str | os.PathLike[str],
    column: str | int | None = None,
    *,
    drop_empty: bool = False,
) -> np.ndarray:
    """Read sequence lengths in tokens from a file.

    Args:
        path: the file; its suffix picks the format (see the module docstring).
        column: the column (CSV, Parquet) or key (JSON lines) holding the
            lengths; ``None`` picks a default. An int selects a CSV column by
            0-based position.
        drop_empty: skip zero-length documents instead of rejecting them.

    Returns:
        ``int64`` array of lengths, each in ``[1, LENGTH_CAP]``, in file order.

    Raises:
        ConfigError: the file is missing, unreadable, empty or of an unknown
            kind; the column is missing; a value is not a positive integer.
    """
    p = Path(path)
    fmt = _format_of(p)
    _check_source(p, str(path), fmt, column)
    values, name = _read_format(p, str(path), fmt, column)
    if values.size == 0:
        raise ConfigError("path", str(path), "a file with at least one length")
    return _validate(values, name, str(path), drop_empty)


def _check_source(p: Path, shown: str, fmt: str, column: str | int | None) -> None:
    """The file exists and is readable; ``column`` fits the format (``shown``: the path as the user wrote it)."""
    if not p.is_file():
        raise ConfigError("path", shown, "an existing, readable lengths file")
    if not os.access(p, os.R_OK):
        raise ConfigError("path", shown, "a readable file (permission denied)")
    if column is not None and (isinstance(column, bool) or not isinstance(column, str | int)):
        raise ConfigError("column", column, "a column name, a 0-based CSV column index, or None")
    if column is not None and fmt == _TEXT:
        raise ConfigError("column", column, "None: a plain-text file has no columns")
    if isinstance(column, int) and fmt != _CSV:
        raise ConfigError("column", column, "a column/key name (indices are for CSV only)")


def _read_format(p: Path, shown: str, fmt: str, column: str | int | None) -> tuple[np.ndarray, str]:
    """(values, column name) from the file in its format; every failure a ConfigError naming the file."""
    readers = {_CSV: _read_csv, _PARQUET: _read_parquet, _JSONL: _read_jsonl}
    try:
        if fmt == _TEXT:
            return _read_text(p), "length"
        return readers[fmt](p, column)
    except ConfigError as exc:
        if exc.where is None and exc.field != "path":  # say which file
            raise ConfigError(exc.field, exc.value, exc.expected, where=shown) from None
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("path", shown, f"a readable file ({exc})") from exc
    except Exception as exc:  # parser errors from pandas/pyarrow: name the file
        raise ConfigError("path", shown, f"a well-formed {fmt} lengths file ({type(exc).__name__}: {exc})") from exc


# --------------------------------------------------------------------------
# formats
# --------------------------------------------------------------------------


def _format_of(p: Path) -> str:
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION_SUFFIXES:
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    # a dotted stem such as "wiki.v2" (unknown suffix, no compression) is not a format
    fmt = _FORMATS.get(suffix)
    if fmt is None or (fmt == _PARQUET and p.suffix.lower() in _COMPRESSION_SUFFIXES):
        raise ConfigError(
            "path",
            str(p),
            f"a file with suffix in {list(SUPPORTED_SUFFIXES)} "
            f"(optionally + {list(_COMPRESSION_SUFFIXES)}, not for parquet)",
        )
    return fmt


def _read_text(p: Path) -> np.ndarray:
    import pandas as pd  # here only: a worker that reads no file does not import pandas

    try:
        frame = pd.read_csv(p, header=None, sep=r"\s+", engine="c", comment="#", skip_blank_lines=True)
    except pd.errors.EmptyDataError:
        return np.zeros(0, dtype=np.int64)
    except pd.errors.ParserError as exc:
        raise ConfigError("path", str(p), f"one integer per line ({exc})") from exc
    if frame.shape[1] != 1:
        raise ConfigError("path", str(p), f"one integer per line; found {frame.shape[1]} columns")
    return frame.iloc[:, 0].to_numpy()


def _first_line(p: Path) -> list[str] | None:
    """Fields of the first non-blank CSV line (decompressing if needed)."""
    import gzip

    opener: Any = open
    name = p.name.lower()
    if name.endswith(".gz"):
        opener = gzip.open
    elif name.endswith(".bz2"):
        import bz2

        opener = bz2.open
    elif name.endswith(".xz"):
        import lzma

        opener = lzma.open
    elif name.endswith(".zst"):
        return None  # let pandas decide (header inferred from the parsed frame)
    with opener(p, "rt", newline="", encoding="utf-8-sig") as fh:  # utf-8-sig: a byte-order mark is not a header
        for row in csv.reader(fh):
            if any(cell.strip() for cell in row):
                return row
    return []


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _read_csv(p: Path, column: str | int | None) -> tuple[np.ndarray, str]:
    import pandas as pd  # here only: a worker that reads no file does not import pandas
    first = _first_line(p)
    if first == []:
        return np.zeros(0, dtype=np.int64), "length"
    if first is None:  # .zst: parse once without header and look at row 0
        probe = pd.read_csv(p, header=None, engine="c", nrows=1, dtype=str)
        first = [str(x) for x in probe.iloc[0].tolist()]
    # a header row names columns: it has no numeric cell (a data row has the length)
    has_header = not any(_is_number(c) for c in first)
    if has_header:
        header = [c.strip() for c in first]
        if column is None:
            name = next((k for k in LENGTH_KEYS if k in header), header[0])
        elif isinstance(column, int):
            if not 0 <= column < len(header):
                raise ConfigError("column", column, f"a column index in [0, {len(header)})")
            name = header[column]
        elif column in header:
            name = column
        else:
            raise ConfigError("column", column, f"one of the CSV header's columns {header}")
        frame = pd.read_csv(p, header=0, engine="c", usecols=[name], skipinitialspace=True)
        return frame[name].to_numpy(), name
    # no header
    if isinstance(column, str):
        raise ConfigError("column", column, "a 0-based column index: this CSV has no header row")
    index = 0 if column is None else column
    if not 0 <= index < len(first):
        raise ConfigError("column", column, f"a column index in [0, {len(first)})")
    frame = pd.read_csv(p, header=None, engine="c", usecols=[index], skipinitialspace=True)
    return frame[index].to_numpy(), f"column {index}"


def _pick_key(names: list[str], column: str | int | None, kind: str) -> str:
    if column is not None:
        if column not in names:
            raise ConfigError("column", column, f"one of the {kind}'s columns {names}")
        return str(column)
    for key in LENGTH_KEYS:
        if key in names:
            return key
    if kind == "parquet file" and len(names) == 1:
        return names[0]
    raise ConfigError("column", None, f"a column name: none of {list(LENGTH_KEYS)} among the {kind}'s {names}")


def _arrow_to_lengths(col: Any, name: str, where: str) -> np.ndarray:
    """A pyarrow ChunkedArray of numbers or lists -> numpy array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if col.null_count:
        i = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise ConfigError(name, None, "a length in every row", where=f"{where} (data row {i + 1})")
    typ = col.type
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        col = pc.list_value_length(col)
    elif not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        raise ConfigError(name, f"values of type {typ}", "integer token counts or lists", where=where)
    return col.to_numpy()


def _read_parquet(p: Path, column: str | int | None) -> tuple[np.ndarray, str]:
    import pyarrow.parquet as pq

    names = list(pq.read_schema(p).names)
    name = _pick_key(names, column, "parquet file")
    table = pq.read_table(p, columns=[name])
    return _arrow_to_lengths(table.column(name), name, str(p)), name


def _read_jsonl(p: Path, column: str | int | None) -> tuple[np.ndarray, str]:
    import pyarrow.json as pj

    if p.stat().st_size == 0:
        return np.zeros(0, dtype=np.int64), "length"
    table = pj.read_json(p)
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64), "length"
    name = _pick_key(list(table.column_names), column, "JSON lines file")
    return _arrow_to_lengths(table.column(name), name, str(p)), name


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------


def _validate(values: np.ndarray, name: str, where: str, drop_empty: bool) -> np.ndarray:
    """Check that ``values`` are integer token counts; return them as int64."""
    arr = np.asarray(values)
    if arr.dtype == np.bool_:
        raise ConfigError(name, "booleans", "integer token counts", where=where)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        import pandas as pd

        numeric = pd.to_numeric(pd.Series(arr), errors="coerce").to_numpy(dtype=np.float64)
        bad = np.isnan(numeric)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(name, arr[i], "an integer token count", where=f"{where} (data row {i + 1})")
        arr = numeric
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.floor(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            value = "missing" if np.isnan(arr[i]) else arr[i].item()
            raise ConfigError(name, value, "an integer token count", where=f"{where} (data row {i + 1})")
    neg = arr < 0 if drop_empty else arr < 1
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        hint = (" (remove the empty documents; in Python, read_lengths(..., drop_empty=True) skips them)"
                if arr[i] == 0 and not drop_empty else "")  # drop_empty skips zeros only, never a negative count
        expected = "a token count >= 0" if drop_empty else f"a token count >= 1{hint}"
        raise ConfigError(name, arr[i].item(), expected, where=f"{where} (data row {i + 1})")
    big = arr > LENGTH_CAP
    if big.any():
        i = int(np.flatnonzero(big)[0])
        raise ConfigError(name, arr[i].item(), f"a token count <= {LENGTH_CAP}", where=f"{where} (data row {i + 1})")
    out = arr.astype(np.int64, copy=False)
    if drop_empty:
        out = out[out > 0]
        if out.size == 0:
            raise ConfigError("path", where, "at least one non-empty document")
    return out
