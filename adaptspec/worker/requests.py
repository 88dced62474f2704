"""What a request is to the reference engine (worker/engine.py): what it asks (`GenRequest`), what each step hands
back for it (`StepOutput`), its running state in the batch (`Seq`), one step's tally for the step telemetry
(`step_tally`), and the engine's counters (`EngineMetrics`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from adaptspec.control.schedule import Schedule
from adaptspec.control.shadow import PositionCounts, ShadowStats
from adaptspec.control.telemetry import StepCounters
from adaptspec.worker.proposers import SamplingParams

__all__ = ["EngineMetrics", "GenRequest", "Seq", "SourceTally", "StepOutput", "step_tally"]


@dataclass
class GenRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    proposer: str | None = None  # None -> the engine's default speculation
    num_speculative_tokens: int | None = None
    content_class: str | None = None
    stop_token_ids: list[int] | None = None  # None -> the tokenizer's EOS ids
    ignore_eos: bool = False
    # caps on k by the running batch, applied at every step: ((max_running_batch, cap), ...) (control/schedule.py)
    schedule: list | tuple | None = None
    # the per-step hybrid's rule by name (control/hybrid_rule.py RULES); None: the engine's own
    hybrid_rule: str | None = None


@dataclass
class StepOutput:
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" when finished
    draft_tokens: int  # cumulative for this request
    accepted_tokens: int
    steps: int
    drafts: int = 0  # steps that drafted (k > 0)
    # per draft position j: drafts that tried it (positions < j accepted, and drafted >= j+1 tokens; an n-gram
    # draft: the step's room allowed j+1, so a lookup cut short by the text counts as a miss at its end), and
    # drafts that accepted it: exact per-position rates even when draft lengths vary
    tried_per_position: tuple[int, ...] = ()
    accepted_per_position: tuple[int, ...] = ()
    # steps by the gamma the step allowed the request (min(k, schedule cap at the running batch); 0: none)
    steps_by_gamma: dict[int, int] = field(default_factory=dict)
    # seconds the request waited in the queue before it joined the running batch (vLLM's queue time)
    queue_s: float = 0.0
    lookup_drafts: int = 0  # hybrid: drafting steps whose draft came from n-gram lookup (not the model)
    # a per-step hybrid: its steps by draft source (`SourceTally.report`), None for every other request
    by_source: dict[str, ShadowStats] | None = None


class SourceTally:
    """A per-step hybrid request's decode steps by draft source, in the form trace replay reports them
    (bench/simulator.py `_hybrid_parts`, `stepwise.walk_hybrid`) and the proxy's learning splits them
    (control/learn.py `Part`): what `costmodel.stepwise_hybrid` prices a per-step hybrid from.

    - "ngram", its lookup steps: `drafts` the lookup steps, `steps` those plus the output positions every other
      step emitted (so drafts / steps is the rule's lookup density q); per position tried / accepted, a draft
      accepted to its full length L counting position L + 1 as tried and not accepted (the rates then give the
      lookup steps' mean emitted tokens, whatever lengths the rule drafted);
    - the model's name (its head or draft model), its drafting steps: tried positions are those up to the
      first rejection within the draft, as for the model's own requests.
    The prompt's prefill step is left out when it drafted nothing, as replay starts at output position 1."""

    __slots__ = ("lookup", "model", "model_name")

    def __init__(self) -> None:
        self.lookup = PositionCounts()
        self.model = PositionCounts()
        self.model_name: str | None = None

    def step(self, source: str, drafted: int, accepted: int) -> None:
        """One decode step of the request: its draft's source, length (0: none) and accepted tokens."""
        if drafted and source == "ngram":
            self.lookup.steps += 1
            self.lookup.draft(drafted, accepted, accepted + 1)
            return
        self.lookup.steps += accepted + 1  # positions another step covered
        if drafted:
            self.model_name = source
            self.model.steps += 1
            self.model.draft(drafted, accepted, min(accepted + 1, drafted))

    def report(self) -> dict[str, ShadowStats]:
        out = {"ngram": self.lookup.stats()}
        if self.model_name is not None:
            out[self.model_name] = self.model.stats()
        return out


@dataclass
class EngineMetrics:
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    spec_by_class: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    num_steps: int = 0
    num_generated_tokens: int = 0
    # step telemetry for the proxy's online calibration (control/telemetry.py): wall time of whole steps
    # (drafting, forward, verification, commit), tokens through the target forward, context attended,
    # drafted tokens and batched draft-model passes per proposer
    step_counters: StepCounters = field(default_factory=StepCounters)


class Seq:
    __slots__ = ("req", "tokens", "num_prompt", "slot", "kv_len", "proposer", "k", "sampling", "stop_ids",
                 "sink", "draft_tokens", "accepted_tokens", "steps", "generated", "cls", "drafts", "pos_tried",
                 "pos_accepted", "hidden", "pending_hidden", "schedule", "step_k", "by_gamma", "queued_at",
                 "queue_s", "source", "lookup_drafts", "room", "tally")

    def __init__(self, req: GenRequest, proposer: str, k: int, stop_ids: set[int], sink,
                 schedule: Schedule | None = None):
        self.req = req
        self.tokens = list(req.prompt_token_ids)
        self.num_prompt = len(self.tokens)
        self.slot = -1
        self.kv_len = 0
        self.proposer, self.k = proposer, k
        gen = torch.Generator().manual_seed(req.seed) if req.seed is not None else None
        self.sampling = SamplingParams(req.temperature, req.top_p, gen)
        self.stop_ids = stop_ids
        self.sink = sink  # callable(StepOutput | BaseException), thread-safe
        self.draft_tokens = self.accepted_tokens = self.steps = self.generated = self.drafts = 0
        self.pos_tried: list[int] = []
        self.pos_accepted: list[int] = []
        self.cls = req.content_class or "unknown"
        # EAGLE-style proposers: the target's final hidden state at the position before the last committed
        # token ([h]; None before the first forward), and the rows of the step being verified ([k + 1, h])
        self.hidden: torch.Tensor | None = None
        self.pending_hidden: torch.Tensor | None = None
        self.schedule = schedule
        self.step_k = k  # this step's gamma: min(k, the schedule's cap at the running batch)
        self.by_gamma: dict[int, int] = {}
        self.queued_at = time.monotonic()  # built when submitted; admission sets queue_s
        self.queue_s = 0.0
        # the proposer that drafted this step (a hybrid's part: "ngram" or its model), and the steps a hybrid
        # request's draft came from n-gram lookup (the propose rate of its lookup part, for the cost model)
        self.source = proposer
        self.lookup_drafts = 0
        self.room = 0  # this step's draft cap: step_k, less what max_tokens and the context leave
        self.tally: SourceTally | None = None  # a per-step hybrid's steps by draft source (the engine sets it)

    def output(self, new: list[int], finished: bool, reason: str | None) -> StepOutput:
        return StepOutput(new, finished, reason, self.draft_tokens, self.accepted_tokens, self.steps,
                          self.drafts, tuple(self.pos_tried), tuple(self.pos_accepted), dict(self.by_gamma),
                          self.queue_s, self.lookup_drafts,
                          self.tally.report() if finished and self.tally is not None else None)


def step_tally(done: list[Seq], ks: list[int], groups: list[list[Seq]]
                ) -> tuple[float, float, dict[str, float], dict[str, float], float]:
    """(batched tokens, KV tokens attended, drafted tokens per proposer, model passes per proposer, requests)
    of one step: every uncached token and drafted token goes through the target forward and attends to the cached
    context plus itself; a model proposer runs max(k) batched passes per call, one call per proposer per
    forward group (n-gram lookup: none). Counted by what drafted (`Seq.source`): a hybrid step served by
    lookup is n-gram tokens and no pass; one served by its model is that model's tokens and passes (its
    misses share the call of the requests that asked for the model directly: `_compute`)."""
    batched = kv = 0.0
    drafted: dict[str, float] = {}
    k_of = {id(s): k for s, k in zip(done, ks, strict=True)}
    for s, k in zip(done, ks, strict=True):
        batched += len(s.tokens) - s.kv_len + k
        kv += len(s.tokens) + k
        if k:
            drafted[s.source] = drafted.get(s.source, 0.0) + k
    passes: dict[str, float] = {}
    for group in groups:
        longest: dict[str, int] = {}  # model that ran -> max k (one call per model)
        for s in group:
            k = k_of.get(id(s), 0)
            if k and s.source != "ngram":
                longest[s.source] = max(longest.get(s.source, 0), k)
        for model, k in longest.items():
            passes[model] = passes.get(model, 0.0) + k
    return batched, kv, drafted, passes, float(len(done))
