"""Batch-wide gamma planning of the cost-model policies (goodput, bandit): a draft model's or head's passes are
shared by the batch (a step runs max(gamma) of them), so one gamma per pass group and worker, planned over the
worker's recent class mix; and the passes a loaded worker's batch keeps, which every request of its steps waits
for (`sunk_passes`). A mixin of `policies.goodput.CostModelPolicy`, which creates the state it reads.

The mix is of (class, sampling regime) pairs: a greedy and a sampled request of one class accept a draft at
different rates (n-gram lookup several-fold), and one batch holds both, so each recent request is valued with its
own regime's estimates whichever request asks for the batch's plan (the plan is memoised per worker, not per
regime: valued with the asking request's regime alone it followed the regime of whichever request came first after
each refresh, and the kept model flipped with it)."""

from __future__ import annotations

import itertools
import logging
import math
from collections import Counter, deque

from adaptspec.control import costmodel
from adaptspec.control.alpha import GREEDY, AlphaTable, RegimeView, regime_key, split_regime_key
from adaptspec.control.plancache import PlanCache, prefill_bucket
from adaptspec.control.policies.common import estimate
from adaptspec.control.profiles import Profile
from adaptspec.control.types import AlphaSource, WorkerState

log = logging.getLogger(__name__)

_MIX_WINDOW = 256  # recent requests per worker that describe its class mix
_REFRESH = 32  # a worker's decisions between refreshes of its class mix (and its batch-wide gammas)


def _sources(alphas: AlphaSource) -> tuple[AlphaSource, str]:
    """(the class-level table behind `alphas`, the regime `alphas` reads): a per-request view reads through to
    its class-level source, a regime view (control/alpha.py `RegimeView`) to its table."""
    alphas = getattr(alphas, "class_level", alphas)
    return (alphas.table, alphas.regime) if isinstance(alphas, RegimeView) else (alphas, GREEDY)


def _entry_source(table: AlphaSource, entry: str) -> tuple[AlphaSource, str]:
    """(the `AlphaSource` of a mix entry's regime, its class) for an entry `regime_key(class, regime)` of a
    worker's mix: `table`'s view of that regime (a source without regimes serves every regime)."""
    content_class, regime = split_regime_key(entry)
    source = table.view(regime) if regime != GREEDY and isinstance(table, AlphaTable) else table
    return source, content_class


def _lowered(e, se: float) -> costmodel.AlphaLike:
    """What a key prices with, `se` of its standard errors lower where it has evidence (a prior is left as it is:
    it does not shorten a draft)."""
    shift = se * e.std if e.n > 0 else 0.0
    return e.priced_below(shift) if shift > 0.0 else e.priced


def _argmax(values) -> int:
    """1-based index of the largest value (the first of equals)."""
    return max(range(len(values)), key=lambda h: (values[h], -h)) + 1


def _shared_gamma(curves, subset: tuple[str, ...], mix: Counter, bound: int) -> int:
    """The gamma a pass group's `subset` shares over the mix: each class at the best of the subset's proposers,
    the shortest of the best gammas of `curves` ((proposer, class) -> goodputs at gamma 1..bound): the posterior
    means' and, with `gamma_se`, theirs `gamma_se` standard errors lower (`_lowered`). The one-standard-error
    rule: where the means' curve is flat the longer draft's extra tokens rest on its deepest positions, the least
    observed, and a draft too long costs every row of the batch (on the reference worker at 16 and 256 clients
    gamma 3 measured 3-6% ahead of 4 where the means' curve was flat within 1%); sure estimates agree."""
    return min(_argmax([sum(n * max(k[(p, c)][h] for p in subset) for c, n in mix.items()) for h in range(bound)])
               for k in curves)


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


