"""The hybrid priced as the worker runs it: its model drafts per lookup miss only as many tokens as their survival
pays for (`hybrid_fallback_tokens`, the rule of proposers/hybrid.py), and a step verifies, credits and pays for
those (`hybrid_step`, `evaluate`), in closed form."""

from __future__ import annotations

import pytest

from adaptspec.control import costmodel
from adaptspec.control.costmodel import DraftCost, StepTimeModel, hybrid_fallback_tokens, hybrid_step
from adaptspec.control.profiles import Profile, load_profile, parse_profile
from adaptspec.errors import ConfigError


@pytest.mark.parametrize("survival,cost,gamma,want", [
    ((0.8, 0.6, 0.5), 0.35, 4, 2.0),  # 0.8, 0.48 pay; 0.24 < 0.35
    ((0.8, 0.6, 0.5), 0.0, 4, 4.0),  # unpriced: gamma
    ((0.8, 0.6, 0.5), 0.2, 2, 2.0),  # capped at gamma
    ((0.8, 0.6, 0.5), 0.2, 5, 3.0),  # 0.24 pays, 0.12 (the last rate repeated) does not
    (0.7, 0.35, 4, 2.0),  # scalar: 0.7, 0.49, 0.343
    ((0.3,), 0.35, 4, 1 / 9),  # not even the first: one token after 8 declines in a row
])
def test_fallback_tokens_follow_the_workers_survival_rule(survival, cost, gamma, want):
    assert hybrid_fallback_tokens(survival, cost, gamma) == pytest.approx(want)
    assert hybrid_fallback_tokens(survival, cost, 0) == 0.0


@pytest.mark.parametrize("call,want", [(0.0, 3.0), (0.88, 3.0), (0.95, 1 / 9)])
def test_fallback_tokens_weigh_the_price_of_drafting_at_all(call, want):
    # survival 0.8, 0.48, 0.24, 0.06 at model_cost 0.2: three pay, worth 0.6 + 0.28 + 0.04 = 0.92
    assert hybrid_fallback_tokens((0.8, 0.6, 0.5, 0.25), 0.2, 4, call_cost=call) == pytest.approx(want)


def test_fallback_tokens_are_what_the_worker_drafts_with_the_same_survival():
    """The worker's hybrid with a given learned survival (pooled counts only) drafts what the formula says."""
    from adaptspec.worker.proposers import HybridProposer, NgramProposer

    class Model:  # the hybrid asks its model only for a length here: model_k is the rule
        name, needs_hidden_states = "eagle", False

    hybrid = HybridProposer(NgramProposer(), Model(), model_cost=0.35, prior_weight=1e-9)
    hybrid._pooled = [[998, 799], [798, 479], [478, 239]]  # (a + 1) / (t + 2): 0.8, 0.6, 0.5
    assert hybrid.model_k("r", 4) == hybrid_fallback_tokens((0.8, 0.6, 0.5), 0.35, 4) == 2
    for call in (0.5, 0.6):  # worth 0.45 + 0.13 = 0.58
        hybrid.call_cost = call
        assert hybrid.model_k("r", 4) == round(hybrid_fallback_tokens((0.8, 0.6, 0.5), 0.35, 4, call_cost=call))


def test_hybrid_step_at_batch_1_in_closed_form():
    hs = hybrid_step(4, 0.75, 2.0)
    assert hs.drafted == pytest.approx(0.75 * 4 + 0.25 * 2)  # 3.5 drafted tokens verified per step, not 4
    assert hs.model_tokens == pytest.approx(0.5) and hs.model_passes == pytest.approx(0.5)
    assert hs.reach == pytest.approx((1.0, 1.0, 0.75, 0.75))
    # exploration: one token at 1/9 of the misses
    hs = hybrid_step(4, 0.75, 1 / 9)
    assert hs.model_passes == pytest.approx(0.25 / 9) and hs.reach == pytest.approx((0.75 + 0.25 / 9, 0.75, 0.75, 0.75))
    # unpriced: the old hybrid, gamma at every miss
    assert hybrid_step(4, 0.75, 4.0).drafted == pytest.approx(4.0)


