"""Prometheus exposition of the reference worker, with vLLM's metric names and labels.

The proxy's vLLM scraper reads this endpoint unchanged, so names, types and labels follow vLLM v1
(`engine="0"`, `model_name="<served name>"`; per-position counters carry `position="<i>"`, 0-based).
Derived quantities, in PromQL:

    acceptance rate (alpha)     rate(vllm:spec_decode_num_accepted_tokens_total[5m])
                                  / rate(vllm:spec_decode_num_draft_tokens_total[5m])
    mean acceptance length      1 + rate(vllm:spec_decode_num_accepted_tokens_total[5m])
                                      / rate(vllm:spec_decode_num_drafts_total[5m])
    alpha by content class      rate(adaptspec:spec_decode_num_accepted_tokens_by_class_total[5m])
                                  / rate(adaptspec:spec_decode_num_draft_tokens_by_class_total[5m])

Step telemetry (adaptspec/control/telemetry.py: steps, step seconds, batched / KV tokens, drafted tokens and
draft passes by `proposer`, from the closed set ngram / draft / eagle / hybrid) feeds the proxy's online
step-time calibration; mean step time: rate(adaptspec:engine_step_seconds_total[1m])
/ rate(adaptspec:engine_steps_total[1m]).

Gamma schedules: `adaptspec:engine_steps_by_gamma_total{gamma}` counts request-steps by the gamma each step
allowed (the sum of the finished requests' `usage.speculative.steps_by_gamma`); the share of steps a schedule
capped below the decision's gamma shows as steps at the lower gammas.

Request latency histograms, under vLLM's names and buckets so one dashboard panel reads both engines
(`vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds` (one observation per engine output
after the first: a step that emitted several speculated tokens counts once, as vLLM counts iterations),
`vllm:e2e_request_latency_seconds` (finished requests), `vllm:request_queue_time_seconds` (queued before
joining the running batch)); times from the request's arrival at the engine (parsed and tokenised), e.g.

    histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))

The gauges and speculation counters come from the engine's own snapshot (`Engine.metrics()`); token and
request counters and the latency histograms are kept by the server as responses stream and finish.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from adaptspec.control import metric_names as names
from adaptspec.control import telemetry
from adaptspec.control.types import DRAFTING_PROPOSERS

STEP_PROPOSERS = DRAFTING_PROPOSERS  # the closed label set of the per-proposer counters

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's default buckets (vllm/v1/metrics/buckets.py), so quantiles match across the two engines
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    """Bucket counts and sum of one unlabelled histogram (the caller holds the lock)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            acc += n
            out.append((bound, float(acc)))
        return out


