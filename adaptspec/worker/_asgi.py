"""The reference worker's ASGI plumbing (worker/server.py): running a coroutine unless the client disconnects,
server-sent events, and the two outer layers, a body-size / body-time limit and a guard that keeps every
exception from uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.types import Message, Receive, Scope, Send

from adaptspec.errors import RequestError
from adaptspec.worker._openai import error_body

log = logging.getLogger(__name__)


class ClientGone(Exception):
    pass


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(receive: Receive, work: Awaitable[Any]) -> Any:
    """Run `work`; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise ClientGone


async def collect_unless_gone(request: Request, worker: Any, job: Any) -> Any:
    """A non-stream job's result, or None when the client left first (generation cancelled)."""
    try:
        return await until_disconnect(request.receive, worker.collect(job))
    except ClientGone:
        log.info("client disconnected before %s finished; generation cancelled", job.request_id)
        return None


class SSEResponse(Response):
    """Server-sent events from an async iterator of strings; closes the iterator however the stream ends."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[str]) -> None:
        self.status_code, self.background, self._events = 200, None, events
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def stream() -> None:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for event in self._events:
                await send({"type": "http.response.body", "body": event.encode(), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await until_disconnect(receive, stream())
        except (ClientGone, OSError):
            log.info("client disconnected mid-stream; generation cancelled")
        finally:
            await self._events.aclose()  # type: ignore[attr-defined]


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'), ensure_ascii=False)}\n\n"


# ---------------------------------------------------------------------------------------------------------
# Body-size limit (413 before the body is buffered).


class BodyLimit:
    """413 past `max_bytes`; 408 when the body is not complete within `timeout_s` (uvicorn has no such
    limit: a client announcing more body than it sends, or a huge chunk size, would hold a handler forever)."""

    def __init__(self, app: Callable, max_bytes: int, timeout_s: float = 60.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        complete = False

        async def counted() -> Message:
            nonlocal seen, complete
            if complete:  # afterwards the app only waits for a disconnect: no deadline
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise RequestError(f"Request body not received within {self.timeout_s:g} s.", status=408,
                                   code="body_timeout") from None
            if message["type"] == "http.request":
                complete = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # chunked upload with no content-length: caught by the app
                    raise RequestError(f"Request body exceeds {self.max_bytes} bytes.", status=413,
                                       code="request_too_large")
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(error_body(413, f"Request body exceeds {self.max_bytes} bytes.",
                                     code="request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class Guard:
    """Outermost layer: no exception reaches uvicorn, which would close the keep-alive connection.

    Starlette answers an unhandled error with our JSON 500 and then re-raises it; uvicorn then drops the
    connection, resetting the client's next request on it. The error is logged by the app's handler;
    here it ends. Errors before any response get the JSON 500 here.
    """

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            if scope["type"] != "http":
                raise
            if started:
                return  # answered (500) and logged by the app's handler
            log.exception("unhandled error before any response")
            body = json.dumps(error_body(500, "Internal server error")).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
