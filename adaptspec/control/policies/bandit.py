"""bandit: goodput with alpha drawn from each key's Beta posterior (Thompson) or its upper bound (UCB), so keys
without data get tried (BanditSpec-style exploration)."""

from __future__ import annotations

import random

from adaptspec.control.config import BanditPolicy
from adaptspec.control.policies.common import posterior_draw
from adaptspec.control.policies.goodput import CostModelPolicy
from adaptspec.control.types import AlphaEstimate


class Bandit(CostModelPolicy):
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
