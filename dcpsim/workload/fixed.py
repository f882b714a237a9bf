"""Fixed-length pre-training data: every sequence (window) holds exactly ``seq_len`` tokens.

This is how Megatron-LM / NeMo pre-train: documents are concatenated and cut
into windows of ``--seq-length`` tokens; a microbatch is ``--micro-batch-size``
windows; a DP rank runs ``gbs / (dp * mbs)`` microbatches per iteration.

Two attention modes:

* full window (``documents=None``, Megatron's default causal mask): each window
  is one causal sequence of ``seq_len`` tokens;
* per document (``documents`` a length distribution; Megatron's THD /
  ``reset_attention_mask`` style): documents drawn from the distribution are
  concatenated and cut at window boundaries (a document that crosses a
  boundary is split, its remainder opens the next window), and attention is
  causal within each piece.

:meth:`FixedLength.sample_windows` returns the attention blocks (lengths in
tokens) and the window each one belongs to; the static packing path
(:func:`dcpsim.policies.static.window_plan`) puts ``mbs`` whole windows into
each microbatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.errors import ConfigError
from dcpsim.workload.distributions import LengthDistribution

FIXED = "fixed"
"""The workload name that selects fixed-length windows (``[workload] name = "fixed"``)."""


@dataclass(frozen=True)
class FixedLength:
    """Windows of ``seq_len`` tokens; ``documents`` (optional) splits each into causal documents."""

    seq_len: int
    documents: LengthDistribution | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, (int, np.integer)) or self.seq_len < 1:
            raise ConfigError("workload.seq_len", self.seq_len, "a positive number of tokens")
        if self.documents is not None and not isinstance(self.documents, LengthDistribution):
            raise ConfigError("workload.documents", self.documents, "a length distribution (see get_workload) or None")

    @property
    def per_document(self) -> bool:
        return self.documents is not None

    def sample_windows(self, n_windows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(lengths, window)``: attention-block lengths (int64 tokens) and the window index of each.

        Full-window mode returns ``n_windows`` blocks of ``seq_len`` (no random
        draw). Per-document mode draws documents until ``n_windows * seq_len``
        tokens are covered and cuts them at the window boundaries; the blocks of
        window ``k`` sum to exactly ``seq_len``.
        """
        if isinstance(n_windows, bool) or not isinstance(n_windows, (int, np.integer)) or n_windows < 1:
            raise ConfigError("workload.gbs", n_windows, "a positive number of sequences")
        L = int(self.seq_len)
        if self.documents is None:
            return np.full(n_windows, L, dtype=np.int64), np.arange(n_windows, dtype=np.int64)
        total = n_windows * L
        mean = self.documents.mean_estimate()
        chunk = max(64, int(total / mean * 1.2) + 1) if mean and np.isfinite(mean) and mean > 0 else 1024
        docs: list[np.ndarray] = []
        covered = 0
        while covered < total:
            d = self.documents.sample(chunk, rng)
            docs.append(d)
            covered += int(d.sum())
        ends = np.cumsum(np.concatenate(docs))
        ends = ends[: int(np.searchsorted(ends, total)) + 1]
        cuts = np.union1d(np.minimum(ends, total), np.arange(1, n_windows + 1, dtype=np.int64) * L)
        starts = np.concatenate(([0], cuts[:-1]))
        lengths = (cuts - starts).astype(np.int64)
        return lengths, (starts // L).astype(np.int64)

    def to_dict(self) -> dict:
        d: dict = {"name": FIXED, "seq_len": int(self.seq_len)}
        if self.documents is not None:
            d["documents"] = self.documents.to_dict()
        return d


def microbatches_per_replica(gbs: int, dp: int, mbs: int) -> int:
    """Megatron's number of microbatches per DP rank, ``gbs / (dp * mbs)``; ConfigError unless it divides."""
    if gbs % (dp * mbs):
        raise ConfigError("workload.gbs", gbs, f"a multiple of dp*mbs = {dp}*{mbs} = {dp * mbs} (Megatron's rule)")
    return gbs // (dp * mbs)


def fixed_from_config(workload) -> FixedLength:
    """The :class:`FixedLength` of a config's ``[workload]`` section (``name = "fixed"``)."""
    docs = None
    if workload.documents is not None:
        from dcpsim.workload.presets import get_workload

        docs = get_workload(workload.documents)
    return FixedLength(int(workload.seq_len), docs)
