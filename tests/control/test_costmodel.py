import dataclasses
import math

import pytest

from adaptspec.control import costmodel as cm
from adaptspec.control.profiles import Profile, load_profile


def test_expected_tokens_closed_form_and_limits():
    assert cm.expected_tokens(0.5, 0) == 1.0
    assert cm.expected_tokens(0.0, 5) == 1.0
    assert cm.expected_tokens(1.0, 5) == 6.0
    assert cm.expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    # continuity at alpha -> 1 (series branch vs closed form)
    assert cm.expected_tokens(1 - 1e-7, 4) == pytest.approx(5.0, rel=1e-6)
    assert cm.expected_tokens(1 - 2e-6, 4) == pytest.approx(cm.expected_tokens(1 - 5e-7, 4), rel=1e-5)


def test_per_position_generalises_scalar():
    for a in (0.1, 0.5, 0.83):
        for g in range(1, 8):
            assert cm.expected_tokens_per_position([a] * g) == pytest.approx(cm.expected_tokens(a, g))
    rates = (0.84, 0.60, 0.39, 0.27)
    assert cm.expected_tokens_per_position(rates) == pytest.approx(
        1 + 0.84 + 0.84 * 0.60 + 0.84 * 0.60 * 0.39 + 0.84 * 0.60 * 0.39 * 0.27)
    # positions past the known ones repeat the last rate
    assert cm.expected_tokens_any(rates, 6) == pytest.approx(cm.expected_tokens_per_position(rates + (0.27, 0.27)))
    # the scalar summary has the same E as the per-position rates
    a = cm.scalar_alpha(rates, 4)
    assert cm.expected_tokens(a, 4) == pytest.approx(cm.expected_tokens_per_position(rates), rel=1e-9)


@pytest.mark.parametrize("c", [0.0, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0])
def test_memory_bound_limit_is_leviathan(c):
    profile = Profile.memory_bound(c)
    for alpha in [i / 20 for i in range(21)]:
        for gamma in range(0, 11):
            for batch in (1, 7, 300):
                plan = cm.evaluate(profile, "draft", alpha, gamma, batch)
                lev = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1)) if alpha < 1 \
                    else (gamma + 1) / (gamma * c + 1)
                assert plan.speedup == pytest.approx(lev, rel=1e-12, abs=1e-12)
                assert plan.speedup == pytest.approx(cm.leviathan_speedup(alpha, gamma, c), rel=1e-12)


def test_best_plan_memory_bound_picks_argmax_gamma():
    profile = Profile.memory_bound(0.1)
    plan = cm.best_plan({"draft": 0.8}, profile, 1, 8)
    by_gamma = [cm.leviathan_speedup(0.8, g, 0.1) for g in range(9)]
    assert plan.gamma == max(range(9), key=by_gamma.__getitem__)
    assert plan.speedup == pytest.approx(max(by_gamma))
    # a useless draft is turned off
    assert cm.best_plan({"draft": 0.05}, Profile.memory_bound(0.3), 1, 8).gamma == 0
    # margin: a plan must beat off by the factor
    tiny_win = cm.best_plan({"draft": 0.2}, Profile.memory_bound(0.1), 1, 8)
    assert 1.0 < tiny_win.speedup < 1.2
    assert cm.best_plan({"draft": 0.2}, Profile.memory_bound(0.1), 1, 8, margin=1.2).gamma == 0


def test_step_time_roofline():
    m = cm.StepTimeModel(overhead_s=0.002, memory_floor_s=0.03, kv_s_per_token=1e-7, compute_s_per_token=1e-4)
    assert m.time(1) == pytest.approx(0.032)
    assert m.time(1000) == pytest.approx(0.002 + 0.1)
    assert m.time(10, kv_tokens=100_000) == pytest.approx(0.002 + 0.03 + 0.01)
    assert m.crossover_tokens() == pytest.approx(300)
    assert cm.StepTimeModel(memory_floor_s=1).crossover_tokens() == math.inf


def test_70b_h100_anchor_41ms_per_token():
    p = load_profile("h100-llama3-70b")
    t = p.target.time(1, p.context_tokens)
    assert 0.038 <= t <= 0.044  # published: ~41 ms/token at batch 1


