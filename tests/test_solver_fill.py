"""``dynamic-solver``'s fill path (:mod:`dcpsim.policies.solver_fill`) gives exactly the plans of one full
decision per sequence.

After a join that raises its step, the next sequences of that length are placed by ``_Fill._fill`` while only
the raised group's cell can change the decision. Random batches where every rank gets taken by long
sequences and runs of short equal ones then fill the steps (PP and not, several CP sizes, heights and token
caps), compared with ``fill = False`` (the run loop's full decisions and bulk runs) and with one full decision
per sequence (``bulk = False``), meta included; the fill must place many sequences.
"""

from __future__ import annotations

import numpy as np
from policy_cases import count_placed, same_solver_plans

from dcpsim.policies import Layout


def _cases():
    """A few long lengths (repeated: twin groups) taking every rank, then many short ones in runs."""
    rng = np.random.default_rng(27)
    for j in range(12):
        dp, cp = int(rng.choice([4, 8, 16])), int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 2, 4, 8]))
        M = int(rng.choice([2048, 8192]))
        layout = Layout(dp=dp, cp=cp, max_tokens_per_rank=M, pp=pp, gpus_per_domain=int(rng.choice([4, 8])))
        cap = M * layout.max_dynamic_cp - 2 * layout.max_dynamic_cp
        n = int(rng.integers(6, 14)) * dp * cp
        long_ = np.minimum(rng.integers(M // 2, 2 * M, int(rng.integers(2, 6))), cap)
        short = rng.integers(8, M // 8, int(rng.integers(3, 15)))
        lengths = np.concatenate([rng.choice(long_, n // 4), rng.choice(short, n - n // 4)])
        if j % 3 == 2:
            lengths[: max(1, n // 100)] = rng.integers(cap // 2, cap, max(1, n // 100))  # a few tall ones
        yield layout, rng.permutation(lengths)


def test_fill_gives_the_per_sequence_plans(monkeypatch):
    from dcpsim.policies import solver_fill, solver_placer

    placed = count_placed(monkeypatch, solver_fill._Fill, "_fill", 1)
    same_solver_plans(_cases(), [(solver_placer._Placer, "bulk", False)], [(solver_fill._Fill, "fill", False)], [])
    assert sum(placed) > 2000, sum(placed)
