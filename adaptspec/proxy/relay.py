"""The relay under every proxied request, generation and pass-through alike, on the one upstream client
(h1client.py): send to a worker, move to another on failures before the first byte, relay the answer.

    resp, status = await dispatch(exchange)     # exchange: an `Exchange` (handlers._Attempt, passthrough._Call)

The caller's `Exchange` says where the request goes and what it sends (`target`), picks another worker when
one fails before answering (`move`), and sees the answer: a whole one (`answered`), or a stream's chunks
through its `Tap` (generation reads usage and speculation stats there; pass-through forwards as is).

Until the client has seen a byte the request can move: a refused or timed-out connection, a connection that
ended before the response head, a head (stream) or whole answer (non-stream) that did not come in time, and a
worker ejected meanwhile (Pools.mark_unhealthy ends the deadlines in `Worker.heads`) all retry on another
eligible worker; a refused / timed-out connect ejects the worker at once, a dropped pooled connection the
second time. A 502/503/504 answer counts as a failure towards ejection and is relayed as the worker wrote
it. After the first byte a stalled or dropped stream ejects its worker and ends with an SSE error event.
"""

from __future__ import annotations

import logging
import math
import time

from aiohttp import web

from adaptspec.errors import UpstreamError
from adaptspec.proxy import accesslog
from adaptspec.proxy.errors import sse_error_event
from adaptspec.proxy.h1client import ConnectFailed, Deadline, Response, UpstreamConnectionError

log = logging.getLogger(__name__)

UPSTREAM_ERRORS = (UpstreamConnectionError, TimeoutError)  # before the first byte: retried; after: cut


