"""Cost model of speculative decoding: expected tokens per step, step time, goodput, best plan.

Leviathan, Kalman & Matias 2023 ("Fast Inference from Transformers via Speculative Decoding"): with a
per-token acceptance rate alpha and gamma drafted tokens, one verification step emits

    E(alpha, gamma) = (1 - alpha^(gamma+1)) / (1 - alpha)            tokens (the +1 is the bonus token)

and, when a draft step costs c target steps and verification costs one target step whatever gamma is
(the memory-bound limit), the walltime improvement is E / (gamma*c + 1).

Real acceptance decays with position, so E also takes conditional rates alpha_1..alpha_gamma
(alpha_i = P(position i accepted | positions < i accepted)): E = 1 + a1 + a1*a2 + ... .

Away from the memory-bound limit, verification of batch*(gamma+1) tokens costs more than a plain step of
batch tokens; `StepTimeModel` is a roofline: overhead + max(memory time, compute time). Goodput is the
expected number of tokens one request gets per second:

    goodput = E / (draft_time(gamma, batch) + verify_time(batch * (gamma + 1) tokens))

and the speedup of a plan is its goodput over the goodput of plain decoding at the same batch. A plan is
priced as if every request of the batch ran it (the steady state of a policy that decides alike at the same
load), so the time speculation adds to the co-batched requests' steps is counted, not just this request's.
In the memory-bound limit (`Profile.memory_bound(c)`) `speedup` equals `leviathan_speedup` exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from adaptspec.control.profiles import Profile

# A scalar per-token acceptance rate, or conditional rates per draft position (alpha_1, alpha_2, ...).
AlphaLike = Union[float, Sequence[float]]  # noqa: UP007 (runtime alias, py3.10)


def _clip01(a: float) -> float:
    return 0.0 if a < 0.0 else 1.0 if a > 1.0 else float(a)


def expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens emitted by one verification step: (1 - alpha^(gamma+1)) / (1 - alpha)."""
    if gamma <= 0:
        return 1.0
    a = _clip01(alpha)
    if 1.0 - a < 1e-6:  # the closed form loses digits near 1: sum the geometric series instead
        return math.fsum(a**i for i in range(gamma + 1))
    return (1.0 - a ** (gamma + 1)) / (1.0 - a)


def position_rates(alphas: Sequence[float], gamma: int) -> tuple[float, ...]:
    """The first gamma conditional rates; positions past the known ones repeat the last known rate."""
    if gamma <= 0:
        return ()
    if not alphas:
        raise ValueError("per-position alpha needs at least one rate")
    rates = [_clip01(a) for a in alphas[:gamma]]
    rates += [rates[-1]] * (gamma - len(rates))
    return tuple(rates)


def expected_tokens_per_position(alphas: Sequence[float]) -> float:
    """E = 1 + a1 + a1*a2 + ... for conditional acceptance rates a1..a_gamma."""
    total, run = 1.0, 1.0
    for a in alphas:
        run *= _clip01(a)
        total += run
    return total


def expected_tokens_any(alpha: AlphaLike, gamma: int) -> float:
    """`expected_tokens` for a scalar alpha, `expected_tokens_per_position` for per-position rates."""
    if isinstance(alpha, (int, float)):
        return expected_tokens(float(alpha), gamma)
    return expected_tokens_per_position(position_rates(alpha, gamma))


def scalar_alpha(alpha: AlphaLike, gamma: int | None = None) -> float:
    """One number for display: the scalar itself, or the per-token rate with the same E at gamma."""
    if isinstance(alpha, (int, float)):
        return float(alpha)
    g = gamma or len(alpha)
    target = expected_tokens_per_position(position_rates(alpha, g))
    lo, hi = 0.0, 1.0  # E(a, g) increases with a: bisect
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if expected_tokens(mid, g) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al.'s walltime improvement factor (1 - a^(g+1)) / ((1 - a)(g*c + 1))."""
    return expected_tokens(alpha, gamma) / (gamma * c + 1.0)


