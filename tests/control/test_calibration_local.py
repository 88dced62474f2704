"""The fit is local to the live load: a worker whose step time is not linear over 1..256 running requests (a
CPU's matmuls at batch 1 vs 128; a GPU roofline) is priced with its marginal costs where the decision is made."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptspec.control.calibration import StepCalibrator, load_coordinate
from adaptspec.control.profiles import load_profile
from adaptspec.control.telemetry import StepCounters

SIGMA = 1e-3


def step_time(rows: np.ndarray, batched: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """A worker whose price of a batched token grows with the load: 0.25 ms per token up to 32 rows, 0.55 ms
    at 128 and beyond (cache spills), 3 us per KV token, 5 ms per step."""
    per_token = np.interp(np.log2(rows), [5.0, 7.0], [2.5e-4, 5.5e-4])
    return 5e-3 + per_token * batched + 3e-6 * kv


def windows(rng: np.random.Generator, count: int, rows: int, drafting: bool = True) -> list[StepCounters]:
    """Windows of 1..12 steps at `rows` running requests (+-10%), each request drafting 0..4 n-gram tokens at a
    share that varies between windows (what n-gram hits do), prefill chunks in some steps; `drafting=False`:
    decode only at exactly `rows`, nothing drafted (constant batched tokens: no slope to fit there)."""
    out = []
    for _ in range(count):
        n = int(rng.integers(1, 13))
        r = np.maximum(1, rng.normal(rows, 0.1 * rows if drafting else 0.0, size=n).round())  # [n]
        share = rng.uniform(0.0, 1.0) if drafting else 0.0
        drafted = rng.binomial((4 * r).astype(int), share).astype(float)  # [n]
        prefill = np.where(rng.uniform(size=n) < 0.2, rng.integers(20, 200, size=n), 0).astype(float)
        prefill = prefill if drafting else np.zeros(n)
        batched = r + drafted + prefill
        kv = r * rng.uniform(100, 300, size=n)
        t = step_time(r, batched, kv) + rng.normal(0.0, SIGMA, size=n)
        out.append(StepCounters(n, float(t.sum()), float(batched.sum()), float(kv.sum()), {"ngram": float(drafted.sum())},
                                {}, requests=float(r.sum())))
    return out


def feed(cal: StepCalibrator, ws: list[StepCounters]) -> None:
    for w in ws:
        cal.observe(w)


@pytest.fixture(scope="module")
def history() -> tuple[list[StepCounters], list[StepCounters]]:
    rng = np.random.default_rng(3)
    return windows(rng, 600, 2), windows(rng, 30, 128)  # mostly light (as a run that starts at batch 1)


def test_the_fit_prices_a_batched_token_at_the_live_load(history):
    light, heavy = history
    local = StepCalibrator(load_profile("cpu-tiny"), half_life_steps=1e9)
    glob = StepCalibrator(load_profile("cpu-tiny"), half_life_steps=1e9, local_decay=1.0)
    feed(local, light)
    feed(glob, light)
    at_light = local.costs()
    assert at_light.trusted and at_light.load == pytest.approx(2.0, rel=0.3)
    assert at_light.coefficients["compute_s_per_token"] == pytest.approx(2.5e-4, rel=0.1)
    feed(local, heavy)
    feed(glob, heavy)
    at_heavy, blended = local.costs(), glob.costs()
    assert at_heavy.load == pytest.approx(128.0, rel=0.15) and math.isnan(blended.load)
    # the marginal price at 128 rows (0.55 ms), not a line through both loads
    assert at_heavy.coefficients["compute_s_per_token"] == pytest.approx(5.5e-4, rel=0.1)
    assert blended.coefficients["compute_s_per_token"] < 0.85 * 5.5e-4  # one line through both loads: too cheap
    # the evidence: the steps near the load, fewer than all
    assert 0 < at_heavy.local_steps < at_heavy.steps
    # back at the light load the light windows price again (they were kept)
    feed(local, windows(np.random.default_rng(4), 20, 2))
    assert local.costs().coefficients["compute_s_per_token"] == pytest.approx(2.5e-4, rel=0.15)


def test_where_the_load_cannot_split_the_costs_the_global_fit_anchors_them(history):
    """At a load whose windows do not vary the batched tokens on their own (decode only at a constant batch,
    nothing drafted) the batched-token slope is not identified there: it is fitted with the KV slope at the
    global fit's ratio (one scale, the collinear tie), not at the profile's."""
    light, _ = history
    prior = load_profile("cpu-tiny")
    local = StepCalibrator(prior, half_life_steps=1e9)
    glob = StepCalibrator(prior, half_life_steps=1e9, local_decay=1.0)
    feed(local, light)
    feed(glob, light)
    flat = windows(np.random.default_rng(5), 60, 128, drafting=False)
    feed(local, flat)
    feed(glob, flat)
    c, g = local.costs(), glob.costs()
    assert c.load > 100 and set(c.tied) == {"compute_s_per_token", "kv_s_per_token"}

    def ratio(k):
        return k["compute_s_per_token"] / k["kv_s_per_token"]

    assert ratio(c.coefficients) == pytest.approx(ratio(g.coefficients), rel=0.01)
    assert abs(ratio(c.coefficients) / (prior.target.compute_s_per_token / prior.target.kv_s_per_token) - 1) > 0.3


def test_load_coordinate_is_rows_not_drafted_tokens():
    with_requests = StepCounters(4, 1.0, batched_tokens=900, kv_tokens=1, drafted_tokens={"ngram": 400},
                                 requests=500)
    assert load_coordinate(with_requests) == 125.0
    # an engine that does not count requests: batched tokens less the drafted ones
    without = StepCounters(4, 1.0, batched_tokens=900, kv_tokens=1, drafted_tokens={"ngram": 400})
    assert load_coordinate(without) == 125.0


def test_local_decay_is_validated():
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="local_decay"):
            StepCalibrator(load_profile("cpu-tiny"), local_decay=bad)
