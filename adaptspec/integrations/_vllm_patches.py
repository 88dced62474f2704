"""The patches the vLLM plugin installs (imported only inside a vLLM process; see vllm_plugin.py).

Each wraps one vLLM method and calls the original first, so vLLM's own bookkeeping is unchanged:

  Scheduler.update_draft_token_ids     sync scheduling (n-gram, and any run with --no-async-scheduling):
                                       drafts for the next step arrive here -> keep the first k (with a
                                       schedule: min(k, cap at the running batch), at every step).
  Scheduler._update_after_schedule     a request that joins the batch with its prompt all but one token
                                       in the prefix cache is padded to 1 + num_speculative_tokens rows of
                                       placeholder drafts (for CUDA-graph shapes); cut those to k as well,
                                       exactly as vLLM itself does when the padding does not fit.
  AsyncScheduler._update_after_schedule async scheduling (draft model, EAGLE): the next step's draft slots
                                       are placeholders set here -> keep k of them; vLLM then trims the
                                       real drafts to the scheduled count in update_draft_token_ids_in_output.
  Scheduler.add_request                makes sure each request accumulates RequestSpecDecodeMetrics (vLLM
                                       only does when --per-request-spec-decode-metrics is set), so the
                                       API server learns each finished request's acceptance.
  InputProcessor._validate_params      rejects bad vllm_xargs with HTTP 400.
  OutputProcessor.add_request / _finish_request
                                       API-server side: remember the request's labels, count its
                                       acceptance into the per-class Prometheus counters at finish
                                       (and, with ADAPTSPEC_VLLM_SHADOW_NGRAM, the shadow n-gram walk
                                       of a request that ran without lookup).
  Scheduler.schedule / update_from_output
                                       engine core: step telemetry of every completed step, shipped in
                                       the step's SchedulerStats (vllm_plugin.encode_step_window).
  StatLoggerManager.record             API server: takes the step window out of the stats before vLLM's
                                       loggers see them, into the adaptspec:engine_*_total counters.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time

from prometheus_client import Counter, Gauge

from adaptspec.control import metric_names as names
from adaptspec.control import telemetry
from adaptspec.control.alpha import GREEDY, SAMPLED
from adaptspec.control.schedule import gamma_at
from adaptspec.control.shadow import walk_lookup
from adaptspec.control.types import DRAFTING_PROPOSERS
from adaptspec.integrations.vllm_plugin import (
    ENV_SHADOW,
    encode_step_window,
    pop_step_window,
    request_labels,
    request_limit,
    request_schedule,
    shadow_config,
    telemetry_proposer,
    validate_xargs,
)

logger = logging.getLogger(__name__)

_UNSET = object()
_LIMIT_ATTR = "_adaptspec_limit"
_LABELS_ATTR = "_adaptspec_labels"
_SCHEDULE_ATTR = "_adaptspec_schedule"
_NO_SPEC_ATTR = "_adaptspec_no_spec"
_installed = False
_lock = threading.Lock()


class ClassCounters:
    """The three per-class counter families, created on first use in the process that serves /metrics."""

    def __init__(self) -> None:
        labels = ("content_class", "proposer")
        self.drafts = Counter(names.CLASS_SPEC_DRAFTS,
                              "Verify steps with drafts, by request content class and proposer.", labels)
        self.draft_tokens = Counter(names.CLASS_SPEC_DRAFT_TOKENS,
                                    "Draft tokens proposed, by request content class and proposer.", labels)
        self.accepted = Counter(names.CLASS_SPEC_ACCEPTED,
                                "Draft tokens accepted, by request content class and proposer.", labels)

    def observe(self, labels: tuple[str, str], drafts: int, draft_tokens: int, accepted: int) -> None:
        self.drafts.labels(*labels).inc(drafts)
        self.draft_tokens.labels(*labels).inc(draft_tokens)
        self.accepted.labels(*labels).inc(accepted)


@functools.cache
def class_counters() -> ClassCounters:
    return ClassCounters()


class ShadowCounters:
    """The shadow n-gram counter families (metric_names.SHADOW_NGRAM_*), created on first use in the process
    that serves /metrics. A class's per-position series are all created with its first request (zeros
    included), so that a scraper's baseline sees them together."""

    def __init__(self, k: int) -> None:
        self.k = k
        labels = ("content_class", "regime")
        doc = "N-gram lookup scored along requests that ran without it"
        self.steps = Counter(names.SHADOW_NGRAM_STEPS, f"{doc}: steps walked.", labels)
        self.drafts = Counter(names.SHADOW_NGRAM_DRAFTS, f"{doc}: steps whose lookup drafted.", labels)
        self.draft_tokens = Counter(names.SHADOW_NGRAM_DRAFT_TOKENS, f"{doc}: tokens drafted.", labels)
        self.tried = Counter(names.SHADOW_NGRAM_TRIED, f"{doc}: drafts that reached each position.",
                             (*labels, "position"))
        self.accepted = Counter(names.SHADOW_NGRAM_ACCEPTED, f"{doc}: drafts accepted at each position.",
                                (*labels, "position"))

    def observe(self, content_class: str, regime: str, stats) -> None:
        self.steps.labels(content_class, regime).inc(stats.steps)
        self.drafts.labels(content_class, regime).inc(stats.drafts)
        self.draft_tokens.labels(content_class, regime).inc(stats.draft_tokens)
        for j in range(self.k):
            t = stats.tried_per_position[j] if j < len(stats.tried_per_position) else 0
            a = stats.accepted_per_position[j] if j < len(stats.accepted_per_position) else 0
            self.tried.labels(content_class, regime, str(j)).inc(t)
            self.accepted.labels(content_class, regime, str(j)).inc(a)