def hybrid_fallback_tokens(survival: AlphaLike, model_cost: float, gamma: int, explore_every: int = 8,
                           call_cost: float = 0.0) -> float:
    """Tokens a hybrid's model part drafts per lookup miss, by the worker's rule (proposers/hybrid.py,
    `HybridProposer.model_k`): with S_j = alpha_1 * ... * alpha_j (conditional rates, or a scalar per-token
    rate) the chance that positions 1..j all survive, the longest j <= gamma with S_j >= `model_cost`, if
    sum_{i <= j} (S_i - model_cost) >= `call_cost` (the price of drafting at all), else none; gamma when
    model_cost is 0 (the unpriced hybrid). Where none pays, the worker drafts one token after
    `explore_every` declines in a row: 1 / (explore_every + 1) tokens per miss on average."""
    if gamma <= 0:
        return 0.0
    if model_cost <= 0.0:
        return float(gamma)
    rates = position_rates([float(survival)] if isinstance(survival, (int, float)) else survival, gamma)
    survive, worth, j = 1.0, 0.0, 0
    for a in rates:
        survive *= a
        if survive < model_cost:
            break
        worth += survive - model_cost
        j += 1
    return float(j) if j and worth >= call_cost else 1.0 / (explore_every + 1)


@dataclass(frozen=True, slots=True)
class HybridStep:
    """What one step of a hybrid costs in tokens, per request (`hybrid_step`)."""

    drafted: float  # drafted tokens verified per request per step: lookup's gamma at a hit, the model's m at a miss
    model_tokens: float  # of which the model drafted
    model_passes: float  # batched model passes per step: the model's m when some request of the batch misses
    reach: tuple[float, ...]  # reach[j - 1]: the share of steps whose draft has at least j tokens, j = 1..gamma


def hybrid_step(gamma: int, lookup_rate: float, fallback_tokens: float, batch: float = 1.0) -> HybridStep:
    """Expected tokens of one hybrid step: with lookup hit rate pi (lookup drafts gamma tokens) and the model
    drafting m = min(fallback_tokens, gamma) tokens at a miss (`hybrid_fallback_tokens`; m < 1: one token at
    a share m of the misses, its exploration), per request

        drafted = pi * gamma + (1 - pi) * m        model tokens = (1 - pi) * m

    and the batch's B requests miss independently: the model runs m batched passes when one misses,
    (1 - pi^B) * m passes per step (m < 1: 1 - (1 - (1 - pi) m)^B); at B = 1 both are (1 - pi) * m."""
    pi = _clip01(lookup_rate)
    g = max(int(gamma), 0)
    m = min(max(float(fallback_tokens), 0.0), float(g))
    b = max(float(batch), 1.0)
    passes = (1.0 - pi**b) * m if m >= 1.0 else 1.0 - (1.0 - (1.0 - pi) * m) ** b
    reach = tuple(pi + (1.0 - pi) * min(1.0, max(0.0, m - j + 1.0)) for j in range(1, g + 1))
    return HybridStep(pi * g + (1.0 - pi) * m, (1.0 - pi) * m, passes, reach)


