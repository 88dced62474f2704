import math

import numpy as np
import pytest

from adaptspec.control import estimators as est
from adaptspec.control.config import EstimatorConfig
from adaptspec.control.costmodel import expected_tokens
from adaptspec.control.types import AlphaSource


def accepted_per_step(rng, rates, gamma, n_steps):
    """Accepted drafts of n_steps verification steps; rates: scalar alpha or conditional rates per position."""
    r = np.broadcast_to(np.asarray(rates, dtype=float)[:gamma], (gamma,)) if np.ndim(rates) else np.full(gamma, rates)
    ok = rng.random((n_steps, gamma)) < r  # [steps, gamma]
    return np.cumprod(ok, axis=1).sum(axis=1)  # leading run of acceptances


def feed_requests(table, rng, alpha, gamma, n_requests, steps=25, key=("w", "draft", "code"), t0=0.0):
    for i in range(n_requests):
        acc = accepted_per_step(rng, alpha, gamma, steps)
        table.observe(*key, draft_tokens=steps * gamma, accepted_tokens=int(acc.sum()), now=t0 + i,
                      steps=steps, gamma=gamma)


def test_is_an_alpha_source():
    source: AlphaSource = est.AlphaTable()
    e = source.get("w", "draft", "code")
    assert (e.mean, e.n) == (pytest.approx(0.78), 0.0)


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.7, 0.9])
@pytest.mark.parametrize("gamma", [2, 4, 7])
def test_per_request_estimator_converges(alpha, gamma):
    rng = np.random.default_rng(1234)
    table = est.AlphaTable(half_life_tokens=None)
    feed_requests(table, rng, alpha, gamma, 1500)
    e = table.get("w", "draft", "code")
    assert abs(e.mean - alpha) < 0.02
    assert e.std < 0.01 and e.n > 10_000


def test_accepted_over_drafted_is_biased_low_and_we_are_not():
    rng = np.random.default_rng(7)
    acc = accepted_per_step(rng, 0.8, 4, 100_000)
    naive = acc.sum() / (4 * len(acc))
    assert naive == pytest.approx(0.8 * (1 - 0.8**4) / (0.2 * 4), abs=0.01)  # 0.59
    assert est.alpha_from_steps(acc.sum(), len(acc), 4) == pytest.approx(0.8, abs=0.01)
    biased = est.AlphaTable(half_life_tokens=None)
    biased.observe("w", "draft", "chat", 4 * len(acc), int(acc.sum()))  # no step count: the fallback
    assert biased.get("w", "draft", "chat").mean == pytest.approx(naive, abs=0.01)


def test_steps_with_no_drafts_are_excluded_by_gamma():
    rng = np.random.default_rng(3)
    table = est.AlphaTable(half_life_tokens=None)
    for _ in range(800):  # n-gram style: 20 drafting steps + 10 steps where no match was found
        acc = accepted_per_step(rng, 0.6, 3, 20)
        table.observe("w", "ngram", "summarize", 60, int(acc.sum()), steps=30, gamma=3)
    assert table.get("w", "ngram", "summarize").mean == pytest.approx(0.6, abs=0.02)


def test_follows_a_step_change():
    rng = np.random.default_rng(99)
    hl = 4096
    table = est.AlphaTable(half_life_tokens=hl)
    feed_requests(table, rng, 0.85, 4, 600)  # 100 draft tokens a request
    assert table.get("w", "draft", "code").mean == pytest.approx(0.85, abs=0.02)
    feed_requests(table, rng, 0.45, 4, 41)  # one half-life of draft tokens
    mid = table.get("w", "draft", "code").mean
    assert 0.5 < mid < 0.8
    feed_requests(table, rng, 0.45, 4, 8 * 41)
    assert table.get("w", "draft", "code").mean == pytest.approx(0.45, abs=0.02)


