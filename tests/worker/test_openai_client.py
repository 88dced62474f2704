"""The official `openai` client against a real `adaptspec worker` process (the CLI, on a free loopback port)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from adaptspec.control.hybrid_rule import RULES
from adaptspec.control.shadow import ShadowStats

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def worker_url():
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "adaptspec", "worker", "--port", str(port), "--threads", "1",
           "--max-batch", "8", "--max-model-len", "512", "--default-proposer", "ngram", "--default-k", "3"]
    if os.environ.get("ADAPTSPEC_ASSETS"):  # a different model pair (development)
        assets = os.environ["ADAPTSPEC_ASSETS"]
        cmd += ["--model", f"{assets}/tiny-target", "--draft", f"{assets}/tiny-draft", "--served-model-name", "tiny"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    log_lines = []
    deadline = time.monotonic() + 60
    try:
        while True:  # the worker logs where it listens once it accepts connections
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker exited ({proc.wait()}): {''.join(log_lines)}")
            log_lines.append(line)
            if re.search(rf"on http://127\.0\.0\.1:{port}\b", line):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start in 60 s: {''.join(log_lines)}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture
def client(worker_url):
    c = openai.OpenAI(base_url=worker_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    yield c
    c.close()


def _spec(usage) -> dict:
    spec = (usage.model_extra or {}).get("speculative")
    assert set(spec) - {"shadow"} == {"draft_tokens", "accepted_tokens", "steps", "drafts", "tried_per_position",
                                      "accepted_per_position", "steps_by_gamma", "hybrid_rules"}
    # every rule of the per-step hybrid walked along the output (the proxy's per-class choice of rule)
    assert set(spec["hybrid_rules"]) == set(RULES) and all(
        ShadowStats.from_dict(stats) is not None for stats in spec["hybrid_rules"].values())
    # a request not run with n-gram lookup: lookup scored along its output; not run with the per-step hybrid
    # (this worker offers one: it has the tiny EAGLE head): the hybrid rule's lookup steps (consistent counts)
    assert "hybrid" in spec["shadow"]
    assert set(spec["shadow"]) <= {"ngram", "hybrid"} and all(
        ShadowStats.from_dict(stats) is not None for stats in spec["shadow"].values())
    assert sum(spec["steps_by_gamma"].values()) == spec["steps"]
    assert 0 <= spec["accepted_tokens"] <= spec["draft_tokens"]
    assert 1 <= spec["steps"] <= usage.completion_tokens + 1  # the step that emits EOS shows no token
    tried, acc = spec["tried_per_position"], spec["accepted_per_position"]
    # per position: every accepted draft token was tried; position 0 is tried by every draft; the accepted
    # tokens add up; each draft past position 0 was reached only through an accepted position before it
    assert len(tried) == len(acc) and all(0 <= a <= t for t, a in zip(tried, acc, strict=True))
    assert sum(acc) == spec["accepted_tokens"] and spec["drafts"] <= spec["steps"]
    assert (tried[0] if tried else 0) == spec["drafts"]
    assert all(t <= a for t, a in zip(tried[1:], acc, strict=False))
    return spec


def test_models_lists_the_builtin_tiny_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completion_non_stream(client):
    r = client.completions.create(model="tiny", prompt="def add(a, b):\n    return", max_tokens=12,
                                  temperature=0)
    assert r.object == "text_completion" and r.model == "tiny"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens >= 3
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    _spec(r.usage)


def test_completion_stream_matches_non_stream(client):
    kw = {"model": "tiny", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}
    whole = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    _spec(chunks[-1].usage)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals in (["stop"], ["length"])


def test_chat_non_stream_and_stream_agree(client):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20, temperature=0,
                                       extra_body={"speculation": {"proposer": "draft",
                                                                   "num_speculative_tokens": 3,
                                                                   "content_class": "chat"}})
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    spec = _spec(r.usage)
    assert spec["draft_tokens"] > 0  # the draft proposer really drafted
    stream = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    _spec(chunks[-1].usage)


def test_max_completion_tokens_is_honoured(client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Count: 1 2 3"}],
                                       max_completion_tokens=5, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_client_errors_are_openai_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-9", prompt="x", max_tokens=1)
    assert "does not exist" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="x", max_tokens=1, n=2)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                       extra_body={"speculation": {"proposer": "medusa"}})
    assert "medusa" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="hello " * 5000, max_tokens=1)
    assert "maximum context length" in e.value.body["message"]


def test_health_and_metrics_over_plain_http(worker_url):
    assert httpx.get(worker_url + "/health").status_code == 200
    text = httpx.get(worker_url + "/metrics").text
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"}' in text


def test_a_request_runs_the_hybrid_rule_it_names_and_its_output_does_not_change(client):
    """`speculation.hybrid_rule` (control/hybrid_rule.py RULES): greedy output byte-identical to plain decoding
    under every rule, each rule's lookup share its own; an unknown rule, or one with another proposer, is a 400."""
    prompt = ("Fix the typo in this function and return the whole function.\n\ndef total_price(items, tax):\n"
              "    subtotal = sum(item.price * item.qty for item in items)\n    return subtotl + subtotal * tax\n")
    kw = {"model": "tiny", "prompt": prompt, "max_tokens": 40, "temperature": 0}
    plain = client.completions.create(**kw, extra_body={"speculation": {"proposer": "none"}})
    lookups = {}
    for name in RULES:
        r = client.completions.create(**kw, extra_body={"speculation": {"proposer": "hybrid",
                                                                        "num_speculative_tokens": 4,
                                                                        "hybrid_rule": name}})
        assert r.choices[0].text == plain.choices[0].text, name
        lookups[name] = r.usage.model_extra["speculative"]["by_source"]["ngram"]["drafts"]
    assert lookups["m1x2"] >= lookups["m4x2"]  # a lower match threshold looks up at least as often
    for bad in ({"proposer": "hybrid", "hybrid_rule": "m9x9"}, {"proposer": "eagle", "hybrid_rule": "m1x4"},
                {"proposer": "hybrid", "hybrid_rule": 3}):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(**kw, extra_body={"speculation": bad})
        assert e.value.body["param"] == "speculation.hybrid_rule" and "m2x2" in e.value.body["message"]

