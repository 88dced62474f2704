"""goodput: for every healthy worker and every proposer it offers: alpha estimate -> best gamma by the cost model at
the worker's live load -> the highest expected goodput (tokens/s of this request); off unless a plan beats off by
`margin`; fixed-speculation workers count at their fixed config. `CostModelPolicy` is what it shares with bandit
(policies/bandit.py); its batch-wide gamma planning is in policies/batchplan.py.

With `schedule: true`, goodput also sends each request a gamma schedule (control/schedule.py): the best gamma
by the cost model at every running-batch level for the request's own alpha estimate, cached per key, so a
long generation admitted at one load drafts right at the loads it meets later; a request that is off at
admission carries the schedule of its best proposer whenever some level speculates.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from adaptspec.control import costmodel
from adaptspec.control.calibration_probe import ContrastProbe, GammaProbe
from adaptspec.control.config import GoodputPolicy
from adaptspec.control.hybrid_rule import DEFAULT_RULE, RuleBook
from adaptspec.control.plancache import PlanCache, alpha_bucket, prefill_bucket, rate_bucket
from adaptspec.control.policies.batchplan import BatchPlanning
from adaptspec.control.policies.common import estimate, fixed_config, head_of, healthy, posterior_draw
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.profiles import Profile, implied_hybrid, load_profile
from adaptspec.control.realized import RealizedRates
from adaptspec.control.schedule import ANY_BATCH, Schedule, compress, levels, max_cap
from adaptspec.control.types import AlphaEstimate, AlphaSource, Decision, WorkerState
from adaptspec.errors import ConfigError

log = logging.getLogger(__name__)


HOPEFUL_REPORTS = 1.5  # more than one request of evidence: the key is planned on its data alone (see `hopeful`)


class CostModelPolicy(BatchPlanning, PolicyBase):
    """Shared machinery of goodput and bandit: score every (worker, proposer) option by the cost model."""

    name = "goodput"
    uses_alphas = True

    explore = 0.0  # probe probability (goodput); the bandit explores through its posterior draws instead
    explore_below = 0.0
    gamma_se = 0.0  # the batch gamma's one-standard-error rule (goodput's `gamma_se`; batchplan `_shared_gamma`)
    schedule = False  # send per-request gamma schedules (goodput's `schedule`)

    def __init__(self, margin: float, max_gamma: int, default_profile: str, tie_tolerance: float) -> None:
        self.margin, self.max_gamma, self.tie_tolerance = margin, max_gamma, tie_tolerance
        self._probe_rng = random.Random(0)
        self.contrast_probe = ContrastProbe()  # calibration probes while a worker's fit asks (issue 11)
        self.gamma_probe = GammaProbe()  # ... and while it cannot split a model proposer's call and pass costs
        self.default_profile = load_profile(default_profile)
        self.cache = PlanCache()
        self.rules = RuleBook()  # the per-step hybrid's rules per class (`hybrid_rule`)
        self.rates = RealizedRates()  # batch-1 corrections of the model's price per proposer, measured
        self._profiles: dict[str | None, Profile] = {None: self.default_profile}
        self._flat: dict[str, Profile] = {}  # see worker_profile
        self._calibrated: dict[tuple[str, str], Profile] = {}  # (profile, fit fingerprint) -> priced profile
        # Per worker: content classes of its recent requests (the mix its running batch is made of), a
        # version bumped as that mix is refreshed, and memoised batch-wide gammas:
        # (worker, profile (a new fit is a new name), proposer, half-octave batch bucket) -> (gamma, mix version).
        self._recent: dict[str, deque[str]] = {}
        self._seen: dict[str, int] = {}
        self._mix_version: dict[str, int] = {}
        self._common: dict[tuple, tuple[int, int]] = {}
        self._kept: dict[tuple, tuple[tuple, tuple[str, ...] | None]] = {}  # see BatchPlanning.kept_group
        self._schedules: dict[tuple, Schedule] = {}
        self._levels: dict[tuple, tuple[dict[int, int], int]] = {}  # see _level_gammas
        self._groups: dict[tuple, dict[str, tuple[str, ...]]] = {}  # see pass_groups
        self._models: dict[tuple, tuple[tuple[str, ...], ...]] = {}  # see BatchPlanning._model_groups
        self._sunk: dict[tuple, tuple[dict[tuple[str, ...], float], int]] = {}  # see sunk_passes
        self._implied: dict[tuple, tuple[Profile, Profile]] = {}  # see _stepwise
        self._plain_decisions: dict[tuple[str, float, str], Decision] = {}  # see _plain

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
        fitted from its telemetry once they are trusted (one resolved Profile per fit fingerprint).

        A padded verify (`Profile.padded_verify`: every row's query as long as the batch's longest draft) is the
        reference engine's; vLLM and SGLang verify each request's own draft tokens, flattened
        (`WorkerState.flat_verify`), so a profile that says padded prices their workers without it (priced
        padded, lookup at load paid 1 + gamma verified tokens a request where it costs 1 + pi * gamma, and the
        policy planned off on a vLLM pool where always-on lookup measured 1.12x of off)."""
        prof = self.profile(w.profile)
        if prof.padded_verify and w.flat_verify:
            flat = self._flat.get(prof.name)
            if flat is None:
                flat = self._flat[prof.name] = replace(prof, name=f"{prof.name}~flat", padded_verify=False)
            prof = flat
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
            head = head_of(w, prof)
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
        head = head_of(w, prof)
        if head is None:
            return None
        est = self.hopeful(estimate(alphas, w.name, head, content_class), alphas, w.name, head, content_class)
        return est.priced if mean else self.alpha(est)[0]

    def hybrid_rule(self, w: WorkerState, content_class: str, gamma: int, alphas: AlphaSource) -> str:
        """The rule a per-step hybrid request of the class runs with (`hybrid_rule.RULES`): the one whose walks in
        `rules` along the class's recent requests price best in the cost model at this gamma and the worker's
        batch (the head priced at its key's alpha, as the plan); the default where the worker's hybrid is not per
        step."""
        prof = self.worker_profile(w)
        if gamma <= 0 or not prof.offers("hybrid") or not prof.draft("hybrid").stepwise:
            return DEFAULT_RULE
        head = self.head_alpha(w, prof, "hybrid", content_class, alphas)

        def goodput(rates: list[float], density: float) -> float:
            return costmodel.evaluate(prof, "hybrid", rates, gamma, w.load + 1.0, propose_rate=density,
                                      prefill_ratio=w.prefill_ratio, prefill_chunk=w.prompt_tokens,
                                      fallback_alpha=head).goodput

        return self.rules.best(w.name, content_class, goodput)

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
        # at batch 1 a plan is ranked against the others at its measured correction (control/realized.py);
        # the margin over off stays the model's
        local = self.rates.corrections(w.name, content_class) if w.load < 1 and self.rates is not None else {}
        best = 0.0
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
            elif choice.gamma == 0 or plan.goodput * local.get(p, 1.0) > best:
                choice, shown, best = _named(plan, p), shown_p, plan.goodput * local.get(p, 1.0)
            if self.explore > 0 and est.n < self.explore_below and (w.load < 1 or not prof.shared_gamma(p)):
                # a request-local probe (no passes shared with a batch): plan it at a posterior draw
                drawn = posterior_draw(self._probe_rng, est)
                plan = self.cache.best(prof, p, drawn, batch, bound, rate, rho, head)
                if sunk_s:
                    plan = _paying(plan, sunk_s)  # not in a pass group: it waits for them all
                if dream is None or plan.goodput > dream[0].goodput:
                    dream = (_named(plan, p), est.n, drawn)
        return choice, shown, missed, thin, dream

    def adopt(self, previous: PolicyBase | None) -> None:
        """A config reload keeps the hybrid's rule book and the realized-rate corrections: evidence of the traffic
        and the workers, not config."""
        if previous is not None and previous.rules is not None:
            self.rules = previous.rules
        if previous is not None and previous.rates is not None and self.rates is not None:
            self.rates = previous.rates

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        ready = healthy(workers)
        if len(ready) == 1 and _plain_only(ready[0]):
            return self._plain(content_class, ready[0], alphas)
        d = self._priced(content_class, ready, alphas)
        if d.proposer == "hybrid" and d.gamma > 0 and self.rules.evidence(d.worker, content_class) > 0:
            w = next(x for x in ready if x.name == d.worker)
            rule = self.hybrid_rule(w, content_class, d.gamma, alphas)
            if rule != DEFAULT_RULE:
                d = replace(d, hybrid_rule=rule)
        return d

    def _priced(self, content_class: str, ready: list[WorkerState], alphas: AlphaSource) -> Decision:
        """`decide` over the healthy workers `ready`: every worker's options priced."""
        best = None
        for w in ready:
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
            self._note(w, content_class, alphas)
            return Decision(w.name, probe.proposer, probe.gamma, content_class, self.name,
                            f"{self.name}: probe {probe.proposer} g={probe.gamma} batch={w.load + 1:g} "
                            f"(evidence {n:.0f} tokens < {self.explore_below:g}; posterior draw alpha={drawn:.2f} "
                            f"x{probe.speedup:.2f})", probe.speedup)
        if plan.gamma == 0 and thin is not None and self.explore > 0 and self._probe_rng.random() < self.explore:
            probe, n = thin
            self._note(w, content_class, alphas)
            return Decision(w.name, probe.proposer, probe.gamma, content_class, self.name,
                            f"{self.name}: probe {probe.proposer} g={probe.gamma} batch={w.load + 1:g} "
                            f"(evidence {n:.0f} tokens < {self.explore_below:g}; expected x{probe.speedup:.2f})",
                            probe.speedup)
        self._note(w, content_class, alphas)
        b = f"{w.load + 1:g}"
        if plan.gamma == 0:
            # off in a step that runs other requests' model passes is slower than a plain step (`sunk_passes`)
            off = f" x off's x{plan.speedup:.2f}, its step runs the batch's model passes" if plan.speedup < 0.9995 else ""
            note = f" (best {missed.proposer} g={missed.gamma} x{missed.speedup:.2f} < margin {self.margin:g}{off})" \
                if missed is not None else ""
            reason = f"{self.name}: off batch={b}{note}"
        else:
            reason = f"{self.name}: {plan.proposer} g={plan.gamma} alpha={shown} batch={b} x{plan.speedup:.2f}"
            corr = self.rates.correction(w.name, content_class, plan.proposer) \
                if w.load < 1 and self.rates is not None else 1.0
            if corr != 1.0:
                reason += f" (measured x{corr:.2f})"
        proposer, sched = plan.proposer, None
        if self.schedule and w.per_request:
            proposer, sched = self.request_schedule(w, content_class, alphas, plan)
            if sched is not None:
                reason += " sched=" + ",".join(f"{mb}:{c}" for mb, c in sched)
        d = Decision(w.name, proposer, plan.gamma, content_class, self.name, reason, plan.speedup, schedule=sched,
                     priced=(proposer, plan.gamma) if self.rates is not None and plan.gamma > 0 and sched is None
                     and w.per_request and w.load < 1 else None)
        d = self.contrast_probe.apply(d, w, missed.proposer if missed is not None else None,
                                      missed.gamma if missed is not None else 0,
                                      missed.speedup if missed is not None else 0.0)
        return self.gamma_probe.apply(d, w, lambda p: self._probe_worth(w, content_class, alphas, p, d))

    def _plain(self, content_class: str, w: WorkerState, alphas: AlphaSource) -> Decision:
        """`decide`'s answer when `w` is the one healthy worker and it can only run plain (`_plain_only`): its
        off plan (speedup 1: no pass group of its batch drafts), without pricing it. The class mix is not noted:
        it feeds only the batch planning of a worker's proposers, and this worker has none."""
        key = (w.name, w.load, content_class)  # a Decision is frozen: the same one serves every such request
        d = self._plain_decisions.get(key)
        if d is None:
            if len(self._plain_decisions) >= 4096:
                self._plain_decisions.clear()
            d = Decision(w.name, "none", 0, content_class, self.name, f"{self.name}: off batch={w.load + 1:g}", 1.0)
            self._plain_decisions[key] = d
        d = self.contrast_probe.apply(d, w, None, 0, 0.0)
        return self.gamma_probe.apply(d, w, lambda p: self._probe_worth(w, content_class, alphas, p, d))

    def _probe_worth(self, w: WorkerState, content_class: str, alphas: AlphaSource, proposer: str,
                     d: Decision) -> bool:
        """Whether drafting with `proposer` could beat decision `d` at this batch (a calibration probe's value):
        its best plan, priced by the profile and by the worker's fit, whichever hopes more, at least the probe's
        `near` x `d`'s expected speedup. A price that cannot change a choice is not worth the probe's passes.
        At load, on a worker whose batch keeps one model's passes (`kept_group`), only that model is probed:
        a probe with another model runs its passes in every step of the batch beside the kept one's; the others
        are priced where they run."""
        bound = min(w.max_gamma, self.max_gamma)
        base, fitted = self.profile(w.profile), self.worker_profile(w)
        if bound <= 0 or not base.offers(proposer):
            return False
        if w.load >= 1.0:
            models = self._model_groups(w, fitted)
            group = self.pass_groups(w, fitted).get(proposer)
            if len(models) > 1 and group in models and \
                    self.kept_group(w, fitted, alphas, w.load + 1.0, bound, content_class=content_class) != group:
                return False
        est = self.hopeful(self._estimate(w, base, alphas, proposer, content_class), alphas, w.name, proposer,
                           content_class)
        a, _ = self.alpha(est)
        batch, rho = w.load + 1.0, (w.prefill_ratio, w.prompt_tokens)
        best = max(self.cache.best(prof, proposer, a, batch, bound, est.propose_rate, rho).speedup
                   for prof in (base, fitted) if prof.offers(proposer))
        return best >= self.gamma_probe.near * d.expected_speedup

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
        key = (w.name, prof.name, proposer, alpha_bucket(a), rate_bucket(rate), prefill_bucket(rho), bound,
               self._mix_version.get(w.name, 0) if shared else None, None if head is None else alpha_bucket(head))
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
        key = (w.name, prof.name, proposer, prefill_bucket((w.prefill_ratio, w.prompt_tokens)), bound)
        hit = self._levels.get(key)
        if hit is not None and hit[1] == version:
            return hit[0]
        table = {b: self.batch_gamma(w, prof, proposer, alphas, float(b), bound, exact=True)
                 for b in levels() if b >= 2}
        if len(self._levels) >= 4096:
            self._levels.clear()
        self._levels[key] = (table, version)
        return table


