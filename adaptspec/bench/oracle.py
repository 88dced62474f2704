"""The hindsight oracle: per request, the (proposer, gamma) that is best at the live batch, knowing its trace.

Bench-only (it reads the request's future). At admission, for each proposer the request's trace carries and
the worker offers, and each gamma in 0..min(max_gamma, max_k), it replays the request's own runs from the
first decode position (index 1: the prefill emits token 0) to get its true mean emitted tokens per step
E(p, g) = (output_tokens - 1) / S(p, g), S being the decode steps, and the mean context those steps attend
to. It prices one step of the live batch plus this request with the TRUTH step-time model (what the
simulated engine pays): verify of every running request's gamma + 1 tokens and this one's, plus each
proposer's drafting for the gammas that use it (a draft model or head runs max(gamma) passes for all of
them). The choice maximises the batch's goodput (sum of E over the batch) / step time, the running requests
keeping the plans the oracle gave them. At batch 1 that is the request's own goodput and the choice is
exact (for additive profiles; a roofline's max() is taken at the mean context), so there the oracle bounds
any per-request policy from above. At larger batches it is a greedy at admission, not the joint optimum:
it accounts for what a plan costs the co-batched requests (the shared draft passes), which a request's own
goodput alone does not.

`OracleStep` (`oracle-step`) is the per-step hindsight bound: each request runs the batch-1 optimal per-step
plan over the offered proposers its trace has runs for (bench/stepwise.py `step_bound_plan`: a dynamic program
over output positions on the truth step-time model). At batch 1 it bounds every per-step and per-request plan
from above (the per-request oracle's plan is one of the per-step plans); in a batch it is replayed as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptspec.bench.stepwise import StepPlan, step_bound_plan
from adaptspec.bench.traces import TraceRequest
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.types import Decision, WorkerState
from adaptspec.errors import ConfigError


def decode_walk(runs: tuple[int, ...], gamma: int, prompt_tokens: int) -> tuple[int, float]:
    """(decode steps, mean context tokens per step) of replaying `runs` at `gamma` from position 1."""
    n, pos, steps, ctx = len(runs), 1, 0, 0
    cap = gamma + 1
    while pos < n:
        steps += 1
        ctx += prompt_tokens + pos
        r = runs[pos]
        pos += r if r < cap else cap
    return steps, (ctx / steps if steps else 0.0)


@dataclass
class LiveBatch:
    """The running requests a new one joins: their trace requests, plans and total KV context."""

    requests: list[TraceRequest]
    proposers: list[str]  # "none" when off
    gammas: list[int]
    kv_tokens: float


class Oracle(PolicyBase):
    """Hindsight per-request choice; `decide` without a trace request is an error (use `hindsight`)."""

    name = "oracle"

    def __init__(self, cost: object, max_gamma: int = 8) -> None:
        self.cost = cost  # simulator.StepCost of the truth profile
        self.max_gamma = max_gamma
        self._walks: dict[tuple[int, str, int], tuple[int, float]] = {}

    def decide(self, content_class: str, workers: object, alphas: object) -> Decision:
        raise ConfigError("the oracle policy sees the future of a request: it needs acceptance traces",
                          key="--policies", value="oracle")

    def walk(self, req: TraceRequest, proposer: str, gamma: int) -> tuple[int, float]:
        """(decode steps, mean context) of `req` under (proposer, gamma); memoised per request object."""
        key = (id(req), proposer, gamma)
        got = self._walks.get(key)
        if got is None:
            runs = req.accept_runs[proposer] if gamma else (1,) * req.output_tokens
            got = self._walks[key] = decode_walk(runs, gamma, req.prompt_tokens)
        return got

    def emitted(self, req: TraceRequest, proposer: str, gamma: int) -> float:
        """The request's true mean emitted tokens per decode step under (proposer, gamma)."""
        steps = self.walk(req, proposer, gamma)[0]
        return (req.output_tokens - 1) / steps if steps else 1.0

    def step_time(self, gammas: dict[str, list[int]], tokens: int, kv_tokens: float) -> float:
        """Truth seconds of one step: verify `tokens` over `kv_tokens`, plus each proposer's drafting."""
        verify = self.cost.verify_time(tokens, kv_tokens)
        n = sum(len(g) for g in gammas.values()) or 1
        draft = 0.0
        for p, gs in gammas.items():
            if p != "none" and gs:
                draft += self.cost.draft_time(p, np.asarray(gs), kv_tokens * len(gs) / n, verify_s=verify)
        return draft + verify

    def hindsight(self, req: TraceRequest, worker: WorkerState, live: LiveBatch) -> Decision:
        """The decision for `req` joining `worker`'s live batch."""
        if req.output_tokens <= 1:
            return Decision(worker.name, "none", 0, req.content_class, self.name, "oracle: nothing to decode")
        others: dict[str, list[int]] = {}
        e_others, tokens_others = 0.0, 0
        for r, p, g in zip(live.requests, live.proposers, live.gammas, strict=True):
            others.setdefault(p if g else "none", []).append(g)
            e_others += self.emitted(r, p, g)
            tokens_others += g + 1
        bound = min(self.max_gamma, worker.max_gamma, req.max_k)
        options = [("none", 0)] + [(p, g) for p in worker.proposers if p in req.accept_runs
                                   for g in range(1, bound + 1)]
        best, off = ("none", 0, -1.0, 0.0), 0.0
        for p, g in options:
            gammas = {k: list(v) for k, v in others.items()}
            gammas.setdefault(p, []).append(g)
            e = self.emitted(req, p, g)
            step = self.step_time(gammas, tokens_others + g + 1, live.kv_tokens + self.walk(req, p, g)[1])
            score = (e_others + e) / step
            if g == 0:
                off = score
            if score > best[2]:
                best = (p, g, score, e)
        p, g, score, e = best
        return Decision(worker.name, p, g, req.content_class, self.name,
                        f"oracle: {p} g={g} E={e:.2f} at batch={len(live.requests) + 1}",
                        expected_speedup=score / off if off else 1.0)


class OracleStep(Oracle):
    """`oracle-step`: a request gets the per-step plan that is optimal for it at batch 1, knowing its trace."""

    name = "oracle-step"

    def __init__(self, cost: object, max_gamma: int = 8) -> None:
        super().__init__(cost, max_gamma)
        self._plans: dict[tuple[int, tuple[str, ...], int], StepPlan] = {}

    def sources(self, req: TraceRequest, worker: WorkerState) -> tuple[str, ...]:
        return tuple(p for p in worker.proposers if p in req.accept_runs)

    def step_plan(self, req: TraceRequest, worker: WorkerState, bound: int) -> StepPlan:
        """The plan the simulator replays for `req` (memoised per request object)."""
        srcs = self.sources(req, worker)
        key = (id(req), srcs, bound)
        got = self._plans.get(key)
        if got is None:
            got = self._plans[key] = step_bound_plan(req, srcs, min(bound, self.max_gamma), self.cost)[0]
        return got

    def hindsight(self, req: TraceRequest, worker: WorkerState, live: LiveBatch) -> Decision:
        bound = min(self.max_gamma, worker.max_gamma, req.max_k)
        if req.output_tokens <= 1 or not self.sources(req, worker) or bound <= 0:
            return Decision(worker.name, "none", 0, req.content_class, self.name, "oracle-step: nothing to draft")
        return Decision(worker.name, "hybrid", bound, req.content_class, self.name,
                        "oracle-step: the batch-1 optimal per-step plan (hindsight)")
