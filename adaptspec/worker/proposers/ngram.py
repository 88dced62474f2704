"""N-gram / prompt-lookup proposer (Saxena 2023, "Prompt Lookup Decoding"; vLLM's `ngram` method).

For each request, take the last n tokens of prompt + generated text, for n from `max_n` down to `min_n`,
find the most recent earlier occurrence of that n-gram in the same sequence, and propose the (up to k)
tokens that followed it. Drafts are point masses (no probabilities): the verifier accepts a drafted x with
probability p_target(x), which is exact for any temperature and argmax-exact at temperature 0.
Matching is vectorised per request with numpy (a sliding-window compare), no Python loop over positions.
`ngram_lookup` lives in control/shadow.py, which scores the same lookup after the fact (the proxy imports it
without torch).
"""

from __future__ import annotations

import numpy as np

from adaptspec.control.shadow import ngram_lookup
from adaptspec.worker.proposers.base import Draft, ProposeInput

__all__ = ["NgramProposer", "ngram_lookup"]


class NgramProposer:
    name = "ngram"
    needs_hidden_states = False

    def __init__(self, min_n: int = 2, max_n: int = 4):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n} max_n={max_n}")
        self.min_n, self.max_n = min_n, max_n

    def add(self, request_id: str) -> None:
        return None

    def remove(self, request_id: str) -> None:
        return None

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        out = []
        for item in batch:
            seq = np.asarray(item.token_ids, dtype=np.int64)
            out.append(Draft(ngram_lookup(seq, item.k, self.min_n, self.max_n).tolist()))
        return out
