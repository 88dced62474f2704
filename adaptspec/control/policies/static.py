"""static: a fixed proposer + gamma (or off) on the least-loaded worker that offers it."""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control.config import StaticPolicy
from adaptspec.control.policies.common import fixed_config, healthy, least_loaded, offers
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.types import AlphaSource, Decision, WorkerState


class Static(PolicyBase):
    """Always `proposer` with `gamma` (or off), on the least-loaded worker that can run it."""

    uses_alphas = False  # the proxy skips per-request acceptance prediction for policies that ignore alphas

    def __init__(self, cfg: StaticPolicy) -> None:
        self.name = "static"
        self.proposer, self.gamma = cfg.proposer, cfg.gamma

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        ws = healthy(workers)
        want = self.proposer if self.gamma > 0 else "none"
        exact = [w for w in ws if (w.per_request and offers(w, want))
                 or (not w.per_request and fixed_config(w) == (want, self.gamma if want != "none" else 0))]
        able = exact or [w for w in ws if offers(w, want)]
        if able:
            w = least_loaded(able)
            if w.per_request:
                proposer, gamma = want, min(self.gamma, w.max_gamma) if want != "none" else 0
            else:
                proposer, gamma = fixed_config(w)
            what = f"{proposer} g={gamma}" if gamma else "off"
            return Decision(w.name, proposer, gamma, content_class, self.name, f"static: {what}")
        w = least_loaded(ws)
        proposer, gamma = ("none", 0) if w.per_request else fixed_config(w)
        return Decision(w.name, proposer, gamma, content_class, self.name,
                        f"static: no worker offers {want}; {w.name} runs {proposer} g={gamma}")
