"""A SmartSpec-style goodput controller (no content awareness) as a peer policy.

Follows Liu et al. 2024, "Optimizing Speculative Decoding for Serving Large Language Models Using Goodput"
(SmartSpec; arXiv:2406.14066), section 4: at every step choose the proposal length k (0 = plain decoding) that
maximises goodput = expected generated tokens / batch execution time, with the expected tokens of a request
from the i.i.d. acceptance model (1 - a^(k+1)) / (1 - a), the acceptance rate a a moving average of observed
acceptance, and the batch execution time from a profiled linear model of the batched tokens (here: the worker's
step-time profile, with the draft cost of the chosen proposer, and its prefill share). One proposal method
(`proposer`), one k for the whole batch at each batch size, no margin over plain decoding.

How it maps onto a proxy: each request carries the goodput-optimal k at every batch level of
control/schedule.py as its gamma schedule, so k follows the live running batch as SmartSpec's per-step choice
does. What it leaves out: SmartSpec's per-request moving average of the request's own acceptance during
generation (a proxy sees a request only once it has finished): the rate here is one scalar for the engine,
the proxy's discounted estimate from the per-request feedback pooled over content classes (the "without
content awareness" of issue 34); no per-position rates, no per-class or per-prompt prediction, no probing.
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control.peers._common import ProfileBook, fallback, per_request_worker, pooled, scheduled
from adaptspec.control.plancache import PlanCache
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.profiles import Profile
from adaptspec.control.schedule import ANY_BATCH, compress, levels
from adaptspec.control.types import AlphaSource, Decision, WorkerState


class SmartSpec(PolicyBase):
    uses_alphas = True

    def __init__(self, cfg) -> None:
        self.name = "smartspec"
        self.proposer, self.max_gamma = cfg.proposer, cfg.max_gamma
        self._profiles = ProfileBook(cfg.default_profile)
        self.default_profile = self._profiles.default
        self.cache = PlanCache()
        self._schedules: dict[tuple, tuple] = {}

    def profile(self, name: str | None) -> Profile:
        return self._profiles.get(name)

    def schedule(self, w: WorkerState, alpha: float) -> tuple:
        """argmax_k goodput at every batch level (k = 0 where plain decoding is at least as good)."""
        prof = self.profile(w.profile)
        bound = min(self.max_gamma, w.max_gamma)
        rho = (w.prefill_ratio, w.prompt_tokens)
        key = (prof.name, round(alpha, 3), bound, round(rho[0], 1), round(rho[1], -1))
        hit = self._schedules.get(key)
        if hit is None:
            rows = []
            for b in levels():
                plan = self.cache.best(prof, self.proposer, alpha, float(b), bound, 1.0, rho)
                off = self.cache.off(prof, float(b), rho)
                rows.append((b, plan.gamma if plan.goodput > off.goodput else 0))
            rows.append((ANY_BATCH, rows[-1][1]))
            hit = compress(rows)
            if len(self._schedules) > 10_000:
                self._schedules.clear()
            self._schedules[key] = hit
        return hit

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        w = per_request_worker(workers, self.proposer)
        if w is None or not self.profile(w.profile).offers(self.proposer):
            return fallback(workers, content_class, self.name, self.proposer)
        est = pooled(alphas, w.name, self.proposer)
        alpha = est.mean
        return scheduled(w, self.proposer, self.schedule(w, alpha), content_class, self.name,
                         f"goodput-optimal k, alpha={alpha:.2f}")