def expected_tokens_reach(alpha: AlphaLike, gamma: int, reach: Sequence[float]) -> float:
    """E = 1 + sum_j reach_j * alpha_1 * ... * alpha_j: drafts of varying length, reach_j the share of steps
    whose draft has position j (`HybridStep.reach`); all 1 gives `expected_tokens_any`."""
    if gamma <= 0:
        return 1.0
    rates = position_rates([float(alpha)] if isinstance(alpha, (int, float)) else alpha, gamma)
    total, run = 1.0, 1.0
    for a, r in zip(rates, reach, strict=True):
        run *= a
        total += _clip01(r) * run
    return total


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    """Roofline step time: overhead + max(memory floor + KV read, compute slope * batched tokens).

    `memory_floor_s`: reading the weights once; `kv_s_per_token`: reading one cached token's K/V;
    `compute_s_per_token`: 2 * params FLOPs of one batched token at the effective FLOP/s.
    `additive=True` sums the two terms instead: on a CPU the attention over the cache is arithmetic done by
    the same cores as the matmuls, not a memory read that overlaps them (the `cpu-tiny` profile).
    """

    overhead_s: float = 0.0
    memory_floor_s: float = 0.0
    kv_s_per_token: float = 0.0
    compute_s_per_token: float = 0.0
    additive: bool = False

    def time(self, tokens: float, kv_tokens: float = 0.0) -> float:
        memory = self.memory_floor_s + self.kv_s_per_token * kv_tokens
        compute = self.compute_s_per_token * tokens
        if self.additive:
            return self.overhead_s + memory + compute
        return self.overhead_s + (memory if memory > compute else compute)

    def crossover_tokens(self, kv_tokens: float = 0.0) -> float:
        """Batched tokens at which compute time overtakes memory time (inf if never, or additive)."""
        if self.compute_s_per_token <= 0 or self.additive:
            return math.inf
        return (self.memory_floor_s + self.kv_s_per_token * kv_tokens) / self.compute_s_per_token

    def compute_bound_batch(self, context_tokens: float) -> float:
        """Smallest batch (one token per request, each with `context_tokens` of KV) that is compute-bound."""
        if self.additive:
            return math.inf
        slope = self.compute_s_per_token - self.kv_s_per_token * context_tokens
        return self.memory_floor_s / slope if slope > 0 else math.inf

    @classmethod
    def from_hardware(
        cls,
        *,
        params: float,
        bytes_per_param: float,
        kv_bytes_per_token: float,
        bandwidth_bytes_s: float,
        flops: float,
        mbu: float,
        mfu: float,
        overhead_s: float,
    ) -> StepTimeModel:
        """From model size and hardware peaks derated by memory-bandwidth / FLOP utilisation."""
        bw = bandwidth_bytes_s * mbu
        return cls(
            overhead_s=overhead_s,
            memory_floor_s=params * bytes_per_param / bw,
            kv_s_per_token=kv_bytes_per_token / bw,
            compute_s_per_token=2.0 * params / (flops * mfu),
        )


def fit_step_time(points: Sequence[tuple[float, float, float]], iterations: int = 30,
                  additive: bool = False) -> StepTimeModel:
    """Fit a roofline StepTimeModel to measured (batched tokens, kv tokens, seconds) points.

    `additive=True`: least squares of t = o + c*tokens + k*kv (no floor), for CPUs.

    Alternating least squares on the hinge t = o + max(F + k*kv, c*tokens): points go to the branch that
    predicts the larger time, each branch is refit (compute branch: intercept o and slope c; memory branch:
    intercept o + F and slope k). Without compute-bound points o and F are not separable: o = the memory
    intercept, F = 0, c = 0. Produces the four numbers of a direct-form profile (`cpu-tiny`).
    """
    import numpy as np

    pts = np.asarray(points, dtype=float)  # [n, 3]
    if pts.ndim != 2 or pts.shape[1] != 3 or len(pts) < 3:
        raise ValueError("need at least 3 (tokens, kv_tokens, seconds) points")
    n, kv, t = pts[:, 0], pts[:, 1], pts[:, 2]
    if additive:
        design = np.stack([np.ones_like(n), n, kv], axis=1)
        o, c, k = (float(x) for x in np.linalg.lstsq(design, t, rcond=None)[0])
        return StepTimeModel(overhead_s=max(o, 0.0), kv_s_per_token=max(k, 0.0), compute_s_per_token=max(c, 0.0),
                             additive=True)

    def line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        if len(x) < 2 or np.ptp(x) == 0:
            return float(y.mean()) if len(y) else 0.0, 0.0
        slope, icpt = np.polyfit(x, y, 1)
        return float(icpt), float(max(slope, 0.0))

    compute = n >= np.quantile(n, 0.7)  # start: the largest batches are compute-bound
    o = c = mem0 = k = 0.0
    for _ in range(iterations):
        mem0, k = line(kv[~compute], t[~compute])
        if compute.sum() >= 2 and np.ptp(n[compute]) > 0:
            o, c = line(n[compute], t[compute])
            o = min(max(o, 0.0), mem0)
        else:
            o, c = mem0, 0.0
        new = (o + c * n) > (mem0 + k * kv)
        if (new == compute).all():
            break
        compute = new
    return StepTimeModel(overhead_s=o, memory_floor_s=max(mem0 - o, 0.0), kv_s_per_token=k,
                         compute_s_per_token=c)


