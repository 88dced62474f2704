"""At temperature > 0 the engine's output follows the target distribution, whatever the proposer and k.

Closed form: for a fixed prompt the first two emitted tokens have law p(x1) p(x2 | x1) under the target
model (after temperature/top_p). A small-vocab random target/draft pair (peaky, and different from each
other so drafts are often rejected) runs 65,536 requests through the real engine — continuous batching,
draft-model speculation with its reported probs, verify_drafts — and every (x1, x2) bin must lie within
6 sigma + 5 of n * p, with zero-probability bins never hit (STYLE.md).
"""

from __future__ import annotations

import pytest
import torch
from engine_requests import V_SMALL, random_model

from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.sampling import logits_to_probs
from adaptspec.worker.tokenizer import Tokenizer

V = V_SMALL
N = 65_536


class _NoTokenizer(Tokenizer):
    def __init__(self):
        self.chat_template = None
        self.eos_token_ids = []


@pytest.mark.slow
@pytest.mark.parametrize(("proposer", "temperature", "top_p"), [("draft", 1.0, 1.0), ("ngram", 0.8, 0.9)])
def test_first_two_tokens_follow_the_target(proposer, temperature, top_p):
    target, draft = random_model(1, 3.0), random_model(2, 3.0)
    prompt = [3, 7, 3, 7]  # the n-gram proposer finds (3, 7) and drafts 3
    with torch.inference_mode():
        p1 = logits_to_probs(target.forward_dense(torch.tensor([prompt]))[0, -1:], temperature, top_p).probs[0]
        ctx = torch.tensor([prompt + [x] for x in range(V)])
        p2 = logits_to_probs(target.forward_dense(ctx)[:, -1], temperature, top_p).probs  # [V, V]
    expected = (p1[:, None] * p2).double().flatten()  # law of (x1, x2)
    assert expected.max() < 0.5 and (expected > 0).sum() > 8  # a non-trivial law

    torch.manual_seed(0)
    engine = Engine(target, _NoTokenizer(), draft, max_batch=512, max_model_len=8)
    with engine:
        reqs = [GenRequest(f"r{i}", prompt, max_tokens=2, temperature=temperature, top_p=top_p,
                           proposer=proposer, num_speculative_tokens=3) for i in range(N)]
        out = engine.generate_sync(reqs, timeout=600)
        m = engine.metrics()
    counts = torch.zeros(V * V, dtype=torch.float64)
    for toks in out.values():
        assert len(toks) == 2
        counts[toks[0] * V + toks[1]] += 1
    assert m.spec_num_draft_tokens > 0
    if proposer == "draft":
        assert 0 < m.spec_num_accepted_tokens < m.spec_num_draft_tokens  # both outcomes exercised
    mean = N * expected
    bound = 6 * torch.sqrt(N * expected * (1 - expected)) + 5
    assert torch.all(counts[expected == 0] == 0)
    bad = (counts - mean).abs() > bound
    assert not bad.any(), [(int(i), counts[i].item(), mean[i].item()) for i in bad.nonzero().flatten()]
