"""The hashed byte n-gram classifier (artifact_format 2): train -> export -> load round trip, numpy inference ==
scikit-learn, the inference vector == the training matrix's row, artifact errors, request handling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from adaptspec.control import _hashed_features
from adaptspec.control.classify import HASHED_FORMAT, Classifier, HashedClassifier, save_hashed_artifact
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ModelLoadError
from tests.control.test_classify import _load_trainer

REPO = Path(__file__).resolve().parents[2]

# Written for these tests (not taken from the training data); a tiny model is trained on them.
TRAIN: dict[str, list[str]] = {
    "code": ["Write a Python function that reverses a list.", "def add(a, b):\n    return a + b",
             "Implement a Rust function that parses a date.", "Fix this bug: for i in range(10) print(i)"],
    "structured": ['Return JSON with fields "name" and "age" for: Bob, 31',
                   'Call the tool {"name": "get_weather", "parameters": {"city": "Paris"}}',
                   "Give me a JSON object with title and year: The Matrix, 1999"],
    "summarize": ["Summarize the following article in two sentences: the council met on Tuesday and voted.",
                  "TL;DR: the meeting moved to Friday because the room was booked.",
                  "Answer from the context only. Context: the Amazon flows through Peru. Question: where?"],
    "translate": ["Translate to French: good morning", "How do you say 'thank you' in Spanish?",
                  "Translate the following English text into German: where is the station?"],
    "math": ["What is 17 * 23?", "Solve for x: 3x - 7 = 20", "A farmer has 12 cows and buys 3 more. How many?"],
    "chat": ["hi", "Tell me a joke about cats.", "What should I cook for dinner tonight?",
             "Who wrote Pride and Prejudice?"],
}
HELD_OUT = ["Write a Go function that sums a slice.", "Translate to Italian: good night", "What is 12% of 250?",
            "", "?", "日本語のテキスト", "x" * 5000, "Summarize: the train was late, so we missed the concert."]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(trainer module, fitted LogisticRegression with the shipped weights, artifact directory)."""
    trainer = _load_trainer()
    texts = [t for ts in TRAIN.values() for t in ts]
    ys = np.array([CONTENT_CLASSES.index(c) for c, ts in TRAIN.items() for _ in ts])
    clf = trainer.fit(trainer.hashed_matrix(texts), ys, c=10.0)
    coef, intercept = trainer.quantize_hashed(clf, keep=4000)
    buckets, bucket_coef, struct_coef = trainer.compact_hashed(coef)
    assert 0 < buckets.size <= 4000
    meta = {
        "classes": list(CONTENT_CLASSES),
        "feature_version": _hashed_features.VERSION,
        "feature_params": _hashed_features.PARAMS,
        "structural_features": list(_hashed_features.STRUCT_NAMES),
    }
    directory = tmp_path_factory.mktemp("hashed")
    save_hashed_artifact(directory, buckets, bucket_coef, struct_coef, intercept, meta)
    return trainer, clf, directory


def test_export_load_round_trip_is_exact_and_deterministic(trained, tmp_path):
    trainer, clf, directory = trained
    model = Classifier.load(directory)
    assert isinstance(model, HashedClassifier)
    assert model.meta["artifact_format"] == HASHED_FORMAT
    assert sorted(p.name for p in directory.iterdir()) == ["meta.json", "weights.npz"]
    np.testing.assert_array_equal(model.dense_coef(), clf.coef_.T)  # the float16-rounded weights, exactly
    # the same weights give byte-identical files
    with np.load(directory / "weights.npz") as arrays:
        again = {k: arrays[k] for k in arrays.files}
    save_hashed_artifact(tmp_path, again["buckets"], again["bucket_coef"], again["struct_coef"], again["intercept"],
                         json.loads((directory / "meta.json").read_text()))
    for name in ("weights.npz", "meta.json"):
        assert (tmp_path / name).read_bytes() == (directory / name).read_bytes()


def test_numpy_inference_gives_sklearns_predictions(trained):
    trainer, clf, directory = trained
    model = Classifier.load(directory)
    x = trainer.hashed_matrix(HELD_OUT)
    proba = clf.predict_proba(x)
    for i, text in enumerate(HELD_OUT):
        # float32 sums of the float16 bucket weights against scikit-learn's float64 ones
        np.testing.assert_allclose(model.decision_function(text), clf.decision_function(x[i])[0], rtol=0, atol=2e-4)
        cls, scores = model.predict(text)
        assert CONTENT_CLASSES.index(cls) == clf.predict(x[i])[0]
        assert tuple(scores) == CONTENT_CLASSES and math.isclose(sum(scores.values()), 1.0, rel_tol=1e-9)
        np.testing.assert_allclose(list(scores.values()), proba[i], rtol=0, atol=1e-4)
    for cls, texts in TRAIN.items():  # the training prompts themselves are learnt
        assert [model.predict(t)[0] for t in texts] == [cls] * len(texts)


