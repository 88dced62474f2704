"""The hybrid proposer: n-gram lookup where it matches, the model proposer (EAGLE head, else the draft model)
elsewhere; greedy byte-identity in the real engine with either model, and the sampled law of the first three
tokens (6 sigma per bin) with both sources drafting in the same batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_requests import chat_ids, greedy_request
from test_eagle import NoTokenizer, assert_engine_follows, first_three_tokens_law, random_head, random_target

from adaptspec.worker.engine import Engine
from adaptspec.worker.proposers import (
    DraftModelProposer,
    EagleProposer,
    HybridProposer,
    NgramProposer,
    ProposeInput,
    SamplingParams,
)

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
COPY_PROMPT = ("Fix the typo in this function and return the whole function.\n\n"
               "def total_price(items, tax):\n    subtotal = sum(item.price * item.qty for item in items)\n"
               "    taxes = subtotal * tax\n    return subtotl + taxes\n")
OPEN_PROMPT = "Tell me a story about a lighthouse keeper and his dog."  # no near-tie: test_identity_prompts.py


def test_lookup_first_then_the_model():
    target = random_target()
    hybrid = HybridProposer(NgramProposer(2, 4), EagleProposer(random_head(target), target), min_match=0)
    assert hybrid.needs_hidden_states
    hid = torch.randn(32)
    batch = [ProposeInput("copy", [1, 2, 3, 4, 5, 1, 2], 3, SamplingParams(0.0), hid),  # "1 2" seen before
             ProposeInput("new", [1, 2, 3, 4, 5, 6, 7], 3, SamplingParams(0.9), hid)]
    copy, new = hybrid.propose(batch)
    assert copy.token_ids == [3, 4, 5] and copy.probs is None  # point masses from the lookup
    assert len(new.token_ids) == 3 and new.probs.shape == (3, 12)  # the head's distributions
    assert hybrid.drafts_by_source == {"ngram": 1, "eagle": 1}


def test_per_step_rule_follows_the_match_in_progress():
    """Lookup drafts once its drafts predicted min_match (2) emitted tokens in a row, max(k, 2m + 1) tokens at
    most 2k and the room; the model's turn where its last draft failed (module doc of proposers/hybrid.py)."""
    target = random_target()
    hybrid = HybridProposer(NgramProposer(2, 4), EagleProposer(random_head(target), target))
    hid = torch.randn(32)

    def step(seq, k=3, room=16):
        return hybrid.propose([ProposeInput("r", seq, k, SamplingParams(0.0), hid, room=room)])[0]

    seq = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]  # "1 2" seen before: the lookup would draft 3 4 5 ...
    first = step(seq)
    assert first.probs is not None and len(first.token_ids) == 3  # no match in progress yet: the head
    assert hybrid.match(ProposeInput("r", seq, 3)) == 0
    seq += [3, 4]  # the target emitted what the lookup's draft said: m = 2
    second = step(seq)
    assert hybrid.match(ProposeInput("r", seq, 3)) == 2
    assert second.probs is None and second.token_ids == [5, 6, 7, 8, 1]  # max(3, 2 * 2 + 1) = 5 <= 2k
    seq += [5, 6, 7, 8, 1, 2]  # all five and the bonus as the lookup predicted: m = 2 + 6
    third = step(seq, k=3, room=4)
    assert third.token_ids == [3, 4, 5, 6]  # long match: 2k = 6, but the room bound is 4
    seq += [3, 9]  # the draft failed at its second token: the match is gone, the head's turn
    fourth = step(seq)
    assert fourth.probs is not None and hybrid.match(ProposeInput("r", seq, 3)) == 0
    # every shadow draft was scored in its match bucket, censored at what its step emitted: bucket 0 (the first
    # step) held 2 of 2, bucket 2 all 6 of its shadow (5 drafted, the bonus as it said), bucket 3+ held 1, missed 1
    assert hybrid._lookup_stats[0] == [[1, 1], [1, 1]]
    assert hybrid._lookup_stats[2] == [[1, 1]] * 6 and hybrid._lookup_stats[3] == [[1, 1], [1, 0]]
    # the model's turn weighs both sources: S = (a + 1) / (t + 2) per position, L the longest S_L >= 0.1
    length, worth = hybrid._lookup_worth(0, [1] * 6)
    s1, s2 = 2 / 3, 4 / 9
    curve = [s1, s2, s2 / 2, s2 / 4]  # positions 3, 4 unseen: 1/2 each; 5th: s2 / 8 < 0.1
    assert length == 4 and worth == pytest.approx((1 + sum(curve)) / (1 + 4 * 0.1))
    assert hybrid.drafts_by_source == {"ngram": 2, "eagle": 2}
    hybrid.remove("r")
    assert "r" not in hybrid._match and "r" not in hybrid._shadow
    with pytest.raises(ValueError, match="hybrid rule"):
        HybridProposer(NgramProposer(2, 4), hybrid.model, min_match=-1)


