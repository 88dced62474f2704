"""The response side of the proxy's HTTP/1.1 client (h1client.py): one keep-alive connection's protocol, which
parses the worker's answers into their `Response` as bytes arrive, and the errors an exchange can end with.

The parser takes the status line and the framing headers of a response head (the other headers are parsed only
if asked for, by `Response.headers`), then the body: framed by Content-Length, chunked encoding (an SSE stream's
usual arrival, one whole chunk, takes a fast path) or the connection's end. Body bytes are handed to the
response once per arrival; a connection with bytes nobody asked for, or with bad framing, is aborted.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adaptspec.proxy.h1client import Response

MAX_HEAD = 64 * 1024
_NO_BODY = frozenset({204, 304})
_HEX = b"0123456789abcdefABCDEF"
# parser states: the head; a body of known length; chunked: size line, data, the CRLF after it, trailers;
# a body that runs to the connection's end
_HEAD, _LENGTH, _SIZE, _CHUNK, _CHUNK_END, _TRAILER, _TO_EOF = range(7)


class UpstreamConnectionError(Exception):
    """The exchange with the worker failed at the connection level."""


class ConnectFailed(UpstreamConnectionError):
    """No connection could be made (refused, unreachable, timed out)."""


class Disconnected(UpstreamConnectionError):
    """The connection ended before the response head arrived."""


class PayloadError(UpstreamConnectionError):
    """The connection ended, or the worker sent bad framing, inside the response."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time into its `Response`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.idle_since = 0.0
        self.response: Response | None = None
        self._buf = b""
        self._state = _HEAD
        self._left = 0  # body or chunk bytes still to come
        self._paused = False

    # -- asyncio.Protocol -----------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        resp = self.response
        if resp is None:
            return
        if self._state == _TO_EOF:  # the body was "until the connection ends": that is its end
            self._state = _HEAD
            resp._finish()
        elif resp._head is None:
            resp._fail(Disconnected(f"the connection closed before the response head ({exc or 'EOF'})"))
        else:
            resp._fail(PayloadError(f"the connection closed inside the response body ({exc or 'EOF'})"))

    def data_received(self, data: bytes) -> None:
        resp = self.response
        if resp is None or resp._done:  # bytes nobody asked for: the connection is not reusable
            self.abort()
            return
        if self._state == _SIZE and not self._buf:  # a stream's usual arrival: one whole chunk (an SSE event)
            cut = data.find(b"\r\n", 0, 10)
            if cut > 0 and not data[:cut].strip(_HEX):  # hex digits only (the general path judges anything else)
                stop = cut + 2 + int(data[:cut], 16)
                if stop > cut + 2 and len(data) == stop + 2 and data.endswith(b"\r\n"):
                    resp._data_one(data[cut + 2:stop])
                    return
        body: list[bytes] = []
        try:
            self._feed(resp, self._buf + data if self._buf else data, body)
        except PayloadError as exc:
            self.abort()
            resp._fail(exc)
            return
        finally:
            if body:  # one hand-over per arrival, however many chunks it held
                resp._data(body)
        if self._state == _HEAD and resp._head is not None:  # back to "a head next": this answer is whole
            resp._finish()

    # -- parsing ----------------------------------------------------------------------------------------
    def _feed(self, resp: Response, data: bytes, body: list[bytes]) -> None:
        """Parse `data` (with what was left over): the head into `resp`, body bytes onto `body`."""
        self._buf = b""
        pos, end = 0, len(data)
        while True:
            state = self._state
            if state == _HEAD:
                cut = data.find(b"\r\n\r\n", pos)
                if cut < 0:
                    if end - pos > MAX_HEAD:
                        raise PayloadError("response head larger than 64 KiB")
                    self._buf = data[pos:]
                    return
                pos = self._head(resp, data[pos:cut], cut + 4)
                if self._state == _HEAD and resp._head is not None:  # a whole answer without a body
                    resp._keep = resp._keep and pos == end  # bytes after it: not reusable
                    return
                continue
            if pos >= end:
                return
            if state == _SIZE:
                pos = self._chunks(data, pos, end, body)
            elif state in (_LENGTH, _CHUNK):
                take = min(self._left, end - pos)
                body.append(data if take == end else data[pos:pos + take])
                pos += take
                self._left -= take
                if self._left:
                    return
                if state == _LENGTH:
                    self._state = _HEAD
                    resp._keep = resp._keep and pos == end
                    return
                self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if end - pos < 2:
                    self._buf = data[pos:]
                    return
                if data[pos:pos + 2] != b"\r\n":
                    raise PayloadError("chunk data not followed by CRLF")
                pos += 2
                self._state = _SIZE
            elif state == _TRAILER:
                cut = data.find(b"\r\n", pos)
                if cut < 0:
                    if end - pos > 4096:
                        raise PayloadError("trailer line longer than 4 KiB")
                    self._buf = data[pos:]
                    return
                if cut == pos:  # the empty line after the trailers ends the body
                    self._state = _HEAD
                    resp._keep = resp._keep and cut + 2 == end
                    return
                pos = cut + 2
            else:  # _TO_EOF
                body.append(data[pos:] if pos else data)
                return

    def _chunks(self, data: bytes, pos: int, end: int, body: list[bytes]) -> int:
        """Whole chunks from `pos` on, in one loop (an SSE stream is one small chunk per event); stops at the
        last chunk, a partial one or a partial size line. Returns where parsing goes on."""
        while True:
            cut = data.find(b"\r\n", pos)
            if cut < 0:
                if end - pos > 4096:
                    raise PayloadError("chunk size line longer than 4 KiB")
                self._buf = data[pos:]
                return end
            try:  # the common case, hex digits alone (int() also reads "+1f", "1_f", "0x1f": harmless here)
                n = int(data[pos:cut], 16)
            except ValueError:
                n = _chunk_size(data[pos:cut])  # with an extension, or not a size at all
            if n < 0:
                raise PayloadError(f"bad chunk size line {data[pos:cut][:20]!r}")
            start = cut + 2
            if n == 0:
                self._state = _TRAILER
                return start
            stop = start + n
            if stop + 2 > end:  # the chunk (or its CRLF) goes on in the next arrival
                self._state, self._left = _CHUNK, n
                return start
            if data[stop:stop + 2] != b"\r\n":
                raise PayloadError("chunk data not followed by CRLF")
            body.append(data[start:stop])
            pos = stop + 2
            if pos == end:
                return end

    def _head(self, resp: Response, head: bytes, body_at: int) -> int:
        """Take the status line and the framing headers; the others are parsed only if asked for
        (`Response.headers`). Returns where the body starts."""
        eol = head.find(b"\r\n")
        parts = (head if eol < 0 else head[:eol]).split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise PayloadError(f"bad status line {head[:40]!r}")
        status = int(parts[1])
        if 100 <= status < 200:  # interim (100 Continue): the real head follows
            return body_at
        low = head.lower()  # header names are case-insensitive, and so are the values read here
        resp._keep = parts[0] != b"HTTP/1.0" and _field(low, b"\r\nconnection:") != b"close"
        resp._set_head(status, head, _field(low, b"\r\ncontent-type:"))
        length = _field(low, b"\r\ncontent-length:")
        if b"chunked" in (_field(low, b"\r\ntransfer-encoding:") or b""):
            self._state = _SIZE
        elif status in _NO_BODY:
            self._state = _HEAD
        elif length is not None:
            if not length.isdigit():
                raise PayloadError(f"bad Content-Length {length[:20]!r}")
            self._left = int(length)
            self._state = _LENGTH if self._left else _HEAD
        else:
            self._state = _TO_EOF
            resp._keep = False
        return body_at

    # -- flow control / teardown ---------------------------------------------------------------------------
    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip()
    if not size.isalnum() or size.strip(_HEX):
        raise PayloadError(f"bad chunk size line {line[:20]!r}")
    return int(size, 16)


def _field(low: bytes, needle: bytes) -> bytes | None:
    """The value of the header `needle` names (b"\\r\\nname:") in a lower-cased response head (the first such
    line), stripped; None if absent."""
    at = low.find(needle)
    if at < 0:
        return None
    at += len(needle)
    end = low.find(b"\r\n", at)
    return low[at:end if end >= 0 else None].strip()
