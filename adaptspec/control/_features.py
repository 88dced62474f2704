"""Feature extraction for the content classifier.

`extract(text)` gives the raw features of a prompt: its word n-grams, the bytes its byte n-grams are read
from, and a short list of structural features. `Featurizer(vocabulary)` maps them to columns. The training
script (scripts/train_classifier.py, through `Featurizer.transform`) and the inference path (classify.py,
through `Featurizer.grouped`, the same vector packed differently) share this code, so they cannot drift.

Groups of n-grams:
- word unigrams and bigrams (lower-cased; a token is a run of word characters or a run of punctuation, so
  `):`, `{"`, `=>` and ``` are tokens too) over the prompt's head and tail: the instruction sits at one end
  of a long context. The unigrams also hold one lead token, LEAD_MARK + the prompt's first token
  (`^summarize`, `^translate`, `^def`, `^return`): a short request is often nothing but a lead verb and
  its argument, and the same word inside a passage says much less than at the start;
- byte 4-grams over the first BYTE_SPAN bytes of the lower-cased UTF-8 text (code punctuation, sub-words of
  unseen words, scripts without spaces). A byte 4-gram *is* a uint32, so these need no hashing: numpy
  reads them with one strided view and looks them up with `searchsorted` in the sorted known codes.
Each group's n-grams are counted and scaled by 1/sqrt(number of n-grams in the group), a cheap stand-in for
L2 normalisation; n-grams outside the vocabulary go to one "unknown" slot per group, whose weight is zero
(the training script leaves those columns empty).

Words map to columns through an explicit vocabulary (dicts) rather than a hash: Python's `hash()` is salted
per process, and a portable hash (crc32) called once per n-gram costs more than the whole 100 us budget,
while `map(dict.get, ...)` runs in C.

Structural features (STRUCT_NAMES), each roughly in [0, 1]: length, code fences, brace / parenthesis /
indentation density, JSON keys and JSON-schema words, long context followed by a question, language names
and "translat", non-ASCII share, numbers and arithmetic operators, bullet lists, "Name: ..." dialogue lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from itertools import repeat

import numpy as np

HEAD_CHARS = 480
TAIL_CHARS = 240
BYTE_SPAN = 128

GROUPS: tuple[str, ...] = ("word1", "word2", "byte4")
# Bump when extract() changes: an artifact trained on other features then refuses to load.
VERSION = 6
PARAMS = {"head_chars": HEAD_CHARS, "tail_chars": TAIL_CHARS, "byte_span": BYTE_SPAN}

# "^" + a word is never a token of _TOKEN_RE (punctuation and word characters form separate tokens); "^" +
# a punctuation run ("^```") could in principle collide with a real token, which is harmless and rare.
LEAD_MARK = "^"
_TOKEN_RE = re.compile(r"\w+|[^\w\s]+")
# _TOKEN_RE for ASCII text: str patterns' \s also holds \x1c-\x1f (Unicode separators), ASCII's does not
_TOKEN_ASCII_RE = re.compile(r"\w+|[^\w\s\x1c-\x1f]+", re.ASCII)
_SPEAKER_RE = re.compile(r"^[A-Z][\w.' -]{0,24}: ", re.M)
_OPERATORS = frozenset(["+", "-", "*", "/", "=", "^", "%", "$", "×", "÷", "<", ">", "+/-", "==", "!=", "<=", ">="])
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
    "operators",
    "ends_with_question",
    "bullet_lines",
    "speaker_lines",
)


def _window(low: str) -> str:
    if len(low) <= HEAD_CHARS + TAIL_CHARS:
        return low
    return low[:HEAD_CHARS] + "\n" + low[-TAIL_CHARS:]


def byte_ngrams(data: bytes) -> np.ndarray:
    """The byte 4-grams of `data` as big-endian uint32 codes, in order (empty if len(data) < 4)."""
    n = len(data) - 3
    if n <= 0:
        return np.zeros(0, dtype=np.uint32)
    # One strided view: element i is the 4 bytes starting at i, read as a big-endian uint32.
    return np.ndarray((n,), dtype=">u4", buffer=data, strides=(1,)).astype(np.uint32)


def _scan(text: str) -> tuple[list[str], bytes, list[float]]:
    """(tokens of the window, head bytes for the byte 4-grams, structural features) of `text`."""
    n = len(text)
    low = text.lower()
    win = _window(low)
    ascii_win = win.isascii()
    # the same tokens either way; sre's ASCII classes skip the Unicode database lookups (~30% of findall)
    toks = (_TOKEN_ASCII_RE if ascii_win else _TOKEN_RE).findall(win)
    head = win[:BYTE_SPAN].encode("utf-8", "replace")[:BYTE_SPAN]

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
        0.0 if ascii_win else min(1.0, 2.0 * (len(win.encode("utf-8", "replace")) - len(win)) / m),
        min(1.0, 4.0 * sum(map(str.isdigit, toks)) / ntok),
        min(1.0, sum(map(_OPERATORS.__contains__, toks)) / 3.0),
        float(win.rstrip().endswith("?")),
        min(1.0, (win.count("\n- ") + win.count("\n* ") + win.count("\n1.")) / 5.0),
        min(1.0, len(_SPEAKER_RE.findall(text, 0, HEAD_CHARS)) / 6.0) if lines > 3 else 0.0,
    ]
    return toks, head, struct


def extract(text: str) -> tuple[tuple[list[str], list[str], bytes], list[float]]:
    """((unigrams + lead token, bigrams, head bytes for the byte 4-grams), structural features) of `text`."""
    toks, head, struct = _scan(text)
    bigrams = list(map(" ".join, zip(toks, toks[1:], strict=False)))
    unigrams = [*toks, LEAD_MARK + toks[0]] if toks else toks
    return (unigrams, bigrams, head), struct


class Featurizer:
    """Maps `extract` output to columns: [unknown slot per group] + each group's vocabulary + structural.

    `vocabulary` holds one list per group of GROUPS: word unigrams, word bigrams (strings), and byte 4-gram
    codes (ints, sorted ascending).
    """

    def __init__(self, vocabulary: Sequence[Sequence]):
        if len(vocabulary) != len(GROUPS):
            raise ValueError(f"vocabulary needs {len(GROUPS)} groups ({', '.join(GROUPS)}), got {len(vocabulary)}")
        self.vocabulary = [list(v) for v in vocabulary]
        col = len(GROUPS)  # columns 0..len(GROUPS)-1: the "unknown n-gram" slot of each group
        self._index: list[dict[str, int]] = []
        for words in self.vocabulary[:2]:
            self._index.append({f: col + i for i, f in enumerate(words)})
            col += len(words)
        # bigram columns by token pair, as zip() yields them (tokens hold no space: "a b" is ("a", "b"))
        self._pairs = {tuple(b.split(" ")): c for b, c in self._index[1].items()}
        codes = np.array(self.vocabulary[2], dtype=np.int64)
        if codes.size and (np.any(np.diff(codes) <= 0) or codes[0] < 0 or codes[-1] >= 2**32):
            raise ValueError("byte 4-gram vocabulary must be distinct uint32 codes in ascending order")
        # Sorted known codes plus a sentinel that no UTF-8 text contains (0xFFFFFFFF), so that searchsorted
        # never runs off the end; _code_columns maps a position to its column (the sentinel's: unknown).
        self._codes = np.append(codes.astype(np.uint32), np.uint32(0xFFFFFFFF))
        self._code_columns = np.append(np.arange(col, col + codes.size), 2)
        col += codes.size
        self.n_ngram_columns = col
        self.n_features = col + len(STRUCT_NAMES)
        self._struct_columns = np.arange(col, self.n_features)  # [n_struct] int64

    def _byte_columns(self, data: bytes) -> np.ndarray:
        codes = byte_ngrams(data)
        pos = np.searchsorted(self._codes, codes)
        columns = self._code_columns[pos]
        columns[self._codes[pos] != codes] = 2  # 2: the unknown byte 4-gram slot
        return columns

    def grouped(self, text: str) -> tuple[np.ndarray, list[int], list[float]]:
        """The same vector as `transform`, packed for one gather, one segment sum and one dot product.

        Returns (columns int64 [n]: each n-gram group's columns, then the structural columns; the start of
        each segment in it: one per non-empty n-gram group, one per structural feature; each segment's value:
        1/sqrt(group size) for a group, the feature's value for a structural column). Bigrams are looked up
        as token pairs (no joined strings), and the columns go to numpy as one list.
        """
        toks, head, struct = _scan(text)
        offsets: list[int] = []
        values: list[float] = []
        words: list[int] = []
        if toks:
            unigrams = self._index[0]
            n = len(toks) + 1  # + the lead token
            words = [*map(unigrams.get, toks, repeat(0)), unigrams.get(LEAD_MARK + toks[0], 0)]
            offsets.append(0)
            values.append(1.0 / math.sqrt(n))
            if n > 2:
                words += map(self._pairs.get, zip(toks, toks[1:], strict=False), repeat(1))
                offsets.append(n)
                values.append(1.0 / math.sqrt(n - 2))
        parts = [np.array(words, dtype=np.int64)]
        end = len(words)
        if len(head) >= 4:
            offsets.append(end)
            values.append(1.0 / math.sqrt(len(head) - 3))
            parts.append(self._byte_columns(head))
            end += len(head) - 3
        parts.append(self._struct_columns)
        offsets += range(end, end + len(struct))
        values += struct
        return np.concatenate(parts), offsets, values

    def transform(self, text: str) -> tuple[list[int], list[float]]:
        """(column indices, values) of `text`; indices may repeat (their values add up)."""
        (toks, bigrams, head), struct = extract(text)
        indices: list[int] = []
        values: list[float] = []
        for g, feats in enumerate((toks, bigrams)):
            if feats:
                indices += map(self._index[g].get, feats, repeat(g))
                values += [1.0 / math.sqrt(len(feats))] * len(feats)
        if len(head) >= 4:
            indices += self._byte_columns(head).tolist()
            values += [1.0 / math.sqrt(len(head) - 3)] * (len(head) - 3)
        return indices + self._struct_columns.tolist(), values + struct