class BatchPlanning:
    """`batch_gamma`, `sunk_passes`, `pass_groups` and the class mix they plan over (`_note`); the class mixing it
    in provides the state below and `hopeful`, `_estimate` and `head_alpha` (policies/goodput.py)."""

    cache: PlanCache
    margin: float
    _recent: dict[str, deque[str]]
    _seen: dict[str, int]
    _mix_version: dict[str, int]
    _common: dict[tuple, tuple[int, int]]
    _kept: dict[tuple, tuple[tuple, tuple[str, ...] | None]]
    _groups: dict[tuple, dict[str, tuple[str, ...]]]
    _models: dict[tuple, tuple[tuple[str, ...], ...]]
    _sunk: dict[tuple, tuple[dict[tuple[str, ...], float], int]]

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
        A model's passes are bought only where the posterior means keep it too: a thin key's hope
        (`hopeful`) lets one request try it at batch 1, where it pays alone, but not make a whole batch pay.
        """
        group = self.pass_groups(w, prof).get(proposer) or (proposer,)
        models = self._model_groups(w, prof)
        if group in models and len(models) > 1 and \
                self.kept_group(w, prof, alphas, batch, bound, exact, content_class) != group:
            return 0  # another model's passes serve this worker's batch
        if prof.padded_verify and group not in models and models:
            # every row of a padded verify is as long as the longest draft: lookup drafts up to the kept
            # model's gamma for free, and past it would lengthen every row of the step
            kept = self.kept_group(w, prof, alphas, batch, bound, exact, content_class)
            if kept is not None:
                return max(self._group_plan(w, prof, kept, alphas, batch, bound, exact, content_class)[0].values())
        gamma = self._group_plan(w, prof, group, alphas, batch, bound, exact, content_class)[0][proposer]
        if gamma and group in models and \
                not any(self._group_plan(w, prof, group, alphas, batch, bound, exact, content_class,
                                         hope=False)[0].values()):
            return 0  # only a hope buys this model's passes: the evidence says the batch is better without them
        return gamma

    def _model_groups(self, w: WorkerState, prof: Profile) -> tuple[tuple[str, ...], ...]:
        """The worker's pass groups that run a draft model's or head's passes, in a fixed order; memoised as
        `pass_groups` (it is read several times a decision)."""
        key = (prof.name, w.proposers)
        got = self._models.get(key)
        if got is None:
            if len(self._models) >= 4096:
                self._models.clear()
            got = self._models[key] = tuple(sorted({g for p, g in self.pass_groups(w, prof).items()
                                                    if prof.draft(p).kind != "ngram" and prof.shared_gamma(p)}))
        return got

    def kept_group(self, w: WorkerState, prof: Profile, alphas: AlphaSource, batch: float, bound: int,
                   exact: bool = False, content_class: str = "chat") -> tuple[str, ...] | None:
        """The one model pass group a loaded worker's batch runs, or None. Each group is planned against the
        lookup and plain decoding alone (`_group_gammas`), so two kept groups would each be worth their passes
        and yet a step would pay both for every request: keep the one worth most over the mix.

        Chosen when the class mix is refreshed, and when the batch has moved an octave from the batch it was
        chosen at (or the kept one is not worth its passes here); not per batch bucket: a steady load's batch
        wanders across a bucket's edge (100-128 straddles two), and the running batch holds the last model's
        requests until they finish, so a change of model pays both models' passes for a while. On a new mix
        another model replaces the kept one only when worth more by the policy's margin; after an octave's move
        (a new load level, e.g. a ramp's next step) the best one is taken afresh."""
        version, _ = self._mix_state(w, content_class, alphas)
        where = ("at", batch) if exact else round(2.0 * math.log2(batch))
        mine = (w.name, exact)
        last = self._kept.get(mine)
        moved = last is None or (last[0][1] != where if exact else abs(where - last[0][1]) >= 2)
        if not moved and last[0][0] == version and (
                last[0][1] == where if last[1] is None else  # no passes run: nothing to switch from
                any(self._group_plan(w, prof, last[1], alphas, batch, bound, exact, content_class)[0].values())):
            return last[1]
        # the groups worth their passes at the posterior means, ranked by what they are worth there: a thin key
        # is planned hopefully (`hopeful`) so that one request can try it at batch 1, but a hope must neither
        # take the whole batch's passes from a model the evidence backs nor buy them for a model the evidence
        # does not (one request of a head at 0.6 where its prior says 0.75 kept the head for a batch of
        # copy-heavy lookup: every step paid its passes)
        worth, idle = {}, 0.0
        for group in self._model_groups(w, prof):
            gammas, _, value = self._group_plan(w, prof, group, alphas, batch, bound, exact, content_class)
            if not any(gammas.values()):
                idle = value  # the mix without any model's passes
                continue
            kept, _, kept_value = self._group_plan(w, prof, group, alphas, batch, bound, exact, content_class,
                                                   hope=False)
            if any(kept.values()):
                worth[group] = kept_value
        best = max(worth, key=worth.__getitem__) if worth else None
        if not moved and last[1] in worth and worth[last[1]] * self.margin >= worth[best]:
            best = last[1]
        if len(self._kept) >= 50_000:
            self._kept.clear()
        self._kept[mine] = ((version, where), best)
        if last is None or best != last[1]:
            log.debug("worker %s: the batch keeps %s at batch %g (worth over the mix: %s; profile %s)", w.name,
                      "+".join(best) if best else "no model's passes", batch,
                      ", ".join(f"{'+'.join(g)} {v:.1f}" for g, v in worth.items()) or f"none, no passes {idle:.1f}",
                      prof.name)
        return best

    def _group_plan(self, w: WorkerState, prof: Profile, group: tuple[str, ...], alphas: AlphaSource,
                    batch: float, bound: int, exact: bool = False, content_class: str = "chat",
                    hope: bool = True) -> tuple[dict[str, int], float, float]:
        """`_group_gammas`, memoised as `batch_gamma` says."""
        # the batch's gamma is planned over class-level estimates, never one request's own (it is memoised
        # for every request of the mix): a per-request view (control/predict.py) names its class-level source
        alphas = getattr(alphas, "class_level", alphas)
        version, cold = self._mix_state(w, content_class, alphas)
        rho = (w.prefill_ratio, w.prompt_tokens)
        where = ("at", batch) if exact else round(2.0 * math.log2(batch))
        key = (w.name, prof.name, group, where, prefill_bucket(rho), cold, hope)
        hit = self._common.get(key)
        if hit is None or hit[1] != version:
            hit = (self._group_gammas(w, prof, group, alphas, batch, bound, cold or "chat", hope), version)
            if len(self._common) >= 50_000:  # keys carry the fit's name and the level: bound them like the plans
                self._common.clear()
            self._common[key] = hit
        return hit[0]

    def _mix_state(self, w: WorkerState, content_class: str, alphas: AlphaSource) -> tuple[int, str | None]:
        """(the worker's class-mix version, the class and regime (`regime_key`) its plans assume while it has no
        mix yet, or None): what memoised batch-wide plans are keyed by."""
        if self._recent.get(w.name):
            return self._mix_version.get(w.name, 0), None
        return self._mix_version.get(w.name, 0), regime_key(content_class, _sources(alphas)[1])

    def sunk_passes(self, w: WorkerState, prof: Profile, alphas: AlphaSource, batch: float,
                    bound: int, content_class: str = "chat") -> dict[tuple[str, ...], float]:
        """Seconds per step of every pass group this loaded worker's batch keeps (`batch_gamma` > 0): its
        steps run those passes whatever one more request does, so a request that does not draft with the
        group still waits for them. Memoised with the groups' plans (per batch bucket and mix version)."""
        rho = (w.prefill_ratio, w.prompt_tokens)
        version, cold = self._mix_state(w, content_class, alphas)
        key = (w.name, prof.name, round(2.0 * math.log2(batch)), prefill_bucket(rho), cold, bound)
        hit = self._sunk.get(key)
        if hit is not None and hit[1] == version:
            return hit[0]
        sunk = {}
        kept = self.kept_group(w, prof, alphas, batch, bound, content_class=content_class)
        if kept is not None:
            gammas, pass_s, _ = self._group_plan(w, prof, kept, alphas, batch, bound, content_class=content_class)
            if pass_s > 0.0:
                sunk[kept] = pass_s
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
                      batch: float, bound: int, cold: str = "chat", hope: bool = True
                      ) -> tuple[dict[str, int], float, float]:
        """`batch_gamma` for every proposer of a pass group at once: the subset kept gets its common gamma,
        the others 0; and the seconds of the kept subset's passes per step for the share of the batch whose
        classes draft with it (0 when none is kept): what a request that does not draft with them waits.
        Third: the kept plan's total goodput over the mix (`kept_group` compares the groups by it). `hope`:
        thin keys planned at no less than their prior mean (`hopeful`), as a request's own plan is."""
        rho = (w.prefill_ratio, w.prompt_tokens)
        recent = self._recent.get(w.name) or ()
        mix = Counter(list(recent)[-max(64, 4 * int(batch)):]) or Counter({cold: 1})
        total = sum(mix.values())
        # each entry of the mix (a class and its sampling regime) is valued with its own regime's estimates
        table = _sources(alphas)[0]
        src = {c: _entry_source(table, c) for c in mix}
        ests = {(p, c): self._estimate(w, prof, src[c][0], p, src[c][1]) for p in group for c in mix}
        if hope:
            ests = {(p, c): self.hopeful(e, src[c][0], w.name, p, src[c][1]) for (p, c), e in ests.items()}
        heads = {(p, c): self.head_alpha(w, prof, p, src[c][1], src[c][0], mean=True) for p in group for c in mix}
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
                e = estimate(src[c][0], w.name, q, src[c][1])
                alts.append(self.cache.best(prof, q, e.priced, batch, bound, e.propose_rate, rho))
            alt[c] = max(alts, key=lambda p: p.goodput)
        def worth(subset: tuple[str, ...], g: int) -> tuple[float, float]:
            """(total goodput over the mix, share of the mix that drafts with it) of running `subset` at `g`."""
            if not subset or g <= 0:
                return sum(n * alt[c].goodput for c, n in mix.items()), 0.0
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
            return value, users / total

        curves = (curve,) if self.gamma_se <= 0 else (curve, {  # `_shared_gamma`: the one-standard-error rule
            pc: self.cache.goodputs(prof, pc[0], _lowered(e, self.gamma_se), batch, bound, e.propose_rate, rho,
                                    heads[pc]) for pc, e in ests.items()})
        best: tuple[float, int, tuple[str, ...], float] = (*worth((), 0)[:1], 0, (), 0.0)
        for size in range(1, len(group) + 1):
            for subset in itertools.combinations(group, size):
                g = _shared_gamma(curves, subset, mix, bound)
                value, share = worth(subset, g)
                if value >= best[0]:  # the passes must pay for themselves over the mix (no margin: a tie keeps)
                    best = (value, g, subset, share)
        _, g, kept, share = best
        if log.isEnabledFor(logging.DEBUG):
            log.debug("worker %s: batch %g plans %s at gamma %d over the mix %s (goodput at gamma 1-%d: %s; "
                      "without its passes %.1f; hope %s)", w.name, batch, "+".join(group), g if kept else 0,
                      dict(mix), bound, " ".join(f"{sum(n * max(curve[(p, c)][h] for p in group) for c, n in mix.items()):.0f}"
                                                 for h in range(bound)), worth((), 0)[0], hope)
        # what the kept passes cost a request that does not draft with them: the passes of the share of the
        # batch that does (each pass's fixed cost and its rows); none when no class drafts on its own
        rows = max(1.0, share * batch)
        sunk_s = max((self.cache.at(prof, p, 0.5, rows, g, mix_rate[p], rho, stand[p]).draft_time_s for p in kept),
                     default=0.0) if share > 0 else 0.0
        return {p: g if p in kept else 0 for p in group}, sunk_s, best[0]

    def _note(self, w: WorkerState, content_class: str, alphas: AlphaSource) -> None:
        """Record the request in the worker's recent mix (what its running batch is made of): its class and the
        sampling regime `alphas` reads (`regime_key`)."""
        self._recent.setdefault(w.name, deque(maxlen=_MIX_WINDOW)).append(
            regime_key(content_class, _sources(alphas)[1]))
        seen = self._seen[w.name] = self._seen.get(w.name, 0) + 1
        if seen in (4, 8, 16) or seen % _REFRESH == 0:  # the mix moved: replan (often while history is short)
            self._mix_version[w.name] = self._mix_version.get(w.name, 0) + 1
