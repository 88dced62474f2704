"""Content classifier: which of CONTENT_CLASSES a prompt belongs to, in tens of microseconds.

A multinomial logistic regression trained with scikit-learn by scripts/train_classifier.py on
../shared/data, shipped as plain data (adaptspec/control/_classifier/: weights.npz, vocabulary.json.gz,
meta.json; no pickle) and evaluated here with numpy alone: features (adaptspec/control/_features.py) -> a
sparse dot product with the weight matrix -> softmax. scikit-learn is needed only to train.

    >>> from adaptspec.control.classify import Classifier, classify_request
    >>> Classifier.default().predict("Translate to French: good morning")[0]
    'translate'
    >>> classify_request({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})
    'structured'
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import operator
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from adaptspec.control import _features, _hashed_features
from adaptspec.errors import ModelLoadError, RequestError

ARTIFACT_DIR = Path(__file__).resolve().parent / "_classifier"
WEIGHTS_FILE = "weights.npz"
META_FILE = "meta.json"
VOCABULARY_FILE = "vocabulary.json.gz"
# Layout of an artifact's files, in meta.json's "artifact_format": 1 (or absent) = word / byte-4 vocabulary +
# weights (`Classifier`, adaptspec/control/_features.py); 2 = hashed byte n-grams (`HashedClassifier`,
# adaptspec/control/_hashed_features.py: weights.npz with the non-zero buckets' weights, no vocabulary).
HASHED_FORMAT = 2
_LANES = 8  # the hashed weight table's row width: classes padded to 8 float32 (32 bytes)
# the most n-grams a hashed window can have: every byte of the window (UTF-8: <= 4 per character) + START
_MAX_NGRAMS = len(_hashed_features.ORDERS) * _hashed_features.MAX_POSITIONS

# Chat bodies are scored as w * (last user turn) + (1 - w) * (system + earlier user turns + last user turn):
# the last turn counts twice, but a RAG context in the system prompt can still outweigh a short question.
LAST_TURN_WEIGHT = 0.2
_JSON_FORMATS = ("json_object", "json_schema")
# classify_request and predict_request remember the class and scores of recent prompt texts (the model is a
# pure function of the text): repeated prompts (retries, probes, benchmarks, fixed templates) skip the
# scoring. Bounded: MEMO_SIZE texts of at most MEMO_MAX_CHARS characters each, oldest out first.
MEMO_SIZE = 1024
MEMO_MAX_CHARS = 4096


class Classifier:
    """A linear model over n-gram + structural features. Immutable after construction."""

    def __init__(
        self,
        vocabulary: list[list[str]],
        coef: np.ndarray,
        intercept: np.ndarray,
        classes: tuple[str, ...],
        meta: dict | None = None,
    ):
        self.featurizer = _features.Featurizer(vocabulary)
        n = self.featurizer.n_features
        if coef.shape != (n, len(classes)) or intercept.shape != (len(classes),):
            raise ModelLoadError(
                f"classifier weights have shape {coef.shape} / {intercept.shape}, expected "
                f"({n}, {len(classes)}) / ({len(classes)},)"
            )
        self.classes = tuple(classes)
        self.meta = dict(meta or {})
        # float64 so that the sums match scikit-learn's decision_function to the last bit that matters.
        self._w = np.ascontiguousarray(coef, dtype=np.float64)  # [n_features, n_classes]
        self._b = np.asarray(intercept, dtype=np.float64)  # [n_classes]
        self._memo: dict[tuple[str, str], tuple[str, dict[str, float]]] = {}  # (last turn, context) -> (class, scores)

    @classmethod
    def load(cls, directory: str | Path) -> Classifier:
        """The artifact in `directory`: a `HashedClassifier` for artifact_format 2, else a `Classifier`."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot load the classifier artifact from {directory}: {exc}") from exc
        if meta.get("artifact_format") == HASHED_FORMAT:
            return HashedClassifier.load_hashed(directory, meta)
        try:
            with gzip.open(directory / VOCABULARY_FILE, "rt", encoding="utf-8") as f:
                vocabulary = json.load(f)
            with np.load(directory / WEIGHTS_FILE, allow_pickle=False) as arrays:
                coef, intercept = arrays["coef"], arrays["intercept"]
        except (OSError, KeyError, ValueError) as exc:
            raise ModelLoadError(f"cannot load the classifier artifact from {directory}: {exc}") from exc
        if (
            meta.get("feature_version") != _features.VERSION
            or meta.get("feature_params") != _features.PARAMS
            or meta.get("groups") != list(_features.GROUPS)
            or meta.get("structural_features") != list(_features.STRUCT_NAMES)
        ):
            raise ModelLoadError(
                f"classifier artifact in {directory} was built for other features than "
                "adaptspec/control/_features.py computes; retrain with scripts/train_classifier.py"
            )
        return cls(vocabulary, coef, intercept, tuple(meta["classes"]), meta)

    @staticmethod
    @functools.cache
    def default() -> Classifier:
        """The shipped model (loaded on first use, then cached)."""
        return Classifier.load(ARTIFACT_DIR)

    def _evidence(self, text: str) -> np.ndarray:
        # = transform(text) . W, without building the values vector: every n-gram of a group has the same
        # value, so each group's rows are summed (reduceat) and scaled once; each structural column is a
        # segment of its own. Four numpy calls per prompt (gather, segment sums, values, dot).
        columns, offsets, values = self.featurizer.grouped(text)
        rows = self._w.take(columns, axis=0)  # [n_ngrams + n_struct, n_classes]
        return np.array(values) @ np.add.reduceat(rows, offsets, axis=0)  # [n_classes], without the intercept

    def _result(self, logits: np.ndarray | list[float]) -> tuple[str, dict[str, float]]:
        z = logits.tolist() if isinstance(logits, np.ndarray) else logits
        top = max(z)
        e = [math.exp(v - top) for v in z]  # 6 values: plain floats beat numpy's per-call overhead
        total = sum(e)
        best = z.index(top)
        return self.classes[best], {c: v / total for c, v in zip(self.classes, e, strict=True)}

    def decision_function(self, text: str) -> np.ndarray:
        """Raw class scores (logits), as scikit-learn's `decision_function` on the same features."""
        return self._evidence(text) + self._b

    def predict(self, text: str) -> tuple[str, dict[str, float]]:
        """(class, {class: probability}) for one prompt; probabilities over all classes sum to 1."""
        if not isinstance(text, str):
            raise TypeError(f"predict() takes a str, not {type(text).__name__}")
        return self._result(self._evidence(text) + self._b)

    def predict_request(self, body: Mapping, texts: tuple[str, str] | None = None
                        ) -> tuple[str, dict[str, float], str | None]:
        """(class, scores, forced_by) for an OpenAI chat/completions body.

        `forced_by` names the request field that made the request `structured` regardless of its text
        (tools, functions, response_format, guided_json), else None; `scores` are always the text model's.
        `texts`: the body's `request_text`, when the caller has it already.
        """
        last, context = request_text(body) if texts is None else texts
        forced = _structured_field(body)
        cls, scores = self._text_class(last, context)
        return ("structured" if forced else cls), dict(scores), forced

    def _text_class(self, last: str, context: str) -> tuple[str, dict[str, float]]:
        """(class, scores) of a prompt's text: scored, or remembered for a text seen recently (see MEMO_SIZE)."""
        key = (last, context)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._result(self._logits(last, context))
            if len(last) + len(context) <= MEMO_MAX_CHARS:
                if len(self._memo) >= MEMO_SIZE:
                    del self._memo[next(iter(self._memo))]
                self._memo[key] = hit
        return hit

    def _logits(self, last: str, context: str) -> np.ndarray:
        if context:
            return (
                LAST_TURN_WEIGHT * self._evidence(last)
                + (1.0 - LAST_TURN_WEIGHT) * self._evidence(context + "\n\n" + last)
                + self._b
            )
        return self._evidence(last) + self._b

    def classify_request(self, body: Mapping) -> str:
        """Content class of a request body (the proxy's hot path: no text scoring when a field decides, none
        for a prompt text seen recently)."""
        last, context = request_text(body)  # rejects a malformed body, structured or not
        if _structured_field(body):
            return "structured"
        return self._text_class(last, context)[0]


