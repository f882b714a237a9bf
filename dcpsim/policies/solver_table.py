"""``dynamic-solver``'s per-length rows (:class:`_Table`), shared by every candidate's
:class:`~dcpsim.policies.solver_placer._Placer`. Times in seconds, tokens per rank."""

from __future__ import annotations

import numpy as np

from dcpsim.policies.costs import SeqCosts


class _Table:
    """Per distinct length, shared by every candidate: time row (column = size index·2 + span), token row,
    and the codes a sequence may join (size index at least its need) by increasing GPU-seconds."""

    def __init__(self, lengths: np.ndarray, sc: SeqCosts, need: np.ndarray) -> None:
        _, first, inv = sc.distinct() if lengths is sc.lengths else np.unique(lengths, return_index=True,
                                                                              return_inverse=True)
        self.inv = np.asarray(inv, dtype=np.int64)  # each sequence's distinct index
        self.uid: list[int] = self.inv.tolist()
        if lengths is sc.lengths and sc.distinct_table:  # sc's own distinct lengths: its per-length table
            t = sc.time_u.reshape(-1, first.size).T  # (distinct, ns*2)
            tok = sc.tok_u.T
        else:
            t = sc.time_s.reshape(-1, lengths.size)[:, first].T
            tok = sc.tokens[:, first].T
        self.time_rows: list[list[float]] = t.tolist()
        self.tok_rows: list[list[int]] = tok.tolist()
        code_size = np.repeat(sc.sizes, 2)
        gpu = np.where(np.arange(t.shape[1])[None, :] // 2 >= need[first][:, None], code_size[None, :] * t, np.inf)
        by_gpu = np.argsort(gpu, axis=1, kind="stable")
        # the infinite (excluded) codes sort last: -1 there; lengths with the same codes in the same order share
        # one row (``fam_rows[fam_id[u]]``)
        key = np.where(np.isfinite(np.take_along_axis(gpu, by_gpu, axis=1)), by_gpu, -1).astype(np.int8)
        w, raw = key.shape[1], key.tobytes()
        seen: dict[bytes, int] = {}
        self.fam_id: list[int] = [seen.setdefault(raw[j:j + w], len(seen)) for j in range(0, len(raw), w)]
        self.fam_rows: list[list[int]] = [[c for c in row if c >= 0] for row in
                                          np.frombuffer(b"".join(seen), dtype=np.int8).reshape(-1, w).tolist()]
        # per set of chosen sizes (bit mask of codes), each length's codes of those sizes
        self.fams: dict[int, list[list[int]]] = {}
        # per size index, (the time table, its distinct lengths' time ranks) for :meth:`_Placer._order`
        self.ranks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
