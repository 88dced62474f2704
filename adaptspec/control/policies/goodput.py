"""Policies: per request, pick a worker, a proposer and gamma (0 = off), with a one-line reason.

    static     fixed proposer + gamma (or off) on the least-loaded worker that offers it
    threshold  gamma from a load table, like vLLM's dynamic speculative decoding / TRT-LLM draft_len_schedule
    goodput    for every healthy worker and every proposer it offers: alpha estimate -> best gamma by the cost
               model at the worker's live load -> the highest expected goodput (tokens/s of this request);
               off unless a plan beats off by `margin`; fixed-speculation workers count at their fixed config
    bandit     goodput with alpha drawn from each key's Beta posterior (Thompson) or its upper bound (UCB),
               so keys without data get tried (BanditSpec-style exploration)

With `schedule: true`, goodput also sends each request a gamma schedule (control/schedule.py): the best gamma
by the cost model at every running-batch level for the request's own alpha estimate, cached per key, so a
long generation admitted at one load drafts right at the loads it meets later; a request that is off at
admission carries the schedule of its best proposer whenever some level speculates.

`build_policy(config.policy)` returns one; `.decide(content_class, workers, alphas) -> Decision`.
The batch a request joins is `worker.load + 1`. Gamma searches are cached per (profile, proposer,
batch bucket, alpha bucket), so a decision over a few workers takes tens of microseconds.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import replace

from adaptspec.control import costmodel
from adaptspec.control.calibration_probe import ContrastProbe, GammaProbe
from adaptspec.control.config import BanditPolicy, GoodputPolicy, PolicyConfig, StaticPolicy, ThresholdPolicy
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.profiles import Profile, implied_hybrid, load_profile
from adaptspec.control.schedule import ANY_BATCH, Schedule, compress, levels, max_cap
from adaptspec.control.types import AlphaEstimate, AlphaSource, Decision, WorkerState
from adaptspec.errors import ConfigError, UpstreamError

log = logging.getLogger(__name__)


HOPEFUL_REPORTS = 1.5  # more than one request of evidence: the key is planned on its data alone (see `hopeful`)


def posterior_draw(rng: random.Random, est: AlphaEstimate) -> float:
    """One draw of alpha from the Beta with the estimate's mean and std (the mean itself when std is 0)."""
    m, sd = min(max(est.mean, 1e-6), 1 - 1e-6), est.std
    if sd <= 0:
        return m
    nu = m * (1.0 - m) / (sd * sd) - 1.0  # a + b of the Beta with this mean and std
    return rng.random() if nu <= 0 else rng.betavariate(m * nu, (1.0 - m) * nu)


def _healthy(workers: Sequence[WorkerState]) -> list[WorkerState]:
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


def _head_of(w: WorkerState, prof: Profile) -> str | None:
    """The model head a per-step hybrid drafts with where its lookup does not (trace replay's choice,
    bench/simulator.py `hybrid_head`): the worker's eagle, else its draft model."""
    return next((p for p in ("eagle", "draft") if p in w.proposers and prof.offers(p)), None)


def _least_loaded(workers: Sequence[WorkerState]) -> WorkerState:
    return min(workers, key=lambda w: w.load)


def fixed_config(w: WorkerState) -> tuple[str, int]:
    """(proposer, gamma) a fixed-speculation worker runs with; ('none', 0) when speculation is off."""
    if w.gamma > 0 and w.proposers:
        return w.proposers[0], w.gamma
    return "none", 0


def _offers(w: WorkerState, proposer: str) -> bool:
    """Can the worker run this request with `proposer` (per request, or because it is fixed to it)?"""
    if w.per_request:
        return proposer == "none" or proposer in w.proposers
    return fixed_config(w)[0] == proposer


def _batch_bucket(b: float) -> float:
    """Exact integers up to 64, then ~3% steps: plans hardly change within a bucket."""
    if b <= 64:
        return float(int(b + 0.5))
    step = 2.0 ** (math.floor(math.log2(b)) - 5)
    return round(b / step) * step


def _alpha_bucket(alpha: costmodel.AlphaLike) -> costmodel.AlphaLike:
    """Scalars to 0.001, per-position rates to 0.01."""
    if isinstance(alpha, float) and 0.0 <= alpha <= 1.0:
        return int(alpha * 1000.0 + 0.5) / 1000.0
    if isinstance(alpha, (int, float)):
        return round(min(max(float(alpha), 0.0), 1.0), 3)
    return tuple([int(min(max(a, 0.0), 1.0) * 100.0 + 0.5) / 100.0 for a in alpha])


def _rate_bucket(rate: float) -> float:
    """Propose rates to 0.01 (1.0 = every step drafts)."""
    return min(max(int(rate * 100.0 + 0.5) / 100.0, 0.01), 1.0)


def _sqrt_bucket(x: float, top: float) -> float:
    """0 for ~0, else a grid that is ~6% apart around 64 (finer below, coarser above), capped at top."""
    if x <= 0.01:
        return 0.0
    return round(min(x, top) ** 0.5 * 8.0) ** 2 / 64.0


def _prefill_bucket(prefill: tuple[float, float]) -> tuple[float, float]:
    """(prompt tokens per generated token, mean prompt tokens per request), bucketed."""
    return _sqrt_bucket(prefill[0], 256.0), _sqrt_bucket(prefill[1], 1e6)


_NO_PREFILL = (0.0, 0.0)