@pytest.mark.parametrize("batch", [1, 8, 32])
def test_hybrid_step_passes_at_batch_b(batch):
    assert hybrid_step(4, 0.75, 2.0, batch).model_passes == pytest.approx((1 - 0.75**batch) * 2)
    assert hybrid_step(4, 0.75, 0.5, batch).model_passes == pytest.approx(1 - (1 - 0.25 * 0.5) ** batch)


# a profile with round numbers: a step costs 1 s + 0.1 s per batched token, a head pass 0.2 of a step, lookup free
TARGET = StepTimeModel(overhead_s=1.0, compute_s_per_token=0.1, additive=True)


def profile(model_cost: float) -> Profile:
    head, ngram = DraftCost("eagle", fraction=0.2), DraftCost("ngram")
    hybrid = DraftCost("hybrid", lookup=ngram, fallback=head, parts=("ngram", "head"), model_cost=model_cost)
    return Profile("round", TARGET, 0.0, {"ngram": ngram, "head": head, "hybrid": hybrid})


def test_evaluate_prices_the_models_draft_length_in_closed_form():
    alphas, pi = (0.8, 0.6, 0.5), 0.75
    plan = costmodel.evaluate(profile(0.35), "hybrid", alphas, 4, 1, propose_rate=pi)
    m = 2  # hybrid_fallback_tokens(alphas, 0.35, 4)
    step = 1.0 + 0.1 * 1  # a batch-1 step: 1.1 s
    draft = (1 - pi) * m * 0.2 * step  # the head's passes at the misses
    verify = 1.0 + 0.1 * (1 + pi * 4 + (1 - pi) * m)  # 1 + 3.5 tokens
    # E: positions 1-2 are drafted at every step, 3-4 only by lookup (a share pi)
    e = 1 + 0.8 + 0.8 * 0.6 + pi * (0.8 * 0.6 * 0.5 + 0.8 * 0.6 * 0.5 * 0.5)
    assert plan.draft_time_s == pytest.approx(draft)
    assert plan.verify_time_s == pytest.approx(verify)
    assert plan.expected_tokens == pytest.approx(e)
    assert plan.goodput == pytest.approx(e / (draft + verify))


def test_unpriced_hybrid_is_priced_as_before_and_the_fallback_survival_may_come_apart():
    alphas, pi = (0.8, 0.6, 0.5), 0.75
    old = costmodel.evaluate(profile(0.0), "hybrid", alphas, 4, 1, propose_rate=pi)
    step = 1.1
    assert old.draft_time_s == pytest.approx((1 - pi) * 4 * 0.2 * step)
    assert old.verify_time_s == pytest.approx(1.0 + 0.1 * 5)
    assert old.expected_tokens == pytest.approx(costmodel.expected_tokens_any(alphas, 4))
    # the model's own survival (e.g. the proxy's estimate for the fallback's key) sets its length: 0.3 -> 1/9
    shy = costmodel.evaluate(profile(0.35), "hybrid", alphas, 4, 1, propose_rate=pi, fallback_alpha=0.3)
    assert shy.draft_time_s == pytest.approx((1 - pi) / 9 * 0.2 * step)
    assert shy.verify_time_s == pytest.approx(1.0 + 0.1 * (1 + pi * 4 + (1 - pi) / 9))
    best = costmodel.best_gamma(profile(0.35), "hybrid", alphas, 1, 6, propose_rate=pi, fallback_alpha=0.3)
    assert best.goodput == max(costmodel.evaluate(profile(0.35), "hybrid", alphas, g, 1, propose_rate=pi,
                                                  fallback_alpha=0.3).goodput for g in range(1, 7))


BASE = {"name": "p", "target": {"overhead_s": 0.01, "memory_floor_s": 0.0, "compute_s_per_token": 1e-4},
        "proposers": {"ngram": {"kind": "ngram", "step_s": 1e-4}, "head": {"kind": "eagle", "fraction": 0.1}}}