class HashedClassifier(Classifier):
    """The same kind of linear model over hashed byte n-gram + structural features
    (adaptspec/control/_hashed_features.py): no vocabulary, no tokens; scoring an unseen prompt is a handful
    of numpy calls. Request handling and the memo are `Classifier`'s. Immutable after construction."""

    def __init__(
        self,
        buckets: np.ndarray,
        bucket_coef: np.ndarray,
        struct_coef: np.ndarray,
        intercept: np.ndarray,
        classes: tuple[str, ...],
        meta: dict | None = None,
    ):
        k, c = len(buckets), len(classes)
        if (
            bucket_coef.shape != (k, c)
            or struct_coef.shape != (len(_hashed_features.STRUCT_NAMES), c)
            or intercept.shape != (c,)
            or c > _LANES
        ):
            raise ModelLoadError(
                f"classifier weights have shapes {bucket_coef.shape} / {struct_coef.shape} / {intercept.shape}, "
                f"expected ({k}, {c}) / ({len(_hashed_features.STRUCT_NAMES)}, {c}) / ({c},), "
                f"at most {_LANES} classes"
            )
        buckets = np.asarray(buckets, dtype=np.int64)
        n_buckets = _hashed_features.N_BUCKETS
        if k and (buckets.min() < 0 or buckets.max() >= n_buckets or np.unique(buckets).size != k):
            raise ModelLoadError(f"classifier bucket ids must be distinct and in [0, {n_buckets})")
        self.classes = tuple(classes)
        self.meta = dict(meta or {})
        # The bucket weights as a dense table, one row of _LANES float32 per bucket (classes padded with 0):
        # a 32-byte row is the size numpy's take() copies fastest, and float32 sums of float16 weights
        # stay within ~1e-5 of scikit-learn's float64 ones.
        self._table = np.zeros((_hashed_features.N_BUCKETS, _LANES), dtype=np.float32)  # [n_buckets, _LANES]
        self._table[buckets, :c] = bucket_coef
        self._struct = np.asarray(struct_coef, dtype=np.float64)  # [n_struct, n_classes]
        self._b = np.asarray(intercept, dtype=np.float64)  # [n_classes]
        self._bias = self._b.tolist()
        self._struct_cols = [tuple(c) for c in self._struct.T.tolist()]  # per class: n_struct plain floats
        self._ones = np.ones(_MAX_NGRAMS, dtype=np.float32)  # [_MAX_NGRAMS] for the bucket sum (BLAS gemv)
        self._memo: dict[tuple[str, str], tuple[str, dict[str, float]]] = {}  # (last, context) -> (class, scores)

    @classmethod
    def load_hashed(cls, directory: Path, meta: dict) -> HashedClassifier:
        try:
            with np.load(directory / WEIGHTS_FILE, allow_pickle=False) as arrays:
                buckets, bucket_coef = arrays["buckets"], arrays["bucket_coef"]
                struct_coef, intercept = arrays["struct_coef"], arrays["intercept"]
        except (OSError, KeyError, ValueError) as exc:
            raise ModelLoadError(f"cannot load the classifier artifact from {directory}: {exc}") from exc
        if (
            meta.get("artifact_format") != HASHED_FORMAT
            or meta.get("feature_version") != _hashed_features.VERSION
            or meta.get("feature_params") != _hashed_features.PARAMS
            or meta.get("structural_features") != list(_hashed_features.STRUCT_NAMES)
        ):
            raise ModelLoadError(
                f"classifier artifact in {directory} was built for other features than "
                "adaptspec/control/_hashed_features.py computes; retrain with scripts/train_classifier.py"
            )
        return cls(buckets, bucket_coef, struct_coef, intercept, tuple(meta["classes"]), meta)

    def dense_coef(self) -> np.ndarray:
        """The weights as one matrix [N_FEATURES, n_classes] float64, in the training matrix's column order
        (scikit-learn's `coef_.T`)."""
        return np.concatenate([self._table[:, : len(self.classes)].astype(np.float64), self._struct])

    def _evidence(self, text: str) -> list[float]:
        # = transform(text) . W without the intercept, as n_classes plain floats: every n-gram has the same
        # value, so the buckets' rows are gathered, summed (one gemv with a ones vector) and scaled once; the
        # few structural features are added with sum(map(mul)) per class (numpy's per-call overhead is larger).
        buckets, value, struct = _hashed_features.scan(text)
        ids = buckets.ravel()  # [n_orders * n_positions]
        ones = self._ones if ids.size <= _MAX_NGRAMS else np.ones(ids.size, dtype=np.float32)
        sums = (ones[: ids.size] @ self._table.take(ids, axis=0)).tolist()  # _LANES floats
        cols = self._struct_cols  # sums has _LANES entries, the first n_classes are the classes'
        return [value * v + sum(map(operator.mul, struct, col)) for v, col in zip(sums, cols, strict=False)]

    def decision_function(self, text: str) -> np.ndarray:
        """Raw class scores (logits) [n_classes], as scikit-learn's `decision_function` on the same features."""
        return np.array(self._evidence(text)) + self._b

    def predict(self, text: str) -> tuple[str, dict[str, float]]:
        """(class, {class: probability}) for one prompt; probabilities over all classes sum to 1."""
        if not isinstance(text, str):
            raise TypeError(f"predict() takes a str, not {type(text).__name__}")
        return self._result([v + b for v, b in zip(self._evidence(text), self._bias, strict=True)])

    def _logits(self, last: str, context: str) -> list[float]:
        if context:
            w = LAST_TURN_WEIGHT
            both = zip(self._evidence(last), self._evidence(context + "\n\n" + last), self._bias, strict=True)
            return [w * a + (1.0 - w) * c + b for a, c, b in both]
        return [v + b for v, b in zip(self._evidence(last), self._bias, strict=True)]


