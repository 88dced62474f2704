"""Shadow n-gram evidence: what prompt lookup would have accepted on a request that ran with another proposer.

Why. N-gram lookup is the one proposer whose draft costs nothing to compute and depends only on the text
so far, so its acceptance on a request can be scored after the fact, whichever proposer the request ran
with (or none). Without this, the lookup's estimate for a class moves only when the policy chooses lookup
for it, and a class whose prior ranks lookup last never gets tried: exploring it costs whole requests (a long
chat request served by a lookup that never hits instead of a model at ~3x). With it, every finished request
teaches the lookup's key, at no cost to any request.

What is scored. The walk replays lookup with gamma `k` along the request's own output: a step starting at
output position i (i >= 1; the first token comes from prefill) drafts `lookup(prompt + output[:i], k)`,
accepts its longest prefix equal to output[i:], and the next step starts after the accepted tokens and one
more. This is exactly the run a lookup request would have made, in distribution:
  * greedy: the output does not depend on the proposer (speculation is lossless), so the walk is the run;
  * sampled: a point-mass draft x at a position is accepted with the target's probability p(x), and the
    emitted token at that position was drawn from p, so "x equals the emitted token" is a Bernoulli(p(x))
    trial; given the earlier draft tokens matched, the next emitted token was drawn from the target's
    distribution after them, which is the next draft token's acceptance probability again.
A step whose lookup finds nothing drafts nothing (it counts as a step, not a draft: the propose rate).

Counts come out in the per-position form of `usage.speculative` (`tried_per_position`,
`accepted_per_position`): the reference worker reports them as `usage.speculative.shadow.ngram`, learning
counts them into the (worker, "ngram", class) key (control/learn.py, for the proxy and the simulator alike),
and the simulator scores traced requests the same way from their recorded n-gram runs (`walk_runs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

SHADOW_K = 8  # the gamma lookup is scored at: the largest the policies plan (policy.max_gamma's default)
MAX_POSITIONS = 64  # a draft is a handful of tokens; a longer list in a response is malformed


@dataclass(frozen=True, slots=True)
class ShadowStats:
    """One request's shadow lookup run: steps walked, steps whose lookup drafted, drafted / accepted tokens,
    and per draft position the drafts that tried it and those that accepted it."""

    steps: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    tried_per_position: tuple[int, ...]
    accepted_per_position: tuple[int, ...]

    def to_dict(self) -> dict:
        return {"steps": self.steps, "drafts": self.drafts, "draft_tokens": self.draft_tokens,
                "accepted_tokens": self.accepted_tokens, "tried_per_position": list(self.tried_per_position),
                "accepted_per_position": list(self.accepted_per_position)}

    @classmethod
    def from_dict(cls, d: object) -> ShadowStats | None:
        """The stats from a response's `shadow.ngram` object; None when it is absent or inconsistent (counts
        not non-negative integers, accepted above tried, a position tried more often than the one before it
        was accepted, drafts above steps)."""
        if not isinstance(d, Mapping):
            return None
        ints = [d.get(k) for k in ("steps", "drafts", "draft_tokens", "accepted_tokens")]
        tried, acc = d.get("tried_per_position"), d.get("accepted_per_position")
        if not (isinstance(tried, list) and isinstance(acc, list)) or len(tried) != len(acc) \
                or len(tried) > MAX_POSITIONS:
            return None
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in [*ints, *tried, *acc]):
            return None
        steps, drafts, draft_tokens, accepted = ints
        if drafts > steps or accepted > draft_tokens or sum(acc) != accepted \
                or (tried and tried[0] != drafts) or any(a > t for t, a in zip(tried, acc, strict=True)) \
                or any(t > a for t, a in zip(tried[1:], acc, strict=False)):
            return None
        return cls(steps, drafts, draft_tokens, accepted, tuple(tried), tuple(acc))


class PositionCounts:
    """Steps, drafting steps, drafted tokens and tried / accepted counts per draft position (rows grow past the
    first `k` when a draft reaches further: a hybrid's lookup drafts past its gamma); the shadow walks' tally and
    the reference worker's per-source one (worker/requests.py `SourceTally`)."""

    __slots__ = ("steps", "drafts", "draft_tokens", "tried", "acc")

    def __init__(self, k: int = 0) -> None:
        self.steps = self.drafts = self.draft_tokens = 0
        self.tried = [0] * k
        self.acc = [0] * k

    def step(self, drafted: int, accepted: int, room: int) -> None:
        """One step that drafted `drafted` tokens (0: the lookup found nothing) of the `room` it had (the
        gamma, less what the output leaves), and accepted `accepted`. A draft the text cut short stops the
        step where it ends: that position is tried and not accepted, as the reference engine counts lookup
        (`StepOutput.tried_per_position`)."""
        self.steps += 1
        if drafted > 0:
            self.draft(drafted, accepted, min(accepted + 1, room))

    def draft(self, drafted: int, accepted: int, reached: int) -> None:
        """One drafting step (its step counted apart): `drafted` tokens, `accepted` kept, positions
        0..reached-1 tried."""
        self.drafts += 1
        self.draft_tokens += drafted
        if len(self.tried) < reached:
            self.tried += [0] * (reached - len(self.tried))
            self.acc += [0] * (reached - len(self.acc))
        for j in range(reached):
            self.tried[j] += 1
        for j in range(accepted):
            self.acc[j] += 1

    def stats(self) -> ShadowStats:
        return ShadowStats(self.steps, self.drafts, self.draft_tokens, sum(self.acc), tuple(self.tried),
                           tuple(self.acc))


def ngram_lookup(seq: np.ndarray, k: int, min_n: int = 1, max_n: int = 4, earliest: bool = False) -> np.ndarray:
    """Up to k tokens following the most recent earlier match of seq's longest matching suffix n-gram (what the
    reference worker's n-gram proposer drafts, worker/proposers/ngram.py); `earliest`: the first match in seq
    instead (what vLLM's n-gram proposer drafts: `_find_longest_matched_ngram_and_propose_tokens`)."""
    L = seq.shape[0]
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        pattern = seq[L - n:]
        # windows that start at i and end before the suffix itself: i in [0, L - n - 1]
        windows = sliding_window_view(seq[: L - 1], n)  # [L - n, n]
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        if hits.size:
            start = int(hits[0] if earliest else hits[-1]) + n
            return seq[start:start + k]
    return seq[:0]


Lookup = Callable[[int, int], np.ndarray]  # (context length L, k) -> up to k tokens after seq[:L]


class NgramIndex:
    """Prompt lookup over one whole sequence, answered for any prefix of it: `lookup(L, k)` equals
    `ngram_lookup(seq[:L], k, min_n, max_n, earliest)` (worker/proposers/ngram.py: the most recent earlier
    occurrence of the longest matching suffix n-gram, and up to k tokens after it, within seq[:L]; with
    `earliest`, vLLM's choice: its first occurrence).

    Walking a request calls the lookup once per step; done as the proposer does it (a sliding-window compare
    of the whole context per n) that is ~10-20 ms per request of 64 tokens. Here, per n, every window's hash
    is computed at once and a stable sort by hash links each window to the previous one with the same hash:
    the most recent earlier occurrence is a table read (verified token by token; a hash collision falls back
    to the compare). `earliest` links each window to the first one with its hash instead: the head of its run
    in the sort."""

    _BASE = np.uint64(1_000_003)

    def __init__(self, seq: Sequence[int], min_n: int, max_n: int, earliest: bool = False) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n} max_n={max_n}")
        self.seq = np.asarray(seq, dtype=np.int64)
        self.min_n, self.max_n, self.earliest = min_n, max_n, earliest
        self._prev: dict[int, np.ndarray] = {}
        useq = self.seq.astype(np.uint64)
        for n in range(min_n, max_n + 1):
            m = self.seq.shape[0] - n + 1
            if m <= 1:
                continue
            h = np.zeros(m, dtype=np.uint64)
            for t in range(n):  # wraps mod 2^64: a hash, verified on use
                h = h * self._BASE + useq[t:t + m]
            order = np.argsort(h, kind="stable")  # equal hashes keep their positions ascending
            same = h[order[1:]] == h[order[:-1]]
            prev = np.full(m, -1, dtype=np.int64)
            if earliest:  # the first window of each run of equal hashes, for every later window of the run
                head = order[np.maximum.accumulate(np.where(np.r_[True, ~same], np.arange(m), 0))]
                prev[order[1:][same]] = head[1:][same]
            else:
                prev[order[1:][same]] = order[:-1][same]  # the window before it with the same hash
            self._prev[n] = prev

    def lookup(self, L: int, k: int) -> np.ndarray:
        seq = self.seq
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            j = L - n  # the suffix n-gram of seq[:L] starts here; an earlier window starts before j
            i = int(self._prev[n][j])
            if i < 0:
                continue
            if not np.array_equal(seq[i:i + n], seq[j:L]):  # a hash collision: the proposer's way
                return ngram_lookup(seq[:L], k, self.min_n, self.max_n, self.earliest)
            return seq[i + n:min(i + n + k, L)]
        return seq[:0]


