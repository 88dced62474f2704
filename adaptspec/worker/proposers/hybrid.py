"""Hybrid proposer: n-gram prompt lookup first, a model proposer (EAGLE head or draft model) where lookup fails.

Per request and per step: if the request's own text has an earlier occurrence of its suffix n-gram
(`NgramProposer`), the tokens that followed it are the draft (point masses, `probs=None`: free to propose,
and on copy-heavy text usually long runs); otherwise the model proposer drafts, with its own sampled
distribution as the draft probs. Each step's draft comes wholly from one source, so the verifier sees
either point masses or the model's distributions — exact either way (the engine batches both kinds).

The model proposer keeps its per-request state (a draft model's KV slot) across steps where lookup
drafted: it catches up on the committed tokens the next time it runs. Each draft names its source
(`Draft.source`: "ngram" or the model proposer's name), so the engine counts model passes only for the steps
the model drafted; `drafts_by_source` counts the steps each source drafted, for the measurements and tests.
"""

from __future__ import annotations

from adaptspec.worker.proposers.base import Draft, ProposeInput, Proposer
from adaptspec.worker.proposers.ngram import NgramProposer

__all__ = ["HybridProposer"]


class HybridProposer:
    name = "hybrid"

    def __init__(self, ngram: NgramProposer, model: Proposer):
        self.ngram, self.model = ngram, model
        self.needs_hidden_states = model.needs_hidden_states
        self.drafts_by_source = {"ngram": 0, model.name: 0}

    def add(self, request_id: str) -> None:
        self.model.add(request_id)

    def remove(self, request_id: str) -> None:
        self.model.remove(request_id)

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        out = self.ngram.propose(batch)
        misses = [i for i, d in enumerate(out) if not d.token_ids]
        for d in out:
            d.source = "ngram"
        if misses:
            for i, d in zip(misses, self.model.propose([batch[i] for i in misses]), strict=True):
                d.source = self.model.name
                out[i] = d
        self.drafts_by_source["ngram"] += len(batch) - len(misses)
        self.drafts_by_source[self.model.name] += sum(1 for i in misses if out[i].token_ids)
        return out