def test_the_default_half_life_averages_over_the_requests_behind_a_key():
    """Acceptance differs several-fold from request to request: a lookup key sees copying requests (every
    position accepted at 0.9) and requests that copy nothing (0.2), here in runs of 10 of each kind. The
    default forgetting must average over them: the estimate, read at the end of every run, stays within 0.05
    of the mix's mean instead of following each run (a key drafting 8 tokens a step spends ~800 draft tokens
    a request; at the earlier default of 8192 it remembered ~10 requests and swung by +-0.09 here)."""
    table = est.AlphaTable.from_config(EstimatorConfig(), clock=lambda: 0.0)
    gamma, drafts = 8, 100  # per request: 100 drafting steps at gamma 8 (800 draft tokens)
    seen, pooled_s, pooled_f = [], 0.0, 0.0
    for run in range(20):
        rate = 0.9 if run % 2 == 0 else 0.2
        reach = [drafts * rate ** j for j in range(gamma)]  # expected steps that drafted position j ...
        acc = [drafts * rate ** (j + 1) for j in range(gamma)]  # ... and had it accepted
        for _ in range(10):
            table.observe("w", "ngram", "summarize", drafts * gamma, sum(acc), acc, num_drafts=drafts)
        pooled_s += sum(acc)
        pooled_f += sum(r - a for r, a in zip(reach, acc, strict=True))
        if run >= 4:  # past the first runs (the prior's share)
            seen.append(table.get("w", "ngram", "summarize").mean)
    mix = pooled_s / (pooled_s + pooled_f)
    assert max(abs(m - mix) for m in seen) < 0.05, (mix, min(seen), max(seen))


def test_time_half_life_forgets_idle_keys():
    t = [0.0]
    table = est.AlphaTable(half_life_tokens=None, half_life_s=60.0, clock=lambda: t[0])
    rng = np.random.default_rng(5)
    feed_requests(table, rng, 0.95, 4, 300, t0=0.0)
    t[0] = 300.0
    assert table.get("w", "draft", "code").mean > 0.93
    t[0] = 300.0 + 20 * 60.0  # twenty half-lives later: back to (almost) the prior
    e = table.get("w", "draft", "code")
    assert e.n < 0.05 and e.mean == pytest.approx(est.prior_alpha("draft", "code"), abs=0.01)


def test_prior_for_unseen_keys():
    table = est.AlphaTable(prior={"ngram": {"chat": 0.12}}, prior_strength=10)
    e = table.get("w9", "ngram", "chat")
    assert e.mean == pytest.approx(0.12) and e.n == 0 and e.per_position is None
    assert e.std == pytest.approx(math.sqrt(0.12 * 0.88 / 11))
    assert table.get("w9", "ngram", "summarize").mean == pytest.approx(0.60)  # built-in table
    assert table.get("w9", "draft", "structured").mean == pytest.approx(0.86)
    assert table.get("w9", "medusa", "chat").mean == 0.5


def vllm_scrape(cum, position_counts):
    yield (est.VLLM_DRAFTS, {"model_name": "m"}, cum["drafts"])
    yield (est.VLLM_DRAFT_TOKENS, {"model_name": "m"}, cum["tokens"])
    yield (est.VLLM_ACCEPTED, {"model_name": "m"}, cum["accepted"])
    for i, c in enumerate(position_counts):
        yield (est.VLLM_PER_POS, {"model_name": "m", "position": str(i)}, c)
    yield ("vllm:num_requests_running", {"model_name": "m"}, 3.0)


