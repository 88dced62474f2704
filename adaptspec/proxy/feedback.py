"""Acceptance feedback -> alpha estimates: per-request stats and scraped counters, never both.

Sources, in order of preference for one worker:

1. per-request stats in the response: `usage.speculative {draft_tokens, accepted_tokens}` (adaptspec
   worker), or `metrics.speculative_decoding {num_draft_tokens, num_accepted_tokens}` (vLLM with the
   adaptspec plugin). Exact, attributed to this request's (proposer, class), and naturally split between
   proxy replicas (each sees only its own responses). Workers of engine `adaptspec` always use this, and
   any worker switches to it for good once a response carries such stats.
2. scraped per-class counters `adaptspec:spec_decode_num_*_by_class_total{content_class, proposer}`.
3. scraped global counters `vllm:spec_decode_num_{draft,accepted}_tokens_total` (fixed-speculation
   vLLM/SGLang without the plugin): the delta is split over content classes in proportion to the output
   tokens this proxy received from the worker per class since the last scrape (same alpha for all
   classes in one interval; skipped when the proxy sent it nothing).

Counters are ingested only by the replica holding the worker's lease (state.RedisState), and deltas
survive counter resets (a restarted worker starts again from zero). For a worker in per-request mode
the counter baselines are still tracked, so nothing is counted twice if it changes mode.
"""

from __future__ import annotations

import logging

from adaptspec.control.estimators import CounterTracker

log = logging.getLogger(__name__)


def _num(d: dict, *names: str) -> float | None:
    for n in names:
        v = d.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def spec_stats(payload: dict) -> tuple[float, float, list[float] | None] | None:
    """(draft_tokens, accepted_tokens, accepted_per_position) from a response or final stream chunk."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    if not isinstance(spec, dict):
        metrics = payload.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return None
    draft = _num(spec, "draft_tokens", "num_draft_tokens")
    accepted = _num(spec, "accepted_tokens", "num_accepted_tokens")
    if draft is None or accepted is None:
        return None
    per_pos = spec.get("accepted_per_position") or spec.get("num_accepted_tokens_per_pos")
    if not (isinstance(per_pos, list) and all(isinstance(x, (int, float)) for x in per_pos)):
        per_pos = None
    return draft, min(accepted, draft), per_pos


class Feedback:
    def __init__(self, proxy) -> None:
        self.proxy = proxy
        self._trackers: dict[str, CounterTracker] = {}
        self._class_tokens: dict[str, dict[str, float]] = {}  # worker -> class -> output tokens since scrape

    # -- per request -------------------------------------------------------------------------------
    def on_response(self, worker, content_class: str, proposer: str, output_tokens: float,
                    stats: tuple[float, float, list[float] | None] | None) -> None:
        m = self.proxy.metrics
        if output_tokens > 0:
            m.output_tokens.labels(worker.name, proposer, content_class).inc(output_tokens)
            ct = self._class_tokens.setdefault(worker.name, {})
            ct[content_class] = ct.get(content_class, 0.0) + output_tokens
        if stats is None:
            return
        draft, accepted, per_pos = stats
        worker.request_feedback = True
        if draft <= 0 or proposer == "none":
            return
        m.draft_tokens.labels(worker.name, proposer, content_class).inc(draft)
        m.accepted_tokens.labels(worker.name, proposer, content_class).inc(accepted)
        self.proxy.state.observe(worker.name, proposer, content_class, draft, accepted, per_pos)

    # -- scraped counters --------------------------------------------------------------------------
    def on_sample(self, worker, sample) -> None:
        tracker = self._trackers.get(worker.name)
        if tracker is None:
            tracker = self._trackers[worker.name] = CounterTracker()
        class_tokens = self._class_tokens.pop(worker.name, {})
        ingest = (not worker.request_feedback and worker.engine != "adaptspec"
                  and self.proxy.state.counter_leader(worker.name))
        if sample.by_class:
            for (cls, proposer), (_drafts, draft_tokens, accepted) in sample.by_class.items():
                d = tracker.delta((cls, proposer, "draft"), draft_tokens)
                a = tracker.delta((cls, proposer, "accepted"), accepted)
                if ingest and d > 0 and proposer != "none":
                    self.proxy.state.observe(worker.name, proposer, cls, d, min(a, d))
            return
        if sample.draft_tokens is None or sample.accepted_tokens is None:
            return
        d = tracker.delta(("*", "*", "draft"), sample.draft_tokens)
        a = tracker.delta(("*", "*", "accepted"), sample.accepted_tokens)
        proposer, gamma = worker.fixed_plan()
        total = sum(class_tokens.values())
        if not ingest or d <= 0 or gamma == 0 or total <= 0:
            return
        for cls, tokens in class_tokens.items():
            share = tokens / total
            self.proxy.state.observe(worker.name, proposer, cls, d * share, min(a, d) * share)
