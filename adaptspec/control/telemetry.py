"""Step telemetry: the cumulative engine counters from which a worker's step-time model is fitted online.

Every worker kind (the reference worker, vLLM with the adaptspec plugin, the simulator) exports the same
cumulative counters. Over any scrape window the deltas satisfy, for a linear step-time model,

    step_seconds = o * steps + c * batched_tokens + k * kv_tokens
                   + sum_p (e_p * draft_calls[p] + a_p * draft_passes[p] + b_p * drafted_tokens[p])

so a least-squares fit needs no per-step samples: 250 ms scrapes are enough, and a window may hold any
number of steps. `batched_tokens` counts every token through the target forward (decode, drafted tokens
being verified, prefill); `kv_tokens` sums, over steps, the context tokens the step attends to;
`draft_passes` counts a model proposer's (draft model / EAGLE head) batched forward passes, and
`drafted_tokens` the tokens it proposed (n-gram lookup has tokens, no passes); `draft_calls` counts the steps in
which a model proposer ran at all (one call of max(k) passes: a head whose cost is per drafting step, not per pass,
is priced by it); `requests` sums the requests in each step (so kv_tokens / requests is the mean context of a
request in a step). An engine that does not count calls leaves them empty (their coefficient keeps the prior).

Prometheus names (counters; the client adds `_total`), with PromQL for the mean step time:

    adaptspec:engine_steps                              rate(adaptspec:engine_step_seconds_total[1m])
    adaptspec:engine_step_seconds                         / rate(adaptspec:engine_steps_total[1m])
    adaptspec:engine_batched_tokens
    adaptspec:engine_kv_tokens
    adaptspec:engine_drafted_tokens{proposer="..."}
    adaptspec:engine_draft_passes{proposer="..."}
    adaptspec:engine_draft_calls{proposer="..."}
    adaptspec:engine_step_requests
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

METRIC_STEPS = "adaptspec:engine_steps"
METRIC_STEP_SECONDS = "adaptspec:engine_step_seconds"
METRIC_BATCHED_TOKENS = "adaptspec:engine_batched_tokens"
METRIC_KV_TOKENS = "adaptspec:engine_kv_tokens"
METRIC_DRAFTED_TOKENS = "adaptspec:engine_drafted_tokens"  # label: proposer
METRIC_DRAFT_PASSES = "adaptspec:engine_draft_passes"  # label: proposer
METRIC_DRAFT_CALLS = "adaptspec:engine_draft_calls"  # label: proposer
METRIC_STEP_REQUESTS = "adaptspec:engine_step_requests"  # requests in a step, summed over steps


@dataclass(frozen=True)
class StepCounters:
    """Cumulative step counters of one worker (or the deltas of one window, from `since`)."""

    steps: float = 0.0
    step_seconds: float = 0.0
    batched_tokens: float = 0.0
    kv_tokens: float = 0.0
    drafted_tokens: Mapping[str, float] = field(default_factory=dict)  # proposer -> tokens drafted
    draft_passes: Mapping[str, float] = field(default_factory=dict)  # proposer -> batched model passes
    requests: float = 0.0  # requests in each step, summed (0: the engine does not count them)
    draft_calls: Mapping[str, float] = field(default_factory=dict)  # proposer -> steps its model ran in

    def since(self, earlier: StepCounters) -> StepCounters | None:
        """The window's deltas, or None when a counter went down (the engine restarted: start over)."""
        scalars = (self.steps - earlier.steps, self.step_seconds - earlier.step_seconds,
                   self.batched_tokens - earlier.batched_tokens, self.kv_tokens - earlier.kv_tokens)
        drafted = _delta(self.drafted_tokens, earlier.drafted_tokens)
        passes = _delta(self.draft_passes, earlier.draft_passes)
        calls = _delta(self.draft_calls, earlier.draft_calls)
        requests = self.requests - earlier.requests
        if min(scalars) < 0 or requests < 0 or drafted is None or passes is None or calls is None:
            return None
        return StepCounters(*scalars, drafted_tokens=drafted, draft_passes=passes, requests=requests,
                            draft_calls=calls)

    def add_step(self, seconds: float, batched_tokens: float, kv_tokens: float,
                 drafted_tokens: Mapping[str, float] | None = None,
                 draft_passes: Mapping[str, float] | None = None, requests: float = 0.0) -> StepCounters:
        """These counters after one more step (for engines and simulators that count step by step); a model
        proposer with passes in this step made one call."""
        calls = {p: 1.0 for p, v in (draft_passes or {}).items() if v > 0}
        return StepCounters(self.steps + 1, self.step_seconds + seconds, self.batched_tokens + batched_tokens,
                            self.kv_tokens + kv_tokens, _plus(self.drafted_tokens, drafted_tokens or {}),
                            _plus(self.draft_passes, draft_passes or {}), self.requests + requests,
                            _plus(self.draft_calls, calls))


def _delta(now: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float] | None:
    out = {p: float(v) - float(before.get(p, 0.0)) for p, v in now.items()}
    if any(v < 0 for v in out.values()) or any(p not in now for p in before):
        return None
    return out


def _plus(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    out = dict(a)
    for p, v in b.items():
        out[p] = out.get(p, 0.0) + float(v)
    return out
