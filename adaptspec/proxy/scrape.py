"""Background scraper of the workers' Prometheus `/metrics`: occupancy, speculation counters, health.

Parses three dialects into one `WorkerSample`:

    vLLM / adaptspec worker   vllm:num_requests_running, vllm:num_requests_waiting,
                              vllm:kv_cache_usage_perc (older vLLM: vllm:gpu_cache_usage_perc),
                              vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total,
                              vllm:spec_decode_num_accepted_tokens_per_pos_total{position}
    per class (adaptspec)     adaptspec:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_by_class_total
                              {content_class, proposer}
    shadow n-gram (vLLM plugin)  adaptspec:shadow_ngram_{steps,drafts,draft_tokens}_by_class_total,
                              adaptspec:shadow_ngram_{tried,accepted}_per_pos_by_class_total
                              {content_class, regime[, position]} (feedback.py)
    SGLang                    sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage,
                              sglang:spec_verify_calls_total + sglang:generation_tokens_total (counters),
                              sglang:spec_{accept_length,accept_rate,num_steps,num_draft_tokens} (gauges)
    step telemetry            adaptspec:engine_{steps,step_seconds,batched_tokens,kv_tokens}_total,
                              adaptspec:engine_{drafted_tokens,draft_passes}_total{proposer}
                              (control/telemetry.py; summed over other labels into one StepCounters,
                              fed to the worker's step-time calibrator by feedback.py)

Occupancy series of one family with several label sets (data-parallel engines, several models) are
summed, except the KV usage fraction, which is averaged. Speculation families are handed unchanged to
`adaptspec.control.estimators.ingest_vllm` / `ingest_sglang` (see feedback.py for which source wins).

Health: a worker whose scrape fails to connect is ejected, and so is one whose scrapes have had no answer
for `stall_timeout_s` (upstream.Pools); ejected workers are probed, after their backoff, on
`/health` (404 -> `/v1/models`, for plain OpenAI servers) every interval and marked healthy when they
answer. Workers of engine `openai` are not scraped (no metrics to read), only probed when unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass, field

import aiohttp

from adaptspec.control import metric_names as names
from adaptspec.control import telemetry
from adaptspec.control.counters import SGLANG_STYLE, SHADOW_STYLE, VLLM_STYLE
from adaptspec.proxy.engine_switch import EngineSwitch

log = logging.getLogger(__name__)

_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_RUNNING = (names.VLLM_RUNNING, names.SGLANG_RUNNING)
_WAITING = (names.VLLM_WAITING, names.SGLANG_WAITING)
_KV = (names.VLLM_KV_USAGE, names.VLLM_KV_USAGE_OLD, names.SGLANG_KV_USAGE)
_SPEC = VLLM_STYLE | SGLANG_STYLE | SHADOW_STYLE  # to the engine adapter's `ingest` (shadow: feedback.on_sample)

_OUTPUT_TOKENS = names.ENGINE_OUTPUT_TOKENS + "_total"
Sample = tuple[str, dict[str, str], float]  # as adaptspec.control.estimators.ingest_* take them

_STEP_SCALARS = {telemetry.METRIC_STEPS + "_total": "steps", telemetry.METRIC_STEP_SECONDS + "_total": "step_seconds",
                 telemetry.METRIC_BATCHED_TOKENS + "_total": "batched_tokens",
                 telemetry.METRIC_KV_TOKENS + "_total": "kv_tokens",
                 telemetry.METRIC_STEP_REQUESTS + "_total": "requests"}
_STEP_BY_PROPOSER = {telemetry.METRIC_DRAFTED_TOKENS + "_total": "drafted_tokens",
                     telemetry.METRIC_DRAFT_PASSES + "_total": "draft_passes",
                     telemetry.METRIC_DRAFT_CALLS + "_total": "draft_calls"}


@dataclass
class WorkerSample:
    """One scrape of one worker: occupancy, plus the speculation samples for the estimators' ingest_*."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    spec: list[Sample] = field(default_factory=list)
    steps: telemetry.StepCounters | None = None  # cumulative step telemetry, when the worker exports it
    output_tokens: float | None = None  # adaptspec:engine_output_tokens_total (counted per step; engine_switch.py)


def _labels(text: str) -> dict[str, str]:
    return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL_RE.findall(text)}


