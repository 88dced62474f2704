"""adaptspec.proxy.h1client against scripted HTTP/1.1 servers on loopback (asyncio servers in this process
that write exactly the bytes a test gives them): framing, keep-alive reuse, failures, cancellation."""

from __future__ import annotations

import asyncio
import base64

import pytest

from adaptspec.proxy.h1client import ConnectFailed, Deadline, Disconnected, H1Client, PayloadError

from .conftest import free_port


class Scripted:
    """A loopback server: reads each request (head + Content-Length body), records it, then runs the next
    script on the connection: a list of byte strings written one by one, or None to close at once
    (after a script ends the connection stays open for the next request unless `close_after`)."""

    def __init__(self, scripts: list, close_after: bool = False):
        self.scripts = list(scripts)
        self.close_after = close_after
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.connections = 0
        self.eof_seen = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.eof_seen.set()
                    return
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append((head, await reader.readexactly(length)))
                script = self.scripts.pop(0)
                if script is None:
                    return
                for piece in script:
                    writer.write(piece)
                    await writer.drain()
                if self.close_after:
                    return
        finally:
            writer.close()


def _ok(body: bytes, *extra: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return [head + b"".join(extra) + b"\r\n" + body]


def _chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    for c in chunks:
        out += b"%x;ext=1\r\n" % len(c) + c + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


async def test_content_length_body_and_the_connection_is_reused():
    async with Scripted([_ok(b'{"a":1}'), _ok(b'{"b":2}')]) as srv:
        client = H1Client()
        up = await client.post(srv.url + "/prefix/", "/v1/chat/completions", b'{"q":1}', {"X-Request-Id": "r1"})
        assert (up.status, up.content_type) == (200, "application/json")
        assert up.headers == {"content-type": "application/json", "content-length": "7"}
        assert await up.read() == b'{"a":1}'
        up.release()
        up = await client.post(srv.url + "/prefix/", "/v1/chat/completions", b"{}", {})
        assert await up.read() == b'{"b":2}'
        up.release()
        await client.close()
    assert srv.connections == 1
    head, body = srv.requests[0]
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /prefix/v1/chat/completions HTTP/1.1"
    assert f"Host: {srv.url[7:]}".encode() in lines and b"Content-Length: 7" in lines and b"X-Request-Id: r1" in lines
    assert body == b'{"q":1}'


async def test_chunked_body_split_at_every_byte_with_extensions_and_trailers():
    raw = _chunked(b"data: one\n\n", b"data: [DONE]\n\n", trailer=b"X-T: 1\r\n")
    async with Scripted([[raw[i:i + 1] for i in range(len(raw))], _ok(b"next")]) as srv:
        client = H1Client()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        assert up.content_type == "text/event-stream"
        await _read_all_then_reuse(client, srv, up, b"data: one\n\ndata: [DONE]\n\n")
    assert srv.connections == 1


async def _read_all_then_reuse(client: H1Client, srv, up, expected: bytes) -> None:
    """Read `up` to its end (== expected), then one more request on the pooled connection reads b"next"."""
    got = []
    while chunk := await up.readany():
        got.append(chunk)
    assert b"".join(got) == expected
    up.release()
    up = await client.post(srv.url, "/v1/completions", b"{}", {})  # the chunked answer ended cleanly
    assert await up.read() == b"next"
    up.release()
    await client.close()


async def test_body_to_the_end_of_the_connection_and_connection_close_are_not_reused():
    scripts = [[b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall ", b"of it"],
               _ok(b"x", b"Connection: close\r\n"), _ok(b"y")]
    async with Scripted(scripts, close_after=True) as srv:
        client = H1Client()
        for want in (b"all of it", b"x", b"y"):
            up = await client.post(srv.url, "/v1/completions", b"{}", {})
            assert await up.read() == want
            up.release()
        await client.close()
    assert srv.connections == 3


async def test_interim_100_and_a_204_without_body():
    async with Scripted([[b"HTTP/1.1 100 Continue\r\n\r\n", _ok(b"done")[0]], [b"HTTP/1.1 204 No Content\r\n\r\n"]]) \
            as srv:
        client = H1Client()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        assert (up.status, await up.read()) == (200, b"done")
        up.release()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        assert (up.status, await up.read(), up.content_type) == (204, b"", "application/octet-stream")
        up.release()
        await client.close()


async def test_refused_connection_is_connect_failed():
    client = H1Client()
    with pytest.raises(ConnectFailed, match="cannot connect"):
        await client.post(f"http://127.0.0.1:{free_port()}", "/v1/completions", b"{}", {})
    await client.close()


async def test_closed_before_the_head_is_disconnected_and_a_cut_body_is_a_payload_error():
    cut_length = [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"]
    cut_chunk = [_chunked(b"abcdef")[:-20]]
    async with Scripted([None, cut_length, cut_chunk], close_after=True) as srv:
        client = H1Client()
        with pytest.raises(Disconnected):
            await client.post(srv.url, "/v1/completions", b"{}", {})
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        with pytest.raises(PayloadError, match="inside the response body"):
            await up.read()
        up.release()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        with pytest.raises(PayloadError):
            while await up.readany():
                pass
        up.release()
        await client.close()


async def test_a_stream_of_one_whole_chunk_per_arrival():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    events = [b"data: one\n\n", b"data: %s\n\n" % (b"x" * 300), b"data: [DONE]\n\n"]
    pieces = [head, *(b"%X\r\n" % len(e) + e + b"\r\n" for e in events), b"0\r\n\r\n"]  # upper-case hex too
    async with Scripted([pieces, _ok(b"next")]) as srv:
        client = H1Client()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        await _read_all_then_reuse(client, srv, up, b"".join(events))
    assert srv.connections == 1


@pytest.mark.parametrize("pieces", [
    [b"3\r\nabcXY"],  # a whole chunk's length, no CRLF after the data
    [b"zz\r\nab\r\n"],  # letters that are not hex
    [b"2\r\nab\r\n", b"2\r\nabcd"],  # a good chunk, then a bad one
])
async def test_bad_framing_in_an_arrival_of_its_own_is_a_payload_error(pieces):
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with Scripted([[head, *pieces]]) as srv:
        client = H1Client()
        with pytest.raises(PayloadError):
            async with asyncio.timeout(10):
                up = await client.post(srv.url, "/v1/completions", b"{}", {})
                while await up.readany():
                    pass
        await client.close()


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a hex size
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n",  # negative
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1 x;ext\r\n",  # junk before an extension
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",  # no CRLF after the data
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"SSH-2.0-OpenSSH\r\n\r\n",
])
async def test_bad_framing_is_a_payload_error(raw):
    async with Scripted([[raw]]) as srv:
        client = H1Client()
        with pytest.raises(PayloadError):
            async with asyncio.timeout(10):  # a parser that missed the error would wait forever
                up = await client.post(srv.url, "/v1/completions", b"{}", {})
                await up.read()
        await client.close()


async def test_a_pooled_connection_the_server_closed_is_not_used_again():
    async with Scripted([_ok(b"1"), _ok(b"2")], close_after=True) as srv:
        client = H1Client()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        await up.read()
        up.release()  # pooled: the server closes it right after the answer
        (conn,) = client._origins[srv.url].idle
        while not conn.closed:  # until this loop has seen the EOF
            await asyncio.sleep(0.01)
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        assert await up.read() == b"2"
        up.release()
        await client.close()
    assert srv.connections == 2


async def test_cancelled_request_drops_its_connection():
    async with Scripted([[]]) as srv:  # reads the request, never answers
        client = H1Client()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await client.post(srv.url, "/v1/completions", b"{}", {})
        async with asyncio.timeout(10):
            await srv.eof_seen.wait()  # the worker sees the client go
        await client.close()
    assert srv.connections == 1


async def test_a_deadline_ends_the_wait_for_the_head_or_the_body_and_drops_the_connection():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
    async with Scripted([[], [head + b"12345"]]) as srv:  # no answer at all; then half a body
        client = H1Client()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(TimeoutError):
            await client.post(srv.url, "/v1/completions", b"{}", {}, Deadline(0.2))
        assert 0.2 <= loop.time() - t0 < 5  # checked every TICK_S
        dl = Deadline(0.2)
        up = await client.post(srv.url, "/v1/completions", b"{}", {}, dl)
        with pytest.raises(TimeoutError):
            await up.read()  # the same deadline bounds the body
        assert dl.expired()
        up.close()
        await client.close()
    assert srv.connections == 2  # the first connection was dropped, not reused


async def test_rescheduling_a_deadline_into_the_past_ends_the_wait_at_once():
    async with Scripted([[]]) as srv:  # never answers
        client = H1Client()
        dl = Deadline(600)
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, dl.reschedule, -1.0)  # what Pools.mark_unhealthy does on an ejection
        t0 = loop.time()
        with pytest.raises(TimeoutError):
            await client.post(srv.url, "/v1/completions", b"{}", {}, dl)
        assert loop.time() - t0 < 5 and dl.expired()
        async with asyncio.timeout(10):
            await srv.eof_seen.wait()  # the worker sees the client go
        await client.close()