def _paying(plan: costmodel.Plan, extra_s: float) -> costmodel.Plan:
    """`plan` in a step that also runs `extra_s` of other models' passes (its speedup still over a plain
    decoding step without them)."""
    if extra_s <= 0.0:
        return plan
    goodput = plan.expected_tokens / (plan.draft_time_s + plan.verify_time_s + extra_s)
    # the constructor, not dataclasses.replace: this runs for every plan of every loaded worker per decision
    return costmodel.Plan(plan.proposer, plan.gamma, plan.alpha, plan.expected_tokens, plan.draft_time_s + extra_s,
                          plan.verify_time_s, plan.baseline_time_s, goodput, goodput * plan.baseline_time_s, plan.batch)


def _plain_only(w: WorkerState) -> bool:
    """Whether `options` can give `w` nothing but its off plan: a fixed worker running plain, or a per-request
    one with no proposer."""
    if not w.per_request:
        return fixed_config(w)[1] <= 0
    return all(p == "none" for p in w.proposers)


def _named(plan: costmodel.Plan, proposer: str) -> costmodel.Plan:
    """Plans carry the worker's proposer name ('draft'), not the profile's option ('draft-8b')."""
    if plan.proposer == proposer or plan.gamma == 0:
        return plan
    return replace(plan, proposer=proposer)


def _fmt2(x: float) -> str:
    return f"{x:.2f}"


class Goodput(CostModelPolicy):
    def __init__(self, cfg: GoodputPolicy) -> None:
        super().__init__(cfg.margin, cfg.max_gamma, cfg.default_profile, cfg.tie_tolerance)
        self.name = "goodput"
        self.risk = cfg.risk
        self.gamma_se = cfg.gamma_se
        self.explore, self.explore_below = cfg.explore, cfg.explore_below_tokens
        self._probe_rng = random.Random(cfg.seed)
        self.schedule = cfg.schedule
        if not cfg.measured:
            self.rates = None

    def alpha(self, est: AlphaEstimate) -> tuple[costmodel.AlphaLike, str]:
        if not self.risk:
            return est.priced, _fmt2(est.mean)
        shift = self.risk * est.std
        return est.priced_below(shift), f"{max(est.mean - shift, 0.0):.2f}"
