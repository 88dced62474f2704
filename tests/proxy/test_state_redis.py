"""Two proxy replicas share alpha estimates and in-flight counts through a real redis-server; Redis going
away leaves the proxy serving from local state, and it resyncs when Redis returns."""

from __future__ import annotations

import threading

import pytest

from .conftest import eventually, metric, pool

pytestmark = pytest.mark.integration

CODE = [{"role": "user", "content": "def add(a, b):\n    return a + b\n# write a docstring for this"}]


def _cfg(up, redis_url: str) -> dict:
    return {"pools": [pool("spec", [up], proposers=["ngram"], profile="cpu-tiny")],
            "policy": {"kind": "static", "proposer": "ngram", "gamma": 4},
            "state": {"backend": "redis", "url": redis_url, "key_prefix": "t:"},
            "server": {"scrape_interval_s": 0.05}}


def _alpha(px, cls: str) -> float:
    return metric(px.metrics(), "adaptspec_alpha_estimate", worker="w0", proposer="ngram", content_class=cls)


def _class_of(px) -> str:
    raw = px.client().chat.completions.with_raw_response.create(model="tiny", messages=CODE, max_tokens=1)
    raw.parse()
    return raw.headers["x-adaptspec-class"]


def test_two_replicas_share_alpha_and_inflight(upstreams, proxies, redis_server):
    up = upstreams("w0", alpha=0.95)
    a = proxies(_cfg(up, redis_server.url), name="a")
    b = proxies(_cfg(up, redis_server.url), name="b")
    eventually(lambda: metric(a.metrics(), "adaptspec_state_backend_up", backend="redis") == 1)
    cls = _class_of(b)
    prior = _alpha(b, cls)
    client = a.client()
    for _ in range(15):
        client.chat.completions.create(model="tiny", messages=CODE, max_tokens=8, temperature=0)  # greedy
    moved = _alpha(a, cls)
    assert moved - prior > 0.2
    # replica b never saw a request, yet converges to a's estimate through the shared learning stream (count deltas)
    eventually(lambda: abs(_alpha(b, cls) - _alpha(a, cls)) < 1e-3, timeout=5)  # (time discounting: not bit-equal)

    # occupancy: slow requests in flight through a show up in b's view of the worker
    slow = a.client(timeout=30)
    threads = [threading.Thread(target=lambda: slow.chat.completions.create(
        model="tiny", messages=CODE, max_tokens=10, extra_body={"delay_ms": 300})) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        eventually(lambda: metric(b.metrics(), "adaptspec_worker_inflight", worker="w0") == 3, timeout=5)
    finally:
        for t in threads:
            t.join()
    eventually(lambda: metric(b.metrics(), "adaptspec_worker_inflight", worker="w0") == 0, timeout=5)


def test_redis_outage_serves_locally_then_resyncs(upstreams, proxies, redis_server):
    up = upstreams("w0", alpha=0.95)
    a = proxies(_cfg(up, redis_server.url), name="a")
    b = proxies(_cfg(up, redis_server.url), name="b")
    eventually(lambda: metric(b.metrics(), "adaptspec_state_backend_up", backend="redis") == 1)
    cls = _class_of(b)
    eventually(lambda: abs(_alpha(b, cls) - _alpha(a, cls)) < 1e-3)  # both have b's observation
    prior = _alpha(b, cls)

    redis_server.stop()
    eventually(lambda: metric(a.metrics(), "adaptspec_state_backend_up", backend="redis") == 0)
    client = a.client()
    for _ in range(15):  # served from local state while Redis is down
        assert client.chat.completions.create(model="tiny", messages=CODE, max_tokens=8, temperature=0).choices
    local = _alpha(a, cls)
    assert local - prior > 0.2
    assert abs(_alpha(b, cls) - prior) < 1e-3  # b cannot know yet
    text = a.metrics()
    assert metric(text, "adaptspec_state_backend_errors_total", backend="redis") >= 1
    log = a.log()
    outage_lines = [ln for ln in log.splitlines() if "state backend redis" in ln and "unavailable" in ln]
    assert len(outage_lines) == 1, log  # logged once, not on every retry
    assert "redis://127.0.0.1" in log

    redis_server.start()  # same port, empty: a pushes what it observed meanwhile
    eventually(lambda: metric(a.metrics(), "adaptspec_state_backend_up", backend="redis") == 1, timeout=15)
    try:
        eventually(lambda: abs(_alpha(b, cls) - _alpha(a, cls)) < 1e-3, timeout=15)
    except AssertionError:
        raise AssertionError((_alpha(a, cls), _alpha(b, cls), a.log()[-3000:], b.log()[-3000:])) from None
    assert "is up; resynced" in a.log()


def test_sampled_requests_feed_their_own_regime_across_replicas(upstreams, proxies, redis_server):
    up = upstreams("w0", alpha=0.95)
    a = proxies(_cfg(up, redis_server.url), name="a")
    b = proxies(_cfg(up, redis_server.url), name="b")
    eventually(lambda: metric(a.metrics(), "adaptspec_state_backend_up", backend="redis") == 1)
    cls = _class_of(b)

    def sampled(px) -> float:
        return metric(px.metrics(), "adaptspec_alpha_estimate_sampled", worker="w0", proposer="ngram",
                      content_class=cls)

    other = "translate" if cls != "translate" else "chat"  # a class no request went to: the priors alone
    prior_g = metric(b.metrics(), "adaptspec_alpha_estimate", worker="w0", proposer="ngram", content_class=other)
    prior_s = metric(b.metrics(), "adaptspec_alpha_estimate_sampled", worker="w0", proposer="ngram",
                     content_class=other)
    assert prior_s == pytest.approx(0.75 * prior_g)  # the sampled prior: lower, from the greedy estimate
    greedy0, sampled0 = _alpha(b, cls), sampled(b)
    client = a.client()
    for _ in range(15):
        client.chat.completions.create(model="tiny", messages=CODE, max_tokens=8, temperature=0.8)
    assert sampled(a) - sampled0 > 0.2
    assert _alpha(a, cls) == pytest.approx(greedy0, abs=1e-6)  # greedy keys untouched by sampled feedback
    eventually(lambda: abs(sampled(b) - sampled(a)) < 1e-3, timeout=5)  # the regime travels through Redis
