"""``dynamic-solver``'s open path (:mod:`dcpsim.policies.solver_open`) gives exactly the plans of one full
decision per sequence.

After a sequence opens a group on the first open step's free ranks (adding nothing), the next ones of its
length are opened on that step's next free slices by ``_Open._open_run`` while that is provably the full
decision. Random batches with runs of equal long lengths (many groups opened in a row, some of them near half
the tallest sequence, so that a join into an opened group lands near the step's height), several CP sizes,
NVLink domains (slices that leave the domain), PP and token caps, compared with ``opens = False`` and with one
full decision per sequence (``bulk = False``), meta included; the open path must place many sequences.
"""

from __future__ import annotations

import numpy as np
from policy_cases import count_placed, same_solver_plans

from dcpsim.policies import Layout


def _cases():
    """Runs of a few long lengths (some about half the tallest: joins into the opened groups near the step's
    height), then short ones."""
    rng = np.random.default_rng(28)
    # aligned slices of 4 ranks alternately stay in and leave an NVLink domain (on the second stage, 18 ranks
    # on): a run opening groups of 4 must stop where the next slice's span differs
    layout = Layout(dp=9, cp=2, max_tokens_per_rank=2048, pp=2, gpus_per_domain=8)
    yield layout, rng.permutation(np.concatenate([[7761], np.full(8, 3814), rng.integers(8, 512, 60)]))
    for j in range(12):
        dp, cp = int(rng.choice([3, 5, 6, 10, 12, 16])), int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 2, 4, 8]))
        M = int(rng.choice([2048, 8192]))
        layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp, gpus_per_domain=int(rng.choice([2, 4, 8])))
        cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
        n = int(rng.integers(4, 10)) * dp * cp
        tall = int(rng.integers(cap // 2, cap))
        long_ = np.minimum(rng.integers(M // 4, 2 * M, int(rng.integers(2, 6))), cap)
        if j % 2:  # about half the tallest: a second one in an opened group lands near the step's height
            long_ = np.concatenate([long_, tall // 2 + rng.integers(-3, 4, 3)])
        short = rng.integers(8, M // 8, int(rng.integers(3, 10)))
        lengths = np.concatenate([[tall], rng.choice(long_, n // 2), rng.choice(short, n - n // 2 - 1)])
        yield layout, rng.permutation(lengths)


def test_open_runs_give_the_per_sequence_plans(monkeypatch):
    from dcpsim.policies import solver_open, solver_placer

    placed = count_placed(monkeypatch, solver_open._Open, "_open_run", 1)
    same_solver_plans(_cases(), [(solver_placer._Placer, "bulk", False)], [(solver_open._Open, "opens", False)], [])
    assert sum(placed) > 600, sum(placed)
