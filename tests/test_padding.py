"""The CP padding rule (dcpsim.cost.padding): one definition, its array and int forms agree."""

import numpy as np
import pytest

from dcpsim.cost.padding import (
    max_length_for_tokens,
    pad_multiple,
    padded_lengths,
    per_rank_tokens,
    per_rank_tokens_int,
)


def test_rule_values():
    # 2c chunks for the load-balanced causal split; one rank: no padding
    assert per_rank_tokens([1, 7, 8, 9, 1001], 1).tolist() == [1, 7, 8, 9, 1001]
    assert per_rank_tokens([1, 7, 8, 9, 1001], 4).tolist() == [2, 2, 2, 4, 252]
    assert padded_lengths([1, 7, 8, 9, 1001], 4).tolist() == [8, 8, 8, 16, 1008]
    assert pad_multiple(1) == 1 and pad_multiple(4) == 8 and pad_multiple(4, factor=3) == 24
    assert pad_multiple(np.array([1, 2, 8])).tolist() == [1, 4, 16]


@pytest.mark.parametrize("factor", [1, 3])
def test_forms_agree_and_inverse(factor):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200_000, size=300)
    for c in (1, 2, 4, 8, 64):
        arr = per_rank_tokens(lengths, c, factor)
        assert arr.tolist() == [per_rank_tokens_int(int(x), c, factor) for x in lengths]
        assert (arr * c == padded_lengths(lengths, c, factor)).all()
        assert (padded_lengths(lengths, c, factor) >= lengths).all()
        for t in (0, 1, 5, 4096, 65_536):
            L = max_length_for_tokens(t, c, factor)
            assert per_rank_tokens_int(L, c, factor) <= t
            assert per_rank_tokens_int(L + 1, c, factor) > t


def test_broadcasts():
    out = per_rank_tokens(np.array([10, 100])[None, :], np.array([1, 2, 4])[:, None])
    assert out.shape == (3, 2)
    assert out.tolist() == [[10, 100], [6, 50], [4, 26]]


def test_bit_mask_paths_equal_the_division_form():
    """Powers-of-two multiples and CP sizes take bit masks and shifts; the integers equal the division form
    (random lengths, CP sizes with and without non-powers of two, factors 1-3)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        L = rng.integers(0, 10 ** int(rng.integers(1, 12)), n)
        c = rng.choice([1, 2, 4, 8, 64, 1024, 2**20] if rng.random() < 0.5 else [1, 2, 3, 6, 8], n)
        f = int(rng.integers(1, 4))
        m = np.where(c > 1, 2 * c * f, 1)
        ref = -(-L // m) * m
        assert (padded_lengths(L, c, f) == ref).all()
        assert (per_rank_tokens(L, c, f) == ref // c).all()
        grid = 2 ** np.arange(8)
        assert (per_rank_tokens(L[:, None], grid[None, :], f) == (-(-L[:, None] // np.where(grid > 1, 2 * grid * f, 1))
                                                                   * np.where(grid > 1, 2 * grid * f, 1)) // grid).all()