class ServerCounters:
    """Token and request counters kept by the HTTP layer (thread-safe; bumped once per finished request)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.request_success: dict[str, int] = defaultdict(int)  # finished_reason -> count
        self.steps_by_gamma: dict[int, int] = defaultdict(int)  # gamma the step allowed -> request-steps
        self.latency = {names.VLLM_TTFT: Histogram(TTFT_BUCKETS), names.VLLM_ITL: Histogram(ITL_BUCKETS),
                        names.VLLM_E2E: Histogram(REQUEST_LATENCY_BUCKETS),
                        names.VLLM_QUEUE_TIME: Histogram(REQUEST_LATENCY_BUCKETS)}

    def add_steps_by_gamma(self, steps_by_gamma: Mapping[int, int]) -> None:
        """A request's steps by the gamma each allowed it (usage.speculative.steps_by_gamma)."""
        with self._lock:
            for gamma, n in steps_by_gamma.items():
                self.steps_by_gamma[int(gamma)] += int(n)

    def steps_by_gamma_rows(self) -> list[tuple[int, int]]:
        with self._lock:
            return sorted(self.steps_by_gamma.items())

    def latency_snapshot(self) -> dict[str, tuple[list[tuple[str, float]], float]]:
        """{histogram name: (cumulative buckets, sum)}, read under the lock."""
        with self._lock:
            return {name: (h.cumulative(), h.sum) for name, h in self.latency.items()}

    def first_output(self, ttft_s: float, queue_s: float) -> None:
        with self._lock:
            self.latency[names.VLLM_TTFT].observe(ttft_s)
            self.latency[names.VLLM_QUEUE_TIME].observe(queue_s)

    def next_output(self, gap_s: float) -> None:
        with self._lock:
            self.latency[names.VLLM_ITL].observe(gap_s)

    def finished(self, prompt_tokens: int, generation_tokens: int, finish_reason: str | None,
                 e2e_s: float | None = None) -> None:
        with self._lock:
            if e2e_s is not None:
                self.latency[names.VLLM_E2E].observe(e2e_s)
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens
            if finish_reason in ("stop", "length"):
                self.request_success[finish_reason] += 1

    def aborted(self, prompt_tokens: int, generation_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens


def _field(snapshot: Any, name: str, default: Any = 0) -> Any:
    if isinstance(snapshot, Mapping):
        return snapshot.get(name, default)
    return getattr(snapshot, name, default)


class _Collector:
    def __init__(self, snapshot: Any, counters: ServerCounters, model_name: str) -> None:
        self.snapshot, self.counters, self.model_name = snapshot, counters, model_name

    def collect(self) -> Iterator[Metric]:
        s, base = self.snapshot, ["engine", "model_name"]
        labels = ["0", self.model_name]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=base)
            g.add_metric(labels, float(value))
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=base)
            c.add_metric(labels, float(value))
            return c

        yield gauge(names.VLLM_RUNNING, "Number of requests in model execution batches.",
                    _field(s, "running"))
        yield gauge(names.VLLM_WAITING, "Number of requests waiting to be processed.",
                    _field(s, "waiting"))
        yield gauge(names.VLLM_KV_USAGE, "KV-cache usage. 1 means 100 percent usage.",
                    _field(s, "kv_cache_usage"))

        c = self.counters
        yield counter(names.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.", c.prompt_tokens)
        yield counter(names.VLLM_GENERATION_TOKENS, "Number of generation tokens processed.", c.generation_tokens)
        succ = CounterMetricFamily(names.VLLM_REQUEST_SUCCESS, "Count of successfully processed requests.",
                                   labels=["engine", "finished_reason", "model_name"])
        for reason in ("stop", "length"):
            succ.add_metric(["0", reason, self.model_name], float(c.request_success.get(reason, 0)))
        yield succ
        yield from _latency_families(c, base, labels)
        by_gamma = CounterMetricFamily(names.ENGINE_STEPS_BY_GAMMA, "Request-steps by the gamma the step allowed "
                                       "the request (0: none; gamma schedules cap it by the running batch).",
                                       labels=[*base, "gamma"])
        for gamma, n in c.steps_by_gamma_rows():
            by_gamma.add_metric([*labels, str(gamma)], float(n))
        yield by_gamma

        yield counter(names.VLLM_SPEC_DRAFTS, "Number of spec decoding drafts.",
                      _field(s, "spec_num_drafts"))
        yield counter(names.VLLM_SPEC_DRAFT_TOKENS, "Number of draft tokens.",
                      _field(s, "spec_num_draft_tokens"))
        yield counter(names.VLLM_SPEC_ACCEPTED, "Number of accepted tokens.",
                      _field(s, "spec_num_accepted_tokens"))
        per_pos = CounterMetricFamily(names.VLLM_SPEC_PER_POS,
                                      "Accepted tokens per draft position.",
                                      labels=["engine", "model_name", "position"])
        for pos, value in enumerate(_field(s, "spec_accepted_per_pos", ()) or ()):
            per_pos.add_metric(["0", self.model_name, str(pos)], float(value))
        yield per_pos

        by_class: Mapping[tuple[str, str], Iterable[float]] = _field(s, "spec_by_class", {}) or {}
        families = [
            CounterMetricFamily(name, doc, labels=["engine", "model_name", "content_class", "proposer"])
            for name, doc in ((names.CLASS_SPEC_DRAFTS, "Spec decoding drafts by request content class and proposer."),
                              (names.CLASS_SPEC_DRAFT_TOKENS, "Draft tokens by request content class and proposer."),
                              (names.CLASS_SPEC_ACCEPTED, "Accepted tokens by request content class and proposer."))
        ]
        for (cls, proposer), values in sorted(by_class.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
            for family, value in zip(families, values, strict=True):
                family.add_metric(["0", self.model_name, cls or "unknown", proposer], float(value))
        yield from families
        yield from _step_families(_field(s, "step_counters", None), base, labels)
        if _field(s, "num_generated_tokens", None) is not None:
            yield counter(names.ENGINE_OUTPUT_TOKENS, "Output tokens the engine emitted, counted at every step.",
                          _field(s, "num_generated_tokens"))


_LATENCY_DOCS = {
    names.VLLM_TTFT: "Histogram of time to first token in seconds.",
    names.VLLM_ITL: "Histogram of inter-token latency in seconds (one observation per engine output).",
    names.VLLM_E2E: "Histogram of e2e request latency in seconds.",
    names.VLLM_QUEUE_TIME: "Histogram of time spent in WAITING phase for request.",
}


def _latency_families(counters: ServerCounters, base: list[str], labels: list[str]) -> Iterator[Metric]:
    for name, (buckets, total) in counters.latency_snapshot().items():
        h = HistogramMetricFamily(name, _LATENCY_DOCS[name], labels=base)
        h.add_metric(labels, buckets, total)
        yield h


def _step_families(steps: telemetry.StepCounters | None, base: list[str], labels: list[str]) -> Iterator[Metric]:
    """The step-telemetry counters (names without `_total`: the client adds it)."""
    if steps is None:
        return
    for name, doc, value in (
            (telemetry.METRIC_STEPS, "Engine steps (one target forward each).", steps.steps),
            (telemetry.METRIC_STEP_SECONDS, "Wall seconds of engine steps, drafting included.", steps.step_seconds),
            (telemetry.METRIC_BATCHED_TOKENS, "Tokens through the target forward (decode, drafts, prefill).",
             steps.batched_tokens),
            (telemetry.METRIC_KV_TOKENS, "Context tokens attended, summed over steps.", steps.kv_tokens),
            (telemetry.METRIC_STEP_REQUESTS, "Requests in each step, summed over steps.", steps.requests)):
        c = CounterMetricFamily(name, doc, labels=base)
        c.add_metric(labels, float(value))
        yield c
    for name, doc, values in (
            (telemetry.METRIC_DRAFTED_TOKENS, "Tokens drafted, by proposer.", steps.drafted_tokens),
            (telemetry.METRIC_DRAFT_PASSES, "Batched draft-model passes, by proposer.", steps.draft_passes),
            (telemetry.METRIC_DRAFT_CALLS, "Steps in which a draft model ran, by proposer.", steps.draft_calls)):
        c = CounterMetricFamily(name, doc, labels=[*base, "proposer"])
        for p in STEP_PROPOSERS:
            c.add_metric([*labels, p], float(values.get(p, 0.0)))
        yield c


def render(snapshot: Any, counters: ServerCounters, model_name: str) -> bytes:
    """The exposition text for one scrape (a fresh registry: nothing global, nothing `_created`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snapshot, counters, model_name))
    return generate_latest(registry)
