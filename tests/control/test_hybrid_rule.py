"""The per-step hybrid's shadow (control/hybrid_rule.py): a request's n-gram runs recomputed from its text equal the
n-gram proposer's own lookup on every prefix, and the shadow is the rule walked along them (`walk_hybrid`, what
trace replay reports for a traced request)."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspec.control.hybrid_rule import HybridRule, hybrid_shadow, lookup_runs, walk_hybrid
from adaptspec.control.shadow import ngram_lookup


def _text(rng: np.random.Generator, n: int) -> list[int]:
    """Tokens of a small vocabulary with copied stretches (what lookup finds) between novel ones."""
    out: list[int] = list(rng.integers(0, 50, 20))
    while len(out) < n:
        if rng.random() < 0.5 and len(out) > 10:
            start = int(rng.integers(0, len(out) - 5))
            out += out[start:start + int(rng.integers(3, 30))]
        else:
            out += list(rng.integers(0, 50, int(rng.integers(1, 12))))
    return [int(x) for x in out[:n]]


def _brute_runs(prompt: list[int], output: list[int], bound: int, sizes: tuple[int, int]) -> list[int]:
    seq = np.asarray(prompt + output, dtype=np.int64)
    p, n = len(prompt), len(output)
    runs = [1] * n
    for i in range(1, n):
        draft = ngram_lookup(seq[:p + i], min(bound, n - i - 1), *sizes)
        m = 0
        while m < draft.size and draft[m] == seq[p + i + m]:
            m += 1
        runs[i] = 1 + m
    return runs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("bound", [1, 4, 8])
def test_runs_are_the_proposers_lookup_on_every_prefix(seed, bound):
    rng = np.random.default_rng(seed)
    text = _text(rng, 260)
    prompt, output = text[:120], text[120:]
    got = lookup_runs(prompt, output, bound, (1, 4))
    assert got.tolist() == _brute_runs(prompt, output, bound, (1, 4))
    assert got[0] == 1 and (got >= 1).all() and (got <= bound + 1).all()
    assert (got <= len(output) - np.arange(len(output))).all()  # never past the output's end
    assert (got > 1).any()  # the copied stretches are found


@pytest.mark.parametrize("seed", range(3))
def test_the_shadow_is_the_rule_walked_along_the_runs(seed):
    rng = np.random.default_rng(seed)
    text = _text(rng, 300)
    prompt, output = text[:100], text[100:]
    rule = HybridRule(min_match=2, multiplier=2.0)
    shadow = hybrid_shadow(prompt, output, rule, 8, (1, 4))
    assert shadow == walk_hybrid(_brute_runs(prompt, output, 8, (1, 4)), len(output), rule, 8)
    # lookup steps + the positions the head covered span the output after its first token
    assert 0 < shadow.drafts < shadow.steps <= len(output) - 1
    assert shadow.tried_per_position[0] == shadow.drafts


def test_short_outputs_have_no_lookup_steps():
    rule = HybridRule()
    assert hybrid_shadow([1, 2, 3], [4], rule, 8, (1, 4)).steps == 0
    assert lookup_runs([1, 2], [], 8, (1, 4)).size == 0