def test_profile_hybrid_takes_the_workers_model_cost():
    hybrid = {"kind": "hybrid", "lookup": "ngram", "fallback": "head", "model_cost": 0.2, "model_call_cost": 0.5}
    prof = parse_profile({**BASE, "proposers": {**BASE["proposers"], "hybrid": hybrid}}, "p.yaml")
    assert (prof.draft("hybrid").model_cost, prof.draft("hybrid").model_call_cost) == (0.2, 0.5)
    for bad, msg in (({**hybrid, "model_cost": 1.0}, "model_cost"),
                     ({**hybrid, "model_call_cost": -1}, "model_call_cost"),
                     ({"kind": "ngram", "step_s": 1e-4, "model_cost": 0.3}, "model_cost / model_call_cost / stepwise are"),
                     ({"kind": "ngram", "step_s": 1e-4, "model_call_cost": 0.3}, "are for kind 'hybrid'"),
                     ({"kind": "ngram", "step_s": 1e-4, "stepwise": True}, "are for kind 'hybrid'")):
        with pytest.raises(ConfigError, match=msg):
            parse_profile({**BASE, "proposers": {**BASE["proposers"], "x": bad}}, "p.yaml")


def test_profile_hybrid_stepwise_is_priced_as_the_per_step_rule():
    """`stepwise: true` (the reference worker's per-step hybrid, cpu-tiny): lookup steps and head steps priced
    apart (costmodel.stepwise_hybrid), so the key's propose rate is the rule's lookup density."""
    hybrid = {"kind": "hybrid", "lookup": "ngram", "fallback": "head", "stepwise": True}
    prof = parse_profile({**BASE, "proposers": {**BASE["proposers"], "hybrid": hybrid}}, "p.yaml")
    assert prof.draft("hybrid").stepwise and not parse_profile(
        {**BASE, "proposers": {**BASE["proposers"], "hybrid": {**hybrid, "stepwise": False}}}, "p.yaml"
    ).draft("hybrid").stepwise
    lookup, head = (0.9, 0.9, 0.9, 0.9), (0.5, 0.5, 0.5)
    got = costmodel.evaluate(prof, "hybrid", lookup, 3, 1, propose_rate=0.2, fallback_alpha=head)
    want = costmodel.stepwise_hybrid(prof, "hybrid", lookup, head, 3, 1, 0.2)
    assert got == want
    # q = 0.2 lookup steps per covered position, E_H = 1.875: pi = 0.2 / (0.2 + 0.8 / 1.875)
    e_head, e_lookup = 1 + 0.5 + 0.25 + 0.125, 1 + 0.9 + 0.81 + 0.729 + 0.6561
    pi = 0.2 / (0.2 + 0.8 / e_head)
    assert got.expected_tokens == pytest.approx(pi * e_lookup + (1 - pi) * e_head)
    tiny = load_profile("cpu-tiny").draft("hybrid")
    assert tiny.stepwise and tiny.model_cost == 0.35  # the reference worker's per-step hybrid, at its price
    # with the worker's price a head step drafts the m tokens the head's survival pays for: at 0.5 a position,
    # S = 0.5, 0.25, ...: m = 1 (S_2 = 0.25 < 0.35), so E_H = 1.5 and a head step verifies 1 + 1 tokens
    priced = parse_profile({**BASE, "proposers": {**BASE["proposers"],
                                                  "hybrid": {**hybrid, "model_cost": 0.35}}}, "p.yaml")
    got = costmodel.evaluate(priced, "hybrid", lookup, 3, 1, propose_rate=0.2, fallback_alpha=head)
    pi = 0.2 / (0.2 + 0.8 / 1.5)
    assert got.expected_tokens == pytest.approx(pi * e_lookup + (1 - pi) * 1.5)
    target = priced.target
    assert got.verify_time_s == pytest.approx(target.time(1 + pi * 4 + (1 - pi) * 1, priced.context_tokens))