class PlanCache:
    """Memoised gamma search: (profile, proposer, batch bucket, alpha bucket, gamma bound) -> Plan."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self.max_entries = max_entries
        self._plans: dict[tuple, costmodel.Plan] = {}
        self._goodputs: dict[tuple, tuple[float, ...]] = {}

    def best(self, profile: Profile, proposer: str, alpha: costmodel.AlphaLike, batch: float,
             max_gamma: int, rate: float = 1.0, prefill: tuple[float, float] = _NO_PREFILL,
             head: costmodel.AlphaLike | None = None) -> costmodel.Plan:
        """Best gamma in 1..max_gamma (or the off plan when max_gamma is 0); `rate`: the propose rate,
        `prefill`: the worker's (prompt tokens per generated token, prompt tokens per request); `head`: a
        per-step hybrid's head alpha (`costmodel.stepwise_hybrid`)."""
        a, b, r, f = _alpha_bucket(alpha), _batch_bucket(batch), _rate_bucket(rate), _prefill_bucket(prefill)
        h = None if head is None else _alpha_bucket(head)
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
           gamma: int, rate: float = 1.0, prefill: tuple[float, float] = _NO_PREFILL,
           head: costmodel.AlphaLike | None = None) -> costmodel.Plan:
        """The plan of a fixed (proposer, gamma)."""
        a, b, r, f = _alpha_bucket(alpha), _batch_bucket(batch), _rate_bucket(rate), _prefill_bucket(prefill)
        h = None if head is None else _alpha_bucket(head)
        key = (profile.name, proposer, b, a, None, gamma, r, f, h)
        plan = self._plans.get(key)
        if plan is None:
            plan = costmodel.evaluate(profile, proposer, a, gamma, b, propose_rate=r, prefill_ratio=f[0],
                                      prefill_chunk=f[1], fallback_alpha=h)
            self._store(key, plan)
        return plan

    def goodputs(self, profile: Profile, proposer: str, alpha: costmodel.AlphaLike, batch: float, max_gamma: int,
                 rate: float = 1.0, prefill: tuple[float, float] = _NO_PREFILL,
                 head: costmodel.AlphaLike | None = None) -> tuple[float, ...]:
        """`at(...).goodput` for gamma = 1..max_gamma under one key (a batch-wide gamma search over a class mix
        at every level of a schedule would otherwise bucket its arguments once per gamma)."""
        a, b, r, f = _alpha_bucket(alpha), _batch_bucket(batch), _rate_bucket(rate), _prefill_bucket(prefill)
        key = (profile.name, proposer, b, a, max_gamma, "goodputs", r, f, None if head is None else _alpha_bucket(head))
        got = self._goodputs.get(key)
        if got is None:
            got = tuple(self.at(profile, proposer, alpha, batch, g, rate, prefill, head).goodput
                        for g in range(1, max_gamma + 1))
            if len(self._goodputs) >= self.max_entries:
                self._goodputs.clear()
            self._goodputs[key] = got
        return got

    def off(self, profile: Profile, batch: float, prefill: tuple[float, float] = _NO_PREFILL) -> costmodel.Plan:
        f = _prefill_bucket(prefill)
        key = (profile.name, batch, f)
        plan = self._plans.get(key)
        if plan is None:
            plan = costmodel.evaluate(profile, "none", 0.0, 0, _batch_bucket(batch), prefill_ratio=f[0],
                                      prefill_chunk=f[1])
            self._store(key, plan)
        return plan

    def _store(self, key: tuple, plan: costmodel.Plan) -> None:
        if len(self._plans) >= self.max_entries:
            self._plans.clear()
        self._plans[key] = plan


class Static(PolicyBase):
    """Always `proposer` with `gamma` (or off), on the least-loaded worker that can run it."""

    uses_alphas = False  # the proxy skips per-request acceptance prediction for policies that ignore alphas

    def __init__(self, cfg: StaticPolicy) -> None:
        self.name = "static"
        self.proposer, self.gamma = cfg.proposer, cfg.gamma

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        ws = _healthy(workers)
        want = self.proposer if self.gamma > 0 else "none"
        exact = [w for w in ws if (w.per_request and _offers(w, want))
                 or (not w.per_request and fixed_config(w) == (want, self.gamma if want != "none" else 0))]
        able = exact or [w for w in ws if _offers(w, want)]
        if able:
            w = _least_loaded(able)
            if w.per_request:
                proposer, gamma = want, min(self.gamma, w.max_gamma) if want != "none" else 0
            else:
                proposer, gamma = fixed_config(w)
            what = f"{proposer} g={gamma}" if gamma else "off"
            return Decision(w.name, proposer, gamma, content_class, self.name, f"static: {what}")
        w = _least_loaded(ws)
        proposer, gamma = ("none", 0) if w.per_request else fixed_config(w)
        return Decision(w.name, proposer, gamma, content_class, self.name,
                        f"static: no worker offers {want}; {w.name} runs {proposer} g={gamma}")


class Threshold(PolicyBase):
    """gamma by the load of the least-loaded worker offering the proposer (per class override)."""

    uses_alphas = False

    def __init__(self, cfg: ThresholdPolicy) -> None:
        self.name = "threshold"
        self.proposer = cfg.proposer
        self.by_class = dict(cfg.proposer_by_class)
        self.table = [(r.max_load, r.gamma) for r in cfg.table]

    def gamma_for(self, batch: float) -> int:
        for max_load, gamma in self.table:
            if batch <= max_load:
                return gamma
        return 0

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        ws = _healthy(workers)
        proposer = self.by_class.get(content_class, self.proposer)
        per_req = [w for w in ws if w.per_request and _offers(w, proposer)]
        if per_req:
            w = _least_loaded(per_req)
            batch = w.load + 1
            gamma = min(self.gamma_for(batch), w.max_gamma) if proposer != "none" else 0
            p = proposer if gamma else "none"
            what = f"{p} g={gamma}" if gamma else "off"
            return Decision(w.name, p, gamma, content_class, self.name,
                            f"threshold: {what} batch={batch:g}")
        # fixed pools only: the least-loaded one whose fixed gamma is closest to the table's choice
        w0 = _least_loaded(ws)
        target = self.gamma_for(w0.load + 1)
        w = min(ws, key=lambda w: (abs(fixed_config(w)[1] - target)
                                   + (0 if fixed_config(w)[0] in (proposer, "none") else 100), w.load))
        p, g = fixed_config(w)
        return Decision(w.name, p, g, content_class, self.name,
                        f"threshold: table says g={target} at batch={w0.load + 1:g}; fixed {w.name} {p} g={g}")


