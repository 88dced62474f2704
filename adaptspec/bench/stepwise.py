"""Per-step plans in trace replay: the causal hybrid rule (`hybrid`) and the per-step hindsight bound (`oracle-step`).

A per-request plan (one proposer, one gamma) is what every policy but these decides. A per-step plan chooses the
source of each step's draft, and its length, at the step. In trace replay (benchmarks/traces/README.md) a step
that starts at output position p and drafts L tokens with proposer s emits ``min(accept_runs[s][p], L + 1)``.

**The hybrid** (`HybridRule`, proposer "hybrid": n-gram lookup plus a model head) is causal: at position p it
decides from the lookup runs of positions < p only, each read as far as it is observable at p. A lookup draft
started at q < p has been checked against the tokens emitted since (q .. p - 1) but not beyond, so at p the rule
knows ``min(run[q], p - q + 1)`` and nothing else (``run[q] >= p - q + 1``: "the draft from q predicted every
token emitted since"). The match in progress at p is

    m(p) = the largest m <= window such that run[p - j] >= j + 1 for every j = 1..m

(the lookup drafts started at each of the last m positions all still hold: the output is inside a copied
stretch, as suffix decoding sees a long suffix match). Each test reads run[p - j] only through
``min(run[p - j], j + 1)``. The rule: lookup when ``m(p) >= min_match``, drafting
``L = min(cap, floor(multiplier * m(p)) + 1)`` tokens (the draft length follows the match); the head with the
request's gamma otherwise. `cap` is ``lookup_cap`` (default: the simulation's max gamma, the bound on every
draft). The head's runs and run[p] itself are never read: tests/bench/test_stepwise.py perturbs the runs at
positions >= p, and the unobservable part of earlier runs, and checks that every decision up to p stands.
The hybrid's lookup runs at every step (the match must be tracked), so each of its steps pays the lookup's
cost, and its head steps also the head's: in a batch it joins the lookup group every step and the head's
group on its head steps (the head's call runs if any request drafts with it).

**oracle-step** (`step_bound_plan`) is an oracle: it reads every run. At batch 1 it is the exact optimum over
per-step plans: a dynamic program over output positions, T(p) = min over actions a of cost(a, p) + T(p + e(a, p)),
actions being off (one token) and each offered proposer the trace has runs for at each length 1..bound, with
the truth step-time model of the simulated engine (verify of L + 1 tokens at the request's context plus that
proposer's drafting). It minimises the request's decode time, i.e. maximises its tokens per second at batch 1.
In a batch the per-position plan of that program is replayed as it is (a bound at batch 1, a heuristic above).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adaptspec.bench.traces import TraceRequest
from adaptspec.control.hybrid_rule import HybridRule, walk_hybrid
from adaptspec.control.types import PROPOSERS

__all__ = ["HybridRule", "StepPlan", "hybrid_plan", "mean_emitted", "step_bound_plan", "walk_hybrid"]

_INDEX = {p: i for i, p in enumerate(PROPOSERS)}


class StepPlan:
    """A traced request's per-position plan: a step starting at output position p drafts `length[p]` tokens with
    proposer `source[p]` (a PROPOSERS index; length 0: no draft) and emits min(that proposer's run[p], length + 1).

    `head`: the proposer whose length the step's gamma cap binds (the hybrid's model head: the request's gamma,
    capped by a batch schedule; None: nothing capped but by the engine's worker-wide cap). `lookup_always`: the
    lookup runs at every step (the hybrid), so the request pays it on head steps too."""

    __slots__ = ("source", "length", "runs", "head", "lookup_always", "n")

    def __init__(self, source: np.ndarray, length: np.ndarray, runs: dict[int, Sequence[int]],
                 head: int | None = None, lookup_always: bool = False) -> None:
        self.source = [int(x) for x in source]
        self.length = [int(x) for x in length]
        self.runs = {k: list(v) for k, v in runs.items()}
        self.head = head
        self.lookup_always = lookup_always
        self.n = len(self.source)

    def step(self, pos: int, head_cap: int, cap: int | None = None) -> tuple[int, int, int]:
        """(proposer index, drafted tokens, emitted tokens) of the step that starts at `pos`."""
        if pos >= self.n:
            pos = self.n - 1
        src, length = self.source[pos], self.length[pos]
        if src == self.head:
            length = min(length, head_cap)
        if cap is not None:
            length = min(length, cap)
        if length <= 0 or src == 0:
            return 0, 0, 1
        r = self.runs[src][pos]
        return src, length, r if r < length + 1 else length + 1


def hybrid_plan(req: TraceRequest, head: str, gamma: int, bound: int, rule: HybridRule) -> StepPlan:
    """The hybrid's plan for `req`: lookup (`ngram`) where `rule` says, `head` with `gamma` elsewhere."""
    lk = rule.lookup_lengths(req.accept_runs["ngram"], min(bound, req.max_k))
    source = np.where(lk > 0, _INDEX["ngram"], _INDEX[head])
    length = np.where(lk > 0, lk, gamma)
    return StepPlan(source, length, {_INDEX["ngram"]: req.accept_runs["ngram"], _INDEX[head]: req.accept_runs[head]},
                    head=_INDEX[head], lookup_always=True)


def step_bound_plan(req: TraceRequest, proposers: Sequence[str], bound: int, cost: object) -> tuple[StepPlan, float]:
    """oracle-step's plan for `req` (module doc) and its decode seconds at batch 1. `cost`: simulator.StepCost."""
    n = req.output_tokens
    srcs = [p for p in proposers if p in req.accept_runs and p != "none"]
    bound = max(0, min(bound, req.max_k))
    best_t = np.zeros(n + 1)
    act_src = np.zeros(n, dtype=np.int64)
    act_len = np.zeros(n, dtype=np.int64)
    runs = {p: req.accept_runs[p] for p in srcs}
    lengths = np.arange(1, bound + 1)
    for p in range(n - 1, 0, -1):
        ctx = req.prompt_tokens + p
        t_off = cost.verify_time(1, ctx)
        best, bs, bl = t_off + best_t[p + 1], 0, 0
        verify = [cost.verify_time(int(g) + 1, ctx) for g in lengths]
        for s in srcs:
            r = runs[s][p]
            for g, v in zip(lengths, verify, strict=True):
                g = int(g)
                if g > max(r - 1, 1):  # a draft longer than run - 1 emits no more and costs no less
                    break
                e = r if r < g + 1 else g + 1
                t = v + cost.draft_time(s, np.array([g]), ctx, verify_s=v) + best_t[min(p + e, n)]
                if t < best:
                    best, bs, bl = t, _INDEX[s], g
        best_t[p] = best
        act_src[p], act_len[p] = bs, bl
    plan = StepPlan(act_src, act_len, {_INDEX[s]: runs[s] for s in srcs})
    return plan, float(best_t[1]) if n > 1 else 0.0


def mean_emitted(plan: StepPlan, gamma: int = 10**6) -> float:
    """Mean tokens per decode step of walking `plan` from position 1 (batch 1, no caps): for tests and reports."""
    pos, steps = 1, 0
    while pos < plan.n:
        pos += plan.step(pos, gamma)[2]
        steps += 1
    return (plan.n - 1) / steps if steps else 1.0
