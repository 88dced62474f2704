"""`adaptspec serve` with no config: an embedded reference worker (`adaptspec worker`, the real tiny model)
behind the proxy, driven by the openai client; the worker goes away with the proxy."""

from __future__ import annotations

import re
import socket

import pytest

from .conftest import metric

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEADERS = ("x-adaptspec-class", "x-adaptspec-proposer", "x-adaptspec-gamma", "x-adaptspec-worker")


def test_serve_without_config_starts_and_stops_the_reference_worker(proxies):
    px = proxies(None, timeout=180)
    client = px.client(timeout=120)
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", max_tokens=12, temperature=0,
        messages=[{"role": "user", "content": "Summarize: the cat sat on the mat. The cat sat on the mat."}])
    assert all(h in raw.headers for h in HEADERS) and raw.headers["x-adaptspec-worker"] == "embedded-0"
    out = raw.parse()
    assert out.usage.completion_tokens == 12 and out.choices[0].message.content
    stream = client.completions.create(model="tiny", prompt="def add(a, b):", max_tokens=6, stream=True,
                                       temperature=0)
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)  # the proxy's own usage request is not passed on
    text = px.metrics()
    assert metric(text, "adaptspec_output_tokens_total", worker="embedded-0") == 12 + 6
    assert metric(text, "adaptspec_requests_total", worker="embedded-0", code="200") == 2

    port = int(re.search(r"embedded worker ready at http://127\.0\.0\.1:(\d+)", px.log()).group(1))
    px.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