@dataclass(frozen=True, slots=True)
class DraftCost:
    """What drafting gamma tokens costs, for one proposer, in one verification step.

    kind "draft": a draft model, gamma sequential steps of `model` at the same batch (plus `call_s` once per
      step it drafts in: a fitted per-call cost, control/calibration.py);
    kind "eagle", `fraction` form: a head on the target's hidden states, each of gamma steps costs `fraction`
      of a target step; measured form (`fraction` 0): per step, whatever the number of head passes,
      `overhead_s + per_token_s * drafted tokens + kv_s_per_token * KV tokens` (the additive per-step draft
      cost that measurement studies of vLLM publish);
    kind "ngram": one lookup per verification step, `step_s + request_s * batch`, plus `verify_fraction` of
      the verify step (its cost as a share of the step it feeds, as measured on real engines);
    kind "hybrid": n-gram lookup (`lookup`, an "ngram" cost) every step, and the model proposer (`fallback`,
      a "draft" or "eagle" cost) for the requests whose lookup found nothing. With `lookup_rate` pi (the share
      of steps whose lookup matches: the propose rate of the n-gram part) each of the batch's B requests misses
      with probability 1 - pi, independently; the model runs (one batched call) when at least one misses, and
      then drafts for m requests on average:

          t = lookup(gamma, B) + (1 - pi^B) * fallback(gamma, m, kv * m / B),    m = (1 - pi) B / (1 - pi^B)

      (at B = 1: lookup + (1 - pi) * fallback(gamma, 1); exact in expectation for fallbacks linear in the
      batch, as both model forms are here). `parts` names the two options in the profile, so a profile whose
      parts are re-priced (online calibration) re-prices the hybrid (`profiles.compose_hybrids`).
      `model_cost`, `model_call_cost`: the worker's prices of a model-drafted token and of drafting at all
      (`adaptspec worker --hybrid-model-cost / --hybrid-call-cost`); the model then drafts not gamma but
      `hybrid_fallback_tokens` per miss (`fallback_tokens` here), as many as its survival pays for, and
      `evaluate` verifies and credits those (`hybrid_step`); model_cost 0: gamma at every miss.
    """

    kind: str
    model: StepTimeModel | None = None
    fraction: float = 0.0
    step_s: float = 0.0
    request_s: float = 0.0
    overhead_s: float = 0.0
    per_token_s: float = 0.0
    kv_s_per_token: float = 0.0
    verify_fraction: float = 0.0
    lookup: DraftCost | None = None
    fallback: DraftCost | None = None
    parts: tuple[str, str] = ()
    model_cost: float = 0.0
    model_call_cost: float = 0.0
    call_s: float = 0.0  # kind "draft": seconds per step in which the model drafts at all
    # kind "hybrid": the per-step rule of trace replay (bench/stepwise.py HybridRule), priced by `stepwise_hybrid`
    # (lookup steps and head steps apart), not the worker's lookup-first rule
    stepwise: bool = False
    # kind "draft" fitted online (control/calibration_costs.py): the largest (passes, drafted tokens) per call the fit
    # has seen, and the profile's price at the box's speed (`unseen`): a call beyond them costs the cheaper of the
    # two, as the fit's line extrapolated there is a guess (its slopes come from calls far smaller)
    seen: tuple[float, float] = ()
    unseen: DraftCost | None = None

    @property
    def per_step(self) -> bool:
        """An EAGLE cost in the measured per-step form (not `fraction` of a target step per pass)."""
        return self.kind == "eagle" and self.fraction == 0.0

    def time(self, gamma: int, batch: float, kv_tokens: float, target: StepTimeModel,
             verify_s: float | None = None, lookup_rate: float = 0.0, fallback_tokens: float | None = None) -> float:
        """Seconds to draft gamma tokens for each of `batch` requests holding `kv_tokens` of context.

        `verify_s`: the verify step this drafting feeds (for `verify_fraction`); default the target's time
        over batch * (gamma + 1) tokens. `lookup_rate`: a hybrid's n-gram hit rate (default 0: the model
        drafts every step, the cautious price); `fallback_tokens`: the tokens its model drafts per miss
        (`hybrid_fallback_tokens`; default gamma)."""
        if gamma <= 0:
            return 0.0
        if self.kind == "hybrid":
            assert self.lookup is not None and self.fallback is not None
            t = self.lookup.time(gamma, batch, kv_tokens, target, verify_s)
            hit = _clip01(lookup_rate)
            m = float(gamma) if fallback_tokens is None else min(max(float(fallback_tokens), 0.0), float(gamma))
            if hit < 1.0 and m > 0.0:
                b = max(float(batch), 1e-9)
                # a request's model drafts at a share q of the steps (m < 1: one token at a share m of its
                # misses); the model runs when some request of the batch does, for r of them on average
                q, tokens = ((1.0 - hit), m) if m >= 1.0 else ((1.0 - hit) * m, 1.0)
                runs = 1.0 - (1.0 - q) ** b
                r = q * b / runs
                t += runs * self.fallback.time(tokens, r, kv_tokens * r / b, target)
            return t
        if self.kind == "draft":
            assert self.model is not None
            t = self.call_s + gamma * self.model.time(batch, kv_tokens)
            if self.unseen is not None and self.seen and (gamma > self.seen[0] or gamma * batch > self.seen[1]):
                # never below the fit's price of the largest seen call it holds (a longer call costs no less)
                g = max(1, min(gamma, int(self.seen[0])))
                b = min(float(batch), max(self.seen[1] / g, 1.0))
                edge = self.call_s + g * self.model.time(b, kv_tokens * b / max(float(batch), 1e-9))
                t = min(t, max(self.unseen.time(gamma, batch, kv_tokens, target, verify_s), edge))
            return t
        if self.kind == "eagle":
            if self.per_step:
                return self.overhead_s + self.per_token_s * gamma * batch + self.kv_s_per_token * kv_tokens
            return gamma * self.fraction * target.time(batch, kv_tokens)
        t = self.step_s + self.request_s * batch
        if self.verify_fraction:
            t += self.verify_fraction * (target.time(batch * (gamma + 1), kv_tokens) if verify_s is None else verify_s)
        return t


