"""Online calibration under collinearity: when batched and KV tokens per step move together (both grow with
the number of running requests, the drafted tokens a small share), the data determine their summed cost,
not its split; the split decides what a drafted token costs. The fit then takes the profile's ratio and the
data's level (one scale for the pair), and fits both freely when the data separate them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from adaptspec.control.calibration import StepCalibrator, prior_coefficients, regressors
from adaptspec.control.costmodel import StepTimeModel
from adaptspec.control.profiles import load_profile
from adaptspec.control.telemetry import StepCounters

PROFILE = load_profile("cpu-tiny")
THETA0 = prior_coefficients(PROFILE)  # [d]
SCALE = 6.0  # the engine is 6x slower than the profile says, in every target term (a vLLM CPU step here)
TRUTH = np.concatenate([SCALE * THETA0[:3], np.zeros(len(THETA0) - 3)])  # [d] no model proposer


def collinear_windows(rng: np.random.Generator, count: int, truth: np.ndarray = TRUTH, ctx_spread: float = 0.05,
                      ctx: tuple[float, float] = (256.0, 256.0), draft_share: float = 0.03,
                      sigma_rel: float = 0.3) -> list[StepCounters]:
    """Windows of 3..15 steps at a load level that drifts between windows (8..128 requests); each request's
    context is a common mean (uniform in `ctx` per window) times 1 +- `ctx_spread`; `draft_share` of the
    requests verify 4 n-gram tokens. Per-step noise is `sigma_rel` of the step (a loaded box)."""
    out = []
    for _ in range(count):
        n = int(rng.integers(3, 16))
        level = float(rng.integers(8, 129))
        reqs = np.clip(np.round(rng.normal(level, 0.05 * level, size=n)), 1, None)  # [n]
        mean_ctx = rng.uniform(*ctx)
        kv = reqs * mean_ctx * (1.0 + rng.normal(0.0, ctx_spread, size=n))  # [n]
        drafted = 4.0 * rng.binomial(reqs.astype(int), draft_share)  # [n]
        batched = reqs + drafted  # [n]
        t = truth[0] + truth[1] * batched + truth[2] * kv  # [n]
        t = t + rng.normal(0.0, sigma_rel * t)
        out.append(StepCounters(n, float(t.sum()), float(batched.sum()), float(kv.sum()),
                                {"ngram": float(drafted.sum())}, {}, float(reqs.sum())))
    return out


def fitted(ws: list[StepCounters], profile=PROFILE) -> StepCalibrator:
    cal = StepCalibrator(profile, half_life_steps=1e9)
    for w in ws:
        cal.observe(w)
    return cal


def ols_relative_se(ws: list[StepCounters], sigma_rel: float = 0.3) -> float:
    """Relative standard error of the per-batched-token slope in the plain weighted least-squares fit of
    (steps, batched, kv): how ill-conditioned the design is (noise taken at the mean step)."""
    x = np.stack([regressors(w)[:3] for w in ws])  # [windows, 3]
    y = np.array([w.step_seconds for w in ws])  # [windows]
    n = np.array([w.steps for w in ws])  # [windows]
    sigma = sigma_rel * y.sum() / n.sum()
    cov = sigma**2 * np.linalg.inv(x.T @ (x / n[:, None]))  # [3, 3]
    return float(np.sqrt(cov[1, 1]) / TRUTH[1])


@pytest.mark.parametrize("ctx_spread", [0.03, 0.15])
def test_collinear_steps_price_a_batched_token_within_ten_percent(ctx_spread):
    """0.03: the KV slope is not identified next to the batched one (the fit used to hold it at the prior's
    value, and the batched slope took the KV tokens' cost: +125..130% on these seeds); 0.15: it is, but barely (the
    fit's batched slope was off by -51..+127% on these seeds). Either way the pair is fitted at the profile's
    ratio."""
    errors = []
    for seed in range(4):
        ws = collinear_windows(np.random.default_rng(seed), 300, ctx_spread=ctx_spread)
        assert ols_relative_se(ws) > 0.1  # the design cannot price a batched token to 10% by itself
        c = fitted(ws).costs()
        assert c.trusted
        assert set(c.tied) == {"compute_s_per_token", "kv_s_per_token"}
        errors.append(c.coefficients["compute_s_per_token"] / TRUTH[1] - 1.0)
        # the pair keeps the profile's ratio
        assert c.coefficients["kv_s_per_token"] / c.coefficients["compute_s_per_token"] == pytest.approx(
            THETA0[2] / THETA0[1])
    assert max(abs(e) for e in errors) < 0.1, errors


def test_data_that_separate_the_slopes_fit_both_freely():
    """Contexts that vary 64..1024 across windows and a third of the requests drafting: batched and KV
    tokens are no longer collinear, and a truth whose KV/batched ratio is 4x the profile's is found."""
    truth = TRUTH.copy()
    truth[2] *= 4.0
    ws = collinear_windows(np.random.default_rng(7), 400, truth=truth, ctx=(64.0, 1024.0), draft_share=0.3,
                           ctx_spread=0.2, sigma_rel=0.1)
    c = fitted(ws).costs()
    assert c.tied == ()
    assert c.fitted["compute_s_per_token"] and c.fitted["kv_s_per_token"]
    assert c.coefficients["compute_s_per_token"] == pytest.approx(truth[1], rel=0.1)
    assert c.coefficients["kv_s_per_token"] == pytest.approx(truth[2], rel=0.1)


def test_collinear_data_that_contradict_the_ratio_are_not_tied():
    """The same collinear design with a profile whose KV/batched ratio is 30x off: at the profile's ratio
    the level of the data cannot be matched over the whole range of loads, the Wald test rejects the
    ratio, and both slopes are fitted from the data."""
    ws = collinear_windows(np.random.default_rng(3), 300, ctx_spread=0.15, sigma_rel=0.05)
    t = PROFILE.target
    far = replace(PROFILE, target=StepTimeModel(overhead_s=t.overhead_s, kv_s_per_token=30 * t.kv_s_per_token,
                                                compute_s_per_token=t.compute_s_per_token / 30, additive=True))
    c = fitted(ws, far).costs()
    assert "compute_s_per_token" not in c.tied
    assert c.coefficients["compute_s_per_token"] == pytest.approx(TRUTH[1], rel=0.25)