class Tap:
    """What a relayed stream passes through; this one forwards every chunk as it came (pass-through)."""

    __slots__ = ("whole", "ends")

    def __init__(self) -> None:
        self.whole = False  # the client holds a whole response once the bytes written so far arrive
        self.ends = False  # what `feed` returned last ends the client's stream (then the rest is drained)

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to forward to the client for this upstream chunk (and `ends` for them)."""
        return chunk

    def close(self, ended: bool) -> bytes:
        """The stream is over (`ended`: the worker ended it; else it failed): bytes still to write."""
        self.whole = ended  # every byte the worker sent was relayed
        return b""


class Exchange:
    """One request through the relay. Subclasses set `request`, `proxy`, `path` (upstream) and `stream`, and
    implement the methods below."""

    __slots__ = ("request", "proxy", "path", "stream")
    serving = "for this model"  # which workers, in the 503 once every one has failed before answering

    def target(self) -> tuple:
        """(worker, body bytes) of the current attempt."""
        raise NotImplementedError

    def sending(self) -> None:
        """Just before an attempt is sent (its metrics)."""

    def move(self, exclude: set[str]) -> None:
        """Make the next attempt go to another eligible worker, none in `exclude` (UpstreamError if none)."""
        raise NotImplementedError

    def headers(self) -> dict[str, str]:
        """The response headers of ours (closed sets only: never a client's string)."""
        raise NotImplementedError

    def answered(self, up: Response, data: bytes) -> None:
        """A whole (non-stream) answer arrived, before it is relayed."""

    def tap(self) -> Tap:
        return Tap()


def upstream_headers(proxy, request: web.Request, worker) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if worker.api_key:
        headers.update(worker.auth_headers)
    elif not proxy.api_keys:
        auth = request.headers.get("Authorization")
        if auth:  # transparent proxy: no keys of ours in play, pass the client's through
            headers["Authorization"] = auth
    headers.update(accesslog.upstream_headers(request))  # request id, W3C trace context
    return headers


async def dispatch(ex: Exchange) -> tuple[web.StreamResponse, int]:
    """Send, moving to another worker on failures before the first byte -> (response, status); the
    exchange's `target` ends as the attempt that answered."""
    pools = ex.proxy.pools
    failed: dict[str, int] | None = None  # failures before the first byte, by worker name
    while True:
        ex.sending()
        worker, payload = ex.target()
        worker.inflight += 1
        up, ran = None, False
        try:
            try:
                up, data = await _send(ex, worker, payload)
                ran = True  # the worker has it: once it ends, the worker's last sample over-counts its running
            except UPSTREAM_ERRORS as exc:
                failed = {} if failed is None else failed
                _retry(ex, worker, exc, failed)
                continue
            if up.status in (502, 503, 504):  # the worker (or what is behind it) is unwell; other 5xx can be
                pools.failure(worker, f"HTTP {up.status}")  # caused by a request: a client must not eject
            elif up.status < 500:
                pools.success(worker)
            if data is None:
                return await _relay_stream(ex, worker, up)
            ex.answered(up, data)
            return web.Response(status=up.status, body=data, headers=ex.headers(),
                                content_type=up.content_type or "application/json"), up.status
        except BaseException:
            if up is not None:
                up.close()  # unfinished (client gone, error): drop the connection, which aborts upstream work
                up = None
            raise
        finally:
            worker.inflight -= 1
            worker.finished += ran
            if up is not None:
                up.release()


async def _send(ex: Exchange, worker, payload: bytes) -> tuple[Response, bytes | None]:
    """POST `payload` -> (response, whole body; None for an SSE stream still to relay).

    A stream's head must come within first_byte_timeout_s, a whole non-stream answer within
    request_timeout_s (TimeoutError), and both end at once when the worker is ejected meanwhile."""
    proxy = ex.proxy
    dl = Deadline(proxy.first_byte_timeout_s if ex.stream else proxy.request_timeout_s)
    worker.heads.add(dl)
    up = None
    try:
        up = await proxy.h1.post(worker.url, ex.path, payload, upstream_headers(proxy, ex.request, worker), dl)
        if ex.stream and up.status == 200 and up.content_type == "text/event-stream":
            up.end_deadline()  # from here on its stalls are watched (_relay_stream)
            return up, None
        return up, await up.read()
    except BaseException:
        if up is not None:
            up.close()
        raise
    finally:
        worker.heads.discard(dl)


def _retry(ex: Exchange, worker, exc: BaseException, failed: dict[str, int]) -> None:
    proxy = ex.proxy
    failed[worker.name] = failed.get(worker.name, 0) + 1
    proxy.metrics.child(proxy.metrics.retries, worker.name).inc()
    accesslog.count_retry()
    # A refused/timed-out connect means the worker is down; a dropped pooled connection gets one more try.
    if isinstance(exc, (ConnectFailed, TimeoutError)) or failed[worker.name] >= 2:
        proxy.pools.mark_unhealthy(worker, f"{exc.__class__.__name__}: {exc}")
    exclude = {name for name, n in failed.items() if n >= 2 or not proxy.pools.workers.get(name, worker).healthy}
    try:
        ex.move(exclude)
    except UpstreamError:
        raise UpstreamError(f"All workers {ex.serving} failed before answering (last: {worker.name}: "
                            f"{exc.__class__.__name__}); retry shortly.", status=503) from None
    log.info("retrying request on %s after %s failed before the first byte (%s)", ex.target()[0].name,
             worker.name, exc.__class__.__name__)


async def _relay_stream(ex: Exchange, worker, up: Response) -> tuple[web.StreamResponse, int]:
    resp = web.StreamResponse(status=200, headers={**ex.headers(), "Cache-Control": "no-cache",
                                                   **accesslog.id_header()})
    resp.content_type = "text/event-stream"
    await resp.prepare(ex.request)
    tap = ex.tap()
    quiet_since = time.monotonic()
    up.watch(ex.proxy.stall_timeout_s)  # a worker silent this long is stalled: readany raises TimeoutError
    while True:
        try:
            chunk = up.read_nowait()  # what has arrived; a wait only when there is nothing yet
            if chunk is None:
                chunk = await up.readany()
        except UPSTREAM_ERRORS as exc:
            if isinstance(exc, TimeoutError) and _queued_not_stalled(ex.proxy, worker, quiet_since):
                continue
            status = await _stream_failed(ex.proxy, worker, resp, exc)
            tap.close(False)
            return resp, status
        if not chunk:
            break
        quiet_since = worker.last_ok = time.monotonic()  # any chunk on any stream shows the worker is alive
        out = tap.feed(chunk)
        if out:
            last = tap.ends
            try:
                await (resp.write_eof(out) if last else resp.write(out))  # the end: with the terminator, one write
            except ConnectionResetError:
                up.close()  # client gone: drop the upstream connection so the worker aborts the request
                return resp, 200 if last else 499
            if last:
                await _drain(up)
                return resp, 200
    tail = tap.close(True)
    try:
        if tail:
            await resp.write(tail)
        await resp.write_eof()
    except ConnectionResetError:
        # a client that had its whole response may close before the chunked terminator: still delivered
        return resp, 200 if tap.whole else 499
    return resp, 200


async def _drain(up: Response) -> None:
    """After the client's stream ended ([DONE]): read the worker's stream to its end, so that its connection
    goes back to the pool; anything after [DONE] is not an OpenAI event and is dropped."""
    try:
        while await up.readany():
            pass
    except UPSTREAM_ERRORS:
        up.close()


def _queued_not_stalled(proxy, worker, quiet_since: float) -> bool:
    """A silent stream on a worker that is alive (chunks on its other streams, answered scrapes within the
    stall timeout) is waiting in the engine's queue or behind a long prefill under load, not frozen: keep
    waiting, up to request_timeout_s of silence for this stream. A frozen worker answers nothing at all."""
    now = time.monotonic()
    return (now - worker.last_ok < proxy.stall_timeout_s
            and now - quiet_since < (proxy.request_timeout_s or math.inf))


async def _stream_failed(proxy, worker, resp: web.StreamResponse, exc: BaseException) -> int:
    """A worker stalled or dropped mid-stream: eject it, end the client's stream with an SSE error event;
    the status the metrics count (the client saw 200 + the event)."""
    stall = proxy.stall_timeout_s
    stalled = isinstance(exc, TimeoutError)
    what = f"sent nothing for {stall:g} s" if stalled else f"failed mid-stream ({exc.__class__.__name__})"
    proxy.pools.mark_unhealthy(worker, f"stream {what}")
    log.warning("upstream %s %s; ending the client's stream with an error event", worker.name, what)
    try:
        await resp.write(sse_error_event(f"The upstream worker {worker.name} {what}; the response is incomplete.",
                                         code="upstream_timeout" if stalled else "upstream_disconnected"))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client is gone too; nothing left to tell it
    return 504 if stalled else 502
