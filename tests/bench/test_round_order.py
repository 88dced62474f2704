"""`bench compare`'s round order (`compare.round_order`): a balanced Latin square, not a cyclic rotation."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_round_order_is_a_balanced_latin_square(n):
    """`bench compare` runs policies in `round_order`: every round holds each policy once, each policy takes every
    position once, and each ordered pair of policies is adjacent exactly once over n rounds (n even) or 2n rounds
    (n odd), so no policy always runs right after the same one (a cyclic rotation makes that pair fixed)."""
    from collections import Counter

    from adaptspec.bench.compare import round_order

    span = n if n % 2 == 0 else 2 * n
    rows = [round_order(n, r) for r in range(span)]
    assert rows[0][0] == 0 and all(sorted(row) == list(range(n)) for row in rows)
    for pos in range(n):
        assert Counter(row[pos] for row in rows) == Counter({i: span // n for i in range(n)})
    pairs = Counter((a, b) for row in rows for a, b in zip(row, row[1:], strict=False))
    want = 1 if n % 2 == 0 else 2
    assert pairs == Counter({(a, b): want for a in range(n) for b in range(n) if a != b}) or n == 1
    # with 4 policies and 3 rounds (the published runs) the last policy follows three different ones
    if n == 4:
        before_last = {row[row.index(3) - 1] for row in rows[:3] if row.index(3) > 0}
        assert len(before_last) >= 2