def test_h200_faster_than_h100_when_memory_bound():
    for model in ("llama3-8b", "llama3-70b"):
        h100, h200 = load_profile(f"h100-{model}"), load_profile(f"h200-{model}")
        ratio = h100.target.time(1, 1024) / h200.target.time(1, 1024)
        assert 1.2 < ratio < 4.8 / 3.35 + 1e-9


PROFILES = ["h100-llama3-70b", "h200-llama3-70b", "h100-llama3-8b", "h200-llama3-8b"]


@pytest.mark.parametrize("name", PROFILES)
def test_gains_shrink_past_batch_16(name):
    p = load_profile(name)
    s = {b: cm.best_plan({"draft": 0.8}, p, b, 8).speedup for b in (1, 16, 64, 256)}
    assert s[1] > 1.4
    assert s[1] >= s[16] > s[64] > s[256]
    assert s[256] < 0.85 * s[16]


@pytest.mark.parametrize("name", ["h100-llama3-70b", "h200-llama3-70b"])
def test_70b_with_8b_draft_turns_off_at_batch_256(name):
    assert cm.best_plan({"draft": 0.8}, load_profile(name), 256, 8).gamma == 0


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("ctx", [0, 128, 512])
def test_speculation_reverses_when_compute_bound(name, ctx):
    p = dataclasses.replace(load_profile(name), context_tokens=ctx)
    b = p.target.compute_bound_batch(ctx)
    assert b < 4096
    # below: speculation pays; past the compute-bound batch every plan is slower than plain decoding
    assert cm.best_plan({"draft": 0.8, "ngram": 0.8}, p, 1, 8).speedup > 1.4
    for proposer in p.drafts:
        for g in range(1, 9):
            assert cm.evaluate(p, proposer, 0.8, g, 1.01 * b).speedup < 1.0
    assert cm.best_plan({k: 0.9 for k in p.drafts}, p, 2 * b, 8).gamma == 0


def test_compute_bound_batch_matches_step_time():
    m = cm.StepTimeModel(overhead_s=0.001, memory_floor_s=0.03, kv_s_per_token=1e-8, compute_s_per_token=1e-4)
    b = m.compute_bound_batch(1000)
    assert b == pytest.approx(0.03 / (1e-4 - 1e-5))
    assert m.time(b, b * 1000) == pytest.approx(0.001 + 1e-4 * b)


def test_best_plan_chooses_cheaper_proposer_at_equal_alpha():
    p = load_profile("h200-llama3-70b")
    plan = cm.best_plan({"draft-8b": 0.8, "ngram": 0.8}, p, 1, 8)
    assert plan.proposer == "ngram"
    plan = cm.best_plan({"draft-8b": 0.8, "ngram": 0.2}, p, 1, 8)
    assert plan.proposer == "draft-8b"


def test_plan_to_dict_roundtrip_fields():
    plan = cm.best_plan({"draft": 0.7}, load_profile("cpu-tiny"), 2, 4)
    d = plan.to_dict()
    assert set(d) >= {"proposer", "gamma", "speedup", "goodput", "batch"}
    assert d["goodput"] == pytest.approx(d["expected_tokens"] / (d["draft_time_s"] + d["verify_time_s"]))


def test_fit_step_time_recovers_a_roofline():
    import numpy as np

    true = cm.StepTimeModel(overhead_s=0.004, memory_floor_s=0.006, kv_s_per_token=2e-7, compute_s_per_token=3e-4)
    rng = np.random.default_rng(0)
    pts = []
    for tokens in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128):
        for ctx in (64, 256):
            kv = tokens * ctx
            pts.append((tokens, kv, true.time(tokens, kv) * (1 + 0.01 * rng.standard_normal())))
    fit = cm.fit_step_time(pts)
    for tokens, kv, _ in pts:
        assert fit.time(tokens, kv) == pytest.approx(true.time(tokens, kv), rel=0.05)
    assert fit.compute_s_per_token == pytest.approx(3e-4, rel=0.1)
    assert fit.overhead_s + fit.memory_floor_s == pytest.approx(0.010, rel=0.1)
    # all memory-bound: the constant is recovered, the slope is unknown (0)
    flat = cm.fit_step_time([(b, 0, 0.01) for b in (1, 2, 3, 4)])
    assert flat.time(1) == pytest.approx(0.01) and flat.compute_s_per_token == 0
    with pytest.raises(ValueError):
        cm.fit_step_time([(1, 0, 0.1)])