@functools.cache
def shadow_counters(k: int) -> ShadowCounters:
    return ShadowCounters(k)


def observe_shadow(req_state, content_class: str, config: tuple[int, int, int]) -> None:
    """Walk n-gram lookup along a finished request that ran without it (vLLM's first-occurrence match) and
    count it; a request with no token ids (prompt embeddings) or no sampling temperature is skipped."""
    prompt = getattr(req_state, "prompt_token_ids", None)
    detok = getattr(req_state, "detokenizer", None)
    output = getattr(detok, "output_token_ids", None) if detok is not None else None
    temperature = getattr(req_state, "temperature", None)
    if prompt is None or not output or temperature is None:
        return
    min_n, max_n, k = config
    stats = walk_lookup(prompt, output, k, (min_n, max_n), earliest=True)
    shadow_counters(k).observe(content_class, GREEDY if temperature < 1e-5 else SAMPLED, stats)


STEP_PROPOSERS = DRAFTING_PROPOSERS


class StepTelemetryCounters:
    """The step-telemetry counter families (control/telemetry.py), in the process that serves /metrics."""

    def __init__(self) -> None:
        self.steps = Counter(telemetry.METRIC_STEPS, "Engine steps (one target forward each).")
        self.seconds = Counter(telemetry.METRIC_STEP_SECONDS, "Wall seconds of engine steps, drafting included.")
        self.batched = Counter(telemetry.METRIC_BATCHED_TOKENS, "Tokens through the target forward.")
        self.kv = Counter(telemetry.METRIC_KV_TOKENS, "Context tokens attended, summed over steps.")
        self.requests = Counter(telemetry.METRIC_STEP_REQUESTS, "Requests in each step, summed over steps.")
        self.drafted = Counter(telemetry.METRIC_DRAFTED_TOKENS, "Tokens drafted, by proposer.", ["proposer"])
        self.passes = Counter(telemetry.METRIC_DRAFT_PASSES, "Batched draft-model passes, by proposer.",
                              ["proposer"])
        self.calls = Counter(telemetry.METRIC_DRAFT_CALLS, "Steps in which a draft model ran, by proposer.",
                             ["proposer"])
        for p in STEP_PROPOSERS:  # the closed label set, exported from the start
            self.drafted.labels(p)
            self.passes.labels(p)
            self.calls.labels(p)

    def observe(self, window: dict) -> None:
        self.steps.inc(window["steps"])
        self.seconds.inc(window["seconds"])
        self.batched.inc(window["batched"])
        self.kv.inc(window["kv"])
        self.requests.inc(window.get("requests", 0))
        for p, n in window["drafted"].items():
            self.drafted.labels(p if p in STEP_PROPOSERS else "hybrid").inc(n)
        for p, n in window["passes"].items():
            self.passes.labels(p if p in STEP_PROPOSERS else "hybrid").inc(n)
        for p, n in window.get("calls", {}).items():
            self.calls.labels(p if p in STEP_PROPOSERS else "hybrid").inc(n)


@functools.cache
def step_counters() -> StepTelemetryCounters:
    return StepTelemetryCounters()


def _limit_of(request, scheduler) -> int | None:
    """The request's draft length this step: its own k (None: the engine's), capped by its schedule at the
    scheduler's current running batch."""
    limit = getattr(request, _LIMIT_ATTR, _UNSET)
    if limit is _UNSET:
        extra = getattr(getattr(request, "sampling_params", None), "extra_args", None)
        limit = request_limit(extra)
        setattr(request, _LIMIT_ATTR, limit)
        setattr(request, _SCHEDULE_ATTR, request_schedule(extra) if limit != 0 else None)
    sched = getattr(request, _SCHEDULE_ATTR, None)
    if not sched:
        return limit
    k = limit if limit is not None else int(getattr(scheduler, "num_spec_tokens", 0) or 0)
    return gamma_at(k, sched, len(scheduler.running))


