"""Memory-only check of the published layouts: does dcpsim's memory model let each published run fit?

Every published run ran, so each row whose peak exceeds the usable HBM is a gap in the memory model (or a
setting the source does not publish). This needs no simulation: a fixed-length row's microbatch holds
``mbs × seq_len / cp`` tokens per rank, the same local count the replay's packs hold, so the peak is
:meth:`dcpsim.cost.model.CostModel.peak_memory_bytes` at that count (what ``dcpsim validate --published``
reports as ``peak_memory_gib``). ::

    from dcpsim.published.memory import memory_verdicts
    rejected = [v for v in memory_verdicts() if not v.fits]
"""

from __future__ import annotations

from dataclasses import dataclass

from dcpsim.published.suite import Suite, load_suite, row_config

GIB = 2.0**30


@dataclass(frozen=True)
class MemoryVerdict:
    """One published row under the memory model (bytes per GPU)."""

    row: int
    model: str
    layout: str
    precision: str
    peak_bytes: float
    limit_bytes: float
    states_bytes: float

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.limit_bytes

    def line(self) -> str:
        mark = "fits" if self.fits else "REJECTED"
        return (f"row {self.row:>2} {self.model:<18} {self.layout:<28} {self.precision:<5} "
                f"peak {self.peak_bytes / GIB:6.1f} GiB (states {self.states_bytes / GIB:5.1f}) "
                f"limit {self.limit_bytes / GIB:5.1f} GiB  {mark}")


def memory_verdicts(suite: Suite | None = None, rows: list[int] | None = None) -> list[MemoryVerdict]:
    """The memory verdict of every expressible published row (or of ``rows``), in row order."""
    from dcpsim.run.single import build_cost_model, microbatch_sum_sq

    suite = suite or load_suite()
    out = []
    for row in suite.rows:
        if rows is not None and row.id not in rows:
            continue
        rc = row_config(row)
        if rc.config is None:
            continue
        cfg = rc.config
        cost = build_cost_model(cfg)
        local = cfg.parallel.mbs * cfg.workload.seq_len / cfg.parallel.cp
        peak, states = (float(x) for x in cost.peak_memory_bytes([local, 0.0], [microbatch_sum_sq(cfg), 0.0]))
        out.append(MemoryVerdict(row.id, row.model, row.layout, row.precision, peak, cost.memory_limit_bytes, states))
    return out


if __name__ == "__main__":  # python -m dcpsim.published.memory
    verdicts = memory_verdicts()
    for v in verdicts:
        print(v.line())
    print(f"{sum(not v.fits for v in verdicts)} of {len(verdicts)} published layouts rejected by the memory model")
