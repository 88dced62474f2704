"""Request ids, trace context and the access log, through a real `adaptspec serve` and real upstreams:
the id round-trips (the client's when valid, else generated), reaches the worker with traceparent/tracestate,
is in every log line about the request, and each API request writes one JSON access-log line."""

from __future__ import annotations

import json
import re
import signal
import urllib.request

import openai
import pytest

from .conftest import eventually, http_json, pool

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "Summarize the following article. Article: the park opens in May."}]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEX32 = re.compile(r"[0-9a-f]{32}")


def access_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def log_lines(px) -> list[dict]:
    return [json.loads(line) for line in px.log().splitlines() if line.startswith("{")]


def chat(url: str, headers: dict | None = None, **body) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": "tiny", "messages": CHAT, **body}).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


@pytest.fixture
def served(upstreams, proxies, tmp_path):
    up = upstreams("w0")
    log = tmp_path / "access.jsonl"
    px = proxies({"pools": [pool("spec", [up], profile="cpu-tiny")]},
                 args=["--access-log", str(log), "--log-format", "json"])
    return up, px, log


def test_client_id_and_trace_context_round_trip_and_reach_the_worker(served):
    up, px, log = served
    status, headers, _ = chat(px.url, {"X-Request-Id": "client-req.42", "traceparent": TRACEPARENT,
                                       "tracestate": "vendor=abc"}, max_tokens=4)
    assert status == 200 and headers["x-request-id"] == "client-req.42"
    sent = up.requests()[-1]
    assert (sent["x-request-id"], sent["traceparent"], sent["tracestate"]) == ("client-req.42", TRACEPARENT,
                                                                                "vendor=abc")
    [line] = eventually(lambda: access_lines(log))  # written in batches, <= 0.1 s late
    assert line["request_id"] == "client-req.42" and line["status"] == 200 and line["path"] == "/v1/chat/completions"
    assert line["model"] == "tiny" and line["worker"] == "w0" and line["class"] == headers["x-adaptspec-class"]
    assert line["proposer"] == headers["x-adaptspec-proposer"] and str(line["gamma"]) == headers["x-adaptspec-gamma"]
    assert line["prompt_tokens"] == 5 and line["output_tokens"] == 4 and line["retries"] == 0
    assert 0 < line["ttft_ms"] <= line["total_ms"] and line["ts"].endswith("Z")


@pytest.mark.parametrize("given", [None, "has spaces", "x" * 129, "semi;colon"])
def test_missing_or_invalid_id_is_replaced_by_a_generated_one(served, given):
    up, px, log = served
    status, headers, _ = chat(px.url, {"X-Request-Id": given} if given else {},
                              max_tokens=3, stream=True)  # streams prepare their headers in the handler
    rid = headers["x-request-id"]
    assert status == 200 and HEX32.fullmatch(rid)
    sent = up.requests()[-1]
    assert sent["x-request-id"] == rid and sent["traceparent"] is None
    [line] = eventually(lambda: access_lines(log))  # written in batches, <= 0.1 s late
    assert line["request_id"] == rid and line["output_tokens"] == 3 and line["ttft_ms"] <= line["total_ms"]


def test_invalid_traceparent_is_not_forwarded(served):
    up, px, _ = served
    chat(px.url, {"traceparent": "00-nothex-01", "tracestate": "a=b"}, max_tokens=2)
    sent = up.requests()[-1]
    assert sent["traceparent"] is None and sent["tracestate"] is None


