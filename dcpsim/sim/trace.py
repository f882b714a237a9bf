"""Chrome / Perfetto trace of a simulated timeline (opens in ui.perfetto.dev or chrome://tracing).

Format: the Chrome Trace Event JSON object form,
``{"traceEvents": [...], "displayTimeUnit": "ms"}``. Every op is a complete
event (``"ph": "X"``) with ``name``, ``cat``, ``ts`` and ``dur`` in
microseconds, ``pid`` (one process per pipeline stage, plus one process
``iterations`` for iteration-level spans) and ``tid`` (the stage rank);
metadata events (``"ph": "M"``) name the processes and threads.

At scale only representative ranks get a track: at most ``max_tracks``
tracks in all, spread evenly over stages and over the ranks of each stage (a
track stands for the TP ranks of its stage rank, which are identical).

Categories: ``forward``, ``backward`` (args: step, CP size, first rank of the
group, local tokens, sequences, exposed CP communication in ms),
``grad_sync`` (exposed reduce-scatter), ``optimizer``, ``param_gather``,
``iteration`` and ``planning_stall``.
"""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path

import numpy as np

from dcpsim.sim.graph import BWD, FWD
from dcpsim.sim.metrics import IterationRecord
from dcpsim.sim.topology import Topology

US = 1e6


def _span(a_s: float, b_s: float) -> tuple[float, float]:
    """(ts, dur) in microseconds, rounded to whole nanoseconds from the absolute times.

    Rounding both ends (not the duration) keeps back-to-back ops on a track
    exactly adjacent, so viewers never see a spurious overlap.
    """
    a = round(a_s * US, 3)
    b = round(b_s * US, 3)
    return a, round(max(b - a, 0.0), 3)


def representative_tracks(pp: int, ranks: int, max_tracks: int = 64) -> list[tuple[int, int]]:
    """(stage, stage rank) pairs to draw: evenly spread, at most ``max_tracks``."""
    max_tracks = max(1, int(max_tracks))
    stages = np.unique(np.linspace(0, pp - 1, min(pp, max_tracks)).round().astype(int))
    per_stage = max(1, max_tracks // stages.size)
    rs = np.unique(np.linspace(0, ranks - 1, min(ranks, per_stage)).round().astype(int))
    return [(int(p), int(r)) for p in stages for r in rs]


def chrome_trace(records: list[IterationRecord], topology: Topology, *, max_tracks: int = 64) -> dict:
    """The trace as a dict (see the module docstring for its layout)."""
    pp, R = topology.pp, topology.ranks_per_stage
    tracks = representative_tracks(pp, R, max_tracks)
    ev: list[dict] = []
    it_pid = pp
    ev.append({"name": "process_name", "ph": "M", "pid": it_pid, "tid": 0, "args": {"name": "iterations"}})
    ev.append({"name": "process_sort_index", "ph": "M", "pid": it_pid, "tid": 0, "args": {"sort_index": -1}})
    ev.append({"name": "thread_name", "ph": "M", "pid": it_pid, "tid": 0, "args": {"name": "iteration"}})
    ev.append({"name": "thread_name", "ph": "M", "pid": it_pid, "tid": 1, "args": {"name": "planning stall"}})
    for p in sorted({p for p, _ in tracks}):
        ev.append({"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": f"pipeline stage {p}"}})
        ev.append({"name": "process_sort_index", "ph": "M", "pid": p, "tid": 0, "args": {"sort_index": p}})
    for p, r in tracks:
        gpu = int(topology.gpu_id(p, r))
        gpus = f"GPU {gpu}" if topology.tp == 1 else f"GPUs {gpu}-{gpu + topology.tp - 1}"
        ev.append({"name": "thread_name", "ph": "M", "pid": p, "tid": r,
                   "args": {"name": f"rank {r} (dp {r // topology.cp}, cp {r % topology.cp}; {gpus})"}})
    for rec in records:
        w, tl = rec.work, rec.timeline
        t0 = rec.offset_s + rec.planning_stall_s
        ts, dur = _span(rec.offset_s, rec.offset_s + rec.iteration_time_s)
        ev.append({"name": f"iteration {rec.index}", "cat": "iteration", "ph": "X", "pid": it_pid, "tid": 0,
                   "ts": ts, "dur": dur,
                   "args": {"policy": rec.policy, "steps": int(w.table.n_steps), "flops": float(w.flops)}})
        if rec.planning_stall_s > 0:
            ts, dur = _span(rec.offset_s, rec.offset_s + rec.planning_stall_s)
            ev.append({"name": "planning stall", "cat": "planning_stall", "ph": "X", "pid": it_pid, "tid": 1,
                       "ts": ts, "dur": dur, "args": {}})
        gid = w.table.gid
        for p, r in tracks:
            for k in range(gid.shape[0]):
                g = int(gid[k, r])
                if g < 0 or w.table.n_seqs[g] == 0:  # the step leaves the rank out, or an empty pack
                    continue
                for c, (d, name, cat, cpx) in product(range(w.vp), ((FWD, "F", "forward", w.cp_fwd_s),
                                                                   (BWD, "B", "backward", w.cp_bwd_s))):
                    s = c * pp + p  # chunk c of stage p (virtual stage)
                    ts, dur = _span(t0 + float(tl.start[s, d, g]), t0 + float(tl.finish[s, d, g]))
                    ev.append({
                        "name": f"{name}{k}{f'.{c}' if w.vp > 1 else ''} cp{int(w.table.size[g])}", "cat": cat,
                        "ph": "X", "pid": p, "tid": r, "ts": ts, "dur": dur,
                        "args": {"step": k, "chunk": c, "cp": int(w.table.size[g]), "group_start": int(w.table.start[g]),
                                 "local_tokens": float(w.local_tokens[g]), "sequences": int(w.table.n_seqs[g]),
                                 "cp_exposed_ms": float(cpx[p, g]) / w.vp * 1e3},
                    })
            spans = (("grad reduce-scatter (exposed)", "grad_sync", tl.bwd_end_s[p], tl.reduce_scatter_end_s[p]),
                     ("optimizer step", "optimizer", tl.reduce_scatter_end_s[p], tl.optimizer_end_s[p]),
                     ("param all-gather", "param_gather", tl.optimizer_end_s[p], tl.stage_end_s[p]))
            for name, cat, a, b in spans:
                if b > a:
                    ts, dur = _span(t0 + float(a), t0 + float(b))
                    ev.append({"name": name, "cat": cat, "ph": "X", "pid": p, "tid": r, "ts": ts, "dur": dur, "args": {}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"generator": "dcpsim", "tracks": len(tracks), "stages": pp, "ranks_per_stage": R}}


def write_chrome_trace(records: list[IterationRecord], path: str | Path, topology: Topology, *,
                       max_tracks: int = 64) -> Path:
    """Write :func:`chrome_trace` as JSON to ``path``; return the path."""
    from dcpsim.outdir import write_text

    return write_text(path, json.dumps(chrome_trace(records, topology, max_tracks=max_tracks), separators=(",", ":")))