def index_over(seq: np.ndarray, lookup: tuple[int, int] | NgramIndex, earliest: bool = False) -> NgramIndex:
    """An `NgramIndex` over `seq`: `lookup` itself when it is one (it must be over the same tokens), else one
    built with its (min_n, max_n)."""
    if isinstance(lookup, NgramIndex):
        if lookup.seq.shape != seq.shape or not np.array_equal(lookup.seq, seq):
            raise ValueError("the NgramIndex given is over other tokens than prompt + output")
        return lookup
    return NgramIndex(seq, *lookup, earliest=earliest)


def walk_lookup(prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
                lookup: Callable[[Sequence[int]], Lookup] | tuple[int, int] | NgramIndex,
                earliest: bool = False) -> ShadowStats:
    """Score prompt lookup along one request's output (module doc), counting steps as the reference engine
    does: the prefill step (the first token) is a step that drafts nothing, and a draft is cut so that its
    tokens and the bonus token fit in the output (the engine's rule at max_tokens).

    `lookup`: (min_n, max_n) of the n-gram proposer (an `NgramIndex` over the request answers; `earliest`: vLLM's
    match choice), an `NgramIndex` already built over prompt + output (one index serves every shadow of a
    request), or a factory `seq -> ((L, k) -> draft)` (tests compare the index with the proposer's own lookup
    this way)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    seq = np.asarray([*prompt_ids, *output_ids], dtype=np.int64)
    draft_of = index_over(seq, lookup, earliest).lookup if isinstance(lookup, tuple | NgramIndex) else lookup(seq)
    p, n = len(prompt_ids), len(output_ids)
    counts = PositionCounts(k)
    if n:
        counts.step(0, 0, 0)  # prefill
    i = 1
    while i < n:
        room = min(k, n - i - 1)
        draft = np.asarray(draft_of(p + i, k))[:room]
        if draft.size == 0:
            counts.step(0, 0, room)
            i += 1
            continue
        same = draft == seq[p + i:p + i + draft.size]
        m = int(draft.size if same.all() else np.argmin(same))  # accepted: the first mismatch's index
        counts.step(int(draft.size), m, room)
        i += m + 1
    return counts.stats()


def walk_runs(runs: Sequence[int], output_tokens: int, k: int) -> ShadowStats:
    """The same walk over a trace's recorded n-gram runs (README "Acceptance traces": a step starting at
    output position i drafting up to max_k emits runs[i] tokens), with gamma `k` <= the trace's max_k. A
    trace does not say whether the lookup drafted, so every step counts as drafting `k` tokens, and only decode
    steps count, as the simulator's own lookup requests do."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    counts = PositionCounts(k)
    i, n = 1, min(output_tokens, len(runs))
    while i < n:
        m = min(max(int(runs[i]), 1), k + 1) - 1
        counts.step(k, m, k)
        i += m + 1
    return counts.stats()
