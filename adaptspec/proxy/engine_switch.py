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
from collections.abc import Callable

import aiohttp

from adaptspec.control.policy_base import PolicyBase

log = logging.getLogger(__name__)

PATH = "/adaptspec/speculation_cap"
_UNSENT = object()


def advertises(worker) -> bool:
    """Whether the worker's model cards (from /v1/models) say it takes the engine-side switch."""
    return any(isinstance(c, dict) and c.get("speculation_cap") is True for c in (worker.cards or {}).values())


class EngineSwitch:
    """The caps sent to each worker, and the sending. `policy`: the current policy (a config reload replaces
    it), whose `experiment` says the caps."""

    def __init__(self, policy: Callable[[], PolicyBase], resend_s: float = 5.0) -> None:
        self.policy, self.resend_s = policy, resend_s
        self._sent: dict[tuple[str, str], tuple[object, float]] = {}  # (name, url) -> (cap, when)

    async def after_scrape(self, worker, sample, session: aiohttp.ClientSession,
                           timeout: aiohttp.ClientTimeout) -> None:
        """After a scrape of `worker` (`sample`); a cap goes out on the scrape's `session` within `timeout`."""
        exp = self.policy().experiment
        key = (worker.name, worker.url)
        supported = advertises(worker)
        if exp is None or exp.switchback is None or not supported:
            if exp is not None:
                exp.engine_switch(worker.name, False)
            if supported and self._sent.get(key, (_UNSENT, 0.0))[0] == 0:
                await self._send(worker, key, None, session, timeout)  # the switchback is gone: lift its cap
            return
        exp.engine_switch(worker.name, True)
        cap = exp.engine_tick(worker.name, time.time(), sample.output_tokens)
        sent, when = self._sent.get(key, (_UNSENT, 0.0))
        if sent != cap or (cap == 0 and time.monotonic() - when >= self.resend_s):
            await self._send(worker, key, cap, session, timeout)

    async def _send(self, worker, key: tuple[str, str], cap: int | None, session: aiohttp.ClientSession,
                    timeout: aiohttp.ClientTimeout) -> None:
        headers = {**worker.auth_headers, "Content-Type": "application/json"}
        try:
            async with session.put(worker.url + PATH, data=json.dumps({"cap": cap}), headers=headers,
                                   timeout=timeout) as resp:
                await resp.read()
                if resp.status != 200:
                    log.warning("worker %s refused speculation cap %s: HTTP %d", worker.name, cap, resp.status)
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("worker %s: speculation cap %s not sent: %s", worker.name, cap, exc.__class__.__name__)
            return  # tried again at the next scrape
        self._sent[key] = (cap, time.monotonic())
