"""The worker server against hostile bodies (issue 14): JSON limits, keep-alive after errors, CPU work off
the event loop. A real engine on the built-in tiny pair behind uvicorn on a loopback port."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

ASSETS = Path(os.environ.get("ADAPTSPEC_ASSETS", Path(__file__).resolve().parents[2] / "adaptspec" / "assets"))


@pytest.fixture(scope="module")
def engine():
    from adaptspec.worker.engine import Engine

    eng = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=4, max_model_len=512,
                           num_threads=1)
    yield eng
    eng.stop()


def _serve(engine, **settings):
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    return ServerThread(build_app(engine, WorkerSettings(served_model_name="tiny", **settings))).start()


@pytest.fixture(scope="module")
def url(engine):
    server = _serve(engine, max_model_len=512)
    yield server.url
    server.stop()


def _exchange(sock: socket.socket, request: bytes) -> tuple[int, bytes]:
    """One request on an open keep-alive connection -> (status, body); reads exactly Content-Length."""
    sock.sendall(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed with no answer (got {buf!r})"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(v) for k, _, v in (h.partition(": ") for h in lines[1:]) if k.lower() == "content-length")
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return int(lines[0].split()[1]), body


def _post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


HOSTILE = [
    b'{"model": "tiny", "prompt": "hi", "max_tokens": 2, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"model": "tiny", "prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}",
    b'{"model": "tiny", "prompt": "hi", "max_tokens": 2, "temperature": 1e999}',
    b'{"model": "tiny", "prompt": "hi", "max_tokens": 2, "temperature": NaN}',
    b'{"model": "tiny", "messages": [{"role": "user", "content": ' + b"{" * 50_000 + b"}" * 50_000 + b"}]}",
]


@pytest.mark.parametrize("body", HOSTILE, ids=["deep-array", "5000-digit-int", "1e999", "NaN", "deep-object"])
def test_hostile_json_is_400_and_the_connection_serves_the_next_request(url, body):
    host, port = url.removeprefix("http://").split(":")
    path = "/v1/chat/completions" if b'"messages"' in body else "/v1/completions"
    with socket.create_connection((host, int(port)), timeout=60) as s:
        status, out = _exchange(s, _post(path, body))
        assert status == 400, out
        err = json.loads(out)["error"]
        assert err["code"] == "invalid_json" and err["message"]
        ok = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 2, "ignore_eos": True}).encode()
        status, out = _exchange(s, _post("/v1/completions", ok))  # same keep-alive connection
        assert status == 200 and json.loads(out)["usage"]["completion_tokens"] == 2


def test_an_unhandled_error_keeps_the_keep_alive_connection():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from adaptspec.worker._asgi import Guard
    from adaptspec.worker.server import ServerThread

    async def boom(request):
        raise RuntimeError("bug")

    async def fine(request):
        return JSONResponse({"ok": True})

    async def as_json(request, exc):
        return JSONResponse({"error": {"message": "Internal server error"}}, status_code=500)

    app = Starlette(routes=[Route("/boom", boom), Route("/fine", fine)], exception_handlers={Exception: as_json})
    with ServerThread(Guard(app), log_level="critical") as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        assert _exchange(s, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 500
        assert _exchange(s, b"GET /fine HTTP/1.1\r\nHost: x\r\n\r\n") == (200, b'{"ok":true}')


def test_a_prompt_longer_than_any_context_is_refused_without_tokenising(url):
    prompt = "lorem ipsum dolor sit amet " * 150_000  # ~4 MB
    r = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(url + "/v1/chat/completions", timeout=60,
                   json={"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


class _BlockingEncodeEngine:
    """The real engine, except that encoding a big text waits until the test releases it: the test then knows
    tokenising is in progress (no timing), and /health must answer meanwhile."""

    def __init__(self, engine):
        self._engine = engine
        self.entered, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def encode(self, text: str) -> list[int]:
        if len(text) > 100_000:
            self.entered.set()
            assert self.release.wait(60), "the test never released the tokeniser"
        return self._engine.encode(text)


def test_tokenising_a_big_prompt_does_not_block_health(engine):
    # a context limit this large lets a 1 MB prompt through the length guard, so it is really tokenised
    slow = _BlockingEncodeEngine(engine)
    server = _serve(slow, max_model_len=10**7, max_body_bytes=64 * 1024 * 1024)
    try:
        prompt = "lorem ipsum dolor sit amet " * 40_000
        result: dict = {}

        def big():
            result["r"] = httpx.post(server.url + "/v1/completions", timeout=120,
                                     json={"model": "tiny", "prompt": prompt, "max_tokens": 10**7})

        t = threading.Thread(target=big)
        t.start()
        assert slow.entered.wait(60), "the big prompt never reached the tokeniser"
        try:
            # tokenising on the event loop would hold /health until the release below: it would time out
            r = httpx.get(server.url + "/health", timeout=10)
            assert r.status_code == 200
        finally:
            slow.release.set()
        t.join(120)
        assert result["r"].status_code == 400 and result["r"].json()["error"]["code"] == "context_length_exceeded"
    finally:
        server.stop()


def test_a_lone_surrogate_echoed_in_an_error_is_still_json(url):
    r = httpx.post(url + "/v1/completions", content=b'{"model": "\\ud800", "prompt": "hi"}', timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_a_body_that_never_arrives_is_408(engine):
    server = _serve(engine, body_timeout_s=0.5)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            status, out = _exchange(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert status == 408 and json.loads(out)["error"]["code"] == "body_timeout"
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:  # a chunk that never ends
            status, out = _exchange(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                                       b"\r\n\r\nffffffffff\r\n{")
        assert status == 408
    finally:
        server.stop()
