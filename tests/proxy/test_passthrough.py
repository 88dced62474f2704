"""Pass-through endpoints (/v1/embeddings, /v1/responses, /tokenize, /detokenize) and the merged /v1/models,
in process: the proxy app on aiohttp's test server in front of real test upstreams (tests/proxy/upstream_app.py)
on the same loop."""

from __future__ import annotations

import contextlib
import json
import logging

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy, create_app

from . import upstream_app
from .conftest import free_port

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")  # app["proxy"]


@contextlib.asynccontextmanager
async def upstreams(*names: str, **kw):
    """Test upstreams named `names`, each -> its base URL and a client for its debug endpoints."""
    async with contextlib.AsyncExitStack() as stack:
        out = {}
        for i, name in enumerate(names):
            app = upstream_app.build(name=name, model="tiny", engine="adaptspec", alpha=0.5, chunks=4, delay_ms=0,
                                     max_model_len=kw.get("max_model_len", [2048] * len(names))[i])
            client = await stack.enter_async_context(TestClient(TestServer(app)))
            out[name] = client
        yield out


def url(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


async def sent(client: TestClient) -> list[dict]:
    async with client.get("/_debug/requests") as r:
        return await r.json()


@contextlib.asynccontextmanager
async def proxy_for(pools: list[dict], **server):
    proxy = Proxy(parse_config({"pools": pools, "server": {"scrape_interval_s": 30, **server}}))
    async with TestClient(TestServer(create_app(proxy))) as client:
        await proxy.scraper.scrape_once()  # model ids and cards now, not at the first 30 s round
        yield proxy, client


def pool(name: str, engine: str, workers: dict[str, str], **extra) -> dict:
    return {"name": name, "engine": engine, "profile": "cpu-tiny", "proposers": ["ngram"],
            "workers": [{"name": n, "url": u} for n, u in workers.items()], **extra}


def count(proxy: Proxy, name: str, **labels: str) -> float:
    return proxy.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_tokenize_goes_unchanged_to_a_worker_whose_engine_offers_it(caplog):
    async with upstreams("v0", "o0") as up, proxy_for([
            pool("vllm", "vllm", {"v0": url(up["v0"])}), pool("plain", "openai", {"o0": url(up["o0"])})]) as (proxy, c):
        body = {"model": "tiny", "prompt": "hello world", "add_special_tokens": False}
        with caplog.at_level(logging.INFO, logger="adaptspec.access"):
            r = await c.post("/tokenize", json=body, headers={"X-Request-Id": "tok-1"})
        assert r.status == 200
        answer = await r.json()
        assert answer == {"worker": "v0", "path": "/tokenize", "echo": body}  # relayed as the worker wrote it
        assert r.headers["x-adaptspec-worker"] == "v0" and r.headers["X-Request-Id"] == "tok-1"
        assert "x-adaptspec-class" not in r.headers  # no decision
        (got,) = await sent(up["v0"])
        assert got["body"] == body and got["x-request-id"] == "tok-1"
        assert await sent(up["o0"]) == []  # an OpenAI-API server has no /tokenize
        assert count(proxy, "adaptspec_passthrough_requests_total", endpoint="/tokenize", worker="v0",
                     code="200") == 1
        assert proxy.metrics.registry.get_sample_value("adaptspec_requests_total", {
            "content_class": "unknown", "proposer": "none", "worker": "v0", "code": "200"}) is None
        line = json.loads(next(r.getMessage() for r in caplog.records if "tok-1" in r.getMessage()))
        assert line["path"] == "/tokenize" and line["worker"] == "v0" and line["status"] == 200
        assert line["class"] is None and line["proposer"] is None and line["model"] == "tiny"

        # embeddings and responses: both engines offer them; detokenize without a model: any offering worker
        for path in ("/v1/embeddings", "/v1/responses"):
            r = await c.post(path, json={"model": "tiny", "input": "x"})
            assert r.status == 200 and (await r.json())["path"] == path
        r = await c.post("/detokenize", json={"tokens": [1, 2]})
        assert r.status == 200 and (await r.json())["worker"] == "v0"


async def test_the_least_loaded_healthy_worker_answers():
    async with upstreams("v0", "v1") as up, proxy_for([
            pool("vllm", "vllm", {"v0": url(up["v0"]), "v1": url(up["v1"])})]) as (proxy, c):
        proxy.pools.workers["v0"].running = 12.0  # scraped occupancy
        for _ in range(3):
            r = await c.post("/v1/embeddings", json={"model": "tiny", "input": "a"})
            assert (await r.json())["worker"] == "v1"
        proxy.pools.workers["v0"].running = 0.0
        proxy.pools.workers["v1"].running = 5.0
        r = await c.post("/v1/embeddings", json={"model": "tiny", "input": "a"})
        assert (await r.json())["worker"] == "v0"
        proxy.pools.mark_unhealthy(proxy.pools.workers["v0"], "test")
        r = await c.post("/v1/embeddings", json={"model": "tiny", "input": "a"})
        assert (await r.json())["worker"] == "v1"  # busier, but the only healthy one


async def test_404_when_no_engine_offers_the_endpoint_and_503_when_none_is_healthy():
    async with upstreams("o0", "a0") as up, proxy_for([
            pool("plain", "openai", {"o0": url(up["o0"])}),
            pool("ref", "adaptspec", {"a0": url(up["a0"])}, models=["ref-model"])]) as (proxy, c):
        r = await c.post("/tokenize", json={"model": "tiny", "prompt": "x"})
        assert r.status == 404
        err = (await r.json())["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == "endpoint_not_supported"
        assert "/tokenize" in err["message"] and "'tiny'" in err["message"]
        r = await c.post("/v1/responses", json={"model": "ref-model", "input": "x"})  # the reference worker: no
        assert r.status == 404 and (await r.json())["error"]["code"] == "endpoint_not_supported"
        r = await c.post("/v1/embeddings", json={"model": "nope", "input": "x"})
        assert r.status == 404 and (await r.json())["error"]["code"] == "model_not_found"
        assert count(proxy, "adaptspec_passthrough_requests_total", endpoint="/v1/embeddings", worker="none",
                     code="404") == 1
        proxy.pools.mark_unhealthy(proxy.pools.workers["a0"], "test")
        r = await c.post("/detokenize", json={"tokens": [1]})  # only the reference worker offers it
        assert r.status == 503
        assert "No healthy worker" in (await r.json())["error"]["message"]
        assert await sent(up["a0"]) == []


async def test_a_refused_connection_moves_the_request_to_another_worker():
    dead = f"http://127.0.0.1:{free_port()}"
    async with upstreams("v1") as up, proxy_for([
            pool("vllm", "vllm", {"v0": dead, "v1": url(up["v1"])}, models=["tiny"])]) as (proxy, c):
        proxy.pools.mark_healthy(proxy.pools.workers["v0"])  # the startup scrape found it down; the request has not
        proxy.pools.workers["v1"].running = 50.0  # v0 is picked first
        r = await c.post("/tokenize", json={"model": "tiny", "prompt": "x"})
        assert r.status == 200 and (await r.json())["worker"] == "v1"
        assert count(proxy, "adaptspec_upstream_retries_total", worker="v0") == 1
        assert not proxy.pools.workers["v0"].healthy
        proxy.pools.mark_unhealthy(proxy.pools.workers["v1"], "test")
        r = await c.post("/tokenize", json={"model": "tiny", "prompt": "x"})
        assert r.status == 503


async def test_auth_and_body_limits_are_the_generation_paths(monkeypatch):
    monkeypatch.setenv("OPS2_TEST_KEYS", "k1")
    async with upstreams("v0") as up, proxy_for([pool("vllm", "vllm", {"v0": url(up["v0"])})],
                                                api_keys_env="OPS2_TEST_KEYS", max_body_bytes=2048) as (proxy, c):
        r = await c.post("/tokenize", json={"prompt": "x"})
        assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": "Bearer k1"}
        r = await c.post("/tokenize", json={"prompt": "x" * 4096}, headers=auth)
        assert r.status == 413 and (await r.json())["error"]["code"] == "body_too_large"
        r = await c.post("/tokenize", data=b"[" * 1000 + b"]" * 1000, headers=auth)  # JSON nested too deep
        assert r.status == 400
        r = await c.post("/tokenize", data=b"[1, 2]", headers=auth)
        assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_json"
        r = await c.post("/tokenize", json={"model": 7, "prompt": "x"}, headers=auth)
        assert r.status == 400 and (await r.json())["error"]["param"] == "model"
        r = await c.post("/tokenize", json={"prompt": "hi"}, headers=auth)
        assert r.status == 200 and (await r.json())["echo"] == {"prompt": "hi"}
        assert [s["authorization"] for s in await sent(up["v0"])] == [None]  # our key is not the worker's


async def test_a_responses_stream_is_relayed_event_by_event():
    async with upstreams("v0") as up, proxy_for([pool("vllm", "vllm", {"v0": url(up["v0"])})]) as (proxy, c):
        r = await c.post("/v1/responses", json={"model": "tiny", "input": "x", "stream": True})
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        text = await r.text()
        assert text == "".join(f'event: response.output_text.delta\ndata: {{"delta": "t{i}"}}\n\n' for i in range(3))


async def test_models_pass_the_upstream_cards_through_merged_by_id():
    async with upstreams("v0", "v1", "o0", max_model_len=[4096, 1024, 8192]) as up, proxy_for([
            pool("vllm", "vllm", {"v0": url(up["v0"]), "v1": url(up["v1"])}),
            pool("plain", "openai", {"o0": url(up["o0"])}, models=["tiny", "other"])]) as (proxy, c):
        r = await c.get("/v1/models")
        assert r.status == 200
        data = (await r.json())["data"]
        assert [m["id"] for m in data] == ["other", "tiny"]  # one card per id
        other, tiny = data
        assert other == {"id": "other", "object": "model", "created": proxy.started, "owned_by": "adaptspec"}
        # fields from the first worker by name (o0), the smallest context any of the three reports
        assert tiny == {"id": "tiny", "object": "model", "created": 1700000000, "owned_by": "o0",
                        "root": "/models/tiny", "parent": None, "max_model_len": 1024}


@contextlib.asynccontextmanager
async def silent_responses_upstream(silence_s: float):
    """/v1/responses streaming one event, then nothing for `silence_s`, then one more event and the end."""
    import asyncio

    from aiohttp import web

    async def responses(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'event: response.output_text.delta\ndata: {"delta": "t0"}\n\n')
        await asyncio.sleep(silence_s)
        await resp.write(b'event: response.output_text.delta\ndata: {"delta": "t1"}\n\n')
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/responses", responses)
    async with TestClient(TestServer(app)) as client:
        yield url(client)


@pytest.mark.parametrize("alive", [False, True])
async def test_a_silent_responses_stream_is_cut_unless_its_worker_is_alive(alive):
    """The generation path's relay (relay.py): a stream silent past stall_timeout_s on a worker that answers
    nothing else ends with an SSE error event and ejects it; one on a worker that is alive (answered scrapes)
    is queued, not stalled, and goes on."""
    import asyncio

    async with silent_responses_upstream(0.8) as up, proxy_for(
            [pool("o", "openai", {"o0": up}, proposers=[])], stall_timeout_s=0.3) as (proxy, c):
        worker = proxy.pools.workers["o0"]

        async def scrapes_answered():
            while True:
                proxy.pools.answered(worker)
                await asyncio.sleep(0.05)

        keep = asyncio.create_task(scrapes_answered()) if alive else None
        try:
            r = await c.post("/v1/responses", json={"model": "tiny", "input": "x", "stream": True})
            text = await r.text()
        finally:
            if keep is not None:
                keep.cancel()
        assert r.status == 200 and text.startswith('event: response.output_text.delta\ndata: {"delta": "t0"}\n\n')
        if alive:
            assert text.endswith('data: {"delta": "t1"}\n\n') and worker.healthy
        else:
            assert '"upstream_timeout"' in text and "sent nothing for 0.3 s" in text and not worker.healthy
