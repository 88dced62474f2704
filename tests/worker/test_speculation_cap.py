"""The engine-side switch on a real worker: PUT /adaptspec/speculation_cap caps every running request's gamma
from the next step on (a switchback's off window), and lifting it lets them draft again; greedy text unchanged."""

from __future__ import annotations

import json

import httpx
import pytest
from engine_requests import COPY_CODE_PROMPT as PROMPT
from engine_requests import served_tiny

pytestmark = pytest.mark.integration

K = 4


@pytest.fixture(scope="module")
def worker():
    with served_tiny(max_batch=8) as served:
        yield served


def _body(proposer: str, k: int, max_tokens: int = 160, stream: bool = False) -> dict:
    return {"model": "tiny", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": stream, "stream_options": {"include_usage": True} if stream else None,
            "speculation": {"proposer": proposer, "num_speculative_tokens": k, "content_class": "code"}}


def _put(url: str, body) -> httpx.Response:
    return httpx.put(url + "/adaptspec/speculation_cap", content=json.dumps(body), timeout=30)


def _stream_with_switches(url: str, engine, switches: dict[int, int | None]) -> tuple[str, dict, list[int]]:
    """One streamed draft:K request; after the n-th chunk, PUT the cap switches[n]. -> (text, usage, the engine's
    draft-token counter right after each PUT returned)."""
    text, usage, drafted = [], None, []
    with httpx.stream("POST", url + "/v1/completions", json=_body("draft", K, stream=True), timeout=120) as r:
        assert r.status_code == 200
        n = 0
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                text.append(c["text"])
            n += 1
            if n in switches:
                got = _put(url, {"cap": switches[n]})
                assert got.status_code == 200 and got.json() == {"cap": switches[n]}
                drafted.append(engine.metrics().spec_num_draft_tokens)
    return "".join(text), usage, drafted


def test_the_cap_stops_running_requests_drafting_and_lifting_it_resumes(worker):
    url, engine = worker
    plain = httpx.post(url + "/v1/completions", json=_body("none", 0), timeout=120).json()["choices"][0]["text"]
    before = engine.metrics().spec_num_draft_tokens
    text, usage, (at_off, at_on) = _stream_with_switches(url, engine, {8: 0, 30: None})
    after = engine.metrics().spec_num_draft_tokens
    assert text == plain  # greedy: the same text whatever drafted when
    spec = usage["speculative"]
    by_gamma = spec["steps_by_gamma"]
    assert by_gamma.get("0", 0) > 0 and by_gamma.get(str(K), 0) > 0  # ran capped at 0 and uncapped
    assert at_off > before  # it drafted before the switch
    # from the PUT on, at most the step already under way drafts (K tokens for the one request), until the lift
    assert at_on - at_off <= K
    assert after > at_on  # lifted: the same running request drafts again
    assert httpx.get(url + "/adaptspec/speculation_cap").json() == {"cap": None}


def test_a_request_admitted_under_the_cap_drafts_once_it_is_lifted(worker):
    url, engine = worker
    assert _put(url, {"cap": 0}).status_code == 200
    r = httpx.post(url + "/v1/completions", json=_body("draft", K, max_tokens=40), timeout=120).json()
    assert r["usage"]["speculative"]["draft_tokens"] == 0 and r["usage"]["speculative"]["steps_by_gamma"].get("0")
    assert _put(url, {"cap": 2}).status_code == 200  # a cap above 0 limits gamma, no more
    r = httpx.post(url + "/v1/completions", json=_body("draft", K, max_tokens=40), timeout=120).json()
    assert set(r["usage"]["speculative"]["steps_by_gamma"]) <= {"0", "1", "2"}
    assert r["usage"]["speculative"]["draft_tokens"] > 0
    assert _put(url, {"cap": None}).status_code == 200


@pytest.mark.parametrize("body", [{"cap": -1}, {"cap": 99}, {"cap": "0"}, {"cap": 1.5}, {"cap": True}, {},
                                  [0], "not json"])
def test_bad_caps_get_openai_errors(worker, body):
    url, engine = worker
    r = httpx.put(url + "/adaptspec/speculation_cap", content=body if isinstance(body, str) else json.dumps(body),
                  timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert engine.speculation_cap is None  # unchanged


def test_the_card_advertises_the_switch_and_metrics_count_tokens_per_step(worker):
    url, _ = worker
    card = httpx.get(url + "/v1/models").json()["data"][0]
    assert card["speculation_cap"] is True
    text = httpx.get(url + "/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("adaptspec:engine_output_tokens_total"))
    assert float(line.split()[-1]) > 0