def test_errors_get_ids_and_access_lines_probes_do_not(served):
    _, px, log = served
    for path in ("/health", "/health/live", "/health/ready", "/metrics", "/version"):
        urllib.request.urlopen(px.url + path, timeout=10).close()
    status, headers, body = chat(px.url, {"X-Request-Id": "r-404"}, model="no-such-model")
    assert status == 404 and headers["x-request-id"] == "r-404" and b"error" in body
    status, headers, _ = http_json("POST", px.url + "/v1/completions", {"model": "tiny"})  # no prompt
    assert status == 400 and HEX32.fullmatch(headers["X-Request-Id"])
    lines = eventually(lambda: access_lines(log)[1:] and access_lines(log))
    assert [(x["path"], x["status"]) for x in lines] == [("/v1/chat/completions", 404), ("/v1/completions", 400)]
    assert lines[0]["request_id"] == "r-404" and lines[0]["model"] == "no-such-model"
    assert lines[0]["worker"] is None and lines[0]["output_tokens"] is None


def test_retries_and_log_lines_about_the_request_carry_its_id(upstreams, proxies, tmp_path):
    w0, w1 = upstreams("w0", engine="openai"), upstreams("w1", engine="openai")
    log = tmp_path / "access.jsonl"
    # plain OpenAI workers are not scraped: w0 stays presumed healthy until a request finds it dead
    px = proxies({"pools": [pool("plain", [w0, w1], engine="openai", per_request=False)]},
                 args=["--access-log", str(log), "--log-format", "json"])
    w0.kill()
    ids = [chat(px.url, {"X-Request-Id": f"retry-{i}"}, max_tokens=2)[1]["x-request-id"] for i in range(3)]
    lines = {x["request_id"]: x for x in eventually(lambda: access_lines(log)[2:] and access_lines(log))}
    assert set(lines) == set(ids) and all(x["status"] == 200 and x["worker"] == "w1" for x in lines.values())
    retried = [rid for rid, x in lines.items() if x["retries"] >= 1]
    assert retried
    about = [x for x in log_lines(px) if "retrying request" in x["message"]]
    assert about and {x["request_id"] for x in about} <= set(retried)


def test_stream_that_breaks_is_logged_as_502_with_its_id(upstreams, proxies, tmp_path):
    up = upstreams("w0", delay_ms=100)
    log = tmp_path / "access.jsonl"
    px = proxies({"pools": [pool("spec", [up])]}, args=["--access-log", str(log), "--log-format", "json"])
    client = px.client()
    stream = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=50, stream=True,
                                            extra_headers={"X-Request-Id": "dies-mid-stream"})
    with pytest.raises(openai.APIError):
        for i, _ in enumerate(stream):
            if i == 1:
                up.kill()
    [line] = eventually(lambda: access_lines(log))
    assert line["request_id"] == "dies-mid-stream" and line["status"] == 502
    warned = [x for x in log_lines(px) if "mid-stream" in x["message"]]
    assert warned and all(x["request_id"] == "dies-mid-stream" for x in warned)


def test_access_log_off(upstreams, proxies, tmp_path):
    up = upstreams("w0")
    px = proxies({"pools": [pool("spec", [up])]}, args=["--access-log", "off"])
    status, headers, _ = chat(px.url, max_tokens=2)
    assert status == 200 and HEX32.fullmatch(headers["x-request-id"])  # ids stay on
    assert '"request_id"' not in px.log()


def test_access_lines_waiting_in_the_batch_are_written_on_sigterm_in_order(upstreams, proxies, tmp_path):
    """Lines wait up to 0.1 s for their batch; a SIGTERM right after the last request still writes them all,
    in the order the requests finished (the handler flushes at exit)."""
    up = upstreams("w0")
    log = tmp_path / "access.jsonl"
    px = proxies({"pools": [pool("spec", [up])], "server": {"drain_delay_s": 0.2}}, args=["--access-log", str(log)])
    ids = [f"sigterm-{i}" for i in range(5)]
    for rid in ids:
        status, _, _ = chat(px.url, {"X-Request-Id": rid}, max_tokens=2)
        assert status == 200
    px.stop(signal.SIGTERM)  # at once: the last lines are still in the batch
    assert px.proc.returncode == 0
    lines = access_lines(log)
    assert [x["request_id"] for x in lines] == ids
    assert all(x["status"] == 200 and x["path"] == "/v1/chat/completions" for x in lines)
