"""What the peer policies share: a class-blind view of the proxy's acceptance estimates, and decisions.

The anchors these policies follow (SGLang, TensorRT-LLM, vLLM, SmartSpec, BanditSpec) know nothing of content
classes: an engine counts acceptance over everything it serves. The proxy learns per (worker, proposer, class)
from each finished request's `usage.speculative` (the same feedback the adaptive policy gets); `pooled` folds
those class keys back into one engine-wide estimate, weighting each class by its evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control import costmodel
from adaptspec.control.alpha import ANY_CLASS
from adaptspec.control.policies.common import fixed_config, healthy, least_loaded, offers
from adaptspec.control.profiles import Profile, load_profile
from adaptspec.control.schedule import ANY_BATCH, Schedule, compress, max_cap
from adaptspec.control.types import CONTENT_CLASSES, AlphaEstimate, AlphaSource, Decision, WorkerState
from adaptspec.errors import ConfigError


def pooled(alphas: AlphaSource, worker: str, proposer: str) -> AlphaEstimate:
    """One estimate over every content class of (worker, proposer): evidence-weighted means of the class
    keys' mean, per-position rates and propose rate; the engine-wide prior when no class has evidence."""
    ests = [alphas.get(worker, proposer, c) for c in CONTENT_CLASSES]
    n = sum(e.n for e in ests)
    if n <= 0:
        return alphas.get(worker, proposer, ANY_CLASS)
    mean = sum(e.n * e.mean for e in ests) / n
    rate = sum(e.n * e.propose_rate for e in ests) / n
    var = sum(e.n * (e.std ** 2 + (e.mean - mean) ** 2) for e in ests) / n
    known = [e for e in ests if e.n > 0 and e.per_position]
    per_position = None
    if known and len(known) == sum(1 for e in ests if e.n > 0):
        depth = min(len(e.per_position) for e in known)
        w = sum(e.n for e in known)
        per_position = tuple(sum(e.n * e.per_position[i] for e in known) / w for i in range(depth))
    return AlphaEstimate(mean, var ** 0.5, n, per_position=per_position, propose_rate=rate,
                         reports=sum(e.reports for e in ests))


def accepted_per_step(est: AlphaEstimate, gamma: int) -> float:
    """Expected accepted draft tokens per verification step drafting up to `gamma` (steps without a draft,
    e.g. a lookup that found no match, accept none)."""
    if gamma <= 0:
        return 0.0
    alpha = est.per_position or est.mean
    return est.propose_rate * (costmodel.expected_tokens_any(alpha, gamma) - 1.0)


def tier_schedule(tiers: Sequence[tuple[int, int]]) -> Schedule:
    """[(smallest batch of a tier, steps), ...] ascending -> a schedule: a tier covers the batches from its
    own smallest up to the next tier's, the last tier every batch above."""
    rows = [(nxt - 1, steps) for (_, steps), (nxt, _) in zip(tiers, tiers[1:], strict=False)]
    rows.append((ANY_BATCH, tiers[-1][1]))
    return compress(rows)


def per_request_worker(workers: Sequence[WorkerState], proposer: str) -> WorkerState | None:
    """The least-loaded healthy worker that takes `proposer` per request (None: no such worker)."""
    able = [w for w in healthy(workers) if w.per_request and offers(w, proposer)]
    return least_loaded(able) if able else None


def scheduled(w: WorkerState, proposer: str, sched: Schedule, content_class: str, policy: str,
              reason: str) -> Decision:
    """A decision that drafts with `proposer` at the caps of `sched` by the live running batch (off where a cap
    is 0), admitted at the cap of the batch it joins; plain decoding when no cap speculates."""
    top = min(max_cap(sched), w.max_gamma)
    if top <= 0:
        return Decision(w.name, "none", 0, content_class, policy, f"{policy}: off ({reason})")
    sched = tuple((b, min(c, top)) for b, c in sched)
    batch = int(w.load + 1)
    g = next((c for b, c in sched if batch <= b), 0)
    rows = ",".join(f"{b}:{c}" for b, c in sched)
    return Decision(w.name, proposer, g, content_class, policy,
                    f"{policy}: {proposer} g={g} batch={batch} sched={rows} ({reason})", schedule=sched)


def fallback(workers: Sequence[WorkerState], content_class: str, policy: str, proposer: str) -> Decision:
    """No per-request worker offers `proposer`: the least-loaded worker as launched (fixed pools)."""
    w = least_loaded(healthy(workers))
    p, g = fixed_config(w) if not w.per_request else ("none", 0)
    return Decision(w.name, p, g, content_class, policy,
                    f"{policy}: no per-request worker offers {proposer}; {w.name} runs {p} g={g}")


class ProfileBook:
    """Step-time profiles by a worker's profile name, loaded once; a name that does not load plans with the
    policy's default profile (a worker with no profile of its own)."""

    def __init__(self, default: str | None) -> None:
        self.default = load_profile(default)
        self._by_name: dict[str | None, Profile] = {None: self.default}

    def get(self, name: str | None) -> Profile:
        prof = self._by_name.get(name)
        if prof is None:
            try:
                prof = load_profile(name)
            except ConfigError:
                prof = self.default
            self._by_name[name] = prof
        return prof
