"""The reference worker's /tokenize, /detokenize (vLLM's shapes) and /v1/embeddings, on the built-in tiny pair
behind uvicorn on a loopback port: ids are the ones generation uses, embeddings equal the model's pooled state
computed directly, and the official `openai` client reads them."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
import torch
import torch.nn.functional as F
from engine_requests import served_tiny

pytestmark = pytest.mark.integration

TEXTS = ["hello world", "def f(x):\n    return x * 2\n", "Grüße, 世界! 🙂", "  spaces  and\ttabs"]


@pytest.fixture(scope="module")
def worker():
    with served_tiny(max_batch=4) as served:
        yield served


def test_tokenize_gives_the_ids_generation_uses_and_detokenize_inverts_it(worker):
    url, engine = worker
    for text in TEXTS:
        r = httpx.post(f"{url}/tokenize", json={"model": "tiny", "prompt": text, "return_token_strs": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tokens"] == engine.encode(text) and body["count"] == len(body["tokens"])
        assert body["max_model_len"] == 512
        assert body["token_strs"] == [engine.tokenizer.id_to_token(i) for i in body["tokens"]]
        back = httpx.post(f"{url}/detokenize", json={"model": "tiny", "tokens": body["tokens"]}).json()
        assert back == {"prompt": text}
        used = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": text, "max_tokens": 1}).json()
        assert used["usage"]["prompt_tokens"] == body["count"]  # the same ids the completion was fed
    plain = httpx.post(f"{url}/tokenize", json={"prompt": TEXTS[0]}).json()  # no model: vLLM's optional field
    assert plain["token_strs"] is None and plain["tokens"] == engine.encode(TEXTS[0])


def test_tokenize_messages_renders_the_chat_template(worker):
    url, engine = worker
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    body = httpx.post(f"{url}/tokenize", json={"model": "tiny", "messages": messages}).json()
    assert body["tokens"] == engine.encode(engine.apply_chat_template(messages, add_generation_prompt=True))
    chat = httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny", "messages": messages,
                                                          "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == body["count"]
    bare = httpx.post(f"{url}/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()
    assert bare["tokens"] == engine.encode(engine.apply_chat_template(messages, add_generation_prompt=False))
    assert bare["count"] < body["count"]


@pytest.mark.parametrize(("path", "body", "status", "param"), [
    ("/tokenize", {"model": "other", "prompt": "x"}, 404, "model"),
    ("/tokenize", {"model": "tiny"}, 400, "prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": "x"}], "continue_final_message": True}, 400,
     "continue_final_message"),
    ("/detokenize", {"tokens": [1, 4096]}, 400, "tokens"),
    ("/detokenize", {"tokens": ["a"]}, 400, "tokens.0"),
    ("/v1/embeddings", {"input": []}, 400, "input"),
    ("/v1/embeddings", {"input": ""}, 400, "input"),
    ("/v1/embeddings", {"input": [5] * 513}, 400, "input"),
    ("/v1/embeddings", {"input": "x", "dimensions": 8}, 400, "dimensions"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
])
def test_bad_requests_are_openai_errors_naming_the_field(worker, path, body, status, param):
    url, _ = worker
    r = httpx.post(url + path, json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def _expected(engine, ids: list[int]) -> np.ndarray:
    with torch.inference_mode():
        h = engine.model.forward_dense(torch.tensor([ids]), return_hidden=True)[0]  # [T, hidden]
    return F.normalize(h.mean(dim=0), dim=0).numpy()  # [hidden]


def test_embeddings_are_the_pooled_final_hidden_state(worker):
    url, engine = worker
    ids = [17, 300, 42, 9]
    r = httpx.post(f"{url}/v1/embeddings", json={"model": "tiny", "input": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS))) and body["model"] == "tiny"
    inputs = [engine.encode(t) for t in TEXTS]
    assert body["usage"] == {"prompt_tokens": sum(map(len, inputs)), "total_tokens": sum(map(len, inputs))}
    by_ids = [httpx.post(f"{url}/v1/embeddings", json={"input": x}).json()["data"] for x in (ids, [ids, inputs[0]])]
    assert len(by_ids[0]) == 1 and len(by_ids[1]) == 2  # one pre-tokenised input, or a list of them
    np.testing.assert_allclose(by_ids[1][1]["embedding"], body["data"][0]["embedding"], atol=1e-6)
    for d, item in zip([*body["data"], by_ids[0][0], by_ids[1][0]], [*inputs, ids, ids], strict=True):
        vec = np.array(d["embedding"])
        assert vec.shape == (engine.model.cfg.hidden_size,)
        assert abs(np.linalg.norm(vec) - 1.0) < 1e-5
        np.testing.assert_allclose(vec, _expected(engine, item), atol=1e-5)
    b64 = httpx.post(f"{url}/v1/embeddings", json={"input": TEXTS[0], "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, body["data"][0]["embedding"], atol=1e-7)


def test_the_openai_client_reads_embeddings(worker):
    url, engine = worker
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
    res = client.embeddings.create(model="tiny", input=TEXTS[:2])  # base64 on the wire (the client's default)
    assert len(res.data) == 2 and res.usage.prompt_tokens == sum(len(engine.encode(t)) for t in TEXTS[:2])
    np.testing.assert_allclose(res.data[1].embedding, _expected(engine, engine.encode(TEXTS[1])), atol=1e-5)
