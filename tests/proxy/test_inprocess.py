"""The proxy app in process: aiohttp's test client in front of `create_app`, with the test upstream
(tests/proxy/upstream_app.py) as a real aiohttp app on the same event loop. No subprocess: planning,
retries, relaying and feedback are checked through the real request path, one request at a time."""

from __future__ import annotations

import contextlib
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy, create_app

from . import upstream_app
from .conftest import free_port

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")  # app["proxy"]

CHAT = [{"role": "user", "content": "Write a function that reverses a list in Python."}]


class Upstream:
    """The test upstream on loopback, with a client for its debug endpoints."""

    def __init__(self, client: TestClient):
        self.client = client
        self.url = str(client.make_url("")).rstrip("/")

    async def requests(self) -> list[dict]:
        async with self.client.get("/_debug/requests") as r:
            return await r.json()


@contextlib.asynccontextmanager
async def upstream(engine: str = "adaptspec", **kw):
    app = upstream_app.build(name=kw.pop("name", "w0"), model="tiny", engine=engine, alpha=kw.pop("alpha", 0.75),
                             chunks=kw.pop("chunks", 6), delay_ms=0, **kw)
    async with TestClient(TestServer(app)) as client:
        yield Upstream(client)


@contextlib.asynccontextmanager
async def proxy_for(workers: list[dict], engine: str = "adaptspec", **pool):
    pools = [{"name": "p", "engine": engine, "profile": "cpu-tiny", "max_gamma": 8, "workers": workers, **pool}]
    proxy = Proxy(parse_config({"pools": pools, "server": {"scrape_interval_s": 30}}))
    async with TestClient(TestServer(create_app(proxy))) as client:
        yield proxy, client


def _count(proxy: Proxy, name: str, **labels: str) -> float:
    value = proxy.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_plan_is_written_into_the_adaptspec_body_and_the_headers():
    async with upstream() as up, proxy_for([{"name": "w0", "url": up.url}]) as (proxy, client):
        r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "max_tokens": 6})
        assert r.status == 200
        body = await r.json()
        sent = (await up.requests())[-1]["body"]
        spec = sent["speculation"]
        assert r.headers["x-adaptspec-proposer"] == spec["proposer"]
        assert r.headers["x-adaptspec-gamma"] == str(spec["num_speculative_tokens"])
        assert r.headers["x-adaptspec-class"] == spec["content_class"] == "code"
        assert r.headers["x-adaptspec-worker"] == "w0"
        assert body["usage"]["completion_tokens"] == 6  # relayed as the upstream wrote it
        assert sent["messages"] == CHAT and sent["max_tokens"] == 6  # the rest of the body untouched


async def test_vllm_workers_get_the_plan_in_vllm_xargs():
    async with upstream("vllm") as up, proxy_for([{"name": "w0", "url": up.url}], engine="vllm",
                                                  proposers=["ngram"]) as (proxy, client):
        r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT,
                                                             "vllm_xargs": {"keep": 1}})
        assert r.status == 200
        sent = (await up.requests())[-1]["body"]
        xargs = sent["vllm_xargs"]
        assert xargs["keep"] == 1 and "speculation" not in sent
        assert xargs["adaptspec_proposer"] == r.headers["x-adaptspec-proposer"]
        assert str(xargs["adaptspec_num_spec_tokens"]) == r.headers["x-adaptspec-gamma"]
        bad = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "vllm_xargs": [1]})
        assert bad.status == 422 and (await bad.json())["error"]["param"] == "vllm_xargs"


async def test_openai_workers_get_the_clients_bytes_unchanged():
    async with upstream("openai") as up, proxy_for([{"name": "w0", "url": up.url}], engine="openai",
                                                    proposers=[]) as (proxy, client):
        raw = json.dumps({"model": "tiny", "messages": CHAT, "speculation": {"proposer": "ngram"}}).encode()
        r = await client.post("/v1/chat/completions", data=raw, headers={"Content-Type": "application/json"})
        assert r.status == 200 and r.headers["x-adaptspec-proposer"] == "none"
        assert (await up.requests())[-1]["body"] == json.loads(raw)


