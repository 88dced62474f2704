"""`PolicyBase`: what every policy is, and the optional capabilities its users read, declared with defaults.

Every policy kind (control/policy.py, control/holdout_policy.py, control/peers/*, the bench's oracle) derives from
it, so the proxy and the benches read a capability as an attribute, never by probing for it:

    name             the policy's name (decisions, logs, metrics)
    decide(...)      content class, candidate workers, alpha estimates -> Decision
    uses_alphas      whether it reads the alpha estimates; False: the proxy skips per-request acceptance
                     prediction for it (nothing would read the predicted alphas)
    default_profile  the step-cost profile it prices with where a worker names none (also the prior of a
                     worker's step-time calibration), or None
    contrast_probe   its calibration probes (control/calibration_probe.py), or None when it makes none
    gamma_probe
    rules            the per-step hybrid's rule book (control/hybrid_rule.py `RuleBook`): the walks the proxy
                     feeds it from the workers' reports, the rule it sends with a hybrid request; or None
    experiment       the holdout / switchback experiment its decisions run in (holdout_policy.Experimented),
                     or None
    rates            its batch-1 realized-rate corrections (control/realized.py `RealizedRates`): what the proxy
                     feeds with the decode rate of every request whose decision is `rate_evidence`; or None
    adopt(previous)  take over from the policy it replaces on a config reload what should survive it

A policy's config section declares what its readers need likewise (control/config.py `_Experiments`:
`priced_profile`, `named_proposer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from adaptspec.control.types import AlphaSource, Decision, WorkerState

if TYPE_CHECKING:
    from adaptspec.control.calibration_probe import ContrastProbe, GammaProbe
    from adaptspec.control.holdout_policy import Experimented
    from adaptspec.control.hybrid_rule import RuleBook
    from adaptspec.control.profiles import Profile
    from adaptspec.control.realized import RealizedRates


class PolicyBase:
    name: str = ""
    uses_alphas: bool = True
    default_profile: Profile | None = None
    contrast_probe: ContrastProbe | None = None
    gamma_probe: GammaProbe | None = None
    rules: RuleBook | None = None  # the per-step hybrid's rules' walks, per class (control/hybrid_rule.py)
    experiment: Experimented | None = None
    rates: RealizedRates | None = None

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        raise NotImplementedError

    def adopt(self, previous: PolicyBase | None) -> None:
        """Nothing of `previous` survives a reload unless the policy says what (the experiment's evidence)."""
        return None
