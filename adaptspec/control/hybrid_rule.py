"""The per-step hybrid's causal rule (`HybridRule`) and its lookup steps walked along a request's n-gram runs
(`walk_hybrid`): what trace replay runs as proposer "hybrid" (bench/stepwise.py, whose module doc states the
rule and its causality) and what the reference worker scores along every request's output as the hybrid's
shadow (`hybrid_shadow` below, worker/server.py), so that the hybrid's key learns from every
request, as the n-gram key does, not only from the requests that ran it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from adaptspec.control.shadow import NgramIndex, PositionCounts, ShadowStats, index_over


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
    counts = PositionCounts(max(bound, 1))
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


def lookup_runs(prompt_ids: Sequence[int], output_ids: Sequence[int], bound: int,
                lookup: tuple[int, int] | NgramIndex, earliest: bool = False) -> np.ndarray:
    """A request's n-gram runs in the trace form (benchmarks/traces/README.md): runs[i], the tokens a step at
    output position i emits when prompt lookup drafts up to `bound` tokens there from the text before it (1 +
    the draft's tokens that the output repeats), at most what the output has left; position 0 (the prefill's
    token) is 1. `lookup`: the n-gram proposer's (min_n, max_n), or an `NgramIndex` over prompt + output."""
    seq = np.asarray([*prompt_ids, *output_ids], dtype=np.int64)
    p, n = len(prompt_ids), len(output_ids)
    runs = np.ones(n, dtype=np.int64)
    if n < 2 or bound < 1:
        return runs
    index = index_over(seq, lookup, earliest)
    for i in range(1, n):
        draft = index.lookup(p + i, min(bound, n - i - 1))
        if draft.size:
            same = draft == seq[p + i:p + i + draft.size]
            runs[i] = 1 + (draft.size if same.all() else int(np.argmin(same)))
    return runs


def hybrid_shadow(prompt_ids: Sequence[int], output_ids: Sequence[int], rule: HybridRule, bound: int,
                  lookup: tuple[int, int] | NgramIndex) -> ShadowStats:
    """The hybrid's lookup steps along a finished request's output, whatever it ran with (`walk_hybrid` over its
    `lookup_runs`): the reference worker's `usage.speculative.shadow.hybrid`, what trace replay reports for a
    traced request (bench/simulator.py `_shadows`)."""
    runs = lookup_runs(prompt_ids, output_ids, bound, lookup)
    return walk_hybrid(runs, len(output_ids), rule, bound)


# The rules a per-step hybrid may run with, from cautious to eager: each is walked along every finished request's
# n-gram runs (its lookup steps are exact whatever the request ran with), so every rule has evidence on every
# request and none can be locked out; `RuleBook` keeps that evidence per (worker, class) and the cost-model
# policy runs a class's hybrid requests with the rule that prices best (`CostModelPolicy.hybrid_rule`).
RULES: dict[str, HybridRule] = {
    "m2x2": HybridRule(),  # the default: lookup from a 2-token match, 2m + 1 tokens
    "m1x2": HybridRule(min_match=1),
    "m1x4": HybridRule(min_match=1, multiplier=4.0),
    "m4x2": HybridRule(min_match=4),
}
DEFAULT_RULE = "m2x2"


def walk_rules(runs: Sequence[int], output_tokens: int, bound: int,
               rules: dict[str, HybridRule] = RULES) -> dict[str, ShadowStats]:
    """Every rule walked along one request's n-gram runs (`walk_hybrid`): what `RuleBook` learns from, what the
    reference worker reports as `usage.speculative.hybrid_rules`."""
    return {name: walk_hybrid(runs, output_tokens, rule, bound) for name, rule in rules.items()}


def rule_error(rule: object, proposer: str) -> str | None:
    """Why `speculation.hybrid_rule` cannot run (None: it can): a `RULES` name, with proposer hybrid only."""
    if rule is None or (isinstance(rule, str) and rule in RULES and proposer == "hybrid"):
        return None
    return (f"speculation.hybrid_rule must be one of {', '.join(RULES)} with proposer 'hybrid'; got {rule!r} "
            f"with proposer {proposer!r}")


