"""A tiny OpenAI-compatible streaming server on loopback (aiohttp, in a thread) for load-generator tests.

It streams `max_tokens` one-word chunks `delay_s` apart, ends with a usage chunk, sets the adaptspec proxy's
decision headers (proposer by the prompt's first word), and answers 500 with an OpenAI-style error when the
prompt contains "FAIL".
"""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web


class FakeOpenAI:
    def __init__(self, delay_s: float = 0.002) -> None:
        self.delay_s = delay_s
        self.requests: list[dict] = []
        self.max_inflight = 0
        self._inflight = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        text = body["messages"][-1]["content"]
        if "FAIL" in text:
            return web.json_response({"error": {"message": "boom", "type": "server_error", "code": None}},
                                     status=500)
        proposer = "ngram" if text.startswith("Summarize") else "none"
        gamma = "4" if proposer != "none" else "0"
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "x-adaptspec-proposer": proposer,
                                           "x-adaptspec-gamma": gamma, "x-adaptspec-class": "chat"})
        await resp.prepare(request)
        self._inflight += 1
        self.max_inflight = max(self.max_inflight, self._inflight)
        try:
            n = int(body.get("max_tokens", 16))
            for i in range(n):
                await asyncio.sleep(self.delay_s)
                chunk = {"id": "x", "object": "chat.completion.chunk", "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
                     "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}}
            await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        finally:
            self._inflight -= 1
        return resp

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.port = fut.result(10)
        return self

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
