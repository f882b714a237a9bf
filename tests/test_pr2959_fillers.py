"""``dynamic-pr2959``'s long-group filling by length class (:mod:`dcpsim.policies.pr2959_fillers`) takes the
samples the code's rule takes, one sample at a time over its shrinking list: the same samples, in the same
order, for every group, in bulk tries and one group at a time alike."""

from __future__ import annotations

import numpy as np

from dcpsim.policies import pr2959_fillers as pf


def _rule(negf, lengths, room, lsum, cap, slack, budget, flag_all):
    """The code's rule: each group in turn takes the first sample left (pool order) whose FLOPs are below
    slack x room, while the limits hold; returns the positions taken, in order, and the running counts."""
    alive = list(range(negf.size))
    taken, ends = [], []
    for r, s, c in zip(room.tolist(), lsum.tolist(), cap.tolist(), strict=True):
        while flag_all or (len(alive) > budget and s < c):
            nx = r * -slack
            j = next((j for j, p in enumerate(alive) if negf[p] > nx), None)
            if j is None:
                break
            p = alive.pop(j)
            taken.append(p)
            r += float(negf[p])
            s += int(lengths[p])
        ends.append(len(taken))
    return taken, ends


def test_class_filling_takes_the_rules_samples(monkeypatch):
    rng = np.random.default_rng(7)
    used = {"bulk": 0, "scalar": 0}
    bulk, scalar = pf.ClassFiller.bulk, pf.ClassFiller.scalar

    def counted_bulk(self, a, b):
        kept = bulk(self, a, b)
        used["bulk"] += kept
        return kept

    def counted_scalar(self, a, b):
        used["scalar"] += b - a
        scalar(self, a, b)

    monkeypatch.setattr(pf.ClassFiller, "bulk", counted_bulk)
    monkeypatch.setattr(pf.ClassFiller, "scalar", counted_scalar)
    for _ in range(60):
        n = int(rng.integers(0, 1500))
        kinds = int(rng.choice([3, 20, 300]))  # few lengths: classes run out often; many: rarely
        lengths = np.sort(rng.integers(1, kinds + 1, n))[::-1] * 7
        f = lengths.astype(np.float64) ** 1.5 * (1.0 + rng.random() / 7)
        negf = -f
        G = int(rng.integers(1, 400))
        room = rng.random(G) * float(rng.choice([10.0, 100.0, 2000.0])) * (kinds * 7) ** 1.5 / 10
        room[rng.random(G) < 0.1] *= -1  # negative rooms take nothing
        lsum = rng.integers(0, 50, G)
        cap = lsum + rng.integers(1, 10**4 if rng.random() < 0.5 else 60, G)
        budget = float(rng.integers(0, n + 1)) if rng.random() < 0.3 else 0.5 * n * rng.random()
        flag_all = bool(rng.random() < 0.15)
        slack = float(rng.choice([1.05, 1.0, 0.5]))
        filler = pf.ClassFiller((negf, lengths, None), room, lsum, cap, slack, budget, flag_all)
        pf.fill_long_groups(filler, G)
        want, ends = _rule(negf, lengths, room, lsum, cap, slack, budget, flag_all)
        assert filler.positions().tolist() == want
        assert filler.ends == ends
    assert used["bulk"] > 1000 and used["scalar"] > 1000, used  # both ways exercised


def test_class_filling_with_growing_rooms(monkeypatch):
    """Rooms that grow along the groups (as along a run of long samples of one size) over classes of one to a
    few samples: successive groups search from the same classes, the case the first round's sharing
    (:func:`~dcpsim.policies.pr2959_fillers._park`) guesses; the takings stay the rule's."""
    rng = np.random.default_rng(11)
    shared = 0
    park = pf._park

    def counted_park(k, count):
        nonlocal shared
        out = park(k, count)
        shared += int(np.count_nonzero(out != k))
        return out

    monkeypatch.setattr(pf, "_park", counted_park)
    for _ in range(40):
        n = int(rng.integers(50, 1200))
        kinds = int(rng.choice([40, 400, 2000]))
        lengths = np.sort(rng.integers(1, kinds + 1, n))[::-1] * 5
        f = lengths.astype(np.float64) ** 1.5
        G = int(rng.integers(1, 600))
        top = float(f.max()) * float(rng.choice([0.3, 1.0, 3.0]))
        room = np.sort(rng.random(G) * top)  # growing, with runs of equal rooms
        room[rng.random(G) < 0.3] = room[0]
        room = np.sort(room)
        lsum = rng.integers(0, 50, G)
        cap = lsum + rng.integers(1, 10**5, G)
        budget = 0.3 * n * rng.random()
        slack = float(rng.choice([1.05, 1.0]))
        filler = pf.ClassFiller((-f, lengths, None), room, lsum, cap, slack, budget, False)
        pf.fill_long_groups(filler, G)
        want, ends = _rule(-f, lengths, room, lsum, cap, slack, budget, False)
        assert filler.positions().tolist() == want
        assert filler.ends == ends
    assert shared > 100, shared  # the sharing was exercised


def test_one_group_at_a_time_takes_runs_of_a_class_as_the_rule():
    """Groups one at a time (ClassFiller.scalar alone) with rooms of many samples over classes of one to a few
    samples: a group takes a class's samples in a row while they stay below x (and the limits hold), then
    searches on; every group's takings are the rule's, with the token cap and the pool-size limit binding."""
    rng = np.random.default_rng(17)
    runs = 0
    for _ in range(80):
        n = int(rng.integers(1, 600))
        kinds = int(rng.choice([2, 10, 100, 1000]))
        lengths = np.sort(rng.integers(1, kinds + 1, n))[::-1] * 3
        exact = rng.random() < 0.4  # whole FLOPs and rooms: a room left equal to a class's FLOPs (not below x)
        f = lengths.astype(np.float64) ** (1.0 if exact else 1.5)
        G = int(rng.integers(1, 200))
        room = rng.random(G) * float(f.max()) * float(rng.choice([0.5, 3.0, 20.0]))
        if exact:
            room = np.floor(room / 3) * 3
        lsum = rng.integers(0, 50, G)
        cap = lsum + rng.integers(1, 10**5 if rng.random() < 0.7 else 40, G)
        budget = 0.5 * n * rng.random() if rng.random() < 0.5 else 0.0
        flag_all = bool(rng.random() < 0.15)
        slack = 1.0 if exact else float(rng.choice([1.05, 1.0]))
        filler = pf.ClassFiller((-f, lengths, None), room, lsum, cap, slack, budget, flag_all)
        filler.scalar(0, G)
        want, ends = _rule(-f, lengths, room, lsum, cap, slack, budget, flag_all)
        assert filler.positions().tolist() == want
        assert filler.ends == ends
        runs += sum(1 for x, y in zip(want, want[1:], strict=False) if y == x + 1 and lengths[x] == lengths[y])
    assert runs > 1000, runs  # picks in a row from one class were exercised