class _Tally:
    """Discounted sums of one rule's walks: steps, lookup steps, and per draft position tried / accepted."""

    __slots__ = ("steps", "drafts", "tried", "acc")

    def __init__(self) -> None:
        self.steps = self.drafts = 0.0
        self.tried = np.zeros(0)
        self.acc = np.zeros(0)

    def add(self, s: ShadowStats, keep: float) -> None:
        n = max(len(self.tried), len(s.tried_per_position))
        tried, acc = np.zeros(n), np.zeros(n)
        tried[:len(self.tried)], acc[:len(self.acc)] = self.tried * keep, self.acc * keep
        tried[:len(s.tried_per_position)] += s.tried_per_position
        acc[:len(s.accepted_per_position)] += s.accepted_per_position
        self.tried, self.acc = tried, acc
        self.steps = self.steps * keep + s.steps
        self.drafts = self.drafts * keep + s.drafts

    def rates(self) -> list[float]:
        """Per-position conditional acceptance of the lookup drafts (a position no draft reached: 0)."""
        return [float(a / t) if t > 0 else 0.0 for t, a in zip(self.tried, self.acc, strict=True)]

    @property
    def density(self) -> float:
        """Lookup steps / (lookup steps + positions the head covered): `costmodel.stepwise_hybrid`'s q."""
        return self.drafts / self.steps if self.steps > 0 else 0.0


class RuleBook:
    """Every rule's walks per (worker, class), discounted by `half_life` requests; `best` prices them.

    A class runs the default rule until `min_requests` of its requests were walked (the discounted count),
    and leaves it only for a rule priced at least `margin` better: the walks are exact, the price of the head's
    steps is the model's, so a small edge is not worth a change the model alone asserts."""

    def __init__(self, rules: dict[str, HybridRule] | None = None, half_life: float = 256.0,
                 min_requests: float = 8.0, margin: float = 0.01) -> None:
        self.rules = dict(rules or RULES)
        if DEFAULT_RULE not in self.rules:
            raise ValueError(f"the rule book needs the default rule {DEFAULT_RULE!r}")
        self.keep = 0.5 ** (1.0 / half_life)
        self.min_requests, self.margin = min_requests, margin
        self._n: dict[tuple[str, str], float] = {}
        self._tallies: dict[tuple[str, str], dict[str, _Tally]] = {}
        self._chosen: dict[tuple[str, str], str] = {}

    def walks(self, runs: Sequence[int], output_tokens: int, bound: int) -> dict[str, ShadowStats]:
        """Every rule of the book walked along one request's n-gram runs (`walk_rules`)."""
        return walk_rules(runs, output_tokens, bound, self.rules)

    def observe(self, worker: str, content_class: str, walks: dict[str, ShadowStats]) -> None:
        """One finished request's walks (`walks`, or the worker's report of them)."""
        key = (worker, content_class)
        self._n[key] = self._n.get(key, 0.0) * self.keep + 1.0
        tallies = self._tallies.setdefault(key, {})
        for name, stats in walks.items():
            if name in self.rules:
                tallies.setdefault(name, _Tally()).add(stats, self.keep)

    def evidence(self, worker: str, content_class: str) -> float:
        return self._n.get((worker, content_class), 0.0)

    def chosen(self, worker: str, content_class: str) -> str:
        """The rule `best` last chose for the class (the default before it chose)."""
        return self._chosen.get((worker, content_class), DEFAULT_RULE)

    def best(self, worker: str, content_class: str, goodput: Callable[[list[float], float], float]) -> str:
        """The rule whose walks price best: `goodput(lookup rates, lookup density)` per rule (the cost model's
        per-step hybrid at the request's gamma and the worker's batch)."""
        key = (worker, content_class)
        tallies = self._tallies.get(key)
        name = DEFAULT_RULE
        if tallies and DEFAULT_RULE in tallies and self._n.get(key, 0.0) >= self.min_requests:
            priced = {n: goodput(t.rates(), t.density) for n, t in tallies.items() if t.steps > 0}
            top = max(priced, key=lambda n: priced[n])
            if priced[top] >= priced.get(DEFAULT_RULE, 0.0) * (1.0 + self.margin):
                name = top
        self._chosen[key] = name
        return name
