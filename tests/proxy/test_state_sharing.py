"""Replicas share learning as per-key count deltas (proxy/state.py): whatever the traffic, every replica ends
with the counts one proxy would have learned from the same outcomes, through a Redis restart and a replica
killed outright; and Redis work does not grow with the request rate."""

from __future__ import annotations

import logging
import signal
import threading
import time

import openai
import pytest
import redis

from .conftest import eventually, metric, pool

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

CODE = [{"role": "user", "content": "def add(a, b):\n    return a + b\n# write a docstring for this"}]
LEARN_S = 0.2


def _cfg(up, redis_url: str) -> dict:
    return {"pools": [pool("spec", [up], proposers=["ngram"], profile="cpu-tiny")],
            "policy": {"kind": "static", "proposer": "ngram", "gamma": 4},
            # no forgetting: the counts are plain sums, so "the same counts" can be checked to the request
            "estimator": {"half_life_tokens": None, "half_life_s": None, "predict": False},
            "state": {"backend": "redis", "url": redis_url, "key_prefix": "s:", "learn_interval_s": LEARN_S},
            "server": {"scrape_interval_s": 0.05}}


def _reports(px, cls: str) -> float:
    return metric(px.metrics(), "adaptspec_alpha_estimate_reports", worker="w0", proposer="ngram",
                  content_class=cls) or 0.0


class Load:
    """Closed-loop clients spread over the replicas; counts the requests answered in full."""

    def __init__(self, replicas: list, clients: int = 6):
        self.replicas, self.ok, self.failed = list(replicas), 0, 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(clients)]

    def _client(self, i: int) -> None:
        clients = {px.url: openai.OpenAI(base_url=px.url + "/v1", api_key="none", max_retries=0, timeout=10)
                   for px in self.replicas}
        n = 0
        while not self.stop.is_set():
            px = self.replicas[(i + n) % len(self.replicas)]
            n += 1
            try:
                r = clients[px.url].chat.completions.create(model="tiny", messages=CODE, max_tokens=8,
                                                            temperature=0)
                ok = r.usage.model_extra["speculative"]["draft_tokens"] > 0
            except openai.APIError:
                ok = False
            with self.lock:
                self.ok += ok
                self.failed += not ok
        for c in clients.values():
            c.close()

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def test_three_replicas_agree_with_one_proxy_through_redis_restart_and_replica_kill(upstreams, proxies,
                                                                                     redis_server):
    up = upstreams("w0", alpha=0.9)
    a, b, c = (proxies(_cfg(up, redis_server.url), name=n) for n in "abc")
    eventually(lambda: all(metric(p.metrics(), "adaptspec_state_backend_up", backend="redis") == 1 for p in (a, b, c)))
    raw = a.client().chat.completions.with_raw_response.create(model="tiny", messages=CODE, max_tokens=8,
                                                               temperature=0)
    raw.parse()
    cls = raw.headers["x-adaptspec-class"]
    with Load([a, b, c]) as load:
        time.sleep(3)
        redis_server.stop()  # SIGKILL: the stream and every key are gone
        time.sleep(1.5)
        redis_server.start()  # same port, empty
        time.sleep(3)
        with load.lock:
            at_kill = load.ok
        c.proc.send_signal(signal.SIGKILL)  # its last interval's deltas die with it
        c.proc.wait()
        load.replicas.remove(c)
        time.sleep(3)
    n_ok = load.ok + 1  # + the request that found the class
    assert load.ok > 200 and at_kill > 100, (load.ok, at_kill)
    d = proxies(_cfg(up, redis_server.url), name="d")  # joins late: replays the stream
    # one proxy's count: one report per request answered in full; a replica killed outright loses at most its
    # last interval's deltas (about LEARN_S of its share of the traffic)
    for px in (a, b, d):
        eventually(lambda px=px: abs(_reports(px, cls) - n_ok) <= 0.01 * n_ok, timeout=15)
    final = [_reports(px, cls) for px in (a, b, d)]
    log.info("answered %d (%d when c was killed, %d failed); reports on a, b, late d: %s", n_ok, at_kill,
             load.failed, final)
    assert max(final) <= n_ok  # nothing counted twice (re-sent entries after the restart are skipped)
    assert max(final) - min(final) <= 0.001 * n_ok  # and the replicas agree with each other
    alphas = [metric(px.metrics(), "adaptspec_alpha_estimate", worker="w0", proposer="ngram", content_class=cls)
              for px in (a, b, d)]
    assert max(alphas) - min(alphas) < 1e-3
    assert "lost its data" in a.log() and "lost its data" in b.log()


def test_redis_commands_do_not_grow_with_requests(upstreams, proxies, redis_server):
    """Commands per second with 3 replicas idle and under load: per-observation sharing would add a write and
    reads per request; count deltas add nothing that depends on the number of requests."""
    up = upstreams("w0", alpha=0.9)
    reps = [proxies(_cfg(up, redis_server.url), name=n) for n in "abc"]
    eventually(lambda: all(metric(p.metrics(), "adaptspec_state_backend_up", backend="redis") == 1 for p in reps))
    r = redis.Redis.from_url(redis_server.url)

    def rate(seconds: float) -> float:
        c0, t0 = r.info("stats")["total_commands_processed"], time.monotonic()
        time.sleep(seconds)
        return (r.info("stats")["total_commands_processed"] - c0 - 2) / (time.monotonic() - t0)

    idle = rate(3)
    with Load(reps) as load:
        time.sleep(0.5)
        n0 = load.ok
        busy = rate(3)
        requests = load.ok - n0
    r.close()
    log.info("3 replicas: %.1f Redis commands/s idle, %.1f under %d requests in 3 s", idle, busy, requests)
    assert requests > 60, requests  # enough that one command per request would show: > 20/s
    assert busy < idle * 1.15 + 5, (idle, busy, requests)
