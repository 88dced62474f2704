"""The content classifier: shipped artifact, predictions, request handling, numpy == scikit-learn."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptspec.control import _features
from adaptspec.control.classify import ARTIFACT_DIR, Classifier, classify_request, request_text, save_artifact
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ModelLoadError, RequestError

REPO = Path(__file__).resolve().parents[2]

# Written for these tests (not taken from the training data).
CLEAR_PROMPTS: dict[str, list[str]] = {
    "code": [
        "Write a Python function that returns the n-th Fibonacci number using memoization.",
        "```js\nfunction add(a, b) {\n  return a + b\n}\n```\nWhy does this return NaN when I call add(1)?",
        "def is_prime(n: int) -> bool:\n    \"\"\"Return True if n is a prime number.\n    >>> is_prime(7)\n    True\n    \"\"\"\n",
        "Implement a Rust function that reverses a singly linked list in place.",
    ],
    "structured": [
        'What is the weather in Paris tomorrow?\n\nAvailable functions (JSON schema):\n[{"name": "get_forecast", '
        '"description": "Weather forecast for a city", "parameters": {"type": "object", "properties": {"city": '
        '{"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]',
        "Return a JSON object with the keys \"name\", \"birth_date\" and \"occupation\" for this bio:\n\n"
        "marie curie ( born 7 november 1867 in warsaw ) was a polish physicist and chemist .",
    ],
    "summarize": [
        "Summarize the following article in two sentences:\n\n" + " ".join(
            ["The city council met on Tuesday to discuss the new budget for public transport."] * 3
            + ["Several members argued that bus fares should stay the same while the tram network grows."] * 3
            + ["The mayor said a final vote is expected next month after a public consultation."] * 3
        ),
        "Answer the question using only the context below.\n\nContext: The Amazon river flows through Peru, "
        "Colombia and Brazil and carries more water than any other river on Earth. Its basin covers about "
        "seven million square kilometres, much of it rainforest, and it is home to thousands of species of "
        "fish. Scientists still debate whether the Amazon or the Nile is the longest river.\n\n"
        "Question: Which countries does the Amazon flow through?",
    ],
    "translate": [
        "Translate the following English text into French:\n\nThe train leaves at seven tomorrow morning.",
        "How do you say this in Spanish?\n\"I would like a cup of coffee, please.\"",
        "Translate to German: Where is the nearest pharmacy?",
    ],
    "math": [
        "A farmer has 12 cows and buys 3 times as many sheep. Each sheep costs $45. How much did he spend "
        "on sheep?",
        "Tom reads 20 pages a day. His book has 340 pages. After 9 days, how many pages are left to read?",
        "If a car travels 150 km in 2.5 hours, what is its average speed in km per hour?",
    ],
    "chat": [
        "What happens if you swallow chewing gum?",
        "I want you to act as a travel guide. I will tell you my location and you will suggest places to "
        "visit nearby. My first request is \"I am in Lisbon\".",
        "Who was the first person to walk on the moon?",
    ],
}

# Short, instruction-led requests (written for these tests): a lead verb and a short argument. The data rows of
# summarize and structured are all long, which once made every one of the first five below read as chat.
SHORT_PROMPTS: list[tuple[str, str]] = [
    ("summarize", "Summarize this passage: the cat sat on the mat. The cat sat on the mat."),
    ("summarize", "Summarize: the meeting moved to Friday because the room was booked."),
    ("summarize", "Please summarize in one line: Our quarterly revenue grew 8% while marketing costs dropped."),
    ("summarize", "Give me the short version: the train was late, so we missed the start of the concert and went home."),
    ("summarize", "tl;dr the new policy lets staff work from home two days a week starting in May."),
    ("translate", "Translate to French: good morning"),
    ("translate", "Translate 'where is the station' into Italian."),
    ("structured", "Return JSON with fields name and age for: Bob, 31"),
    ("structured", "Give me a JSON object with title and year: The Matrix, 1999"),
    ("structured", "Extract name and email as JSON: Contact Jane Doe at jane@example.com"),
    ("code", "def add(a, b):"),
    ("code", "def fizzbuzz(n: int) -> list[str]:"),
    ("code", "public static int max(int[] xs) {"),
    ("code", "Reverse a linked list in Java."),
    ("code", "Fix this: for i in range(10) print(i)"),
    ("math", "What is 17 * 23?"),
    ("math", "Solve for x: 3x - 7 = 20"),
    ("math", "What is 12% of 250?"),
    ("math", "How much is 1.5 + 2.75?"),
    ("chat", "hi"),
    ("chat", "Tell me a joke about cats."),
    ("chat", "What should I cook for dinner tonight?"),
    ("chat", "Who wrote Pride and Prejudice?"),
]


def _load_trainer():
    spec = importlib.util.spec_from_file_location("train_classifier", REPO / "scripts" / "train_classifier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model() -> Classifier:
    return Classifier.default()


def test_artifact_is_small_plain_data_and_describes_itself(model):
    files = sorted(p.name for p in ARTIFACT_DIR.iterdir())
    assert files == ["meta.json", "vocabulary.json.gz", "weights.npz"]
    assert sum(p.stat().st_size for p in ARTIFACT_DIR.iterdir()) < 300 * 2**10
    assert model.classes == CONTENT_CLASSES
    meta = model.meta
    assert meta["metrics"]["test"]["macro_f1"] >= 0.9
    for excluded in ("code_alpaca_2k", "alpaca_eval", "t0/samsum/", "t0/sciq/", "t0/xsum/"):
        assert excluded in meta["trained_on"]
    assert Classifier.default() is model  # cached


def test_import_and_predict_need_neither_sklearn_nor_torch_and_import_reads_nothing():
    code = (
        "import sys\n"
        "from adaptspec.control import classify\n"
        "before = classify.Classifier.default.cache_info().currsize\n"
        "cls, _ = classify.Classifier.default().predict('Translate to French: hello')\n"
        "print(before, cls, 'sklearn' in sys.modules, 'torch' in sys.modules, 'scipy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "translate", "False", "False", "False"]


@pytest.mark.parametrize(
    ("expected", "text"), [(c, t) for c, texts in CLEAR_PROMPTS.items() for t in texts], ids=lambda v: str(v)[:24]
)
def test_clear_prompts(model, expected, text):
    cls, scores = model.predict(text)
    assert cls == expected, scores
    assert tuple(scores) == CONTENT_CLASSES
    assert math.isclose(sum(scores.values()), 1.0, rel_tol=1e-9)
    assert scores[cls] == max(scores.values())


def test_short_instruction_prompts_are_all_right(model):
    wrong = [(expected, got, text) for expected, text in SHORT_PROMPTS if (got := model.predict(text)[0]) != expected]
    assert not wrong, wrong
    assert {c for c, _ in SHORT_PROMPTS} == set(CONTENT_CLASSES)
    # The trainer's own score on short prompts cut from held-out rows, recorded with the artifact.
    assert model.meta["metrics"]["short_test"]["macro_f1"] >= 0.95
    assert model.meta["metrics"]["short_test"]["n"] >= 500


def test_lead_token_marks_the_first_token_only():
    (unigrams, _, _), _ = _features.extract("Summarize: summarize this")
    assert unigrams == ["summarize", ":", "summarize", "this", _features.LEAD_MARK + "summarize"]
    assert _features.extract("")[0][0] == []
    # A long prompt keeps its lead token although the lead is outside the tail window.
    (unigrams, _, _), _ = _features.extract("Translate " + "x " * 2000)
    assert unigrams.count(_features.LEAD_MARK + "translate") == 1


def test_degenerate_texts_still_give_a_distribution(model):
    for text in ("", " ", "\n\n\n", "?", "日本語のテキスト", "x" * 100_000):
        cls, scores = model.predict(text)
        assert cls in CONTENT_CLASSES
        assert math.isclose(sum(scores.values()), 1.0, rel_tol=1e-9)
    with pytest.raises(TypeError, match="takes a str"):
        model.predict(b"bytes")  # type: ignore[arg-type]


# ---- requests -------------------------------------------------------------------------------------------

def _chat(*turns: tuple[str, str], **extra) -> dict:
    return {"model": "m", "messages": [{"role": r, "content": c} for r, c in turns], **extra}


def test_request_fields_force_structured():
    chat = _chat(("user", "Who was the first person to walk on the moon?"))
    assert classify_request(chat) == "chat"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert classify_request({**chat, "tools": [tool]}) == "structured"
    assert classify_request({**chat, "functions": [{"name": "f"}]}) == "structured"
    assert classify_request({**chat, "response_format": {"type": "json_object"}}) == "structured"
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    assert classify_request({**chat, "response_format": schema}) == "structured"
    assert classify_request({**chat, "response_format": {"type": "text"}}) == "chat"
    assert classify_request({**chat, "tools": []}) == "chat"  # an empty list offers no tool
    _, _, forced_by = Classifier.default().predict_request({**chat, "response_format": schema})
    assert forced_by == "response_format"


def test_completions_prompt_forms():
    assert classify_request({"prompt": CLEAR_PROMPTS["math"][0]}) == "math"
    assert classify_request({"prompt": ["Translate to German:", "Where is the station?"]}) == "translate"
    cls = classify_request({"prompt": [101, 2023, 102]})  # token ids: nothing to read, still a class
    assert cls in CONTENT_CLASSES


def test_messages_text_parts_and_roles():
    body = _chat(
        ("system", "You are a helpful assistant."),
        ("user", [{"type": "text", "text": CLEAR_PROMPTS["code"][0]}, {"type": "image_url", "image_url": {}}]),
    )
    assert request_text(body) == (CLEAR_PROMPTS["code"][0], "You are a helpful assistant.")
    assert classify_request(body) == "code"
    # Assistant turns are model output and are left out; earlier user turns go to the context.
    body = _chat(("user", "hi"), ("assistant", "def f(): pass"), ("user", "thanks!"))
    assert request_text(body) == ("thanks!", "hi")


def test_last_user_turn_outweighs_the_conversation():
    body = _chat(
        ("user", CLEAR_PROMPTS["code"][0]),
        ("assistant", "def fib(n): ..."),
        ("user", CLEAR_PROMPTS["translate"][0]),
    )
    assert classify_request(body) == "translate"


def test_rag_context_in_the_system_prompt_reads_as_summarize():
    passage = CLEAR_PROMPTS["summarize"][1].split("Context: ")[1].split("\n\nQuestion")[0]
    question = "Which countries does the Amazon flow through?"
    assert classify_request(_chat(("user", question))) == "chat"
    for system in ("Answer only from these documents:\n\n" + passage * 2,
                   "You are a helpful assistant. Use the context to answer.\n\nContext:\n" + passage):
        assert classify_request(_chat(("system", system), ("user", question))) == "summarize"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "must be a JSON object"),
        ({"model": "m"}, "neither 'messages' nor 'prompt'"),
        ({"messages": []}, "non-empty list"),
        ({"messages": "hello"}, "non-empty list"),
        ({"messages": ["hello"]}, r"messages\[0\] must be an object"),
        ({"messages": [{"role": "user", "content": 5}]}, r"messages\[0\].content must be"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, r"content\[0\].text"),
        ({"messages": [{"role": 3, "content": "x"}]}, r"messages\[0\].role"),
        ({"prompt": {"a": 1}}, "'prompt' must be"),
    ],
)
def test_bad_request_bodies(body, message):
    with pytest.raises(RequestError, match=message) as info:
        classify_request(body)
    if isinstance(body, dict):  # a tools field does not excuse a malformed body
        with pytest.raises(RequestError, match=message):
            classify_request({**body, "tools": [{"type": "function"}]})
    assert info.value.status == 400
    assert info.value.to_dict()["error"]["type"] == "invalid_request_error"


# ---- numpy inference == scikit-learn ---------------------------------------------------------------------

def _sklearn_twin(model: Classifier):
    """A scikit-learn LogisticRegression carrying exactly the weights of `model`."""
    from sklearn.linear_model import LogisticRegression

    twin = LogisticRegression()
    twin.classes_ = np.arange(len(model.classes))
    twin.coef_ = model._w.T.copy()
    twin.intercept_ = model._b.copy()
    return twin


def _held_out_texts() -> list[str]:
    return [t for texts in CLEAR_PROMPTS.values() for t in texts] + [
        "hello", "", "SELECT name FROM users WHERE id = 3;", "Résumé en français, s'il vous plaît.",
    ]


def test_shipped_weights_give_sklearns_predictions(model):
    trainer = _load_trainer()
    texts = _held_out_texts()
    x = trainer.matrix(model.featurizer, texts)
    twin = _sklearn_twin(model)
    proba = twin.predict_proba(x)
    for i, text in enumerate(texts):
        np.testing.assert_allclose(model.decision_function(text), twin.decision_function(x[i])[0], rtol=0, atol=1e-9)
        cls, scores = model.predict(text)
        assert CONTENT_CLASSES.index(cls) == twin.predict(x[i])[0]
        np.testing.assert_allclose(list(scores.values()), proba[i], rtol=0, atol=1e-12)


def test_packed_inference_vector_equals_training_vector(model):
    """`grouped` (inference) and `transform` (training matrix) describe the same feature vector."""
    fz = model.featurizer
    for text in [*_held_out_texts(), "ab", "a", "日本語", "x" * 5000]:
        idx, val = fz.transform(text)
        dense = np.bincount(idx, weights=val, minlength=fz.n_features)
        columns, offsets, values = fz.grouped(text)
        packed = np.zeros(fz.n_features)
        bounds = [*offsets, len(columns)]
        for k, value in enumerate(values):
            np.add.at(packed, columns[bounds[k] : bounds[k + 1]], value)
        np.testing.assert_allclose(packed, dense, rtol=0, atol=1e-12)
        assert columns[-len(_features.STRUCT_NAMES) :].tolist() == list(range(fz.n_ngram_columns, fz.n_features))


def test_byte_ngrams_are_the_big_endian_codes_of_each_4_byte_window():
    data = "naïve {x}".encode()
    expected = [int.from_bytes(data[i : i + 4], "big") for i in range(len(data) - 3)]
    assert _features.byte_ngrams(data).tolist() == expected
    assert _features.byte_ngrams(b"abc").size == 0
    with pytest.raises(ValueError, match="ascending"):
        _features.Featurizer([[], [], [5, 3]])


def test_train_export_load_round_trip(tmp_path):
    """Fit with scikit-learn, export with the training script's own steps, reload: same predictions."""
    trainer = _load_trainer()
    train = [(t, c) for c, texts in CLEAR_PROMPTS.items() for t in texts]
    texts, ys = [t for t, _ in train], np.array([CONTENT_CLASSES.index(c) for _, c in train])
    vocabulary = trainer.build_vocabulary(texts, min_df=1)
    featurizer = _features.Featurizer(vocabulary)
    clf = trainer.fit(trainer.matrix(featurizer, texts), ys, c=10.0)
    coef, intercept = trainer.quantize(clf)
    meta = {
        "classes": list(CONTENT_CLASSES),
        "feature_version": _features.VERSION,
        "feature_params": _features.PARAMS,
        "groups": list(_features.GROUPS),
        "structural_features": list(_features.STRUCT_NAMES),
    }
    save_artifact(tmp_path, vocabulary, coef, intercept, meta)
    loaded = Classifier.load(tmp_path)
    held_out = _held_out_texts()
    expected = clf.predict(trainer.matrix(featurizer, held_out))
    got = [CONTENT_CLASSES.index(loaded.predict(t)[0]) for t in held_out]
    assert got == expected.tolist()
    # The export is deterministic: the same weights give byte-identical files.
    other = tmp_path / "again"
    save_artifact(other, vocabulary, coef, intercept, meta)
    for name in ("weights.npz", "vocabulary.json.gz", "meta.json"):
        assert (other / name).read_bytes() == (tmp_path / name).read_bytes()


