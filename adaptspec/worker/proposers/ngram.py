"""N-gram / prompt-lookup proposer (Saxena 2023, "Prompt Lookup Decoding"; vLLM's `ngram` method).

For each request, take the last n tokens of prompt + generated text, for n from `max_n` down to `min_n`,
find the most recent earlier occurrence of that n-gram in the same sequence, and propose the (up to k)
tokens that followed it. Drafts are point masses (no probabilities): the verifier accepts a drafted x with
probability p_target(x), which is exact for any temperature and argmax-exact at temperature 0.
Each running request keeps an index of its n-grams (`_Suffixes`: per n, the n-gram -> where it last started),
extended by the tokens committed since its last step, so a step's lookup is a few dict reads whatever the
context length; a sliding-window compare of the whole context per n (`ngram_lookup`, control/shadow.py, which
the proxy imports without torch and which scores the same lookup after the fact) cost ~0.25 ms a request a step
on the 2-core box, 4 ms a step at batch 16. The drafts are the same (tests/worker/test_ngram_index.py).
"""

from __future__ import annotations

from adaptspec.control.shadow import ngram_lookup
from adaptspec.worker.proposers.base import Draft, ProposeInput

__all__ = ["NgramProposer", "ngram_lookup"]


class _Suffixes:
    """One request's n-grams, for every n of the proposer: the n-gram -> the last i it starts at, over the
    windows that end before the sequence's last token (i + n <= L - 1: a match has a token after it), which is
    what `ngram_lookup` searches. Grows with the committed sequence."""

    __slots__ = ("tokens", "maps")

    def __init__(self, sizes: range) -> None:
        self.tokens: list[int] = []
        # longest n first: the order `lookup` tries them in
        self.maps: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in sorted(sizes, reverse=True)}

    def extend(self, ids: list[int]) -> None:
        """Take the committed sequence `ids` (this index's tokens and those committed since)."""
        toks = self.tokens
        old = len(toks)
        toks.extend(ids[old:])
        last = len(toks) - 1
        for n, seen in self.maps.items():
            for i in range(max(0, old - n), last - n + 1):  # the windows that became searchable, in order
                seen[tuple(toks[i:i + n])] = i

    def lookup(self, k: int) -> list[int]:
        """Up to k tokens after the most recent earlier match of the longest matching suffix n-gram."""
        toks = self.tokens
        length = len(toks)
        for n, seen in self.maps.items():
            if n > length - 1:
                continue
            i = seen.get(tuple(toks[length - n:]))
            if i is not None:
                return toks[i + n:i + n + k]
        return []


class NgramProposer:
    name = "ngram"
    needs_hidden_states = False

    def __init__(self, min_n: int = 2, max_n: int = 4):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n} max_n={max_n}")
        self.min_n, self.max_n = min_n, max_n
        self._index: dict[str, _Suffixes] = {}

    def add(self, request_id: str) -> None:
        return None

    def remove(self, request_id: str) -> None:
        self._index.pop(request_id, None)

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        out = []
        for item in batch:
            ids = item.token_ids
            index = self._index.get(item.request_id)
            held = None if index is None else index.tokens
            # a request's committed sequence only grows; anything else (an id seen again) starts a new index
            if held is None or len(ids) < len(held) or (
                    held and (ids[0] != held[0] or ids[len(held) - 1] != held[-1])):
                index = self._index[item.request_id] = _Suffixes(range(self.min_n, self.max_n + 1))
            index.extend(ids)
            out.append(Draft(index.lookup(item.k)))
        return out