@dataclass(frozen=True, slots=True)
class Plan:
    """One (proposer, gamma) operating point at a batch size, with its predicted goodput."""

    proposer: str  # "none" when gamma == 0
    gamma: int
    alpha: float  # per-token acceptance used (scalar summary when per-position rates were given)
    expected_tokens: float  # emitted tokens per request per verification step
    draft_time_s: float
    verify_time_s: float
    baseline_time_s: float  # one plain decode step at the same batch
    goodput: float  # tokens per second per request
    speedup: float  # goodput / plain-decode goodput at the same batch
    batch: float

    def to_dict(self) -> dict:
        return asdict(self)


def step_time_with_prefill(model: StepTimeModel, tokens: float, kv_tokens: float, prefill_tokens: float,
                           chunk: float = 0.0) -> float:
    """Mean step time when `prefill_tokens` of prompt prefill per step (on average) share the steps.

    Prefill arrives in chunks of `chunk` tokens (a request's prompt, or the engine's chunk size): a share
    q = min(1, prefill_tokens / chunk) of the steps carries one, the others keep their spare compute.
    `chunk <= 0` spreads the prefill evenly over every step."""
    if prefill_tokens <= 0.0:
        return model.time(tokens, kv_tokens)
    q = 1.0 if chunk <= 0.0 else min(1.0, prefill_tokens / chunk)
    with_prefill = model.time(tokens + prefill_tokens / q, kv_tokens)
    if q >= 1.0:
        return with_prefill
    return q * with_prefill + (1.0 - q) * model.time(tokens, kv_tokens)


