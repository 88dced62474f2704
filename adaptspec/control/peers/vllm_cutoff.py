"""vLLM's dynamic speculative decoding by batch size (`speculative_disable_by_batch_size`) as a peer policy.

Follows vLLM PR vllm-project/vllm#4592 ("[Dynamic Spec Decoding] Auto-disable by the running queue size",
v0 `SpecDecodeWorker._should_disable_all_speculation`): speculation is off for the whole batch while the
running queue holds at least `disable_by_batch_size` requests, on with a fixed `num_speculative_tokens`
otherwise. vLLM has no default for the threshold (None: never off); 4 is the value of the PR's own example and
e2e test (#5000). The proposer and its length are a deployment's choice: eagle with 3 tokens here, the EAGLE
setting of SGLang's examples and this repository's `static:eagle:3` baseline.

How it maps onto a proxy: every request carries the cut-off as a gamma schedule (k up to batch
disable_by_batch_size - 1, 0 above), applied by the worker at every step as vLLM applies it per batch. It
learns nothing; it leaves nothing of vLLM's rule out.
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptspec.control.peers._common import fallback, per_request_worker, scheduled
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.types import AlphaSource, Decision, WorkerState


class BatchCutoff(PolicyBase):
    uses_alphas = False

    def __init__(self, cfg) -> None:
        self.name = "batch_cutoff"
        self.proposer, self.k = cfg.proposer, cfg.num_speculative_tokens
        below = cfg.disable_by_batch_size - 1
        self.schedule = ((below, self.k),) if below >= 1 else ((1, 0),)

    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        w = per_request_worker(workers, self.proposer)
        if w is None:
            return fallback(workers, content_class, self.name, self.proposer)
        return scheduled(w, self.proposer, self.schedule, content_class, self.name, "disable_by_batch_size")
