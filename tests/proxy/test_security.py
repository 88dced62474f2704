"""Regression tests for issue 14 (hostile clients, failing closed), in process with real objects.

Each test reproduces one defect found against `adaptspec serve`; HTTP cases run the real aiohttp app on
a loopback port in front of the test upstream (tests/proxy/upstream_app.py), also in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import zlib

import aiohttp
import pytest
import yaml
from aiohttp import web

from adaptspec.control.config import parse_config
from adaptspec.errors import ConfigError
from adaptspec.proxy.app import Proxy, create_app, start_site
from adaptspec.proxy.configfile import load_config_file
from adaptspec.proxy.reload import Reloader

from . import upstream_app
from .conftest import free_port

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")  # app["proxy"]
POOLS = [{"name": "p", "engine": "adaptspec", "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]


def _write(path, server: dict) -> None:
    path.write_text(yaml.safe_dump({"pools": POOLS, "server": server}))


# -- 1. auth fails closed ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [None, "", " , ,"])
def test_unset_or_empty_key_variable_is_a_config_error_naming_it(tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("ADAPTSPEC_TEST_KEYS", raising=False)
    else:
        monkeypatch.setenv("ADAPTSPEC_TEST_KEYS", value)
    path = tmp_path / "c.yaml"
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_KEYS"})
    with pytest.raises(ConfigError) as exc:
        Proxy(load_config_file(path), config_path=str(path))
    assert "ADAPTSPEC_TEST_KEYS" in str(exc.value) and "server.api_keys_env" in str(exc.value)
    assert str(path) in str(exc.value)


async def test_reload_naming_an_unset_key_variable_keeps_the_last_good_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTSPEC_TEST_KEYS", "k1,k2")
    monkeypatch.delenv("ADAPTSPEC_TEST_OTHER", raising=False)
    path = tmp_path / "c.yaml"
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_KEYS"})
    proxy = Proxy(load_config_file(path), config_path=str(path))
    assert proxy.api_keys == {"k1", "k2"}
    reloader = Reloader(str(path), load_config_file, apply=proxy.apply_config, current=lambda: proxy.config,
                        metrics=proxy.metrics, poll_s=0)
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_OTHER"})
    assert await reloader.reload("test") is False
    assert proxy.api_keys == {"k1", "k2"}
    assert proxy.config.server.api_keys_env == "ADAPTSPEC_TEST_KEYS"
    _write(path, {})  # dropping the key variable on purpose is allowed
    assert await reloader.reload("test") is True
    assert proxy.api_keys == frozenset()


@pytest.mark.integration
def test_serve_refuses_to_start_without_its_keys(tmp_path):
    path = tmp_path / "c.yaml"
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_KEYS_UNSET"})
    env = {k: v for k, v in os.environ.items() if k != "ADAPTSPEC_TEST_KEYS_UNSET"}
    out = subprocess.run([sys.executable, "-m", "adaptspec", "serve", "--port", "0", "--config", str(path)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1
    assert "ADAPTSPEC_TEST_KEYS_UNSET" in out.stderr and "server.api_keys_env" in out.stderr


# -- in-process stack: the test upstream and the proxy, both real aiohttp servers on loopback ----------------
CHAT = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]


class Stack:
    def __init__(self, proxy, url: str, upstream_url: str, session):
        self.proxy, self.url, self.upstream_url, self.session = proxy, url, upstream_url, session

    async def post(self, body, path: str = "/v1/chat/completions", headers: dict | None = None,
                   data: bytes | None = None):
        """-> (status, headers, parsed JSON body or raw bytes)."""
        kw = {"data": data} if data is not None else {"json": body}
        async with self.session.post(self.url + path, headers=headers, **kw) as r:
            raw = await r.read()
            try:
                return r.status, r.headers, json.loads(raw)
            except ValueError:
                return r.status, r.headers, raw

    async def metrics_text(self) -> str:
        async with self.session.get(self.url + "/metrics") as r:
            return await r.text()

    async def upstream_requests(self) -> list[dict]:
        async with self.session.get(self.upstream_url + "/_debug/requests") as r:
            return await r.json()


async def _start(app) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@contextlib.asynccontextmanager
async def stack(server: dict | None = None, *, pool: dict | None = None, upstream: dict | None = None):
    up_runner, up_url = await _start(upstream_app.build(**{"name": "w0", "model": "tiny", "engine": "adaptspec",
                                                           "alpha": 0.75, "chunks": 4, "delay_ms": 0,
                                                           **(upstream or {})}))
    pools = [{"name": "p", "engine": "adaptspec", "profile": "cpu-tiny", "max_gamma": 8,
              "workers": [{"name": "w0", "url": up_url}], **(pool or {})}]
    config = parse_config({"pools": pools, "server": {"scrape_interval_s": 30, **(server or {})}})
    proxy = Proxy(config)
    app = create_app(proxy)
    port = free_port()
    runner = await start_site(app, "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            yield Stack(proxy, f"http://127.0.0.1:{port}", up_url, session)
    finally:
        await runner.cleanup()
        await up_runner.cleanup()


# -- 2, 3, 6. client speculation: off by default, clamped when on, never a label or header as given ---------
async def test_client_speculation_is_ignored_by_default():
    async with stack() as s:
        spec = {"proposer": "draft", "num_speculative_tokens": 16}
        status, headers, _ = await s.post({"model": "tiny", "messages": CHAT, "speculation": spec})
        assert status == 200
        sent = (await s.upstream_requests())[-1]["body"]["speculation"]
        assert sent != spec and sent["num_speculative_tokens"] <= 8  # the policy's plan, not the client's
        assert headers["x-adaptspec-proposer"] == sent["proposer"]
        assert headers["x-adaptspec-gamma"] == str(sent["num_speculative_tokens"])


async def test_client_speculation_when_allowed_is_clamped_to_the_pool():
    async with stack({"allow_client_speculation": True}, pool={"proposers": ["ngram"], "max_gamma": 8}) as s:
        for spec, applied in [({"proposer": "ngram", "num_speculative_tokens": 16}, ("ngram", 8)),
                              ({"proposer": "ngram", "num_speculative_tokens": 3}, ("ngram", 3)),
                              ({"proposer": "draft", "num_speculative_tokens": 3}, ("none", 0)),  # not offered
                              ({"proposer": "none"}, ("none", 0))]:
            status, headers, _ = await s.post({"model": "tiny", "messages": CHAT, "speculation": spec})
            assert status == 200
            assert (headers["x-adaptspec-proposer"], int(headers["x-adaptspec-gamma"])) == applied
            sent = (await s.upstream_requests())[-1]["body"]["speculation"]
            assert (sent["proposer"], sent["num_speculative_tokens"]) == applied


@pytest.mark.parametrize("allow", [False, True])
async def test_client_strings_never_become_labels_or_headers(allow):
    async with stack({"allow_client_speculation": allow}) as s:
        before = len(await s.metrics_text())
        for i in range(200):
            spec = {"proposer": f"p{i:04d}" + "x" * 1000, "num_speculative_tokens": 10_000 + i}
            status, headers, body = await s.post({"model": "tiny", "messages": CHAT, "speculation": spec})
            assert status == (422 if allow else 200), body
            assert not any("xxxx" in v for v in headers.values())
            if allow:
                assert body["error"]["param"] == "speculation.proposer" and len(body["error"]["message"]) < 200
        grown = len(await s.metrics_text()) - before
        assert grown < 10_000, grown  # was ~1 KB of labels per request


@pytest.mark.parametrize("allow", [False, True])
async def test_control_characters_in_any_field_get_a_json_answer(allow):
    async with stack({"allow_client_speculation": allow}) as s:
        bad = "a\r\nx-injected: 1\r\n\x00\x7f"
        cases = [{"model": "tiny", "messages": CHAT, "speculation": {"proposer": bad, "num_speculative_tokens": 2}},
                 {"model": bad, "messages": CHAT},
                 {"model": "tiny", "messages": [{"role": bad, "content": bad}], "user": bad},
                 {"model": "tiny", "messages": CHAT, "speculation": {"proposer": "ngram", "content_class": bad}}]
        for body in cases:
            status, headers, got = await s.post(body)
            assert status < 500 and isinstance(got, dict), (body, status, got)
            assert "x-injected" not in headers
            if status >= 400:
                assert got["error"]["message"]


# -- 4. JSON nesting and number limits: 400, never a 500 ----------------------------------------------------
DEEP = [
    b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 100_000
    + b"]" * 100_000 + b"}",
    b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}",
    b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": 1e999}',
    b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": -Infinity}',
    b'{"model": "tiny", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
]


async def test_deep_json_and_huge_numbers_are_400():
    async with stack() as s:
        for raw in DEEP:
            status, _, body = await s.post(None, data=raw, headers={"Content-Type": "application/json"})
            assert status == 400 and body["error"]["code"] == "invalid_json", (raw[:80], body)
        assert await s.upstream_requests() == []
        assert 'code="500"' not in await s.metrics_text()


def test_json_depth_ignores_brackets_in_strings():
    from adaptspec.jsonlimits import json_depth, loads_limited

    assert json_depth(b'{"a": [1, {"b": "[[[[\\"{{{{"}]}') == 3
    assert loads_limited(b'{"a": "' + b"[" * 1000 + b'"}') == {"a": "[" * 1000}


# -- 4. compressed bodies: the limit counts decompressed bytes; bad encodings are 400/415 --------------------
def _gzip_bomb(size: int) -> bytes:
    """A valid chat body of `size` bytes (a long 'x' content), gzip-compressed in pieces."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = b'{"model": "tiny", "messages": [{"role": "user", "content": "'
    out = [z.compress(head)]
    block = b"x" * (1 << 20)
    for _ in range(size // len(block)):
        out.append(z.compress(block))
    out.append(z.compress(b'"}]}'))
    out.append(z.flush())
    return b"".join(out)


async def test_a_compressed_bomb_is_413_on_its_decompressed_size():
    bomb = _gzip_bomb(200 << 20)
    assert len(bomb) < 300_000  # ~200 KB on the wire
    async with stack({"max_body_bytes": 4 << 20}) as s:
        for encoding in ("gzip", "GZip", "x-gzip"):
            status, _, body = await s.post(None, data=bomb, headers={"Content-Encoding": encoding,
                                                                     "Content-Type": "application/json"})
            assert status == 413 and body["error"]["code"] == "body_too_large", body
        assert await s.upstream_requests() == []


async def test_compressed_bodies_within_the_limit_are_served():
    raw = json.dumps({"model": "tiny", "messages": CHAT}).encode()
    gz = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    async with stack() as s:
        for encoding, data in (("gzip", gz.compress(raw) + gz.flush()), ("deflate", zlib.compress(raw)),
                               ("identity", raw)):
            status, _, body = await s.post(None, data=data, headers={"Content-Encoding": encoding,
                                                                     "Content-Type": "application/json"})
            assert status == 200 and body["choices"], (encoding, body)
        sent = await s.upstream_requests()
        assert len(sent) == 3 and all(r["body"]["messages"] == CHAT for r in sent)  # forwarded decompressed


async def test_a_body_that_is_not_what_its_encoding_claims_is_400():
    raw = json.dumps({"model": "tiny", "messages": CHAT}).encode()
    async with stack() as s:
        for encoding, data, status in (("gzip", raw, 400), ("deflate", raw, 400),
                                       ("gzip", zlib.compress(raw)[:-6], 400),  # truncated
                                       ("br", raw, 415), ("gzip, br", raw, 415)):
            got, _, body = await s.post(None, data=data, headers={"Content-Encoding": encoding,
                                                                  "Content-Type": "application/json"})
            assert got == status and body["error"]["message"], (encoding, got, body)
        assert await s.upstream_requests() == []


# -- 9. header limits in JSON, slow clients timed out ------------------------------------------------------
def _raw_exchange(url: str, data: bytes, timeout: float = 10.0) -> bytes:
    """Send `data` on a fresh connection -> one whole response (by its Content-Length), or b"" when the
    server closes without answering; a socket timeout fails the test (a hang)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
            head, sep, body = out.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            if sep and length and len(body) >= int(length.group(1)):
                break
        return out


async def test_oversized_or_too_many_headers_get_json_431():
    async with stack() as s:
        big = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
        many = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(200)) + b"\r\n"
        for data in (big, many):
            out = await asyncio.to_thread(_raw_exchange, s.url, data)
            head, _, body = out.partition(b"\r\n\r\n")
            assert head.split(b" ")[1] == b"431", out[:200]
            assert b"application/json" in head and json.loads(body)["error"]["code"] == "headers_too_large"
        out = await asyncio.to_thread(_raw_exchange, s.url, b"BLAH /x HTTP/9\r\n\r\n")
        assert out.split(b" ")[1] == b"400" and b"\"bad_request\"" in out


async def test_slow_headers_idle_connections_and_slow_bodies_are_timed_out():
    async with stack({"keepalive_timeout_s": 0.5, "body_timeout_s": 0.5}) as s:
        # a head that never ends, and a connection that never sends anything: closed, no answer owed
        assert await asyncio.to_thread(_raw_exchange, s.url, b"POST /v1/chat/completions HTTP/1.1\r\nHost:") == b""
        assert await asyncio.to_thread(_raw_exchange, s.url, b"") == b""
        # a body that never arrives in full: a JSON 408
        out = await asyncio.to_thread(_raw_exchange, s.url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                      b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mo")
        assert out.split(b" ")[1] == b"408" and b"\"body_timeout\"" in out


async def test_credentials_in_worker_urls_never_reach_the_log(caplog):
    dead = f"http://admin:s3cret-pw@127.0.0.1:{free_port()}"  # nothing listens: the request path logs it
    async with stack(pool={"workers": [{"name": "w0", "url": dead}]}) as s:
        with caplog.at_level(logging.DEBUG, logger="adaptspec"):
            status, _, body = await s.post({"model": "tiny", "messages": CHAT})
            assert status == 503, body
            await s.proxy.scraper.scrape_once()
    assert "ejected" in caplog.text and "***@127.0.0.1" in caplog.text
    assert "s3cret-pw" not in caplog.text and "s3cret-pw" not in repr(s.proxy.pools.workers["w0"])


# -- 6. outlier ejection (Pools) -----------------------------------------------------------------------------
async def test_ejection_counts_failures_in_a_row_backs_off_frees_waiting_attempts_and_spots_silence():
    from adaptspec.proxy.upstream import Pools, Worker

    w = Worker("w0", "http://127.0.0.1:9", "p")
    pools = Pools([w])
    pools.eject_after, pools.backoff_s = 3, 1.0
    pools.failure(w, "t")
    pools.failure(w, "t")
    pools.success(w)  # not in a row any more
    pools.failure(w, "t")
    pools.failure(w, "t")
    assert w.healthy
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3600) as deadline:  # an attempt waiting for w's first byte
            w.heads.add(deadline)
            pools.failure(w, "t")  # third in a row: ejected, and the waiting attempt is released at once
            assert not w.healthy
            await asyncio.sleep(3600)
    w.heads.clear()
    spans = [w.retry_at - time.monotonic()]
    for _ in range(7):
        pools.probe_failed(w)
        spans.append(w.retry_at - time.monotonic())
    assert [round(s) for s in spans] == [1, 2, 4, 8, 16, 32, 32, 32]  # doubling, capped at 32x
    pools.mark_healthy(w)
    assert w.healthy and w.failures == 0
    pools.unanswered(w, silence_s=60)  # a slow scrape of a worker that answered just now: nothing happens
    assert w.healthy
    w.last_ok -= 61  # ... but a minute of silence ejects it
    pools.unanswered(w, silence_s=60)
    assert not w.healthy
