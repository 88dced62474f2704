"""A small closed-loop load for the fault tests: N clients, a mix of streams and non-stream requests, every
outcome classified so a test can say exactly what was lost.

    results = await run_load([url_a, url_b], seconds=4, clients=8, stream_share=0.5)
    lost = [r for r in results if r.outcome == "lost"]

Outcomes: "ok" (whole answer), "stream_error" (200, some chunks, then the proxy's SSE error event: the
worker died mid-stream, told to the client), "lost" (nothing, or a connection dropped with no answer /
no error event), "http_<status>" (an error status with a JSON body).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp

CHAT = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]


@dataclass
class Result:
    stream: bool
    outcome: str
    seconds: float
    worker: str | None = None
    detail: str = ""


async def one_request(session: aiohttp.ClientSession, url: str, stream: bool, max_tokens: int,
                      timeout: float) -> Result:
    t0 = time.monotonic()
    body = {"model": "tiny", "messages": CHAT, "max_tokens": max_tokens, "stream": stream}
    try:
        async with asyncio.timeout(timeout), session.post(url + "/v1/chat/completions", json=body) as r:
            worker = r.headers.get("x-adaptspec-worker")
            if r.status != 200:
                text = await r.read()
                detail = json.loads(text)["error"]["message"]  # a JSON error or the test fails here
                return Result(stream, f"http_{r.status}", time.monotonic() - t0, worker, detail)
            if not stream:
                payload = await r.json()
                ok = payload["usage"]["completion_tokens"] == max_tokens
                return Result(stream, "ok" if ok else "lost", time.monotonic() - t0, worker)
            text = (await r.read()).decode()
            if '"error"' in text:
                return Result(stream, "stream_error", time.monotonic() - t0, worker, text[-200:])
            ok = text.rstrip().endswith("data: [DONE]") and text.count('"content"') >= max_tokens
            return Result(stream, "ok" if ok else "lost", time.monotonic() - t0, worker, text[-200:])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
        return Result(stream, "lost", time.monotonic() - t0, None, f"{exc.__class__.__name__}: {exc}")


async def run_load(urls: list[str], *, seconds: float, clients: int, stream_share: float = 0.5,
                   max_tokens: int = 8, timeout: float = 30.0) -> list[Result]:
    results: list[Result] = []
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        n = 0
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < stop:
                stream = (n * clients + i) % 100 < stream_share * 100
                results.append(await one_request(session, urls[(n + i) % len(urls)], stream, max_tokens, timeout))
                n += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return results


def summary(results: list[Result]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[r.outcome] = out.get(r.outcome, 0) + 1
    return out