class _CostModelPolicy(PolicyBase):
    """Shared machinery of goodput and bandit: score every (worker, proposer) option by the cost model."""

    name = "goodput"
    uses_alphas = True

    explore = 0.0  # probe probability (goodput); the bandit explores through its posterior draws instead
    explore_below = 0.0
    schedule = False  # send per-request gamma schedules (goodput's `schedule`)

    def __init__(self, margin: float, max_gamma: int, default_profile: str, tie_tolerance: float) -> None:
        self.margin, self.max_gamma, self.tie_tolerance = margin, max_gamma, tie_tolerance
        self._probe_rng = random.Random(0)
        self.contrast_probe = ContrastProbe()  # calibration probes while a worker's fit asks (issue 11)
        self.gamma_probe = GammaProbe()  # ... and while it cannot split a model proposer's call and pass costs
        self.default_profile = load_profile(default_profile)
        self.cache = PlanCache()
        self._profiles: dict[str | None, Profile] = {None: self.default_profile}
        self._calibrated: dict[tuple[str, str], Profile] = {}  # (profile, fit fingerprint) -> priced profile
        # Per worker: content classes of its recent requests (the mix its running batch is made of), a
        # version bumped as that mix is refreshed, and memoised batch-wide gammas:
        # (worker, profile (a new fit is a new name), proposer, half-octave batch bucket) -> (gamma, mix version).
        self._recent: dict[str, deque[str]] = {}
        self._seen: dict[str, int] = {}
        self._mix_version: dict[str, int] = {}
        self._common: dict[tuple, tuple[int, int]] = {}
        self._schedules: dict[tuple, Schedule] = {}
        self._levels: dict[tuple, tuple[dict[int, int], int]] = {}  # see _level_gammas
        self._groups: dict[tuple, dict[str, tuple[str, ...]]] = {}  # see pass_groups
        self._sunk: dict[tuple, tuple[dict[tuple[str, ...], float], int]] = {}  # see sunk_passes
        self._implied: dict[tuple, tuple[Profile, Profile]] = {}  # see _stepwise

    def profile(self, name: str | None) -> Profile:
        prof = self._profiles.get(name)
        if prof is None:
            try:
                prof = load_profile(name)
            except ConfigError as exc:
                log.warning("worker profile %r unusable (%s); using %s", name, exc, self.default_profile.name)
                prof = self.default_profile
            self._profiles[name] = prof
        return prof

    def worker_profile(self, w: WorkerState) -> Profile:
        """The profile a worker's decisions are priced with: its own (or the default), with the step costs
        fitted from its telemetry once they are trusted (one resolved Profile per fit fingerprint)."""
        prof = self.profile(w.profile)
        costs = w.step_costs
        if costs is not None and costs.trusted:
            key = (prof.name, costs.key)
            fitted = self._calibrated.get(key)
            if fitted is None:
                if len(self._calibrated) >= 4096:
                    self._calibrated.clear()
                fitted = self._calibrated[key] = costs.apply(prof)
            prof = fitted
        if "hybrid" in w.proposers and not prof.offers("hybrid"):
            prof = self._stepwise(w, prof)
        return prof

    def _stepwise(self, w: WorkerState, prof: Profile) -> Profile:
        """`prof` with the per-step hybrid the worker offers and the profile lacks (`profiles.implied_hybrid`,
        `stepwise`: priced as the replayed rule, its lookup steps and its head's steps apart); memoised."""
        key = (id(prof), w.proposers)
        hit = self._implied.get(key)
        if hit is None or hit[0] is not prof:
            head = _head_of(w, prof)
            implied = implied_hybrid(prof, head, stepwise=True) if head is not None else prof
            if len(self._implied) >= 4096:
                self._implied.clear()
            hit = self._implied[key] = (prof, implied)
        return hit[1]

    def head_alpha(self, w: WorkerState, prof: Profile, proposer: str, content_class: str, alphas: AlphaSource,
                   mean: bool = False) -> costmodel.AlphaLike | None:
        """A per-step hybrid's head alpha for the class (its head's own key, as planned: `alpha`, or the
        posterior mean with `mean`); None for every other proposer."""
        cost = prof.draft(proposer) if prof.offers(proposer) else None
        if cost is None or cost.kind != "hybrid" or not cost.stepwise:
            return None
        head = _head_of(w, prof)
        if head is None:
            return None
        est = self.hopeful(estimate(alphas, w.name, head, content_class), alphas, w.name, head, content_class)
        return est.priced if mean else self.alpha(est)[0]

    def _estimate(self, w: WorkerState, prof: Profile, alphas: AlphaSource, proposer: str,
                  content_class: str) -> AlphaEstimate:
        """`estimate`, told whether `proposer` is a per-step hybrid."""
        stepwise = proposer == "hybrid" and prof.offers(proposer) and prof.draft(proposer).stepwise
        return estimate(alphas, w.name, proposer, content_class, stepwise)

    def alpha(self, est: AlphaEstimate) -> tuple[costmodel.AlphaLike, str]:
        """The alpha to plan with, and how to show it."""
        raise NotImplementedError

    def hopeful(self, est: AlphaEstimate, alphas: AlphaSource, worker: str, proposer: str, content_class: str
                ) -> AlphaEstimate:
        """A key with thin evidence (fewer than `explore_below` drafted tokens and fewer than
        two requests) is planned at no less than its prior mean: acceptance varies several-fold
        from request to request, so one unlucky request must not keep a proposer off a class for good (its
        tokens are not independent trials). Counted in requests too, as short outputs drafted at gamma 1
        would otherwise keep a proposer at its prior for dozens of requests that all say otherwise."""
        if est.n >= self.explore_below or est.n <= 0 or est.reports >= HOPEFUL_REPORTS:
            return est
        source = getattr(alphas, "class_level", alphas)  # a per-request view reads through to its table
        prior_mean = getattr(getattr(source, "table", source), "prior_mean", None)  # a RegimeView's table
        if prior_mean is None:
            return est
        m0 = prior_mean(worker, proposer, content_class)
        return est if m0 <= est.mean else replace(est, mean=m0, per_position=None, walk_rates=None)

    def options(self, w: WorkerState, content_class: str, alphas: AlphaSource) -> tuple[
            costmodel.Plan, str, costmodel.Plan | None, tuple[costmodel.Plan, float] | None,
            tuple[costmodel.Plan, float, float] | None]:
        """The worker's best plan (off unless a plan beats it by the margin), its alpha as shown, the best
        plan that missed the margin (for the reason), the best missed plan whose proposer has thin evidence
        for this class with that evidence (a probe candidate), else None; and the best plan of a thin
        proposer at an alpha drawn from its posterior, with its evidence and the draw (see `decide`)."""
        prof = self.worker_profile(w)
        batch = w.load + 1.0
        rho = (w.prefill_ratio, w.prompt_tokens)
        choice, shown, missed, thin, dream = self.cache.off(prof, batch, rho), "", None, None, None
        if not w.per_request:
            p, g = fixed_config(w)
            if g > 0 and prof.offers(p):
                est = estimate(alphas, w.name, p, content_class)
                a, shown = self.alpha(est)
                choice = _named(self.cache.at(prof, p, a, batch, g, est.propose_rate, rho), p)
            return choice, shown, None, None, None
        bound = min(w.max_gamma, self.max_gamma)
        # at load the batch's kept pass groups run their passes whatever this request does: every plan
        # (off included) waits for the passes of the groups it is not in (`sunk_passes`)
        sunk = self.sunk_passes(w, prof, alphas, batch, bound, content_class) if w.load >= 1 and bound > 0 else {}
        sunk_s = sum(sunk.values())
        if sunk_s:
            choice = _paying(choice, sunk_s)
        off_goodput = choice.goodput  # the margin is over off in the same steps
        for p in w.proposers:
            if p == "none" or bound <= 0 or not prof.offers(p):
                continue
            est = self.hopeful(self._estimate(w, prof, alphas, p, content_class), alphas, w.name, p, content_class)
            a, shown_p = self.alpha(est)
            rate = est.propose_rate
            head = self.head_alpha(w, prof, p, content_class, alphas)
            if rate < 0.995:
                shown_p = f"{shown_p} pi={rate:.2f}"
            if w.load >= 1 and prof.shared_gamma(p):
                # a draft model / head runs max(gamma) passes for the whole batch, and a padded verify pads every
                # row to the longest draft: one gamma per worker
                g = self.batch_gamma(w, prof, p, alphas, batch, bound, content_class=content_class)
                if g:
                    plan = self.cache.at(prof, p, a, batch, g, rate, rho, head)
                elif prof.draft(p).kind != "ngram":  # not worth its passes for this worker's batch
                    continue
                else:  # lookup the mix does not want: a request whose own estimate says otherwise pads alone
                    plan = self.cache.best(prof, p, a, batch, bound, rate, rho, head)
            else:
                plan = self.cache.best(prof, p, a, batch, bound, rate, rho, head)
            if sunk_s:
                plan = _paying(plan, sunk_s - sunk.get(self.pass_groups(w, prof)[p], 0.0))
            if plan.goodput < self.margin * off_goodput:
                if missed is None or plan.speedup > missed.speedup:
                    missed = _named(plan, p)
                if est.n < self.explore_below and (thin is None or plan.speedup > thin[0].speedup):
                    thin = (_named(plan, p), est.n)
            elif plan.goodput > choice.goodput:
                choice, shown = _named(plan, p), shown_p
            if self.explore > 0 and est.n < self.explore_below and (w.load < 1 or not prof.shared_gamma(p)):
                # a request-local probe (no passes shared with a batch): plan it at a posterior draw
                drawn = posterior_draw(self._probe_rng, est)
                plan = self.cache.best(prof, p, drawn, batch, bound, rate, rho, head)
                if sunk_s:
                    plan = _paying(plan, sunk_s)  # not in a pass group: it waits for them all
                if dream is None or plan.goodput > dream[0].goodput:
                    dream = (_named(plan, p), est.n, drawn)
        return choice, shown, missed, thin, dream

    def batch_gamma(self, w: WorkerState, prof: Profile, proposer: str, alphas: AlphaSource, batch: float,
                    bound: int, exact: bool = False, content_class: str = "chat") -> int:
        """One gamma for every request a draft model / head drafts for on this worker (0: do not use it); on a
        padded verify (`Profile.padded_verify`) for every proposer, n-gram lookup included.

        Its passes are shared by the batch (a step runs max(gamma) of them; a hybrid's model part runs them for
        the requests whose lookup missed, priced at their hit rate), so per-class gammas make the
        requests with short drafts wait for the long ones. The passes belong to the model, not to the
        proposer name: EAGLE and a hybrid whose model part is the same head (`_pass_group`) run one set of
        passes, so they are planned together, with one gamma. Pick the gamma with the highest total goodput
        over the worker's recent class mix (posterior-mean alphas; each class at the best of the group's
        proposers), replanned when the mix is refreshed. The passes also delay the requests of the step that
        use other proposers (n-gram) or none: of the group's subsets (each at its own best gamma, the empty one
        included) keep the one with the highest total over the mix, each class valued at the plan its requests
        will pick (`options`), paying the passes when that is not one of the subset's.

        Memoised per half-octave of batch for admissions (the first batch asked prices its bucket);
        `exact=True` memoises per batch instead: a schedule's levels are 12% apart and each must be priced at
        its own batch (half-octave buckets priced at their bottom set caps one gamma too high).
        `content_class`: the mix of a worker with no recent requests yet (the request being decided).
        """
        group = self.pass_groups(w, prof).get(proposer) or (proposer,)
        return self._group_plan(w, prof, group, alphas, batch, bound, exact, content_class)[0][proposer]

    def _group_plan(self, w: WorkerState, prof: Profile, group: tuple[str, ...], alphas: AlphaSource,
                    batch: float, bound: int, exact: bool = False,
                    content_class: str = "chat") -> tuple[dict[str, int], float]:
        """`_group_gammas`, memoised as `batch_gamma` says."""
        # the batch's gamma is planned over class-level estimates, never one request's own (it is memoised
        # for every request of the mix): a per-request view (control/predict.py) names its class-level source
        alphas = getattr(alphas, "class_level", alphas)
        version, cold = self._mix_state(w, content_class)
        rho = (w.prefill_ratio, w.prompt_tokens)
        where = ("at", batch) if exact else round(2.0 * math.log2(batch))
        key = (w.name, prof.name, group, where, _prefill_bucket(rho), cold)
        hit = self._common.get(key)
        if hit is None or hit[1] != version:
            hit = (self._group_gammas(w, prof, group, alphas, batch, bound, cold or "chat"), version)
            if len(self._common) >= 50_000:  # keys carry the fit's name and the level: bound them like the plans
                self._common.clear()
            self._common[key] = hit
        return hit[0]

    def _mix_state(self, w: WorkerState, content_class: str) -> tuple[int, str | None]:
        """(the worker's class-mix version, the class its plans assume while it has no mix yet or None): what
        memoised batch-wide plans are keyed by."""
        return self._mix_version.get(w.name, 0), None if self._recent.get(w.name) else content_class

    def sunk_passes(self, w: WorkerState, prof: Profile, alphas: AlphaSource, batch: float,
                    bound: int, content_class: str = "chat") -> dict[tuple[str, ...], float]:
        """Seconds per step of every pass group this loaded worker's batch keeps (`batch_gamma` > 0): its
        steps run those passes whatever one more request does, so a request that does not draft with the
        group still waits for them. Memoised with the groups' plans (per batch bucket and mix version)."""
        rho = (w.prefill_ratio, w.prompt_tokens)
        version, cold = self._mix_state(w, content_class)
        key = (w.name, prof.name, round(2.0 * math.log2(batch)), _prefill_bucket(rho), cold, bound)
        hit = self._sunk.get(key)
        if hit is not None and hit[1] == version:
            return hit[0]
        groups = {g for p, g in self.pass_groups(w, prof).items() if prof.draft(p).kind != "ngram"
                  and prof.shared_gamma(p)}
        sunk = {}
        for group in sorted(groups):
            gammas, pass_s = self._group_plan(w, prof, group, alphas, batch, bound, content_class=content_class)
            if pass_s > 0.0 and any(gammas.values()):
                sunk[group] = pass_s
        if len(self._sunk) >= 50_000:
            self._sunk.clear()
        self._sunk[key] = (sunk, version)
        return sunk

    def pass_groups(self, w: WorkerState, prof: Profile) -> dict[str, tuple[str, ...]]:
        """`_pass_group` of every proposer the worker offers, memoised per profile and proposer list."""
        key = (prof.name, w.proposers)
        got = self._groups.get(key)
        if got is None:
            if len(self._groups) >= 4096:
                self._groups.clear()
            got = self._groups[key] = {p: _pass_group(w, prof, p) for p in w.proposers
                                       if p != "none" and prof.offers(p)}
        return got

    def _group_gammas(self, w: WorkerState, prof: Profile, group: tuple[str, ...], alphas: AlphaSource,
                      batch: float, bound: int, cold: str = "chat") -> tuple[dict[str, int], float]:
        """`batch_gamma` for every proposer of a pass group at once: the subset kept gets its common gamma,
        the others 0; and the seconds of the kept subset's passes per step for the share of the batch whose
        classes draft with it (0 when none is kept): what a request that does not draft with them waits."""
        rho = (w.prefill_ratio, w.prompt_tokens)
        recent = self._recent.get(w.name) or ()
        mix = Counter(list(recent)[-max(64, 4 * int(batch)):]) or Counter({cold: 1})
        total = sum(mix.values())
        ests = {(p, c): self.hopeful(self._estimate(w, prof, alphas, p, c), alphas, w.name, p, c)
                for p in group for c in mix}
        heads = {(p, c): self.head_alpha(w, prof, p, c, alphas, mean=True) for p in group for c in mix}
        curve = {pc: self.cache.goodputs(prof, pc[0], e.priced, batch, bound, e.propose_rate, rho, heads[pc])
                 for pc, e in ests.items()}
        # a hybrid runs its model passes only for the steps its lookup misses: price them at the mix's hit rate
        # (draft models and heads run theirs whatever the rate)
        mix_rate = {p: sum(n * ests[(p, c)].propose_rate for c, n in mix.items()) / total for p in group}
        # ... a per-step hybrid's rate counts its lookup steps per output position: its head passes run at the
        # share of steps the head drafts, given the head's acceptance (the mix's commonest class's)
        common = mix.most_common(1)[0][0]
        stand = {p: heads[(p, common)] for p in group}
        cheap = [q for q in w.proposers if q not in ("none", *group) and prof.offers(q)
                 and prof.draft(q).kind == "ngram"]
        alt: dict[str, costmodel.Plan] = {}  # each class's best plan without the group's passes
        for c in mix:
            alts = [self.cache.off(prof, batch, rho)]
            for q in cheap:
                e = estimate(alphas, w.name, q, c)
                alts.append(self.cache.best(prof, q, e.priced, batch, bound, e.propose_rate, rho))
            alt[c] = max(alts, key=lambda p: p.goodput)
        best: tuple[float, int, tuple[str, ...], float] = (sum(n * alt[c].goodput for c, n in mix.items()), 0, (),
                                                           0.0)
        for size in range(1, len(group) + 1):
            for subset in itertools.combinations(group, size):
                g = max(range(1, bound + 1),
                        key=lambda g: sum(n * max(curve[(p, c)][g - 1] for p in subset) for c, n in mix.items()))
                # the step pays the longest of the subset's passes
                pass_s = max(self.cache.at(prof, p, 0.5, batch, g, mix_rate[p], rho, stand[p]).draft_time_s
                             for p in subset)
                value, users = 0.0, 0
                for c, n in mix.items():
                    mine = max(self.cache.at(prof, p, ests[(p, c)].priced, batch, g, ests[(p, c)].propose_rate,
                                             rho, heads[(p, c)]).goodput for p in subset)
                    a = alt[c]
                    # what the class's requests will do (`options` compares the plans without the passes) and
                    # what that is worth with the passes in the step: an alternative still pays them
                    value += n * (mine if mine >= a.goodput else
                                  a.expected_tokens / (a.draft_time_s + a.verify_time_s + pass_s))
                    # the classes that draft with it even when they alone pay its passes (by the margin, as
                    # `options` asks of a plan over a plain step) make it run; the others may join them
                    users += n if mine >= self.margin * a.goodput else 0
                if value >= best[0]:  # the passes must pay for themselves over the mix (no margin: a tie keeps)
                    best = (value, g, subset, users / total)
        _, g, kept, share = best
        # what the kept passes cost a request that does not draft with them: the passes of the share of the
        # batch that does (each pass's fixed cost and its rows); none when no class drafts on its own
        rows = max(1.0, share * batch)
        sunk_s = max((self.cache.at(prof, p, 0.5, rows, g, mix_rate[p], rho, stand[p]).draft_time_s for p in kept),
                     default=0.0) if share > 0 else 0.0
        return {p: g if p in kept else 0 for p in group}, sunk_s

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        best = None
        for w in _healthy(workers):
            choice, shown, missed, thin, dream = self.options(w, content_class, alphas)
            # speculation must beat plain decoding by the margin, across workers too
            score = choice.goodput / self.margin if choice.gamma else choice.goodput
            if best is None:
                best = (score, w, choice, shown, missed, thin, dream)
                continue
            s0, load0 = best[0], best[1].load
            if score > s0 * (1.0 + self.tie_tolerance) or (
                    score >= s0 * (1.0 - self.tie_tolerance) and w.load < load0):
                best = (score, w, choice, shown, missed, thin, dream)
        assert best is not None
        _, w, plan, shown, missed, thin, dream = best
        if dream is not None and dream[0].proposer != plan.proposer and dream[0].gamma and \
                dream[0].goodput > plan.goodput * (1.0 if plan.gamma else self.margin):
            # Thompson sampling for thin keys only: a proposer with little evidence for this class is tried
            # with the probability that it beats the chosen plan under its posterior (a low prior is tried
            # rarely, a close call often), whatever the plan is; it stops once the key has evidence
            probe, n, drawn = dream
            self._note(w, content_class)
            return Decision(w.name, probe.proposer, probe.gamma, content_class, self.name,
                            f"{self.name}: probe {probe.proposer} g={probe.gamma} batch={w.load + 1:g} "
                            f"(evidence {n:.0f} tokens < {self.explore_below:g}; posterior draw alpha={drawn:.2f} "
                            f"x{probe.speedup:.2f})", probe.speedup)
        if plan.gamma == 0 and thin is not None and self.explore > 0 and self._probe_rng.random() < self.explore:
            probe, n = thin
            self._note(w, content_class)
            return Decision(w.name, probe.proposer, probe.gamma, content_class, self.name,
                            f"{self.name}: probe {probe.proposer} g={probe.gamma} batch={w.load + 1:g} "
                            f"(evidence {n:.0f} tokens < {self.explore_below:g}; expected x{probe.speedup:.2f})",
                            probe.speedup)
        self._note(w, content_class)
        b = f"{w.load + 1:g}"
        if plan.gamma == 0:
            # off in a step that runs other requests' model passes is slower than a plain step (`sunk_passes`)
            off = f" x off's x{plan.speedup:.2f}, its step runs the batch's model passes" if plan.speedup < 0.9995 else ""
            note = f" (best {missed.proposer} g={missed.gamma} x{missed.speedup:.2f} < margin {self.margin:g}{off})" \
                if missed is not None else ""
            reason = f"{self.name}: off batch={b}{note}"
        else:
            reason = f"{self.name}: {plan.proposer} g={plan.gamma} alpha={shown} batch={b} x{plan.speedup:.2f}"
        proposer, sched = plan.proposer, None
        if self.schedule and w.per_request:
            proposer, sched = self.request_schedule(w, content_class, alphas, plan)
            if sched is not None:
                reason += " sched=" + ",".join(f"{mb}:{c}" for mb, c in sched)
        d = Decision(w.name, proposer, plan.gamma, content_class, self.name, reason, plan.speedup, schedule=sched)
        d = self.contrast_probe.apply(d, w, missed.proposer if missed is not None else None,
                                      missed.gamma if missed is not None else 0,
                                      missed.speedup if missed is not None else 0.0)
        return self.gamma_probe.apply(d, w, lambda p: self._probe_worth(w, content_class, alphas, p, d))

    def _probe_worth(self, w: WorkerState, content_class: str, alphas: AlphaSource, proposer: str,
                     d: Decision) -> bool:
        """Whether drafting with `proposer` could beat decision `d` at this batch (a calibration probe's value):
        its best plan, priced by the profile and by the worker's fit, whichever hopes more, within the probe's
        `near` of `d`'s expected speedup. A price that cannot change a choice is not worth the probe's passes."""
        bound = min(w.max_gamma, self.max_gamma)
        base, fitted = self.profile(w.profile), self.worker_profile(w)
        if bound <= 0 or not base.offers(proposer):
            return False
        est = self.hopeful(self._estimate(w, base, alphas, proposer, content_class), alphas, w.name, proposer,
                           content_class)
        a, _ = self.alpha(est)
        batch, rho = w.load + 1.0, (w.prefill_ratio, w.prompt_tokens)
        best = max(self.cache.best(prof, proposer, a, batch, bound, est.propose_rate, rho).speedup
                   for prof in (base, fitted) if prof.offers(proposer))
        return best * self.gamma_probe.near >= d.expected_speedup

    def request_schedule(self, w: WorkerState, content_class: str, alphas: AlphaSource, plan: costmodel.Plan
                         ) -> tuple[str, Schedule | None]:
        """(proposer, schedule) for a request whose admission plan is `plan`: the plan's proposer, or when the
        plan is off the proposer with the best goodput at batch 1; None when no level would speculate."""
        prof = self.worker_profile(w)
        bound = min(w.max_gamma, self.max_gamma)
        offered = [p for p in w.proposers if p != "none" and prof.offers(p)]
        if bound <= 0 or not offered:
            return plan.proposer, None
        rho = (w.prefill_ratio, w.prompt_tokens)
        if plan.gamma > 0:
            proposer = plan.proposer
        else:
            def alone(p: str) -> float:
                est = self._estimate(w, prof, alphas, p, content_class)
                return self.cache.best(prof, p, self.alpha(est)[0], 1.0, bound, est.propose_rate, rho,
                                       self.head_alpha(w, prof, p, content_class, alphas)).goodput
            proposer = max(offered, key=alone)
        rows = self.schedule_for(w, prof, proposer, self._estimate(w, prof, alphas, proposer, content_class), alphas,
                                 bound, self.head_alpha(w, prof, proposer, content_class, alphas))
        # at the load it is admitted at, the request runs exactly the admission plan (a steady load then
        # sees no change); the other levels follow the cost model
        here = next((i for i, (b, _) in enumerate(rows) if b >= w.load + 1.0), len(rows) - 1)
        rows = rows[:here] + ((rows[here][0], plan.gamma),) + rows[here + 1:]
        sched = compress(rows)
        if max_cap(sched) == 0:
            return plan.proposer, None
        return proposer, sched

    def schedule_for(self, w: WorkerState, prof: Profile, proposer: str, est: AlphaEstimate, alphas: AlphaSource,
                     bound: int, head: costmodel.AlphaLike | None = None) -> Schedule:
        """The best gamma (0 unless it beats off by the margin) at every batch level of control/schedule.py
        (one row per level, uncompressed),
        cached per (worker, profile, proposer, alpha / rate / prefill buckets, bound, class-mix version).
        A draft model / head takes the batch-wide gamma of `batch_gamma` at each level (and so does a per-step
        hybrid's head, `head` its alpha)."""
        a, _ = self.alpha(est)
        rate, rho = est.propose_rate, (w.prefill_ratio, w.prompt_tokens)
        shared = prof.shared_gamma(proposer)
        key = (w.name, prof.name, proposer, _alpha_bucket(a), _rate_bucket(rate), _prefill_bucket(rho), bound,
               self._mix_version.get(w.name, 0) if shared else None, None if head is None else _alpha_bucket(head))
        hit = self._schedules.get(key)
        if hit is not None:
            return hit
        common = self._level_gammas(w, prof, proposer, alphas, bound) if shared else {}
        rows = []
        for b in levels():
            if shared and b >= 2:
                g = common[b]
                step = self.cache.at(prof, proposer, a, float(b), g, rate, rho, head) if g else None
            else:
                step = self.cache.best(prof, proposer, a, float(b), bound, rate, rho, head)
            rows.append((b, step.gamma if step is not None and step.speedup >= self.margin else 0))
        rows.append((ANY_BATCH, rows[-1][1]))
        sched = tuple(rows)
        if len(self._schedules) >= 50_000:
            self._schedules.clear()
        self._schedules[key] = sched
        return sched

    def _level_gammas(self, w: WorkerState, prof: Profile, proposer: str, alphas: AlphaSource,
                      bound: int) -> dict[int, int]:
        """`batch_gamma` at every schedule level from 2 up, each priced at its own batch; one table per worker,
        profile, proposer, prefill bucket and bound, replanned when the worker's class mix is refreshed (every
        request's schedule shares it: it does not depend on the request's own alpha)."""
        version = self._mix_version.get(w.name, 0)
        key = (w.name, prof.name, proposer, _prefill_bucket((w.prefill_ratio, w.prompt_tokens)), bound)
        hit = self._levels.get(key)
        if hit is not None and hit[1] == version:
            return hit[0]
        table = {b: self.batch_gamma(w, prof, proposer, alphas, float(b), bound, exact=True)
                 for b in levels() if b >= 2}
        if len(self._levels) >= 4096:
            self._levels.clear()
        self._levels[key] = (table, version)
        return table

    def _note(self, w: WorkerState, content_class: str) -> None:
        """Record the request in the worker's recent class mix (what its running batch is made of)."""
        self._recent.setdefault(w.name, deque(maxlen=_MIX_WINDOW)).append(content_class)
        seen = self._seen[w.name] = self._seen.get(w.name, 0) + 1
        if seen in (4, 8, 16) or seen % _REFRESH == 0:  # the mix moved: replan (often while history is short)
            self._mix_version[w.name] = self._mix_version.get(w.name, 0) + 1


