"""The step-time fit's result: `CalibratedCosts`, one worker's fitted coefficients and their evidence, and how it
prices a profile (`apply`, `box_scale`, `scaled_draft`); control/calibration.py's `StepCalibrator` builds it.

`CalibratedCosts` is an additive `StepTimeModel` for the target and, per model proposer (draft model,
EAGLE head), a draft cost of `a_p` per pass and `b_p` per drafted token; `CalibratedCosts.apply(profile)` is
the profile the policy prices decisions with (its name carries the fit's fingerprint, so plan caches keyed by
profile name never mix two fits; coefficients are snapped to a ~3% grid so that a fit that merely jitters
does not flush them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from adaptspec.control.calibration_design import MODEL_PROPOSERS
from adaptspec.control.costmodel import DraftCost, StepTimeModel
from adaptspec.control.profiles import Profile, compose_hybrids

_BOX_BOUND = 4.0  # an unmeasured model proposer's price moves with the measured ones by at most this factor


@dataclass(frozen=True)
class CalibratedCosts:
    """A fit of one worker's step costs: coefficients (name -> seconds), their standard errors, evidence."""

    coefficients: Mapping[str, float]  # the least-squares fit
    errors: Mapping[str, float]  # NaN for coefficients held at the prior
    fitted: Mapping[str, bool]  # False: held at the prior (no data, or not identified yet)
    steps: float  # discounted engine steps behind the fit
    trusted: bool
    sigma_s: float = math.nan  # per-step residual noise, seconds
    key: str = ""  # fingerprint of the snapped coefficients
    proposers: tuple[str, ...] = MODEL_PROPOSERS
    batch: float = 0.0  # mean batched tokens per step seen (where the fit is best)
    snapped: Mapping[str, float] = field(default_factory=dict)  # on the ~3% grid: what `apply` prices with
    # mean context of a request in a step: KV tokens per request-step (engines that count requests per step;
    # batched tokens would count a prompt's tokens as rows), snapped like the coefficients; 0 = no data (the
    # profile's context_tokens then prices)
    context_tokens: float = 0.0
    # prequential mean squared error per step of the fit and of the profile on the windows seen (seconds^2)
    fit_mse: float = math.nan
    prior_mse: float = math.nan
    # coefficients fitted at the profile's ratios (one scale per group; calibration.py's doc, Collinearity)
    tied: tuple[str, ...] = ()
    # the drafted tokens' spread across windows at given requests and KV (calibration.py's doc, "The drafted
    # token's price"); NaN before the engine counted requests per step; `probe`: below the calibrator's
    # `probe_steps`
    drafted_contrast: float = math.nan
    contrast_steps: float = math.nan  # steps x drafted_contrast^2: steps' worth of full contrast
    probe: bool = False
    # model proposers whose per-call / per-pass split the windows cannot tell (each call ran the same passes)
    # while the profile's price of what they ran is off: the policy then drafts a share of their requests at
    # another gamma (control/calibration_probe.py `GammaProbe`), calibration.py's doc "Calls and passes"
    split_probe: tuple[str, ...] = ()
    # ... whose per-pass / per-token split they cannot tell (one request a call): probed at load with requests the
    # policy planned otherwise drafting with it (several requests a call)
    token_probe: tuple[str, ...] = ()
    # model proposer (one whose fitted costs the windows determine loosely) -> the largest (passes, drafted tokens)
    # per call of any window since the last reset (passes floored, tokens rounded down to a power of 2): a call beyond
    # them is priced at the cheaper of the fit's line and the profile's price at this box's speed (`apply`)
    seen: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def target(self) -> StepTimeModel:
        c = self.snapped
        return StepTimeModel(overhead_s=c["overhead_s"], kv_s_per_token=c["kv_s_per_token"],
                             compute_s_per_token=c["compute_s_per_token"], additive=True)

    def draft_cost(self, proposer: str) -> DraftCost:
        """`e` per call, plus `a` per pass and `b` per drafted token: gamma passes over the batch (DraftCost
        kind 'draft' with `call_s`)."""
        c = self.snapped
        model = StepTimeModel(overhead_s=c[f"{proposer}_pass_s"], compute_s_per_token=c[f"{proposer}_token_s"],
                              additive=True)
        return DraftCost("draft", model=model, call_s=c[f"{proposer}_call_s"])

    def apply(self, profile: Profile) -> Profile:
        """The profile priced with this fit: its target model and mean context replaced, and the model
        proposers it offers replaced where their coefficients were fitted; the others keep the profile's
        prices times the box's scale (`box_scale`: a model the policy has not run yet is priced as far off the
        profile as the ones it has run, not at the profile's price next to their measured ones); a hybrid
        option follows its parts (the engine counts its steps as n-gram tokens or model passes)."""
        drafts = dict(profile.drafts)
        models = [p for p in self.proposers if profile.offers(p) and profile.draft(p).kind != "ngram"]
        seen = [p for p in models if any(self.fitted.get(f"{p}_{c}_s") for c in ("call", "pass", "token"))]
        speed = self.box_scale(profile, ())  # the target's measured / profile step: this box's speed
        for p in seen:
            cost = self.draft_cost(p)
            if self.seen.get(p):
                # past the calls the windows held, the fit's slopes are extrapolated from far smaller ones (a head
                # drafting for one request of 16 at gamma 1-2: its per-call time lands on passes or tokens and a
                # call for 16 at gamma 3 is priced 2-3x its cost, so it is never run to show otherwise): there a
                # call costs the cheaper of the fit's price and the profile's at this box's speed. Too cheap is
                # corrected by running it; too dear never would be
                cost = replace(cost, seen=self.seen[p], unseen=scaled_draft(profile.draft(p), speed))
            drafts[profile.resolve(p)] = cost
        scale = self.box_scale(profile, seen)
        for p in models:
            if p not in seen:
                drafts[profile.resolve(p)] = scaled_draft(profile.draft(p), scale)
        drafts = compose_hybrids(drafts)  # a hybrid is priced from its (re-priced) parts
        ctx = self.context_tokens or profile.context_tokens
        return replace(profile, name=f"{profile.name}@{self.key}", target=self.target, drafts=drafts,
                       context_tokens=ctx, description=f"{profile.description} (calibrated online over {self.steps:.0f} steps)")


    def box_scale(self, profile: Profile, seen: Sequence[str]) -> float:
        """How far this worker's measured costs are from the profile's, as one factor: the geometric mean over
        the model proposers fitted (`seen`) of fitted / profile seconds of one pass drafting one token; with
        none fitted, of the target's step at the fit's mean batched tokens. Bounded to [1/4, 4] (`_BOX_BOUND`):
        it moves unmeasured prices toward the measured ones, no further."""
        kv = self.context_tokens or profile.context_tokens
        pairs = [(profile.draft(p).time(1, 1.0, kv, profile.target), self.draft_cost(p).time(1, 1.0, kv, self.target))
                 for p in seen]
        if not pairs:
            tokens = max(1.0, self.batch)
            pairs = [(profile.target.time(tokens), self.target.time(tokens))]
        logs = [math.log(now / was) for was, now in pairs if was > 0.0 and now > 0.0]
        if not logs:
            return 1.0
        return min(_BOX_BOUND, max(1.0 / _BOX_BOUND, math.exp(sum(logs) / len(logs))))


def scaled_draft(cost: DraftCost, s: float) -> DraftCost:
    """A model proposer's price times `s`: every seconds coefficient of a draft model or a measured-form head
    (a head priced as a fraction of the target step follows the target already)."""
    if s == 1.0 or cost.kind not in ("draft", "eagle"):
        return cost
    model = cost.model
    if model is not None:
        model = replace(model, overhead_s=model.overhead_s * s, memory_floor_s=model.memory_floor_s * s,
                        kv_s_per_token=model.kv_s_per_token * s, compute_s_per_token=model.compute_s_per_token * s)
    return replace(cost, model=model, call_s=cost.call_s * s, overhead_s=cost.overhead_s * s,
                   per_token_s=cost.per_token_s * s, kv_s_per_token=cost.kv_s_per_token * s)
