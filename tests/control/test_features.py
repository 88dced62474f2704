"""The hashed classifier's feature function (adaptspec/control/_hashed_features.py): hashed byte n-grams against a pure-Python reference, determinism across
processes, and the edge cases (empty, non-ASCII, invalid surrogates, huge prompts)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from adaptspec.control import _hashed_features as _features
from adaptspec.control.classify import HashedClassifier
from adaptspec.control.types import CONTENT_CLASSES

TEXTS = [
    "",
    "a",
    "Translate to French: good morning",
    "def f(x):\n    return {\"a\": x}  # naïve café ☕",
    "日本語のテキストを英語に翻訳してください。",
    "Summarize:\n" + "The council met on Tuesday. " * 60 + "\nWhat did they decide?",
]


def _reference_buckets(data: bytes) -> list[list[int]]:
    """hashed_ngrams written out per n-gram: the n bytes from i, little-endian, times the length's multiplier
    modulo 2**64, top BUCKET_BITS bits."""
    positions = len(data) - 7
    rows = []
    for n in _features.ORDERS:
        mult = _features._MULTIPLIERS[n - 1]
        rows.append([(int.from_bytes(data[i : i + n], "little") * mult % 2**64) >> (64 - _features.BUCKET_BITS)
                     for i in range(positions)])
    return rows


@pytest.mark.parametrize("text", TEXTS, ids=lambda t: repr(t[:16]))
def test_hashed_ngrams_equal_the_reference_hash(text):
    data = (_features.START + _features.window(text).lower() + _features._PAD).encode("utf-8")
    got = _features.hashed_ngrams(data)
    assert got.dtype == np.int64 and got.shape == (len(_features.ORDERS), len(data) - 7)
    assert got.tolist() == _reference_buckets(data)
    assert got.min() >= 0 and got.max() < _features.N_BUCKETS


def test_scan_is_deterministic_and_byte_identical_across_processes():
    """The same text gives byte-identical features in this process, again, and in a fresh interpreter (no
    salted hash, no dependence on memory layout)."""
    def digest(text: str) -> str:
        buckets, value, struct = _features.scan(text)
        return hashlib.sha256(buckets.tobytes() + np.array([value, *struct]).tobytes()).hexdigest()

    here = [digest(t) for t in TEXTS]
    assert here == [digest(t) for t in TEXTS]
    code = (
        "import hashlib, json, sys\nimport numpy as np\nfrom adaptspec.control import _hashed_features as _features\n"
        "out = []\nfor t in json.loads(sys.stdin.read()):\n"
        "    b, v, s = _features.scan(t)\n"
        "    out.append(hashlib.sha256(b.tobytes() + np.array([v, *s]).tobytes()).hexdigest())\n"
        "print(json.dumps(out))\n"
    )
    fresh = subprocess.run([sys.executable, "-c", code], input=json.dumps(TEXTS), capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert json.loads(fresh.stdout) == here
    assert len(set(here)) == len(TEXTS)  # and different texts differ


def test_case_is_folded_and_the_window_is_bounded():
    assert np.array_equal(_features.scan("HELLO World")[0], _features.scan("hello world")[0])
    long_a = "x" * 5000 + "tail of the prompt"
    long_b = "x" * 9000 + "tail of the prompt"
    assert np.array_equal(_features.scan(long_a)[0], _features.scan(long_b)[0])  # same head and tail window
    assert _features.scan(long_a)[2] != _features.scan(long_b)[2]  # the length still counts (log_chars)
    buckets, value, _ = _features.scan("y" * 10**6)
    # START + head + "\n" + tail, one n-gram of each length per byte
    assert buckets.shape == (len(_features.ORDERS), 1 + _features.HEAD_CHARS + 1 + _features.TAIL_CHARS)
    assert value == pytest.approx(1 / np.sqrt(buckets.size))


def _random_model() -> HashedClassifier:
    """A HashedClassifier with random weights (seed 0): what it predicts is beside the point here."""
    rng = np.random.default_rng(0)
    k, c = 5000, len(CONTENT_CLASSES)
    buckets = rng.choice(_features.N_BUCKETS, k, replace=False)
    return HashedClassifier(buckets, rng.standard_normal((k, c)).astype(np.float16),
                            rng.standard_normal((len(_features.STRUCT_NAMES), c)), np.zeros(c), CONTENT_CLASSES)


def test_empty_non_ascii_surrogate_and_huge_prompts():
    model = _random_model()
    cases = ["", "\x00\x00", "é" * 2000, "🙂" * 1000, "İ" * 3000, "\ud800 lone surrogate", "x" * 2_000_000,
             "\n" * 100_000]
    for text in cases:
        buckets, value, struct = _features.scan(text)
        assert buckets.shape[0] == len(_features.ORDERS) and buckets.shape[1] >= 1  # START at least
        assert np.isfinite(value) and len(struct) == len(_features.STRUCT_NAMES)
        assert all(np.isfinite(struct)) and all(0.0 <= v <= 2.0 for v in struct)  # log length: 1.45 at 2M
        cls, scores = model.predict(text)
        assert np.isclose(sum(scores.values()), 1.0)
    # 4-byte characters fill the window with the most n-grams a prompt can have
    assert _features.scan("🙂" * 1000)[0].shape[1] == 1 + 4 * (_features.HEAD_CHARS + _features.TAIL_CHARS) + 1


def test_structural_features_read_what_they_name():
    def feature(text: str, name: str) -> float:
        return _features.scan(text)[2][_features.STRUCT_NAMES.index(name)]

    assert feature("anything", "const") == 1.0
    assert feature("x" * 100, "log_chars") == pytest.approx(np.log1p(100) / 10)
    assert feature("a\nb\nc", "log_lines") == pytest.approx(np.log1p(2) / 6)
    assert feature("What is 17 * 23?  ", "ends_with_question") == 1.0
    assert feature("What is 17 * 23.", "ends_with_question") == 0.0
    assert feature("Please TRANSLATE this", "translate_word") == 1.0
    passage = "The council met. " * 60
    assert feature(passage, "long_context") == 1.0 and feature(passage, "long_context_question") == 0.0
    assert feature(passage + "What did they decide?", "long_context_question") == 1.0
    assert feature("Anna: hi\nBen: hello\nAnna: how are you\nBen: fine", "colon_lines") == 1.0
    assert feature("one\ntwo\nthree\nfour: five", "colon_lines") == pytest.approx(1 / 4)
    assert feature("a: b\nc: d", "colon_lines") == 0.0  # fewer than 3 line breaks: not a dialogue