_MIX_WINDOW = 256  # recent requests per worker that describe its class mix
_REFRESH = 32  # a worker's decisions between refreshes of its class mix (and its batch-wide gammas)


def _pass_group(w: WorkerState, prof: Profile, proposer: str) -> tuple[str, ...]:
    """The worker's proposers whose drafts come from the same model as `proposer`'s (its passes): a draft
    model or head and every hybrid whose model part it is; an n-gram lookup alone."""
    def model(p: str) -> str | None:
        cost = prof.draft(p)
        if cost.kind == "hybrid":
            return cost.parts[1] if cost.parts else None
        return None if cost.kind == "ngram" else prof.resolve(p)

    mine = model(proposer)
    if mine is None:
        return (proposer,)
    return tuple(q for q in w.proposers if q != "none" and prof.offers(q) and prof.shared_gamma(q)
                 and model(q) == mine) or (proposer,)


def _paying(plan: costmodel.Plan, extra_s: float) -> costmodel.Plan:
    """`plan` in a step that also runs `extra_s` of other models' passes (its speedup still over a plain
    decoding step without them)."""
    if extra_s <= 0.0:
        return plan
    goodput = plan.expected_tokens / (plan.draft_time_s + plan.verify_time_s + extra_s)
    # the constructor, not dataclasses.replace: this runs for every plan of every loaded worker per decision
    return costmodel.Plan(plan.proposer, plan.gamma, plan.alpha, plan.expected_tokens, plan.draft_time_s + extra_s,
                          plan.verify_time_s, plan.baseline_time_s, goodput, goodput * plan.baseline_time_s, plan.batch)


