"""Each depth's rate shrunk toward the key's mean by a strength fitted to the depths' spread (alpha.depth_strength).

Closed forms: the expected counts of a walk whose conditional rates are known, and binomial draws of the same
walk with a seeded generator (the estimator must add no bias and no spread where the depths are alike)."""

import numpy as np
import pytest

from adaptspec.control.alpha import AlphaTable, depth_strength
from adaptspec.control.costmodel import expected_tokens_per_position

LOOKUP = [0.25, 0.6, 0.7, 0.7, 0.97, 0.97, 0.97, 0.97]  # rarely starts, then copies: conditional rates rise


def expected_walk(rates: list[float], steps: float) -> tuple[list[float], list[float]]:
    """Expected per-position counts of `steps` drafts of len(rates) tokens with these conditional rates."""
    tried = [steps * float(np.prod(rates[:i])) for i in range(len(rates))]
    return tried, [t * r for t, r in zip(tried, rates, strict=True)]


def shrunk(tried, accepted, k: float, mean: float) -> list[float]:
    return [(a + mean * k) / (t + k) for t, a in zip(tried, accepted, strict=True)]


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85])
def test_depths_at_one_rate_keep_the_keys_strength(alpha):
    tried, accepted = expected_walk([alpha] * 6, 400.0)
    assert depth_strength(tried, accepted, alpha, 1.0, 20.0) == 20.0  # no spread beyond the noise
    assert depth_strength(tried[:1], accepted[:1], alpha, 1.0, 20.0) == 20.0  # one depth: nothing to fit
    assert depth_strength([], [], alpha, 1.0, 20.0) == 20.0


@pytest.mark.parametrize("steps", [100.0, 300.0, 1000.0])
def test_a_lookups_deep_rates_are_not_held_at_its_first_positions(steps):
    """The deep positions of a lookup walk are reached by few steps; shrunk as strongly as the key, they sit
    near the key's mean (set by the first position) and price a long draft well under what it replays."""
    tried, accepted = expected_walk(LOOKUP, steps)
    table = AlphaTable(half_life_tokens=None, prior_strength=20.0)
    table.observe_counts("w", "ngram", "summarize", sum(accepted), sum(tried) - sum(accepted), tried, accepted,
                         now=0.0)
    e = table.get("w", "ngram", "summarize", now=0.0)
    k = depth_strength(tried, accepted, e.mean, 1.0, 20.0)
    assert k < 2.0
    assert e.per_position == pytest.approx(shrunk(tried, accepted, k, e.mean), rel=1e-12)
    truth = expected_tokens_per_position(LOOKUP)
    held = expected_tokens_per_position(shrunk(tried, accepted, 20.0, e.mean))
    got = expected_tokens_per_position(e.per_position)
    assert held < truth * (0.96 if steps < 1000 else 0.97)  # the key's strength: 4-11% under
    assert abs(got / truth - 1.0) < 0.035 and abs(got / truth - 1.0) < abs(held / truth - 1.0) / 2.5


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85])
@pytest.mark.parametrize("steps", [50, 200])
def test_no_bias_and_no_spread_added_where_the_depths_are_alike(alpha, steps):
    """Binomial walks at one rate: tokens per step at depth 8 priced from the rates shrunk by the fitted strength
    err like those shrunk by the key's (mean within 0.3% of the truth over 2,000 walks; RMS within 2% of it)."""
    rng = np.random.default_rng(7)
    truth = expected_tokens_per_position([alpha] * 8)
    fitted, fixed = [], []
    for _ in range(2000):
        tried, accepted, n = [], [], steps
        while n and len(tried) < 8:
            a = int(rng.binomial(n, alpha))
            tried.append(n)
            accepted.append(a)
            n = a
        mean = (sum(accepted) + alpha * 20.0) / (sum(tried) + 20.0)
        pad = [mean] * (8 - len(tried))
        k = depth_strength(tried, accepted, mean, 1.0, 20.0)
        fitted.append(expected_tokens_per_position(shrunk(tried, accepted, k, mean) + pad) / truth - 1.0)
        fixed.append(expected_tokens_per_position(shrunk(tried, accepted, 20.0, mean) + pad) / truth - 1.0)
    assert abs(np.mean(fitted)) < 0.003
    assert np.sqrt(np.mean(np.square(fitted))) < 1.02 * np.sqrt(np.mean(np.square(fixed)))


def test_forgetting_scales_the_counts_the_noise_is_judged_by():
    """Decayed counts are fewer trials: the same rates with a tenth of the evidence differ less beyond the noise."""
    tried, accepted = expected_walk(LOOKUP, 300.0)
    mean = sum(accepted) / sum(tried)
    assert depth_strength(tried, accepted, mean, 0.1, 20.0) > depth_strength(tried, accepted, mean, 1.0, 20.0)