def classify_request(body: Mapping) -> str:
    """Content class of an OpenAI chat/completions request body, with the shipped model."""
    return Classifier.default().classify_request(body)


def _structured_field(body: Mapping) -> str | None:
    if body.get("tools"):
        return "tools"
    if body.get("functions"):
        return "functions"
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in _JSON_FORMATS:
        return "response_format"
    if body.get("guided_json") is not None:  # vLLM's structured-output extension
        return "guided_json"
    return None


def _content_text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones, skip images / audio
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                if part.get("type") == "text":
                    text = part.get("text")
                    if not isinstance(text, str):
                        raise RequestError(f"{where}[{j}].text must be a string", param=f"{where}[{j}].text")
                    texts.append(text)
            else:
                raise RequestError(f"{where}[{j}] must be an object", param=f"{where}[{j}]")
        return "\n".join(texts)
    raise RequestError(f"{where} must be a string or a list of content parts", param=where)


def request_text(body: Mapping) -> tuple[str, str]:
    """(last user turn, context) of a chat body, or (prompt, "") of a completions body.

    The context is the system / developer messages and the earlier user turns, in order; assistant and
    tool turns are left out (they are model output, not the user's request).
    """
    if not isinstance(body, Mapping):
        raise RequestError(f"request body must be a JSON object, not {type(body).__name__}")
    messages = body.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list", param="messages")
        user: list[str] = []
        context: list[str] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, Mapping):
                raise RequestError(f"messages[{i}] must be an object", param=f"messages[{i}]")
            role = msg.get("role")
            if role in ("system", "developer"):
                context.append(_content_text(msg.get("content"), f"messages[{i}].content"))
            elif role == "user":
                if user:
                    context.append(user[-1])
                user.append(_content_text(msg.get("content"), f"messages[{i}].content"))
            elif not isinstance(role, str):
                raise RequestError(f"messages[{i}].role must be a string", param=f"messages[{i}].role")
        last = user[-1] if user else (context.pop() if context else "")
        return last, "\n\n".join(t for t in context if t)
    if "prompt" in body:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return prompt, ""
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt), ""
        if isinstance(prompt, list) and all(isinstance(p, int) for p in prompt):
            return "", ""  # token ids: nothing to read
        raise RequestError("'prompt' must be a string, a list of strings or a list of token ids", param="prompt")
    raise RequestError("request body has neither 'messages' nor 'prompt'")


