"""What fits where: checks of a policy's inputs and the CP sizes that can hold each sequence.

The lowest module of :mod:`dcpsim.policies` after :mod:`~dcpsim.policies.plan`:
the lower-bound evaluator and every policy use it, and it imports neither.
"""

from __future__ import annotations

import numpy as np

from dcpsim.cost.padding import per_rank_tokens
from dcpsim.errors import ConfigError, InfeasibleError
from dcpsim.policies.plan import Layout
from dcpsim.units import check_token_counts

__all__ = ["check_layout_cost", "check_lengths", "dynamic_fit", "dynamic_sizes", "raise_too_long", "smallest_fitting_size"]


def check_lengths(lengths, field: str = "lengths") -> np.ndarray:
    """Lengths as a 1-D int64 array of positive token counts (ConfigError naming ``field`` otherwise;
    :func:`dcpsim.units.check_token_counts`)."""
    return check_token_counts(lengths, field)


def check_layout_cost(layout: Layout, cost) -> None:
    """The cost model must describe the layout's TP and PP (its times are per stage)."""
    if not isinstance(layout, Layout):
        raise ConfigError("layout", type(layout).__name__, "a dcpsim.policies.Layout")
    for f in ("tp", "pp"):
        if getattr(cost, f) != getattr(layout, f):
            raise ConfigError(f"cost.{f}", getattr(cost, f), f"the layout's {f} ({getattr(layout, f)})")


def dynamic_sizes(layout: Layout) -> np.ndarray:
    """CP group sizes a dynamic plan may use: powers of two from min_cp to max_dynamic_cp."""
    out = []
    c = layout.min_cp
    while c <= layout.max_dynamic_cp:
        out.append(c)
        c *= 2
    return np.asarray(out, dtype=np.int64)


def smallest_fitting_size(lengths: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Index into ``sizes`` (ascending) of the smallest group that holds each sequence; -1 if none."""
    fits = per_rank_tokens(lengths[None, :], sizes[:, None]) <= capacity  # (n_sizes, n)
    idx = np.argmax(fits, axis=0)
    return np.where(fits.any(axis=0), idx, -1)


def dynamic_fit(lengths: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, need): the dynamic CP sizes and, per sequence, the index of the smallest that holds it.

    Raises :class:`InfeasibleError` for a sequence that no dynamic group holds.
    """
    sizes = dynamic_sizes(layout)
    M = layout.max_tokens_per_rank
    need = smallest_fitting_size(lengths, sizes, M)
    if (need < 0).any():
        raise_too_long(lengths, need < 0, int(sizes[-1]), M, "dynamic")
    return sizes, need


def raise_too_long(lengths: np.ndarray, bad: np.ndarray, largest: int, capacity: int, what: str) -> None:
    """Raise InfeasibleError for the longest of the sequences flagged in ``bad``."""
    ids = np.nonzero(bad)[0]
    i = int(ids[np.argmax(lengths[ids])])
    raise InfeasibleError(
        "capacity",
        f"sequence {i} has {int(lengths[i])} tokens; the largest {what + ' ' if what else ''}CP group ({largest} ranks x "
        f"{capacity} tokens per rank, each sequence padded to a multiple of 2*cp) cannot hold it "
        f"({int(bad.sum())} sequence(s) too long)",
    )
