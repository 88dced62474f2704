"""Online acceptance-rate (alpha) estimators: discounted Beta posteriors per (worker, proposer, class).

Model. Each drafted position is a Bernoulli trial "accepted given the previous ones were"; alpha is its
success probability (Leviathan et al. 2023). Per key we keep discounted counts of successes `s` (accepted
tokens) and failures `f` (rejections), plus per-position counts, and report the Beta posterior
Beta(s + m0*k, f + (1-m0)*k) with prior mean m0 and strength k pseudo-trials.

Counting trials right. A verification step stops at the first rejection, so a step that drafts gamma
tokens yields `accepted` successes and one failure only if it was cut short. accepted/drafted (vLLM's
"acceptance rate") counts the never-tried positions behind a rejection as failures and underestimates
alpha: at alpha=0.8, gamma=4 it reads 0.59. We therefore estimate
  * from per-position counters (vLLM `..._accepted_tokens_per_pos_total`, pos_0 = number of drafts):
    conditional rates alpha_i = acc_i / acc_{i-1}; successes = sum(acc_i), failures = drafts - acc_{gamma-1};
  * from per-request stats (draft_tokens D, accepted_tokens A, drafting steps S, gamma = D/S): the
    method-of-moments alpha solving A/S = alpha(1 - alpha^gamma)/(1 - alpha) (the truncated-geometric mean),
    then failures = S(1 - alpha^gamma) (expected rejecting steps), so s/(s+f) is consistent for alpha;
  * with nothing but D and A: accepted/drafted, documented as biased low.
Per-position counters are used only when every counted draft had the same length (draft tokens = drafts x
positions, as in vLLM); when per-request gammas were mixed the step estimator is used with gamma = D/S.

Forgetting. Before new data is added, a key's counts are multiplied by 0.5^(draft_tokens / half_life_tokens)
and by 0.5^(elapsed / half_life_s): after a step change in acceptance the estimate moves to the new value
within a few half-lives. The default (`DEFAULT_HALF_LIFE_TOKENS`, 32768 draft tokens) is what a key needs to
average over the requests behind it: acceptance differs several-fold from request to request (a copying request
and one that does not), and a lookup key drafting 8 tokens a step for ~1.9 accepted spends ~800 draft tokens a
200-token request, so 8192 (the default before) remembered ~10 requests and priced a class's lookup up to 16% off
its traffic's mean. At load a key sees 32768 draft tokens within seconds, and `half_life_s` bounds the memory of
a quiet one in time, so a change of traffic is still followed within minutes. Sufficient statistics are plain
dicts (`KeyStats.to_dict`, `merge_stats`, `decay_stats`) so several proxies can share them (e.g. in Redis).

Sampling regime. Acceptance depends on the temperature: a greedy request (T = 0 or top_k = 1) accepts a
draft token when it is the target's argmax, a sampled one with probability min(1, p/q) (point-mass n-gram
drafts: p of the token), which is lower. Keys therefore carry a regime, "greedy" (the default everywhere,
stored under the plain class) or "sampled" (stored under "<class>@sampled"). A sampled key's prior mean is
its greedy estimate times `sampled_factor[proposer]` (DEFAULT_SAMPLED_FACTOR: 0.85 for models, 0.75 for
n-gram lookup), so what greedy traffic taught carries over, discounted, until sampled feedback arrives.
Engine-wide counters carry no temperature and count as greedy.

Counter ingestion (engine /metrics -> observations) is control/counters.py; per-worker traffic shape
control/traffic.py. control/estimators.py re-exports all three.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from adaptspec.control.trials import (  # noqa: F401  (re-exported: the trial math's old home)
    alpha_from_accept_length,
    alpha_from_steps,
    totals_observation,
    truncated_mean_accepted,
)
from adaptspec.control.types import GREEDY, REGIMES, SAMPLED, AlphaEstimate, Observation

ANY_CLASS = "*"  # key for engine-wide counters that carry no content class
DEFAULT_HALF_LIFE_TOKENS = 32768.0  # draft tokens; why this long: the module doc, "Forgetting"
_PROPOSE_PRIOR_STEPS = 8.0  # pseudo-steps (all drafting) behind every propose-rate estimate

# Prior per-token acceptance by proposer and content class. Draft-model numbers follow published
# per-task acceptance (code ~0.78, structured/JSON ~0.86, summarisation ~0.72); n-gram prompt lookup
# accepts much when the output copies the prompt (summarize, code edits) and little on open chat.
DEFAULT_PRIOR_ALPHA: dict[str, dict[str, float]] = {
    "draft": {"default": 0.70, "code": 0.78, "structured": 0.86, "summarize": 0.72, "translate": 0.60,
              "math": 0.75, "chat": 0.65},
    "eagle": {"default": 0.75, "code": 0.80, "structured": 0.85, "summarize": 0.75, "translate": 0.65,
              "math": 0.80, "chat": 0.72},
    "ngram": {"default": 0.30, "code": 0.50, "structured": 0.45, "summarize": 0.60, "translate": 0.10,
              "math": 0.30, "chat": 0.15},
    # lookup where the text repeats, the model elsewhere: per drafted token about the model's rate, a little
    # above it where lookup serves long accepted runs (measured on the tiny pair: hybrid 0.51-0.63 vs EAGLE
    # 0.45-0.55 and n-gram 0.56-0.66 at gamma 4, docs/results/eagle-hybrid.md)
    "hybrid": {"default": 0.75, "code": 0.80, "structured": 0.85, "summarize": 0.78, "translate": 0.65,
               "math": 0.80, "chat": 0.72},
}
# propose-rate priors, the cautious side for the cost: n-gram lookup drafts (pays its verify tokens) every
# step; a hybrid's lookup serves no step (its model drafts, and runs its passes, every step)
_PROPOSE_PRIOR_RATE: dict[str, float] = {"hybrid": 0.0}


def walk_rates(pos_n: Sequence[float], pos_a: Sequence[float], rates: Sequence[float],
               weight: float = 1.0, depth_weights: Sequence[float] | None = None) -> tuple[float, ...]:
    """Per-position rates whose expected tokens at every depth g price the walk at g, not the one counted.

    Conditional rates are counted at the step starts of the walk the traffic ran (its gammas). Where acceptance
    is not the same everywhere (requests that copy and requests that do not, easy and hard stretches of one
    output), a walk at another gamma starts its steps elsewhere: a longer gamma crosses the easy stretches in
    fewer steps, so more of its steps start in hard ones. Rates counted at gamma G therefore price gammas below
    G low and gammas above it high (the tiny pair's traces, EAGLE-like drafts counted at 5: gamma 3 -2 to -3%,
    gamma 8 +4 to +7%), which keeps a policy's gamma high once it got there.

    Two limits bracket the truth, both exact at the depth the steps ran. Positions independent of each other:
    the rates price every depth as they are (A(g) = 1 + r_0 + r_0 r_1 + ...). Stretches longer than a step:
    each counted step stands for the tokens it covered, at the yield a step at depth g gets there, and a
    depth's tokens per step is the token-weighted harmonic mean H(g) = sum_s e_s / sum_s e_s / e_s(g) over the
    counted steps s, e_s the tokens s emitted and e_s(g) what a step at depth g would have (min(e_s, g + 1)
    for a step that stopped at a rejection; one that stopped at its room, gamma or the end of the output, goes
    on at the rates past it). The counts give both kinds of stop: rejected at position j, pos_n[j] - pos_a[j]
    steps; stopped by the room after j + 1 accepted, pos_a[j] - pos_n[j + 1]. The estimate is the geometric
    mean sqrt(A H). On the shipped traces counted at gammas 2-8 with 10% explored, the mean error of tokens per
    step over gammas 1-8 falls from 2.65% to 0.99% (draft) and from 5.45% to 2.05% (n-gram); on independent
    positions with a high alpha, which the counted rates price exactly, it errs by up to 4% below the counted
    gamma and 6% above it (docs/results/walk-rates.md). `weight` (0..1, the counts' evidence) scales the
    correction's exponent.

    `depth_weights` (0..1 per position, None: 1 everywhere): how far the correction is trusted at each depth.
    Past the depths the traffic drafted to, the counts say nothing of the tokens a longer step would add, and the
    harmonic limit alone says "none" (its counted steps stopped where they stopped): a policy whose rates were
    counted at gamma 4 would find every longer gamma worthless and never draft past 4 again (issue 31: lookup
    held at gamma 5-6 where 8 replays best). At a depth with weight w the survival priced is w x the corrected
    one + (1 - w) x the shrunk `rates`' own (the table weighs a depth by its counts against the prior's strength),
    so an unvisited depth is priced by what the estimate knows there, not by nothing.

    Returns rates r' (as many as `rates`) with 1 + r'_0 + r'_0 r'_1 + ... = A(g) (H(g) / A_c(g))^(weight / 2),
    A the shrunk `rates`' price and A_c the counts' own; `rates` unchanged where the counts are empty."""
    size = len(rates)
    if size == 0 or weight <= 0.0 or not pos_n or pos_n[0] <= 0.0:
        return tuple(rates)
    n = [float(x) for x in pos_n[:size]] + [0.0] * max(0, size - len(pos_n))
    a = [min(float(x), t) for x, t in zip(pos_a[:size], n, strict=False)] + [0.0] * max(0, size - len(pos_a))
    raw = [a[j] / n[j] if n[j] > 0 else rates[j] for j in range(size)]
    # tail[s][m]: tokens of a step at depth m drafting from position s on, at the counts' rates (past the
    # known positions: the last rate)
    tail = [[1.0] * (size + 1) for _ in range(size + 1)]
    for s in range(size, -1, -1):
        r = raw[min(s, size - 1)]
        for m in range(1, size + 1):
            tail[s][m] = 1.0 + r * (tail[s + 1][m - 1] if s < size else tail[s][m - 1])
    rejected = [max(n[j] - a[j], 0.0) for j in range(size)]
    stopped = [max(a[j] - (n[j + 1] if j + 1 < size else 0.0), 0.0) for j in range(size)]
    tokens = sum(rejected[j] * (j + 1) + stopped[j] * (j + 2) for j in range(size))
    exponent = 0.5 * min(weight, 1.0)
    out: list[float] = []
    surv, prev_m = 1.0, 1.0  # the corrected walk's survival and price at depth g - 1
    priced = 1.0  # the survival returned (blended by `depth_weights`)
    shrunk, shrunk_surv = 1.0, 1.0  # the shrunk rates' price at depth g
    for g in range(1, size + 1):
        shrunk_surv *= rates[g - 1]
        shrunk += shrunk_surv
        steps = 0.0
        for j in range(size):
            steps += rejected[j] * (j + 1) / min(j + 1, g + 1)
            if stopped[j]:  # emitted j + 2; a deeper step goes on from position j + 1
                e_g = g + 1 if g <= j + 1 else (j + 1) + tail[j + 1][g - j - 1]
                steps += stopped[j] * (j + 2) / e_g
        if steps <= 0.0:
            return tuple(rates)
        m = shrunk * (tokens / steps / tail[0][g]) ** exponent
        step = min(max(m - prev_m, 0.0), surv)  # survival to position g - 1: non-increasing, in [0, 1]
        surv, prev_m = step, prev_m + step
        w = 1.0 if depth_weights is None or g > len(depth_weights) else min(max(float(depth_weights[g - 1]), 0.0), 1.0)
        blended = min(w * step + (1.0 - w) * shrunk_surv, priced)
        out.append(blended / priced if priced > 0 else 0.0)
        priced = blended
    return tuple(out)


_REGIME_SEP = "@"
# sampled-regime prior = greedy estimate x factor (model drafts: min(1, p/q) < argmax agreement; n-gram
# point-mass drafts: accepted with the target's probability of the token)
DEFAULT_SAMPLED_FACTOR: dict[str, float] = {"draft": 0.85, "eagle": 0.85, "ngram": 0.75, "hybrid": 0.8}


# The temperature a request that names none is sampled at: OpenAI's API default, and what the engines apply
# (vLLM's and SGLang's sampling defaults, the adaptspec worker's server.py; a vLLM model's generation config
# may name another, never 0). The regime key and the prediction features both read a request's temperature
# through `request_temperature`, so an absent one is "sampled" for both.
DEFAULT_TEMPERATURE = 1.0


def request_temperature(value: object = None) -> float:
    """The temperature a request's `temperature` field means: the number it names, else (absent, null, a
    boolean, a string, NaN) DEFAULT_TEMPERATURE."""
    if type(value) is float:  # the usual case, first (the proxy calls this for every request)
        return value if value == value else DEFAULT_TEMPERATURE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return DEFAULT_TEMPERATURE
    return float(value)


def sampling_regime(temperature: object = None, top_k: object = None) -> str:
    """"greedy" for temperature <= 0 or top_k 1, else "sampled" (`request_temperature`: absent is 1)."""
    if top_k is not None and isinstance(top_k, (int, float)) and not isinstance(top_k, bool) and top_k == 1:
        return GREEDY
    return GREEDY if request_temperature(temperature) <= 0 else SAMPLED


def regime_key(content_class: str, regime: str = GREEDY) -> str:
    """The class part of a table key: the class itself for greedy, "<class>@<regime>" otherwise."""
    if regime == GREEDY:
        return content_class
    if regime not in REGIMES:
        raise ValueError(f"unknown sampling regime {regime!r} (one of {', '.join(REGIMES)})")
    return f"{content_class}{_REGIME_SEP}{regime}"


def split_regime_key(key: str) -> tuple[str, str]:
    """(content class, regime) of a `regime_key`: the inverse of it."""
    content_class, sep, regime = key.partition(_REGIME_SEP)
    return (content_class, regime) if sep else (key, GREEDY)


def prior_alpha(proposer: str, content_class: str, table: Mapping[str, Mapping[str, float]] | None = None) -> float:
    """The prior mean alpha for a (proposer, class) key: `table` first, then the built-in one, then 0.5."""
    for t in (table or {}, DEFAULT_PRIOR_ALPHA):
        by_class = t.get(proposer)
        if by_class is not None:
            if content_class in by_class:
                return float(by_class[content_class])
            if "default" in by_class:
                return float(by_class["default"])
    return 0.5


@dataclass
class KeyStats:
    """Discounted sufficient statistics of one key."""

    s: float = 0.0  # accepted draft tokens (successes)
    f: float = 0.0  # rejections (failures)
    pos_n: list[float] = field(default_factory=list)  # trials at draft position i (0-based)
    pos_a: list[float] = field(default_factory=list)  # accepted at draft position i
    t: float | None = None  # time of the last update (seconds, the table's clock)
    steps: float = 0.0  # verification steps seen with per-request stats (propose rate = drafts / steps)
    drafts: float = 0.0  # those that drafted
    reports: float = 0.0  # observations added: one per finished request (a counter window counts as one)

    def scale(self, factor: float) -> None:
        if factor >= 1.0:
            return
        self.s *= factor
        self.f *= factor
        self.steps *= factor
        self.drafts *= factor
        self.reports *= factor
        self.pos_n = [x * factor for x in self.pos_n]
        self.pos_a = [x * factor for x in self.pos_a]

    def add(self, s: float, f: float, pos_n: Sequence[float] = (), pos_a: Sequence[float] = ()) -> None:
        self.s += s
        self.f += f
        for i, (n, a) in enumerate(zip(pos_n, pos_a, strict=True)):
            if i >= len(self.pos_n):
                self.pos_n.append(0.0)
                self.pos_a.append(0.0)
            self.pos_n[i] += n
            self.pos_a[i] += a

    def to_dict(self) -> dict:
        return {"s": self.s, "f": self.f, "pos_n": list(self.pos_n), "pos_a": list(self.pos_a), "t": self.t,
                "steps": self.steps, "drafts": self.drafts, "reports": self.reports}

    @classmethod
    def from_dict(cls, d: Mapping) -> KeyStats:
        pos_n, pos_a = [float(x) for x in d.get("pos_n", [])], [float(x) for x in d.get("pos_a", [])]
        if len(pos_n) != len(pos_a):
            raise ValueError("pos_n and pos_a differ in length")
        t = d.get("t")
        return cls(float(d.get("s", 0.0)), float(d.get("f", 0.0)), pos_n, pos_a, None if t is None else float(t),
                   float(d.get("steps", 0.0)), float(d.get("drafts", 0.0)), float(d.get("reports", 0.0)))


def merge_stats(a: Mapping, b: Mapping) -> dict:
    """Sum two KeyStats dicts (e.g. the counts of two proxy replicas); the later time wins."""
    out = KeyStats.from_dict(a)
    other = KeyStats.from_dict(b)
    n = max(len(out.pos_n), len(other.pos_n))
    pad = [0.0] * n
    out.pos_n, out.pos_a = (out.pos_n + pad)[:n], (out.pos_a + pad)[:n]
    out.add(other.s, other.f, other.pos_n, other.pos_a)
    out.steps += other.steps
    out.drafts += other.drafts
    out.reports += other.reports
    ts = [t for t in (out.t, other.t) if t is not None]
    out.t = max(ts) if ts else None
    return out.to_dict()


def decay_stats(d: Mapping, factor: float) -> dict:
    """A KeyStats dict with every count multiplied by `factor` (0..1)."""
    st = KeyStats.from_dict(d)
    st.scale(factor)
    return st.to_dict()


class AlphaTable:
    """Online alpha per (worker, proposer, content class); implements `AlphaSource`."""

    def __init__(
        self,
        prior: Mapping[str, Mapping[str, float]] | None = None,
        prior_strength: float = 20.0,
        half_life_tokens: float | None = DEFAULT_HALF_LIFE_TOKENS,
        half_life_s: float | None = None,
        clock: Callable[[], float] = time.time,
        max_positions: int = 16,
        sampled_factor: Mapping[str, float] | None = None,
    ) -> None:
        if prior_strength <= 0:
            raise ValueError("prior_strength must be > 0")
        self.sampled_factor = {**DEFAULT_SAMPLED_FACTOR, **(sampled_factor or {})}
        if any(not 0.0 <= f <= 1.0 for f in self.sampled_factor.values()):
            raise ValueError(f"sampled_factor values must be in [0, 1]: {self.sampled_factor}")
        self.prior = {p: dict(c) for p, c in (prior or {}).items()}
        self.prior_strength = float(prior_strength)
        self.half_life_tokens = half_life_tokens
        self.half_life_s = half_life_s
        self.clock = clock
        self.max_positions = max_positions
        self._stats: dict[tuple[str, str, str], KeyStats] = {}
        self._prior_cache: dict[tuple[str, str], float] = {}
        self._prior_estimates: dict[tuple[str, str], AlphaEstimate] = {}
        self._est_cache: dict[tuple[str, str, str], tuple[float | None, AlphaEstimate]] = {}
        self._views: dict[str, RegimeView] = {}  # view(): one per regime (a view holds no state of its own)

    def _invalidate(self, key: tuple[str, str, str]) -> None:
        if key[2] == ANY_CLASS:  # the pooled estimate is the prior of every class of (worker, proposer)
            for k in [k for k in self._est_cache if k[0] == key[0] and k[1] == key[1]]:
                del self._est_cache[k]
        else:
            self._est_cache.pop(key, None)
            if _REGIME_SEP not in key[2]:  # a greedy estimate is the prior of its sampled key
                self._est_cache.pop((key[0], key[1], regime_key(key[2], SAMPLED)), None)

    @classmethod
    def from_config(cls, cfg, clock: Callable[[], float] = time.time) -> AlphaTable:
        """From an `EstimatorConfig` (adaptspec.control.config)."""
        return cls(prior=cfg.prior.alpha, prior_strength=cfg.prior.strength,
                   half_life_tokens=cfg.half_life_tokens, half_life_s=cfg.half_life_s, clock=clock,
                   max_positions=cfg.max_positions)

    # -- updates -------------------------------------------------------------------------------------
    def _decay_to(self, st: KeyStats, now: float, tokens: float) -> None:
        factor = 1.0
        if self.half_life_tokens and tokens > 0:
            factor *= 0.5 ** (tokens / self.half_life_tokens)
        if self.half_life_s and st.t is not None and now > st.t:
            factor *= 0.5 ** ((now - st.t) / self.half_life_s)
        st.scale(factor)

    def observe_counts(
        self,
        worker: str,
        proposer: str,
        content_class: str,
        successes: float,
        failures: float,
        pos_trials: Sequence[float] = (),
        pos_accepted: Sequence[float] = (),
        *,
        draft_tokens: float | None = None,
        now: float | None = None,
        steps: float = 0.0,
        drafts: float = 0.0,
        regime: str = GREEDY,
    ) -> None:
        """Add Bernoulli counts to a key, after discounting its history by the tokens and time passed.

        `steps` / `drafts`: verification steps of the requests counted, and how many of them drafted (for
        the propose rate of proposers that do not always find a draft, like n-gram lookup). `regime`:
        "greedy" or "sampled" (see the module doc)."""
        if successes < 0 or failures < 0:
            raise ValueError(f"negative counts: successes={successes}, failures={failures}")
        if steps < 0 or not 0 <= drafts <= steps + 1e-9:
            raise ValueError(f"bad step counts: steps={steps}, drafts={drafts}")
        if successes + failures <= 0 and not any(pos_trials) and steps <= 0:
            return
        now = self.clock() if now is None else now
        key = (worker, proposer, regime_key(content_class, regime))
        self._invalidate(key)
        st = self._stats.get(key)
        if st is None:
            st = self._stats[key] = KeyStats()
        self._decay_to(st, now, successes + failures if draft_tokens is None else draft_tokens)
        k = self.max_positions
        st.add(successes, failures, list(pos_trials)[:k], list(pos_accepted)[:k])
        st.steps += steps
        st.drafts += drafts
        st.reports += 1.0
        st.t = now

    def observe(
        self,
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
    ) -> None:
        """Add per-request stats or counter deltas for one key (`totals_observation`)."""
        obs = totals_observation(worker, proposer, cls, draft_tokens, accepted_tokens, per_position, now,
                                 steps=steps, gamma=gamma, num_drafts=num_drafts, regime=regime)
        if obs is not None:
            self.add(obs)

    def add(self, obs: Observation) -> None:
        """Count one `Observation` (`observe_counts`)."""
        self.observe_counts(obs.worker, obs.proposer, obs.content_class, obs.successes, obs.failures,
                            obs.pos_trials, obs.pos_accepted, draft_tokens=obs.draft_tokens, now=obs.now,
                            steps=obs.steps, drafts=obs.drafts, regime=obs.regime)

    def add_stats(self, worker: str, proposer: str, key_class: str, delta: Mapping, tokens: float) -> None:
        """Add another table's counts for one key, as if they had been observed here: decay the key's history
        by the `tokens` drafted behind `delta` and the time to its last update, then add its counts. A delta
        that a table built from the same observations (same forgetting) arrives exactly as they would have,
        save for the order of decay between the two tables' observations. `key_class`: the class part of the
        key (`regime_key`). Several proxy replicas share what they learn this way (proxy/state.py)."""
        d = KeyStats.from_dict(delta)
        if tokens < 0 or d.s < 0 or d.f < 0:
            raise ValueError(f"negative counts in a delta: tokens={tokens}, s={d.s}, f={d.f}")
        key = (worker, proposer, key_class)
        self._invalidate(key)
        st = self._stats.get(key)
        if st is None:
            st = self._stats[key] = KeyStats()
        now = d.t if d.t is not None else self.clock()
        self._decay_to(st, now, tokens)
        k = self.max_positions
        st.add(d.s, d.f, d.pos_n[:k], d.pos_a[:k])
        st.steps += d.steps
        st.drafts += d.drafts
        st.reports += d.reports
        st.t = now if st.t is None else max(st.t, now)

    # -- queries -------------------------------------------------------------------------------------
    def _age_factor(self, st: KeyStats | None, now: float | None) -> float:
        """Discount for the time since a key's last update (1 without a seconds half-life)."""
        if st is None or not self.half_life_s or st.t is None:
            return 1.0
        t = self.clock() if now is None else now
        return 0.5 ** ((t - st.t) / self.half_life_s) if t > st.t else 1.0

    def _posterior(self, st: KeyStats | None, m0: float, d: float) -> tuple[float, float, float]:
        """Beta parameters (a, b) and the effective trials behind them."""
        k = self.prior_strength
        s, f = (st.s * d, st.f * d) if st is not None else (0.0, 0.0)
        return s + m0 * k, f + (1.0 - m0) * k, s + f

    def _table_prior(self, proposer: str, content_class: str) -> float:
        key = (proposer, content_class)
        m0 = self._prior_cache.get(key)
        if m0 is None:
            m0 = self._prior_cache[key] = prior_alpha(proposer, content_class, self.prior)
        return m0

    def prior_mean(self, worker: str, proposer: str, content_class: str, now: float | None = None) -> float:
        """Prior mean of a key: the worker's class-less (engine-wide) estimate if any, else the table."""
        m0 = self._table_prior(proposer, content_class)
        if content_class != ANY_CLASS:
            pooled = self._stats.get((worker, proposer, ANY_CLASS))
            if pooled is not None and pooled.s + pooled.f > 0:
                a, b, _ = self._posterior(pooled, m0, self._age_factor(pooled, now))
                m0 = a / (a + b)
        return m0

    def get(self, worker: str, proposer: str, content_class: str, now: float | None = None,
            regime: str = GREEDY) -> AlphaEstimate:
        if regime != GREEDY:
            return self._get_regime(worker, proposer, content_class, now, regime)
        st = self._stats.get((worker, proposer, content_class))
        if st is None and (worker, proposer, ANY_CLASS) not in self._stats:  # fast path: prior only
            est = self._prior_estimates.get((proposer, content_class))
            if est is None:
                m0, k = self._table_prior(proposer, content_class), self.prior_strength
                est = AlphaEstimate(m0, math.sqrt(m0 * (1.0 - m0) / (k + 1.0)), 0.0,
                                    propose_rate=_PROPOSE_PRIOR_RATE.get(proposer, 1.0))
                self._prior_estimates[(proposer, content_class)] = est
            return est
        key = (worker, proposer, content_class)
        t = None
        if self.half_life_s:
            t = self.clock() if now is None else now
        hit = self._est_cache.get(key)
        # a cached estimate stays valid until the key (or its pooled prior) gets data, or ~0.1% decay
        if hit is not None and (t is None or abs(t - hit[0]) < 1e-3 * self.half_life_s):
            return hit[1]
        est = self._estimate(st, worker, proposer, content_class, t)
        if len(self._est_cache) >= 65_536:
            self._est_cache.clear()
        self._est_cache[key] = (t, est)
        return est

    def _get_regime(self, worker: str, proposer: str, content_class: str, now: float | None,
                    regime: str) -> AlphaEstimate:
        """A non-greedy key: its own counts, with the greedy estimate x sampled_factor as the prior mean."""
        key = (worker, proposer, regime_key(content_class, regime))
        t = (self.clock() if now is None else now) if self.half_life_s else None
        hit = self._est_cache.get(key)
        if hit is not None and (t is None or abs(t - hit[0]) < 1e-3 * self.half_life_s):
            return hit[1]
        m0 = self.get(worker, proposer, content_class, now).mean * self.sampled_factor.get(proposer, 1.0)
        est = self._estimate(self._stats.get(key), worker, proposer, content_class, t, m0=m0)
        if len(self._est_cache) >= 65_536:
            self._est_cache.clear()
        self._est_cache[key] = (t, est)
        return est

    def view(self, regime: str) -> RegimeView:
        """An `AlphaSource` whose `get` reads this table's `regime` keys (for a policy's decide)."""
        view = self._views.get(regime)
        if view is None:
            regime_key("", regime)  # validates
            view = self._views[regime] = RegimeView(self, regime)
        return view

    def _estimate(self, st: KeyStats | None, worker: str, proposer: str, content_class: str,
                  now: float | None, m0: float | None = None) -> AlphaEstimate:
        if m0 is None:
            m0 = self.prior_mean(worker, proposer, content_class, now)
        d = self._age_factor(st, now)
        a, b, n = self._posterior(st, m0, d)
        tot = a + b
        mean = a / tot
        std = math.sqrt(a * b / (tot * tot * (tot + 1.0)))
        per_pos = walked = None
        if st is not None and st.pos_n:
            k = self.prior_strength
            rates = []
            for pn, pa in zip(st.pos_n, st.pos_a, strict=True):
                if pn * d <= 0:
                    break
                rates.append((pa * d + mean * k) / (pn * d + k))
            per_pos = tuple(rates) or None
            if per_pos is not None:
                # a depth's counts against the prior's strength, relative to the first position's (which sets
                # `weight`): the correction is trusted where the walk went, the shrunk rates priced where it did not
                first = st.pos_n[0] * d / (st.pos_n[0] * d + k)
                depths = [pn * d / (pn * d + k) / first for pn in st.pos_n[:len(rates)]]
                walked = walk_rates(st.pos_n, st.pos_a, rates, first, depths)
                walked = None if walked == per_pos else walked
        rate = r0 = _PROPOSE_PRIOR_RATE.get(proposer, 1.0)
        if st is not None and st.steps * d > 0:
            # shrunk toward the prior rate ("always drafts", or for a hybrid "never looked up": the cautious
            # side for the cost): a few steps cannot make a proposer look cheaper than the data says
            k = _PROPOSE_PRIOR_STEPS
            rate = (st.drafts * d + k * r0) / (st.steps * d + k)
        reports = st.reports * d if st is not None else 0.0
        return AlphaEstimate(mean=mean, std=std, n=n, per_position=per_pos, propose_rate=rate, reports=reports,
                             walk_rates=walked)

    def keys(self) -> list[tuple[str, str, str]]:
        return list(self._stats)

    def stats(self, worker: str, proposer: str, content_class: str, regime: str = GREEDY) -> dict | None:
        st = self._stats.get((worker, proposer, regime_key(content_class, regime)))
        return None if st is None else st.to_dict()

    def forget(self, worker: str) -> None:
        for key in [k for k in self._stats if k[0] == worker]:
            del self._stats[key]
        self._est_cache.clear()

    # -- sharing -------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """{worker: {proposer: {class: KeyStats dict}}}: JSON-safe sufficient statistics."""
        out: dict[str, dict[str, dict[str, dict]]] = {}
        for (w, p, c), st in self._stats.items():
            out.setdefault(w, {}).setdefault(p, {})[c] = st.to_dict()
        return out

    def load_dict(self, d: Mapping, merge: bool = False) -> None:
        """Replace (or, with merge=True, add to) this table's counts with those of a `to_dict()`."""
        self._est_cache.clear()
        if not merge:
            self._stats.clear()
        for w, by_p in d.items():
            for p, by_c in by_p.items():
                for c, sd in by_c.items():
                    key = (str(w), str(p), str(c))
                    cur = self._stats.get(key)
                    new = KeyStats.from_dict(merge_stats(cur.to_dict(), sd) if merge and cur else sd)
                    self._stats[key] = new

    @classmethod
    def from_dict(cls, d: Mapping, **kwargs) -> AlphaTable:
        table = cls(**kwargs)
        table.load_dict(d)
        return table


class RegimeView:
    """`AlphaTable.get` for one sampling regime, behind the `AlphaSource` interface the policies take."""

    __slots__ = ("table", "regime")

    def __init__(self, table: AlphaTable, regime: str) -> None:
        self.table, self.regime = table, regime

    def get(self, worker: str, proposer: str, content_class: str) -> AlphaEstimate:
        return self.table.get(worker, proposer, content_class, regime=self.regime)
