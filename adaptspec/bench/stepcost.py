"""The simulator's only view of the hardware: seconds per engine step (`StepCost`), and `ProfileCost`, which reads them
from a controller profile (the same step-time model the policies plan with)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from adaptspec.control.profiles import Profile
from adaptspec.control.types import PROPOSERS, WorkerState


class StepCost(Protocol):
    """Seconds per engine step; the simulator's only view of the hardware."""

    def verify_time(self, tokens: int, kv_tokens: int) -> float:
        """One target forward over `tokens` batched tokens with `kv_tokens` of context in the KV cache."""
        ...

    def draft_time(self, proposer: str, gammas: np.ndarray, kv_tokens: int, verify_s: float = 0.0) -> float:
        """Drafting `gammas[i]` tokens for each request (all > 0) that uses `proposer` in this step, whose
        verification takes `verify_s` (a proposer priced as a share of the verify step needs it)."""
        ...


class ProfileCost:
    """`StepCost` from a controller profile (the same step-time model the policies plan with)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        # no hybrid option here: the synthetic workloads have no acceptance model for a lookup / model mix; on
        # trace replay "hybrid" is a per-step plan of its parts (`hybrid_head`), priced per step by them
        self._drafts = {p: profile.draft(p) for p in PROPOSERS[1:] if profile.offers(p)
                        and profile.draft(p).kind != "hybrid"}
        self.hybrid_head = _hybrid_head(profile, self._drafts)

    def verify_time(self, tokens: int, kv_tokens: int) -> float:
        return self.profile.target.time(tokens, kv_tokens)

    def draft_time(self, proposer: str, gammas: np.ndarray, kv_tokens: int, verify_s: float = 0.0) -> float:
        cost = self._drafts[proposer]
        n = len(gammas)
        if cost.kind == "ngram":  # one lookup per step, whatever gamma
            return cost.time(1, n, kv_tokens, self.profile.target, verify_s=verify_s)
        if cost.per_step:  # measured EAGLE form: a cost per step, not per pass
            return cost.overhead_s + cost.per_token_s * float(gammas.sum()) + cost.kv_s_per_token * kv_tokens
        # a draft model / head runs max(gamma) sequential passes; pass k carries the requests with gamma >= k
        reach = np.cumsum(np.bincount(gammas)[::-1])[::-1][1:]  # reach[k-1] = #(gamma >= k)
        return sum(cost.time(1, int(b), kv_tokens * b / n, self.profile.target) for b in reach)

    def hybrid_option(self):
        """The hybrid's DraftCost: the profile's hybrid option, or one implied by its parts (n-gram lookup and
        `hybrid_head`); None when the profile lacks a part. What the replay's per-step pricing averages to:
        `DraftCost.time(..., lookup_rate=the share of its steps that use lookup)`."""
        from adaptspec.control.profiles import implied_hybrid

        if self.hybrid_head is None:
            return None
        return implied_hybrid(self.profile, self.hybrid_head).draft("hybrid")

    def worker(self, max_gamma: int = 8, name: str = "sim0", profile: str | None = None) -> WorkerState:
        """The simulated worker; `profile` is what its policy prices with (a name or path; default this one)."""
        return WorkerState(name=name, proposers=tuple(self._drafts), max_gamma=max_gamma,
                           profile=profile or self.profile.name)

    def truth_aliases(self) -> dict[str, str]:
        """Which ground-truth acceptance row each proposer uses: a ~1B draft gets `draft-small`."""
        if "draft" not in self._drafts:
            return {}
        option = self.profile.resolve("draft")
        return {"draft": "draft-small" if "1b" in option.lower() or "small" in option.lower() else "draft"}


def _hybrid_head(profile: Profile, drafts: dict) -> str | None:
    """The trace proposer a hybrid drafts with where lookup does not: the profile's hybrid option's model part
    when it has one, else EAGLE, else the draft model (the reference worker's choice); None without n-gram."""
    if "ngram" not in drafts:
        return None
    for cost in profile.drafts.values():
        if cost.kind == "hybrid" and cost.parts:
            for p in ("eagle", "draft"):
                if p in drafts and profile.resolve(p) == cost.parts[1]:
                    return p
    return next((p for p in ("eagle", "draft") if p in drafts), None)
