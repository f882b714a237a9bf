"""``dynamic-pr2959``'s candidate: one microbatch count ``m`` of the search, built phase by phase.

The phases (long sizes, long placement, normal filling, slot assignment, scoring, steps) are described
in :mod:`dcpsim.policies.pr2959`'s docstring; FLOPs are forward FLOPs of one pipeline stage.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from dcpsim.cost.padding import per_rank_tokens, per_rank_tokens_int
from dcpsim.policies.plan import Group, Layout, PlanArrays, Step, steps_of_arrays
from dcpsim.policies.pr2959_bulk import add_in_order, place_leftovers
from dcpsim.policies.pr2959_fillers import ClassFiller, _rank_in_class, fill_long_groups, fill_one_by_one
from dcpsim.policies.pr2959_model import (
    NORMAL_BWD_FACTOR,
    _nearest_pow2_array,
    _pow2_floor,
    nearest_pow2,
    pipeline_ratio,
    pr_pipeline_makespan,
)
from dcpsim.policies.pr2959_tables import (
    _bulk_deal,
    _bulk_lowest,
    _entry_members,
    _group_sums,
    _long_blocks,
    _merge_runs,
    stable_argsort,
    stable_order,
)


class _Batch:
    """Per-batch tables shared by the candidates: lengths, FLOPs and the code's sample order."""

    def __init__(self, lengths: np.ndarray, layout: Layout, fwd: np.ndarray, bwd: np.ndarray,
                 max_cp: int | None = None) -> None:
        self.L = np.asarray(lengths, dtype=np.int64)
        self.layout = layout
        self.f, self.b = fwd, bwd
        self.n = int(self.L.size)
        self.M = layout.max_tokens_per_rank
        self.u = layout.min_cp
        self.K = layout.ranks_per_stage // self.u
        top = layout.max_dynamic_cp if max_cp is None else max(min(max_cp, layout.max_dynamic_cp), self.u)
        self.cmax_slots = max(1, top // self.u)
        # the code sorts the batch longest first (stable); every later order is a stable sort of this one
        self.order = stable_argsort(-self.L)
        self.tok1 = self.L if self.u == 1 else per_rank_tokens(self.L, self.u)  # tokens per rank on one slot
        self.tok1_is_length = self.u == 1 or bool(np.array_equal(self.tok1, self.L))
        self._order_lists: tuple[list[int], list[int], list[float]] | None = None
        self._positions: list[int] | None = None
        self._classes: tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None = None

    def classes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The negated forward FLOPs and lengths of the samples in the code's order, the first position of each
        run of equal (FLOPs, length) in it, and whether the FLOPs never rise along it (made once)."""
        if self._classes is None:
            negf, lengths = -self.f[self.order], self.L[self.order]
            change = (negf[1:] != negf[:-1]) | (lengths[1:] != lengths[:-1])
            self._classes = (negf, lengths, np.flatnonzero(np.concatenate([[True], change])),
                             bool(np.all(negf[1:] >= negf[:-1])))
        return self._classes

    def order_lists(self) -> tuple[list[int], list[int], list[float]]:
        """The ids, lengths and negated forward FLOPs of the samples in the code's order, as lists (made once)."""
        if self._order_lists is None:
            o = self.order
            self._order_lists = o.tolist(), self.L[o].tolist(), (-self.f[o]).tolist()
        return self._order_lists

    def positions(self) -> list[int]:
        """``[0, 1, ..., n]`` (made once; each candidate's pool copies its head)."""
        if self._positions is None:
            self._positions = list(range(self.n + 1))
        return self._positions

    def tokens(self, i: int, slots: int) -> int:
        """Tokens per rank of sample ``i`` on a group of ``slots`` slots (padding counted)."""
        return per_rank_tokens_int(int(self.L[i]), slots * self.u)

    def need_slots(self, i: int) -> int:
        """Smallest power-of-two slot count that holds sample ``i`` within ``M`` tokens per rank."""
        cs = 1
        while cs < self.cmax_slots and self.tokens(i, cs) > self.M:
            cs *= 2
        return cs


@dataclass
class _LongGroup:
    start: int  # first slot
    slots: int
    members: list[int]
    fwd: float  # the solver's forward FLOPs of the whole group
    bwd: float  # the solver's backward estimate of the whole group
    tokens: int  # per rank


@dataclass
class _Candidate:
    """One ``m`` of the search, built phase by phase (see the module docstring)."""

    batch: _Batch
    m: int
    long_factor: float
    fill_slack: float
    bucket_target: str
    safe: bool
    valid: bool = True
    reason: str = ""
    makespan: float = math.inf
    peak_bytes: float = 0.0
    memory_ok: bool = True
    max_tokens: int = 0
    misaligned: int = 0
    overflow_blocks: int = 0
    clamped: int = 0
    n_leftovers: int = 0
    long_ids: list[int] = field(default_factory=list)
    groups: list[_LongGroup] = field(default_factory=list)

    # ------------------------------------------------------------ phases
    def build(self) -> None:
        bt, lay = self.batch, self.batch.layout
        self.n_b = lay.pp * self.m * bt.K
        self.mu = float(bt.f.sum()) / self.n_b
        bubble = (lay.pp * self.m + lay.pp - 1) / (lay.pp * self.m)
        self.tau = self.mu * {"mean": 1.0, "iteration": bubble, "timeline": 1.0 / bubble}[self.bucket_target]
        negf, _, _, falls = bt.classes()
        thr = -(self.long_factor * self.mu)
        if falls and not self.safe and thr == thr:  # f > lf·μ on negated FLOPs that never fall: a prefix
            n_long = int(np.searchsorted(negf, thr, side="left"))
            self._suffix = n_long
        else:
            is_long = negf < thr  # f > lf·μ, on the order's negated FLOPs
            if self.safe:  # safe mode: a sample one slot cannot hold is long
                is_long |= bt.tok1[bt.order] > bt.M
            n_long = int(np.count_nonzero(is_long))
            # the long samples are the first ones of the order (FLOPs and tokens grow with the length): the
            # normal ones are a suffix, whose lists are slices of the batch's
            self._suffix = n_long if not is_long[n_long:].any() else None
        if self._suffix is not None:
            self._long_arr, self.normal = bt.order[:n_long], bt.order[n_long:]
        else:
            self._long_arr, self.normal = bt.order[is_long], bt.order[~is_long]
        self.long_ids = self._long_arr.tolist()  # ids; the array for the phases to index with, ``normal`` largest first
        sizes = self.long_sizes()
        self.place_long(sizes)
        self.fill_normal(self.n_b - int(sizes.sum()))
        if self.valid:
            self.assign_slots()
        if self.valid:
            self.score()

    def _reject(self, reason: str) -> None:
        if self.valid:
            self.valid, self.reason = False, reason

    def long_sizes(self) -> np.ndarray:
        """Phase 1: slots per long sample (``nearest_pow2(ceil(f/τ))``, capped as the code caps it).

        Outside safe mode the sizes come from arrays as far as the cap by the buckets left (one per long
        sample still to come) does not bind, which is every sample in practice; from the first that it
        would bind on, sample by sample.
        """
        bt = self.batch
        left = self.n_b
        out: list[int] = []
        n_long = len(self.long_ids)
        start = 0
        q = np.ceil(bt.f[self._long_arr] / self.tau)  # math.ceil(f / τ), exactly
        if n_long and not self.safe and q.max() < 2.0**52:  # whole numbers exact in float64 and int64
            c = np.minimum(np.minimum(_nearest_pow2_array(q), bt.cmax_slots), bt.K)
            c2 = _pow2_floor(np.maximum(c, 1))
            bound = self.n_b - (np.cumsum(c2) - c2) - (n_long - 1 - np.arange(n_long))
            over = np.flatnonzero(c > bound)
            start = n_long if over.size == 0 else int(over[0])
            head = c2[:start]
            self.clamped += int(np.count_nonzero(head != c[:start]))
            left -= int(head.sum())
        else:
            head = np.zeros(0, dtype=np.int64)
        for idx in range(start, n_long):
            i = self.long_ids[idx]
            want = nearest_pow2(math.ceil(float(bt.f[i]) / self.tau))
            c = min(want, bt.cmax_slots, bt.K, left - (n_long - 1 - idx))
            c2 = 1 << (max(c, 1).bit_length() - 1)  # dcpsim's groups are powers of two, at least one slot
            if self.safe:
                c2 = max(c2, bt.need_slots(i))
            self.clamped += c2 != c
            left -= c2
            out.append(c2)
        return np.concatenate([head, np.asarray(out, dtype=np.int64)]).astype(np.int64, copy=False)

    def place_long(self, sizes: np.ndarray) -> None:
        """Phase 2: an aligned block per long sample (most buckets left), filled with normal samples.

        Each long sample's group takes normal samples, largest first, under the code's three limits; it
        ends with its tokens per rank and the solver's FLOPs of the group. Outside safe mode the pool's
        samples of one length are one class (:mod:`dcpsim.policies.pr2959_fillers`: many groups at once
        where no class runs out); in safe mode, where a sample can be skipped for its tokens, one sample
        at a time (:func:`~dcpsim.policies.pr2959_fillers.fill_one_by_one`). :meth:`_group_table` then sums each group's FLOPs and
        tokens as the code adds them.
        """
        bt = self.batch
        blocks, self.overflow_blocks = _long_blocks(sizes, bt.K, bt.layout.pp * self.m)
        flag_all = self.n_b - int(sizes.sum()) <= 0
        total_num = bt.K * pipeline_ratio(self.m, bt.layout.pp)
        li = self._long_arr
        cs_a = sizes
        room_a = cs_a * self.tau - bt.f[li]  # c·τ − f, as the code computes it
        tok_a = per_rank_tokens(bt.L[li], cs_a * bt.u)  # the long sample's own tokens per rank
        if self._suffix is not None:  # the pool is a suffix of the code's order: its runs are the batch's
            negf, lengths, starts, falls = bt.classes()
            k = self._suffix
            negf, lengths = negf[k:], lengths[k:]
            starts = np.concatenate([[0] if negf.size else [], starts[np.searchsorted(starts, k, side="right"):] - k])
            starts = starts.astype(np.int64)
        else:
            negf, lengths, starts = -bt.f[self.normal], bt.L[self.normal], None
            falls = bool(np.all(negf[1:] >= negf[:-1]))
        if not self.safe and falls:  # the pool by FLOPs, largest first
            filler = ClassFiller((negf, lengths, starts), room_a, bt.L[li], bt.M * cs_a, self.fill_slack, total_num,
                                 flag_all)
            fill_long_groups(filler, li.size)
            removed, ends = filler.positions(), filler.ends_array()
        else:
            removed, ends = fill_one_by_one(self, room_a, tok_a, cs_a, flag_all, total_num)
        self._fillers = self.normal[removed]
        if removed.size:  # the samples left, with their lengths and negated FLOPs (read by fill_normal)
            keep = np.ones(self.normal.size, dtype=bool)
            keep[removed] = False
            self.normal, lengths, negf = self.normal[keep], lengths[keep], negf[keep]
        self._normal_lf = lengths, negf
        self._garr = self._group_table(li, cs_a, blocks * cs_a, tok_a,
                                       np.asarray(ends, dtype=np.int64))

    def _group_table(self, li: np.ndarray, cs_a: np.ndarray, starts: np.ndarray, tok_a: np.ndarray,
                     ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per long group (``li``: its long sample; fillers ``self._fillers[ends[g−1]:ends[g]]``): first slot,
        slots, the solver's forward FLOPs, backward estimate and tokens per rank (:func:`_group_sums`)."""
        self._gends = ends
        return (starts, cs_a, *_group_sums(self.batch, li, cs_a, tok_a, self._fillers, ends))

    def _long_groups(self) -> list[_LongGroup]:
        """The long groups as objects (made when the steps are laid out)."""
        if len(self.groups) != len(self.long_ids):
            starts, width, fwd, bwd, tokens = (a.tolist() for a in self._garr)
            fill, ends = self._fillers.tolist(), self._gends.tolist()
            self.groups = [_LongGroup(s, c, [i, *fill[a:b]], f, bw, t) for s, c, i, a, b, f, bw, t in
                           zip(starts, width, self.long_ids, [0, *ends][:len(ends)], ends, fwd, bwd, tokens, strict=True)]
        return self.groups

    def fill_normal(self, n_nb: int) -> None:
        """Phase 3: normal buckets, FLOPs-first under the mean-token target, then leftovers by tokens."""
        bt = self.batch
        if n_nb <= 0:
            if self.normal.size and not self.safe:
                self._reject("no normal bucket left for the normal samples")
            n_nb = 1 if self.normal.size else 0
        self.bf, self.bl = np.zeros(n_nb), np.zeros(n_nb, dtype=np.int64)
        self.seq: list[int] = []  # normal samples in the order they joined a bucket (an array once filled)
        self.dest: list[int] = []  # the bucket each joined
        self._head: list[tuple[np.ndarray, np.ndarray]] = []  # (samples, buckets) placed in bulk before ``seq``
        if self.normal.size:
            ids = self.normal
            Ls, negf = getattr(self, "_normal_lf", (None, None))
            if Ls is None or Ls.size != ids.size:
                Ls, negf = bt.L[ids], -bt.f[ids]
            T = float(Ls.sum()) / n_nb
            cap = bt.M if self.safe else math.inf
            left_a = self._lowest_flops_first(ids, T, cap, Ls, -negf)
            self.n_leftovers = int(left_a.size)
            if left_a.size:
                self._leftovers(left_a[stable_argsort(-bt.L[left_a])], T, cap)  # longest first, stable
        self.seq = np.concatenate([*(a for a, _ in self._head), np.array(self.seq, dtype=np.int64)]).astype(np.int64, copy=False)
        self.dest = np.concatenate([*(b for _, b in self._head), np.array(self.dest, dtype=np.int64)]).astype(np.int64, copy=False)
        # the code adds 2·f to a bucket's backward estimate with every f it adds to its forward; doubling
        # is exact in binary floating point, so those sums are exactly twice the forward sums
        self.bb = NORMAL_BWD_FACTOR * self.bf

    def _lowest_flops_first(self, ids: np.ndarray, T: float, cap: float, Ls: np.ndarray | None = None,
                            fs: np.ndarray | None = None) -> np.ndarray:
        """Each normal sample (largest first) to the bucket with the lowest forward FLOPs among those it
        keeps within ``T`` tokens (and ``cap`` tokens per rank), ties to the lowest bucket; returns the
        samples none takes.

        A bucket fits sample ``i`` when its tokens are at most ``lim_i = min(floor(T) − L_i, cap − t_i)``
        (integers), which only grows as the samples shrink. The samples no bucket can hold come first
        (leftovers), the next ones open the empty buckets, then :func:`_bulk_lowest` places runs of
        samples on the lightest buckets while provably the rule's choice, and :func:`_merge_runs` the
        rest, a run of equal samples at a time. ``Ls``, ``fs``: the samples' lengths and FLOPs when the caller has
        them.
        """
        bt, bf, bl = self.batch, self.bf, self.bl
        Ls = bt.L[ids] if Ls is None else Ls
        fs = np.asarray(bt.f[ids] if fs is None else fs, dtype=np.float64)  # read once: the phases below take slices
        lims = math.floor(T) - Ls
        if cap != math.inf:
            lims = np.minimum(lims, int(cap) - bt.tok1[ids])
        # samples no bucket can hold (lim < 0) come first: leftovers; then each of the next samples opens
        # the lowest empty bucket (FLOPs 0, below any other) while one is left
        n0 = int(np.searchsorted(lims, 0))
        left = ids[:n0]
        E = min(bf.size, ids.size - n0)
        first = ids[n0:n0 + E]
        bf[:E], bl[:E] = fs[n0:n0 + E], Ls[n0:n0 + E]
        self._head.append((first, np.arange(E)))
        z = n0 + E
        rest, rest_lims, fs, Ls = ids[z:], lims[z:], fs[z:], Ls[z:]
        done = self._bulk_lowest_flops(rest, rest_lims, fs, Ls)  # in runs while provably the same, then run by run
        rest, rest_lims = rest[done:], rest_lims[done:]
        dest = _merge_runs(bf, bl, fs[done:], np.asarray(Ls[done:], dtype=np.int64), np.asarray(rest_lims, dtype=np.int64))
        ok = dest >= 0
        self._head.append((rest[ok], dest[ok]))
        return np.concatenate([left, rest[~ok]]).astype(np.int64, copy=False)

    def _bulk_lowest_flops(self, ids: np.ndarray, lims: np.ndarray, fs: np.ndarray | None = None,
                           Ls: np.ndarray | None = None) -> int:
        """:meth:`_lowest_flops_first`'s placements in runs while provably its decision (:func:`_bulk_lowest`);
        returns how many of ``ids`` (their ``lims``; FLOPs ``fs`` and lengths ``Ls`` when the caller has them)
        were placed."""
        bt = self.batch
        if ids.size == 0 or not self.bf.size:
            return 0
        fs = np.asarray(bt.f[ids] if fs is None else fs, dtype=np.float64)
        Ls = np.asarray(bt.L[ids] if Ls is None else Ls, dtype=np.int64)
        pos, placed, self._hint = _bulk_lowest(self.bf, self.bl, fs, Ls, np.asarray(lims, dtype=np.int64))
        if pos:
            self._head.append((ids[:pos], placed))
        return pos

    def _leftovers(self, left_a: np.ndarray, T: float, cap: float) -> None:
        """Samples no bucket took (``left_a``, in order): to the bucket whose tokens end closest to ``T`` (safe
        mode: an extra bucket; :func:`~dcpsim.policies.pr2959_bulk.place_leftovers`). The buckets' FLOPs are
        added after, in the placing order (:func:`~dcpsim.policies.pr2959_bulk.add_in_order`: one addition per sample, as
        the code adds them)."""
        if not left_a.size:
            return
        bt = self.batch
        self.bl, seq_a, dest_a = place_leftovers(bt, self.bl, left_a, T, cap)
        if self.bl.size > self.bf.size:  # safe mode's extra buckets, from 0.0 as the code starts them
            self.bf = np.concatenate([self.bf, np.zeros(self.bl.size - self.bf.size)])
        self._head.append((seq_a, dest_a))
        add_in_order(self.bf, dest_a, bt.f[seq_a])

    def assign_slots(self) -> None:
        """Phase 4: long groups first on their blocks, then normal buckets (ascending FLOPs) to the lightest slot.

        Each slot's list is kept as a table: every entry's slot and code (bucket ``k``, or ``~g`` for long
        group ``g``) in the order the code appends them; an entry's position in its slot's list is how
        many entries of that slot come before it.
        """
        bt = self.batch
        slot, code, fsum = self._long_entries()
        places: list[np.ndarray] = [self._long_positions(slot)]
        dealt = self._deal_buckets(fsum, np.bincount(slot, minlength=bt.K).tolist(), bt.layout.pp * self.m, places)
        if dealt is None:
            return
        self._nlong = slot.size  # the long groups' entries come first, group after group, each from its first slot
        slot, code = np.concatenate([slot, dealt[0]]), np.concatenate([code, dealt[1]])
        if places[0] is not None:  # each entry's count on its slot before it, made along the way
            pos = np.concatenate(places).astype(np.int64, copy=False)
        else:
            order = stable_argsort(slot)
            counts = np.bincount(slot, minlength=bt.K)
            pos = np.empty_like(slot)
            pos[order] = np.arange(slot.size) - np.repeat(np.cumsum(counts) - counts, counts)
        self._table = slot, pos, code
        gtok, ntok = self._garr[4], self._normal_tokens()
        self.max_tokens = max(int(gtok.max()) if gtok.size else 0, int(ntok.max()) if ntok.size else 0)
        if self.max_tokens > bt.M:
            self._reject(f"a group holds {self.max_tokens} tokens per rank > max_tokens_per_rank {bt.M}")

    def _long_entries(self) -> tuple[np.ndarray, np.ndarray, list[float]]:
        """The long groups' entries of the slots' lists (slot and code ``~g``, in placement order) and each
        slot's forward FLOPs from them (each group's share added slot by slot in placement order, as the
        code adds them)."""
        K, ng = self.batch.K, len(self.long_ids)
        if not ng:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [0.0] * K
        starts, width, fwd = self._garr[:3]
        share = fwd / width
        gid = np.repeat(np.arange(ng), width)
        slot = np.arange(gid.size) - np.repeat((np.cumsum(width) - width) - starts, width)  # start + index in block
        fsum = np.zeros(K)
        np.add.at(fsum, slot, share[gid])  # in order: each slot's adds as the code makes them
        return slot, ~gid, fsum.tolist()

    def _long_positions(self, slot: np.ndarray) -> np.ndarray | None:
        """Each long entry's count of earlier entries on its slot (``slot``: :meth:`_long_entries`' slots), without
        a sort: in a run of groups of one width the aligned blocks are disjoint or the same, so an entry's
        count is its slot's count before the run plus the group's rank among the run's groups on its block.
        None when the widths change too often for runs to pay."""
        starts, width = self._garr[:2]
        ng = width.size
        cuts = np.flatnonzero(width[1:] != width[:-1]) + 1
        if not ng or cuts.size > 64:
            return np.zeros(0, dtype=np.int64) if not ng else None
        base = np.zeros(self.batch.K, dtype=np.int64)
        out = np.empty(slot.size, dtype=np.int64)
        e0 = 0
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), ng], strict=True):
            c = int(width[a])
            e1 = e0 + (b - a) * c
            s = slot[e0:e1]
            out[e0:e1] = base[s] + np.repeat(_rank_in_class(starts[a:b] // c), c)  # rank among the block's groups
            base += np.bincount(s, minlength=base.size)
            e0 = e1
        return out

    def _deal_buckets(self, fsum: list[float], count: list[int], per_slot: int,
                      places: list) -> tuple[np.ndarray, np.ndarray] | None:
        """Normal buckets, ascending forward FLOPs, each to the slot with the least FLOPs among those with
        fewer than ``per_slot`` buckets (ties: lowest slot); the slot and bucket of every dealing in order,
        None when the candidate is rejected. Each dealing's count on its slot before it is appended to
        ``places`` (as arrays) unless ``places[0]`` is None.

        Empty buckets (FLOPs 0) come first in that order: outside safe mode the code rejects the
        candidate at the first one, in safe mode they are skipped.
        """
        hint = getattr(self, "_hint", None)  # the buckets' order in the normal filling's last round
        order = stable_order(self.bf, hint) if hint is not None and hint.size == self.bf.size else np.argsort(
            self.bf, kind="stable")
        filled = self.bl[order] > 0  # a bucket holds a sample iff it holds tokens (every length is >= 1)
        if filled.all():
            ks = order
        elif not self.safe:
            self._reject("an empty normal bucket")
            return None
        else:
            ks = order[filled]
        fks = self.bf[ks]
        slots: list[np.ndarray] = []
        track = places[0] is not None
        done = self._bulk_deal(ks, fks, slots, fsum, count, per_slot, places if track else None)  # runs, provably the same
        if done == ks.size:  # every bucket dealt in runs
            return np.concatenate(slots).astype(np.int64) if slots else ks.astype(np.int64), ks.astype(np.int64)
        heap = [(f, s) for s, f in enumerate(fsum) if count[s] < per_slot]
        heapq.heapify(heap)
        overfull = False  # safe mode, every slot full: the lightest slot of all (the code's fallback)
        pop, replace = heapq.heappop, heapq.heapreplace
        rest: list[int] = []
        for fk in fks[done:].tolist():
            if not heap:
                if not self.safe:
                    self._reject("more buckets than slots can take")
                    return None
                overfull = True
                heap = [(f, s) for s, f in enumerate(fsum)]
                heapq.heapify(heap)
            f, s = heap[0]
            rest.append(s)
            if track:
                places.append(np.array([count[s]], dtype=np.int64))
            fsum[s] = f = f + fk
            count[s] += 1
            if overfull or count[s] < per_slot:
                replace(heap, (f, s))
            else:
                pop(heap)
        return np.concatenate([*slots, np.array(rest, dtype=np.int64)]).astype(np.int64), ks.astype(np.int64)

    _bulk_deal = staticmethod(_bulk_deal)  # pr2959_tables; an attribute, so that tests can count its runs

    def _normal_tokens(self) -> np.ndarray:
        """Tokens per rank of every normal bucket (``min_cp`` ranks, each sample padded on its own)."""
        if self.batch.tok1_is_length:  # one rank, no padding: a bucket's tokens, summed as it was filled
            return np.asarray(self.bl, dtype=np.int64)
        return np.bincount(self.dest, weights=self.batch.tok1[self.seq], minlength=len(self.bf)).astype(np.int64)

    def members(self) -> list[list[int]]:
        """The samples of every normal bucket, in the order they joined it."""
        dest = np.asarray(self.dest, dtype=np.int64)
        by = np.asarray(self.seq, dtype=np.int64)[stable_argsort(dest)]
        ends = np.cumsum(np.bincount(dest, minlength=len(self.bf))).tolist()
        flat = by.tolist()
        return [flat[a:b] for a, b in zip([0, *ends][: len(ends)], ends, strict=True)]

    def _slot_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slot, position, code) of every entry of the slots' lists (code: bucket ``k``, or ``~g`` for long group ``g``)."""
        return self._table

    def score(self) -> None:
        """Phase 5: the makespan of each slot's list in the PR's pipeline simulation (solver FLOPs), largest over slots."""
        slot, pos, code = self._slot_table()
        n = int(pos.max()) + 1 if pos.size else 0
        fw = np.zeros((n, self.batch.K))
        cell = pos * self.batch.K + slot  # the entry's (position, slot) in the flat matrices
        nl = self._nlong  # entries [0, nl): the long groups'
        fw.reshape(-1)[cell[nl:]] = self.bf[code[nl:]]
        bw = NORMAL_BWD_FACTOR * fw  # the buckets' backward (bb, exactly) and 0 elsewhere, before the groups'
        if nl:
            _, width, gf, gb, _ = self._garr
            per = width.astype(np.float64)
            gid, cg = ~code[:nl], cell[:nl]
            fw.reshape(-1)[cg] = (gf / per)[gid]
            bw.reshape(-1)[cg] = (gb / per)[gid]
        self.makespan = float(pr_pipeline_makespan(fw, bw, self.batch.layout.pp).max())

    def steps(self) -> list[Step]:
        """Phase 6: microbatch ``k`` of a slot is its ``k``-th bucket; a long group runs where all its slots reach it
        (steps of arrays, :func:`~dcpsim.policies.plan.steps_of_arrays`: their groups are made when read)."""
        slot, pos, code = self._slot_table()
        gs, widths = self._garr[:2]
        nl = self._nlong  # entries [0, nl): the long groups', group after group, each from its first slot
        first = np.cumsum(widths) - widths  # each group's first entry
        self.misaligned += _spread_groups(pos[:nl], first)  # long groups the code has at different list positions
        if self.misaligned:
            return self._realigned_steps()
        # every long group sits at one list index on all its slots, so each entry runs at its index
        keep = np.concatenate([first, np.arange(nl, code.size)]).astype(np.int64)  # buckets; long groups once
        order = _by_cell(keep, pos[keep] * self.batch.K + slot[keep])  # by list index, then slot
        if not order.size:
            return []
        u, n_long = self.batch.u, len(self.long_ids)
        ps, codes = pos[order], code[order]
        bounds = [0, *(np.flatnonzero(ps[1:] != ps[:-1]) + 1).tolist(), order.size]
        # one group per entry: a normal bucket on its slot, a long group on its block
        is_b = codes >= 0
        gid = np.where(is_b, 0, ~codes)
        if not n_long:
            gs = widths = np.zeros(1, dtype=np.int64)
        starts = (np.where(is_b, slot[order], gs[gid]) * u).astype(np.int64, copy=False)
        sizes = (np.where(is_b, 1, widths[gid]) * u).astype(np.int64, copy=False)
        ids, counts = _entry_members(self.seq, self.dest, len(self.bf), self._long_arr, self._fillers, self._gends,
                                     codes)
        per_step = np.diff(np.asarray(bounds, dtype=np.int64))  # one step per list index (a long group once)
        if ps[0] != 0:  # entries start at list index 0 (else an empty step)
            per_step = np.concatenate([[0], per_step]).astype(np.int64)
        return steps_of_arrays(PlanArrays(per_step=per_step, step=np.repeat(np.arange(per_step.size), per_step),
                                          start=starts, size=sizes, counts=counts.astype(np.int64), ids=ids))

    def _realigned_steps(self) -> list[Step]:
        """:meth:`steps` when a long group is misaligned: it runs at the latest of its slots' next
        positions, and the other slots' next buckets move into the gap."""
        bt = self.batch
        u = bt.u
        nxt = np.zeros(bt.K, dtype=np.int64)
        taken: list[set[int]] = [set() for _ in range(bt.K)]
        at: dict[int, list[Group]] = {}
        for gr in self._long_groups():
            sl = slice(gr.start, gr.start + gr.slots)
            p = int(nxt[sl].max())
            nxt[sl] = p + 1
            for s in range(gr.start, gr.start + gr.slots):
                taken[s].add(p)
            at.setdefault(p, []).append(Group(gr.start * u, gr.slots * u, list(gr.members)))
        members = self.members()
        slot, pos, code = self._slot_table()
        ends = np.cumsum(np.bincount(slot, minlength=bt.K)).tolist()
        by_slot = code[np.lexsort((pos, slot))].tolist()  # each slot's list, slot after slot
        for s, (a, b) in enumerate(zip([0, *ends][:bt.K], ends, strict=True)):
            p, tk = 0, taken[s]
            for k in by_slot[a:b]:
                if k < 0:
                    continue
                while p in tk:
                    p += 1
                at.setdefault(p, []).append(Group(s * u, u, members[k]))
                p += 1
        return [Step(sorted(at[k], key=lambda gr: gr.start)) for k in sorted(at)]




def _by_cell(ids: np.ndarray, cell: np.ndarray) -> np.ndarray:
    """``ids[np.argsort(cell, kind="stable")]`` for cells (integers ``>= 0``) that are distinct: each id put at its
    cell of a table and read back in cell order (no sort); a sort where cells repeat."""
    if not cell.size:
        return ids[:0]
    at = np.full(int(cell.max()) + 1, -1, dtype=np.int64)
    at[cell] = ids
    out = at[at >= 0]
    return out if out.size == ids.size and int(ids.min()) >= 0 else ids[stable_argsort(cell)]


def _spread_groups(pos: np.ndarray, first: np.ndarray) -> int:
    """How many groups have entries at different positions (``pos``: the entries, group after group; ``first``:
    each group's first entry, ascending, every group with one entry or more)."""
    if not pos.size:
        return 0
    return int(np.count_nonzero(np.minimum.reduceat(pos, first) != np.maximum.reduceat(pos, first)))
