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

The gauges and speculation counters come from the engine's own snapshot (`Engine.metrics()`); token and
request counters are counted by the server as responses finish.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from adaptspec.control import metric_names as names
from adaptspec.control import telemetry

STEP_PROPOSERS = ("ngram", "draft", "eagle", "hybrid")  # the closed label set of the per-proposer counters

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServerCounters:
    """Token and request counters kept by the HTTP layer (thread-safe; bumped once per finished request)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.request_success: dict[str, int] = defaultdict(int)  # finished_reason -> count

    def finished(self, prompt_tokens: int, generation_tokens: int, finish_reason: str | None) -> None:
        with self._lock:
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


def _step_families(steps: telemetry.StepCounters | None, base: list[str], labels: list[str]) -> Iterator[Metric]:
    """The step-telemetry counters (names without `_total`: the client adds it)."""
    if steps is None:
        return
    for name, doc, value in (
            (telemetry.METRIC_STEPS, "Engine steps (one target forward each).", steps.steps),
            (telemetry.METRIC_STEP_SECONDS, "Wall seconds of engine steps, drafting included.", steps.step_seconds),
            (telemetry.METRIC_BATCHED_TOKENS, "Tokens through the target forward (decode, drafts, prefill).",
             steps.batched_tokens),
            (telemetry.METRIC_KV_TOKENS, "Context tokens attended, summed over steps.", steps.kv_tokens)):
        c = CounterMetricFamily(name, doc, labels=base)
        c.add_metric(labels, float(value))
        yield c
    for name, doc, values in (
            (telemetry.METRIC_DRAFTED_TOKENS, "Tokens drafted, by proposer.", steps.drafted_tokens),
            (telemetry.METRIC_DRAFT_PASSES, "Batched draft-model passes, by proposer.", steps.draft_passes)):
        c = CounterMetricFamily(name, doc, labels=[*base, "proposer"])
        for p in STEP_PROPOSERS:
            c.add_metric([*labels, p], float(values.get(p, 0.0)))
        yield c


def render(snapshot: Any, counters: ServerCounters, model_name: str) -> bytes:
    """The exposition text for one scrape (a fresh registry: nothing global, nothing `_created`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snapshot, counters, model_name))
    return generate_latest(registry)
