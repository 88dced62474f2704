"""TensorRT-LLM's draft-length schedule by batch size, with its acceptance gate, as a peer policy.

Follows TensorRT-LLM's `DecodingBaseConfig` (LLM API reference, e.g. `EagleDecodingConfig`, 1.3/1.4):
`draft_len_schedule` maps batch-size thresholds to draft lengths, the runtime draft length of a step being that
of the smallest threshold >= the batch size and 0 past the largest (PR NVIDIA/TensorRT-LLM#10860, "Dynamic
draft length on spec decode one-model path", whose example {4: 4, 8: 2, 32: 1} is the default here);
`max_concurrency` turns speculation off above a batch size; `acceptance_rate_threshold` with
`acceptance_rate_window_size` disables speculation permanently once the rolling true acceptance rate
(accepted draft tokens / drafted tokens) over the window falls below the threshold (both None in TensorRT-LLM,
so off by default). `max_draft_len` 4 matches the schedule's largest length.

How it maps onto a proxy: every request carries the schedule (control/schedule.py), applied by the worker at
every step against the live running batch, as TensorRT-LLM applies it per iteration. What it leaves out: the
gate's window counts speculation-enabled iterations in TensorRT-LLM; a proxy sees finished requests, so the
rolling rate is that of the proxy's discounted acceptance estimate (the per-request feedback, pooled over
content classes), checked once it rests on at least window x max_draft_len drafted tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control.peers._common import accepted_per_step, fallback, per_request_worker, pooled, scheduled
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.schedule import compress
from adaptspec.control.types import AlphaSource, Decision, WorkerState


class DraftLenSchedule(PolicyBase):
    uses_alphas = True

    def __init__(self, cfg) -> None:
        self.name = "draft_len_schedule"
        self.proposer = cfg.proposer
        self.max_draft_len = cfg.max_draft_len
        rows = sorted(cfg.draft_len_schedule.items())
        if cfg.max_concurrency is not None:
            rows = [(b, n) for b, n in rows if b <= cfg.max_concurrency] or [(cfg.max_concurrency, 0)]
        self.schedule = compress((b, min(n, self.max_draft_len)) for b, n in rows)
        self.window, self.threshold = cfg.acceptance_rate_window_size, cfg.acceptance_rate_threshold
        self.disabled = False  # the gate tripped: off for good (until a restart, as in TensorRT-LLM)

    def gate(self, alphas: AlphaSource, worker: str) -> str | None:
        """Why speculation is now off for good, or None."""
        if self.disabled:
            return "acceptance gate tripped earlier"
        if not self.window or self.threshold is None:
            return None
        est = pooled(alphas, worker, self.proposer)
        if est.n < self.window * self.max_draft_len:
            return None
        rate = accepted_per_step(est, self.max_draft_len) / self.max_draft_len
        if rate < self.threshold:
            self.disabled = True
            return f"acceptance rate {rate:.2f} < {self.threshold:g}: off for good"
        return None

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        w = per_request_worker(workers, self.proposer)
        if w is None:
            return fallback(workers, content_class, self.name, self.proposer)
        why = self.gate(alphas, w.name)
        sched = ((1, 0),) if why else self.schedule
        return scheduled(w, self.proposer, sched, content_class, self.name, why or "draft_len_schedule")
