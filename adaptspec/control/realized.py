"""Realized rates: how far the cost model's price of each proposer is from what its requests measure, at batch 1.

At batch 1 a request's decode rate (output tokens / decode seconds) is its plan's own goodput: nothing else shares
its steps. The cost model predicted it as `expected_speedup` x the worker's plain rate, so over a proposer's
requests of one content class

    R_p = sum_i tokens_i x rate_i / expected_speedup_i  /  sum_i tokens_i      (rate_i = tokens_i / decode seconds_i)

is the plain rate the model implies for that class, taken as the token-weighted mean of each request's own ratio
decode rate / expected speedup (not total tokens over total time: that is a harmonic mean, which a proposer whose
acceptance varies widely from request to request, n-gram lookup on copy-heavy traffic, would lose to by Jensen's
inequality alone, though the model is right about it on average). Were the model right for every proposer, R_p would
be the same for all of them (the class's plain rate); where it is not, R_p / R is the model's error for proposer p
(R: the requests-weighted geometric mean of the class's R_p), whatever its cause: a step time the fit splits wrongly,
tokens per step the alpha estimates map to wrongly (a per-step hybrid's lookup steps priced on the cautious side,
a head's acceptance decaying with depth faster than its rates say), a proposer's cost the profile lacks. The ratio
is relative: what every proposer of the class shares (the box's speed, the class's prompt lengths, the proxy's
own time) cancels, so the correction moves choices between proposers, never speculation against plain decoding
(the margin over off stays the model's).

    rates = RealizedRates()
    rates.observe("w0", "code", "hybrid", tokens=63, seconds=0.11, expected_speedup=1.53)
    plan_goodput *= rates.correction("w0", "code", "hybrid")   # 1 until the class has evidence

`correction` applies only what the evidence is sure of: the discrepancy d_p = log R_p - log R less `z` (2) of its
standard errors (from the spread of the proposer's per-request ratios: its token-weighted variance, pooled with a
prior spread of 30% worth 4 requests, over its effective number of requests), towards 0 (soft threshold), and clipped to [1 / `max_factor`, `max_factor`]. So a
proposer run on a few requests, or whose requests' ratios scatter widely (n-gram lookup on mixed traffic), moves
nothing until the evidence is beyond its noise, and a model that is right moves almost nothing at all. The sums
forget by `half_life` of the class's observed requests, so the ratios follow the model as its estimates and fit
move. Only requests whose plan was priced alone at batch 1 and not changed afterwards are evidence
(`Decision.rate_evidence`: the goodput policy records the plan it priced alone at batch 1 in `Decision.priced`,
and a decision is evidence while it still runs that plan; a calibration probe or a holdout's control that replaces
it is not, a posterior-draw probe never was); and only such decisions are corrected.

Kept per proxy process (not in the shared state): each replica learns its own, from its own requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["RealizedRates"]


@dataclass
class RealizedRates:
    z: float = 2.0  # standard errors of its own evidence a discrepancy must exceed before any of it is applied
    half_life: float = 200.0  # requests of the class after which a sum counts half
    max_factor: float = 1.5  # the correction stays in [1 / max_factor, max_factor]
    min_tokens: int = 4  # shorter answers are noise (a decode time of a few steps)
    # the spread a proposer's ratios are assumed to have before its own requests show theirs (relative sd, worth
    # `prior_spread_requests` requests): two or three requests cannot tell their own spread
    prior_spread: float = 0.3
    prior_spread_requests: float = 4.0
    # (worker, class) -> proposer -> [sum w, sum w r, sum w r^2, sum w^2, requests], discounted; w = tokens,
    # r = decode rate / expected speedup
    _sums: dict[tuple[str, str], dict[str, list[float]]] = field(default_factory=dict)
    _cache: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.z < 0 or self.half_life <= 0 or self.max_factor < 1.0 or self.min_tokens < 1 or \
                self.prior_spread < 0 or self.prior_spread_requests < 0:
            raise ValueError("z >= 0, half_life > 0, max_factor >= 1, min_tokens >= 1 and a prior spread >= 0 "
                             f"required, got {self.z}, {self.half_life}, {self.max_factor}, {self.min_tokens}, "
                             f"{self.prior_spread} x {self.prior_spread_requests}")

    def observe(self, worker: str, content_class: str, proposer: str, tokens: float, seconds: float,
                expected_speedup: float) -> bool:
        """One finished request: `tokens` decoded in `seconds` under a plan the model priced at `expected_speedup`
        over plain decoding. False (nothing learnt) for plain requests and unusable measurements."""
        if proposer == "none" or tokens < self.min_tokens or not (seconds > 0.0 and math.isfinite(seconds)) \
                or not (expected_speedup > 0.0 and math.isfinite(expected_speedup)):
            return False
        key = (worker, content_class)
        arms = self._sums.setdefault(key, {})
        lam = 0.5 ** (1.0 / self.half_life)
        for s in arms.values():
            for i in range(5):
                s[i] *= lam * lam if i == 3 else lam  # sum w^2 of discounted weights
        s = arms.setdefault(proposer, [0.0] * 5)
        w, r = float(tokens), float(tokens) / (float(seconds) * float(expected_speedup))
        s[0] += w
        s[1] += w * r
        s[2] += w * r * r
        s[3] += w * w
        s[4] += 1.0
        self._cache.pop(key, None)
        return True

    def correction(self, worker: str, content_class: str, proposer: str) -> float:
        """The factor on the model's goodput of `proposer` for the class on `worker` (1: no evidence)."""
        key = (worker, content_class)
        table = self._cache.get(key)
        if table is None:
            table = self._cache[key] = self._table(key)
        return table.get(proposer, 1.0)

    def corrections(self, worker: str, content_class: str) -> dict[str, float]:
        """Every proposer's factor for the class (those without evidence are 1 and absent)."""
        self.correction(worker, content_class, "none")
        return dict(self._cache[(worker, content_class)])

    def _table(self, key: tuple[str, str]) -> dict[str, float]:
        arms = {}
        for p, (sw, swr, swr2, sw2, n) in self._sums.get(key, {}).items():
            if sw <= 0.0 or swr <= 0.0 or sw2 <= 0.0:
                continue
            mean = swr / sw
            n_eff = sw * sw / sw2  # effective number of requests behind the weighted mean
            if n_eff <= 1.0 + 1e-9:  # one request has no spread to judge it by: not compared yet
                continue
            var = max(swr2 / sw - mean * mean, 0.0)
            nu = self.prior_spread_requests
            var = (n_eff * var + nu * (self.prior_spread * mean) ** 2) / (n_eff + nu)
            arms[p] = (math.log(mean), math.sqrt(var / n_eff) / mean, n)  # se of log(mean): delta method
        if len(arms) < 2:  # one proposer alone has nothing to be compared with
            return {}
        total = sum(n for _, _, n in arms.values())
        ref = sum(n * m for m, _, n in arms.values()) / total
        cap = math.log(self.max_factor)
        out = {}
        for p, (m, se, _) in arms.items():
            d = m - ref
            sure = max(abs(d) - self.z * se, 0.0)
            if sure > 0.0:
                out[p] = math.exp(math.copysign(min(sure, cap), d))
        return out

    def evidence(self, worker: str, content_class: str) -> dict[str, float]:
        """Discounted requests behind each proposer's ratio (for reports and tests)."""
        return {p: s[4] for p, s in self._sums.get((worker, content_class), {}).items()}
