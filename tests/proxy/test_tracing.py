"""OpenTelemetry (ADAPTSPEC_OTEL=1): a real `adaptspec serve` exports one SERVER span per API request over
OTLP/HTTP to a small collector in this test; the span continues the client's trace, and the worker receives
the proxy's span as its parent."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install 'adaptspec[otel]'")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from .conftest import eventually, pool  # noqa: E402

pytestmark = pytest.mark.integration

TRACE_ID, CLIENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


class Collector:
    """OTLP/HTTP receiver: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.spans: list = []
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest.FromString(body)
                spans.extend(s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):  # keep the test output clean
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


def attributes(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def test_spans_continue_the_clients_trace_and_parent_the_workers(upstreams, proxies, collector):
    up = upstreams("w0")
    env = {"ADAPTSPEC_OTEL": "1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.url,
           "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "proxy-under-test"}
    px = proxies({"pools": [pool("spec", [up])]}, env=env)
    req = urllib.request.Request(
        px.url + "/v1/chat/completions", method="POST",
        data=json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": "traced-1",
                 "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01", "tracestate": "vendor=abc"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
    urllib.request.urlopen(px.url + "/health/ready", timeout=10).close()  # probes: no span

    [span] = eventually(lambda: list(collector.spans), timeout=15)
    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == CLIENT_SPAN
    assert span.name == "POST /v1/chat/completions" and span.kind == span.SPAN_KIND_SERVER
    attrs = attributes(span)
    assert attrs["adaptspec.request_id"] == "traced-1" and attrs["http.response.status_code"] == 200
    assert attrs["gen_ai.request.model"] == "tiny" and attrs["adaptspec.worker"] == "w0"
    assert attrs["gen_ai.usage.output_tokens"] == 3

    sent = up.requests()[-1]
    version, trace_id, parent, flags = sent["traceparent"].split("-")
    assert (trace_id, parent) == (TRACE_ID, span.span_id.hex())  # the worker's parent is the proxy's span
    assert sent["tracestate"] == "vendor=abc" and sent["x-request-id"] == "traced-1"
