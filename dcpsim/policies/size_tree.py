"""The ``dynamic`` policy's per-CP-size search tree over a microbatch's groups (:mod:`dcpsim.policies.dynamic`)."""

from __future__ import annotations


class SizeTree:
    """Groups of one CP size in creation order: a segment tree of (min tokens, min load) per node.

    Leaves are the groups' padded tokens per rank and L²/c loads (empty slots:
    ``EMPTY`` tokens, infinite load). Both only grow, so an update walks up
    while a parent's minimum changes. Queries prune a subtree when even its
    minimum cannot pass a test; since ``fl(a + w)`` is monotone in ``a`` the
    pruning makes the same floating-point comparisons as a scan would.
    """

    EMPTY = 1 << 62

    def __init__(self, capacity: int) -> None:
        cap = 1
        while cap < capacity:
            cap *= 2
        self.cap = cap
        self.tok = [self.EMPTY] * (2 * cap)
        self.load = [float("inf")] * (2 * cap)
        self.gid: list[int] = []  # slot -> global group index

    def set(self, slot: int, tok: int, load: float) -> None:
        """Leaf ``slot`` takes (tok, load); refresh the minima above it."""
        tk, ld = self.tok, self.load
        n = slot + self.cap
        tk[n], ld[n] = t, v = tok, load
        while n > 1:  # (t, v): the minima of node n, just written; its parent's are those and its sibling's
            s = n ^ 1
            if tk[s] < t:
                t = tk[s]
            if ld[s] < v:
                v = ld[s]
            n >>= 1
            if t == tk[n] and v == ld[n]:
                break
            tk[n], ld[n] = t, v

    def set_many(self, slot: int, k: int, tok: int, load: float) -> None:
        """Leaves ``slot`` .. ``slot + k - 1`` take (tok, load); every node above them is refreshed once, level by
        level, to the minima of its children (what :meth:`set` of one leaf after another leaves: each keeps every
        node the minimum of its children)."""
        tk, ld = self.tok, self.load
        lo, hi = slot + self.cap, slot + self.cap + k
        tk[lo:hi] = [tok] * k
        ld[lo:hi] = [load] * k
        lo, hi = lo >> 1, (hi - 1) >> 1
        while lo >= 1:
            for n in range(lo, hi + 1):
                a, b = tk[2 * n], tk[2 * n + 1]
                tk[n] = b if b < a else a
                x, y = ld[2 * n], ld[2 * n + 1]
                ld[n] = y if y < x else x
            lo, hi = lo >> 1, hi >> 1

    def first_fit(self, t: int, w: float, room: int, limit: float) -> int:
        """Lowest slot with ``tok + t <= room`` and ``load + w <= limit``; -1 if none.

        A depth-first descent, left child first, over the nodes whose minima pass both tests; at a dead end
        (a node passed on the minima of two different leaves) it climbs to the nearest left child whose right
        sibling passes. No stack: the path is the node number.
        """
        tk, ld, cap = self.tok, self.load, self.cap
        rt = room - t  # integers: tok + t <= room exactly when tok <= room - t
        if tk[1] > rt or ld[1] + w > limit:
            return -1
        n = 1
        while n < cap:
            n += n  # left child
            if tk[n] <= rt and ld[n] + w <= limit:
                continue
            n += 1  # right child
            if tk[n] <= rt and ld[n] + w <= limit:
                continue
            while True:  # dead end at n: the next subtree to the right, climbing past right children
                while n & 1:
                    n >>= 1
                if n <= 1:
                    return -1
                n += 1
                if tk[n] <= rt and ld[n] + w <= limit:
                    break
        return n - cap