def test_artifact_errors_are_clear(tmp_path):
    with pytest.raises(ModelLoadError, match="cannot load the classifier artifact"):
        Classifier.load(tmp_path)
    for name in ("meta.json", "vocabulary.json.gz", "weights.npz"):
        (tmp_path / name).write_bytes((ARTIFACT_DIR / name).read_bytes())
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["structural_features"] = ["something", "else"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="retrain"):
        Classifier.load(tmp_path)


def test_excluded_sources_are_never_trained_on():
    trainer = _load_trainer()
    for source in ("code_alpaca_2k", "alpaca_eval/oasst", "t0/samsum/Summarize_", "t0/sciq/Direct_Question",
                   "t0/xsum/DOC_tldr"):
        assert trainer.is_excluded(source)
    for source in ("mbpp", "humaneval_x/cpp", "t0/cnn_dailymail/news_summary", "truthfulqa", "bfcl/multiple"):
        assert not trainer.is_excluded(source)
    data = trainer.DEFAULT_DATA / "combined" / "classifier_prompts.jsonl.gz"
    if data.exists():
        rows = trainer.load_rows(trainer.DEFAULT_DATA)
        assert all(r["split"] == "ood" for r in rows if trainer.is_excluded(r["source"]))
        assert {r["label"] for r in rows} == set(CONTENT_CLASSES)


