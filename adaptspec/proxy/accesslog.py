"""Request ids, trace context and the access log of the proxy.

Every request gets an id: the client's `X-Request-Id` when it is valid (1-128 characters of
`A-Za-z0-9._:/+=@-`), else a generated one (32 hex digits). The id is echoed in the response's
`X-Request-Id` (streams included), forwarded upstream with the W3C `traceparent` / `tracestate` the client
sent (so vLLM's spans join the client's trace), and put in adaptspec.logcontext.REQUEST (with the access-log record), so every log line
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
import operator
import random
import re
import time
from contextvars import ContextVar

from aiohttp import web

from adaptspec.logcontext import REQUEST, current_request_id
from adaptspec.proxy import tracing

access_log = logging.getLogger("adaptspec.access")

FIELDS = ("ts", "request_id", "method", "path", "model", "class", "proposer", "gamma", "worker", "status",
          "prompt_tokens", "output_tokens", "ttft_ms", "total_ms", "retries")
_BLANK = {**dict.fromkeys(FIELDS), "retries": 0}  # a request's record starts as a copy: every field, in order
_QUIET = ("/health", "/metrics", "/version")
_VALID_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")  # none of these characters is escaped in JSON
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")  # version-trace-parent-flags
_SPAN: ContextVar[tracing.RequestSpan | None] = ContextVar("adaptspec_request_span", default=None)
_random_bits = random.getrandbits  # ids need to be unique, not secret: no getrandom() system call per request


def install(app: web.Application) -> None:
    """Outermost middleware: sees the final status, errors included; puts the id header on the responses
    handlers return (a stream a handler prepares itself carries `id_header()`)."""
    app.middlewares.insert(0, _middleware(tracing.enabled()))


def id_header() -> dict[str, str]:
    """{"X-Request-Id": the current request's id} (empty outside a request), for a stream's headers."""
    rid = current_request_id()
    return {} if rid is None else {"X-Request-Id": rid}


def request_id(headers) -> str:
    rid = headers.get("X-Request-Id")
    return rid if rid is not None and _VALID_ID.fullmatch(rid) else f"{_random_bits(128):032x}"


def upstream_headers(request: web.Request) -> dict[str, str]:
    """What the proxy forwards to the worker about this request: its id and the client's trace context."""
    out = {"X-Request-Id": current_request_id() or request_id(request.headers)}
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
    record = REQUEST.get()
    if record is not None:
        record.update(fields)


def count_retry() -> None:
    record = REQUEST.get()
    if record is not None:
        record["retries"] = (record.get("retries") or 0) + 1


def _middleware(traced: bool):
    @web.middleware
    async def access(request: web.Request, handler):
        record = _BLANK.copy()
        record["request_id"] = rid = request_id(request.headers)
        record["method"] = request.method
        record["path"] = path = request.path
        started, t0 = time.time(), time.perf_counter()
        quiet = path.startswith(_QUIET)
        span = tracing.RequestSpan(f"{request.method} {path}", request.headers) if traced and not quiet else None
        token = REQUEST.set(record)
        span_token = None if span is None else _SPAN.set(span)
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
            REQUEST.reset(token)
            if span_token is not None:
                _SPAN.reset(span_token)
            _finish(record, status, span)
            if not quiet and access_log.isEnabledFor(logging.INFO):
                record["total_ms"] = total = ms(time.perf_counter() - t0)
                sink = _sink()
                if sink is not None:
                    sink(_fast_line(record, started, total))
                else:
                    record["ts"] = _iso(started)
                    _write(line(record))

    return access


def _finish(record: dict, status: int, span) -> None:
    if record["status"] is None:  # a handler's own account wins (a stream that broke: 502)
        record["status"] = status
    tokens = record["prompt_tokens"]
    if type(tokens) is float and tokens.is_integer():  # counted as floats by the metrics code
        record["prompt_tokens"] = int(tokens)
    tokens = record["output_tokens"]
    if type(tokens) is float and tokens.is_integer():
        record["output_tokens"] = int(tokens)
    if span is not None:
        span.end(record)


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


_MIDDLE_FIELDS = FIELDS[FIELDS.index("method"):FIELDS.index("output_tokens") + 1]
_middle_of = operator.itemgetter(*_MIDDLE_FIELDS)
_MIDDLES: dict[tuple, str] = {}  # (method, ..., output_tokens) -> their JSON, as line() writes them
_MIDDLES_MAX = 1024


def _middle(key: tuple) -> str:
    """The JSON of the fields from "method" to "output_tokens" (between the braces, as line() writes them).
    The same few combinations come back request after request: each is encoded once (short values only)."""
    text = ",".join(f'"{name}":{_value(v)}' for name, v in zip(_MIDDLE_FIELDS, key, strict=True))
    plain = all(v is None or type(v) in (str, int) for v in key)  # hashable, and the same text next time
    if plain and sum(len(v) for v in key if type(v) is str) <= 512:
        if len(_MIDDLES) >= _MIDDLES_MAX:
            _MIDDLES.clear()
        _MIDDLES[key] = text
    return text


def _fast_line(record: dict, started: float, total: float) -> str:
    """line(record) with "ts" from `started` and "total_ms" = `total` (finite), for the middleware's own records: every field present in
    order (a copy of _BLANK) and a request id that needs no escaping (_VALID_ID or hex). What changes from
    one request to the next is the time, the id and two durations; the rest is remembered as text."""
    key = _middle_of(record)
    try:
        middle = _MIDDLES.get(key)
    except TypeError:  # a field that is not hashable (a list as model): not remembered
        middle = None
    if middle is None:
        middle = _middle(key)
    ttft, retries = record["ttft_ms"], record["retries"]
    milli = int(started * 1000)
    if milli != _MILLI[0]:  # requests a millisecond apart share their timestamp's text
        _MILLI[:] = milli, _iso(started)
    return (f'{{"ts":"{_MILLI[1]}","request_id":"{record["request_id"]}",{middle},'
            f'"ttft_ms":{ttft if type(ttft) is float and ttft - ttft == 0 else _value(ttft)},'
            f'"total_ms":{total},'
            f'"retries":{retries if type(retries) is int else _value(retries)}}}')


_ROUTE: list = [None, None, None]  # [handler, its formatter, its add_line]: the last handler found eligible


def _sink():
    """The BufferedLineHandler's add_line when it is the logger's only handler with a plain "%(message)s"
    formatter (the line is taken as is); None when the line must go through logging (_write)."""
    handlers = access_log.handlers
    if len(handlers) != 1 or access_log.filters or access_log.propagate:
        return None
    h = handlers[0]
    if h is _ROUTE[0] and h.formatter is _ROUTE[1] and not h.filters and h.level <= logging.INFO:
        return _ROUTE[2]
    add_line, fmt = getattr(h, "add_line", None), h.formatter
    if (add_line is None or h.filters or h.level > logging.INFO or type(fmt) is not logging.Formatter
            or fmt._fmt != "%(message)s"):
        return None
    _ROUTE[:] = h, fmt, add_line
    return add_line


def _write(line: str) -> None:
    """As access_log.info(line): straight to the handler's batch (_sink) where it can, else a LogRecord
    through logging, without its search of the stack for the caller (not logged here)."""
    sink = _sink()
    if sink is not None:
        sink(line)
        return
    access_log.handle(access_log.makeRecord(access_log.name, logging.INFO, __file__, 0, line, None, None))


_MILLI: list = [-1, ""]  # [int(time * 1000), _iso(time)]
_SECOND: list = [-1, ""]  # [whole second, its "%Y-%m-%dT%H:%M:%S"]: formatted once a second


def _iso(t: float) -> str:
    """UTC, to the millisecond (truncated): 2026-12-02T05:32:41.602Z."""
    second, milli = divmod(int(t * 1000), 1000)
    if second != _SECOND[0]:
        _SECOND[:] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_SECOND[1]}.{milli:03d}Z"