def test_propose_rate_mixes_drafting_and_plain_steps():
    """With propose rate pi a step is a drafting step with probability pi and a plain one otherwise:
    E = pi * E(alpha, g) + (1 - pi), and on a compute-bound step only the drafting requests verify g + 1."""
    m = cm.StepTimeModel(overhead_s=0.002, memory_floor_s=0.0, kv_s_per_token=0.0, compute_s_per_token=1e-4)
    prof = Profile("compute", m, 0.0, {"ngram": cm.DraftCost("ngram")}, {}, "compute-bound")
    for pi in (0.2, 0.5, 1.0):
        plan = cm.evaluate(prof, "ngram", 0.8, 4, 32, propose_rate=pi)
        assert plan.expected_tokens == pytest.approx(pi * cm.expected_tokens(0.8, 4) + (1 - pi))
        assert plan.verify_time_s == pytest.approx(0.002 + 1e-4 * 32 * (1 + pi * 4))
    # the same acceptance when drafting, found on fewer steps: a compute-bound batch affords longer drafts
    slow = dataclasses.replace(prof, target=dataclasses.replace(m, overhead_s=0.01))
    assert cm.best_gamma(slow, "ngram", 0.8, 32, 8, propose_rate=0.3).gamma > cm.best_gamma(
        slow, "ngram", 0.8, 32, 8).gamma
    # memory-bound: pi scales the gain and not the cost
    lev = Profile.memory_bound(0.0)
    plan = cm.evaluate(lev, "draft", 0.7, 3, 1, propose_rate=0.4)
    assert plan.speedup == pytest.approx(1 + 0.4 * (cm.expected_tokens(0.7, 3) - 1))


def test_a_padded_verify_pads_every_row_to_the_longest_draft():
    """On a padded verify (the reference engine's one padded attention call) a row without a draft still verifies
    as many positions as the longest draft of its step: gamma whenever some row of the batch drafted, which at
    pi in (0, 1) happens with probability 1 - (1 - pi)^batch. At batch 1 nothing changes."""
    m = cm.StepTimeModel(overhead_s=0.002, memory_floor_s=0.0, kv_s_per_token=0.0, compute_s_per_token=1e-4)
    ragged = Profile("compute", m, 0.0, {"ngram": cm.DraftCost("ngram")}, {}, "compute-bound")
    padded = dataclasses.replace(ragged, padded_verify=True)
    for pi in (0.1, 0.4, 1.0):
        for batch in (1, 4, 32):
            plan = cm.evaluate(padded, "ngram", 0.8, 4, batch, propose_rate=pi)
            rows = 1 + 4 * (1 - (1 - pi) ** batch)
            assert plan.verify_time_s == pytest.approx(0.002 + 1e-4 * batch * rows)
            assert plan.expected_tokens == cm.evaluate(ragged, "ngram", 0.8, 4, batch, propose_rate=pi).expected_tokens
    assert cm.evaluate(padded, "ngram", 0.8, 4, 1, propose_rate=0.3) == cm.evaluate(ragged, "ngram", 0.8, 4, 1,
                                                                                    propose_rate=0.3)
    # so at load lookup that rarely drafts is worth less than the ragged price says
    assert cm.evaluate(padded, "ngram", 0.8, 4, 32, propose_rate=0.3).goodput < \
        0.8 * cm.evaluate(ragged, "ngram", 0.8, 4, 32, propose_rate=0.3).goodput


def test_a_padded_verify_pads_a_stepwise_hybrids_rows_to_the_longer_kind():
    """A per-step hybrid's lookup steps draft `length` positions and its head steps `head_tokens`: on a padded
    verify every row verifies the longer whenever the batch holds both kinds (probability 1 - pi^B - (1-pi)^B)."""
    prof = load_profile("cpu-tiny")
    ragged = dataclasses.replace(prof, padded_verify=False)
    lookup, head = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4), 0.75
    for batch in (1.0, 16.0):
        p, r = (cm.stepwise_hybrid(x, "hybrid", lookup, head, 3, batch, 0.3) for x in (prof, ragged))
        assert p.expected_tokens == r.expected_tokens
        if batch == 1.0:
            assert p.verify_time_s == pytest.approx(r.verify_time_s)
        else:
            assert p.verify_time_s > r.verify_time_s


