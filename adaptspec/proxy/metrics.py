"""Prometheus metrics of `adaptspec serve` (names: docs/INTERFACES.md "Proxy metrics").

One `CollectorRegistry` per app (no module-level globals), exposed at `/metrics`. Counters and
histograms are updated on the request path; gauges that mirror live state (alpha estimates, worker
occupancy, state-backend status) are read from the app at scrape time by `StateCollector`, so the hot
path never touches them.

Label values: `gamma` is the decimal string; `proposer` is "none" when speculation is off; requests
rejected before a decision carry `content_class="unknown"`, `worker="none"`; requests that no speculating
worker could serve carry `content_class="unclassified"` (`server.classify: speculating`); `code` is the HTTP status
sent to the client (a stream cut by a dying worker counts as "502", one its worker stalled as "504"), one of
`CODES`; any other status a worker answers is counted under its class ("4xx", "5xx"), so that the label stays
bounded whatever workers send (`code!~"2.."` still selects every error).

Every label set is bounded, and the ones the request path can emit are created at zero at startup and on a
config reload (`ProxyMetrics.precreate`), as Prometheus' instrumentation practice recommends: /metrics
carries the same series from the first scrape to the last, its size does not step up as a rare combination
first occurs, and `rate()` sees a series' first increment. Created: for every content class, every worker
and each (proposer, gamma) it can apply (proposer "none" with gamma 0; with per-request speculation each of
its proposers with gamma 1..max_gamma, else its fixed plan): the decisions of the current policy; requests
by (class, proposer, worker) answered 200, 499, 502, 503 or 504, and the rejections before a decision; the
token counters; the latency histograms by (class, proposer). With the soak's config (2 workers, proposers
ngram and draft, max_gamma 8, 6 classes) /metrics is ~1,500 samples, ~138 KB, from the first scrape
(histogram buckets ~79 KB of it; benchmarks/soak.py, docs/scale-out.md). `adaptspec_requests` has no gamma
label (`adaptspec_decisions` has): with it, the series to create would be ~6x as many. Counters and
histograms carry no `_created` series (`exposition`): in the text format each is a gauge of its own, one per
series, that no query here reads.

Derived quantities (PromQL):

    # observed acceptance rate alpha per (worker, proposer, class), from per-request feedback
    sum by (worker, proposer, content_class) (rate(adaptspec_accepted_tokens_total[5m]))
      / sum by (worker, proposer, content_class) (rate(adaptspec_draft_tokens_total[5m]))

    # share of requests sent with speculation on
    sum(rate(adaptspec_requests_total{proposer!="none"}[5m])) / sum(rate(adaptspec_requests_total[5m]))

    # goodput: output tokens per second, per worker (or by proposer / content_class)
    sum by (worker) (rate(adaptspec_output_tokens_total[1m]))

    # accepted draft tokens per output token (how much of the output speculation produced)
    sum(rate(adaptspec_accepted_tokens_total[5m])) / sum(rate(adaptspec_output_tokens_total[5m]))

    # error ratio (non-2xx answers)
    sum(rate(adaptspec_requests_total{code!~"2.."}[5m])) / sum(rate(adaptspec_requests_total[5m]))

    # p50 / p99 time to first token by class; mean time per output token
    histogram_quantile(0.5, sum by (le, content_class) (rate(adaptspec_ttft_seconds_bucket[5m])))
    histogram_quantile(0.99, sum by (le) (rate(adaptspec_ttft_seconds_bucket[5m])))
    rate(adaptspec_tpot_seconds_sum[5m]) / rate(adaptspec_tpot_seconds_count[5m])

    # proxy cost per request (decision, and everything before the upstream call) p50
    histogram_quantile(0.5, rate(adaptspec_decision_seconds_bucket[5m]))
    histogram_quantile(0.5, rate(adaptspec_proxy_overhead_seconds_bucket[5m]))

    # decisions by policy and proposer; retries; Redis availability
    sum by (policy, proposer) (rate(adaptspec_decisions_total[5m]))
    sum by (worker) (rate(adaptspec_upstream_retries_total[5m]))
    min(adaptspec_state_backend_up)

    # pass-through traffic (proxy/passthrough.py) by endpoint; not in adaptspec_requests_total
    sum by (endpoint, code) (rate(adaptspec_passthrough_requests_total[5m]))

`adaptspec_proxy_overhead_seconds` is the time from the handler's start (request read) to the
upstream request being sent: body parsing, auth, classification, decision, body rewrite.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.values import MutexValue

from adaptspec.control.types import CONTENT_CLASSES

_LAT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
_FAST_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1)


class ProxyMetrics:
    """The proxy's counters and histograms, registered in their own registry."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("adaptspec_requests", "Requests answered, by decision and HTTP status",
                                ["content_class", "proposer", "worker", "code"], registry=r)
        self.decisions = Counter("adaptspec_decisions", "Policy decisions",
                                 ["content_class", "proposer", "gamma", "policy"], registry=r)
        self.draft_tokens = Counter("adaptspec_draft_tokens", "Draft tokens proposed (per-request feedback)",
                                    ["worker", "proposer", "content_class"], registry=r)
        self.accepted_tokens = Counter("adaptspec_accepted_tokens", "Draft tokens accepted (per-request feedback)",
                                       ["worker", "proposer", "content_class"], registry=r)
        self.shadow_draft_tokens = Counter(
            "adaptspec_shadow_draft_tokens", "N-gram lookup tokens scored along requests that ran without it "
            "(usage.speculative.shadow)", ["worker", "content_class"], registry=r)
        self.shadow_accepted_tokens = Counter(
            "adaptspec_shadow_accepted_tokens", "Of those, tokens the lookup would have had accepted",
            ["worker", "content_class"], registry=r)
        self.output_tokens = Counter("adaptspec_output_tokens", "Completion tokens returned",
                                     ["worker", "proposer", "content_class"], registry=r)
        self.ttft = Histogram("adaptspec_ttft_seconds", "Time to first token (first upstream byte for non-stream)",
                              ["content_class", "proposer"], buckets=_LAT_BUCKETS, registry=r)
        self.tpot = Histogram("adaptspec_tpot_seconds", "Time per output token after the first",
                              ["content_class", "proposer"], buckets=_TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("adaptspec_e2e_seconds", "Request latency end to end",
                             ["content_class", "proposer"], buckets=_LAT_BUCKETS, registry=r)
        self.overhead = Histogram("adaptspec_proxy_overhead_seconds",
                                  "Proxy time before the upstream call (parse, auth, classify, decide, rewrite)",
                                  buckets=_FAST_BUCKETS, registry=r)
        self.decision_time = Histogram("adaptspec_decision_seconds", "Classify + state read + policy.decide",
                                       buckets=_FAST_BUCKETS, registry=r)
        self.scrape_errors = Counter("adaptspec_scrape_errors", "Failed scrapes of a worker's /metrics",
                                     ["worker"], registry=r)
        self.retries = Counter("adaptspec_upstream_retries", "Requests moved off a worker that failed before "
                               "the first byte", ["worker"], registry=r)
        self.state_errors = Counter("adaptspec_state_backend_errors", "State backend (Redis) operation failures",
                                    ["backend"], registry=r)
        self.config_reloads = Counter("adaptspec_config_reloads", "Config reload attempts", ["result"], registry=r)
        self.passthrough = Counter("adaptspec_passthrough_requests", "Pass-through requests (embeddings, responses, "
                                   "tokenize, detokenize: no decision), by HTTP status",
                                   ["endpoint", "worker", "code"], registry=r)

        self._children: dict[tuple, object] = {}

    def child(self, metric, *labels: str):
        """`metric.labels(*labels)`, memoised: the request path pays a dict lookup, not label validation."""
        key = (id(metric), *labels)
        ch = self._children.get(key)
        if ch is None:
            ch = self._children[key] = metric.labels(*labels)
        return ch

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def precreate(self, workers: Iterable, policy: str, backend: str | None,
                  classes: Iterable[str] = CONTENT_CLASSES) -> None:
        """Create at zero the series the request path can emit with these workers and this policy (the
        module docstring lists them). Idempotent; a reload adds the new workers' series, none is removed."""
        classes = tuple(classes)
        workers = list(workers)
        proposers = sorted({p for w in workers for p, _ in _plans(w)})
        for code in _REJECTED:
            self.child(self.requests, "unknown", "none", "none", code)
        for cls in classes:
            for code in _REJECTED_AFTER_CLASS:
                self.child(self.requests, cls, "none", "none", code)
            for p in proposers:
                for h in (self.ttft, self.tpot, self.e2e):
                    self.child(h, cls, p)
        for w in workers:
            self.child(self.retries, w.name)
            self.child(self.scrape_errors, w.name)
            applied = sorted({p for p, _ in _plans(w)})
            for cls in classes:
                for p, gamma in _plans(w):
                    self.child(self.decisions, cls, p, str(gamma), policy)
                for p in applied:
                    self.child(self.output_tokens, w.name, p, cls)
                    for code in _ANSWERED:
                        self.child(self.requests, cls, p, w.name, code)
                    if p != "none":  # feedback.py counts drafts of speculating requests only
                        self.child(self.draft_tokens, w.name, p, cls)
                        self.child(self.accepted_tokens, w.name, p, cls)
                if "ngram" in w.proposers:
                    self.child(self.shadow_draft_tokens, w.name, cls)
                    self.child(self.shadow_accepted_tokens, w.name, cls)
            for path in sorted(w.adapter.passthrough):
                self.child(self.passthrough, path, w.name, "200")
        if backend is not None:  # a state backend that can fail (Redis)
            self.child(self.state_errors, backend)
        for result in ("ok", "error"):
            self.child(self.config_reloads, result)

    def exposition(self) -> bytes:
        """The text exposition of /metrics, without the `_created` samples of counters and histograms."""
        return generate_latest(_WithoutCreated(self.registry))


class _WithoutCreated:
    """A registry seen without `_created` samples (prometheus_client's switch for them is process-wide)."""

    def __init__(self, registry: CollectorRegistry):
        self._registry = registry

    def collect(self):
        for family in self._registry.collect():
            if family.type in ("counter", "histogram", "summary"):
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


# HTTP statuses kept as they are in the `code` label: those the proxy sends and those common from workers
CODES = frozenset({200, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 429, 431, 499, 500, 502, 503, 504})
_REJECTED = ("400", "401", "404", "408", "413", "415", "422", "499", "503")  # before the body is classed
_REJECTED_AFTER_CLASS = ("422", "503")  # a bad `speculation` field; no worker left for the model
_ANSWERED = ("200", "499", "502", "503", "504")  # with a plan: served, client gone, worker died / stalled / none


def code_label(status: int) -> str:
    """The `code` label of an HTTP status: itself when in `CODES`, else its class ("4xx", "5xx")."""
    return str(status) if status in CODES else f"{min(max(status // 100, 1), 5)}xx"


def _plans(worker) -> list[tuple[str, int]]:
    """The (proposer, gamma) pairs a request sent to `worker` can carry (handlers._Plan)."""
    if not worker.per_request:
        return [worker.fixed_plan()]
    return [("none", 0)] + [(p, g) for p in worker.proposers if p != "none" for g in range(1, worker.max_gamma + 1)]


def _fast_observe(child, value: float) -> None:
    if value == value:  # NaN: counted in the sum only, as Histogram.observe does
        child._buckets[bisect_left(child._upper_bounds, value)]._value += 1.0
    child._sum._value += value


def _fast_inc(child, amount: float = 1.0) -> None:
    child._value._value += amount


def _has_internals() -> bool:
    probe = CollectorRegistry()
    h = Histogram("probe", "", buckets=(1.0,), registry=probe)
    c = Counter("probe_c", "", registry=probe)
    return (isinstance(getattr(h, "_upper_bounds", None), list) and len(getattr(h, "_buckets", ())) == 2
            and type(getattr(h, "_sum", None)) is MutexValue and type(getattr(c, "_value", None)) is MutexValue
            and all(type(b) is MutexValue for b in h._buckets) and type(c._value._value) is float)


# The request path's updates (~11 per request), without prometheus_client's per-call checks, its loop over the
# buckets (a bisect instead) and its value lock: MutexValue's float is added to directly. Safe because the
# proxy's metrics are written and read (the /metrics handler) on the event loop's one thread only. The same
# samples (tests/proxy/test_units.py compares the expositions). With a prometheus_client whose internals
# differ (another value class, multiprocess mode), the public methods.
if _has_internals():
    observe, inc = _fast_observe, _fast_inc
else:  # pragma: no cover - another prometheus_client layout
    def observe(child, value: float) -> None:
        child.observe(value)

    def inc(child, amount: float = 1.0) -> None:
        child.inc(amount)


# Gauges read from live state at scrape time (app.Proxy._gauges, feedback.Feedback.gauges): name and help, once.
WORKER_RUNNING = "adaptspec_worker_running"
WORKER_WAITING = "adaptspec_worker_waiting"
WORKER_KV_USAGE = "adaptspec_worker_kv_usage"
WORKER_INFLIGHT = "adaptspec_worker_inflight"
WORKER_HEALTHY = "adaptspec_worker_healthy"
WORKER_PREFILL_RATIO = "adaptspec_worker_prefill_ratio"
STATE_BACKEND_UP = "adaptspec_state_backend_up"
ALPHA_ESTIMATE = "adaptspec_alpha_estimate"
ALPHA_ESTIMATE_STD = "adaptspec_alpha_estimate_std"
ALPHA_ESTIMATE_SAMPLED = "adaptspec_alpha_estimate_sampled"
PROPOSE_RATE_ESTIMATE = "adaptspec_propose_rate_estimate"
ALPHA_ESTIMATE_REPORTS = "adaptspec_alpha_estimate_reports"
STEP_MODEL_COEFFICIENT = "adaptspec_step_model_coefficient"
STEP_MODEL_COEFFICIENT_ERROR = "adaptspec_step_model_coefficient_error"
STEP_MODEL_TRUSTED = "adaptspec_step_model_trusted"
STEP_MODEL_STEPS = "adaptspec_step_model_steps"
STEP_MODEL_REQUIRED_STEPS = "adaptspec_step_model_required_steps"
STEP_MODEL_PREDICTION_MSE = "adaptspec_step_model_prediction_mse"
STEP_MODEL_CONTRAST_STEPS = "adaptspec_step_model_contrast_steps"
STEP_MODEL_PROBES = "adaptspec_step_model_probes"
REALIZED_CORRECTION = "adaptspec_realized_correction"

GAUGE_DOCS = {
    WORKER_RUNNING: "Requests in the worker's running batch (scraped)",
    WORKER_WAITING: "Requests queued at the worker (scraped)",
    WORKER_KV_USAGE: "Worker KV-cache usage 0..1 (scraped)",
    WORKER_INFLIGHT: "Requests in flight to the worker from all proxy replicas",
    WORKER_HEALTHY: "1 when the worker answers, 0 while it is marked unhealthy",
    WORKER_PREFILL_RATIO: "Prompt tokens prefilled per generated token in the worker's recent traffic",
    STATE_BACKEND_UP: "1 when the state backend answers (always 1 for memory)",
    ALPHA_ESTIMATE: "Posterior mean of the acceptance rate alpha",
    ALPHA_ESTIMATE_STD: "Posterior standard deviation of alpha",
    ALPHA_ESTIMATE_SAMPLED: "Posterior mean of alpha for sampled requests (temperature > 0; "
                            "adaptspec_alpha_estimate is the greedy one)",
    PROPOSE_RATE_ESTIMATE: "Share of verification steps that had a draft (n-gram: a match was found)",
    ALPHA_ESTIMATE_REPORTS: "Finished requests (or counter windows) behind the alpha estimate, discounted like it, "
                            "from every replica",
    STEP_MODEL_COEFFICIENT: "Fitted step-time coefficient of the worker (seconds per step / token / pass; "
                            "control/calibration.py)",
    STEP_MODEL_COEFFICIENT_ERROR: "Standard error of the fitted coefficient (NaN: held at the prior)",
    STEP_MODEL_TRUSTED: "1 when the policy prices this worker's steps with the fitted model",
    STEP_MODEL_STEPS: "Engine steps behind the fit (discounted)",
    STEP_MODEL_REQUIRED_STEPS: "Engine steps the fit needs before it is trusted (fewer the worse the profile predicts)",
    STEP_MODEL_PREDICTION_MSE: "Recent out-of-sample squared error per step of the telemetry windows' seconds, "
                               "by the fit and by the profile (model=fit|profile)",
    STEP_MODEL_CONTRAST_STEPS: "Engine steps' worth of drafted tokens varying on their own at given requests and KV "
                               "(below calibration.probe_steps the policy probes: a drafted token's price)",
    STEP_MODEL_PROBES: "Admissions the policy toggled to give the fit a drafted token's price (calibration probes)",
    REALIZED_CORRECTION: "Factor on the model's goodput of the proposer for the class at batch 1, from its requests' "
                         "measured decode rates (1: nothing sure yet; control/realized.py)",
}

GaugeRows = Iterable[tuple[tuple[str, ...], float]]


class StateCollector(Collector):
    """Gauges read from live state at scrape time: `source()` returns {metric name: (labels, rows)}."""

    def __init__(self, source: Callable[[], dict[str, tuple[tuple[str, ...], GaugeRows]]],
                 docs: dict[str, str] = GAUGE_DOCS):
        self._source, self._docs = source, docs

    def describe(self):
        return []  # dynamic: nothing to pre-register

    def collect(self):
        for name, (labels, rows) in self._source().items():
            family = GaugeMetricFamily(name, self._docs.get(name, name), labels=list(labels))
            for values, value in rows:
                family.add_metric(list(values), float(value))
            yield family