async def test_credentials_in_the_url_become_basic_auth_unless_a_header_is_given():
    async with Scripted([_ok(b"a"), _ok(b"b")]) as srv:
        client = H1Client()
        url = srv.url.replace("http://", "http://us%40er:p%3Ass@")
        for headers in ({}, {"Authorization": "Bearer k"}):
            up = await client.post(url, "/v1/completions", b"{}", headers)
            await up.read()
            up.release()
        await client.close()
    first, second = (head.split(b"\r\n") for head, _ in srv.requests)
    assert b"Authorization: Basic " + base64.b64encode(b"us@er:p:ss") in first
    assert b"Authorization: Bearer k" in second and not any(b"Basic" in line for line in second)


async def test_header_bytes_the_server_decoded_with_surrogateescape_pass_unchanged():
    async with Scripted([_ok(b"a")]) as srv:
        client = H1Client()
        value = b"Basic \xff\xfe".decode("utf-8", "surrogateescape")  # as aiohttp's parser hands it over
        up = await client.post(srv.url, "/v1/completions", b"{}", {"Authorization": value})
        await up.read()
        up.release()
        await client.close()
    assert b"Authorization: Basic \xff\xfe" in srv.requests[0][0].split(b"\r\n")


async def test_newline_in_a_header_value_is_refused_before_sending():
    async with Scripted([]) as srv:
        client = H1Client()
        with pytest.raises(ValueError, match="newline"):
            await client.post(srv.url, "/v1/completions", b"{}", {"X-Evil": "a\r\nHost: other"})
        await client.close()
    assert srv.connections == 0


