"""The worker server end to end: a real engine on the built-in tiny pair behind uvicorn on a loopback port.

Losslessness (temperature 0: the same text under every proposer and k, alone and mixed in one batch),
seeded sampling, stop strings, errors, metrics, and slots freed by clients that go away.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path

import httpx
import pytest
from engine_requests import COPY_CODE_PROMPT as PROMPT_CODE
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

ASSETS = Path(os.environ.get("ADAPTSPEC_ASSETS", Path(__file__).resolve().parents[2] / "adaptspec" / "assets"))
SPECS = [("none", 0), ("ngram", 1), ("ngram", 3), ("ngram", 5), ("draft", 1), ("draft", 3), ("draft", 5)]


@pytest.fixture(scope="module")
def worker():
    from adaptspec.worker.engine import Engine
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=16, max_model_len=512,
                              num_threads=1)
    app = build_app(engine, WorkerSettings(served_model_name="tiny", max_model_len=512))
    server = ServerThread(app).start()
    try:
        yield server.url, engine
    finally:
        server.stop()
        engine.stop()


@pytest.fixture
def url(worker):
    return worker[0]


def _post(url: str, path: str, body: dict | bytes, **kw) -> httpx.Response:
    if isinstance(body, dict):
        return httpx.post(url + path, json=body, timeout=120, **kw)
    return httpx.post(url + path, content=body, timeout=120, **kw)


def _completion(url: str, proposer: str, k: int, **extra) -> dict:
    body = {"model": "tiny", "prompt": PROMPT_CODE, "max_tokens": 40, "temperature": 0,
            "speculation": {"proposer": proposer, "num_speculative_tokens": k, "content_class": "code"}, **extra}
    r = _post(url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def _metrics(url: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _wait_running_zero(url: str, timeout: float = 10.0) -> float:
    key = ("vllm:num_requests_running", (("engine", "0"), ("model_name", "tiny")))
    deadline = time.monotonic() + timeout
    while True:
        running = _metrics(url)[key]
        if running == 0 or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------- losslessness


def test_temperature_zero_text_is_identical_under_every_speculation(url):
    results = {spec: _completion(url, *spec) for spec in SPECS}
    reference = results[("none", 0)]["choices"][0]["text"]
    assert len(reference) > 0
    for spec, r in results.items():
        assert r["choices"][0]["text"] == reference, spec
        usage = r["usage"]["speculative"]
        if spec[0] == "none":
            assert usage["draft_tokens"] == 0
        else:
            assert usage["draft_tokens"] > 0 and usage["steps"] <= r["usage"]["completion_tokens"] + 1


def test_temperature_zero_text_is_identical_when_mixed_in_one_batch(url):
    alone = {spec: _completion(url, *spec)["choices"][0]["text"] for spec in [("none", 0)]}[("none", 0)]
    other_prompts = ["Once upon a time", "SELECT name FROM users WHERE", "Translate to French: good morning"]

    async def run() -> tuple[list[dict], list[dict]]:
        async with httpx.AsyncClient(timeout=120) as c:
            def body(spec):
                return {"prompt": PROMPT_CODE, "max_tokens": 40, "temperature": 0,
                        "speculation": {"proposer": spec[0], "num_speculative_tokens": spec[1]}}

            noise = [c.post(url + "/v1/completions", json={
                "prompt": p, "max_tokens": 48, "temperature": 1.0, "seed": i,
                "speculation": {"proposer": ["draft", "ngram", "none"][i % 3], "num_speculative_tokens": 4}})
                for i, p in enumerate(other_prompts * 2)]
            ours = [c.post(url + "/v1/completions", json=body(spec)) for spec in SPECS * 2]
            rs = await asyncio.gather(*ours, *noise)
            return [r.json() for r in rs[: len(ours)]], [r.json() for r in rs[len(ours):]]

    ours, noise = asyncio.run(run())
    assert all("choices" in n for n in noise)
    for spec, r in zip(SPECS * 2, ours, strict=True):
        assert r["choices"][0]["text"] == alone, spec


def test_chat_stream_is_identical_under_speculation(url):
    msgs = [{"role": "user", "content": "Repeat exactly: the quick brown fox jumps over the lazy dog."}]

    def stream_text(proposer: str, k: int) -> str:
        body = {"messages": msgs, "max_tokens": 30, "temperature": 0, "stream": True,
                "speculation": {"proposer": proposer, "num_speculative_tokens": k}}
        text = []
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    for ch in json.loads(line[6:])["choices"]:
                        text.append(ch["delta"].get("content") or "")
        return "".join(text)

    texts = {spec: stream_text(*spec) for spec in [("none", 0), ("ngram", 3), ("draft", 3)]}
    assert len(set(texts.values())) == 1, texts


# ------------------------------------------------------------------------------------------------ sampling


def test_seeded_sampling_is_reproducible(url):
    def sample(seed: int, spec=("none", 0)) -> str:
        body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.0, "seed": seed,
                "speculation": {"proposer": spec[0], "num_speculative_tokens": spec[1]}}
        return _post(url, "/v1/completions", body).json()["choices"][0]["text"]

    assert sample(7) == sample(7)
    assert sample(11, ("draft", 3)) == sample(11, ("draft", 3))
    assert sample(5, ("ngram", 3)) == sample(5, ("ngram", 3))
    assert len({sample(s) for s in (1, 2, 3, 4)}) > 1  # different seeds, different samples


def test_stop_string_ends_the_text_before_it(url):
    for spec in [("none", 0), ("ngram", 3), ("draft", 3)]:
        sampled = {"temperature": 1.0, "seed": 3, "max_tokens": 48, "ignore_eos": True}
        full = _completion(url, *spec, **sampled)["choices"][0]["text"]
        stop = next(full[i : i + 2] for i in range(4, len(full) - 1) if full[i : i + 2].strip())
        expected = full[: full.find(stop)]
        r = _completion(url, *spec, **sampled, stop=[stop, "\x00never"])
        assert r["choices"][0]["text"] == expected, (spec, full, stop)
        assert r["choices"][0]["finish_reason"] == "stop"


def test_max_tokens_gives_length(url):
    r = _completion(url, "ngram", 5, max_tokens=7, ignore_eos=True)
    assert r["usage"]["completion_tokens"] == 7 and r["choices"][0]["finish_reason"] == "length"


# ------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("path, body, status, needle", [
    ("/v1/completions", b"{oops", 400, "not valid JSON"),
    ("/v1/completions", b'"a string"', 400, "JSON object"),
    ("/v1/completions", {"prompt": "x", "n": 3}, 400, "n=1"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {}, 400, "prompt"),
    ("/v1/completions", {"prompt": [[1, 2], [3]]}, 400, "one prompt"),
    ("/v1/completions", {"prompt": [999999]}, 400, "token ids"),
    ("/v1/completions", {"prompt": "x", "speculation": {"proposer": "eagle2"}}, 400, "eagle2"),
    ("/v1/completions", {"prompt": "x", "speculation": {"proposer": "ngram", "num_speculative_tokens": -2}},
     400, "between 0 and"),
    ("/v1/completions", {"prompt": "x", "speculation": {"proposer": "draft", "num_speculative_tokens": 99}},
     400, "between 0 and"),
    ("/v1/completions", {"prompt": "x", "speculation": "fast"}, 400, "speculation"),
    ("/v1/completions", {"prompt": "x", "model": "llama-70b"}, 404, "does not exist"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True}, 400,
     "logprobs"),
    ("/v1/completions", {"prompt": "x", "seed": 10**30}, 400, "seed"),
    ("/v1/completions", b'{"prompt": "\\ud800 lone surrogate"}', 400, "not valid Unicode"),
    ("/v1/completions", {"prompt": "x", "speculation": {"num_speculative_tokens": 2.5}}, 400,
     "num_speculative_tokens"),
    ("/v1/audio/speech", {"input": "x"}, 404, "Not found"),  # an endpoint the worker does not have
])
def test_bad_requests_get_openai_errors(url, path, body, status, needle):
    r = _post(url, path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["type"] and "code" in err and "param" in err


def test_extreme_but_valid_sampling_values_do_not_break_the_batch(url):
    r = _post(url, "/v1/completions", {"prompt": "x", "max_tokens": 3, "top_p": 1e-300, "seed": -5,
                                       "temperature": 2.0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1


def test_prompt_over_the_context_length_is_refused_clearly(url):
    r = _post(url, "/v1/completions", {"prompt": list(range(3, 600)), "max_tokens": 1})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("This model's maximum context length is 512 tokens")
    r = _post(url, "/v1/completions", {"prompt": "hello", "max_tokens": 600})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_absurd_body_is_413(url):
    r = _post(url, "/v1/completions", b'{"prompt": "' + b"x" * (9 * 1024 * 1024) + b'"}')
    assert r.status_code == 413 and "exceeds" in r.json()["error"]["message"]

    def chunks():  # no content-length: the limit is enforced while reading
        yield b'{"prompt": "'
        for _ in range(10):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    r = httpx.post(url + "/v1/completions", content=chunks(), timeout=60)
    assert r.status_code == 413


def test_models_and_health(url):
    # the proposers it offers besides none (target + draft model, no head: hybrid falls back on the draft model)
    assert httpx.get(url + "/health").json() == {"status": "ok", "proposers": ["ngram", "draft", "hybrid"]}
    data = httpx.get(url + "/v1/models").json()["data"]
    assert data[0]["id"] == "tiny" and data[0]["max_model_len"] == 512


# ------------------------------------------------------------------------------------------------ metrics


def test_metrics_count_speculation_by_class_and_position(url):
    before = _metrics(url)
    r = _completion(url, "ngram", 4, max_tokens=32)
    spec = r["usage"]["speculative"]
    after = _metrics(url)
    base = (("engine", "0"), ("model_name", "tiny"))

    def delta(name, labels=base):
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert delta("vllm:spec_decode_num_draft_tokens_total") == spec["draft_tokens"] > 0
    assert delta("vllm:spec_decode_num_accepted_tokens_total") == spec["accepted_tokens"]
    per_pos = [delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", (*base, ("position", str(p))))
               for p in range(4)]
    assert sum(per_pos) == spec["accepted_tokens"]
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))  # position j needs j-1 accepted
    cls = (("content_class", "code"), *base, ("proposer", "ngram"))
    assert delta("adaptspec:spec_decode_num_draft_tokens_by_class_total", cls) == spec["draft_tokens"]
    assert delta("adaptspec:spec_decode_num_accepted_tokens_by_class_total", cls) == spec["accepted_tokens"]
    assert delta("vllm:generation_tokens_total") == r["usage"]["completion_tokens"]
    assert delta("vllm:prompt_tokens_total") == r["usage"]["prompt_tokens"]
    reason = (("engine", "0"), ("finished_reason", r["choices"][0]["finish_reason"]), ("model_name", "tiny"))
    assert delta("vllm:request_success_total", reason) == 1
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert (name, base) in after


# --------------------------------------------------------------------------------------- disconnections


def test_client_gone_mid_stream_frees_its_slot(url):
    body = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 1.0, "ignore_eos": True,
            "stream": True, "speculation": {"proposer": "draft", "num_speculative_tokens": 3}}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
        running = _metrics(url)[("vllm:num_requests_running", (("engine", "0"), ("model_name", "tiny")))]
        assert running == 1
    assert _wait_running_zero(url) == 0


def test_client_gone_before_non_stream_response_frees_its_slot(url):
    body = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 1.0, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json=body, timeout=0.5)
    assert _wait_running_zero(url) == 0


def test_raw_socket_hangup_does_not_break_the_server(url):
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps({"prompt": "hi", "max_tokens": 300, "ignore_eos": True, "stream": True}).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
        s.recv(64)
    assert _wait_running_zero(url) == 0
    assert _completion(url, "none", 0, max_tokens=4)["usage"]["completion_tokens"] >= 1


def test_overload_shows_in_running_and_waiting(url):
    """More requests than KV slots (16): the rest queue, and /metrics says so while it happens."""
    labels = (("engine", "0"), ("model_name", "tiny"))

    async def run() -> tuple[list[int], float, float]:
        async with httpx.AsyncClient(timeout=120) as c:
            body = {"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": True, "temperature": 0}
            tasks = [asyncio.ensure_future(c.post(url + "/v1/completions", json=body)) for _ in range(24)]
            peak_running = peak_waiting = 0.0
            while not all(t.done() for t in tasks):
                m = _metrics(url)
                peak_running = max(peak_running, m[("vllm:num_requests_running", labels)])
                peak_waiting = max(peak_waiting, m[("vllm:num_requests_waiting", labels)])
                await asyncio.sleep(0.05)
            return [t.result().status_code for t in tasks], peak_running, peak_waiting

    statuses, peak_running, peak_waiting = asyncio.run(run())
    assert statuses == [200] * 24
    assert peak_running == 16 and peak_waiting >= 1
    assert _wait_running_zero(url) == 0
