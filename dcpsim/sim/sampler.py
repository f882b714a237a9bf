"""The forked prefetching sampler of Megatron-LM pull request #2959 (``sim.planning = "sampler"``).

With ``--async-hybrid-context-parallel-scheduler`` the plan of a global batch is made by
``MegatronSFTPrefetchDPBalancedSampler`` (``megatron/legacy/data/data_samplers.py`` at
``refs/pull/2959/head``): a process forked at start-up plans one batch at a time; the sampler asks
it for batch j+1 (``queue1.put``) the moment it *receives* the plan of batch j (``queue2.get``), and
it receives a plan only when the training process's data loader needs an index of that batch. The
sampler runs in the training process, pulled by PyTorch's ``DataLoader``: ``num_workers ×
prefetch_factor`` indices (one per microbatch) are requested when the iterator is created and one
more after each microbatch the trainer takes; the trainer takes all microbatches of an iteration at
its start (``wrap_dataloader``'s ``only_packing_no_scheduling`` branch reads the count from the first
and pulls the rest). A ``queue2.get`` that waits blocks the training process: that wait is the
iteration's planning stall.

So at the start ``S_k`` of iteration ``k`` the sampler must reach index ``cum_k + depth`` (``cum_k``:
microbatches of batches ``0..k``; ``depth``: the prefetch), needing the plans of every batch up to
the one holding index ``cum_k + depth - 1``. Plan ``j`` arrives at
``R_j = max(t, R_{j-1} + p_j)`` (``p_j``: its planning time, ``t``: when it is needed). When a batch
has fewer microbatches than ``depth`` the sampler needs the plan *after* next at the start of an
iteration, and the planner gets no time at all to hide it.

Start-up: the iterator is built during set-up, well before the first iteration, so the plans iteration 0
needs are taken as made before training (not timed, like the rest of set-up) and the planner's next request
is issued at time 0: the first iteration never stalls, later ones show the steady state.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["PrefetchSampler"]


class PrefetchSampler:
    """Planning stalls of the forked prefetching sampler, one iteration at a time.

    Args:
        depth: indices (microbatches) the data loader prefetches (``num_workers × prefetch_factor``).
        batch: ``j -> (microbatches, planning seconds)`` of global batch ``j`` (called in order of ``j``,
            possibly beyond the simulated iterations: the sampler looks ahead).
    """

    def __init__(self, depth: int, batch: Callable[[int], tuple[int, float]]) -> None:
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.depth = int(depth)
        self._batch = batch
        self._n: list[int] = []  # microbatches of each batch seen so far
        self._cum: list[int] = []  # cumulative microbatches through batch j
        self._received = -1  # last plan received
        self._r_last = 0.0  # when it was received
        self._started = False

    def _info(self, j: int) -> tuple[int, float]:
        n, p = self._batch(j)
        return max(int(n), 1), max(float(p), 0.0)

    def _cum_through(self, j: int) -> int:
        while len(self._cum) <= j:
            n, _ = self._info(len(self._cum))
            self._n.append(n)
            self._cum.append((self._cum[-1] if self._cum else 0) + n)
        return self._cum[j]

    def _batch_of(self, index: int) -> int:
        """The batch holding sampler index ``index`` (0-based)."""
        j = 0
        while self._cum_through(j) <= index:
            j += 1
        return j

    def _start(self) -> None:
        """Set-up: every plan iteration 0 needs is made before training; the next request goes out at time 0."""
        self._received = self._batch_of(self._cum_through(0) + self.depth - 1)
        self._r_last = 0.0
        self._started = True

    def stall(self, k: int, start_s: float) -> float:
        """Seconds iteration ``k`` (starting at ``start_s`` on the training clock) waits for plans."""
        if not self._started:
            self._start()
        need = self._batch_of(self._cum_through(k) + self.depth - 1)
        t = float(start_s)
        while self._received < need:
            j = self._received + 1
            _, p = self._info(j)
            t = max(t, self._r_last + p)
            self._received, self._r_last = j, t
        return t - float(start_s)
