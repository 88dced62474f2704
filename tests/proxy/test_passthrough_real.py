"""Pass-through end to end: `adaptspec serve` in front of the real reference worker (`adaptspec worker`, the tiny
pair), driven by the official `openai` client where it has the method and by plain HTTP for /tokenize and
/detokenize (vLLM's own endpoints, not in the client)."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.integrations._servers import free_port, worker_and_static_proxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("passthrough")
    worker_port, proxy_port = free_port(), free_port()
    servers = []
    try:
        worker_and_static_proxy(tmp, worker_port, proxy_port, servers)
        worker, proxy = servers
        worker_url, proxy_url = f"http://127.0.0.1:{worker_port}", f"http://127.0.0.1:{proxy_port}"
        worker.wait_http(f"{worker_url}/health", timeout_s=120)
        proxy.wait_http(f"{proxy_url}/health/ready", timeout_s=60)
        yield worker_url, proxy_url
    finally:
        for s in reversed(servers):
            s.stop()


def test_embeddings_through_the_proxy_with_the_openai_client(stack):
    worker_url, proxy_url = stack
    texts = ["def add(a, b): return a + b", "bonjour tout le monde"]
    with openai.OpenAI(base_url=f"{worker_url}/v1", api_key="none") as to_worker, \
            openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="none") as to_proxy:  # closed: no stray sockets
        direct = to_worker.embeddings.create(model="tiny", input=texts)
        raw = to_proxy.embeddings.with_raw_response.create(model="tiny", input=texts)
    assert raw.headers["x-adaptspec-worker"] == "w0" and "x-adaptspec-class" not in raw.headers
    got = raw.parse()
    assert [d.embedding for d in got.data] == [d.embedding for d in direct.data]
    assert got.usage.prompt_tokens == direct.usage.prompt_tokens > 0


def test_tokenize_and_detokenize_through_the_proxy(stack):
    worker_url, proxy_url = stack
    body = {"model": "tiny", "prompt": "The quick brown fox", "return_token_strs": True}
    r = httpx.post(f"{proxy_url}/tokenize", json=body, headers={"X-Request-Id": "pt-tok-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "pt-tok-1"
    assert r.json() == httpx.post(f"{worker_url}/tokenize", json=body).json()
    back = httpx.post(f"{proxy_url}/detokenize", json={"model": "tiny", "tokens": r.json()["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": "The quick brown fox"}
    bad = httpx.post(f"{proxy_url}/detokenize", json={"model": "tiny", "tokens": [-1]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"  # the worker's error, relayed


def test_models_carry_the_workers_card_and_responses_are_not_offered(stack):
    worker_url, proxy_url = stack
    with openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="none") as client:
        (card,) = client.models.list().data
        (own,) = httpx.get(f"{worker_url}/v1/models").json()["data"]
        assert card.id == own["id"] == "tiny"
        assert card.model_extra["max_model_len"] == own["max_model_len"] and card.model_extra["root"] == own["root"]
        assert card.owned_by == own["owned_by"] and card.created == own["created"]
        with pytest.raises(openai.NotFoundError) as err:
            client.responses.create(model="tiny", input="hi")
    assert err.value.code == "endpoint_not_supported"
