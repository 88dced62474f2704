"""Optional OpenTelemetry spans for the proxy (off by default; `pip install 'adaptspec[otel]'`).

    ADAPTSPEC_OTEL=1 adaptspec serve ...     # one SERVER span per API request, exported over OTLP/HTTP

With it on, each API request gets a span that continues the client's W3C trace (`traceparent`), and the
proxy forwards its own span as the parent to the worker, so a vLLM started with OpenTelemetry tracing nests
its spans under the proxy's. The exporter takes the standard OTEL_EXPORTER_OTLP_ENDPOINT /
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (default http://localhost:4318/v1/traces) and OTEL_SERVICE_NAME (default
adaptspec-proxy). Without it, the client's trace context is forwarded unchanged (accesslog.upstream_headers).

Span attributes come from the access-log record: http.request.method, url.path, http.response.status_code,
gen_ai.request.model, gen_ai.usage.input_tokens / output_tokens, adaptspec.request_id, adaptspec.class,
adaptspec.proposer, adaptspec.gamma, adaptspec.worker, adaptspec.retries.
"""

from __future__ import annotations

import os

from adaptspec.errors import ConfigError

ENV = "ADAPTSPEC_OTEL"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def setup() -> None:
    """Install the global tracer provider with an OTLP/HTTP batch exporter (called once by `adaptspec serve`)."""
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ModuleNotFoundError as exc:
        raise ConfigError(f"OpenTelemetry is not installed ({exc.name}): pip install 'adaptspec[otel]'",
                          key=ENV, value=os.environ.get(ENV)) from None
    name = os.environ.get("OTEL_SERVICE_NAME") or "adaptspec-proxy"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


class RequestSpan:
    """One SERVER span around a request: `start(headers)` before the handler, `end(record)` after it."""

    def __init__(self, name: str, headers) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._context, self._propagator = context, TraceContextTextMapPropagator()
        parent = self._propagator.extract({k.lower(): v for k, v in headers.items()})
        tracer = trace.get_tracer("adaptspec.proxy")
        self.span = tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER)
        self._token = context.attach(trace.set_span_in_context(self.span, parent))

    def inject(self, carrier: dict[str, str]) -> None:
        """traceparent / tracestate naming this span as the parent (for the upstream request)."""
        self._propagator.inject(carrier)

    def end(self, record: dict) -> None:
        from opentelemetry.trace import Status, StatusCode

        attrs = {"http.request.method": record.get("method"), "url.path": record.get("path"),
                 "http.response.status_code": record.get("status"), "gen_ai.request.model": record.get("model"),
                 "gen_ai.usage.input_tokens": record.get("prompt_tokens"),
                 "gen_ai.usage.output_tokens": record.get("output_tokens"),
                 "adaptspec.request_id": record.get("request_id"), "adaptspec.class": record.get("class"),
                 "adaptspec.proposer": record.get("proposer"), "adaptspec.gamma": record.get("gamma"),
                 "adaptspec.worker": record.get("worker"), "adaptspec.retries": record.get("retries")}
        self.span.set_attributes({k: v for k, v in attrs.items() if v is not None})
        if isinstance(record.get("status"), int) and record["status"] >= 500:
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()
        self._context.detach(self._token)