def evaluate(profile: Profile, proposer: str, alpha: AlphaLike, gamma: int, batch: float,
             summarise: bool = True, propose_rate: float = 1.0, prefill_ratio: float = 0.0,
             prefill_chunk: float = 0.0, fallback_alpha: AlphaLike | None = None) -> Plan:
    """Predicted goodput of drafting gamma tokens with `proposer` for a request in a batch of `batch`.

    `propose_rate` (pi): the share of steps that find a draft at all (n-gram lookup needs the context to
    repeat). A step without one verifies and emits a single token, so E = 1 + pi * (E(alpha, gamma) - 1) and
    a step verifies batch * (1 + pi * gamma) tokens (on a padded verify, `Profile.padded_verify`, every row is as
    long as the longest draft: batch * (1 + (1 - (1 - pi)^batch) * gamma)); the proposer's own cost is paid every
    step. For a
    hybrid (kind "hybrid") pi is the share its lookup serves and the model covers the misses: with the
    profile's `model_cost` 0 it drafts gamma every step (E and the verified tokens of pi = 1, pi prices its
    drafting); with the worker's price its model drafts m = `hybrid_fallback_tokens` per miss, from the
    model's survival `fallback_alpha` (default `alpha`, the hybrid's own per-position rates: what the proxy
    learns from the worker's tried / accepted per position), and the step verifies, credits (E with
    `HybridStep.reach`) and pays for (`DraftCost.time`) m model tokens per miss (`hybrid_step`).
    `prefill_ratio` (rho): prompt tokens prefilled per generated token on the worker (its recent traffic).
    Prompts are prefilled in the same steps as decodes (continuous batching, chunked prefill): amortised,
    a step that emits E tokens per request also prefills batch * rho * E tokens, in chunks of
    `prefill_chunk` tokens (`step_time_with_prefill`). Prefill takes the steps' spare compute (speculation
    stops being free sooner) and, once steps are compute-bound, dilutes the relative cost of drafted tokens.
    `summarise=False` skips the scalar summary of per-position alphas (Plan.alpha = 0), for inner loops.
    """
    batch = max(float(batch), 1.0)
    kv = batch * profile.context_tokens
    rho = max(float(prefill_ratio), 0.0)
    chunk = max(float(prefill_chunk), 0.0)
    base = step_time_with_prefill(profile.target, batch, kv, batch * rho, chunk)
    if gamma <= 0 or proposer == "none":
        return Plan("none", 0, 0.0, 1.0, 0.0, base, base, 1.0 / base, 1.0, batch)
    cost = profile.draft(proposer)
    if cost.kind == "hybrid" and cost.stepwise:
        return stepwise_hybrid(profile, proposer, alpha, fallback_alpha, gamma, batch, propose_rate, rho, chunk,
                               summarise)
    pi = _clip01(propose_rate)
    e = expected_tokens_any(alpha, gamma)
    if cost.kind == "hybrid":
        # the model drafts as far as its survival pays (the worker's rule at the profile's model_cost): per
        # miss m tokens, so a step verifies pi * gamma + (1 - pi) * m drafted tokens, not gamma
        m = hybrid_fallback_tokens(alpha if fallback_alpha is None else fallback_alpha, cost.model_cost, gamma,
                                   call_cost=cost.model_call_cost)
        hs = hybrid_step(gamma, pi, m, batch)
        draft = cost.time(gamma, batch, kv, profile.target, lookup_rate=pi, fallback_tokens=m)
        drafting = hs.drafted / gamma
        e = expected_tokens_reach(alpha, gamma, hs.reach)
    else:
        draft, drafting = cost.time(gamma, batch, kv, profile.target), pi
        if pi < 1.0:
            e = 1.0 + pi * (e - 1.0)
            if profile.padded_verify:
                # every row is as long as the longest draft: the step verifies gamma positions a row whenever
                # some row of the batch found a draft
                drafting = 1.0 - (1.0 - pi) ** batch
    verify = step_time_with_prefill(profile.target, batch * (1.0 + drafting * gamma), kv, batch * rho * e, chunk)
    goodput = e / (draft + verify)
    a = scalar_alpha(alpha, gamma) if summarise or isinstance(alpha, (int, float)) else 0.0
    return Plan(proposer, gamma, a, e, draft, verify, base, goodput, goodput * base, batch)


