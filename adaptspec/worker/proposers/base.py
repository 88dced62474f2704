"""The proposer interface: what the engine asks of anything that drafts tokens for speculative decoding.

A proposer keeps whatever per-request state it needs (a draft model's KV slot, nothing for n-gram) keyed by
request id, and drafts for a whole batch at once:

    proposer.add(request_id)                          # when a request starts using it
    drafts = proposer.propose([ProposeInput(...), ...])  # once per engine step, for all its requests
    proposer.remove(request_id)                       # finished, aborted or switched proposer

`ProposeInput.token_ids` is the request's whole committed sequence (prompt + generated); the proposer
drafts up to `k` tokens that would follow it (`room`, when set, is the hard bound a proposer that chooses its
own length may use instead). A `Draft` carries the tokens and, for proposers that sample
(draft model, EAGLE head), the probabilities `[len(tokens), V]` they were sampled from; `probs=None` means
point-mass drafts (the verifier then accepts x with probability p_target(x)). A proposer may return fewer
than `k` tokens (even none): the engine verifies what it gets. A proposer made of others (hybrid) names, in
`Draft.source`, the part that drafted, so the engine's telemetry counts what really ran.

A proposer may also define `observe(request_id, source, drafted, accepted)`: the engine then reports, after
verifying each step, how many of the request's `drafted` tokens (from `Draft.source`, or the proposer's own
name) it accepted, e.g. for a proposer that adapts its draft length (hybrid).

An EAGLE-style head implements the same protocol; `needs_hidden_states` tells the engine to pass, in
`ProposeInput.hidden` (`[h]`), the target's final hidden state at the position before the request's last
committed token (the row whose logits produced that token), from the request's last verified step; None
before the request's first forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

__all__ = ["Draft", "ProposeInput", "Proposer", "SamplingParams"]


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    generator: torch.Generator | None = None  # the request's own generator when it is seeded


@dataclass(slots=True)
class ProposeInput:
    request_id: str
    token_ids: list[int]  # committed sequence: prompt + generated so far
    k: int  # how many tokens to draft (>= 1)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    hidden: torch.Tensor | None = None  # [h] target hidden state (EAGLE-style proposers only)
    # the most tokens the engine could verify for this request this step (max_tokens, the context and the
    # engine's draft bound); 0: `k`. A proposer whose draft length follows its own evidence (the hybrid's lookup
    # part, as long as its match) may draft past `k` up to it.
    room: int = 0


@dataclass(slots=True)
class Draft:
    token_ids: list[int]
    probs: torch.Tensor | None = None  # [len(token_ids), V] the distribution each token was drawn from
    source: str | None = None  # the proposer that drafted it when not the one asked (a hybrid's part)


@runtime_checkable
class Proposer(Protocol):
    name: str
    needs_hidden_states: bool

    def add(self, request_id: str) -> None: ...

    def remove(self, request_id: str) -> None: ...

    def propose(self, batch: list[ProposeInput]) -> list[Draft]: ...
