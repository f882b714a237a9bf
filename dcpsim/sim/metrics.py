"""Metrics of simulated iterations: per iteration, per rank, and the run's summary.

Accounting (seconds; per stage rank, i.e. per GPU since the TP ranks behind a
stage rank are identical). For a rank of stage ``p`` in an iteration of length
``T = planning_stall + makespan``:

* ``compute_s``: its group ops minus their exposed CP communication (GEMMs,
  attention, TP communication, recomputation, output layer);
* ``cp_comm_s``: exposed CP communication of its group ops;
* ``grad_sync_s``: from the stage's last backward to the end of its
  parameter all-gather (exposed reduce-scatter, optimizer step, all-gather);
* ``planning_stall_s``: the policy's planning time that did not hide;
* idle, the rest, split into
  - ``bubble_s``: the idle this rank would have in a 1F1B pipeline where
    every microbatch took this rank's mean forward, backward and transfer
    times on each stage (the rank's chain of stage ranks across stages,
    evaluated exactly by :func:`balanced_pipeline_end`; with
    no transfers it is ``Σ_q c_q + (S − 1)·max_q c_q − S·c_p``, ``c_q`` the
    mean forward + backward on stage ``q``, ``S`` steps), capped at the idle;
  - ``imbalance_s``: the remaining idle (unequal microbatches and stages,
    waiting at the gradient sync and at the iteration end for slower ranks).

The six parts sum to ``T`` for every rank; iteration figures are their means
over GPUs. Throughput follows Megatron: ``tflops_per_gpu = FLOPs / (T · GPUs ·
1e12)`` with the FLOPs of the sequences trained (recomputation not counted),
``mfu = tflops_per_gpu / peak``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dcpsim.model.accounting import throughput
from dcpsim.pipeline import chain_times, chunk_durations, link_of_transfer, pipeline_schedule
from dcpsim.serialize import to_jsonable as _jsonable
from dcpsim.sim.durations import IterationWork, SyncCost
from dcpsim.sim.engine import IterationTimeline
from dcpsim.sim.graph import BWD
from dcpsim.sim.step_sums import step_reduce, tiled_bases

BREAKDOWN = ("compute_s", "cp_comm_s", "bubble_s", "imbalance_s", "grad_sync_s", "planning_stall_s")


@dataclass
class IterationRecord:
    """Everything known about one simulated iteration (arrays, for metrics and traces)."""

    index: int
    offset_s: float
    planning_stall_s: float
    planning_time_s: float
    work: IterationWork
    timeline: IterationTimeline
    sync: SyncCost
    policy: str
    dropped: int
    sim_wall_s: float

    @property
    def iteration_time_s(self) -> float:
        return self.planning_stall_s + self.timeline.makespan_s


def balanced_pipeline_end(fwd_s: np.ndarray, bwd_s: np.ndarray, xfer_s: np.ndarray, n_steps: int, vp: int = 1) -> np.ndarray:
    """End of the last op of pipelines whose microbatches are all equal, one per column, ``(N,)``.

    ``fwd_s``/``bwd_s`` are ``(PP, N)``: the per-microbatch time of ``N``
    independent chains on each stage (split evenly over ``vp`` chunks);
    ``xfer_s`` is ``(n_links, N)``. This is the reference pipeline behind the
    bubble accounting, evaluated exactly by :func:`dcpsim.pipeline.chain_times`.
    """
    pp = fwd_s.shape[0]
    # ranks with bit-equal inputs: each distinct column once (the evaluation is per column), where the schedule
    # is long enough for the comparison to pay (2 pp vp S ops per column)
    same = _equal_columns(fwd_s, bwd_s, xfer_s) if 2 * pp * vp * n_steps >= 256 else None
    if same is not None:
        first, inv = same
        return _balanced_end(fwd_s[:, first], bwd_s[:, first], xfer_s[:, first], n_steps, vp)[inv]
    return _balanced_end(fwd_s, bwd_s, xfer_s, n_steps, vp)


def _balanced_end(fwd_s: np.ndarray, bwd_s: np.ndarray, xfer_s: np.ndarray, n_steps: int, vp: int) -> np.ndarray:
    """:func:`balanced_pipeline_end` of every column (seconds)."""
    pp = fwd_s.shape[0]
    sched = pipeline_schedule(pp, n_steps, vp)
    f = chunk_durations(fwd_s, vp)[:, None, :]
    b = chunk_durations(bwd_s, vp)[:, None, :]
    x = xfer_s[link_of_transfer(pp, vp)][:, None, :] if pp * vp > 1 else None
    _, fin = chain_times(sched, f, b, x, starts=False)
    return fin[sched.last].max(axis=0)


def _equal_columns(*arrays: np.ndarray, min_columns: int = 1024) -> tuple[np.ndarray, np.ndarray] | None:
    """(first column of each distinct one, each column's distinct index) when the stacked 2-D ``arrays`` have
    at least ``min_columns`` columns and at most 3/4 of them distinct (compared byte for byte); else None."""
    cols = np.concatenate(arrays, axis=0)
    if cols.ndim != 2 or cols.shape[1] < min_columns or cols.dtype != np.float64:
        return None
    rows = np.ascontiguousarray(cols.T)  # one column's bits per row
    bits = rows.view(np.uint64)
    # a checksum per column (its bits, odd weights, wrapping), then each column compared with the first of its
    # checksum: when they all agree, the checksums tell the distinct columns apart (an order of them as good as
    # the byte order's for the callers, which treat each column alone); else the byte-wise sort
    with np.errstate(over="ignore"):
        check = (bits * (2 * np.arange(bits.shape[1], dtype=np.uint64) + 1)).sum(axis=1, dtype=np.uint64)
    _, first, inv = np.unique(check, return_index=True, return_inverse=True)
    inv = inv.ravel()
    if not np.array_equal(bits, bits[first[inv]]):
        key = rows.view(np.dtype((np.void, 8 * cols.shape[0]))).ravel()
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.ravel()
    return (first, inv) if 4 * first.size <= 3 * cols.shape[1] else None


def _by_rank(a: np.ndarray, gid: np.ndarray, fill: float = 0.0, flat: np.ndarray | None = None) -> np.ndarray:
    """``a[..., gid]`` with ``fill`` where ``gid < 0`` (a rank a step leaves out); ``flat``: the raveled
    ``where(gid < 0, G, gid)`` when the caller has it.

    For a 1-D or 2-D ``a``: one ``np.take`` of whole rows, laid out in memory as numpy's fancy index lays
    its result out (``gid``'s axes first, then ``a``'s leading axis), so the same values in the same
    layout: the sums and means over it add in the same order."""
    if flat is None:
        flat = np.where(gid < 0, a.shape[-1], gid).ravel()
    if a.ndim == 2 and gid.ndim == 2:
        table = np.empty((a.shape[1] + 1, a.shape[0]))  # the padded array's transpose, one copy
        table[:-1], table[-1] = a.T, fill
        rows = np.take(table, flat, axis=0)  # (S*R, L)
        return rows.reshape(gid.shape + (a.shape[0],)).transpose(2, 0, 1)
    pad = np.concatenate([a, np.full(a.shape[:-1] + (1,), fill)], axis=-1)
    if a.ndim == 1:
        return np.take(pad, flat).reshape(gid.shape)
    return pad[..., flat.reshape(gid.shape)]


def _rows_by_rank(a: np.ndarray, rows: list[int], gid: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """:func:`_by_rank` of rows ``rows`` of a 2-D ``a`` (fill 0) one row at a time, ``(rows, S, R)`` in C order: the
    same values, and a sum over its step axis adds the steps in the same order (first to last) as over
    ``_by_rank``'s."""
    out = np.empty((len(rows), flat.size))
    for i, r in enumerate(rows):
        np.take(np.append(a[r], 0.0), flat, out=out[i], mode="clip")
    return out.reshape((len(rows),) + gid.shape)


def _alike_rows(*arrays: np.ndarray) -> tuple[list[int], list[int]]:
    """(the distinct rows, each row's index among them) of 2-D ``arrays`` with as many rows each: rows ``p`` and
    ``q`` are alike when every array's rows ``p`` and ``q`` hold the same bits (a sum tells most others apart); an
    array of one row broadcast (row stride 0) holds the same bits in every row."""
    arrays = tuple(a for a in arrays if a.strides[0] != 0) or arrays[:1]
    if arrays[0].strides[0] == 0:
        return [0][:arrays[0].shape[0]], [0] * arrays[0].shape[0]
    bits = [np.ascontiguousarray(a).view(np.int64) for a in arrays]
    sums = [a.sum(axis=1).tolist() for a in arrays]
    keep: list[int] = []
    place: list[int] = []
    for p in range(arrays[0].shape[0]):
        j = next((i for i, q in enumerate(keep) if all(t[p] == t[q] for t in sums)
                  and all(np.array_equal(x[p], x[q]) for x in bits)), None)
        if j is None:
            keep.append(p)
            j = len(keep) - 1
        place.append(j)
    return keep, place


def _spread_rows(u: np.ndarray, place: list[int]) -> np.ndarray:
    """``(len(place), R)`` from ``u`` (``(kept rows, R)``: one row per distinct row), row ``p`` = ``u[place[p]]``,
    laid out ranks major (as numpy lays out a sum over :func:`_by_rank`'s step axis)."""
    out = np.empty((u.shape[1], len(place)))
    out[...] = u.T[:, place]
    return out.T


def _last_op_end(finish_b: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Per stage rank, the end of its last backward (first chunk), ``(PP, R)``; 0 for a rank with no op."""
    S, R = gid.shape
    used = gid >= 0
    k_last = np.where(used.any(axis=0), S - 1 - np.argmax(used[::-1], axis=0), 0)
    g_last = gid[k_last, np.arange(R)]
    return np.where(g_last >= 0, _by_rank(finish_b, g_last[None, :])[:, 0, :], 0.0)


def _step_sums(w: IterationWork, gid: np.ndarray, keep: list[int], links: list[int], cp_s: np.ndarray) -> dict:
    """Per stage rank, over the steps: the sums of forward + backward (``busy``) and of the exposed CP parts
    (``cp``) and the means of forward (``f``), backward (``b``) and pipeline transfer (``x``), per kept stage or
    link row, ``(rows, R)``; the local tokens' sum and peak memory's maximum, ``(R,)`` (seconds, tokens, bytes).
    Cell by cell when the plan's steps tile the ranks (:mod:`dcpsim.sim.step_sums`, the same numbers), else from
    ``(steps, R)`` gathers."""
    S, t = gid.shape[0], w.table
    bases = tiled_bases(t.step, t.start, t.size, gid)
    if bases is not None:
        f, b = w.fwd_s[keep], w.bwd_s[keep]
        return {"busy": step_reduce(f + b, gid, bases), "cp": step_reduce(cp_s[keep], gid, bases),
                "f": step_reduce(f, gid, bases) / S, "b": step_reduce(b, gid, bases) / S,
                "x": step_reduce(w.xfer_s[links], gid, bases) / S,
                "tokens": step_reduce(np.asarray(w.local_tokens, dtype=np.float64)[None, :], gid, bases)[0],
                "memory": step_reduce(np.asarray(w.peak_memory_bytes, dtype=np.float64)[None, :], gid, bases, np.maximum)[0]}
    flat = np.where(gid < 0, w.fwd_s.shape[-1], gid).ravel()
    f, b = _rows_by_rank(w.fwd_s, keep, gid, flat), _rows_by_rank(w.bwd_s, keep, gid, flat)  # (stages kept, S, R)
    return {"busy": (f + b).sum(axis=1), "cp": _rows_by_rank(cp_s, keep, gid, flat).sum(axis=1),
            "f": f.mean(axis=1), "b": b.mean(axis=1), "x": _rows_by_rank(w.xfer_s, links, gid, flat).mean(axis=1),
            "tokens": _by_rank(w.local_tokens, gid, flat=flat).sum(axis=0),
            "memory": _by_rank(w.peak_memory_bytes, gid, w.idle_memory_bytes, flat).max(axis=0)}


def rank_arrays(rec: IterationRecord) -> dict[str, np.ndarray]:
    """Per stage rank, ``(PP, R)`` arrays of the accounting above (plus tokens, microbatches, memory)."""
    w, tl = rec.work, rec.timeline
    gid = w.table.gid  # (S, R), -1 where a step leaves the rank out
    S = gid.shape[0]
    pp = w.fwd_s.shape[0]
    # a rank's forward + backward exposed CP parts: summed per group, then gathered (the same sums; 0 + 0 off)
    cp_s = w.cp_fwd_s + w.cp_bwd_s
    keep, place = _alike_rows(w.fwd_s, w.bwd_s, cp_s)  # stages of the same durations: each distinct one once
    links, at = _alike_rows(w.xfer_s)
    sums = _step_sums(w, gid, keep, links, cp_s)
    busy, cp = _spread_rows(sums["busy"], place), _spread_rows(sums["cp"], place)  # (pp, R)
    grad = (tl.stage_end_s - tl.bwd_end_s)[:, None]
    if tl.param_gather_s is not None:  # the all-gather waited for at the first forwards (dcpsim.sim.engine)
        grad = grad + tl.param_gather_s[:, None]
    idle = np.maximum(tl.makespan_s - busy - grad, 0.0)
    x = _spread_rows(sums["x"], at)
    balanced = balanced_pipeline_end(_spread_rows(sums["f"], place), _spread_rows(sums["b"], place), x, S, w.vp)
    bubble = np.clip(balanced[None, :] - busy, 0.0, idle)
    return {
        "compute_s": busy - cp,
        "cp_comm_s": cp,
        "bubble_s": bubble,
        "imbalance_s": idle - bubble,
        "grad_sync_s": np.broadcast_to(grad, busy.shape),
        "planning_stall_s": np.full(busy.shape, rec.planning_stall_s),
        "busy_s": busy,
        "idle_s": idle,
        "microbatches": np.broadcast_to((gid >= 0).sum(axis=0), busy.shape),
        "local_tokens": np.broadcast_to(sums["tokens"], busy.shape),
        "peak_memory_bytes": np.broadcast_to(sums["memory"], busy.shape),
        "last_bwd_end_s": _last_op_end(tl.finish[:pp, BWD, :], gid),
    }


def iteration_row(rec: IterationRecord, gpus: int, peak_flops: float, ranks: dict[str, np.ndarray] | None = None) -> dict:
    """One flat row of iteration metrics."""
    w, tl = rec.work, rec.timeline
    ranks = rank_arrays(rec) if ranks is None else ranks
    T = rec.iteration_time_s
    tput = throughput(w.flops, float(w.tokens.sum()), T, gpus, peak_flops)
    real = w.table.pack >= 0
    sizes = w.table.size[real]
    row = {
        "iteration": rec.index,
        "policy": rec.policy,
        "iteration_time_s": T,
        "sim_time_s": tl.makespan_s,
        **tput,
        "flops": w.flops,
        "tokens": int(w.tokens.sum()),
        "sequences": w.n_seqs,
        "dropped": rec.dropped,
        "steps": w.table.n_steps,
        "groups": int(real.sum()),
        "mean_cp": float((sizes * w.tokens[real]).sum() / max(w.tokens[real].sum(), 1.0)) if sizes.size else 0.0,
        "max_cp": int(sizes.max()) if sizes.size else 0,
        "network_groups": int(w.spans_network[0, real].sum()),
    }
    for k in BREAKDOWN:
        row[k] = float(ranks[k].mean())
    for k in BREAKDOWN:
        row["frac_" + k.removesuffix("_s")] = row[k] / T if T > 0 else float("nan")
    row.update({
        "reduce_scatter_s": float(rec.sync.reduce_scatter_s.max()),
        "all_gather_s": float(rec.sync.all_gather_s.max()),
        "optimizer_s": float(rec.sync.optimizer_s.max()),
        "planning_time_s": rec.planning_time_s,
        "peak_memory_gib": float(w.peak_memory_bytes[real].max() / 2**30) if real.any() else float("nan"),
        "packs_over_memory": int((~w.fits_memory[real]).sum()),
        "events": tl.events,
        "sim_wall_s": rec.sim_wall_s,
        "batch_cost_calls": w.batch_cost_calls,
    })
    return row


def rank_rows(rec: IterationRecord, tp: int, ranks: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Columns of the per-rank table for one iteration (one row per stage rank, standing for ``tp`` GPUs)."""
    ranks = rank_arrays(rec) if ranks is None else ranks
    pp, R = ranks["busy_s"].shape
    stage = np.repeat(np.arange(pp), R)
    r = np.tile(np.arange(R), pp)
    cols = {
        "iteration": np.full(pp * R, rec.index),
        "stage": stage,
        "stage_rank": r,
        "gpu_first": tp * r + tp * R * stage,
        "gpus": np.full(pp * R, tp),
    }
    for k in ("busy_s", *BREAKDOWN, "idle_s", "microbatches", "local_tokens", "peak_memory_bytes"):
        cols[k] = np.ascontiguousarray(ranks[k]).reshape(-1)
    cols["iteration_time_s"] = np.full(pp * R, rec.iteration_time_s)
    return cols


class IterationColumns:
    """The iteration rows (dicts) as columns, with pandas' reductions, without building a DataFrame.

    A column is ``numpy.asarray`` of its values, a row without the key giving NaN -- the dtypes
    ``pandas.DataFrame(rows)`` infers for the numeric and boolean columns a run has; the reductions do what
    pandas' do on them (NaN skipped unless ``skipna=False``; sums by numpy's pairwise ``sum``, means as that
    sum over the count; tested against pandas). What :func:`dcpsim.run.single.run_simulation` needs for its
    summary: a sweep run builds no DataFrame at all (the result's tables are built on first use).
    """

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self._cols: dict[str, np.ndarray] = {}
        self._keys = {k for r in rows for k in r}

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def col(self, key: str) -> np.ndarray:
        c = self._cols.get(key)
        if c is None:
            vals = [r.get(key, np.nan) for r in self.rows]
            c = np.asarray(vals)
            if c.dtype == object and not any(isinstance(v, str) for v in vals):
                c = np.asarray([np.nan if v is None else v for v in vals], dtype=float)  # None: missing, as in pandas
            self._cols[key] = c
        return c

    def _filled(self, key: str, fill: float) -> tuple[np.ndarray, int]:
        c = self.col(key)
        if c.dtype.kind == "f":
            nan = np.isnan(c)
            return np.where(nan, fill, c), int(c.size - nan.sum())
        return c, c.size

    def sum(self, key: str, skipna: bool = True):
        return self._filled(key, 0.0)[0].sum() if skipna else self.col(key).sum()

    def mean(self, key: str):
        vals, n = self._filled(key, 0.0)
        return vals.sum(dtype=np.float64) / n if n else np.float64(np.nan)

    def max(self, key: str):
        vals, n = self._filled(key, -np.inf)
        return vals.max() if n else np.float64(np.nan)


@dataclass
class SimResult:
    """Result of a run: flat ``summary``, ``iterations`` and ``ranks`` tables, resolved ``config`` and ``meta``.

    ``records`` keep the arrays of each simulated iteration (for traces);
    ``plans`` the policy's plans. ``iterations``, ``ranks`` and ``config`` may be given as zero-argument
    functions that build them: they are then built on first use (a sweep reads only the summary).
    """

    summary: dict
    iterations: object  # pandas.DataFrame
    ranks: object  # pandas.DataFrame
    config: dict
    config_hash: str
    meta: dict = field(default_factory=dict)
    records: list[IterationRecord] = field(default_factory=list, repr=False)
    plans: list = field(default_factory=list, repr=False)
    iteration_rows: list[dict] | None = field(default=None, repr=False)  # the rows of ``iterations``, if at hand

    FILES = ("iterations.parquet", "ranks.parquet", "config.json", "summary.json")
    """The files :meth:`write` writes into its folder."""

    def iteration_values(self, name: str) -> np.ndarray:
        """One numeric column of ``iterations`` as floats; from the rows (:class:`IterationColumns`, what pandas
        gives) while the table is not built, so a reader of one column imports no pandas."""
        if self.iteration_rows is not None and callable(self.__dict__.get("_iterations")):
            return IterationColumns(self.iteration_rows).col(name).astype(float)
        return self.iterations[name].to_numpy(float)

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``iterations.parquet``, ``ranks.parquet``, ``config.json`` and ``summary.json`` into ``out_dir``.

        Atomic, and only over files dcpsim wrote there (see :mod:`dcpsim.outdir`).
        """
        from dcpsim.outdir import check_out_dir, write_text, write_with

        out = check_out_dir(out_dir)
        paths = {
            "iterations": out / "iterations.parquet",
            "ranks": out / "ranks.parquet",
            "config": out / "config.json",
            "summary": out / "summary.json",
        }
        write_with(paths["iterations"], lambda t: self.iterations.to_parquet(t, index=False))
        write_with(paths["ranks"], lambda t: self.ranks.to_parquet(t, index=False))
        write_text(paths["config"], json.dumps({"config_hash": self.config_hash, "config": self.config}, indent=2, sort_keys=True))
        write_text(paths["summary"], json.dumps({"summary": _jsonable(self.summary), "meta": _jsonable(self.meta)}, indent=2))
        return paths


def _lazy_table(name: str, what: str = "the {name} table (pandas.DataFrame)") -> property:
    """A SimResult table (or the config) given as a function is built on first use (and kept)."""
    private = "_" + name

    def get(self):
        v = self.__dict__[private]
        if callable(v):
            v = self.__dict__[private] = v()
        return v

    def put(self, value) -> None:
        self.__dict__[private] = value

    return property(get, put, doc=what.format(name=name))


def _result_state(self) -> dict:
    """What pickles: the tables and config built (a function building them does not pickle)."""
    _ = self.iterations, self.ranks, self.config
    return dict(self.__dict__) | {"iteration_rows": None}  # the table is built: its rows need not travel


SimResult.iterations = _lazy_table("iterations")  # type: ignore[assignment]
SimResult.ranks = _lazy_table("ranks")  # type: ignore[assignment]
SimResult.config = _lazy_table("config", "the resolved configuration (dict)")  # type: ignore[assignment]
SimResult.__getstate__ = _result_state  # type: ignore[attr-defined]
