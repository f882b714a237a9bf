"""The sweep's part files: rows written without pandas read back as the pandas path wrote them; the background
writer keeps every row, in order, and reports a failed write."""

from __future__ import annotations

import random

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dcpsim.outdir import OutputError
from dcpsim.run.sweep_store import PartWriter, _part_files, load_results, rows_table, write_part


def _pandas_table(rows: list[dict]) -> pa.Table:
    """The reference: how parts were written before (a DataFrame from the row dicts, then pyarrow)."""
    return pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)


def _read_back(table: pa.Table) -> pd.DataFrame:
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    return pq.read_table(pa.BufferReader(buf.getvalue())).to_pandas()


_VALUES = {
    "int": lambda r: r.randint(-5, 10**12),
    "float": lambda r: r.choice([r.random(), float("inf"), float("nan")]),
    "number": lambda r: r.choice([r.randint(0, 9), r.random()]),
    "bool": lambda r: r.random() < 0.5,
    "str": lambda r: r.choice(["a", "bb", "", '{"1": 2}']),
}


def _random_rows(r: random.Random) -> list[dict]:
    kinds = {f"c{i}": r.choice(list(_VALUES)) for i in range(r.randint(1, 6))}
    rows = []
    for _ in range(r.randint(1, 6)):
        row = {}
        for col, kind in r.sample(list(kinds.items()), len(kinds)):  # keys in varying order
            x = r.random()
            if x < 0.15:
                continue  # missing from this row
            row[col] = None if x < 0.25 else _VALUES[kind](r)
        rows.append(row)
    return rows


def test_rows_table_reads_back_as_the_pandas_path():
    """Random rows (missing keys, None, NaN, inf, ints with gaps, bools, strings, all-null columns): the
    DataFrame read back is equal, dtypes and column order included, and so is a compaction of the two."""
    r = random.Random(24)
    checked = 0
    for _ in range(60):
        rows = _random_rows(r)
        if not any(rows):
            continue
        want = _read_back(_pandas_table(rows))
        got = _read_back(rows_table(rows))
        assert list(got.columns) == list(want.columns)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        # compaction writes the records of a loaded frame again
        again = want.to_dict("records")
        pd.testing.assert_frame_equal(_read_back(rows_table(again)),
                                      _read_back(_pandas_table(again)), check_exact=True)
        checked += 1
    assert checked > 45


def _owned_results(tmp_path):
    out = tmp_path / "sweep"
    (out / "results").mkdir(parents=True)
    return out


def test_part_writer_keeps_every_row_in_order(tmp_path):
    out = _owned_results(tmp_path)
    write_part(out, [{"config_hash": "h0", "status": "ok", "x": 0}])
    w = PartWriter(out)
    for i in range(1, 40):
        w.put([{"config_hash": f"h{i}", "status": "ok", "x": i}])
    w.close()
    parts = _part_files(out)
    assert 2 <= len(parts) <= 40 and parts[0].name.startswith("part-000000-")
    assert [int(p.name.split("-")[1]) for p in parts] == list(range(len(parts)))  # numbered on, in write order
    assert w.parts == len(parts) - 1
    assert list(load_results(out)["x"]) == list(range(40))


def test_part_writer_reports_a_failed_write(tmp_path, monkeypatch):
    out = _owned_results(tmp_path)
    w = PartWriter(out)

    def broken(*a, **k):
        raise OutputError("could not write: No space left on device (nothing there was changed)")

    monkeypatch.setattr("dcpsim.run.sweep_store.write_part", broken)
    w.put([{"config_hash": "h", "status": "ok"}])
    with pytest.raises(OutputError, match="No space left"):
        w.flush()
    with pytest.raises(OutputError):
        w.put([{"config_hash": "h2", "status": "ok"}])
    with pytest.raises(OutputError):
        w.close()
