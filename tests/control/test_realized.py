"""Realized-rate corrections (control/realized.py): the model's per-proposer error at batch 1, measured, and the
goodput policy ranking its batch-1 plans with it."""

from __future__ import annotations

import math
import random

import pytest

from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.realized import RealizedRates
from adaptspec.control.types import WorkerState


def test_corrections_are_the_implied_plain_rates_relative_to_their_requests_weighted_geometric_mean():
    rates = RealizedRates(half_life=1e12, max_factor=10.0, prior_spread_requests=0.0)  # a spread only the data show
    # the model prices A at x2.0 and B at x1.5; both really decode 300 tok/s: plain rates implied 150 and 200
    for _ in range(3):
        assert rates.observe("w", "code", "A", tokens=60, seconds=0.2, expected_speedup=2.0)
    assert rates.correction("w", "code", "A") == 1.0  # one proposer alone: nothing to compare it with
    rates.observe("w", "code", "B", tokens=60, seconds=0.2, expected_speedup=1.5)
    assert rates.corrections("w", "code") == {}  # B's one request has no spread to judge it by: nothing is sure
    rates.observe("w", "code", "B", tokens=60, seconds=0.2, expected_speedup=1.5)
    mean = math.exp((3 * math.log(150.0) + 2 * math.log(200.0)) / 5)
    # no spread within either proposer: the whole discrepancy is sure
    assert rates.correction("w", "code", "A") == pytest.approx(150.0 / mean)
    assert rates.correction("w", "code", "B") == pytest.approx(200.0 / mean)
    # so the corrected prices agree with what was measured: B is as fast as A
    assert 2.0 * rates.correction("w", "code", "A") == pytest.approx(1.5 * rates.correction("w", "code", "B"))
    assert rates.correction("w", "code", "C") == 1.0  # never run: no evidence
    assert rates.correction("w", "chat", "A") == 1.0 and rates.correction("v", "code", "A") == 1.0


def test_only_the_part_beyond_z_standard_errors_is_applied():
    """A's requests scatter (ratios 100 and 200 alternately, equal tokens): mean 150, token-weighted variance 2500,
    over n_eff = 2k requests; B measures 120 on every request. The class mean is the requests-weighted geometric
    mean, and A's correction is its log discrepancy less z standard errors of log(150) (delta method)."""
    for k in (2, 8, 50):
        rates = RealizedRates(half_life=1e12, max_factor=10.0, z=2.0, prior_spread_requests=0.0)
        for _ in range(k):
            rates.observe("w", "c", "A", 60, 60 / 100.0, 1.0)
            rates.observe("w", "c", "A", 60, 60 / 200.0, 1.0)
            rates.observe("w", "c", "B", 60, 60 / 120.0, 1.0)
        ref = (2 * k * math.log(150.0) + k * math.log(120.0)) / (3 * k)
        se_a = math.sqrt(2500.0 / (2 * k)) / 150.0
        want_a = max(math.log(150.0) - ref - 2.0 * se_a, 0.0)
        got = rates.corrections("w", "c")
        assert math.log(got.get("A", 1.0)) == pytest.approx(want_a, abs=1e-9), k
        assert math.log(got["B"]) == pytest.approx(math.log(120.0) - ref)  # B has no spread: all of it is sure
    assert want_a > 0.0
    # with the prior spread (30%, worth 4 requests) two or three requests that happen to agree are not sure either
    cautious = RealizedRates()
    for _ in range(3):
        cautious.observe("w", "c", "A", 60, 0.2, 2.0)
        cautious.observe("w", "c", "B", 60, 0.2, 1.5)
    assert cautious.corrections("w", "c") == {}
    for _ in range(30):
        cautious.observe("w", "c", "A", 60, 0.2, 2.0)
        cautious.observe("w", "c", "B", 60, 0.2, 1.5)
    assert cautious.correction("w", "c", "A") < 1.0 < cautious.correction("w", "c", "B")


def test_forgetting_and_the_cap():
    rates = RealizedRates(half_life=1e12, max_factor=1.5, prior_spread_requests=0.0)
    for _ in range(20):  # 8x apart, as many requests each, no spread: +-2.8x from their mean, held at the cap
        rates.observe("w", "c", "A", 60, 0.2, 1.0)
        rates.observe("w", "c", "B", 60, 1.6, 1.0)
    assert rates.correction("w", "c", "A") == pytest.approx(1.5)
    assert rates.correction("w", "c", "B") == pytest.approx(1.0 / 1.5)
    forgetful = RealizedRates(half_life=10.0)
    forgetful.observe("w", "c", "A", 60, 0.2, 1.0)
    for _ in range(10):
        forgetful.observe("w", "c", "B", 60, 0.2, 1.0)
    assert forgetful.evidence("w", "c")["A"] == pytest.approx(0.5)  # ten of the class's requests later: half
    assert forgetful.evidence("w", "c")["B"] == pytest.approx(sum(0.5 ** (k / 10.0) for k in range(10)))


