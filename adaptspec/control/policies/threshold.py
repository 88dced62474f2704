"""threshold: gamma from a load table, like vLLM's dynamic speculative decoding / TRT-LLM draft_len_schedule."""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control.config import ThresholdPolicy
from adaptspec.control.policies.common import fixed_config, healthy, least_loaded, offers
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.types import AlphaSource, Decision, WorkerState


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
        ws = healthy(workers)
        proposer = self.by_class.get(content_class, self.proposer)
        per_req = [w for w in ws if w.per_request and offers(w, proposer)]
        if per_req:
            w = least_loaded(per_req)
            batch = w.load + 1
            gamma = min(self.gamma_for(batch), w.max_gamma) if proposer != "none" else 0
            p = proposer if gamma else "none"
            what = f"{p} g={gamma}" if gamma else "off"
            return Decision(w.name, p, gamma, content_class, self.name,
                            f"threshold: {what} batch={batch:g}")
        # fixed pools only: the least-loaded one whose fixed gamma is closest to the table's choice
        w0 = least_loaded(ws)
        target = self.gamma_for(w0.load + 1)
        w = min(ws, key=lambda w: (abs(fixed_config(w)[1] - target)
                                   + (0 if fixed_config(w)[0] in (proposer, "none") else 100), w.load))
        p, g = fixed_config(w)
        return Decision(w.name, p, g, content_class, self.name,
                        f"threshold: table says g={target} at batch={w0.load + 1:g}; fixed {w.name} {p} g={g}")
