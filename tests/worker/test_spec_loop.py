"""A speculative generation loop on the shipped pair: draft or n-gram proposals + verify_drafts.

At temperature 0 it must emit exactly the tokens of plain greedy decoding, for every k.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import DraftModelProposer, NgramProposer, ProposeInput, SamplingParams
from adaptspec.worker.sampling import logits_to_probs
from adaptspec.worker.tokenizer import Tokenizer
from adaptspec.worker.verify import verify_drafts

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
PROMPTS = [
    "Summarize this article in one sentence.\n\nArticle: The city council met on Tuesday to discuss the new "
    "park. The new park will have a playground, a pond and a small library. The council voted to build the park.",
    "Complete this Python function.\n\ndef add_numbers(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether?",
    "Translate to English:\nMaria sagte, sie wisse nicht, wo Tom sei.",
]
MAX_NEW = 24


@pytest.fixture(scope="module")
def pair():
    tok = Tokenizer.from_dir(ASSETS / "tiny-target")
    return TinyLlama.from_pretrained(ASSETS / "tiny-target"), TinyLlama.from_pretrained(ASSETS / "tiny-draft"), tok


def prompt_ids(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


_REFERENCE: dict[tuple[int, ...], list[int]] = {}


@torch.inference_mode()
def greedy_decode(model: TinyLlama, ids: list[int], n: int) -> list[int]:
    """Plain greedy decoding, one token per forward (the reference; memoised per prompt)."""
    key = (*ids, -n)
    if key not in _REFERENCE:
        cache = model.new_cache(1, 512)
        seq = list(ids)
        logits = model.forward([seq], [0], [0], cache)
        for _ in range(n):
            seq.append(int(logits[-1].argmax()))
            logits = model.forward([seq[-1:]], [0], [len(seq) - 1], cache)
        _REFERENCE[key] = seq[len(ids):]
    return _REFERENCE[key]


@torch.inference_mode()
def speculative_decode(model: TinyLlama, proposer, ids: list[int], n: int, k: int) -> tuple[list[int], int, int]:
    cache = model.new_cache(1, 512)
    seq, kv_len, drafted, accepted = list(ids), 0, 0, 0
    while len(seq) - len(ids) < n:
        draft = proposer.propose([ProposeInput("r", seq, k, SamplingParams(temperature=0.0))])[0]
        chunk = seq[kv_len:] + draft.token_ids
        logits = model.forward([chunk], [0], [kv_len], cache)[-(len(draft.token_ids) + 1):]
        probs = logits_to_probs(logits, 0.0).probs
        out = verify_drafts(probs, torch.tensor(draft.token_ids, dtype=torch.long), [len(draft.token_ids)],
                            draft_probs=draft.probs, greedy=[True])[0]
        emitted = [t for t in out.tolist() if t >= 0]
        kv_len = len(seq) + len(emitted) - 1
        seq.extend(emitted)
        drafted += len(draft.token_ids)
        accepted += len(emitted) - 1
    return seq[len(ids):len(ids) + n], drafted, accepted


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("kind", ["ngram", "draft"])
def test_speculative_greedy_equals_plain_greedy(pair, kind, k):
    target, draft, tok = pair
    total_drafted = 0
    for text in PROMPTS:
        ids = prompt_ids(tok, text)
        proposer = NgramProposer(min_n=1, max_n=3) if kind == "ngram" else DraftModelProposer(draft, 1, 512)
        got, drafted, accepted = speculative_decode(target, proposer, ids, MAX_NEW, k)
        assert got == greedy_decode(target, ids, MAX_NEW), text
        assert 0 <= accepted <= drafted
        total_drafted += drafted
    assert total_drafted > 0  # speculation really happened
