"""Failures around the proxy: dead workers, a worker dying mid-stream, clients that go away."""

from __future__ import annotations

import json
import socket
import time

import openai
import pytest

from .conftest import eventually, http_json, metric, pool

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]


def test_killed_worker_is_routed_around_and_comes_back(upstreams, proxies):
    w0, w1 = upstreams("w0"), upstreams("w1")
    cfg = {"pools": [pool("spec", [w0, w1], profile="cpu-tiny")], "server": {"scrape_interval_s": 0.05}}
    px = proxies(cfg)
    client = px.client()
    w0.kill()
    seen = set()
    for _ in range(8):  # every request succeeds: failures before the first byte move to w1
        raw = client.chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=3)
        assert raw.parse().choices
        seen.add(raw.headers["x-adaptspec-worker"])
    assert seen == {"w1"}
    text = px.metrics()
    assert metric(text, "adaptspec_worker_healthy", worker="w0") == 0
    status, _, health = http_json("GET", px.url + "/health")
    assert status == 200 and health["workers"] == {"w0": False, "w1": True}

    w1.kill()  # nobody left: a clear 503, not a hang or a 500
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=3)
    assert exc.value.status_code == 503
    assert "worker" in exc.value.body["message"]
    assert http_json("GET", px.url + "/health")[0] == 503

    w0.start()  # same port: the health probe brings it back
    eventually(lambda: metric(px.metrics(), "adaptspec_worker_healthy", worker="w0") == 1)
    assert client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=3).choices


def test_connect_failure_before_the_first_byte_is_retried_elsewhere(upstreams, proxies):
    w0, w1 = upstreams("w0"), upstreams("w1")
    # a slow scraper: the request path itself must notice the dead worker
    px = proxies({"pools": [pool("spec", [w0, w1], profile="cpu-tiny")], "server": {"scrape_interval_s": 30}})
    client = px.client()
    w0.kill()
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=3)
        assert raw.parse().choices and raw.headers["x-adaptspec-worker"] == "w1"
    text = px.metrics()
    assert metric(text, "adaptspec_upstream_retries_total", worker="w0") >= 1
    assert metric(text, "adaptspec_worker_healthy", worker="w0") == 0
    assert metric(text, "adaptspec_requests_total", code="200") == 3


def test_worker_dying_mid_stream_ends_the_stream_with_an_error_event(upstreams, proxies):
    up = upstreams("w0", delay_ms=100)
    px = proxies({"pools": [pool("spec", [up])]})
    client = px.client()
    stream = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=50, stream=True)
    got = []
    with pytest.raises(openai.APIError) as exc:
        for chunk in stream:
            got.append(chunk)
            if len(got) == 2:
                up.kill()
    assert 2 <= len(got) < 50
    assert "failed mid-stream" in str(exc.value)
    # the proxy is still up and knows the worker is gone
    status, _, health = http_json("GET", px.url + "/health")
    assert status == 503 and health["workers"] == {"w0": False}
    eventually(lambda: metric(px.metrics(), "adaptspec_requests_total", code="502") == 1)


def _send_and_drop(port: int, body: dict, wait_s: float) -> bytes:
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        s.settimeout(wait_s)
        try:
            return s.recv(4096)
        except TimeoutError:
            return b""


@pytest.mark.parametrize("stream", [False, True])
def test_client_disconnect_cancels_the_upstream_request(upstreams, proxies, stream):
    up = upstreams("w0", delay_ms=200)
    px = proxies({"pools": [pool("spec", [up])]})
    t0 = time.monotonic()
    first = _send_and_drop(px.port, {"model": "tiny", "messages": CHAT, "max_tokens": 40, "stream": stream}, 0.7)
    assert (b"200 OK" in first) == stream  # a stream has started; a non-stream answer is still pending
    # the worker would need 8 s for 40 tokens; it sees its client (the proxy) leave within a second
    eventually(lambda: up.state()["cancelled"] == 1, timeout=3)
    assert up.state()["completed"] == 0 and time.monotonic() - t0 < 5
    eventually(lambda: metric(px.metrics(), "adaptspec_worker_inflight", worker="w0") == 0, timeout=3)