@contextlib.asynccontextmanager
async def dropping_worker():
    """A worker that answers its scrapes but drops every generation request's connection unanswered."""
    async def drop(request: web.Request) -> web.Response:
        request.transport.close()
        return web.Response(status=500)  # never reaches the proxy: the connection is gone

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_running 0\n")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", drop)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    async with TestClient(TestServer(app)) as client:
        yield str(client.make_url("")).rstrip("/")


async def test_a_failing_worker_is_retried_on_the_next_and_the_request_counted_once():
    async with upstream() as up, dropping_worker() as flaky, proxy_for([{"name": "flaky", "url": flaky},
                                                                        {"name": "w0", "url": up.url}]) as (proxy, client):
        proxy.pools.workers["w0"].inflight = 5  # steer the picks to the flaky worker (least loaded)
        r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT})
        proxy.pools.workers["w0"].inflight = 0
        assert r.status == 200 and r.headers["x-adaptspec-worker"] == "w0"
        # a dropped connection gets one more try on the same worker, then the worker is ejected
        assert _count(proxy, "adaptspec_upstream_retries_total", worker="flaky") == 2
        assert not proxy.pools.workers["flaky"].healthy
        answered = sum(s.value for s in proxy.metrics.requests.collect()[0].samples if s.name.endswith("_total"))
        assert answered == 1  # the retried request is one request, counted with the plan that answered
        assert _count(proxy, "adaptspec_requests_total", content_class="code", proposer=r.headers[
            "x-adaptspec-proposer"], worker="w0", code="200") == 1
        assert len(await up.requests()) == 1


async def test_all_workers_dead_is_a_503_in_openai_shape():
    dead = f"http://127.0.0.1:{free_port()}"
    async with proxy_for([{"name": "dead", "url": dead}]) as (proxy, client):
        r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT})
        assert r.status == 503
        err = (await r.json())["error"]
        assert err["type"] == "upstream_error" and "dead" in err["message"]


async def test_stream_is_relayed_and_the_usage_the_proxy_asked_for_is_stripped():
    async with upstream(chunks=5) as up, proxy_for([{"name": "w0", "url": up.url}]) as (proxy, client):
        r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "stream": True},
                              headers={"X-Request-Id": "stream-7"})
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        assert r.headers["X-Request-Id"] == "stream-7"  # on a stream the handler prepared itself too
        text = (await r.read()).decode()
        events = [e for e in text.split("\n\n") if e]
        assert len(events) == 5 + 2 and events[-1] == "data: [DONE]"  # 5 content, finish, DONE
        assert '"usage"' not in text  # the client did not ask for usage
        assert (await up.requests())[-1]["body"]["stream_options"] == {"include_usage": True}
        # ... but the proxy read it: output tokens counted from the upstream's usage chunk
        proposer = r.headers["x-adaptspec-proposer"]
        assert _count(proxy, "adaptspec_output_tokens_total", worker="w0", proposer=proposer,
                      content_class="code") == 5
        asked = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "stream": True,
                                                                 "stream_options": {"include_usage": True}})
        assert '"usage"' in (await asked.read()).decode()


async def test_per_request_stats_feed_the_alpha_table():
    async with upstream(alpha=0.9, chunks=24) as up, proxy_for([{"name": "w0", "url": up.url}],
                                                               proposers=["ngram"]) as (proxy, client):
        before = proxy.state.alphas.get("w0", "ngram", "code")
        for _ in range(6):
            r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "temperature": 0})
            assert r.status == 200
        state = await (await up.client.get("/_debug/state")).json()
        assert state["draft"] > 0  # the decisions speculated, so the worker reported stats
        after = proxy.state.alphas.get("w0", "ngram", "code")
        assert after.n > before.n
        assert _count(proxy, "adaptspec_draft_tokens_total", worker="w0", proposer="ngram",
                      content_class="code") == state["draft"]
        assert _count(proxy, "adaptspec_accepted_tokens_total", worker="w0", proposer="ngram",
                      content_class="code") == state["accepted"]


