"""Rates counted along one gamma's walk, priced at another (alpha.walk_rates): closed forms."""

import math

import pytest

from adaptspec.control.alpha import AlphaTable, walk_rates
from adaptspec.control.costmodel import expected_tokens_any, expected_tokens_per_position


def two_stretches(copy_tokens: float, plain_tokens: float, depth: int) -> tuple[list[float], list[float]]:
    """Expected per-position counts of a walk at `depth` over output made of long stretches of two kinds: one
    where every draft is accepted (each step emits depth + 1 tokens, stopped by its room), one where none is
    (each step emits 1, rejected at position 0)."""
    copy_steps, plain_steps = copy_tokens / (depth + 1), plain_tokens
    tried = [copy_steps + plain_steps] + [copy_steps] * (depth - 1)
    accepted = [copy_steps] * depth
    return tried, accepted


def walked(copy_tokens: float, plain_tokens: float, g: int) -> float:
    """Tokens per step of the walk at depth g over the same output."""
    return (copy_tokens + plain_tokens) / (copy_tokens / (g + 1) + plain_tokens)


@pytest.mark.parametrize("depth", [2, 4, 8])
@pytest.mark.parametrize("share", [0.2, 0.5, 0.8])
def test_stretches_longer_than_a_step_are_priced_between_the_two_limits(depth, share):
    copy, plain = 1000.0 * share, 1000.0 * (1.0 - share)
    tried, accepted = two_stretches(copy, plain, depth)
    rates = [a / t for a, t in zip(accepted, tried, strict=True)]
    fixed = walk_rates(tried, accepted, rates)
    for g in range(1, depth + 1):
        independent = expected_tokens_per_position(rates[:g])  # A(g): positions taken as independent trials
        truth = walked(copy, plain, g)  # here each step's outcome is its stretch's: the harmonic limit is exact
        got = expected_tokens_any(fixed, g)
        assert got == pytest.approx(math.sqrt(independent * truth), rel=1e-9)
        if g == depth:  # every limit is exact at the depth the counts were walked at
            assert got == pytest.approx(truth, rel=1e-9) and independent == pytest.approx(truth, rel=1e-9)
        else:  # counted at a longer gamma, the independent rates price a shorter one low
            assert independent < got < truth


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8])
def test_independent_positions_keep_their_price_at_the_counted_depth(alpha):
    depth = 4
    # expected counts of a walk at depth 4, every position accepted with probability alpha
    tried = [alpha**j for j in range(depth)]
    accepted = [alpha ** (j + 1) for j in range(depth)]
    rates = [alpha] * depth
    fixed = walk_rates(tried, accepted, rates)
    assert expected_tokens_any(fixed, depth) == pytest.approx(expected_tokens_any(rates, depth), rel=1e-12)
    for g in range(1, depth):  # never below the independent price, at most half the harmonic limit's excess
        got, exact = expected_tokens_any(fixed, g), expected_tokens_any(rates, g)
        assert exact <= got + 1e-12
        assert got / exact - 1.0 < 0.05


def test_no_evidence_or_no_weight_leaves_the_rates():
    rates = [0.6, 0.7, 0.8]
    assert walk_rates([], [], rates) == tuple(rates)
    assert walk_rates([10.0, 6.0, 4.0], [6.0, 4.0, 3.0], rates, weight=0.0) == tuple(rates)


def test_weight_scales_the_correction():
    tried, accepted = two_stretches(500.0, 500.0, 4)
    rates = [a / t for a, t in zip(accepted, tried, strict=True)]
    base = expected_tokens_any(rates, 2)
    full = expected_tokens_any(walk_rates(tried, accepted, rates, 1.0), 2)
    half = expected_tokens_any(walk_rates(tried, accepted, rates, 0.5), 2)
    assert half == pytest.approx(base * (full / base) ** 0.5, rel=1e-9)


def test_the_estimate_keeps_its_conditional_rates_and_prices_with_the_walk_rates():
    table = AlphaTable(half_life_tokens=None, prior_strength=20.0)
    tried, accepted = two_stretches(6000.0, 4000.0, 5)
    fails = sum(tried) - sum(accepted)
    table.observe_counts("w", "eagle", "code", sum(accepted), fails, tried, accepted, now=0.0)
    e = table.get("w", "eagle", "code", now=0.0)
    shrunk = tuple((a + e.mean * 20.0) / (t + 20.0) for a, t in zip(accepted, tried, strict=True))
    assert e.per_position == pytest.approx(shrunk, rel=1e-12)  # the contract: conditional rates as counted
    assert e.walk_rates is not None and e.priced == e.walk_rates
    assert expected_tokens_any(e.priced, 5) == pytest.approx(expected_tokens_any(e.per_position, 5), rel=1e-3)
    assert expected_tokens_any(e.priced, 2) > expected_tokens_any(e.per_position, 2) * 1.05


def test_depths_the_walk_never_reached_keep_the_estimates_price():
    """Counted along a walk at gamma 4 (a few steps drafted 8, all accepted), the harmonic limit prices nothing past
    4: alone it would hold a policy at gamma 4 for good. Weighted by each depth's counts (as the table does), a
    longer draft keeps the value its shrunk rates give it, and the counted depths keep their corrected price."""
    tried, accepted = two_stretches(300.0, 4000.0, 4)
    tried, accepted = tried + [3.0] * 4, accepted + [3.0] * 4
    table = AlphaTable(half_life_tokens=None, prior_strength=20.0)
    table.observe_counts("w", "ngram", "summarize", sum(accepted), sum(tried) - sum(accepted), tried, accepted,
                         now=0.0)
    e = table.get("w", "ngram", "summarize", now=0.0)
    rates = list(e.per_position)
    unweighted = walk_rates(tried, accepted, rates, tried[0] / (tried[0] + 20.0))
    assert expected_tokens_any(unweighted, 8) == pytest.approx(expected_tokens_any(unweighted, 4), rel=1e-12)
    priced = [expected_tokens_any(e.priced, g) for g in range(1, 9)]
    assert all(b > a for a, b in zip(priced[3:], priced[4:], strict=False))  # every depth past 4 adds tokens
    assert all(r > 0.0 for r in e.priced)
    assert priced[3] == pytest.approx(expected_tokens_any(unweighted, 4), rel=0.01)  # the counted depth: as before
    # with every depth counted as fully as the first, the weights change nothing
    full = walk_rates(tried, accepted, rates, 0.9, [1.0] * 8)
    assert full == walk_rates(tried, accepted, rates, 0.9)
