"""Greedy texts compared for identity across speculation settings and batch compositions are only meaningful
where the target has no near-tie: a float32 forward's logits move by ~1e-5 with the batch's shape (padding,
kernel blocking), as in any engine, so a top-2 gap below that makes the text depend on the batch. These checks
keep the shared prompts of the identity tests clear of such ties, in float64."""

from __future__ import annotations

from engine_requests import ASSETS, COPY_CODE_PROMPT, greedy_min_margin

from adaptspec.worker.tokenizer import Tokenizer

MIN_GAP = 5e-4  # 40x the largest float32-vs-float64 logit difference measured on these prompts (1.2e-5)


def _ids(text: str) -> list[int]:
    return Tokenizer.from_dir(ASSETS / "tiny-target").encode(text)


def test_the_copy_code_prompt_has_no_near_tie_in_160_greedy_tokens():
    gap, at = greedy_min_margin(ASSETS / "tiny-target", _ids(COPY_CODE_PROMPT), 160)
    assert gap >= MIN_GAP, f"top-2 logit gap {gap:.3g} at greedy token {at}"


def test_the_margin_finds_the_tie_that_made_the_mixed_batch_test_flaky():
    old = COPY_CODE_PROMPT.removesuffix("    if")
    gap, at = greedy_min_margin(ASSETS / "tiny-target", _ids(old), 40)
    assert gap < 1e-5 and at == 26


def test_the_hybrid_tests_chat_prompts_have_no_near_tie_in_64_greedy_tokens():
    """test_hybrid.py / test_hybrid_model_k.py compare 40 greedy tokens of these two chat turns with and without
    the hybrid; the open prompt they used before ("... lighthouse keeper.") had a 5.4e-5 gap at token 23."""
    from test_hybrid import COPY_PROMPT, OPEN_PROMPT

    tok = Tokenizer.from_dir(ASSETS / "tiny-target")
    for text in (COPY_PROMPT, OPEN_PROMPT):
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
        gap, at = greedy_min_margin(ASSETS / "tiny-target", ids, 64)
        assert gap >= MIN_GAP, f"{text[:30]!r}: top-2 logit gap {gap:.3g} at greedy token {at}"
