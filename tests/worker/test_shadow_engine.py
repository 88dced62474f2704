"""The shadow n-gram walk (control/shadow.py) against the real engine: at temperature 0 it reproduces, count
for count, what a lookup request reports; at temperature > 0 its acceptance has the closed-form law of a
lookup request's (STYLE.md: 6 sigma + 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_requests import V_SMALL, chat_ids, greedy_request, random_model
from test_engine_distribution import _NoTokenizer

from adaptspec.control.shadow import walk_lookup
from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.proposers.ngram import ngram_lookup
from adaptspec.worker.sampling import logits_to_probs

PROMPTS = [
    "Fix the typo in this function and return the whole function.\n\ndef total_price(items, tax):\n"
    "    subtotal = sum(item.price * item.qty for item in items)\n    taxes = subtotal * tax\n"
    "    return subtotl + taxes\n",
    "Summarize: The cat sat on the mat. The cat was happy on the mat. The dog saw the cat on the mat.",
    "Write a short poem about the sea.",
]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_walk_equals_the_lookup_request_count_for_count(engine, k):
    """The same prompt run with lookup at gamma k, and without speculation then walked: identical counts (the
    output is the same, and the walk drafts and counts steps as the engine does)."""
    for i, text in enumerate(PROMPTS):
        ids = chat_ids(engine, text)
        out = engine.run_sync([greedy_request(f"ng{i}", ids, "ngram", k, max_tokens=40),
                               greedy_request(f"off{i}", ids, max_tokens=40)])
        (toks, run), (plain, _) = out[f"ng{i}"], out[f"off{i}"]
        assert toks == plain
        s = walk_lookup(ids, plain, k, engine.ngram_sizes)
        assert (s.steps, s.drafts, s.draft_tokens, s.accepted_tokens) == (
            run.steps, run.drafts, run.draft_tokens, run.accepted_tokens), (text[:20], k)
        assert s.tried_per_position == tuple(run.tried_per_position)
        assert s.accepted_per_position == tuple(run.accepted_per_position)
    assert s.drafts > 0


N = 20_000


@pytest.mark.slow
def test_sampled_walk_accepts_with_the_lookup_requests_law():
    """Prompt [1, 1, 4, 4], 3 tokens, gamma 1, T=0.8 / top_p 0.9 on a small random target: the walk's one trial
    drafts d(x1) = lookup(prompt + [x1]) after the first token x1 and accepts when x2 == d(x1), with probability
    P = sum_x1 p(x1) p(d(x1) | x1). Requests run without speculation and walked, and requests run with lookup,
    must both accept N * P times within 6 sigma + 5."""
    target = random_model(1, 3.0)
    prompt, temperature, top_p = [1, 1, 4, 4], 0.8, 0.9  # the lookup drafts after ~72% of first tokens
    torch.manual_seed(0)
    engine = Engine(target, _NoTokenizer(), None, max_batch=512, max_model_len=8)
    with engine:
        sizes = engine.ngram_sizes
        with torch.inference_mode():
            p1 = logits_to_probs(target.forward_dense(torch.tensor([prompt]))[0, -1:], temperature, top_p).probs[0]
            ctx = torch.tensor([prompt + [x] for x in range(V_SMALL)])
            p2 = logits_to_probs(target.forward_dense(ctx)[:, -1], temperature, top_p).probs
        drafts = {x: ngram_lookup(np.array(prompt + [x]), 1, *sizes) for x in range(V_SMALL)}
        law = sum(float(p1[x]) * float(p2[x, int(d[0])]) for x, d in drafts.items() if len(d))
        assert 0.05 < law < 0.95  # both outcomes are common

        def requests(proposer: str, k: int) -> list[GenRequest]:
            return [GenRequest(f"{proposer}{i}", prompt, max_tokens=3, temperature=temperature, top_p=top_p,
                               proposer=proposer, num_speculative_tokens=k, ignore_eos=True) for i in range(N)]

        plain = engine.generate_sync(requests("none", 0), timeout=600)
        walked = [walk_lookup(prompt, toks, 1, sizes) for toks in plain.values()]
        ran = engine.run_sync(requests("ngram", 1), timeout=600)
    shadow_trials = sum(s.drafts for s in walked)
    want_trials = N * sum(float(p1[x]) for x, d in drafts.items() if len(d))
    bound_t = 6 * (N * (want_trials / N) * (1 - want_trials / N)) ** 0.5 + 5
    assert abs(shadow_trials - want_trials) <= bound_t
    bound = 6 * (N * law * (1 - law)) ** 0.5 + 5
    shadow_acc = sum(s.accepted_tokens for s in walked)
    lookup_acc = sum(out.accepted_tokens for _, out in ran.values())
    assert abs(shadow_acc - N * law) <= bound, (shadow_acc, N * law, bound)
    assert abs(lookup_acc - N * law) <= bound, (lookup_acc, N * law, bound)