def test_vllm_counters_per_position_with_reset():
    rates, gamma = (0.84, 0.60, 0.39, 0.27), 4
    rng = np.random.default_rng(2024)
    table, tracker = est.AlphaTable(half_life_tokens=None), est.CounterTracker()
    cum = {"drafts": 0.0, "tokens": 0.0, "accepted": 0.0}
    pos = np.zeros(gamma)
    truth = {"accepted": 0.0, "drafts": 0.0}
    for scrape in range(120):
        if scrape == 60:  # engine restart: every counter starts again from zero
            cum = dict.fromkeys(cum, 0.0)
            pos = np.zeros(gamma)
        acc = accepted_per_step(rng, rates, gamma, 1000)
        cum["drafts"] += len(acc)
        cum["tokens"] += gamma * len(acc)
        cum["accepted"] += acc.sum()
        pos += [(acc > i).sum() for i in range(gamma)]
        if scrape > 0:  # the first scrape is the baseline
            truth["accepted"] += acc.sum()
            truth["drafts"] += len(acc)
        est.ingest_vllm(table, tracker, "w", vllm_scrape(cum, pos), proposer="draft", now=float(scrape))
    st = table.stats("w", "draft", est.ANY_CLASS)
    assert st["s"] == pytest.approx(truth["accepted"])  # nothing lost or double counted across the reset
    assert st["pos_n"][0] == pytest.approx(truth["drafts"])
    e = table.get("w", "draft", est.ANY_CLASS)
    for got, want in zip(e.per_position, rates, strict=True):
        assert got == pytest.approx(want, abs=0.02)
    reach = np.cumprod(rates)
    pooled = reach.sum() / (reach.sum() + 1 - reach[-1])
    assert e.mean == pytest.approx(pooled, abs=0.02)
    # classes with no data of their own take the worker's engine-wide estimate as their prior
    assert table.get("w", "draft", "chat").mean == pytest.approx(e.mean, abs=1e-4)
    assert table.get("other", "draft", "chat").mean == pytest.approx(est.prior_alpha("draft", "chat"))


def test_by_class_counters_go_to_their_keys():
    rng = np.random.default_rng(11)
    table, tracker = est.AlphaTable(half_life_tokens=None), est.CounterTracker()
    truth = {("code", "draft"): 0.8, ("chat", "ngram"): 0.2}
    cum = {k: [0.0, 0.0, 0.0] for k in truth}
    for scrape in range(60):
        samples = []
        for (cls, prop), alpha in truth.items():
            acc = accepted_per_step(rng, alpha, 3, 500)
            c = cum[(cls, prop)]
            c[0] += len(acc)
            c[1] += 3 * len(acc)
            c[2] += acc.sum()
            labels = {"content_class": cls, "proposer": prop}
            samples += [(est.BY_CLASS_DRAFTS, labels, c[0]), (est.BY_CLASS_DRAFT_TOKENS, labels, c[1]),
                        (est.BY_CLASS_ACCEPTED, labels, c[2])]
        est.ingest_vllm(table, tracker, "w", samples, proposer="draft", now=float(scrape))
    for (cls, prop), alpha in truth.items():
        assert table.get("w", prop, cls).mean == pytest.approx(alpha, abs=0.02)


def test_sglang_accept_length_gauge():
    table, tracker = est.AlphaTable(half_life_tokens=None), est.CounterTracker()
    length = expected_tokens(0.7, 4)
    tokens = 0.0
    for scrape in range(50):
        tokens += 3000.0
        n = est.ingest_sglang(table, tracker, "s", [(est.SGLANG_ACCEPT_LENGTH, {}, length),
                                                   (est.SGLANG_GEN_TOKENS, {}, tokens)], "eagle", 4, now=scrape)
        assert n == (1 if scrape else 0)
    assert table.get("s", "eagle", est.ANY_CLASS).mean == pytest.approx(0.7, abs=0.02)
    # an idle engine (no new tokens) adds nothing even though the gauge still reads the old value
    before = table.stats("s", "eagle", est.ANY_CLASS)
    est.ingest_sglang(table, tracker, "s", [(est.SGLANG_ACCEPT_LENGTH, {}, length),
                                            (est.SGLANG_GEN_TOKENS, {}, tokens)], "eagle", 4, now=99)
    assert table.stats("s", "eagle", est.ANY_CLASS) == before


def test_counter_tracker():
    tr = est.CounterTracker()
    assert tr.delta("a", 10) == 0  # baseline
    assert tr.delta("a", 15) == 5
    assert tr.delta("a", 15) == 0
    assert tr.delta("a", 4) == 4  # reset
    assert tr.delta("a", 9) == 5
    tr.delta(("w1", "x"), 3)
    tr.forget("w1")
    assert tr.delta(("w1", "x"), 7) == 0
    # after the first scrape, a series seen for the first time was created since: from zero
    tr.scraped()
    assert tr.delta(("w1", "new-class"), 6) == 6
    assert tr.delta(("w1", "new-class"), 8) == 2


