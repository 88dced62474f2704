"""SIGTERM drains a proxy without dropping anything (serve.drain): readiness answers 503 at once, new
connections are still served for `server.drain_delay_s`, then the listener closes, and the streams in flight
finish within `server.grace_period_s` before the process exits 0."""

from __future__ import annotations

import asyncio
import signal
import socket
import time

import openai
import pytest

from .conftest import http_json, pool

pytestmark = pytest.mark.integration

N_STREAMS = 50
CHUNKS = 40  # tokens per stream, one every 100 ms: each stream runs ~4 s, most of it after the SIGTERM
DELAY_S, GRACE_S = 2.0, 20.0


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


async def _stream(client: openai.AsyncOpenAI) -> str:
    stream = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "count"}], max_tokens=CHUNKS, stream=True)
    parts = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


def test_sigterm_with_50_streams_in_flight_drops_nothing(upstreams, proxies):
    up = upstreams("w0", delay_ms=100)
    px = proxies({"pools": [pool("p", [up])],
                  "server": {"drain_delay_s": DELAY_S, "grace_period_s": GRACE_S}})
    assert http_json("GET", px.url + "/health/ready")[0] == 200

    async def scenario() -> dict:
        client = openai.AsyncOpenAI(base_url=px.url + "/v1", api_key="none", max_retries=0, timeout=60)
        async with client:
            streams = [asyncio.create_task(_stream(client)) for _ in range(N_STREAMS)]
            while up.state()["running"] < N_STREAMS:  # all 50 upstream, first tokens flowing
                await asyncio.sleep(0.05)
            sent = time.monotonic()
            px.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            ready = await asyncio.to_thread(http_json, "GET", px.url + "/health/ready")
            # a new client, a new connection, inside the delay: served in full
            late = await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                        max_tokens=3, extra_body={"delay_ms": 1})
            late_at = time.monotonic() - sent
            texts = await asyncio.gather(*streams)
            return {"ready": ready, "late": late, "late_at": late_at, "texts": texts, "sent": sent,
                    "streams_done": time.monotonic() - sent}

    out = asyncio.run(scenario())
    status, _, body = out["ready"]
    assert status == 503 and body["status"] == "draining"
    assert out["late"].choices[0].message.content == "tok tok tok" and out["late_at"] < DELAY_S
    expected = "".join(f" t{i}" for i in range(CHUNKS))
    assert out["texts"] == [expected] * N_STREAMS  # every stream complete, in order
    assert out["streams_done"] > DELAY_S  # they ran past the delay, after the listener closed
    # the listener is closed once the delay is over, though the process still drains (or has exited)
    assert px.proc.poll() is not None or _refused(px.port)
    px.proc.wait(GRACE_S)
    assert px.proc.returncode == 0
    assert time.monotonic() - out["sent"] < GRACE_S
    assert up.state()["cancelled"] == 0
    log = px.log()
    assert "SIGTERM: draining" in log and "drained in" in log


def test_grace_period_bounds_the_drain(upstreams, proxies):
    """A stream that would outlive the grace period is cut at the deadline; the process still exits 0 in time."""
    up = upstreams("w0", delay_ms=200)
    px = proxies({"pools": [pool("p", [up])], "server": {"drain_delay_s": 0.5, "grace_period_s": 2.0}})
    client = px.client(timeout=30)
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "long"}],
                                            max_tokens=100, stream=True)  # 20 s of tokens
    next(iter(stream))
    sent = time.monotonic()
    px.proc.send_signal(signal.SIGTERM)
    with pytest.raises(openai.APIError):  # the stream ends early: an incomplete SSE body
        for _ in stream:
            pass
    px.proc.wait(10)
    assert px.proc.returncode == 0
    assert 2.0 <= time.monotonic() - sent < 4.0


def test_drain_delay_must_be_shorter_than_the_grace(tmp_path):
    from adaptspec.control.config import load_config
    from adaptspec.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text("server: {drain_delay_s: 30, grace_period_s: 30}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    text = str(exc.value)
    assert str(path) in text and "server.drain_delay_s" in text and "30" in text
