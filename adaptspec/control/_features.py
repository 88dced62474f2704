"""Feature extraction for the content classifier.

`extract(text)` gives the raw features of a prompt: its n-gram strings per group and a short list of
structural features. `Featurizer(vocabulary)` turns them into a sparse vector `(indices, values)`. The
training script (scripts/train_classifier.py) and the inference path (classify.py) both go through
`Featurizer.transform`, so the two cannot drift apart.

Groups of n-grams (lower-cased; a token is a run of word characters or a run of punctuation, so `):`,
`{"`, `=>` and ``` are tokens too):
- word unigrams and bigrams over the prompt's head and tail (the instruction sits at one end of a long
  context),
- character 4-grams over the first CHAR_SPAN characters (scripts without spaces, code punctuation).
Each group's n-grams are counted and scaled by 1/sqrt(number of n-grams in the group), a cheap stand-in for
L2 normalisation; n-grams outside the vocabulary go to one "unknown" slot per group, whose weight is zero
(the training script leaves those columns empty).

The n-gram -> column map is an explicit vocabulary (the n-grams seen in at least `min_df` training prompts)
rather than a hash: Python's `hash()` is salted per process, and a portable hash (crc32) called once per
n-gram costs more than the whole 100 us budget; a dict lookup through `map` runs in C.

Structural features (STRUCT_NAMES), each roughly in [0, 1]: length, code fences, brace / parenthesis /
indentation density, JSON keys and JSON-schema words, long context followed by a question, language names
and "translat", non-ASCII share, numbers and equations, bullet lists.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Sequence
from itertools import repeat

HEAD_CHARS = 1000
TAIL_CHARS = 400
CHAR_SPAN = 128
CHAR_N = 4

GROUPS: tuple[str, ...] = ("word1", "word2", "char4")
# Bump when extract() changes: an artifact trained on other features then refuses to load.
VERSION = 2

_TOKEN_RE = re.compile(r"\w+|[^\w\s]+")
_SPEAKER_RE = re.compile(r"^[A-Z][\w.' -]{0,24}: ", re.M)
_EQUATION_RE = re.compile(r"\d\s*[-+*/^=×÷]\s*\d|\$\s?\d|\d\s?%")
_LANGUAGES = frozenset(
    ["english", "french", "german", "spanish", "italian", "portuguese", "dutch", "russian", "chinese", "mandarin", "japanese", "korean", "arabic", "hindi", "turkish", "polish", "swedish", "finnish", "greek", "hebrew", "vietnamese", "thai", "indonesian", "ukrainian", "czech", "danish", "norwegian", "hungarian", "romanian", "bengali", "urdu", "persian", "farsi", "nepali", "sinhala", "khmer", "pashto", "tagalog", "swahili", "catalan", "latin", "esperanto", "tamil", "telugu", "marathi", "malay"]
)

STRUCT_NAMES: tuple[str, ...] = (
    "const",  # always 1
    "log_chars",
    "log_lines",
    "code_fence",
    "brace_density",
    "paren_density",
    "indent_share",
    "json_keys",
    "json_schema",
    "long_context",
    "long_context_question",
    "language_names",
    "translate_word",
    "non_ascii_share",
    "number_share",
    "equations",
    "ends_with_question",
    "bullet_lines",
    "speaker_lines",
)


def _window(low: str) -> str:
    if len(low) <= HEAD_CHARS + TAIL_CHARS:
        return low
    return low[:HEAD_CHARS] + "\n" + low[-TAIL_CHARS:]


def extract(text: str) -> tuple[tuple[list[str], list[str], list[str]], list[float]]:
    """((unigrams, bigrams, char 4-grams), structural features) of `text`."""
    n = len(text)
    low = text.lower()
    win = _window(low)
    toks = _TOKEN_RE.findall(win)
    bigrams = list(map(" ".join, zip(toks, toks[1:], strict=False)))
    head = win[:CHAR_SPAN]
    chars = [head[i : i + CHAR_N] for i in range(len(head) - CHAR_N + 1)]

    m = max(len(win), 1)
    lines = win.count("\n") + 1
    ntok = max(len(toks), 1)
    long_ctx = n > 800
    struct = [
        1.0,
        math.log1p(n) / 10.0,
        math.log1p(low.count("\n")) / 6.0,
        float("```" in win),
        min(1.0, 20.0 * (win.count("{") + win.count("}")) / m),
        min(1.0, 20.0 * (win.count("(") + win.count(")")) / m),
        min(1.0, (win.count("\n    ") + win.count("\n\t")) / lines),
        min(1.0, win.count('":') / 8.0),
        float('"properties"' in win or '"parameters"' in win or '"type": "object"' in win),
        float(long_ctx),
        float(long_ctx and "?" in win[-300:]),
        min(1.0, len(_LANGUAGES.intersection(toks)) / 2.0),
        float("translat" in win),
        0.0 if win.isascii() else min(1.0, 2.0 * (len(win.encode("utf-8", "replace")) - len(win)) / m),
        min(1.0, 4.0 * sum(map(str.isdigit, toks)) / ntok),
        min(1.0, len(_EQUATION_RE.findall(win, 0, 600)) / 3.0),
        float(win.rstrip().endswith("?")),
        min(1.0, (win.count("\n- ") + win.count("\n* ") + win.count("\n1.")) / 5.0),
        min(1.0, len(_SPEAKER_RE.findall(text, 0, HEAD_CHARS)) / 6.0) if lines > 3 else 0.0,
    ]
    return (toks, bigrams, chars), struct


class Featurizer:
    """Maps `extract` output to columns: [unknown slot per group] + each group's vocabulary + structural.

    `vocabulary` holds one list of n-grams per group of GROUPS (one dict per group, so a word bigram never
    collides with a character 4-gram).
    """

    def __init__(self, vocabulary: Sequence[Sequence[str]]):
        if len(vocabulary) != len(GROUPS):
            raise ValueError(f"vocabulary needs {len(GROUPS)} groups ({', '.join(GROUPS)}), got {len(vocabulary)}")
        self.vocabulary = [list(v) for v in vocabulary]
        self._index: list[dict[str, int]] = []
        col = len(GROUPS)  # columns 0..len(GROUPS)-1: the "unknown n-gram" slot of each group
        for words in self.vocabulary:
            self._index.append({f: col + i for i, f in enumerate(words)})
            col += len(words)
        self.n_ngram_columns = col
        self.n_features = col + len(STRUCT_NAMES)
        self._struct_columns = list(range(col, self.n_features))

    def grouped(self, text: str) -> tuple[array, list[int], list[float], list[float]]:
        """The same vector as `transform`, packed for a fast dot product.

        Returns (columns of all n-grams as an int64 array, start offset of each non-empty group in it,
        that group's value 1/sqrt(n), structural feature values).
        """
        groups, struct = extract(text)
        columns = array("q")
        offsets: list[int] = []
        scales: list[float] = []
        for g, feats in enumerate(groups):
            if feats:
                offsets.append(len(columns))
                scales.append(1.0 / math.sqrt(len(feats)))
                columns.extend(map(self._index[g].get, feats, repeat(g)))
        return columns, offsets, scales, struct

    def transform(self, text: str) -> tuple[list[int], list[float]]:
        """(column indices, values) of `text`; indices may repeat (their values add up)."""
        groups, struct = extract(text)
        indices: list[int] = []
        values: list[float] = []
        for g, feats in enumerate(groups):
            if feats:
                indices += map(self._index[g].get, feats, repeat(g))
                values += [1.0 / math.sqrt(len(feats))] * len(feats)
        return indices + self._struct_columns, values + struct