def test_sufficient_statistics_roundtrip_and_merge():
    rng = np.random.default_rng(8)
    a, b, both = (est.AlphaTable(half_life_tokens=None) for _ in range(3))
    for i in range(200):
        acc = accepted_per_step(rng, 0.7, 4, 10)
        table = a if i % 2 else b
        for t in (table, both):
            t.observe("w", "draft", "math", 40, int(acc.sum()), [float((acc > j).sum()) for j in range(4)],
                      now=float(i), num_drafts=10)
    merged = est.AlphaTable.from_dict(a.to_dict(), half_life_tokens=None)
    merged.load_dict(b.to_dict(), merge=True)
    sm, sb = merged.stats("w", "draft", "math"), both.stats("w", "draft", "math")
    for k in ("s", "f"):
        assert sm[k] == pytest.approx(sb[k])
    assert sm["pos_n"] == pytest.approx(sb["pos_n"]) and sm["t"] == sb["t"]
    assert sm["reports"] == sb["reports"] == 200  # one per observation, summed across replicas
    d = est.decay_stats(sb, 0.5)
    assert d["s"] == pytest.approx(sb["s"] / 2) and d["pos_a"] == pytest.approx([x / 2 for x in sb["pos_a"]])
    assert d["reports"] == pytest.approx(100.0)
    m = est.merge_stats({"s": 1, "f": 2, "pos_n": [3], "pos_a": [1], "t": 5, "steps": 4, "drafts": 3, "reports": 2},
                        {"s": 1, "f": 0, "t": None, "steps": 6, "drafts": 1})  # a dict from before `reports`
    assert m == {"s": 2.0, "f": 2.0, "pos_n": [3.0], "pos_a": [1.0], "t": 5.0, "steps": 10.0, "drafts": 4.0,
                 "reports": 2.0}
    roundtrip = est.AlphaTable.from_dict(both.to_dict(), half_life_tokens=None)
    assert roundtrip.get("w", "draft", "math") == both.get("w", "draft", "math")


@pytest.mark.parametrize("d, a", [(-1, 0), (3, 5)])
def test_bad_stats_raise(d, a):
    with pytest.raises(ValueError):
        est.AlphaTable().observe("w", "draft", "chat", d, a)


def test_cached_estimates_follow_new_data():
    table = est.AlphaTable(half_life_tokens=None)
    first = table.get("w", "draft", "chat")
    table.observe("w", "draft", est.ANY_CLASS, 400, 100, steps=100, gamma=4)
    pooled_prior = table.get("w", "draft", "chat")
    assert pooled_prior.mean < first.mean - 0.1  # the class prior now comes from the worker-wide data
    table.observe("w", "draft", "chat", 400, 390, steps=100, gamma=4)
    assert table.get("w", "draft", "chat").mean > pooled_prior.mean + 0.3
    table.load_dict({})
    assert table.get("w", "draft", "chat") == first


def test_mixed_gamma_per_position_counters_fall_back_to_the_step_estimator():
    rng = np.random.default_rng(21)
    table = est.AlphaTable(half_life_tokens=None)
    for _ in range(300):  # one scrape interval: half the drafts at gamma 2, half at gamma 6
        a2, a6 = accepted_per_step(rng, 0.7, 2, 20), accepted_per_step(rng, 0.7, 6, 20)
        pos = [float((a2 > i).sum() + (a6 > i).sum()) for i in range(6)]
        table.observe("w", "draft", "chat", 20 * 2 + 20 * 6, float(a2.sum() + a6.sum()), pos, num_drafts=40)
    e = table.get("w", "draft", "chat")
    assert e.per_position is None
    assert e.mean == pytest.approx(0.7, abs=0.05)  # gamma = D/S = 4 stands in for the mix