def parse_metrics(text: str) -> WorkerSample:
    """Parse Prometheus text exposition into a WorkerSample (other families are skipped)."""
    sample = WorkerSample()
    running: list[float] = []
    waiting: list[float] = []
    kv: list[float] = []
    scalars: dict[str, float] = {}
    by_proposer: dict[str, dict[str, float]] = {"drafted_tokens": {}, "draft_passes": {}, "draft_calls": {}}
    for line in text.splitlines():
        if not line.startswith(names.PREFIXES):
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            name, labels, rest = line[:brace], line[brace + 1:close], line[close + 1:]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if name in _RUNNING:
            running.append(value)
        elif name in _WAITING:
            waiting.append(value)
        elif name in _KV:
            kv.append(value)
        elif name in _SPEC:
            sample.spec.append((name, _labels(labels), value))
        elif name in _STEP_SCALARS:
            key = _STEP_SCALARS[name]
            scalars[key] = scalars.get(key, 0.0) + value
        elif name == _OUTPUT_TOKENS:
            sample.output_tokens = (sample.output_tokens or 0.0) + value
        elif name in _STEP_BY_PROPOSER:
            per = by_proposer[_STEP_BY_PROPOSER[name]]
            proposer = _labels(labels).get("proposer", "")
            per[proposer] = per.get(proposer, 0.0) + value
    if running:
        sample.running = sum(running)
    if waiting:
        sample.waiting = sum(waiting)
    if kv:
        sample.kv_usage = sum(kv) / len(kv)
    if "steps" in scalars:
        sample.steps = telemetry.StepCounters(**scalars, **by_proposer)
    return sample


class Scraper:
    """Runs `scrape_once` every `interval_s` for the app's current workers (re-read each round)."""

    def __init__(self, proxy, interval_s: float):
        self.proxy, self.interval_s = proxy, interval_s
        self._task: asyncio.Task | None = None
        self.switch = EngineSwitch(proxy)  # the switchback's regime on workers that take it at once

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="adaptspec-scraper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            await self.scrape_once()
            await asyncio.sleep(max(0.01, self.interval_s - (time.monotonic() - started)))

    async def scrape_once(self) -> None:
        workers = list(self.proxy.pools.workers.values())
        if workers:
            await asyncio.gather(*(self._scrape_worker(w) for w in workers))

    async def _scrape_worker(self, worker) -> None:
        session: aiohttp.ClientSession = self.proxy.session
        timeout = aiohttp.ClientTimeout(total=max(1.0, 4 * self.interval_s))
        if not worker.healthy:
            if time.monotonic() < worker.retry_at:
                return  # ejected: left alone until its backoff ends (upstream.Pools)
            await self._probe(worker, session, timeout)
            if not worker.healthy:
                self.proxy.pools.probe_failed(worker)
                return
        if worker.models is None or worker.cards is None:
            await self._learn_models(worker, session, timeout)
        if not worker.adapter.scraped:
            return
        try:
            async with session.get(worker.url + "/metrics", headers=worker.auth_headers, timeout=timeout) as resp:
                if resp.status != 200:
                    self.proxy.metrics.scrape_errors.labels(worker.name).inc()
                    return
                text = await resp.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.proxy.metrics.scrape_errors.labels(worker.name).inc()
            if isinstance(exc, aiohttp.ClientConnectorError):  # refused / unreachable: the worker is down
                self.proxy.pools.mark_unhealthy(worker, f"scrape failed: {exc.__class__.__name__}")
            else:
                # a timeout (a frozen, SIGSTOPped or swapping worker accepts connections but never answers), or
                # a pooled connection reset under load (seen at concurrency 128-256: one reset ejected the
                # only worker for 2 s while it served every stream): down only once it has answered nothing
                # for stall_timeout_s
                self.proxy.pools.unanswered(worker, self.proxy.stall_timeout_s)
            return
        self.proxy.pools.answered(worker)
        sample = parse_metrics(text)
        worker.apply_sample(sample)
        self.proxy.feedback.on_sample(worker, sample)
        await self.switch.after_scrape(worker, sample)

    async def _probe(self, worker, session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout) -> None:
        for path in ("/health", "/v1/models"):
            try:
                async with session.get(worker.url + path, headers=worker.auth_headers, timeout=timeout) as resp:
                    await resp.read()
                    if resp.status == 404 and path == "/health":
                        continue
                    if resp.status < 500:
                        self.proxy.pools.mark_healthy(worker)
                    return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return

    async def _learn_models(self, worker, session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout) -> None:
        """The worker's /v1/models cards (for the proxy's /v1/models), and its model ids when the config
        names none. Asked again next round only after a connection failure or bad JSON."""
        try:
            async with session.get(worker.url + "/v1/models", headers=worker.auth_headers, timeout=timeout) as resp:
                if resp.status != 200:
                    worker.cards = {}  # it has no model list to give (the ids stay unknown: routed any model)
                    return
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return
        found = data.get("data") if isinstance(data, dict) else None
        worker.cards = {str(m["id"]): m for m in found or () if isinstance(m, dict) and m.get("id")}
        if worker.models is None and worker.cards:
            worker.models = frozenset(worker.cards)
            self.proxy.pools.models_changed()
