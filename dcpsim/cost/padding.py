"""The padding rule of context parallelism lives in :mod:`dcpsim.padding` (the bottom layer, so that the run
configuration reads it without importing the cost model); its names stay importable from here."""

from dcpsim.padding import (
    max_length_for_tokens,
    pad_multiple,
    padded_lengths,
    per_rank_tokens,
    per_rank_tokens_int,
)

__all__ = ["max_length_for_tokens", "pad_multiple", "padded_lengths", "per_rank_tokens", "per_rank_tokens_int"]
