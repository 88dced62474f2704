"""Counting trials right: a request's (or a counter window's) drafting stats as Bernoulli counts for one key.

A verification step stops at the first rejection, so a step that drafts gamma tokens yields `accepted`
successes and one failure only if it was cut short; accepted / drafted counts the never-tried positions behind a
rejection as failures (control/alpha.py's module doc). From per-position counts the trials are exact; from
totals the truncated-geometric moment fit gives the failures (`alpha_from_steps`). `totals_observation` is
`AlphaTable.observe`'s conversion as a pure function, so that counter ingestion and learning hand the state
backends an `Observation` (control/types.py) instead of a call.
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control.types import GREEDY, Observation


def truncated_mean_accepted(alpha: float, gamma: float) -> float:
    """Mean accepted drafts per step when gamma are drafted: alpha(1 - alpha^gamma)/(1 - alpha)."""
    if alpha >= 1.0:
        return float(gamma)
    if alpha <= 0.0:
        return 0.0
    return alpha * (1.0 - alpha**gamma) / (1.0 - alpha)


def alpha_from_steps(accepted: float, steps: float, gamma: float) -> float:
    """Method-of-moments alpha from accepted tokens over `steps` drafting steps of `gamma` tokens each."""
    if steps <= 0 or gamma <= 0:
        raise ValueError("need steps > 0 and gamma > 0")
    m = min(max(accepted / steps, 0.0), gamma)
    if m >= gamma:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(48):  # truncated_mean_accepted increases with alpha
        mid = 0.5 * (lo + hi)
        if truncated_mean_accepted(mid, gamma) < m:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def alpha_from_accept_length(accept_length: float, gamma: float) -> float:
    """alpha whose E = 1 + mean accepted per step equals `accept_length` (SGLang's spec_accept_length)."""
    return alpha_from_steps(max(accept_length - 1.0, 0.0), 1.0, gamma)


def totals_observation(
    worker: str,
    proposer: str,
    cls: str,
    draft_tokens: float,
    accepted_tokens: float,
    per_position: Sequence[float] | None = None,
    now: float | None = None,
    *,
    steps: float | None = None,
    gamma: float | None = None,
    num_drafts: float | None = None,
    regime: str = GREEDY,
) -> Observation | None:
    """The counts of per-request stats or counter deltas for one key (None: nothing drafted).

    `per_position[i]`: drafts whose position i was accepted (needs `num_drafts`, else `steps`).
    `steps`: verification steps of the request; with `gamma` (the gamma it ran with) the drafting steps
    are draft_tokens / gamma, otherwise every step is taken to have drafted. `num_drafts`: drafting
    steps, when known exactly (vLLM's `num_drafts`).
    """
    if draft_tokens < 0 or accepted_tokens < 0 or accepted_tokens > draft_tokens + 1e-9:
        raise ValueError(f"bad stats: draft_tokens={draft_tokens}, accepted_tokens={accepted_tokens}")
    if draft_tokens <= 0:
        return None
    drafts = num_drafts
    if drafts is None and gamma:
        drafts = draft_tokens / gamma
    if drafts is None and steps:
        drafts = min(float(steps), draft_tokens)
    if per_position is not None and drafts and abs(draft_tokens - drafts * len(per_position)) > 1e-6 * draft_tokens:
        # drafts of different lengths were mixed (per-request gamma): position i was not tried by every
        # draft that reached it, so conditional rates would read low; use the step estimator instead
        per_position = None
    if per_position is not None and drafts:
        acc = [float(x) for x in per_position]
        trials = [float(drafts)] + acc[:-1]
        succ = sum(acc)
        fail = max(float(drafts) - (acc[-1] if acc else 0.0), 0.0)
        return Observation(worker, proposer, cls, succ, fail, trials, acc, draft_tokens=draft_tokens, now=now,
                           regime=regime)
    if drafts:
        g = draft_tokens / drafts
        a = alpha_from_steps(accepted_tokens, drafts, g)
        fail = drafts * (1.0 - a**g)
    else:  # no step count: accepted / drafted (biased low when runs are truncated at gamma)
        fail = draft_tokens - accepted_tokens
    return Observation(worker, proposer, cls, float(accepted_tokens), fail, draft_tokens=draft_tokens, now=now,
                       regime=regime)
