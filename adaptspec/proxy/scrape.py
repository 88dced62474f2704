"""Background scraper of the workers' Prometheus `/metrics`: occupancy, speculation counters, health.

Each worker's text is parsed by `adaptspec.control.promtext.parse_metrics` (the dialects it reads are listed
there) into one `WorkerSample`: occupancy to the worker record, speculation families to the engine adapter's
`ingest` and the shadow counters and step telemetry to feedback.py (which source wins is decided there).

Health: a worker whose scrape fails to connect is ejected, and so is one whose scrapes have had no answer
for `stall_timeout_s` (upstream.Pools); ejected workers are probed, after their backoff, on
`/health` (404 -> `/v1/models`, for plain OpenAI servers) every interval and marked healthy when they
answer. Workers of engine `openai` are not scraped (no metrics to read), only probed when unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import aiohttp

from adaptspec.control.promtext import WorkerSample, parse_metrics
from adaptspec.proxy.engine_switch import EngineSwitch
from adaptspec.proxy.feedback import Feedback
from adaptspec.proxy.metrics import ProxyMetrics
from adaptspec.proxy.upstream import Pools

log = logging.getLogger(__name__)

__all__ = ["Scraper", "WorkerSample", "parse_metrics"]  # the parser's names: for older imports


class Scraper:
    """Runs `scrape_once` every `interval_s()` seconds for the current workers of `pools` (re-read each round).

    A sample goes to `feedback` and then to `switch` (the switchback's regime on workers that take it at once).
    `interval_s` and `stall_timeout_s` give the current settings (a config reload changes them); `start`
    hands it the client session its requests go out on."""

    def __init__(self, pools: Pools, metrics: ProxyMetrics, feedback: Feedback, switch: EngineSwitch, *,
                 interval_s: Callable[[], float], stall_timeout_s: Callable[[], float]) -> None:
        self.pools, self.metrics, self.feedback, self.switch = pools, metrics, feedback, switch
        self.interval_s, self.stall_timeout_s = interval_s, stall_timeout_s
        self.session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None

    def start(self, session: aiohttp.ClientSession) -> None:
        self.session = session
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
            await asyncio.sleep(max(0.01, self.interval_s() - (time.monotonic() - started)))

    async def scrape_once(self) -> None:
        workers = list(self.pools.workers.values())
        if workers:
            await asyncio.gather(*(self._scrape_worker(w) for w in workers))

    async def _scrape_worker(self, worker) -> None:
        session = self.session
        timeout = aiohttp.ClientTimeout(total=max(1.0, 4 * self.interval_s()))
        if not worker.healthy:
            if time.monotonic() < worker.retry_at:
                return  # ejected: left alone until its backoff ends (upstream.Pools)
            await self._probe(worker, session, timeout)
            if not worker.healthy:
                self.pools.probe_failed(worker)
                return
        if worker.models is None or worker.cards is None:
            await self._learn_models(worker, session, timeout)
        if not worker.adapter.scraped:
            return
        try:
            async with session.get(worker.url + "/metrics", headers=worker.auth_headers, timeout=timeout) as resp:
                if resp.status != 200:
                    self.metrics.scrape_errors.labels(worker.name).inc()
                    return
                text = await resp.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.metrics.scrape_errors.labels(worker.name).inc()
            if isinstance(exc, aiohttp.ClientConnectorError):  # refused / unreachable: the worker is down
                self.pools.mark_unhealthy(worker, f"scrape failed: {exc.__class__.__name__}")
            else:
                # a timeout (a frozen, SIGSTOPped or swapping worker accepts connections but never answers), or
                # a pooled connection reset under load (seen at concurrency 128-256: one reset ejected the
                # only worker for 2 s while it served every stream): down only once it has answered nothing
                # for stall_timeout_s
                self.pools.unanswered(worker, self.stall_timeout_s())
            return
        self.pools.answered(worker)
        sample = parse_metrics(text)
        worker.apply_sample(sample)
        self.feedback.on_sample(worker, sample)
        await self.switch.after_scrape(worker, sample, session, timeout)

    async def _probe(self, worker, session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout) -> None:
        for path in ("/health", "/v1/models"):
            try:
                async with session.get(worker.url + path, headers=worker.auth_headers, timeout=timeout) as resp:
                    await resp.read()
                    if resp.status == 404 and path == "/health":
                        continue
                    if resp.status < 500:
                        self.pools.mark_healthy(worker)
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
            self.pools.models_changed()