def stepwise_hybrid(profile: Profile, proposer: str, lookup_alpha: AlphaLike, head_alpha: AlphaLike | None,
                    gamma: int, batch: float, lookup_density: float, prefill_ratio: float = 0.0,
                    prefill_chunk: float = 0.0, summarise: bool = True) -> Plan:
    """A per-step hybrid (`DraftCost.stepwise`: bench/stepwise.py's rule) at head gamma `gamma`: lookup steps
    and head steps priced apart.

    Evidence (what the simulator counts into the hybrid's key, from the hybrid's own requests and from the rule
    walked along every other request's n-gram runs): `lookup_density` q = lookup steps / (lookup steps + output
    positions the head covered) (the key's propose rate), `lookup_alpha` = the conditional rates of the lookup
    steps per position (a draft accepted to its length counts as stopped there, so E_L over them is the lookup
    steps' mean emitted tokens; their drafts are priced at the number of positions known, the rule's cap: the
    cautious side), and `head_alpha` the head's own (its key's) rates (None: `lookup_alpha`). Per head step the head emits
    E_H = E(head_alpha, gamma), so the share of steps that look up is

        pi = q / (q + (1 - q) / E_H)

    and a step emits E = pi * E_L + (1 - pi) * E_H (E_L = 1 + a1 + a1 a2 + ... over the lookup rates),
    verifies 1 + pi * L + (1 - pi) * gamma tokens per request (L: the lookup drafts' length), pays the lookup
    every step and the head's gamma passes when some request of the batch drafts with the head
    (`DraftCost.time` at lookup rate pi). With the worker's price of a model token (`model_cost` > 0: the
    reference worker's hybrid) a head step drafts m = `hybrid_fallback_tokens` <= gamma tokens, as many as the
    head's survival pays for, so E_H, its verified tokens and its passes are m's (`hybrid_step`'s reach)."""
    batch = max(float(batch), 1.0)
    kv = batch * profile.context_tokens
    rho, chunk = max(float(prefill_ratio), 0.0), max(float(prefill_chunk), 0.0)
    base = step_time_with_prefill(profile.target, batch, kv, batch * rho, chunk)
    if gamma <= 0:
        return Plan("none", 0, 0.0, 1.0, 0.0, base, base, 1.0 / base, 1.0, batch)
    cost = profile.draft(proposer)
    head = lookup_alpha if head_alpha is None else head_alpha
    if cost.model_cost > 0.0:
        # the worker's price of a model token (`--hybrid-model-cost`): at a head step the model drafts the
        # m <= gamma tokens its survival pays for (`hybrid_fallback_tokens`), not gamma
        m = hybrid_fallback_tokens(head, cost.model_cost, gamma, call_cost=cost.model_call_cost)
        e_head, head_tokens = expected_tokens_reach(head, gamma, hybrid_step(gamma, 0.0, m).reach), m
    else:
        e_head, head_tokens, m = expected_tokens_any(head, gamma), gamma, gamma
    if isinstance(lookup_alpha, (int, float)):
        length, e_lookup = gamma, expected_tokens(float(lookup_alpha), gamma)
    else:
        length, e_lookup = len(lookup_alpha), expected_tokens_per_position(lookup_alpha)
    q = _clip01(lookup_density)
    pi = q / (q + (1.0 - q) / e_head) if q > 0.0 else 0.0
    e = pi * e_lookup + (1.0 - pi) * e_head
    rows = pi * length + (1.0 - pi) * head_tokens  # drafted positions a row verifies
    if profile.padded_verify:
        # every row as long as the batch's longest draft: the longer kind's whenever the batch holds both
        only_lookup, only_head = pi ** batch, (1.0 - pi) ** batch
        rows = max(length, head_tokens) * (1.0 - only_lookup - only_head) + length * only_lookup + \
            head_tokens * only_head
    verify = step_time_with_prefill(profile.target, batch * (1.0 + rows), kv, batch * rho * e, chunk)
    draft = cost.time(gamma, batch, kv, profile.target, verify_s=verify, lookup_rate=pi, fallback_tokens=m)
    goodput = e / (draft + verify)
    a = scalar_alpha(head, gamma) if summarise or isinstance(head, (int, float)) else 0.0
    return Plan(proposer, gamma, a, e, draft, verify, base, goodput, goodput * base, batch)