def test_prefill_shares_the_steps():
    """rho prompt tokens per generated token, prefilled in chunks of C tokens: a share q = b rho E / C of the
    steps carries a chunk. Closed forms on a roofline with a memory floor (spare compute below it)."""
    m = cm.StepTimeModel(overhead_s=0.001, memory_floor_s=0.02, kv_s_per_token=0.0, compute_s_per_token=1e-4)

    def t(n):
        return 0.001 + max(0.02, 1e-4 * n)

    # spread evenly (chunk 0): every step carries its share
    assert cm.step_time_with_prefill(m, 32, 0, 0) == m.time(32) == t(32)
    assert cm.step_time_with_prefill(m, 32, 0, 296) == pytest.approx(t(328))
    # chunks of 1000 tokens, 100 prefill tokens per step on average: 10% of the steps carry 1000 tokens
    assert cm.step_time_with_prefill(m, 32, 0, 100, 1000) == pytest.approx(0.1 * t(1032) + 0.9 * t(32))
    prof = Profile("roof", m, 0.0, {"ngram": cm.DraftCost("ngram")}, {}, "roofline")
    plan = cm.evaluate(prof, "ngram", 0.8, 3, 64, prefill_ratio=2.0)
    e = cm.expected_tokens(0.8, 3)
    assert plan.expected_tokens == pytest.approx(e)
    assert plan.baseline_time_s == pytest.approx(t(64 * 3))
    assert plan.verify_time_s == pytest.approx(t(64 * 4 + 64 * 2 * e))
    # prefill takes the spare compute that made drafted tokens free: speculation is worth less
    assert plan.speedup < cm.evaluate(prof, "ngram", 0.8, 3, 64).speedup
    # rho = 0 is the plain model, whatever the chunk
    assert cm.evaluate(prof, "ngram", 0.8, 3, 16, prefill_chunk=500) == cm.evaluate(prof, "ngram", 0.8, 3, 16)


def test_long_prompts_turn_speculation_off_sooner_on_a_gpu_profile():
    """RAG-like traffic (4000-token prompts, 200-token replies) on H200 + 70B: the batch at which the best plan
    stops paying is lower than for chat-like traffic (200 / 200)."""
    p = load_profile("h200-llama3-70b")

    def last_batch_worth_it(rho, chunk):
        return max(b for b in range(1, 257) if cm.best_plan({"draft": 0.8}, p, b, 8, margin=1.1).gamma > 0
                   and cm.best_gamma(p, "draft", 0.8, b, 8, prefill_ratio=rho, prefill_chunk=chunk).speedup > 1.1)

    assert last_batch_worth_it(20.0, 4000.0) < last_batch_worth_it(1.0, 200.0) <= last_batch_worth_it(0.0, 0.0)


def test_fit_step_time_additive_recovers_a_cpu_model():
    true = cm.StepTimeModel(overhead_s=0.005, kv_s_per_token=1.3e-6, compute_s_per_token=1.9e-4, additive=True)
    pts = [(b * k, b * 200, true.time(b * k, b * 200)) for b in (1, 4, 16, 32, 64) for k in (1, 3, 5)]
    fit = cm.fit_step_time(pts, additive=True)
    assert fit.additive and fit.memory_floor_s == 0.0
    for got, want in ((fit.overhead_s, 0.005), (fit.kv_s_per_token, 1.3e-6), (fit.compute_s_per_token, 1.9e-4)):
        assert got == pytest.approx(want, rel=1e-6)
    # sum, not max: both terms count, and nothing is ever "compute-bound" in the roofline sense
    assert true.time(100, 1000) == pytest.approx(0.005 + 1.3e-3 + 1.9e-2)
    assert true.compute_bound_batch(256) == math.inf and true.crossover_tokens() == math.inf
