"""SGLang's adaptive speculation (`--speculative-adaptive`) as a peer policy.

Follows sglang 0.5.23, `sglang/srt/speculative/adaptive_spec_params.py` (`AdaptiveStepSlot`,
`AdaptiveSpeculativeParams`, `DEFAULT_ADAPTIVE_CONFIG`): the engine keeps one tier per batch size (1, 8, 32, 64
by default); a verify batch of size b is served by the tier with the largest key <= b. Each tier holds the EAGLE
draft depth (`speculative_num_steps`) from its candidate list and a smoothed accepted-drafts-per-step; after a
warm-up it re-picks the depth every few batches: down while the smoothed acceptance is at or under
(next lower candidate - 0.5 + down_hysteresis) (0.5 for a zero candidate), otherwise up while it is above
(current - 0.5 + up_hysteresis), i.e. about one step beyond what is being accepted; a tier at depth 0 probes its
smallest positive candidate at its next update. Defaults are the release's: tiers 1: [1,3,5,7] (down
hysteresis -0.25), 8: [0,1,3], 32: [0,1], 64: [0]; warm-up 10, update every 5; initial depth 3 (the value of
SGLang's own EAGLE examples, `--speculative-num-steps 3 --speculative-eagle-topk 1`); a tier whose candidates
lack it starts at its middle candidate, as the release does.

How it maps onto a proxy: a request carries the tiers as a gamma schedule (control/schedule.py), so the depth
follows the live running batch at every step as SGLang's does. What it leaves out: SGLang feeds each tier
an EMA (weight 0.2) of the accepted drafts of every verify batch it serves; a proxy sees finished requests, not
verify batches, so the smoothed value here is the expected accepted drafts per step at the tier's current depth
under the proxy's discounted acceptance estimate (the per-request feedback, pooled over content classes; the
estimator's half-life plays the EMA's part), and a "batch" of the warm-up / update counters is a request
admitted in that tier. Schedules are fixed at admission (SGLang changes a running request's depth too).
SGLang's adaptive mode runs EAGLE / EAGLE3 with topk 1 only; `proposer` defaults to eagle. No CUDA-graph
padding of the batch size, no ceiling_coeff (0 in every default tier).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adaptspec.control.peers._common import (
    accepted_per_step,
    fallback,
    per_request_worker,
    pooled,
    scheduled,
    tier_schedule,
)
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.types import AlphaSource, Decision, WorkerState


@dataclass
class Tier:
    """One batch-size tier: its candidate depths, hysteresis and state (SGLang's AdaptiveStepSlot)."""

    candidates: tuple[int, ...]
    up_hysteresis: float
    down_hysteresis: float
    steps: int
    batches: int = 0

    def recompute(self, accepted: float) -> int:
        """The depth for a smoothed `accepted` drafts per step at the current depth."""
        i = self.candidates.index(self.steps)
        if self.steps == 0:  # after a no-speculation interval: probe the smallest positive depth
            return self.candidates[min(i + 1, len(self.candidates) - 1)]
        start = i
        while i > 0:
            lower = self.candidates[i - 1]
            floor = (0.5 if lower == 0 else lower - 0.5) + self.down_hysteresis
            if accepted > floor:
                break
            i -= 1
        if i == start:
            while i < len(self.candidates) - 1 and accepted > self.candidates[i] - 0.5 + self.up_hysteresis:
                i += 1
        return self.candidates[i]


class SglangAdaptive(PolicyBase):
    """Per-request view of SGLang's adaptive EAGLE depth by batch-size tier (see the module docstring)."""

    uses_alphas = True

    def __init__(self, cfg) -> None:
        self.name = "sglang_adaptive"
        self.proposer = cfg.proposer
        self.warmup, self.every = cfg.warmup_batches, cfg.update_interval
        self.tiers: dict[int, Tier] = {}
        for bs in sorted(cfg.tiers):
            t = cfg.tiers[bs]
            cands = tuple(sorted(set(t.candidate_steps)))
            start = cfg.initial_steps if cfg.initial_steps in cands else cands[len(cands) // 2]
            self.tiers[bs] = Tier(cands, t.up_hysteresis, t.down_hysteresis, start)
        self.keys = sorted(self.tiers)

    def tier_of(self, batch: float) -> int:
        """The tier serving a batch: the largest key <= batch (the smallest key below every key)."""
        return max((k for k in self.keys if k <= batch), default=self.keys[0])

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        w = per_request_worker(workers, self.proposer)
        if w is None:
            return fallback(workers, content_class, self.name, self.proposer)
        tier = self.tiers[self.tier_of(w.load + 1)]
        tier.batches += 1
        if tier.batches > self.warmup and (tier.batches - self.warmup) % self.every == 0:
            tier.steps = tier.recompute(accepted_per_step(pooled(alphas, w.name, self.proposer), tier.steps))
        sched = tier_schedule([(k, self.tiers[k].steps) for k in self.keys])
        return scheduled(w, self.proposer, sched, content_class, self.name, "tiers by running batch")
