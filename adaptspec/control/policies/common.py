"""What the policies (and the peer policies, control/peers/) share: healthy workers, the least loaded, whether
a worker offers a proposer, a fixed worker's configuration, and the alpha estimate of a key."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from adaptspec.control.profiles import Profile
from adaptspec.control.types import AlphaEstimate, AlphaSource, WorkerState
from adaptspec.errors import UpstreamError


def posterior_draw(rng: random.Random, est: AlphaEstimate) -> float:
    """One draw of alpha from the Beta with the estimate's mean and std (the mean itself when std is 0)."""
    m, sd = min(max(est.mean, 1e-6), 1 - 1e-6), est.std
    if sd <= 0:
        return m
    nu = m * (1.0 - m) / (sd * sd) - 1.0  # a + b of the Beta with this mean and std
    return rng.random() if nu <= 0 else rng.betavariate(m * nu, (1.0 - m) * nu)


def healthy(workers: Sequence[WorkerState]) -> list[WorkerState]:
    ws = [w for w in workers if w.healthy]
    if not ws:
        raise UpstreamError("no healthy upstream worker" if workers else "no upstream worker configured")
    return ws


def estimate(alphas: AlphaSource, worker: str, proposer: str, content_class: str,
             stepwise: bool = False) -> AlphaEstimate:
    """The key's estimate; for a hybrid without evidence of its own, with the lookup hit rate of the worker's
    n-gram key for the class when that has evidence (the same lookup on the same text; otherwise the hybrid's
    cautious prior, 0: its model drafts every step). Without it a hybrid would be priced as its model plus a
    lookup that never hits, lose to its parts, and never be tried. Not for a per-step hybrid (`stepwise`): its
    key counts the rule's lookup steps (the n-gram key's hit rate over every step is no measure of them), from
    its own requests and the rule walked along every other request's n-gram runs (bench/simulator.py)."""
    est = alphas.get(worker, proposer, content_class)
    if proposer == "hybrid" and est.n <= 0 and not stepwise:
        lookup = alphas.get(worker, "ngram", content_class)
        if lookup.n > 0:
            return replace(est, propose_rate=lookup.propose_rate)
    return est


def head_of(w: WorkerState, prof: Profile) -> str | None:
    """The model head a per-step hybrid drafts with where its lookup does not (trace replay's choice,
    bench/simulator.py `hybrid_head`): the worker's eagle, else its draft model."""
    return next((p for p in ("eagle", "draft") if p in w.proposers and prof.offers(p)), None)


def least_loaded(workers: Sequence[WorkerState]) -> WorkerState:
    return min(workers, key=lambda w: w.load)


def fixed_config(w: WorkerState) -> tuple[str, int]:
    """(proposer, gamma) a fixed-speculation worker runs with; ('none', 0) when speculation is off."""
    if w.gamma > 0 and w.proposers:
        return w.proposers[0], w.gamma
    return "none", 0


def offers(w: WorkerState, proposer: str) -> bool:
    """Can the worker run this request with `proposer` (per request, or because it is fixed to it)?"""
    if w.per_request:
        return proposer == "none" or proposer in w.proposers
    return fixed_config(w)[0] == proposer