def best_gamma(profile: Profile, proposer: str, alpha: AlphaLike, batch: float, max_gamma: int,
               propose_rate: float = 1.0, prefill_ratio: float = 0.0, prefill_chunk: float = 0.0,
               fallback_alpha: AlphaLike | None = None) -> Plan:
    """The gamma in 1..max_gamma with the highest goodput for one proposer (may still lose to off)."""
    kw = {"propose_rate": propose_rate, "prefill_ratio": prefill_ratio, "prefill_chunk": prefill_chunk,
          "fallback_alpha": fallback_alpha}
    best = evaluate(profile, proposer, alpha, 1, batch, summarise=False, **kw)
    for g in range(2, max_gamma + 1):
        p = evaluate(profile, proposer, alpha, g, batch, summarise=False, **kw)
        if p.goodput > best.goodput:
            best = p
    if not isinstance(alpha, (int, float)):
        best = replace(best, alpha=scalar_alpha(alpha, best.gamma))
    return best


def best_plan(
    alpha_by_proposer: Mapping[str, AlphaLike],
    profile: Profile,
    batch: float,
    max_gamma: int = 8,
    margin: float = 1.0,
    propose_rates: Mapping[str, float] | None = None,
    prefill_ratio: float = 0.0,
    prefill_chunk: float = 0.0,
) -> Plan:
    """Maximise goodput over proposers and gamma (0 = off). A plan must beat off by `margin` (x speedup).
    `propose_rates` per proposer (default 1.0) and the prefill terms are `evaluate`'s."""
    traffic = {"prefill_ratio": prefill_ratio, "prefill_chunk": prefill_chunk}
    best = evaluate(profile, "none", 0.0, 0, batch, **traffic)
    if max_gamma <= 0:
        return best
    for proposer, alpha in alpha_by_proposer.items():
        if proposer == "none":
            continue
        rate = (propose_rates or {}).get(proposer, 1.0)
        p = best_gamma(profile, proposer, alpha, batch, max_gamma, propose_rate=rate, **traffic)
        if p.speedup >= margin and p.goodput > best.goodput:
            best = p
    return best
