"""``dynamic-solver``'s runs of equal sequences that each open a group: the *open* path of
:class:`~dcpsim.policies.solver_placer._Placer`.

Longest first, the long sequences of a placement each open a group on free ranks (no open group has room under
its step's height for them), and many come in runs of one length: at 65,536 GPUs (one iteration, Llama-13B,
pp 8, cp 8) about 8,700 of the full placement's 14,200 new groups open in runs of 29 or more. Each such
sequence costs a full decision (the new-group options, the join search's cut test, the comparisons); here the
same decisions are made where they provably open the next free aligned slice of the same step
(:meth:`_Open._open_run`). Times in seconds.
"""

from __future__ import annotations


class _Open:
    """The open path of :class:`~dcpsim.policies.solver_placer._Placer` (a mixin: it uses the placer's state)."""

    opens = True  # :meth:`_open_run` after a decision that opened a group adding nothing (False: the reference)

    def _open_run(self, opt: tuple, ids: list[int], pos: int, u: int, k: int) -> int:
        """Sequence ``ids[pos - 1]`` (distinct length ``u``, size index ``k``) has just opened a group by its
        decision's first new-group option ``opt`` (the first open step with a free aligned slice of the size,
        adding nothing: its time ``a1`` at most the step's height), the option that won: open the next
        sequences of the same length each on the next free aligned slice of that step, while the decision is
        provably that; return the position of the first one left to the full decision.

        Why it is the full decision, where the placer does not track the height limit's effect: the opened
        groups (each of time ``a1``, on that step, in one cell) change no step height, ``gmax`` or other step's
        free ranks, so the next sequence's new-group options are the first one's (the step's next slice, where
        it leaves the domain as the first did: the same time) and so is the new-step option. Its joins are the
        first one's plus those into the opened groups, each raising the step by ``d`` (the new time
        ``a1 + a1``); where ``d > 2e-7·(gmax + a1)`` (or they have no room for it) none is a hit of the join
        searches at the zero or the cut tolerance (``1e-8·(gmax + a1)``), so those searches find what they found
        for the first sequence; and the least-increase search either finds it too (its threshold and hits
        unchanged) or returns a join whose increase exceeds ``1e-7·(gmax + a1)``, which the option beats by
        more than :func:`_better`'s tolerance (``1e-9·(gmax + a1 +`` its new time, at most ``gmax`` plus about
        twice its increase``)``). So the join the option beat, or one it beats, is compared with the same
        options in the same order, and the option wins again. A step without a free slice of the size, or whose
        next slice differs in leaving the domain, ends the run.
        """
        if self.track:
            return pos
        _, st, _, b = opt[4]
        trow, tokrow = self._rows[0][u], self._rows[1][u]
        a1, tok, s_k, gmax = trow[2 * k + b], tokrow[k], self.S[st], self.gmax
        if self.cap - tok >= tok and not self._delta(s_k, a1 + a1) > 2e-7 * (gmax + a1):
            return pos  # a join into an opened group may count: the full decision
        c, end = self.sizes[k], self._run_end[pos - 1]
        n_free, free_start, spans, open_group = self.n_free, self._free_start, self._spans, self._open_group
        while pos < end and n_free[st]:
            start = free_start(st, c)
            if start < 0 or spans(start, c) != b:
                break
            open_group(("new", st, start, b), ids[pos], k, trow, tokrow)
            pos += 1
        # ``_was_cut`` stays: the last one's join search ends as the first one's did (the same searches' results),
        # so the next decision tries :meth:`_cut_none` first where the per-sequence path would
        return pos