# ---- latency --------------------------------------------------------------------------------------------

def test_predict_latency(benchmark, model):
    """One call = one prompt, cycling through prompts of every class (median = p50 per prompt).

    Run for real with: pytest tests/control/test_classify.py -k latency --benchmark-enable
    """
    prompts = [(c, t) for c, texts in CLEAR_PROMPTS.items() for t in texts]
    turn = itertools.cycle(prompts)

    def classify_next() -> bool:
        expected, text = next(turn)
        return model.predict(text)[0] == expected

    assert benchmark(classify_next)


def test_memo_gives_what_scoring_gives_and_stays_bounded(monkeypatch):
    import adaptspec.control.classify as classify_module

    monkeypatch.setattr(classify_module, "MEMO_SIZE", 4)
    model = Classifier.load(ARTIFACT_DIR)  # its own memo, empty
    bodies = [{"messages": [{"role": "system", "content": "You translate."}, {"role": "user", "content": text}]}
              for texts in CLEAR_PROMPTS.values() for text in texts]
    bodies += [{"prompt": "x " * 3000}]  # longer than MEMO_MAX_CHARS: scored every time, never kept
    reference = Classifier.load(ARTIFACT_DIR)  # sees each text once: every answer scored
    scored = [reference.predict_request(b) for b in bodies]
    for _ in range(2):  # the second pass answers the last MEMO_SIZE texts from the memo
        assert [model.classify_request(b) for b in bodies] == [s[0] for s in scored]
        assert [model.predict_request(b) for b in bodies] == scored  # class, scores and field alike
    assert len(model._memo) == 4
    assert all(len(last) + len(ctx) <= classify_module.MEMO_MAX_CHARS for last, ctx in model._memo)
    tools = {**bodies[0], "tools": [{"type": "function"}]}  # a field still decides over a memoised text
    assert model.classify_request(tools) == "structured"
    with pytest.raises(RequestError):
        model.classify_request({"messages": [{"role": "user", "content": 3}], "tools": [{"type": "function"}]})
