"""Bounded work: size estimates that stop a command before it starts something huge by accident.

A command whose work grows with an input (samples drawn, runs in a sweep)
estimates the size first; above a threshold it stops with one line that
gives the estimate, unless the user confirmed with ``--yes``. The thresholds
are deliberately generous: the usual large job runs without a flag.
"""

from __future__ import annotations

from dcpsim.errors import ConfigError

__all__ = ["MAX_GBS", "MAX_SAMPLES", "MAX_SWEEP_RUNS", "SAMPLE_BYTES", "SWEEP_RUN_BYTES", "SWEEP_RUN_PREP_S", "require_confirmation"]

MAX_GBS = 1_000_000
"""Sequences in one global batch (``workload.gbs``), a hard bound: 64M tokens of 256-token sequences is 262,144;
a batch of 10^8 sequences would need tens of GB before the first iteration (it ended in MemoryError)."""
MAX_SAMPLES = 20_000_000
"""Sequence lengths drawn by ``workload show`` without ``--yes``."""
SAMPLE_BYTES = 48
"""Approximate peak memory per drawn length (int64 lengths plus float draws and the sort for percentiles), bytes."""
MAX_SWEEP_RUNS = 100_000
"""Runs in one sweep without ``--yes``."""
SWEEP_RUN_BYTES = 10_000
"""Approximate memory per run of a sweep before the first run (resolved configuration and its id), bytes."""
SWEEP_RUN_PREP_S = 1e-4
"""Approximate preparation time per run of a sweep before the first run starts, seconds."""


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def require_confirmation(count: int, limit: int, *, field: str, what: str, bytes_each: float,
                         seconds_each: float | None = None, confirmed: bool = False, flag: str = "--yes") -> None:
    """Raise ConfigError (one line, exit 2) when ``count`` exceeds ``limit`` and the user did not confirm.

    The message states the estimate (memory ``count * bytes_each``, and time when
    ``seconds_each`` is given) and the flag that confirms it.
    """
    if count <= limit or confirmed:
        return
    est = f"about {_human_bytes(count * bytes_each)} of memory"
    if seconds_each is not None:
        est += f" and {count * seconds_each:,.0f} s before the first result"
    raise ConfigError(field, count, f"at most {limit:,} {what} without {flag} ({count:,} {what} need {est}; "
                      f"pass {flag} to go ahead)")