def _seam(owner: type, name: str):
    fn = owner.__dict__.get(name)
    if fn is None:
        raise RuntimeError(f"adaptspec vLLM plugin: {owner.__module__}.{owner.__qualname__}.{name} not found; "
                           f"this vLLM build does not match the supported release")
    return fn


def install(vllm_version: str) -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _patch_scheduler()
        _patch_step_telemetry()
        _patch_frontend()
        # Lets a scraper tell a vLLM that honours vllm_xargs from one that would silently ignore them.
        from adaptspec import __version__

        Gauge("adaptspec:vllm_plugin_info", "adaptspec vLLM plugin loaded (per-request speculation limits)",
              ["version", "vllm_version"]).labels(__version__, vllm_version).set(1)
        _installed = True
    logger.info("adaptspec vLLM plugin installed: per-request speculation limits and per-class counters")


def _patch_scheduler() -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.metrics.stats import RequestSpecDecodeMetrics

    update_draft = _seam(Scheduler, "update_draft_token_ids")
    base_after_schedule = _seam(Scheduler, "_update_after_schedule")
    after_schedule = _seam(AsyncScheduler, "_update_after_schedule")
    add_request = _seam(Scheduler, "add_request")

    def cut_drafts(self, req_ids) -> None:
        """Cut each listed request's pending drafts to its own limit (0 = none)."""
        for req_id in req_ids:
            request = self.requests.get(req_id)
            if request is None:
                continue
            limit = _limit_of(request, self)
            if limit is not None and len(request.spec_token_ids) > limit:
                request.spec_token_ids = request.spec_token_ids[:limit]

    @functools.wraps(update_draft)
    def update_draft_token_ids(self, draft_token_ids) -> None:
        update_draft(self, draft_token_ids)
        cut_drafts(self, draft_token_ids.req_ids)

    @functools.wraps(base_after_schedule)
    def _base_update_after_schedule(self, scheduler_output) -> None:
        spec = scheduler_output.scheduled_spec_decode_tokens
        for req_id, tokens in list(spec.items()):
            request = self.requests.get(req_id)
            limit = None if request is None else _limit_of(request, self)
            if limit is not None and len(tokens) > limit:
                cut = len(tokens) - limit
                scheduler_output.num_scheduled_tokens[req_id] -= cut
                scheduler_output.total_num_scheduled_tokens -= cut
                if limit:
                    spec[req_id] = tokens[:limit]
                else:
                    del spec[req_id]
        base_after_schedule(self, scheduler_output)

    @functools.wraps(after_schedule)
    def _update_after_schedule(self, scheduler_output) -> None:
        after_schedule(self, scheduler_output)
        cut_drafts(self, scheduler_output.num_scheduled_tokens)

    @functools.wraps(add_request)
    def add_request_with_metrics(self, request) -> None:
        add_request(self, request)
        if self.num_spec_tokens and getattr(request, "spec_decode_metrics", _UNSET) is None:
            request.spec_decode_metrics = RequestSpecDecodeMetrics.new(self.num_spec_tokens)

    Scheduler.update_draft_token_ids = update_draft_token_ids
    Scheduler._update_after_schedule = _base_update_after_schedule
    AsyncScheduler._update_after_schedule = _update_after_schedule
    Scheduler.add_request = add_request_with_metrics


_T0_ATTR = "_adaptspec_t0"
_WINDOW_ATTR = "_adaptspec_steps"
_LAST_ATTR = "_adaptspec_last_end"


