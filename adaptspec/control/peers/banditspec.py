"""BanditSpec's UCB (UCBSpec) over speculation configurations as a peer policy.

Follows Hou et al. 2025, "BanditSpec: Adaptive Speculative Decoding via Bandit Algorithms" (ICML 2025,
arXiv:2505.15141), Algorithm UCBSpec, as released in sail-sg/BanditSpec `generate_utils.py`
(`ucb_length_spec_generate`): the arms are configurations (there gamma 1..4 of one EAGLE head; the paper also
takes drafting methods as arms: here every (proposer, gamma) with gamma in `gammas` and a proposer of
`proposers` the worker offers); the first `warmup_rounds` rounds pull every arm in turn; afterwards each round
pulls argmax mean_i + sqrt(exploration_weight * ln t / n), t the round, n the pulls so far (the release divides
by the pulls of all arms, which the paper's per-arm form replaces by the arm's own: `per_arm_bonus`), with
exploration weight 6.0 as released; the reward of a round is its throughput (tokens per second), each arm's mean
the running average of its rewards. Off is not an arm.

How it maps onto a proxy: a round is a request (the proxy picks a configuration per request, not per step). What
it leaves out: BanditSpec times every round on the GPU; a proxy does not see a request's own steps, so a pull's
reward is the throughput the request can expect on its arm when it is pulled: the arm's expected tokens per
step (the proposer's acceptance as the proxy has observed it from per-request feedback, pooled over content
classes) over the step time of the worker's profile at the live batch. Means are running averages of those
rewards, so an arm learns from its own pulls and the load they met, as in the release.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from adaptspec.control.peers._common import ProfileBook, fallback, pooled
from adaptspec.control.plancache import PlanCache
from adaptspec.control.policies.common import healthy, least_loaded, offers
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.profiles import Profile
from adaptspec.control.types import AlphaSource, Decision, WorkerState


class BanditSpecUCB(PolicyBase):
    uses_alphas = True

    def __init__(self, cfg) -> None:
        self.name = "banditspec_ucb"
        self.proposers, self.gammas = tuple(cfg.proposers), tuple(cfg.gammas)
        self.weight, self.warmup, self.per_arm = cfg.exploration_weight, cfg.warmup_rounds, cfg.per_arm_bonus
        self._profiles = ProfileBook(cfg.default_profile)
        self.default_profile = self._profiles.default
        self.cache = PlanCache()
        self.mean: dict[tuple[str, int], float] = {}
        self.pulls: dict[tuple[str, int], int] = {}
        self.t = 0

    def profile(self, name: str | None) -> Profile:
        return self._profiles.get(name)

    def arms(self, w: WorkerState, prof: Profile) -> list[tuple[str, int]]:
        return [(p, g) for p in self.proposers if offers(w, p) and prof.offers(p)
                for g in self.gammas if g <= w.max_gamma]

    def choose(self, arms: list[tuple[str, int]]) -> tuple[tuple[str, int], str]:
        """The arm of round t (1-based), and why."""
        for r in range(1, self.warmup + 1):  # round r of the warm-up: every arm in turn up to r pulls
            for arm in arms:
                if self.pulls.get(arm, 0) < r:
                    return arm, f"warm-up round {r}"
        total = sum(self.pulls.get(a, 0) for a in arms)

        def score(arm: tuple[str, int]) -> float:
            n = self.pulls.get(arm, 0) if self.per_arm else total
            return self.mean.get(arm, 0.0) + math.sqrt(self.weight * math.log(self.t) / max(n, 1))

        best = max(arms, key=score)
        return best, f"ucb {score(best):.1f}"

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        ws = [w for w in healthy(workers) if w.per_request and any(offers(w, p) for p in self.proposers)]
        if not ws:
            return fallback(workers, content_class, self.name, "/".join(self.proposers))
        w = least_loaded(ws)
        prof = self.profile(w.profile)
        arms = self.arms(w, prof)
        if not arms:
            return Decision(w.name, "none", 0, content_class, self.name, f"{self.name}: no arm on {w.name}")
        self.t += 1
        arm, why = self.choose(arms)
        p, g = arm
        est = pooled(alphas, w.name, p)
        rho = (w.prefill_ratio, w.prompt_tokens)
        reward = self.cache.at(prof, p, est.per_position or est.mean, w.load + 1.0, g, est.propose_rate, rho).goodput
        n = self.pulls.get(arm, 0)
        self.mean[arm] = (self.mean.get(arm, 0.0) * n + reward) / (n + 1)
        self.pulls[arm] = n + 1
        return Decision(w.name, p, g, content_class, self.name,
                        f"{self.name}: {p} g={g} round {self.t} ({why}, mean {self.mean[arm]:.1f} tok/s, n={n + 1})")