def _named(plan: costmodel.Plan, proposer: str) -> costmodel.Plan:
    """Plans carry the worker's proposer name ('draft'), not the profile's option ('draft-8b')."""
    if plan.proposer == proposer or plan.gamma == 0:
        return plan
    return replace(plan, proposer=proposer)


def _fmt2(x: float) -> str:
    return f"{x:.2f}"


class Goodput(_CostModelPolicy):
    def __init__(self, cfg: GoodputPolicy) -> None:
        super().__init__(cfg.margin, cfg.max_gamma, cfg.default_profile, cfg.tie_tolerance)
        self.name = "goodput"
        self.risk = cfg.risk
        self.explore, self.explore_below = cfg.explore, cfg.explore_below_tokens
        self._probe_rng = random.Random(cfg.seed)
        self.schedule = cfg.schedule

    def alpha(self, est: AlphaEstimate) -> tuple[costmodel.AlphaLike, str]:
        if not self.risk:
            return est.priced, _fmt2(est.mean)
        shift = self.risk * est.std
        rates = est.walk_rates or est.per_position
        if rates:
            return tuple(max(a - shift, 0.0) for a in rates), f"{max(est.mean - shift, 0.0):.2f}"
        a = max(est.mean - shift, 0.0)
        return a, f"{a:.2f}"


