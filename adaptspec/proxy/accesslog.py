"""Request ids, trace context and the access log of the proxy.

Every request gets an id: the client's `X-Request-Id` when it is valid (1-128 characters of
`A-Za-z0-9._:/+=@-`), else a generated one (32 hex digits). The id is echoed in the response's
`X-Request-Id` (streams included), forwarded upstream with the W3C `traceparent` / `tracestate` the client
sent (so vLLM's spans join the client's trace), and put in adaptspec.logcontext.REQUEST_ID, so every log line
written while serving the request carries it.

The access log is one JSON object a line per API request (probes, /metrics and /version excluded) on the
logger `adaptspec.access`:

    {"ts", "request_id", "method", "path", "model", "class", "proposer", "gamma", "worker", "status",
     "prompt_tokens", "output_tokens", "ttft_ms", "total_ms", "retries"}

`status` is what the request ended with (a stream that broke after its 200 header: 502; a client that went
away: 499); `ttft_ms` is the time to the first streamed byte, or the whole response when not streamed (as the
TTFT metric counts it). Handlers add what they learn with `note(...)` and `count_retry()`; fields never learnt
are null. `adaptspec serve --access-log off` turns the log off. With ADAPTSPEC_OTEL=1 each API request is
also an OpenTelemetry span (adaptspec/proxy/tracing.py), and the worker gets that span as its parent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import time
from contextvars import ContextVar

from aiohttp import web

from adaptspec.logcontext import REQUEST_ID
from adaptspec.proxy import tracing

access_log = logging.getLogger("adaptspec.access")

FIELDS = ("ts", "request_id", "method", "path", "model", "class", "proposer", "gamma", "worker", "status",
          "prompt_tokens", "output_tokens", "ttft_ms", "total_ms", "retries")
_QUIET = ("/health", "/metrics", "/version")
_VALID_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")  # version-trace-parent-flags
_RECORD: ContextVar[dict | None] = ContextVar("adaptspec_access_record", default=None)
_SPAN: ContextVar[tracing.RequestSpan | None] = ContextVar("adaptspec_request_span", default=None)
_TRACED = web.AppKey("adaptspec_traced", bool)


def install(app: web.Application) -> None:
    """Outermost middleware: sees the final status, errors included; puts the id header on the responses
    handlers return (a stream a handler prepares itself carries `id_header()`)."""
    app[_TRACED] = tracing.enabled()
    app.middlewares.insert(0, _middleware)


def id_header() -> dict[str, str]:
    """{"X-Request-Id": the current request's id} (empty outside a request), for a stream's headers."""
    rid = REQUEST_ID.get()
    return {} if rid is None else {"X-Request-Id": rid}


def request_id(headers) -> str:
    rid = headers.get("X-Request-Id")
    return rid if rid is not None and _VALID_ID.fullmatch(rid) else os.urandom(16).hex()


def upstream_headers(request: web.Request) -> dict[str, str]:
    """What the proxy forwards to the worker about this request: its id and the client's trace context."""
    out = {"X-Request-Id": REQUEST_ID.get() or request_id(request.headers)}
    span = _SPAN.get()
    if span is not None:  # our span, child of the client's, is the worker's parent
        span.inject(out)
        return out
    parent = request.headers.get("traceparent")
    if parent is not None and _TRACEPARENT.fullmatch(parent.strip()):
        out["traceparent"] = parent.strip()
        state = request.headers.get("tracestate")
        if state and len(state) <= 512:
            out["tracestate"] = state
    return out


def note(**fields) -> None:
    """Add fields to the current request's access-log record (a no-op outside a request)."""
    record = _RECORD.get()
    if record is not None:
        record.update(fields)


def count_retry() -> None:
    record = _RECORD.get()
    if record is not None:
        record["retries"] = record.get("retries", 0) + 1


@web.middleware
async def _middleware(request: web.Request, handler):
    rid = request_id(request.headers)
    record = {"request_id": rid, "method": request.method, "path": request.path, "retries": 0}
    started, t0 = time.time(), time.perf_counter()
    quiet = request.path.startswith(_QUIET)
    span = tracing.RequestSpan(f"{request.method} {request.path}", request.headers) \
        if request.app[_TRACED] and not quiet else None
    id_token, record_token, span_token = REQUEST_ID.set(rid), _RECORD.set(record), _SPAN.set(span)
    status = 500
    try:
        response = await handler(request)
        status = response.status
        if not response.prepared:
            response.headers["X-Request-Id"] = rid
        return response
    except asyncio.CancelledError:
        status = 499  # the client went away (nginx's convention)
        raise
    finally:
        REQUEST_ID.reset(id_token)
        _RECORD.reset(record_token)
        _SPAN.reset(span_token)
        record.setdefault("status", status)  # a handler's own account wins (a stream that broke: 502)
        for key in ("prompt_tokens", "output_tokens"):  # counted as floats by the metrics code
            if isinstance(record.get(key), float) and record[key].is_integer():
                record[key] = int(record[key])
        if span is not None:
            span.end(record)
        if not quiet and access_log.isEnabledFor(logging.INFO):
            record["total_ms"] = ms(time.perf_counter() - t0)
            record["ts"] = _iso(started)
            _write(line(record))


def ms(seconds: float) -> float:
    """Seconds -> milliseconds to the microsecond (round(x, 3) goes through a decimal string: ~10x slower)."""
    return math.floor(seconds * 1e6 + 0.5) / 1000


_ENCODER = json.JSONEncoder(separators=(",", ":"))
_STRING = json.encoder.encode_basestring_ascii  # what json.dumps writes for a str (ensure_ascii)


def _value(v: object) -> str:
    t = type(v)
    if t is str:
        return _STRING(v)
    if v is None:
        return "null"
    if t is int or (t is float and v - v == 0):  # finite: json.dumps writes repr() too
        return repr(v)
    return _ENCODER.encode(v)


def line(record: dict) -> str:
    """The record as one JSON object with FIELDS in order (absent: null): what json.dumps(..., separators=(",",
    ":")) writes, without building a dict, strings escaped by json's C function where they are strings."""
    g = record.get
    ts, rid, method, path, model, cls, proposer, worker = (g("ts"), g("request_id"), g("method"), g("path"),
                                                           g("model"), g("class"), g("proposer"), g("worker"))
    s, v = _STRING, _value
    return (f'{{"ts":{s(ts) if type(ts) is str else v(ts)},'
            f'"request_id":{s(rid) if type(rid) is str else v(rid)},'
            f'"method":{s(method) if type(method) is str else v(method)},'
            f'"path":{s(path) if type(path) is str else v(path)},'
            f'"model":{s(model) if type(model) is str else v(model)},'
            f'"class":{s(cls) if type(cls) is str else v(cls)},'
            f'"proposer":{s(proposer) if type(proposer) is str else v(proposer)},'
            f'"gamma":{v(g("gamma"))},'
            f'"worker":{s(worker) if type(worker) is str else v(worker)},'
            f'"status":{v(g("status"))},"prompt_tokens":{v(g("prompt_tokens"))},'
            f'"output_tokens":{v(g("output_tokens"))},"ttft_ms":{v(g("ttft_ms"))},"total_ms":{v(g("total_ms"))},'
            f'"retries":{v(g("retries"))}}}')


def _write(line: str) -> None:
    """As access_log.info(line). The usual handler (`adaptspec serve`'s BufferedLineHandler, formatter
    "%(message)s", nothing else on the logger) takes the line as is; otherwise a LogRecord goes through
    logging, without its search of the stack for the caller (not logged here)."""
    handlers = access_log.handlers
    if len(handlers) == 1 and not access_log.filters and not access_log.propagate:
        h = handlers[0]
        add_line = getattr(h, "add_line", None)
        fmt = h.formatter
        if (add_line is not None and not h.filters and h.level <= logging.INFO and type(fmt) is logging.Formatter
                and fmt._fmt == "%(message)s"):
            add_line(line)
            return
    access_log.handle(access_log.makeRecord(access_log.name, logging.INFO, __file__, 0, line, None, None))


_SECOND: list = [-1, ""]  # [whole second, its "%Y-%m-%dT%H:%M:%S"]: formatted once a second


def _iso(t: float) -> str:
    second = int(t)
    if second != _SECOND[0]:
        _SECOND[:] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_SECOND[1]}.{int(t % 1 * 1000):03d}Z"
