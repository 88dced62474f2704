"""`PlanCache`: the cost model's gamma searches memoised per (profile, proposer, batch bucket, alpha bucket, ...),
so a decision over a few workers takes tens of microseconds; and the buckets its keys are made of."""

from __future__ import annotations

import math

from adaptspec.control import costmodel
from adaptspec.control.profiles import Profile


def batch_bucket(b: float) -> float:
    """Exact integers up to 64, then ~3% steps: plans hardly change within a bucket."""
    if b <= 64:
        return float(int(b + 0.5))
    step = 2.0 ** (math.floor(math.log2(b)) - 5)
    return round(b / step) * step


def alpha_bucket(alpha: costmodel.AlphaLike) -> costmodel.AlphaLike:
    """Scalars to 0.001, per-position rates to 0.01."""
    if isinstance(alpha, float) and 0.0 <= alpha <= 1.0:
        return int(alpha * 1000.0 + 0.5) / 1000.0
    if isinstance(alpha, (int, float)):
        return round(min(max(float(alpha), 0.0), 1.0), 3)
    return tuple([int(min(max(a, 0.0), 1.0) * 100.0 + 0.5) / 100.0 for a in alpha])


def rate_bucket(rate: float) -> float:
    """Propose rates to 0.01 (1.0 = every step drafts)."""
    return min(max(int(rate * 100.0 + 0.5) / 100.0, 0.01), 1.0)


def _sqrt_bucket(x: float, top: float) -> float:
    """0 for ~0, else a grid that is ~6% apart around 64 (finer below, coarser above), capped at top."""
    if x <= 0.01:
        return 0.0
    return round(min(x, top) ** 0.5 * 8.0) ** 2 / 64.0


def prefill_bucket(prefill: tuple[float, float]) -> tuple[float, float]:
    """(prompt tokens per generated token, mean prompt tokens per request), bucketed."""
    return _sqrt_bucket(prefill[0], 256.0), _sqrt_bucket(prefill[1], 1e6)


NO_PREFILL = (0.0, 0.0)


def _buckets(alpha: costmodel.AlphaLike, batch: float, rate: float, prefill: tuple[float, float],
             head: costmodel.AlphaLike | None) -> tuple:
    """A plan key's bucketed arguments: (alpha, batch, rate, prefill, head alpha or None)."""
    h = None if head is None else alpha_bucket(head)
    return alpha_bucket(alpha), batch_bucket(batch), rate_bucket(rate), prefill_bucket(prefill), h


class PlanCache:
    """Memoised gamma search: (profile, proposer, batch bucket, alpha bucket, gamma bound) -> Plan."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self.max_entries = max_entries
        self._plans: dict[tuple, costmodel.Plan] = {}
        self._goodputs: dict[tuple, tuple[float, ...]] = {}

    def best(self, profile: Profile, proposer: str, alpha: costmodel.AlphaLike, batch: float,
             max_gamma: int, rate: float = 1.0, prefill: tuple[float, float] = NO_PREFILL,
             head: costmodel.AlphaLike | None = None) -> costmodel.Plan:
        """Best gamma in 1..max_gamma (or the off plan when max_gamma is 0); `rate`: the propose rate,
        `prefill`: the worker's (prompt tokens per generated token, prompt tokens per request); `head`: a
        per-step hybrid's head alpha (`costmodel.stepwise_hybrid`)."""
        a, b, r, f, h = _buckets(alpha, batch, rate, prefill, head)
        key = (profile.name, proposer, b, a, max_gamma, None, r, f, h)
        plan = self._plans.get(key)
        if plan is None:
            if max_gamma <= 0:
                plan = costmodel.evaluate(profile, "none", 0.0, 0, b, prefill_ratio=f[0], prefill_chunk=f[1])
            else:
                plan = costmodel.best_gamma(profile, proposer, a, b, max_gamma, propose_rate=r, prefill_ratio=f[0],
                                            prefill_chunk=f[1], fallback_alpha=h)
            self._store(key, plan)
        return plan

    def at(self, profile: Profile, proposer: str, alpha: costmodel.AlphaLike, batch: float,
           gamma: int, rate: float = 1.0, prefill: tuple[float, float] = NO_PREFILL,
           head: costmodel.AlphaLike | None = None) -> costmodel.Plan:
        """The plan of a fixed (proposer, gamma)."""
        a, b, r, f, h = _buckets(alpha, batch, rate, prefill, head)
        key = (profile.name, proposer, b, a, None, gamma, r, f, h)
        plan = self._plans.get(key)
        if plan is None:
            plan = costmodel.evaluate(profile, proposer, a, gamma, b, propose_rate=r, prefill_ratio=f[0],
                                      prefill_chunk=f[1], fallback_alpha=h)
            self._store(key, plan)
        return plan

    def goodputs(self, profile: Profile, proposer: str, alpha: costmodel.AlphaLike, batch: float, max_gamma: int,
                 rate: float = 1.0, prefill: tuple[float, float] = NO_PREFILL,
                 head: costmodel.AlphaLike | None = None) -> tuple[float, ...]:
        """`at(...).goodput` for gamma = 1..max_gamma under one key (a batch-wide gamma search over a class mix
        at every level of a schedule would otherwise bucket its arguments once per gamma). Evaluated without the
        plans' scalar alpha summary (`summarise=False`: it does not move a goodput, and it was a tenth of a loaded
        proxy's CPU), so those plans are not stored for `at`."""
        a, b, r, f, h = _buckets(alpha, batch, rate, prefill, head)
        key = (profile.name, proposer, b, a, max_gamma, "goodputs", r, f, h)
        got = self._goodputs.get(key)
        if got is None:
            got = tuple(costmodel.evaluate(profile, proposer, a, g, b, summarise=False, propose_rate=r,
                                           prefill_ratio=f[0], prefill_chunk=f[1], fallback_alpha=h).goodput
                        for g in range(1, max_gamma + 1))
            if len(self._goodputs) >= self.max_entries:
                self._goodputs.clear()
            self._goodputs[key] = got
        return got

    def off(self, profile: Profile, batch: float, prefill: tuple[float, float] = NO_PREFILL) -> costmodel.Plan:
        f = prefill_bucket(prefill)
        key = (profile.name, batch, f)
        plan = self._plans.get(key)
        if plan is None:
            plan = costmodel.evaluate(profile, "none", 0.0, 0, batch_bucket(batch), prefill_ratio=f[0],
                                      prefill_chunk=f[1])
            self._store(key, plan)
        return plan

    def _store(self, key: tuple, plan: costmodel.Plan) -> None:
        if len(self._plans) >= self.max_entries:
            self._plans.clear()
        self._plans[key] = plan
