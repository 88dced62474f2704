"""Pass-through endpoints: POST /v1/embeddings, /v1/responses, /tokenize, /detokenize.

No classification and no speculation decision: the body goes unchanged to the least-loaded healthy worker
whose engine offers the endpoint (`Engine.passthrough`, engines.py) and that serves the body's `model` (any
such worker when the body names none, as /tokenize allows). Everything else is the generation path's: API
keys, the body limits (size after decompression, read timeout, JSON depth), the request id and trace context
forwarded upstream, the access-log line (class / proposer / gamma stay null: no decision), and failures
before the answer's first byte (refused connection, timeout, ejection) move the request to another worker.
Answers, errors included, are relayed as the worker wrote them; an SSE stream (/v1/responses with
`"stream": true`) chunk by chunk, ended with an SSE error event when its worker stalls or drops.

Errors of the proxy's own: 404 `endpoint_not_supported` when no configured worker's engine offers the
endpoint (for the model), 404 `model_not_found` for a model nobody serves, 503 when no offering worker is
healthy. Counted in `adaptspec_passthrough_requests_total{endpoint, worker, code}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
from aiohttp import web

from adaptspec.errors import RequestError, UpstreamError
from adaptspec.jsonlimits import loads_limited
from adaptspec.proxy import accesslog
from adaptspec.proxy.engines import PASSTHROUGH
from adaptspec.proxy.errors import sse_error_event
from adaptspec.proxy.handlers import _read_body as read_body
from adaptspec.proxy.handlers import _upstream_headers as upstream_headers
from adaptspec.proxy.upstream import Pools, Worker

_PRE_RESPONSE_ERRORS = (aiohttp.ClientConnectionError, TimeoutError)
_STREAM_ERRORS = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError)


def add_routes(app: web.Application) -> None:
    for path in PASSTHROUGH:
        app.router.add_post(path, _handler(path))


def _handler(path: str):
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _Relay(request, path).run()

    handle.__name__ = f"passthrough_{path.rsplit('/', 1)[-1]}"
    return handle


def offering(pools: Pools, path: str, model: str | None) -> list[Worker]:
    """Workers (healthy or not) whose engine offers `path` and that serve `model` (any model when None)."""
    workers = pools.serving(model) if model is not None else list(pools.workers.values())
    found = [w for w in workers if path in w.adapter.passthrough]
    if not found:
        which = f" for the model {model!r}" if model is not None else ""
        raise RequestError(f"{path} is not offered by any worker{which}: their engines do not serve it.",
                           status=404, type="invalid_request_error", code="endpoint_not_supported")
    return found


def _parse(raw: bytes) -> tuple[str | None, bool]:
    """(model or None, stream) of a JSON object body; the rest is the worker's to validate."""
    body = loads_limited(raw)  # depth and number limits: 400, never a RecursionError / ValueError 500
    if not isinstance(body, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise RequestError(f"Invalid value for 'model': expected a non-empty string, got {model!r}.",
                           code="invalid_type", param="model")
    return model, body.get("stream") is True


class _Relay:
    """One pass-through request: read and check the body, pick a worker, send (moving on failures before
    the first byte), relay. `worker` ends as the worker that answered."""

    def __init__(self, request: web.Request, path: str):
        self.request, self.path, self.proxy = request, path, request.app["proxy"]
        self.raw, self.stream = b"", False
        self.candidates: list[Worker] = []
        self.failed: dict[str, int] = {}
        self.worker: Worker | None = None

    async def run(self) -> web.StreamResponse:
        proxy, status = self.proxy, 500
        try:
            proxy.check_auth(self.request)
            self.raw = await read_body(self.request, proxy.max_body_bytes, proxy.body_timeout_s)
            model, self.stream = _parse(self.raw)
            accesslog.note(model=model)
            self.candidates = offering(proxy.pools, self.path, model)
            self.worker = self._pick()
            resp, status = await self._dispatch()
            return resp
        except RequestError as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # client went away (nginx's convention)
            raise
        finally:
            name = "none" if self.worker is None else self.worker.name
            accesslog.note(status=status, **({} if self.worker is None else {"worker": name}))
            proxy.metrics.child(proxy.metrics.passthrough, self.path, name, str(status)).inc()

    def _pick(self, exclude: set[str] | frozenset[str] = frozenset()) -> Worker:
        """The least-loaded healthy candidate (in flight from every replica + the worker's own batch)."""
        remote = self.proxy.state.remote_inflight
        eligible = Pools.eligible(self.candidates, exclude)  # 503 when none is healthy
        return min(eligible, key=lambda w: w.state(remote.get(w.name, 0)).load)

    async def _dispatch(self) -> tuple[web.StreamResponse, int]:
        proxy = self.proxy
        while True:
            worker = self.worker
            worker.inflight += 1
            up = None
            try:
                try:
                    up, data = await self._send(worker)
                except _PRE_RESPONSE_ERRORS as exc:
                    self.worker = self._retry(worker, exc)
                    continue
                if up.status in (502, 503, 504):  # the worker (or what is behind it) is unwell
                    proxy.pools.failure(worker, f"HTTP {up.status}")
                elif up.status < 500:
                    proxy.pools.success(worker)
                if data is None:
                    return await self._relay_stream(up)
                return web.Response(status=up.status, body=data, headers=self._headers(),
                                    content_type=up.content_type or "application/json"), up.status
            except BaseException:
                if up is not None:
                    up.close()  # unfinished (client gone, error): drop the connection, which aborts upstream work
                    up = None
                raise
            finally:
                worker.inflight -= 1
                if up is not None:
                    up.release()

    async def _send(self, worker: Worker) -> tuple[aiohttp.ClientResponse, bytes | None]:
        """POST the body -> (response, whole body; None for an SSE stream still to relay). The head of a
        stream must come within first_byte_timeout_s, a whole answer within request_timeout_s; both end at
        once when the worker is ejected meanwhile (Pools.mark_unhealthy expires the deadlines in `heads`)."""
        proxy, up = self.proxy, None
        try:
            async with asyncio.timeout(proxy.first_byte_timeout_s if self.stream else proxy.request_timeout_s) as dl:
                worker.heads.add(dl)
                try:
                    up = await proxy.session.post(worker.url + self.path, data=self.raw,
                                                  timeout=proxy.upstream_timeout,
                                                  headers=upstream_headers(proxy, self.request, worker))
                    if self.stream and up.status == 200 and up.content_type == "text/event-stream":
                        return up, None
                    return up, await up.read()
                finally:
                    worker.heads.discard(dl)
        except BaseException:
            if up is not None:
                up.close()
            raise

    def _retry(self, worker: Worker, exc: BaseException) -> Worker:
        proxy, failed = self.proxy, self.failed
        failed[worker.name] = failed.get(worker.name, 0) + 1
        proxy.metrics.child(proxy.metrics.retries, worker.name).inc()
        accesslog.count_retry()
        # a refused / timed-out connect means the worker is down; a dropped pooled connection gets one more try
        if isinstance(exc, (aiohttp.ClientConnectorError, TimeoutError)) or failed[worker.name] >= 2:
            proxy.pools.mark_unhealthy(worker, f"{exc.__class__.__name__}: {exc}")
        exclude = {n for n, k in failed.items() if k >= 2 or not proxy.pools.workers.get(n, worker).healthy}
        try:
            return self._pick(exclude)
        except UpstreamError:
            raise UpstreamError(f"All workers offering {self.path} failed before answering (last: {worker.name}: "
                                f"{exc.__class__.__name__}); retry shortly.", status=503) from None

    def _headers(self) -> dict[str, str]:
        return {"x-adaptspec-worker": self.worker.name}  # a config name: a closed set

    async def _relay_stream(self, up: aiohttp.ClientResponse) -> tuple[web.StreamResponse, int]:
        worker, stall = self.worker, self.proxy.stall_timeout_s
        resp = web.StreamResponse(status=200, headers={**self._headers(), "Cache-Control": "no-cache",
                                                       **accesslog.id_header()})
        resp.content_type = "text/event-stream"
        await resp.prepare(self.request)
        while True:
            try:
                async with asyncio.timeout(stall):  # a worker silent this long is stalled
                    chunk = await up.content.readany()
            except _STREAM_ERRORS as exc:
                stalled = isinstance(exc, TimeoutError)
                what = f"sent nothing for {stall:g} s" if stalled else f"failed mid-stream ({exc.__class__.__name__})"
                self.proxy.pools.mark_unhealthy(worker, f"stream {what}")
                try:
                    await resp.write(sse_error_event(f"The upstream worker {worker.name} {what}; the response is "
                                                     "incomplete.",
                                                     code="upstream_timeout" if stalled else "upstream_disconnected"))
                    await resp.write_eof()
                except ConnectionResetError:
                    pass  # the client is gone too; nothing left to tell it
                return resp, 504 if stalled else 502
            if not chunk:
                break
            worker.last_ok = time.monotonic()
            try:
                await resp.write(chunk)
            except ConnectionResetError:
                up.close()  # client gone: drop the upstream connection so the worker aborts the request
                return resp, 499
        # a client that had every byte may close before the chunked terminator: still delivered
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp, 200
