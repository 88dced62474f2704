"""/metrics is flat after startup: every series the request path can emit exists, at zero, from the first scrape
(adaptspec/proxy/metrics.py `precreate`), so traffic adds values, never series. Here: streams and non-stream
requests of every content class, the whole malformed-request corpus (every kind: fields, structure, encodings,
headers, slow bodies, bombs), hostile client strings and clients that leave mid-stream, against a proxy with two
workers. The hour-long soak's /metrics figure: docs/scale-out.md section 3."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from proxy.conftest import pool

from .corpus import corpus, hostile
from .test_fuzz import SERVER, check, run_cases

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

PROMPTS = [  # one a content class (control/types.py CONTENT_CLASSES), as the shipped classifier reads them
    "def parse(line):\n    key, value = line.split('=')\n    return key.strip(), value.strip()\nAdd type hints.",
    'Return a JSON object {"name": string, "age": integer} for: Ada, 36.',
    "Summarize the following article in two sentences: The city council met on Tuesday to discuss the budget.",
    "Translate into French: The weather is nice today and we are going to the beach.",
    "Solve for x: 3x + 7 = 22. Show the steps.",
    "Hi! How was your weekend?",
]


def series(text: str) -> set[tuple[str, frozenset]]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())) for fam in text_string_to_metric_families(text)
            for s in fam.samples}


async def _generate(session: aiohttp.ClientSession, url: str, prompt: str, stream: bool) -> int:
    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "stream": stream}
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        await r.read()
        return r.status


async def _leave_mid_stream(session: aiohttp.ClientSession, url: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True}
    try:
        async with asyncio.timeout(0.2), session.post(url + "/v1/chat/completions", json=body) as r:
            await r.content.readline()
            await asyncio.sleep(1)
    except (TimeoutError, aiohttp.ClientError):
        pass


async def test_traffic_adds_no_series_to_metrics(upstreams, proxies):
    ups = [upstreams("w0", delay_ms=10), upstreams("w1", delay_ms=10)]
    px = proxies({"pools": [pool("p", ups, profile="cpu-tiny")], "server": SERVER})
    text0 = px.metrics()
    before = series(text0)
    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(*(_generate(session, px.url, p, stream) for p in PROMPTS * 4
                                          for stream in (False, True)))
        assert set(statuses) == {200}, statuses
        check(await run_cases(px.url, corpus(seed=0)), json_errors=lambda case: True)
        check(await run_cases(px.url, hostile(500, seed=3)), json_errors=lambda case: True)
        await asyncio.gather(*(_leave_mid_stream(session, px.url) for _ in range(20)))
    await asyncio.sleep(1.0)  # the abandoned streams' accounting
    text1 = px.metrics()
    log.info("/metrics: %d series, %d -> %d bytes over the traffic", len(before), len(text0), len(text1))
    classes = {dict(labels).get("content_class") for name, labels in series(text1)
               if name == "adaptspec_requests_total" and dict(labels).get("worker") != "none"}
    new = sorted(series(text1) - before, key=str)
    assert not new, f"{len(new)} series appeared after startup: {new[:10]}"
    assert classes >= {"code", "chat"}  # the traffic reached the planned path
    # the values only: counters gain digits, nothing else grows
    assert len(text1) < len(text0) * 1.05, (len(text0), len(text1))