class Bandit(_CostModelPolicy):
    def __init__(self, cfg: BanditPolicy) -> None:
        super().__init__(cfg.margin, cfg.max_gamma, cfg.default_profile, cfg.tie_tolerance)
        self.name = "bandit"
        self.algorithm, self.ucb_c = cfg.algorithm, cfg.ucb_c
        self.rng = random.Random(cfg.seed)

    def alpha(self, est: AlphaEstimate) -> tuple[float, str]:
        m, sd = min(max(est.mean, 1e-6), 1 - 1e-6), est.std
        if self.algorithm == "ucb":
            a = min(m + self.ucb_c * sd, 1.0)
            return a, f"{a:.2f}(ucb, mean {m:.2f})"
        if sd <= 0:
            return m, f"{m:.2f}"
        a = posterior_draw(self.rng, est)
        return a, f"{a:.2f}~(mean {m:.2f}, n={est.n:.0f})"


def build_policy(cfg: PolicyConfig):
    """The policy object for a `config.policy` section (wrapped in the holdout / switchback experiment when
    the section has `holdout` or `switchback`)."""
    policy = _build(cfg)
    if getattr(cfg, "holdout", None) is not None or getattr(cfg, "switchback", None) is not None:
        from adaptspec.control.holdout_policy import Experimented

        return Experimented(policy, cfg.holdout, cfg.switchback)
    return policy


def _build(cfg: PolicyConfig):
    if isinstance(cfg, StaticPolicy):
        return Static(cfg)
    if isinstance(cfg, ThresholdPolicy):
        return Threshold(cfg)
    if isinstance(cfg, GoodputPolicy):
        return Goodput(cfg)
    if isinstance(cfg, BanditPolicy):
        return Bandit(cfg)
    from adaptspec.control.peers import build_peer  # the peer policies (control/peers/)

    peer = build_peer(cfg)
    if peer is not None:
        return peer
    raise ConfigError("unknown policy kind", key="policy.kind", value=getattr(cfg, "kind", cfg))
