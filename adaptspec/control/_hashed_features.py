"""Feature extraction for the content classifier: hashed byte n-grams + a few structural features.

A prompt is read in a bounded window (its first HEAD_CHARS and last TAIL_CHARS characters: the instruction
sits at one end of a long context), lower-cased, marked at its start (START byte) and encoded as UTF-8. Every
byte position starts one n-gram of each length in ORDERS; the n-grams are hashed to 2**BUCKET_BITS buckets
with numpy alone, no per-token Python loop:

- the window's bytes, followed by 7 zero bytes, are read with one strided view as little-endian uint64
  codes, element i = the 8 bytes starting at i;
- `codes & MASK[n]` keeps the first n bytes (an n-gram; the zero padding makes n-grams that run past the
  end "end of prompt" features, and the START byte makes the first n-grams "start of prompt" ones);
- `* MULT[n] >> (64 - BUCKET_BITS)`: multiplicative (Fibonacci) hashing, one odd 64-bit constant per length,
  so equal bytes of different lengths land in unrelated buckets.
That is 3 array operations for all lengths and positions ([len(ORDERS), n_positions] uint64). The hash is
plain integer arithmetic, so it is the same in every process and on every machine (Python's `hash()` is not).

Value of each n-gram: its count / sqrt(number of n-grams), a cheap stand-in for L2 normalisation. Colliding
n-grams share a weight; the training script's held-out figures include what that costs.

Structural features (STRUCT_NAMES), each roughly in [0, 1], from a few str.count / `in` passes over the window (C
loops, no tokens): length and line count of the whole prompt, a long context and a question at its end,
"translat", "Name: ..." lines (dialogues), a final question mark. Character-class densities (digits,
braces, operators, non-ASCII) need no features of their own: the byte unigrams count them.

`scan(text)` is the one feature function: the training script (scripts/train_classifier.py, through
`transform`) and the inference path (classify.py) both call it, so they cannot drift.
"""

from __future__ import annotations

import math

import numpy as np

HEAD_CHARS = 480
TAIL_CHARS = 240
ORDERS: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
BUCKET_BITS = 18
N_BUCKETS = 1 << BUCKET_BITS
START = "\x02"  # marks the prompt's first bytes (STX: never typed, and kept by lower())

# Bump when scan() changes: an artifact trained on other features then refuses to load.
VERSION = 7
PARAMS = {"head_chars": HEAD_CHARS, "tail_chars": TAIL_CHARS, "orders": list(ORDERS), "bucket_bits": BUCKET_BITS,
          "hash": "uint64 le code & mask(n) * mult(n) >> (64 - bits)"}

# One odd multiplier per n-gram length (64-bit constants from splitmix64 / xxhash / murmur3 finalizers).
_MULTIPLIERS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
                0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9)
_MASK = np.array([(1 << (8 * n)) - 1 for n in ORDERS], dtype=np.uint64)[:, None]  # [n_orders, 1]
_MULT = np.array([_MULTIPLIERS[n - 1] for n in ORDERS], dtype=np.uint64)[:, None]  # [n_orders, 1]
_SHIFT = np.uint64(64 - BUCKET_BITS)
# the most byte positions a window has (every character 4 UTF-8 bytes, the joining newline, START)
MAX_POSITIONS = 4 * (HEAD_CHARS + TAIL_CHARS + 1) + 1
_MASKS = np.ascontiguousarray(np.broadcast_to(_MASK, (len(ORDERS), MAX_POSITIONS)))  # [n_orders, MAX_POSITIONS]
_MULTS = np.ascontiguousarray(np.broadcast_to(_MULT, (len(ORDERS), MAX_POSITIONS)))  # [n_orders, MAX_POSITIONS]
_PAD = "\0" * 7  # lets the 8-byte view start at every position of the window

STRUCT_NAMES: tuple[str, ...] = (
    "const",  # always 1
    "log_chars",
    "log_lines",
    "long_context",
    "long_context_question",
    "translate_word",
    "colon_lines",
    "ends_with_question",
)
N_FEATURES = N_BUCKETS + len(STRUCT_NAMES)  # columns of the training matrix: buckets, then structural


def window(text: str) -> str:
    """The part of `text` the features read: all of it, or its head and tail joined by a newline."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def hashed_ngrams(data: bytes) -> np.ndarray:
    """Bucket ids [len(ORDERS), len(data) - 7] int64 of the n-grams starting at each position of `data`.

    `data` ends with 7 zero bytes (the padding the 8-byte view needs); row k holds the n-grams of length
    ORDERS[k]."""
    n = len(data) - 7
    if n <= 0:
        return np.zeros((len(ORDERS), 0), dtype=np.int64)
    # [n] element i = bytes i..i+7 as a little-endian uint64 (first byte lowest): a strided view, no copy
    codes = np.ndarray((n,), dtype="<u8", buffer=data, strides=(1,))
    if n <= MAX_POSITIONS:  # full-size constants: no broadcasting buffers in the two operations below
        h = np.bitwise_and(codes, _MASKS[:, :n])  # [n_orders, n] the first ORDERS[k] bytes of each position
        h *= _MULTS[:, :n]
    else:
        h = codes & _MASK
        h *= _MULT
    h >>= _SHIFT
    return h.view(np.int64)  # < 2**BUCKET_BITS: the same bits as int64, which take() indexes with


def scan(text: str) -> tuple[np.ndarray, float, list[float]]:
    """(bucket ids [n_orders, n_positions] int64, the n-grams' value, structural features) of `text`."""
    n = len(text)
    win = window(text).lower()
    data = (START + win + _PAD).encode("utf-8", "replace")
    buckets = hashed_ngrams(data)
    long_ctx = n > 800
    newlines = win.count("\n")
    struct = [
        1.0,
        math.log1p(n) / 10.0,
        math.log1p(text.count("\n")) / 6.0,
        float(long_ctx),
        float(long_ctx and "?" in win[-300:]),
        float("translat" in win),
        min(1.0, win.count(": ") / (newlines + 1.0)) if newlines >= 3 else 0.0,
        float(win.rstrip().endswith("?")),
    ]
    return buckets, 1.0 / math.sqrt(buckets.size), struct


def transform(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(column indices, values) of `text` as the training matrix's row: each bucket once with its summed
    value (bucket columns 0..N_BUCKETS-1), then the structural columns."""
    buckets, value, struct = scan(text)
    columns, counts = np.unique(buckets, return_counts=True)
    return (np.concatenate([columns, np.arange(N_BUCKETS, N_FEATURES)]),
            np.concatenate([counts * value, struct]))
