"""The switchback's engine-side switch: after each scrape of a worker that advertises it, the proxy tells the
worker which regime its running requests run from its next step on.

A worker whose model card says `"speculation_cap": true` (the reference worker; docs/INTERFACES.md) takes
`PUT /adaptspec/speculation_cap {"cap": 0 | null}`: 0 in a switchback off window (no request drafts, running ones
included), null otherwise (each request its own proposer, k and schedule). The experiment
(control/holdout_policy.py `Experimented.engine_tick`) gets the worker's step-level output-token counter from
the same scrape (`adaptspec:engine_output_tokens_total`) for the window's throughput, and says the cap. A switch
lands within one scrape interval of the window's boundary. Workers without the capability keep the admission
path (the regime is chosen per new request; windows wait for the other regime's requests to drain).

The cap is sent when it changes, again every `resend_s` while it is 0 (a restarted worker forgets it), and
lifted (null) when the config no longer runs a switchback, so no worker is left without speculation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp

from adaptspec.proxy.report import experiment

log = logging.getLogger(__name__)

PATH = "/adaptspec/speculation_cap"
_UNSENT = object()


def advertises(worker) -> bool:
    """Whether the worker's model cards (from /v1/models) say it takes the engine-side switch."""
    return any(isinstance(c, dict) and c.get("speculation_cap") is True for c in (worker.cards or {}).values())


class EngineSwitch:
    """The caps sent to each worker, and the sending."""

    def __init__(self, proxy, resend_s: float = 5.0) -> None:
        self.proxy, self.resend_s = proxy, resend_s
        self._sent: dict[tuple[str, str], tuple[object, float]] = {}  # (name, url) -> (cap, when)

    async def after_scrape(self, worker, sample) -> None:
        exp = experiment(self.proxy)
        key = (worker.name, worker.url)
        supported = advertises(worker)
        if exp is None or getattr(exp, "switchback", None) is None or not supported:
            if exp is not None and hasattr(exp, "engine_switch"):
                exp.engine_switch(worker.name, False)
            if supported and self._sent.get(key, (_UNSENT, 0.0))[0] == 0:
                await self._send(worker, key, None)  # the switchback is gone: lift the cap it left
            return
        exp.engine_switch(worker.name, True)
        cap = exp.engine_tick(worker.name, time.time(), sample.output_tokens)
        sent, when = self._sent.get(key, (_UNSENT, 0.0))
        if sent != cap or (cap == 0 and time.monotonic() - when >= self.resend_s):
            await self._send(worker, key, cap)

    async def _send(self, worker, key: tuple[str, str], cap: int | None) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, 4 * self.proxy.scrape_interval_s))
        headers = {**worker.auth_headers, "Content-Type": "application/json"}
        try:
            async with self.proxy.session.put(worker.url + PATH, data=json.dumps({"cap": cap}), headers=headers,
                                              timeout=timeout) as resp:
                await resp.read()
                if resp.status != 200:
                    log.warning("worker %s refused speculation cap %s: HTTP %d", worker.name, cap, resp.status)
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("worker %s: speculation cap %s not sent: %s", worker.name, cap, exc.__class__.__name__)
            return  # tried again at the next scrape
        self._sent[key] = (cap, time.monotonic())