async def test_every_state_gauge_is_exposed_with_its_help():
    from adaptspec.proxy.metrics import GAUGE_DOCS

    async with upstream() as up, proxy_for([{"name": "w0", "url": up.url}]) as (proxy, client):
        text = await (await client.get("/metrics")).text()
    helps = dict(line[len("# HELP "):].split(" ", 1) for line in text.splitlines() if line.startswith("# HELP "))
    assert {name: helps.get(name) for name in GAUGE_DOCS} == GAUGE_DOCS


@contextlib.asynccontextmanager
async def paced_upstream(gaps_s: list[float]):
    """An OpenAI-style SSE upstream: one content event after each gap in `gaps_s`, then finish and [DONE];
    a gap of None never ends (a frozen worker)."""
    import asyncio

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, gap in enumerate(gaps_s):
            await asyncio.sleep(3600 if gap is None else gap)
            await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i)
        await resp.write(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with TestClient(TestServer(app)) as client:
        yield str(client.make_url("")).rstrip("/")


async def _stream_through(url: str, stall_s: float) -> tuple[str, Proxy]:
    import asyncio

    pools = [{"name": "p", "engine": "openai", "per_request": False, "proposers": [],
              "workers": [{"name": "w0", "url": url}]}]
    proxy = Proxy(parse_config({"pools": pools, "server": {"scrape_interval_s": 30, "stall_timeout_s": stall_s,
                                                           "request_timeout_s": 60}}))
    async with TestClient(TestServer(create_app(proxy))) as client:
        r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "stream": True})
        assert r.status == 200
        text = (await r.read()).decode()
        if text.endswith("data: [DONE]\n\n"):  # the worker's stream read to its end: its connection is kept
            for _ in range(200):
                if proxy.h1._origins[url].idle:
                    break
                await asyncio.sleep(0.01)
            assert len(proxy.h1._origins[url].idle) == 1
        return text, proxy


async def test_a_stream_whose_chunks_come_within_the_stall_timeout_is_not_cut_however_long_it_runs():
    # 5 gaps of 0.15 s: 0.75 s in all, over the 0.4 s stall timeout, which counts from the last chunk
    async with paced_upstream([0.15] * 5) as url:
        text, proxy = await _stream_through(url, stall_s=0.4)
    assert [e for e in text.split("\n\n") if e][-1] == "data: [DONE]" and text.count("data:") == 7
    assert "error" not in text and proxy.pools.workers["w0"].healthy


async def test_a_stream_that_goes_silent_ends_with_an_error_event_after_the_stall_timeout():
    async with paced_upstream([0.0, 0.0, None]) as url:
        text, proxy = await _stream_through(url, stall_s=0.3)
    events = [e for e in text.split("\n\n") if e]
    assert events[:2] == ['data: {"choices":[{"index":0,"delta":{"content":"t0"}}]}',
                          'data: {"choices":[{"index":0,"delta":{"content":"t1"}}]}']
    error = json.loads(events[-1][len("data: "):])["error"]
    assert error["code"] == "upstream_timeout" and "sent nothing for 0.3 s" in error["message"]
    assert not proxy.pools.workers["w0"].healthy  # ejected