def check_request_text(body: Mapping) -> None:
    """Raise the RequestError `request_text(body)` would raise, without building the texts: for a body that is
    not classified (the proxy still answers a malformed one with the same 400). One pass of type checks for
    the usual shapes (messages of string roles and contents, a string prompt); anything else goes through
    request_text itself."""
    if type(body) is dict:
        messages = body.get("messages")
        if type(messages) is list and messages:
            for msg in messages:
                if type(msg) is not dict or type(msg.get("role")) is not str or type(msg.get("content")) is not str:
                    break
            else:
                return
        elif messages is None and type(body.get("prompt")) is str:
            return
    request_text(body)


def save_artifact(
    directory: str | Path, vocabulary: list[list[str]], coef: np.ndarray, intercept: np.ndarray, meta: dict
) -> None:
    """Write weights.npz (coef [n_features, n_classes] float16, intercept float32), vocabulary and meta."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # mtime=0 and sorted keys: the same training run gives byte-identical files.
    with gzip.GzipFile(directory / VOCABULARY_FILE, "wb", mtime=0) as f:
        f.write(json.dumps(vocabulary, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    np.savez_compressed(
        directory / WEIGHTS_FILE, coef=np.asarray(coef, np.float16), intercept=np.asarray(intercept, np.float32)
    )
    text = json.dumps(meta, indent=1, sort_keys=True, allow_nan=False)
    (directory / META_FILE).write_text(text + "\n", encoding="utf-8")


def save_hashed_artifact(
    directory: str | Path,
    buckets: np.ndarray,
    bucket_coef: np.ndarray,
    struct_coef: np.ndarray,
    intercept: np.ndarray,
    meta: dict,
) -> None:
    """Write weights.npz (buckets [k] uint32, bucket_coef [k, n_classes] float16, struct_coef [n_struct,
    n_classes] float16, intercept [n_classes] float32) and meta.json."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # sorted keys and fixed array order: the same training run gives byte-identical files.
    np.savez_compressed(
        directory / WEIGHTS_FILE,
        buckets=np.asarray(buckets, np.uint32),
        bucket_coef=np.asarray(bucket_coef, np.float16),
        struct_coef=np.asarray(struct_coef, np.float16),
        intercept=np.asarray(intercept, np.float32),
    )
    text = json.dumps({**meta, "artifact_format": HASHED_FORMAT}, indent=1, sort_keys=True, allow_nan=False)
    (directory / META_FILE).write_text(text + "\n", encoding="utf-8")


__all__ = ["Classifier", "HashedClassifier", "check_request_text", "classify_request", "request_text", "save_artifact", "save_hashed_artifact"]