async def test_large_stream_read_piecewise_arrives_whole():
    body = bytes(range(256)) * 20000  # 5 MB: past the high-water mark, so reading pauses and resumes
    async with Scripted([_ok(body)]) as srv:
        client = H1Client()
        up = await client.post(srv.url, "/v1/completions", b"{}", {})
        got = bytearray()
        while chunk := await up.readany():
            got += chunk
        assert bytes(got) == body
        up.release()
        await client.close()


async def test_only_http_urls():
    with pytest.raises(ValueError, match="not an http"):
        await H1Client().post("ftp://127.0.0.1:21", "/x", b"", {})


async def test_concurrent_requests_to_an_aiohttp_server_each_get_their_own_answer():
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def echo(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.query.get("stream"):
            resp = web.StreamResponse()
            resp.content_type = "text/event-stream"
            await resp.prepare(request)
            for i in range(5):
                await resp.write(b"data: %s %d\n\n" % (body, i))
                await asyncio.sleep(0)
            await resp.write_eof()
            return resp
        return web.Response(body=body[::-1], content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/echo", echo)
    async with TestServer(app) as server:
        client = H1Client()
        base = str(server.make_url("")).rstrip("/")

        async def one(i: int) -> None:
            stream = i % 2 == 0
            up = await client.post(base, "/v1/echo?stream=1" if stream else "/v1/echo", b"req-%d" % i, {})
            if stream:
                got = b""
                while chunk := await up.readany():
                    got += chunk
                assert got == b"".join(b"data: req-%d %d\n\n" % (i, k) for k in range(5))
            else:
                assert await up.read() == (b"req-%d" % i)[::-1]
            up.release()

        for _ in range(2):  # the second wave runs on the pooled connections of the first
            await asyncio.gather(*(one(i) for i in range(64)))
        assert sum(len(o.idle) for o in client._origins.values()) <= 64
        await client.close()


async def test_connections_unused_past_the_keepalive_are_closed():
    async with Scripted([_ok(b"1"), _ok(b"2"), _ok(b"3")]) as srv:
        client = H1Client(keepalive_s=0.0)
        first = await client.post(srv.url, "/v1/completions", b"{}", {})
        second = await client.post(srv.url, "/v1/completions", b"{}", {})  # a second connection: first is busy
        for up in (first, second):
            await up.read()
            up.release()  # the second release closes the first connection (idle past keepalive_s = 0)
        idle = client._origins[srv.url].idle
        assert len(idle) == 1 and not idle[0].closed
        up = await client.post(srv.url, "/v1/completions", b"{}", {})  # not reused either: a new connection
        assert await up.read() == b"3"
        up.release()
        await client.close()
    assert srv.connections == 3
