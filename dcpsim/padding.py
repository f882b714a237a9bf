"""The padding rule of context parallelism: the one place it is written.

A sequence trained on a group of ``c > 1`` CP ranks is split into ``2c``
chunks (the load-balanced causal split: rank ``i`` holds chunks ``i`` and
``2c−1−i``), so its length is padded up to a multiple of ``2c`` and each rank
holds ``2·ceil(L/2c)`` tokens; on one rank it is not padded. Every layer that
counts tokens per rank (the cost model, the policies, plan validation, the
memory check, export) calls this module.

``factor`` multiplies the multiple (``2c·factor``), so a caller can express a
coarser rule without a second copy: Megatron's dynamic-CP packing pads each
sample to ``2·DP·CP·(TP if sequence parallel)``, i.e. ``factor = DP·TP`` on a
``c = CP`` group. Today every caller uses ``factor = 1`` (the ring rule).
"""

from __future__ import annotations

import numpy as np

__all__ = ["max_length_for_tokens", "pad_multiple", "padded_lengths", "per_rank_tokens", "per_rank_tokens_int"]


def pad_multiple(c, factor: int = 1):
    """Multiple a sequence's length is padded to on a ``c``-rank group (tokens): ``2c·factor``, or 1 for ``c = 1``.

    Broadcasts over arrays of ``c`` (int64 out) and returns a Python int for ints.
    """
    if isinstance(c, (int, np.integer)):
        return 1 if c <= 1 else 2 * int(c) * int(factor)
    c = np.asarray(c, dtype=np.int64)
    return np.where(c > 1, 2 * c * int(factor), 1)


def padded_lengths(lengths, c, factor: int = 1) -> np.ndarray:
    """Padded length (tokens, int64) of each sequence on a ``c``-rank group; broadcasts ``lengths`` against ``c``."""
    L = np.asarray(lengths, dtype=np.int64)
    m = pad_multiple(np.asarray(c, dtype=np.int64), factor)
    if _powers_of_two(m):  # the same numbers by bit masks (integer division is numpy's slowest integer op)
        return (L + (m - 1)) & -m
    return -(-L // m) * m


def _powers_of_two(x: np.ndarray) -> bool:
    """Whether every entry of the int64 array ``x`` is a positive power of two."""
    return bool(((x > 0) & ((x & (x - 1)) == 0)).all())


def per_rank_tokens(lengths, c, factor: int = 1) -> np.ndarray:
    """Tokens one rank of a ``c``-rank group holds for each sequence (int64, padding included).

    ``padded_lengths / c``: ``2·ceil(L/2c)`` for ``c > 1``, ``L`` on one rank.
    Broadcasts ``lengths`` against ``c``.
    """
    c = np.maximum(np.asarray(c, dtype=np.int64), 1)
    padded = padded_lengths(lengths, c, factor)
    if _powers_of_two(c):  # exact: log2 of a power of two below 2**63 is exact in float64
        return padded >> np.log2(c.astype(np.float64)).astype(np.int64)
    return padded // c


def per_rank_tokens_int(length: int, c: int, factor: int = 1) -> int:
    """:func:`per_rank_tokens` of one sequence on Python ints (for per-sequence loops, where numpy's overhead dominates)."""
    if c <= 1:
        return length
    m = 2 * c * factor
    return -(-length // m) * m // c


def max_length_for_tokens(tokens_per_rank: int, c: int, factor: int = 1) -> int:
    """Longest sequence (tokens) whose share on a ``c``-rank group is at most ``tokens_per_rank`` (inverse of the rule)."""
    if c <= 1:
        return tokens_per_rank
    m = 2 * c * factor
    return m * (tokens_per_rank * c // m)