def test_propose_rate_from_steps_and_drafts():
    """n-gram lookup drafts only on some steps: drafts / steps, shrunk toward 1 by a few pseudo-steps."""
    t = est.AlphaTable(half_life_tokens=None)
    assert t.get("w", "ngram", "chat").propose_rate == 1.0  # no data: every step drafts (cautious)
    rng = np.random.default_rng(3)
    steps = drafts = 0
    for _ in range(300):
        s_i = 40
        d_i = int(rng.binomial(s_i, 0.35))
        steps, drafts = steps + s_i, drafts + d_i
        t.observe_counts("w", "ngram", "chat", 0.8 * d_i, 0.2 * d_i, [d_i], [0.8 * d_i], steps=s_i, drafts=d_i)
    e = t.get("w", "ngram", "chat")
    assert e.propose_rate == pytest.approx((drafts + 8) / (steps + 8))
    sd = np.sqrt(0.35 * 0.65 / steps)
    assert abs(e.propose_rate - 0.35) < 6 * sd + 8 / steps
    assert est.AlphaTable.from_dict(t.to_dict(), half_life_tokens=None).get("w", "ngram", "chat") == e
    with pytest.raises(ValueError, match="step counts"):
        t.observe_counts("w", "ngram", "chat", 1, 0, steps=2, drafts=3)


# -- sampling regime -------------------------------------------------------------------------------------
def test_sampling_regime_of_a_request():
    assert est.sampling_regime(0) == est.sampling_regime(0.0) == est.sampling_regime(0.7, top_k=1) == "greedy"
    assert est.sampling_regime(0.7) == est.sampling_regime(1, top_k=50) == "sampled"
    assert est.sampling_regime(None) == "sampled"  # absent: OpenAI's default temperature 1
    assert est.sampling_regime(True) == est.sampling_regime("0") == "sampled"  # not numbers: the default


def test_sampled_keys_have_lower_priors_and_their_own_counts():
    t = est.AlphaTable(clock=lambda: 0.0)
    for p, factor in (("draft", 0.85), ("eagle", 0.85), ("ngram", 0.75)):
        for cls in ("code", "chat"):
            g, s = t.get("w", p, cls), t.get("w", p, cls, regime="sampled")
            assert s.mean == pytest.approx(factor * g.mean) and s.mean < g.mean and s.n == 0
    # sampled feedback moves the sampled key only
    for _ in range(50):
        t.observe("w", "draft", "code", 4, 1, regime="sampled", gamma=4)
    assert t.get("w", "draft", "code").mean == pytest.approx(0.78)  # the greedy prior, untouched
    s = t.get("w", "draft", "code", regime="sampled")
    assert s.n > 50 and s.mean < 0.6  # 1 of 4 accepted per step: alpha ~0.5 (truncated runs)
    assert t.stats("w", "draft", "code") is None
    assert t.stats("w", "draft", "code", regime="sampled")["s"] == pytest.approx(50, rel=0.02)  # (token decay)


def test_greedy_evidence_is_the_sampled_prior():
    t = est.AlphaTable(clock=lambda: 0.0)
    before = t.get("w", "ngram", "chat", regime="sampled").mean  # cached
    for _ in range(200):
        t.observe("w", "ngram", "chat", 4, 4, steps=1)  # greedy requests accept everything
    greedy = t.get("w", "ngram", "chat").mean
    after = t.get("w", "ngram", "chat", regime="sampled")
    assert greedy > 0.95 and after.n == 0
    assert after.mean == pytest.approx(0.75 * greedy) and after.mean > before  # the cache was invalidated
    # the policies read a regime through an AlphaSource view
    assert t.view("sampled").get("w", "ngram", "chat") == after
    with pytest.raises(ValueError, match="unknown sampling regime"):
        t.view("hot")
    with pytest.raises(ValueError, match="unknown sampling regime"):
        t.observe("w", "ngram", "chat", 4, 2, regime="hot")


def test_positional_observe_of_the_simulator_stays_greedy_and_round_trips():
    t = est.AlphaTable(clock=lambda: 0.0)
    t.observe("w", "draft", "code", 8, 6, [2, 2, 1, 1], now=0.0, num_drafts=2)  # the simulator's call
    t.observe("w", "draft", "code", 8, 2, [1, 1, 0, 0], now=0.0, num_drafts=2, regime="sampled")
    d = t.to_dict()
    assert set(d["w"]["draft"]) == {"code", "code@sampled"}
    u = est.AlphaTable.from_dict(d, clock=lambda: 0.0)
    for regime in ("greedy", "sampled"):
        assert u.get("w", "draft", "code", regime=regime) == t.get("w", "draft", "code", regime=regime)
