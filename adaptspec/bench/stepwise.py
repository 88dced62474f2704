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
from dataclasses import dataclass

import numpy as np

from adaptspec.bench.traces import TraceRequest
from adaptspec.control.shadow import ShadowStats, _Counts
from adaptspec.control.types import PROPOSERS

_INDEX = {p: i for i, p in enumerate(PROPOSERS)}


@dataclass(frozen=True)
class HybridRule:
    """The causal per-step rule of proposer "hybrid" in trace replay (module doc).

    min_match: lookup drafts when the match in progress m(p) is at least this (tokens the lookup predicted
      in a row, up to the last one emitted);
    multiplier: lookup draft length = floor(multiplier * m(p)) + 1, at most the cap;
    lookup_cap: the longest lookup draft (None: the simulation's max gamma);
    window: the longest match looked back on (m(p) <= window).
    """

    min_match: int = 2
    multiplier: float = 2.0
    lookup_cap: int | None = None
    window: int = 32

    def __post_init__(self) -> None:
        if self.min_match < 1 or self.window < self.min_match or not self.multiplier > 0:
            raise ValueError(f"bad hybrid rule {self!r}: need 1 <= min_match <= window and multiplier > 0")
        if self.lookup_cap is not None and self.lookup_cap < 1:
            raise ValueError(f"lookup_cap must be >= 1, got {self.lookup_cap}")

    def matches(self, lookup_runs: Sequence[int]) -> np.ndarray:
        """m(p) for every output position p (module doc), from positions < p as observable at p."""
        r = np.asarray(lookup_runs, dtype=np.int64)
        n = len(r)
        m = np.zeros(n, dtype=np.int64)
        held = np.ones(n, dtype=bool)
        for j in range(1, min(self.window, n - 1) + 1):
            ok = np.zeros(n, dtype=bool)
            ok[j:] = np.minimum(r[: n - j], j + 1) == j + 1  # observable at p: run[p - j] >= j + 1
            held &= ok
            if not held.any():
                break
            m += held
        return m

    def lookup_lengths(self, lookup_runs: Sequence[int], bound: int) -> np.ndarray:
        """The lookup draft length at every position, 0 where the head drafts."""
        m = self.matches(lookup_runs)
        cap = max(1, min(bound, self.lookup_cap or bound))
        length = np.minimum(np.floor(self.multiplier * m).astype(np.int64) + 1, cap)
        return np.where(m >= self.min_match, length, 0)


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




def walk_hybrid(lookup_runs: Sequence[int], output_tokens: int, rule: HybridRule, bound: int) -> ShadowStats:
    """The hybrid's lookup steps along a request's recorded n-gram runs, whatever it ran with (the rule reads
    only lookup runs, so its lookup steps are known on every request, as the n-gram shadow is): from position
    1, a position where `rule` looks up drafts its length L and emits min(run, L + 1) (a drafting step); every
    other position is one the head covers (a step that drafts nothing here, one position on). `steps`: lookup
    steps + head positions, `drafts`: lookup steps, per position tried / accepted of the lookup drafts (a draft
    accepted to its length, shorter than `bound`, counts the next position tried and not accepted: the rates
    then give the lookup steps' mean emitted tokens, whatever lengths the rule drafted): what a
    replayed hybrid request reports for its lookup steps (bench/simulator.py), and what
    `costmodel.stepwise_hybrid` prices from (the head's steps cover E_H positions each)."""
    n = min(output_tokens, len(lookup_runs))
    counts = _Counts(max(bound, 1))
    if n <= 1 or bound < 1:
        return counts.stats()
    lengths = rule.lookup_lengths(lookup_runs[:n], bound)
    i = 1
    while i < n:
        length = int(lengths[i])
        if length > 0:
            a = min(max(int(lookup_runs[i]), 1), length + 1) - 1
            counts.step(length, a, bound)  # a draft run to its length stops there: tried, not accepted
            i += a + 1
        else:
            counts.step(0, 0, 0)
            i += 1
    return counts.stats()
