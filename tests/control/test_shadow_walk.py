"""Shadow n-gram evidence (control/shadow.py): the walk's counts by hand, the trace walk, and the response
field's validation (a malformed or hostile `usage.speculative.shadow` is dropped, never counted)."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspec.control.shadow import MAX_POSITIONS, NgramIndex, ShadowStats, walk_lookup, walk_runs
from adaptspec.worker.proposers.ngram import ngram_lookup


def test_walk_lookup_counts_each_step_like_the_engine():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    out = [11, 1, 2, 3, 4, 5, 6, 99, 7, 8, 9, 10]
    s = walk_lookup(prompt, out, 4, (2, 4))
    # prefill (11); [10,11] and [11,1] are new: no draft; [1,2] -> draft 3,4,5,6 all accepted, bonus 99;
    # [99,7]... : 7 comes after a miss ([6,99] new); [99,7] new; [7,8] -> draft 9,10 cut to the 1 token that
    # leaves room for a bonus: 9 accepted, bonus 10
    assert (s.steps, s.drafts, s.draft_tokens, s.accepted_tokens) == (7, 2, 5, 5)
    assert s.tried_per_position == (2, 1, 1, 1) and s.accepted_per_position == (2, 1, 1, 1)
    assert ShadowStats.from_dict(s.to_dict()) == s


def test_walk_lookup_rejection_ends_the_step_and_the_next_one_starts_after_the_bonus():
    prompt = [5, 6, 7, 8]
    out = [1, 2, 3, 4, 5, 6, 7, 8]

    def always(seq: np.ndarray):  # always proposes [2, 3, 0, 0][:k]
        return lambda L, k: np.array([2, 3, 0, 0][:k])

    s = walk_lookup(prompt, out, 3, always)
    # i=1: draft 2,3,0 vs 2,3,4 -> 2 accepted, bonus 4; i=4: 2 vs 5 -> 0, bonus 5; i=5: 2 vs 6; i=6: draft cut to
    # 1 (room for a bonus): 2 vs 7 -> 0, bonus 7 ... i=7: no room for any draft (the last token)
    assert s.steps == 1 + 5
    assert s.drafts == 4 and s.draft_tokens == 3 + 3 + 2 + 1
    assert s.tried_per_position == (4, 1, 1) and s.accepted_per_position == (1, 1, 0)


@pytest.mark.parametrize("earliest", [False, True])
@pytest.mark.parametrize(("vocab", "sizes"), [(3, (1, 4)), (5, (2, 4)), (40, (2, 4)), (2, (3, 3))])
def test_the_index_answers_every_prefix_as_the_proposer_does(vocab, sizes, earliest):
    """NgramIndex(seq).lookup(L, k) == ngram_lookup(seq[:L], k) for every L and k (random sequences over small
    vocabularies repeat n-grams everywhere; a large one rarely), with either match choice."""
    rng = np.random.default_rng(vocab)
    for _ in range(20):
        seq = rng.integers(0, vocab, int(rng.integers(1, 120)))
        idx = NgramIndex(seq, *sizes, earliest=earliest)
        for L in range(1, len(seq) + 1):
            for k in (1, 3, 8):
                want = ngram_lookup(seq[:L], k, *sizes, earliest=earliest).tolist()
                assert idx.lookup(L, k).tolist() == want, (seq, L, k)
    with pytest.raises(ValueError):
        NgramIndex([1, 2], 3, 2)


def test_earliest_takes_the_first_occurrence_of_the_longest_match():
    seq = np.array([1, 2, 7, 3, 1, 2, 8, 4, 1, 2])
    assert ngram_lookup(seq, 2, 1, 3).tolist() == [8, 4]  # the reference worker: the most recent [1, 2]
    assert ngram_lookup(seq, 2, 1, 3, earliest=True).tolist() == [7, 3]  # vLLM's: the first one
    # a longer match wins over an earlier shorter one: [4, 1, 2] occurs once before the end
    seq2 = np.array([1, 2, 5, 4, 1, 2, 6, 4, 1, 2])
    assert ngram_lookup(seq2, 1, 1, 3, earliest=True).tolist() == [6]
    # the walk with the first-occurrence match: output copies the first continuation, not the latest
    prompt, out = [1, 2, 7, 3, 1, 2, 8, 4, 9], [1, 2, 7, 3, 0]
    first = walk_lookup(prompt, out, 2, (2, 2), earliest=True)
    latest = walk_lookup(prompt, out, 2, (2, 2))
    # first: [1, 2] -> 7, 3 (both accepted; the end). latest: [1, 2] -> 8 rejected, bonus 7; [2, 7] -> 3 accepted
    assert (first.drafts, first.accepted_tokens) == (1, 2) and (latest.drafts, latest.accepted_tokens) == (2, 1)


def test_a_hash_collision_falls_back_to_the_compare():
    seq = np.array([1, 2, 9, 9, 1, 2], dtype=np.int64)
    idx = NgramIndex(seq, 2, 2)
    idx._prev[2][:] = -1
    idx._prev[2][3] = 0  # pretend windows 0 ([1, 2]) and 3 ([9, 1]) share a hash
    assert idx.lookup(5, 2).tolist() == ngram_lookup(seq[:5], 2, 2, 2).tolist() == []


def test_walk_runs_replays_a_trace_as_the_simulator_runs_lookup():
    s = walk_runs([1, 3, 1, 5, 1, 1, 2, 1, 1], 9, 4)
    # starts 1 (run 3: 2 accepted), 4 (run 1), 5 (1), 6 (2: 1 accepted), 8 (1); every step drafts k
    assert (s.steps, s.drafts, s.draft_tokens, s.accepted_tokens) == (5, 5, 20, 3)
    assert s.tried_per_position == (5, 2, 1, 0) and s.accepted_per_position == (2, 1, 0, 0)
    # gamma below the trace's max_k: a run is capped at k + 1
    s2 = walk_runs([1, 9, 1, 1], 4, 2)
    assert s2.accepted_per_position == (1, 1) and s2.steps == 1
    with pytest.raises(ValueError):
        walk_runs([1], 1, 0)


@pytest.mark.parametrize("bad", [
    None, [], "x", {"steps": 3},
    {"steps": 2, "drafts": 3, "draft_tokens": 3, "accepted_tokens": 0, "tried_per_position": [3],
     "accepted_per_position": [0]},  # drafts > steps
    {"steps": 3, "drafts": 1, "draft_tokens": 2, "accepted_tokens": 2, "tried_per_position": [1, 0],
     "accepted_per_position": [1, 1]},  # accepted above tried
    {"steps": 3, "drafts": 1, "draft_tokens": 2, "accepted_tokens": 0, "tried_per_position": [1, 1],
     "accepted_per_position": [0, 0]},  # position 1 tried after position 0 was rejected
    {"steps": 3, "drafts": 1, "draft_tokens": 2, "accepted_tokens": 1, "tried_per_position": [1, 1],
     "accepted_per_position": [True, 0]},  # a bool is not a count
    {"steps": 3, "drafts": 1, "draft_tokens": 2, "accepted_tokens": 1, "tried_per_position": [1.0, 0],
     "accepted_per_position": [1, 0]},  # floats are not counts
    {"steps": 3, "drafts": 1, "draft_tokens": 2, "accepted_tokens": 5, "tried_per_position": [1, 0],
     "accepted_per_position": [1, 0]},  # total disagrees with the positions
    {"steps": 9, "drafts": 1, "draft_tokens": 1, "accepted_tokens": 0,
     "tried_per_position": [1] + [0] * MAX_POSITIONS, "accepted_per_position": [0] * (MAX_POSITIONS + 1)},
    {"steps": -1, "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "tried_per_position": [],
     "accepted_per_position": []},
])
def test_from_dict_drops_inconsistent_stats(bad):
    assert ShadowStats.from_dict(bad) is None


def test_from_dict_accepts_a_request_whose_lookup_never_drafted():
    s = ShadowStats.from_dict({"steps": 5, "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                               "tried_per_position": [0, 0], "accepted_per_position": [0, 0]})
    assert s is not None and s.steps == 5 and s.drafts == 0


def test_a_short_lookup_draft_counts_as_stopping_the_step_so_the_priced_tokens_per_step_are_exact():
    """Lookup drafts what follows the match, often fewer than k tokens (a loop's latest match ends one period
    before the end of the text). Counted as the engine counts it (the position where a short draft ends is
    tried and missed), the key's per-position rates multiply to acc_j / drafts, so the cost model's
    E(k) = 1 + sum_j prod_{i<=j} rate_i equals the walk's tokens per drafting step exactly (closed form)."""
    from adaptspec.control.alpha import AlphaTable
    from adaptspec.control.costmodel import expected_tokens_per_position
    from adaptspec.control.learn import shadow_observation

    rng = np.random.default_rng(7)
    table = AlphaTable(prior_strength=1e-9, half_life_tokens=None)
    total = ShadowStats(0, 0, 0, 0, (0,) * 8, (0,) * 8)
    cut = 0
    for _ in range(40):
        prompt = rng.integers(0, 50, 30).tolist()
        out: list[int] = []
        while len(out) < 64:  # loops of period 2-3 and fresh text, as a tiny model writes
            if rng.random() < 0.5:
                out += rng.integers(0, 50, 3).tolist() * int(rng.integers(2, 5))
            else:
                out += rng.integers(0, 50, int(rng.integers(2, 8))).tolist()
        # (a tail that never repeats: no draft is cut by the end of the output, only by the text)
        s = walk_lookup(prompt, out[:54] + list(range(100, 110)), 8, (2, 4))
        table.add(shadow_observation("w", "ngram", "code", s))
        cut += s.draft_tokens < 8 * s.drafts
        total = ShadowStats(total.steps + s.steps, total.drafts + s.drafts, total.draft_tokens + s.draft_tokens,
                            total.accepted_tokens + s.accepted_tokens,
                            tuple(a + b for a, b in zip(total.tried_per_position, s.tried_per_position, strict=True)),
                            tuple(a + b for a, b in zip(total.accepted_per_position, s.accepted_per_position,
                                                        strict=True)))
    assert cut > 20  # most requests drafted short lookups
    est = table.get("w", "ngram", "code")
    walked = (total.accepted_tokens + total.drafts) / total.drafts  # tokens per drafting step at k = 8
    assert expected_tokens_per_position(est.per_position) == pytest.approx(walked, rel=1e-6)
    # (the propose rate keeps its 8 pseudo-steps that all drafted)
    assert est.propose_rate == pytest.approx((total.drafts + 8) / (total.steps + 8), rel=1e-6)
