"""N-gram prompt lookup and the draft-model proposer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import (
    DraftModelProposer,
    NgramProposer,
    ProposeInput,
    Proposer,
    SamplingParams,
    ngram_lookup,
)
from adaptspec.worker.sampling import sample_from_probs

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"


def lookup(seq, k, min_n=1, max_n=4):
    return ngram_lookup(np.array(seq), k, min_n, max_n).tolist()


def test_ngram_prefers_longest_then_most_recent_match():
    #          0  1  2  3  4  5  6  7  8  9 10
    seq = [1, 2, 3, 9, 2, 3, 7, 8, 5, 2, 3]
    # suffix (2, 3) occurs at 1 and 4: the most recent (4) wins -> continuation 7, 8, 5
    assert lookup(seq, 3) == [7, 8, 5]
    # a longer suffix match beats a more recent shorter one: (1, 2, 3) only matches at 0
    seq2 = [1, 2, 3, 4, 6, 2, 3, 5, 1, 2, 3]
    assert lookup(seq2, 2) == [4, 6]
    assert lookup(seq2, 2, max_n=2) == [5, 1]
    # continuation truncated at the end of the sequence
    assert lookup([4, 5, 4], 3) == [5, 4]


def test_ngram_no_match_and_min_n():
    assert lookup([1, 2, 3, 4], 3) == []
    assert lookup([1], 3) == []
    assert lookup([7, 1, 8, 1], 3, min_n=2) == []
    assert lookup([7, 1, 8, 1], 3, min_n=1) == [8, 1]


def test_ngram_proposer_batch_is_point_mass():
    p = NgramProposer(min_n=1, max_n=3)
    assert isinstance(p, Proposer)
    out = p.propose([ProposeInput("a", [1, 2, 3, 1, 2], 2), ProposeInput("b", [5, 6], 4)])
    assert [d.token_ids for d in out] == [[3, 1], []]
    assert all(d.probs is None for d in out)
    with pytest.raises(ValueError, match="min_n"):
        NgramProposer(min_n=3, max_n=2)


@pytest.fixture(scope="module")
def draft_model():
    return TinyLlama.from_pretrained(ASSETS / "tiny-draft")


@torch.inference_mode()
def greedy(model, ids, n):
    seq = list(ids)
    for _ in range(n):
        seq.append(int(model.forward_dense(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(ids):]


def test_draft_greedy_matches_model_and_catches_up(draft_model):
    prop = DraftModelProposer(draft_model, max_slots=3, max_len=256)
    assert isinstance(prop, Proposer)
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 4096, (30,), generator=g).tolist()
    b = torch.randint(0, 4096, (11,), generator=g).tolist()
    greedy0 = SamplingParams(temperature=0.0)
    d = prop.propose([ProposeInput("a", a, 4, greedy0), ProposeInput("b", b, 2, greedy0)])
    assert d[0].token_ids == greedy(draft_model, a, 4)
    assert d[1].token_ids == greedy(draft_model, b, 2)
    assert d[0].probs.shape == (4, draft_model.cfg.vocab_size)
    assert torch.equal(d[0].probs.argmax(-1), torch.tensor(d[0].token_ids))
    assert torch.all(d[0].probs.sum(-1) == 1)
    # the verifier accepted 2 of a's drafts then emitted 17; b: nothing accepted, emitted 5
    a2 = a + d[0].token_ids[:2] + [17]
    b2 = b + [5]
    d2 = prop.propose([ProposeInput("a", a2, 3, greedy0), ProposeInput("b", b2, 5, greedy0)])
    assert d2[0].token_ids == greedy(draft_model, a2, 3)
    assert d2[1].token_ids == greedy(draft_model, b2, 5)
    # a fresh proposer (no cache) agrees
    fresh = DraftModelProposer(draft_model, max_slots=1, max_len=256)
    assert fresh.propose([ProposeInput("x", a2, 3, greedy0)])[0].token_ids == d2[0].token_ids
    prop.remove("a")
    prop.remove("b")
    assert sorted(prop._free) == [0, 1, 2]


def test_draft_catch_up_splits_prompts_from_short_chunks(draft_model):
    """A request that joins with its prompt while others catch up one token runs in a forward of its own
    (no padding of every row to the prompt); drafts stay the model's greedy ones, in batch order."""
    prop = DraftModelProposer(draft_model, max_slots=4, max_len=256, split_tokens=8)
    g = torch.Generator().manual_seed(1)
    seqs = {r: torch.randint(0, 4096, (n,), generator=g).tolist() for r, n in (("a", 6), ("b", 5), ("c", 7))}
    greedy0 = SamplingParams(temperature=0.0)
    prop.propose([ProposeInput(r, seqs[r], 2, greedy0) for r in ("a", "c")])  # a, c cached (short prompts)
    for r in ("a", "c"):
        seqs[r] = seqs[r] + [11]
    seqs["b"] = torch.randint(0, 4096, (40,), generator=g).tolist()  # joins now: a 40-token catch-up chunk
    batch = [ProposeInput(r, seqs[r], 3, greedy0) for r in ("a", "b", "c")]  # the long chunk in the middle
    calls = []
    forward = draft_model.forward

    def spy(token_ids, *args, **kw):
        calls.append(sorted(len(t) for t in token_ids))
        return forward(token_ids, *args, **kw)

    draft_model.forward = spy
    try:
        d = prop.propose(batch)
    finally:
        del draft_model.forward
    assert calls[:2] == [[1, 1], [40]]  # step 0: short chunks together, the prompt apart
    for r, dr in zip(("a", "b", "c"), d, strict=True):
        assert dr.token_ids == greedy(draft_model, seqs[r], 3), r


def test_draft_samples_from_the_probs_it_reports(draft_model):
    """Seeded drafting draws each token from exactly the returned row (same generator stream)."""
    prop = DraftModelProposer(draft_model, max_slots=2, max_len=256)
    ids = list(range(100, 140))
    for temperature, top_p in [(1.0, 1.0), (0.7, 0.9)]:
        gen = torch.Generator().manual_seed(123)
        replay = torch.Generator().manual_seed(123)
        d = prop.propose([ProposeInput("s", ids, 5, SamplingParams(temperature, top_p, gen))])[0]
        assert d.probs.shape == (5, draft_model.cfg.vocab_size)
        torch.testing.assert_close(d.probs.sum(-1), torch.ones(5))
        replayed = [int(sample_from_probs(d.probs[j:j + 1], {0: replay})[0]) for j in range(5)]
        assert replayed == d.token_ids
        assert all(d.probs[j, t] > 0 for j, t in enumerate(d.token_ids))
        if top_p < 1:
            assert int((d.probs[0] > 0).sum()) < draft_model.cfg.vocab_size
        prop.remove("s")


def test_draft_respects_cache_room_and_slots(draft_model):
    prop = DraftModelProposer(draft_model, max_slots=1, max_len=16)
    d = prop.propose([ProposeInput("r", list(range(15)), 5, SamplingParams(0.0))])[0]
    assert len(d.token_ids) == 2  # positions 15 and 16: only the first draft is fed back (pos 15)
    with pytest.raises(RuntimeError, match="no free KV slot"):
        prop.add("other")