def test_hybrid_with_a_draft_model_keeps_its_cache_across_lookup_steps():
    draft = random_target(seed=5)
    hybrid = HybridProposer(NgramProposer(2, 4), DraftModelProposer(draft, max_slots=2, max_len=16), min_match=0)
    assert not hybrid.needs_hidden_states
    hybrid.add("r")
    seq = [1, 2, 3, 4]
    a = hybrid.propose([ProposeInput("r", seq, 2, SamplingParams(0.0))])[0]  # no match: the draft model
    seq = seq + [1, 2]
    b = hybrid.propose([ProposeInput("r", seq, 2, SamplingParams(0.0))])[0]  # "1 2" seen: lookup
    seq = seq + [3, 9]
    c = hybrid.propose([ProposeInput("r", seq, 2, SamplingParams(0.0))])[0]  # "3 9" new: model catches up
    fresh = DraftModelProposer(draft, max_slots=1, max_len=16)
    expect = fresh.propose([ProposeInput("x", seq, 2, SamplingParams(0.0))])[0]
    assert len(a.token_ids) == 2 and b.token_ids == [3, 4] and c.token_ids == expect.token_ids
    assert hybrid.drafts_by_source == {"ngram": 1, "draft": 2}
    hybrid.remove("r")


@pytest.mark.parametrize(("model", "min_match"), [("eagle", 2), ("eagle", 0), ("eagle", 1), ("eagle", 4),
                                                  ("draft", 2)])
def test_greedy_output_is_identical_with_and_without_hybrid(model, min_match):
    if model == "eagle":
        engine = Engine.tiny(max_batch=4, max_model_len=512, hybrid_min_match=min_match)
    else:  # no EAGLE head: hybrid falls back to the draft model
        engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=4, max_model_len=512,
                                  hybrid_min_match=min_match)
    hybrid = engine._proposers["hybrid"]
    assert hybrid.model.name == model
    with engine:
        ids = [chat_ids(engine, p) for p in (COPY_PROMPT, OPEN_PROMPT)]
        base = engine.generate_sync([greedy_request(f"n{i}", x, max_tokens=40) for i, x in enumerate(ids)])
        for k in (2, 5):
            out = engine.generate_sync([greedy_request(f"h{k}-{i}", x, "hybrid", k, max_tokens=40)
                                        for i, x in enumerate(ids)])
            for i in range(len(ids)):
                assert out[f"h{k}-{i}"] == base[f"n{i}"], (k, i)
        m = engine.metrics()
    assert hybrid.drafts_by_source["ngram"] > 0 and hybrid.drafts_by_source[model] > 0
    assert 0 < m.spec_num_accepted_tokens <= m.spec_num_draft_tokens


def run_hybrid_law(hybrid_model_cost: float, hybrid_call_cost: float = 0.0, min_match: int = 0) -> Engine:
    """A random target + head behind a hybrid at these prices: its sampled first three tokens follow the
    target's closed-form law (assert_engine_follows); returns the engine for the callers' draft counts.
    After x1, the text 3 7 3 7 x1 repeats its bigram only when x1 = 3: lookup drafts then, the head otherwise."""
    target = random_target()
    prompt = [3, 7, 3, 7]
    temperature, top_p = 0.8, 0.9
    expected = first_three_tokens_law(target, prompt, temperature, top_p)
    engine = Engine(target, NoTokenizer(), None, max_batch=512, max_model_len=8, eagle_head=random_head(target),
                    hybrid_model_cost=hybrid_model_cost, hybrid_call_cost=hybrid_call_cost,
                    hybrid_min_match=min_match)
    assert_engine_follows(engine, prompt, "hybrid", temperature, top_p, expected)
    return engine


@pytest.mark.slow
@pytest.mark.parametrize("min_match", [0, 1])
def test_sampled_output_follows_the_target_with_hybrid(min_match):
    # unpriced (cost 0): the head drafts k at every model turn, whatever its acceptance, so both sources mix at
    # scale; min_match 0 is lookup first, 1 the per-step rule (lookup once its last draft held: x1 = 3 here);
    # the priced hybrid's law is test_hybrid_model_k.py's (a random head's drafts rarely pay the default price)
    engine = run_hybrid_law(0.0, min_match=min_match)
    sources = engine._proposers["hybrid"].drafts_by_source
    assert sources["ngram"] > 1000 and sources["eagle"] > 1000