@pytest.mark.parametrize("bad", [dict(proposer="none"), dict(tokens=2), dict(seconds=0.0),
                                 dict(seconds=math.inf), dict(expected_speedup=0.0), dict(expected_speedup=math.nan)])
def test_plain_requests_and_unusable_measurements_teach_nothing(bad):
    rates = RealizedRates()
    args = dict(worker="w", content_class="c", proposer="A", tokens=60, seconds=0.2, expected_speedup=1.5) | bad
    assert not rates.observe(**args)
    assert rates.evidence("w", "c") == {}


def test_a_right_model_moves_nothing_whatever_the_noise():
    """Two proposers the model prices right (the same implied plain rate), each request's rate noisy (log-normal,
    sd 0.3): a correction appears only where the noise beats z = 2 standard errors, about 2.3% of the time per
    proposer and look; over 400 looks it stays rare and small."""
    rng = random.Random(5)
    rates = RealizedRates()
    moved = []
    for _ in range(400):
        p, x = rng.choice((("A", 1.8), ("B", 1.3)))
        rate = 300.0 * x * math.exp(rng.gauss(0.0, 0.3))
        rates.observe("w", "c", p, 60, 60 / rate, x)
        moved += [abs(math.log(rates.correction("w", "c", q))) for q in "AB"]
    assert sum(m > 0 for m in moved) < 0.1 * len(moved)
    assert max(moved) < 0.1


def _workers(load: float = 0.0, proposers: tuple[str, ...] = ("ngram", "eagle")) -> list[WorkerState]:
    return [WorkerState("w0", proposers=proposers, running=load, inflight=int(load), profile="cpu-tiny", max_gamma=8)]


def test_goodput_ranks_batch_one_plans_by_what_they_measured():
    policy = build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)
    alphas = AlphaTable()
    for _ in range(20):  # both keys with evidence
        alphas.observe("w0", "eagle", "code", draft_tokens=300, accepted_tokens=240, steps=100)
        alphas.observe("w0", "ngram", "code", draft_tokens=300, accepted_tokens=150, steps=100, num_drafts=60)
    first = policy.decide("code", _workers(), alphas)
    assert first.rate_evidence and first.gamma > 0 and "measured" not in first.reason
    other = "ngram" if first.proposer == "eagle" else "eagle"
    alone = policy.decide("code", _workers(proposers=(other,)), alphas)  # the other's best plan, as priced
    assert alone.proposer == other and alone.expected_speedup < first.expected_speedup
    cap = policy.rates.max_factor
    assert first.expected_speedup / cap < alone.expected_speedup * cap  # corrections at the cap can flip it
    # the chosen proposer measures at 0.3 of its price, the other as priced: both corrections reach the cap
    for _ in range(20):
        policy.rates.observe("w0", "code", first.proposer, 60, 60 / (300 * first.expected_speedup * 0.3),
                             first.expected_speedup)
        policy.rates.observe("w0", "code", other, 60, 60 / (300 * alone.expected_speedup), alone.expected_speedup)
    second = policy.decide("code", _workers(), alphas)
    assert second.proposer == other and second.rate_evidence and "measured x1.50" in second.reason, second
    # the margin over plain decoding is the model's: the correction is relative between proposers
    assert second.expected_speedup == pytest.approx(alone.expected_speedup)
    # at load the batch-wide planning prices, not the batch-1 measurements: no evidence, no correction
    loaded = policy.decide("code", _workers(load=12.0), alphas)
    assert not loaded.rate_evidence and "measured" not in loaded.reason


def test_probes_are_no_evidence():
    """Thin keys are probed at posterior draws (a price that is not the model's): those requests teach nothing."""
    policy = build_policy(parse_config({"policy": {"kind": "goodput"}}).policy)
    workers = _workers(proposers=("ngram", "eagle", "draft"))
    seen = [policy.decide(c, workers, AlphaTable()) for c in ("code", "math", "chat") for _ in range(100)]
    probes = [d for d in seen if "probe" in d.reason]
    assert probes and not any(d.rate_evidence for d in probes)
    assert all(d.rate_evidence for d in seen if "probe" not in d.reason)


def test_measured_false_is_the_models_price_alone():
    policy = build_policy(parse_config({"policy": {"kind": "goodput", "measured": False}}).policy)
    assert policy.rates is None
    d = policy.decide("code", _workers(), AlphaTable())
    assert not d.rate_evidence and "measured" not in d.reason
    on = build_policy(parse_config({"policy": {"kind": "goodput"}}).policy)
    on.adopt(policy)  # a reload from a config without it keeps its own, empty
    assert on.rates is not None
