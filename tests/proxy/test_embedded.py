"""`adaptspec serve` with no config: an embedded reference worker (`adaptspec worker`, the real tiny model)
behind the proxy, driven by the openai client; the worker goes away with the proxy."""

from __future__ import annotations

import re
import socket

import pytest

from .conftest import eventually, metric

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEADERS = ("x-adaptspec-class", "x-adaptspec-proposer", "x-adaptspec-gamma", "x-adaptspec-worker")


def test_serve_without_config_starts_and_stops_the_reference_worker(proxies):
    # a config with no pools still runs the embedded worker; it opts in to the client `speculation` field below
    px = proxies({"server": {"allow_client_speculation": True}}, timeout=180)
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
    # tokens are accounted before the proxy forwards [DONE]; the request's status once its handler returns
    assert metric(px.metrics(), "adaptspec_output_tokens_total", worker="embedded-0") == 12 + 6
    eventually(lambda: metric(px.metrics(), "adaptspec_requests_total", worker="embedded-0", code="200") == 2)
    text = px.metrics()

    # per-request feedback from the real worker: its usage.speculative lands in the proxy's counters and alpha
    cls = raw.headers["x-adaptspec-class"]
    key = {"worker": "embedded-0", "proposer": "draft", "content_class": cls}
    prior = metric(text, "adaptspec_alpha_estimate", **key)
    draft0 = metric(text, "adaptspec_draft_tokens_total", **key) or 0.0
    accepted0 = metric(text, "adaptspec_accepted_tokens_total", **key) or 0.0
    spec = {"proposer": "draft", "num_speculative_tokens": 4}
    msgs = [{"role": "user", "content": "Summarize: the cat sat on the mat. The cat sat on the mat."}]
    draft = accepted = 0
    for _ in range(3):
        r = client.chat.completions.with_raw_response.create(model="tiny", max_tokens=16, temperature=0,
                                                             messages=msgs, extra_body={"speculation": spec})
        assert r.headers["x-adaptspec-class"] == cls and r.headers["x-adaptspec-gamma"] == "4"
        usage = r.parse().usage.model_extra["speculative"]
        draft += usage["draft_tokens"]
        accepted += usage["accepted_tokens"]
    assert draft > 0
    text = px.metrics()
    assert metric(text, "adaptspec_draft_tokens_total", **key) - draft0 == draft
    assert metric(text, "adaptspec_accepted_tokens_total", **key) - accepted0 == accepted
    assert metric(text, "adaptspec_alpha_estimate", **key) != prior

    port = int(re.search(r"embedded worker ready at http://127\.0\.0\.1:(\d+)", px.log()).group(1))
    px.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
