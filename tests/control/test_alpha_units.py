"""The alpha table's evidence is honest about its independent units (issue 10, estimators).

1. Per-request weighting: acceptance is correlated within a request, so requests, not tokens, are the
   independent units. With per-request rates p_i ~ Beta(mu nu, (1 - mu) nu) and n trials each (a beta-binomial,
   intra-request correlation rho = 1 / (nu + 1)), the pooled estimate over R requests has the closed-form
   variance mu (1 - mu) (1 + (n - 1) rho) / (R n). The table's claimed variance (its posterior std^2) must be
   that, and so must the spread of its estimate across independent replications.
2. Cross-class evidence: a class without data of its own is planned at its table prior moved, on the logit
   scale, by the proposer's evidence on the worker's other classes (closed form in AlphaTable's module doc),
   and its own data outweighs that as it accumulates.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptspec.control.alpha import ANY_CLASS, AlphaTable, KeyStats, prior_alpha

MU, NU, N_TRIALS, R = 0.6, 9.0, 64, 40  # rho = 1 / (NU + 1) = 0.1
RHO = 1.0 / (NU + 1.0)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _expit(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def _requests(rng: np.random.Generator, r: int) -> np.ndarray:
    """[r] accepted counts of r requests of N_TRIALS trials, each at its own Beta-drawn rate."""
    p = rng.beta(MU * NU, (1.0 - MU) * NU, size=r)  # [r]
    return rng.binomial(N_TRIALS, p)  # [r]


def _fed(xs: np.ndarray, request: bool, rho0: float = RHO) -> AlphaTable:
    # a negligible prior (so the posterior is the data's) and no forgetting
    t = AlphaTable(prior={"draft": {"default": MU}}, prior_strength=1e-6, half_life_tokens=None,
                   request_correlation=rho0)
    for x in xs:
        t.observe_counts("w", "draft", "code", float(x), float(N_TRIALS - x), now=0.0, request=request)
    return t


def test_claimed_variance_is_the_beta_binomial_variance_of_the_pooled_estimate():
    closed = MU * (1.0 - MU) * (1.0 + (N_TRIALS - 1) * RHO) / (R * N_TRIALS)
    rng = np.random.default_rng(7)
    means, claimed, naive = [], [], []
    for _ in range(2000):
        xs = _requests(rng, R)
        est = _fed(xs, request=True).get("w", "draft", "code")
        means.append(est.mean)
        claimed.append(est.std ** 2)
        naive.append(_fed(xs, request=False).get("w", "draft", "code").std ** 2)
    # the estimate is about the pooled rate (equal n per request: weights equal but for the online rho)
    assert means[-1] == pytest.approx(float(xs.sum()) / (R * N_TRIALS), rel=0.01)
    emp = float(np.var(means, ddof=1))
    # sample variance of 2000 draws: relative sd sqrt(2 / 1999) = 3.2%; 6 sd = 19%
    assert emp == pytest.approx(closed, rel=0.19)
    # the table claims what it has: its posterior variance matches the spread across requests (the
    # online rho estimate and the plug-in mean make it a few % off the closed form)
    assert float(np.mean(claimed)) == pytest.approx(closed, rel=0.10)
    # counting every token as a trial claims 1 + (n - 1) rho = 7.3x too little variance
    assert float(np.mean(naive)) == pytest.approx(closed / (1.0 + (N_TRIALS - 1) * RHO), rel=0.10)


def test_intra_request_correlation_is_estimated_online():
    rng = np.random.default_rng(3)
    st = KeyStats()
    for x in _requests(rng, 4000):
        st.note_request(float(x), float(N_TRIALS))
    # the ANOVA estimator is consistent; its sd at 4000 requests of 64 is ~0.004; the 8 pseudo-requests of
    # the prior (0.3 here) move it by ~0.0004
    assert st.correlation(0.3, 8.0) == pytest.approx(RHO, abs=0.02)
    # independent trials (one rate for every request): rho ~ 0
    st0 = KeyStats()
    for x in rng.binomial(N_TRIALS, MU, size=4000):
        st0.note_request(float(x), float(N_TRIALS))
    assert st0.correlation(0.3, 8.0) < 0.01
    assert KeyStats().correlation(0.25, 8.0) == 0.25  # no requests yet: the prior


def test_one_long_request_weighs_like_a_few_trials_not_hundreds():
    t = AlphaTable(prior_strength=20.0, half_life_tokens=None, request_correlation=0.1)
    # one unlucky request: 38 of 140 trials accepted (0.27) where the prior says 0.75
    t.observe_counts("w", "eagle", "math", 38.0, 102.0, now=0.0, request=True)
    est = t.get("w", "eagle", "math")
    n_eff = 140.0 / (1.0 + 139.0 * 0.1)
    m0 = prior_alpha("eagle", "math")
    a, b = 38.0 / 140.0 * n_eff + m0 * 20.0, 102.0 / 140.0 * n_eff + (1.0 - m0) * 20.0
    assert est.mean == pytest.approx(a / (a + b))
    assert est.std == pytest.approx(math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0))))
    assert est.n == pytest.approx(140.0)  # n stays the drafted trials (tokens) behind the key
    # request counts survive the sharing round trip (Redis) and merge
    d = t.stats("w", "eagle", "math")
    assert KeyStats.from_dict(d).req_r == 1.0
    t2 = AlphaTable.from_dict(t.to_dict())
    assert t2.get("w", "eagle", "math").mean == pytest.approx(est.mean)


def test_a_class_without_data_borrows_the_proposers_evidence_on_other_classes():
    k = 20.0
    t = AlphaTable(prior_strength=k, half_life_tokens=None)
    # n-gram lookup hits far more on this deployment than the table says, on code and on chat
    s_code, f_code, s_chat, f_chat = 300.0, 60.0, 100.0, 100.0
    t.observe_counts("w", "ngram", "code", s_code, f_code, now=0.0)
    t.observe_counts("w", "ngram", "chat", s_chat, f_chat, now=0.0)
    mc, mh, ms = (prior_alpha("ngram", c) for c in ("code", "chat", "summarize"))
    d_code = _logit((s_code + mc * k) / (s_code + f_code + k)) - _logit(mc)
    d_chat = _logit((s_chat + mh * k) / (s_chat + f_chat + k)) - _logit(mh)
    n_code, n_chat = s_code + f_code, s_chat + f_chat
    shift = (n_code * d_code + n_chat * d_chat) / (n_code + n_chat + k)
    est = t.get("w", "ngram", "summarize")
    assert est.n == 0.0
    assert est.mean == pytest.approx(_expit(_logit(ms) + shift), rel=1e-9)
    assert est.mean > ms  # the evidence says lookup hits more here than the table thinks
    # leave-one-out: code's prior uses chat's evidence only
    shift_code = n_chat * d_chat / (n_chat + k)
    assert t.prior_mean("w", "ngram", "code") == pytest.approx(_expit(_logit(mc) + shift_code), rel=1e-9)
    # other proposers, workers and the sampled regime's own counts are untouched
    assert t.get("w", "eagle", "summarize").mean == pytest.approx(prior_alpha("eagle", "summarize"))
    assert t.get("w2", "ngram", "summarize").mean == pytest.approx(ms)
    # the class's own data outweighs the borrowed level as it accumulates: 4000 trials at 0.2
    m0 = est.mean
    t.observe_counts("w", "ngram", "summarize", 800.0, 3200.0, now=0.0)
    own = t.get("w", "ngram", "summarize")
    assert own.mean == pytest.approx((800.0 + m0 * k) / (4000.0 + k), rel=1e-9)
    assert own.mean == pytest.approx(0.2, abs=0.005)


def test_engine_wide_counters_stay_the_prior_when_present():
    t = AlphaTable(prior_strength=20.0, half_life_tokens=None)
    t.observe_counts("w", "ngram", "code", 300.0, 60.0, now=0.0)
    t.observe_counts("w", "ngram", ANY_CLASS, 50.0, 50.0, now=0.0)
    m0 = prior_alpha("ngram", "summarize")
    assert t.prior_mean("w", "ngram", "summarize") == pytest.approx((50.0 + m0 * 20.0) / (100.0 + 20.0))


def test_cached_estimates_follow_new_evidence_on_other_classes():
    t = AlphaTable(prior_strength=20.0, half_life_tokens=None)
    before = t.get("w", "ngram", "translate").mean
    t.observe_counts("w", "ngram", "code", 200.0, 20.0, now=0.0)
    mid = t.get("w", "ngram", "translate").mean
    t.observe_counts("w", "ngram", "chat", 200.0, 20.0, now=0.0)
    after = t.get("w", "ngram", "translate").mean
    assert before < mid < after
    t.forget("w")
    assert t.get("w", "ngram", "translate").mean == pytest.approx(before)