def test_inference_reads_the_training_vector(trained):
    """`_evidence` (gather + gemv + structural) and the training matrix's row `transform` are one vector."""
    model = Classifier.load(trained[2])
    coef = model.dense_coef()
    for text in [*HELD_OUT, "ab", "İ" * 3000, "🙂" * 1000]:
        idx, val = _hashed_features.transform(text)
        assert np.all(np.diff(idx) > 0) and idx[-1] == _hashed_features.N_FEATURES - 1
        dense = np.zeros(_hashed_features.N_FEATURES)
        dense[idx] = val
        buckets, value, struct = _hashed_features.scan(text)
        counts = np.bincount(buckets.ravel(), minlength=_hashed_features.N_BUCKETS)
        np.testing.assert_allclose(dense[: _hashed_features.N_BUCKETS], counts * value, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(dense[_hashed_features.N_BUCKETS :], struct)
        np.testing.assert_allclose(model._evidence(text), dense @ coef, rtol=0, atol=2e-4)


def test_requests_and_memo_go_through_the_hashed_model(trained):
    model = Classifier.load(trained[2])
    body = {"messages": [{"role": "system", "content": "You are helpful."},
                         {"role": "user", "content": "Translate to French: good morning"}]}
    cls, scores, forced = model.predict_request(body)
    assert forced is None and cls in CONTENT_CLASSES and math.isclose(sum(scores.values()), 1.0)
    assert model.classify_request(body) == cls
    assert len(model._memo) == 1
    assert model.predict_request(body) == (cls, scores, None)  # from the memo: the same answer
    assert model.classify_request({**body, "tools": [{"type": "function"}]}) == "structured"
    # the conversation's logits are the weighted mix of the last turn's and the whole context's
    last, context = "Translate to French: good morning", "You are helpful."
    mixed = model._logits(last, context)
    a, c = model.decision_function(last), model.decision_function(context + "\n\n" + last)
    expected = 0.2 * (a - model._b) + 0.8 * (c - model._b) + model._b
    np.testing.assert_allclose(mixed, expected, rtol=0, atol=1e-9)


def test_artifact_errors_are_clear(trained, tmp_path):
    directory = trained[2]
    meta = json.loads((directory / "meta.json").read_text())
    (tmp_path / "weights.npz").write_bytes((directory / "weights.npz").read_bytes())
    for key, value in (("structural_features", ["something", "else"]), ("feature_version", 1),
                       ("feature_params", {**meta["feature_params"], "bucket_bits": 16})):
        (tmp_path / "meta.json").write_text(json.dumps({**meta, key: value}))
        with pytest.raises(ModelLoadError, match="_hashed_features.py computes; retrain"):
            Classifier.load(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "weights.npz").write_bytes(b"not a zip file")
    with pytest.raises(ModelLoadError, match="cannot load the classifier artifact"):
        Classifier.load(tmp_path)
    with pytest.raises(ModelLoadError, match="bucket ids must be distinct"):
        c = len(CONTENT_CLASSES)
        HashedClassifier(np.array([3, 3]), np.zeros((2, c)), np.zeros((len(_hashed_features.STRUCT_NAMES), c)),
                         np.zeros(c), CONTENT_CLASSES)
    with pytest.raises(ModelLoadError, match="expected"):
        HashedClassifier(np.array([3]), np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(2), ("a", "b"))


def test_start_and_end_of_the_prompt_have_n_grams_of_their_own():
    """The START byte and the zero padding make the first and last bytes' n-grams differ from the same bytes
    elsewhere: "summarize" leading a prompt is not the same feature as "summarize" inside it."""
    lead, _, _ = _hashed_features.scan("summarize")
    inner, _, _ = _hashed_features.scan("please summarize it")
    assert np.intersect1d(lead, inner).size > 0  # the word's inner n-grams are the same buckets
    assert not np.isin(lead[1:, 0], inner).any()  # the n-grams with START (length >= 2) are not in the other
    # A long prompt keeps its lead although it lies outside the tail window.
    head, _, _ = _hashed_features.scan("Translate " + "x " * 2000)
    np.testing.assert_array_equal(head[:, 0], _hashed_features.scan("Translate")[0][:, 0])
