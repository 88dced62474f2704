"""A lean HTTP/1.1 client for the proxy's hop (relay.py): pooled keep-alive connections, one request per call.

    client = H1Client()
    up = await client.post(worker.url, "/v1/chat/completions", payload, headers)   # after the response head
    up.status, up.content_type
    data = await up.read()           # whole body      | chunk = await up.readany()   # b"" at the end
    up.watch(30.0)                   # optional: readany() raises TimeoutError after 30 s without a byte
    up.release()                     # back to the pool (closed instead if unfinished) | up.close(): drop it
    await client.close()

Why not aiohttp's client: on the proxy's hot path it cost about as much CPU as the whole aiohttp server side
(request/response objects, URL handling, cookie, trace and timer machinery per call); this one writes the
request in one `transport.write` and parses the answer's head with a few bytes operations, which is all a
JSON POST to a known worker needs. Bodies framed by Content-Length, chunked encoding or the connection's end
(the connection's parser and the errors: h1parse.py); HTTP and HTTPS (default TLS context); credentials in
the URL become Basic auth, as aiohttp sends them.

Failures raise `UpstreamConnectionError`: `ConnectFailed` (refused, unreachable, connect timeout: the worker
is down), `Disconnected` (the connection ended before the response head: a pooled connection the worker had
just closed, or a crash) or `PayloadError` (it ended inside the body). Time limits raise TimeoutError:
`post(..., deadline=Deadline(s))` for the head (and `read` for the body), `Response.watch(stall_s)` for a
stream's silences, both checked by one ticker per client (TICK_S); a cancelled call drops its connection,
which tells the worker to stop generating.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import math
import ssl as ssl_module
import time
from urllib.parse import unquote, urlsplit

from adaptspec.proxy.h1parse import (  # noqa: F401 (re-exported: the errors are part of this client's API)
    MAX_HEAD,
    ConnectFailed,
    Disconnected,
    PayloadError,
    UpstreamConnectionError,
    _Connection,
)

CONNECT_TIMEOUT_S = 5.0
KEEPALIVE_S = 75.0  # an idle pooled connection older than this is closed, not reused
HIGH_WATER = 1 << 20  # buffered, unread body bytes above which the socket stops being read
TICK_S = 0.05  # how often a client checks its requests' deadlines and stalls (one timer for all of them)


class Deadline:
    """The loop time `at` by which a request must have its answer: the head from `post`, and the whole body
    from `read` (a stream's caller ends it with `Response.end_deadline` once the head is in). Past it the
    request fails with TimeoutError. `reschedule(when)` and `expired()` are asyncio.Timeout's, so that
    Pools.mark_unhealthy can end the attempts waiting on a worker it ejects (`reschedule(-1)`: at once).
    The client checks deadlines every TICK_S with one timer, where asyncio.timeout costs a timer and the
    task-cancelling machinery per request (~27k instructions)."""

    __slots__ = ("at", "fired", "response")

    def __init__(self, seconds: float | None) -> None:
        self.at = asyncio.get_running_loop().time() + seconds if seconds else math.inf
        self.fired = False
        self.response: Response | None = None

    def expired(self) -> bool:
        return self.fired

    def reschedule(self, when: float) -> None:
        self.at = when
        if when <= asyncio.get_running_loop().time():
            self._fire()

    def _fire(self) -> None:
        self.fired = True
        if self.response is not None:
            self.response._fail(TimeoutError("no answer from the worker before the deadline"))


class _Origin:
    """One worker base URL, parsed once: where to connect and what every request to it carries."""

    __slots__ = ("host", "port", "ssl", "prefix", "host_header", "auth", "idle")

    def __init__(self, base_url: str):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = u.hostname
        self.ssl = u.scheme == "https"
        self.port = u.port or (443 if self.ssl else 80)
        self.prefix = u.path.rstrip("/")
        default = self.port == (443 if self.ssl else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default else f"{host}:{self.port}"
        self.auth = None
        if u.username is not None:
            pair = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
            self.auth = "Basic " + base64.b64encode(pair).decode()
        self.idle: collections.deque[_Connection] = collections.deque()


class Response:
    """The worker's answer: `status`, `headers` (lower-case names), `content_type`; the body through `read`
    or `readany`. Hand the connection back with `release` (reused if the body was read to its end) or drop it
    with `close`."""

    __slots__ = ("_conn", "_client", "_origin", "_loop", "status", "content_type", "_head", "_headers", "_chunks",
                 "_size", "_done", "_exc", "_waiter", "_keep", "_whole", "_stall_s", "_last", "_stalled", "_deadline")

    def __init__(self, conn: _Connection, client: H1Client, origin: _Origin) -> None:
        self._conn: _Connection | None = conn
        self._client, self._origin, self._loop = client, origin, conn.loop
        self.status = 0
        self.content_type = ""
        self._head: bytes | None = None  # the raw response head, once it has arrived
        self._headers: dict[str, str] | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._done = False
        self._exc: UpstreamConnectionError | None = None
        self._waiter: asyncio.Future | None = None
        self._keep = False
        self._whole = False  # read(): no flow control, the whole body is wanted
        self._stall_s = 0.0  # watch(): readany() raises TimeoutError after this long without body bytes
        self._last = 0.0  # loop time of the last body bytes (or of the last stall reported)
        self._stalled = False
        self._deadline: Deadline | None = None

    # -- fed by the connection ----------------------------------------------------------------------------
    def _set_head(self, status: int, head: bytes, ctype: bytes | None) -> None:
        self.status, self._head = status, head
        self.content_type = ctype.split(b";", 1)[0].strip().decode("latin-1") if ctype else "application/octet-stream"
        self._wake()

    @property
    def headers(self) -> dict[str, str]:
        """The response headers, names lower-cased (parsed on first use; a repeated name: the last one)."""
        if self._headers is None:
            self._headers = {}
            for line in self._head.split(b"\r\n")[1:] if self._head else ():
                name, _, value = line.partition(b":")
                self._headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        return self._headers

    def _data_one(self, chunk: bytes) -> None:
        """_data([chunk]), without the list."""
        self._last = self._loop.time()
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size > HIGH_WATER and not self._whole:
            self._conn.pause()
        self._wake()

    def _data(self, body: list[bytes]) -> None:
        self._last = self._loop.time()
        self._chunks += body
        self._size += sum(map(len, body))
        if self._size > HIGH_WATER and not self._whole:
            self._conn.pause()
        self._wake()

    def _finish(self) -> None:
        if self._exc is None:
            self._done = True
            self._wake()

    def _fail(self, exc: UpstreamConnectionError) -> None:
        if not self._done and self._exc is None:  # the first failure is the one to tell
            self._exc = exc
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _check(self, now: float) -> bool:
        """The client's ticker: fire a passed deadline, report a stall; False once nothing is left to watch."""
        if self._done or self._exc is not None or self._conn is None:
            return False
        dl = self._deadline
        if dl is not None and now >= dl.at:
            dl._fire()
            return False
        if self._stall_s and now - self._last >= self._stall_s and not self._stalled:
            self._stalled = True
            self._wake()
        return bool(self._stall_s) or dl is not None

    # -- the caller's side --------------------------------------------------------------------------------
    def watch(self, stall_s: float) -> None:
        """From now on, readany() raises TimeoutError when no body bytes have arrived for `stall_s` seconds
        (then counts again from the error). Checked by the client's ticker: no timer per read."""
        self._stall_s, self._last = stall_s, self._loop.time()
        self._client._watch(self)

    def end_deadline(self) -> None:
        """The head is in; the body may take as long as it takes (a stream: watch() its stalls instead)."""
        if self._deadline is not None:
            self._deadline.response = None
            self._deadline = None

    async def readany(self) -> bytes:
        """The body bytes received since the last call (waiting for some); b"" once the body has ended."""
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self._done:
                return b""
            if self._stalled:
                self._stalled = False
                self._last = self._loop.time()  # the next read waits a whole stall period again
                raise TimeoutError(f"no body bytes for {self._stall_s:g} s")
            await self._wait()
        return self._take()

    def read_nowait(self) -> bytes | None:
        """As `readany`, without waiting: None when nothing has arrived yet."""
        if not self._chunks:
            if self._exc is not None:
                raise self._exc
            return b"" if self._done else None
        return self._take()

    def _take(self) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        conn = self._conn
        if conn is not None and conn._paused:
            conn.resume()
        return data

    async def read(self) -> bytes:
        """The whole body."""
        self._whole = True
        if self._conn is not None:
            self._conn.resume()
        while not self._done:
            if self._exc is not None:
                raise self._exc
            await self._wait()
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        return data

    def _unwatch(self) -> None:
        self.end_deadline()
        self._stall_s = 0.0
        self._client._watched.discard(self)

    def release(self) -> None:
        """Back to the pool when the body was read to its end on a reusable connection; else closed."""
        self._unwatch()
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.response = None
        if self._done and self._keep and not conn.closed and not self._chunks:
            self._client._put(self._origin, conn)
        else:
            conn.abort()

    def close(self) -> None:
        """Drop the connection (an unfinished generation: the worker sees the client go)."""
        self._unwatch()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.response = None
            conn.abort()


class H1Client:
    """Keep-alive connections per worker base URL, most recently used first; no limit: as many stay open as
    were ever in flight at once (closed when the worker closes them or after `keepalive_s` unused)."""

    def __init__(self, connect_timeout_s: float = CONNECT_TIMEOUT_S, keepalive_s: float = KEEPALIVE_S) -> None:
        self.connect_timeout_s, self.keepalive_s = connect_timeout_s, keepalive_s
        self._origins: dict[str, _Origin] = {}
        self._tls: ssl_module.SSLContext | None = None
        self._watched: set[Response] = set()  # responses with a deadline or a stall watch
        self._ticker: asyncio.TimerHandle | None = None

    async def post(self, base_url: str, path: str, body: bytes, headers: dict[str, str],
                   deadline: Deadline | None = None) -> Response:
        """POST `body` to `base_url` + `path` -> the response, once its head has arrived (TimeoutError if
        not by `deadline`, which goes on bounding `read`)."""
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = _Origin(base_url)
        head = _request_head(origin, path, len(body), headers)
        conn = await self._acquire(origin, deadline)
        resp = conn.response = Response(conn, self, origin)
        try:
            if deadline is not None:
                if deadline.fired:  # ended while connecting (its worker ejected)
                    raise TimeoutError("no answer from the worker before the deadline")
                resp._deadline, deadline.response = deadline, resp
                self._watch(resp)
            if len(body) < 65536:
                conn.transport.write(head + body)
            else:
                conn.transport.write(head)
                conn.transport.write(body)
            while resp._head is None:
                if resp._exc is not None:
                    raise resp._exc
                await resp._wait()
        except BaseException:  # cancelled, timed out or failed before the head: this connection is done
            resp.close()
            raise
        return resp

    async def _acquire(self, origin: _Origin, deadline: Deadline | None = None) -> _Connection:
        idle, now = origin.idle, time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.abort()
        loop = asyncio.get_running_loop()
        tls = self._tls_context() if origin.ssl else None
        limit = self.connect_timeout_s if deadline is None else min(self.connect_timeout_s,
                                                                    max(0.0, deadline.at - loop.time()))
        try:
            async with asyncio.timeout(limit):
                _, conn = await loop.create_connection(_Connection, origin.host, origin.port, ssl=tls)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {origin.host}:{origin.port}: "
                                f"{exc.__class__.__name__}: {exc}") from None
        return conn

    def _watch(self, resp: Response) -> None:
        self._watched.add(resp)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().call_later(TICK_S, self._tick)

    def _tick(self) -> None:
        """Every TICK_S while a response is watched: fire passed deadlines, report stalls."""
        self._ticker = None
        watched = self._watched
        if not watched:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for resp in list(watched):
            if not resp._check(now):
                watched.discard(resp)
        if watched:
            self._ticker = loop.call_later(TICK_S, self._tick)

    def _tls_context(self) -> ssl_module.SSLContext:
        if self._tls is None:
            self._tls = ssl_module.create_default_context()
        return self._tls

    def _put(self, origin: _Origin, conn: _Connection) -> None:
        idle = origin.idle
        conn.idle_since = now = time.monotonic()
        if idle and (idle[0].closed or now - idle[0].idle_since > self.keepalive_s):
            idle.popleft().abort()  # the least recently used one, unused for too long (or gone): one per release
        idle.append(conn)

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        self._watched.clear()
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop().abort()
        self._origins.clear()


def _request_head(origin: _Origin, path: str, length: int, headers: dict[str, str]) -> bytes:
    auth = f"Authorization: {origin.auth}\r\n" if origin.auth is not None and "Authorization" not in headers else ""
    fields = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
    if fields.count("\n") != len(headers) or fields.count("\r") != len(headers):  # a CR or LF of a caller's
        name = next(n for n, v in headers.items() if "\n" in n + v or "\r" in n + v)
        raise ValueError(f"newline in the value of the upstream header {name!r}")
    text = (f"POST {origin.prefix}{path} HTTP/1.1\r\nHost: {origin.host_header}\r\nContent-Length: {length}\r\n"
            f"{auth}{fields}\r\n")
    return text.encode("utf-8", "surrogateescape")  # header bytes the server decoded this way pass as they came
