"""The policy's price of the per-step hybrid (costmodel.stepwise_hybrid): lookup steps and head steps apart, from
the hybrid key's lookup-step evidence (bench/stepwise.py walk_hybrid) and the head's own key."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspec.bench.simulator import ProfileCost
from adaptspec.bench.stepwise import HybridRule, hybrid_plan, mean_emitted, walk_hybrid
from adaptspec.bench.traces import TraceRequest
from adaptspec.control import costmodel
from adaptspec.control.config import parse_config
from adaptspec.control.policy import build_policy
from adaptspec.control.profiles import implied_hybrid, load_profile
from adaptspec.control.types import PROPOSERS, AlphaEstimate, WorkerState

PROFILE = "benchmarks/profiles/standin-8b-eagle-heavy.yaml"
STEPWISE = implied_hybrid(load_profile(PROFILE), "eagle", stepwise=True)


def test_the_two_limits_are_the_parts():
    """q = 0: every step is the head's (plus the lookup's cost); q = 1: every step looks up, no head pass."""
    prof, g, b = STEPWISE, 6, 8.0
    kv = b * prof.context_tokens
    head = costmodel.evaluate(prof, "eagle", 0.7, g, b)
    none = costmodel.evaluate(prof, "hybrid", (0.9,) * 8, g, b, propose_rate=0.0, fallback_alpha=0.7)
    lookup = prof.draft("ngram").time(g, b, kv, prof.target, verify_s=head.verify_time_s)
    assert none.expected_tokens == pytest.approx(head.expected_tokens)
    assert none.verify_time_s == pytest.approx(head.verify_time_s)
    assert none.draft_time_s == pytest.approx(head.draft_time_s + lookup)
    assert none.goodput < head.goodput
    full = costmodel.evaluate(prof, "hybrid", (0.9,) * 8, g, b, propose_rate=1.0, fallback_alpha=0.7)
    assert full.expected_tokens == pytest.approx(costmodel.expected_tokens(0.9, 8))
    assert full.verify_time_s == pytest.approx(prof.target.time(b * 9, kv))  # the lookup drafts its 8
    assert full.draft_time_s == pytest.approx(prof.draft("ngram").time(g, b, kv, prof.target,
                                                                        verify_s=full.verify_time_s))


def test_lookup_share_of_steps_follows_the_head_yield():
    """q counts lookup steps per output position the head covered: the better the head, the fewer its steps."""
    q, rates = 0.1, (0.95,) * 8
    e_l = costmodel.expected_tokens(0.95, 8)
    for a in (0.3, 0.8):
        e_h = costmodel.expected_tokens(a, 4)
        pi = q / (q + (1 - q) / e_h)
        plan = costmodel.evaluate(STEPWISE, "hybrid", rates, 4, 1.0, propose_rate=q, fallback_alpha=a)
        assert plan.expected_tokens == pytest.approx(pi * e_l + (1 - pi) * e_h)


def test_walk_hybrid_counts_what_the_replay_drafts():
    runs = [1, 1, 1, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1]  # a copied stretch from position 3
    sh = walk_hybrid(runs, len(runs), HybridRule(), 8)
    # m >= 2 from position 5 (runs[4] >= 2, runs[3] >= 3) to 11: lookup drafts min(8, 2m + 1) there
    lengths = HybridRule().lookup_lengths(runs, 8)
    assert list(np.flatnonzero(lengths)) == [5, 6, 7, 8, 9, 10, 11]
    # at 5 (m = 2): 5 drafted, all accepted (run 7), the bonus -> 11 (m = 8): 8 drafted, none accepted -> 12
    assert sh.drafts == 2 and sh.draft_tokens == 13 and sh.accepted_tokens == 5
    assert sh.steps == 2 + 4 + 3  # lookup steps + the positions the head covers (1-4, 12-14)
    # the draft accepted to its length 5 is tried at 6 (not accepted): the rates give the steps' mean tokens
    assert sh.tried_per_position == (2, 1, 1, 1, 1, 1, 0, 0) and sh.accepted_per_position == (1, 1, 1, 1, 1, 0, 0, 0)


def _alternating(n: int = 400, stretch: int = 40, max_k: int = 8) -> TraceRequest:
    ngram, eagle = [], []
    for i in range(n):
        k = i // stretch
        copy = k % 2 == 0
        ngram.append(1 + min((k + 1) * stretch - i, max_k) if copy else 1)
        eagle.append(3 if copy else 5)
    cap = [min(max_k + 1, n - i) for i in range(n)]
    return TraceRequest("a", "code", 200, n, max_k, {"ngram": tuple(map(min, ngram, cap)),
                                                     "eagle": tuple(map(min, eagle, cap))})


def _price(lk_try, lk_acc, lookup_steps, head_positions, head_rates, g):
    lookup = tuple(a / t for a, t in zip(lk_acc, lk_try, strict=True) if t)
    return costmodel.evaluate(STEPWISE, "hybrid", lookup, g, 1.0,
                              propose_rate=lookup_steps / (lookup_steps + head_positions),
                              fallback_alpha=tuple(head_rates)).expected_tokens


@pytest.mark.parametrize("stretch", [20, 40, 80])
def test_price_matches_the_replay_at_batch_1(stretch):
    """Tokens per step priced from the hybrid's own report (its lookup steps, the positions its head covered, the
    head's rates) = the replay's (2%); from the rule walked along the n-gram runs alone (the shadow evidence of a
    request that ran without it), within 10% (the walk enters a stretch at its first match, the replay after a
    head step, with another match and draft length)."""
    req, g = _alternating(stretch=stretch), 8
    plan = hybrid_plan(req, "eagle", g, 8, HybridRule())
    hd_try, hd_acc, lk_try, lk_acc = np.zeros(g), np.zeros(g), np.zeros(g), np.zeros(g)
    lookups = head_positions = 0
    pos = 1
    while pos < plan.n:
        src, length, e = plan.step(pos, g)
        if src == PROPOSERS.index("eagle"):
            hd_try[:min(e, length)] += 1
            hd_acc[:e - 1] += 1
            head_positions += e
        else:  # as the simulator counts it: a draft accepted to its length is tried one position on
            lk_try[:min(e, g)] += 1
            lk_acc[:e - 1] += 1
            lookups += 1
        pos += e
    head = hd_acc / np.maximum(hd_try, 1)
    replay = mean_emitted(plan, g)
    assert _price(lk_try, lk_acc, lookups, head_positions, head, g) == pytest.approx(replay, rel=0.02)
    sh = walk_hybrid(req.accept_runs["ngram"], req.output_tokens, HybridRule(), 8)
    walked = _price(sh.tried_per_position, sh.accepted_per_position, sh.drafts, sh.steps - sh.drafts, head, g)
    assert walked == pytest.approx(replay, rel=0.1)


class Table:
    """Given estimates per proposer (prior-only where missing)."""

    def __init__(self, ests: dict[str, AlphaEstimate]) -> None:
        self.ests = ests

    def get(self, worker, proposer, content_class):
        return self.ests.get(proposer, AlphaEstimate(0.5, 0.1, 0.0, propose_rate=0.0 if proposer == "hybrid"
                                                     else 1.0))


EAGLE = AlphaEstimate(0.75, 0.01, 1e5, per_position=(0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5), reports=100)
NGRAM = AlphaEstimate(0.5, 0.01, 1e5, per_position=(0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6), propose_rate=0.4,
                      reports=100)
COPYING = AlphaEstimate(0.95, 0.01, 1e5, per_position=(0.97,) * 8, propose_rate=0.12, reports=100)


def _policy():
    return build_policy(parse_config({"policy": {"kind": "goodput", "explore": 0.0}}).policy)


def test_the_policy_offers_the_replayed_hybrid_and_chooses_it_where_it_pays():
    pol = _policy()
    w = WorkerState("w", proposers=("ngram", "eagle", "hybrid"), max_gamma=8, profile=PROFILE)
    prof = pol.worker_profile(w)
    assert prof.offers("hybrid") and prof.draft("hybrid").stepwise  # implied from its parts
    assert not pol.worker_profile(WorkerState("w", proposers=("ngram", "eagle"), profile=PROFILE)).offers("hybrid")
    # no lookup evidence: the hybrid is its head plus a lookup that never serves a step: not chosen (the
    # n-gram key's hit rate over every step is not borrowed)
    d = pol.decide("code", [w], Table({"eagle": EAGLE, "ngram": NGRAM}))
    assert d.proposer == "eagle"
    # lookup steps that copy long stretches: worth more than the head alone
    d = pol.decide("code", [w], Table({"eagle": EAGLE, "ngram": NGRAM, "hybrid": COPYING}))
    assert d.proposer == "hybrid" and d.gamma >= 4


def test_the_hybrids_head_shares_the_batch_gamma():
    pol = _policy()
    w = WorkerState("w", proposers=("ngram", "eagle", "hybrid"), max_gamma=8, profile=PROFILE, running=63)
    alphas = Table({"eagle": EAGLE, "ngram": NGRAM, "hybrid": COPYING})
    prof = pol.worker_profile(w)
    g_eagle = pol.batch_gamma(w, prof, "eagle", alphas, 64.0, 8, content_class="code")
    g_hybrid = pol.batch_gamma(w, prof, "hybrid", alphas, 64.0, 8, content_class="code")
    d = pol.decide("code", [w], alphas)
    assert d.proposer in ("hybrid", "eagle")
    assert g_hybrid in (0, g_eagle) and g_eagle < 8  # one set of passes, planned for the batch
    assert d.gamma == max(g_eagle, g_hybrid)


def test_the_simulator_prices_what_it_replays():
    assert ProfileCost(load_profile(PROFILE)).hybrid_head == "eagle"
