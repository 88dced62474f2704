"""The proxy end to end: real `adaptspec serve` processes in front of real upstream servers on loopback,
driven by the official `openai` client."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import openai
import pytest

from adaptspec.control.types import CONTENT_CLASSES

from .conftest import eventually, http_json, metric, pool

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "def add(a, b):\n    return a + b\n# write a docstring for this"}]
HEADERS = ("x-adaptspec-class", "x-adaptspec-proposer", "x-adaptspec-gamma", "x-adaptspec-worker")


@pytest.fixture
def one(upstreams, proxies):
    up = upstreams("w0", chunks=6)
    px = proxies({"pools": [pool("spec", [up], proposers=["ngram", "draft"])]})
    return up, px


def test_chat_and_completions_stream_and_not(one):
    up, px = one
    client = px.client()

    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=6)
    assert all(h in raw.headers for h in HEADERS)
    assert raw.headers["x-adaptspec-worker"] == "w0"
    first_class = raw.headers["x-adaptspec-class"]
    chat = raw.parse()
    assert chat.choices[0].message.content == " ".join(["tok"] * 6)
    assert chat.usage.completion_tokens == 6

    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=5, stream=True)
    assert all(h in raw.headers for h in HEADERS)
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(f" t{i}" for i in range(5))
    assert all(c.usage is None for c in chunks)  # the usage chunk the proxy asked for is not passed on

    comp = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4)
    assert comp.choices[0].text == "tok tok tok tok"
    stream = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=3, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == " t0 t1 t2"
    assert chunks[-1].usage.completion_tokens == 3  # asked for by the client: passed through

    # the upstream got each decision in its `speculation` field, with the class
    sent = [r["body"] for r in up.requests()]
    assert len(sent) == 4
    for body in sent:
        assert set(body["speculation"]) == {"proposer", "num_speculative_tokens", "content_class"}
        assert body["speculation"]["content_class"] in CONTENT_CLASSES
    assert sent[0]["speculation"]["content_class"] == first_class
    assert sent[1]["stream_options"] == {"include_usage": True}  # asked for by the proxy, stripped again


def test_headers_match_what_the_worker_was_told(one):
    up, px = one
    raw = px.client().chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2)
    spec = up.requests()[-1]["body"]["speculation"]
    assert raw.headers["x-adaptspec-proposer"] == spec["proposer"]
    assert int(raw.headers["x-adaptspec-gamma"]) == spec["num_speculative_tokens"]
    assert raw.headers["x-adaptspec-class"] == spec["content_class"]


def test_client_speculation_field_wins_when_allowed(upstreams, proxies):
    up = upstreams("w0", chunks=6)
    px = proxies({"pools": [pool("spec", [up], proposers=["ngram", "draft"])],
                  "server": {"allow_client_speculation": True}})
    spec = {"proposer": "draft", "num_speculative_tokens": 3}
    raw = px.client().chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2,
                                                                 extra_body={"speculation": spec})
    assert (raw.headers["x-adaptspec-proposer"], raw.headers["x-adaptspec-gamma"]) == ("draft", "3")
    sent = up.requests()[-1]["body"]["speculation"]
    assert (sent["proposer"], sent["num_speculative_tokens"]) == ("draft", 3)


def test_streams_are_relayed_as_they_arrive(upstreams, proxies):
    up = upstreams("w0", delay_ms=250)
    px = proxies({"pools": [pool("spec", [up])]})
    stream = px.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, stream=True)
    t0 = time.monotonic()
    arrivals = [time.monotonic() - t0 for c in stream if c.choices and c.choices[0].delta.content]
    assert len(arrivals) == 6
    # chunk i leaves the worker at ~0.25 * (i + 1) s; buffering would deliver them all at the end
    assert arrivals[0] < 0.9 and arrivals[-1] - arrivals[0] > 0.8, arrivals


def test_models_is_the_union_and_unknown_model_is_404(upstreams, proxies):
    a, b = upstreams("wa", model="alpha"), upstreams("wb", model="beta")
    px = proxies({"pools": [pool("pa", [a], engine="openai", per_request=False),
                            pool("pb", [b], engine="openai", per_request=False)]})
    client = px.client()
    eventually(lambda: {m.id for m in client.models.list()} == {"alpha", "beta"})
    r = client.chat.completions.with_raw_response.create(model="beta", messages=CHAT)
    assert r.headers["x-adaptspec-worker"] == "wb"
    assert r.headers["x-adaptspec-proposer"] == "none" and r.headers["x-adaptspec-gamma"] == "0"
    assert "speculation" not in b.requests()[-1]["body"]  # plain OpenAI upstreams get the body untouched
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="gamma", messages=CHAT)
    assert exc.value.body["code"] == "model_not_found"


def _raw_post(url: str, data: bytes, headers: dict | None = None) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_client_errors_are_openai_json_never_500(upstreams, proxies):
    up = upstreams("w0")
    px = proxies({"pools": [pool("spec", [up])], "server": {"max_body_bytes": 2000}})
    url = px.url + "/v1/chat/completions"
    cases = [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (json.dumps({"messages": CHAT}).encode(), 400, "missing_required_parameter"),
        (json.dumps({"model": "tiny"}).encode(), 400, "missing_required_parameter"),
        (json.dumps({"model": "tiny", "messages": "hi"}).encode(), 422, "invalid_value"),
        (json.dumps({"model": "tiny", "messages": CHAT, "stream": "yes"}).encode(), 422, "invalid_type"),
        (json.dumps({"model": "tiny", "messages": CHAT, "max_tokens": 0}).encode(), 422, "invalid_value"),
        (json.dumps({"model": "nope", "messages": CHAT}).encode(), 404, "model_not_found"),
        (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x" * 3000}]}).encode(), 413,
         "body_too_large"),
    ]
    for data, status, code in cases:
        got, body = _raw_post(url, data)
        assert (got, body["error"]["code"]) == (status, code), (data[:60], body)
        assert body["error"]["message"] and body["error"]["type"]
    got, body = _raw_post(px.url + "/v1/completions", json.dumps({"model": "tiny"}).encode())
    assert (got, body["error"]["param"]) == (400, "prompt")
    got, _, body = http_json("GET", px.url + "/v1/nowhere")
    assert got == 404 and body["error"]["code"] == "not_found"
    got, _, body = http_json("GET", url)
    assert got == 405 and body["error"]["type"]
    assert up.requests() == []  # none of these reached the worker
    text = px.metrics()
    assert metric(text, "adaptspec_requests_total", code="500") is None
    assert metric(text, "adaptspec_requests_total", code="400") == 5
    assert "Traceback" not in px.log()


def test_chunked_body_over_the_limit_is_413(upstreams, proxies):
    up = upstreams("w0")
    px = proxies({"pools": [pool("spec", [up])], "server": {"max_body_bytes": 1000}})
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "y" * 5000}]}).encode()
    with socket.create_connection(("127.0.0.1", px.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(body), 1000):
            part = body[i:i + 1000]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        s.sendall(b"0\r\n\r\n")
        head = s.recv(65536)
    assert head.startswith(b"HTTP/1.1 413")
    assert b'"body_too_large"' in head


def test_api_keys_and_upstream_credentials(upstreams, proxies):
    up = upstreams("w0")
    cfg = {"pools": [pool("spec", [up])], "server": {"api_keys_env": "TEST_PROXY_KEYS"}}
    cfg["pools"][0]["workers"][0]["api_key_env"] = "TEST_WORKER_KEY"
    px = proxies(cfg, env={"TEST_PROXY_KEYS": "k-one,k-two", "TEST_WORKER_KEY": "sk-worker-secret"})
    with px.client(api_key="wrong") as wrong, pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model="tiny", messages=CHAT)
    got, body = _raw_post(px.url + "/v1/chat/completions",
                          json.dumps({"model": "tiny", "messages": CHAT}).encode())
    assert got == 401 and body["error"]["code"] == "invalid_api_key"
    with px.client(api_key="k-two") as right:
        out = right.chat.completions.create(model="tiny", messages=CHAT)
    assert out.choices
    assert up.requests()[-1]["authorization"] == "Bearer sk-worker-secret"  # the worker's key, not the client's
    assert "sk-worker-secret" not in px.log() and "sk-worker-secret" not in px.metrics()
    assert "sk-worker-secret" not in json.dumps(out.model_dump())
    # one check for every route (proxy/auth.py): the probes, the version and Prometheus' scrape stay open
    with px.client(api_key="wrong") as wrong, pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    for path in ("/health", "/health/live", "/health/ready", "/version", "/metrics"):
        with urllib.request.urlopen(px.url + path, timeout=10) as r:
            assert r.status == 200, path
    with pytest.raises(urllib.error.HTTPError) as err:  # an unknown path is not revealed without a key
        urllib.request.urlopen(px.url + "/v1/nothing-here", timeout=10)
    assert err.value.code == 401
    err.value.close()  # an HTTPError holds the response open
