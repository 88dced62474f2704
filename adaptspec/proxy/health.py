"""Probe endpoints of the proxy, for orchestrators (Kubernetes) and humans.

    GET /health/live    200 {"status": "alive"} while the process serves HTTP: a liveness probe never
                        restarts the proxy because its workers are still starting (engines load for minutes)
    GET /health/ready   200 once the config is loaded and at least one worker has answered and is healthy;
                        503 {"status": "not_ready", "reason": ...} before and whenever none is, and
                        503 {"status": "draining", ...} from SIGTERM on (serve.drain): the load balancer
                        takes the replica out while it still accepts connections
    GET /version        {"name": "adaptspec", "version": ...}
    GET /health         unchanged (handlers.health): 200 while any worker is not marked unhealthy

Workers start out presumed healthy (so requests flow at once) until the scraper or the request path finds
otherwise; readiness instead waits for evidence: a successful scrape of the worker, or an answer to the
readiness check's own probe of its /health (404 -> /v1/models, for plain OpenAI servers). Probing stops
for a worker once it has answered.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from adaptspec import __version__

PROBE_TIMEOUT_S = 2.0
_ANSWERED = web.AppKey("health_answered", set)  # {(worker name, url)} of the workers seen answering


def add_routes(app: web.Application) -> None:
    app[_ANSWERED] = set()
    app.router.add_get("/health/live", live)
    app.router.add_get("/health/ready", ready)
    app.router.add_get("/version", version)


async def live(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def version(request: web.Request) -> web.Response:
    return web.json_response({"name": "adaptspec", "version": __version__})


async def ready(request: web.Request) -> web.Response:
    proxy = request.app["proxy"]
    answered: set = request.app[_ANSWERED]
    if proxy.draining:
        return web.json_response({"status": "draining", "reason": "shutting down: finishing requests in flight"},
                                 status=503)
    if getattr(proxy, "config", None) is None:
        return _not_ready("config not loaded")
    workers = list(proxy.pools.workers.values())
    for w in workers:
        if w.sampled_at > 0:  # scraped successfully at least once
            answered.add((w.name, w.url))
    unproven = [w for w in workers if w.healthy and (w.name, w.url) not in answered]
    if unproven and proxy.session is not None and not any(w.healthy and (w.name, w.url) in answered
                                                          for w in workers):
        results = await asyncio.gather(*(_answers(proxy.session, w) for w in unproven))
        answered.update((w.name, w.url) for w, ok in zip(unproven, results, strict=True) if ok)
    ok = [w.name for w in workers if w.healthy and (w.name, w.url) in answered]
    if not ok:
        states = ", ".join(f"{w.name}: {'no answer yet' if w.healthy else 'unhealthy'}" for w in workers)
        return _not_ready(f"no healthy worker has answered yet ({states or 'no workers'})")
    return web.json_response({"status": "ready", "workers": ok})


def _not_ready(reason: str) -> web.Response:
    return web.json_response({"status": "not_ready", "reason": reason}, status=503)


async def _answers(session: aiohttp.ClientSession, worker) -> bool:
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    for path in ("/health", "/v1/models"):
        try:
            async with session.get(worker.url + path, headers=worker.auth_headers, timeout=timeout) as resp:
                await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False
        if resp.status == 404 and path == "/health":
            continue
        return resp.status < 500
    return False