async def test_a_worker_that_never_answers_loses_the_request_to_the_next_after_the_deadline():
    import asyncio

    async def frozen(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", frozen)
    async with TestClient(TestServer(app)) as stuck, upstream(name="w1") as w1:
        pools = [{"name": "p", "engine": "adaptspec", "profile": "cpu-tiny", "max_gamma": 8,
                  "workers": [{"name": "w0", "url": str(stuck.make_url("")).rstrip("/")},
                              {"name": "w1", "url": w1.url}]}]
        proxy = Proxy(parse_config({"pools": pools, "server": {"scrape_interval_s": 30, "request_timeout_s": 0.3,
                                                               "first_byte_timeout_s": 0.3}}))
        async with TestClient(TestServer(create_app(proxy))) as client:
            for stream in (False, True):
                proxy.pools.mark_healthy(proxy.pools.workers["w0"])
                for _ in range(4):  # whichever worker the decision picks first, each request ends on w1
                    r = await client.post("/v1/chat/completions",
                                          json={"model": "tiny", "messages": CHAT, "stream": stream})
                    assert r.status == 200 and r.headers["x-adaptspec-worker"] == "w1"
                    await r.read()
    assert _count(proxy, "adaptspec_upstream_retries_total", worker="w0") >= 1



async def test_batch_one_decode_rates_reach_the_policys_realized_rate_corrections():
    """Streamed and whole answers at concurrency 1 (no exploration, no step telemetry: no probes): each speculating
    request is a plan priced alone at batch 1, so each adds one request of evidence to its proposer's ratio in the
    policy's `RealizedRates`."""
    pools = [{"name": "p", "engine": "adaptspec", "profile": "cpu-tiny", "max_gamma": 8, "proposers": ["ngram", "eagle"],
              "workers": [{"name": "w0", "url": ""}]}]
    async with upstream(alpha=0.8, chunks=12) as up:
        pools[0]["workers"][0]["url"] = up.url
        proxy = Proxy(parse_config({"pools": pools, "server": {"scrape_interval_s": 30},
                                    "policy": {"kind": "goodput", "explore": 0.0}}))
        async with TestClient(TestServer(create_app(proxy))) as client:
            rates = proxy.policy.rates
            half = 0.5 ** (1.0 / rates.half_life)
            expected: dict[str, float] = {}
            for i in range(8):
                r = await client.post("/v1/chat/completions", json={
                    "model": "tiny", "messages": CHAT, "temperature": 0, "stream": i % 2 == 0, "delay_ms": 2})
                assert r.status == 200
                await r.read()
                proposer = r.headers["x-adaptspec-proposer"]
                assert proposer != "none"
                expected = {p: n * half for p, n in expected.items()}
                expected[proposer] = expected.get(proposer, 0.0) + 1.0
            assert rates.evidence("w0", "code") == pytest.approx(expected)
            # one proposer alone has nothing to be compared with: its price stands, and /metrics says so
            assert all(rates.correction("w0", "code", p) == 1.0 for p in expected)
            text = await (await client.get("/metrics")).text()
            for p in expected:
                assert f'adaptspec_realized_correction{{content_class="code",proposer="{p}",worker="w0"}} 1.0' in text


async def test_a_request_the_worker_ran_otherwise_than_decided_teaches_the_corrections_nothing():
    """A client's own `speculation` (opt-in, `server.allow_client_speculation`) runs instead of the decision: its
    decode rate is not the decided plan's, so it is no evidence for the realized-rate corrections."""
    async with upstream(alpha=0.8, chunks=12) as up:
        pools = [{"name": "p", "engine": "adaptspec", "profile": "cpu-tiny", "max_gamma": 8,
                  "proposers": ["ngram", "eagle"], "workers": [{"name": "w0", "url": up.url}]}]
        proxy = Proxy(parse_config({"pools": pools, "server": {"scrape_interval_s": 30,
                                                               "allow_client_speculation": True},
                                    "policy": {"kind": "goodput", "explore": 0.0}}))
        async with TestClient(TestServer(create_app(proxy))) as client:
            decided = proxy.policy.decide("code", [w.state() for w in proxy.pools.workers.values()],
                                          proxy.state.alphas)
            other = "ngram" if decided.proposer == "eagle" else "eagle"
            for _ in range(4):
                r = await client.post("/v1/chat/completions", json={
                    "model": "tiny", "messages": CHAT, "temperature": 0, "stream": True, "delay_ms": 2,
                    "speculation": {"proposer": other, "num_speculative_tokens": 1}})
                assert r.status == 200 and r.headers["x-adaptspec-proposer"] == other
                await r.read()
            assert proxy.policy.rates.evidence("w0", "code") == {}
