"""A sweep's fast paths, each equal to what it replaced: part files written without pandas read back as the
pandas path wrote them; the background writer keeps every row, in order, and reports a failed write; the GEMM
shape factor computed over all candidates at once equals the one-at-a-time loop bit for bit."""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dcpsim.hardware import get_profile, list_profiles
from dcpsim.hardware.spec import GEMM_SPLIT_K, GEMM_TILES
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


def _shape_factor_one_candidate_at_a_time(profile, m, n: int, k: int, precision: str = "bf16") -> np.ndarray:
    """The reference: the GEMM shape factor as it was computed before (one (tile, split-K) candidate at a time)."""
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    t = profile.timing
    if not t.has_gemm_model:
        return np.ones_like(m)
    k_half = t.gemm_k_half * (t.peak_fp8_flops / profile.peak_bf16_flops if precision == "fp8" and t.has_fp8 else 1.0)
    best = np.zeros_like(m)
    sms = float(t.sms)
    for tm, tn, rel in GEMM_TILES:
        tiles = np.ceil(m / tm) * math.ceil(n / tn)
        for split in GEMM_SPLIT_K:
            kp = k / split
            if split > 1 and kp < 4 * k_half:
                break
            waves = np.ceil(tiles * split / sms)
            util = (m * n * split) / (waves * sms * tm * tn)
            best = np.maximum(best, rel * util * kp / (kp + k_half))
    return best


def test_gemm_shape_factor_equals_one_candidate_at_a_time():
    """Bit for bit, on every shipped profile, random shapes, scalars and arrays, BF16 and FP8 (a sweep's
    hottest cost-model call is computed over all candidates at once)."""
    rng = np.random.default_rng(24)
    for name in list_profiles():
        prof = get_profile(name)
        for _ in range(40):
            n, k = (int(x) for x in rng.integers(1, 60000, size=2))
            shape = [(), (int(rng.integers(0, 40)),), (3, 4)][int(rng.integers(0, 3))]
            m = rng.integers(0, 200000, size=shape).astype(float)
            for precision in ("bf16", "fp8"):
                want = _shape_factor_one_candidate_at_a_time(prof, m, n, k, precision)
                got = prof.gemm_shape_factor(m, n, k, precision=precision)
                assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