def _patch_step_telemetry() -> None:
    """Engine core: count each completed step, ship the window in the step's SchedulerStats."""
    from vllm.v1.core.sched.scheduler import Scheduler

    schedule = _seam(Scheduler, "schedule")
    update = _seam(Scheduler, "update_from_output")

    @functools.wraps(schedule)
    def schedule_timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = schedule(self, *args, **kwargs)
        setattr(out, _T0_ATTR, t0)
        return out

    @functools.wraps(update)
    def update_counted(self, scheduler_output, model_runner_output):
        tokens = scheduler_output.total_num_scheduled_tokens
        kv = rows = 0
        for req_id in scheduler_output.num_scheduled_tokens:
            rows += 1
            request = self.requests.get(req_id)
            if request is not None:
                kv += request.num_computed_tokens  # advanced at schedule time: context + this step's tokens
        spec = scheduler_output.scheduled_spec_decode_tokens
        drafted = sum(len(v) for v in spec.values())
        outputs = update(self, scheduler_output, model_runner_output)
        end = time.perf_counter()
        if tokens > 0:
            # wall time since the step was scheduled or the previous step finished (async scheduling
            # overlaps steps: each second is counted once)
            start = max(getattr(scheduler_output, _T0_ATTR, end), getattr(self, _LAST_ATTR, 0.0))
            w = getattr(self, _WINDOW_ATTR, None)
            if w is None:
                w = {"steps": 0, "seconds": 0.0, "batched": 0, "kv": 0, "drafted": 0, "passes": 0, "calls": 0,
                     "requests": 0}
                setattr(self, _WINDOW_ATTR, w)
            w["steps"] += 1
            w["seconds"] += end - start
            w["batched"] += tokens
            w["kv"] += kv
            w["requests"] += rows
            w["drafted"] += drafted
            if drafted:  # a model drafter runs max(k) batched passes; n-gram lookup none (its entries stay 0)
                w["passes"] += max(len(v) for v in spec.values())
                w["calls"] += 1
            setattr(self, _LAST_ATTR, end)
        w = getattr(self, _WINDOW_ATTR, None)
        if w:
            stats = next((eco.scheduler_stats for eco in outputs.values() if eco.scheduler_stats is not None), None)
            if stats is not None:
                cfg = getattr(getattr(self, "vllm_config", None), "speculative_config", None)
                proposer = telemetry_proposer(getattr(cfg, "method", None))
                if proposer == "ngram":
                    w["passes"] = w["calls"] = 0
                stats.num_kv_fetch_reqs_by_stage.update(encode_step_window(w, proposer))
                setattr(self, _WINDOW_ATTR, None)
        return outputs

    Scheduler.schedule = schedule_timed
    Scheduler.update_from_output = update_counted


def _patch_frontend() -> None:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.engine.output_processor import OutputProcessor

    validate = _seam(InputProcessor, "_validate_params")
    out_add = _seam(OutputProcessor, "add_request")
    out_finish = _seam(OutputProcessor, "_finish_request")
    shadow = shadow_config(os.environ.get(ENV_SHADOW))

    @functools.wraps(validate)
    def _validate_params(self, params, *args, **kwargs):
        if isinstance(params, SamplingParams):
            try:
                validate_xargs(params.extra_args)
            except ValueError as exc:
                from vllm.exceptions import VLLMValidationError

                raise VLLMValidationError(str(exc), parameter="vllm_xargs") from exc
        return validate(self, params, *args, **kwargs)

    @functools.wraps(out_add)
    def add_request(self, request, *args, **kwargs):
        out_add(self, request, *args, **kwargs)
        state = self.request_states.get(request.request_id)
        if state is not None:
            params = getattr(request, "sampling_params", None)
            xargs = getattr(params, "extra_args", None)
            setattr(state, _LABELS_ATTR, request_labels(xargs))
            setattr(state, _NO_SPEC_ATTR, request_limit(xargs) == 0)  # run without drafts: shadow-scored

    @functools.wraps(out_finish)
    def _finish_request(self, req_state) -> None:
        out_finish(self, req_state)
        labels = getattr(req_state, _LABELS_ATTR, None) or request_labels(None)
        if shadow is not None and getattr(req_state, _NO_SPEC_ATTR, False):
            try:  # evidence only: a request whose walk fails must still finish normally
                observe_shadow(req_state, labels[0], shadow)
            except (ValueError, TypeError, IndexError, OverflowError) as exc:
                logger.warning("adaptspec: shadow n-gram walk of request %s skipped: %s",
                               getattr(req_state, "request_id", "?"), exc)
        metrics = req_state.spec_decode_metrics
        if metrics is None:
            return
        drafts = sum(metrics.histogram)
        accepted = sum(j * n for j, n in enumerate(metrics.histogram))
        class_counters().observe(labels, drafts, metrics.num_draft_tokens, accepted)

    from vllm.v1.metrics.loggers import StatLoggerManager

    record = _seam(StatLoggerManager, "record")

    @functools.wraps(record)
    def record_with_steps(self, scheduler_stats, *args, **kwargs):
        if scheduler_stats is not None:
            window = pop_step_window(scheduler_stats.num_kv_fetch_reqs_by_stage)
            if window is not None:
                step_counters().observe(window)
        return record(self, scheduler_stats, *args, **kwargs)

    InputProcessor._validate_params = _validate_params
    OutputProcessor.add_request = add_request
    OutputProcessor._finish_request = _finish_request
    StatLoggerManager.record = record_with_steps
    step_counters()  # exported from start-up, zeros until the first step
