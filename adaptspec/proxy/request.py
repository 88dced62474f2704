"""A client's request as the proxy reads it: the body (decompressed while read; size cap and timeout), and
for generation its one parsed, checked form, `Generation`, that every later step reads.

    raw = await read_body(request, limit, timeout_s)
    req = parse_generation(raw, "chat")       # 400 / 422 naming the field; req.model, req.temperature, ...

A `Generation` is read by classification and prediction (Proxy.classify_body: text, max_tokens,
temperature), the decision (`regime`), and the engine adapters that rewrite the body for the worker
(`body`, never mutated: a rewrite builds a new dict); the sampling semantics are control/alpha.py's (an
absent temperature is DEFAULT_TEMPERATURE, 1: sampled).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from dataclasses import dataclass

from aiohttp import web

from adaptspec.control.alpha import request_temperature, sampling_regime
from adaptspec.errors import RequestError
from adaptspec.jsonlimits import loads_limited


@dataclass(frozen=True, slots=True)
class Generation:
    """One /v1/chat/completions ("chat") or /v1/completions ("completions") request, parsed and checked once."""

    kind: str
    raw: bytes  # the body as received (decompressed): sent as is when no field is rewritten
    body: dict  # the JSON object (read, never written)
    model: str
    stream: bool
    max_tokens: int | None  # max_tokens, else max_completion_tokens (validated: an int >= 1), else None
    temperature: float  # alpha.request_temperature: the body's number, else the engines' default (1.0)
    regime: str  # alpha.sampling_regime(temperature, top_k): whose alpha estimates the decision reads


class _Unfrozen:
    """Generation's slot layout, writable: `parse_generation` fills one, then makes it a Generation with one
    `__class__` store (the layouts are the same). A frozen dataclass's own __init__ writes every field
    through object.__setattr__: ~1.6k instructions a field on CPython 3.11, 13k of the hop's ~590k per
    request, against ~3.5k in all this way. What comes out is an ordinary Generation: frozen, and equal to
    Generation(...) of the same fields (tests/proxy/test_request.py)."""

    __slots__ = Generation.__slots__


def _decoder(request: web.Request):
    """A streaming decompressor for the body's Content-Encoding (None: identity); 415 for others."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header, detected from the first bytes
    raise RequestError(f"Unsupported Content-Encoding {encoding[:40]!r}; send gzip, deflate or identity.",
                       status=415, code="unsupported_content_encoding")


def _too_large(limit: int) -> RequestError:
    return RequestError(f"Request body exceeds the limit of {limit} bytes (after decompression).", status=413,
                        code="body_too_large")


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The body, decompressed while it streams in; 413 as soon as either size passes `limit` (a 291 KB gzip
    of 200 MB stops after ~limit bytes of output), 400 for a body that is not what its encoding claims,
    408 when it takes longer than `timeout_s`."""
    if request.content_length is not None and request.content_length > limit:
        raise RequestError(f"Request body of {request.content_length} bytes exceeds the limit of {limit} bytes.",
                           status=413, code="body_too_large")
    decoder = _decoder(request)
    if decoder is None and request.content.is_eof():  # the whole body came with the head: nothing to wait for
        data = request.content.read_nowait()
        if len(data) > limit:
            raise _too_large(limit)
        return data
    buf = bytearray()
    received = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_any():
                received += len(chunk)
                if received > limit:
                    raise _too_large(limit)
                if decoder is not None:
                    chunk = decoder.decompress(chunk, limit + 1 - len(buf))  # output capped: memory stays bounded
                buf += chunk
                if len(buf) > limit or (decoder is not None and decoder.unconsumed_tail):
                    raise _too_large(limit)
    except TimeoutError:
        raise RequestError(f"Request body not received within {timeout_s:g} s.", status=408,
                           code="body_timeout") from None
    except zlib.error as exc:
        raise RequestError(f"Request body is not valid compressed data (Content-Encoding gzip/deflate): {exc}",
                           code="invalid_content_encoding") from None
    if decoder is not None and (not decoder.eof or decoder.unused_data):
        raise RequestError("Request body is not valid compressed data (truncated, or data after its end).",
                           code="invalid_content_encoding")
    return bytes(buf)



def parse_generation(raw: bytes, kind: str) -> Generation:
    """The body of a `kind` ("chat" | "completions") request -> its `Generation`; 400 / 422 naming the field."""
    body = loads_limited(raw)  # depth and number limits: 400, never a RecursionError / ValueError 500
    if not isinstance(body, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    model = body.get("model")
    if model is None:
        raise RequestError("Missing required parameter: 'model'.", code="missing_required_parameter", param="model")
    if not isinstance(model, str) or not model:
        raise RequestError(f"Invalid value for 'model': expected a non-empty string, got {model!r}.",
                           code="invalid_type", param="model")
    if kind == "chat":
        msgs = body.get("messages")
        if msgs is None:
            raise RequestError("Missing required parameter: 'messages'.", code="missing_required_parameter",
                               param="messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise RequestError("Invalid value for 'messages': expected a non-empty array of message objects.",
                               status=422, code="invalid_value", param="messages")
    else:
        prompt = body.get("prompt")
        if prompt is None:
            raise RequestError("Missing required parameter: 'prompt'.", code="missing_required_parameter",
                               param="prompt")
        if not isinstance(prompt, (str, list)):
            raise RequestError("Invalid value for 'prompt': expected a string or an array.", status=422,
                               code="invalid_type", param="prompt")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"Invalid value for 'stream': expected a boolean, got {stream!r}.", status=422,
                           code="invalid_type", param="stream")
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise RequestError(f"Invalid value for '{key}': expected an integer >= 1, got {v!r}.", status=422,
                               code="invalid_value", param=key)
    req = _Unfrozen()
    req.kind, req.raw, req.body, req.model, req.stream = kind, raw, body, model, stream
    req.max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    req.temperature = temperature = request_temperature(body.get("temperature"))
    req.regime = sampling_regime(temperature, body.get("top_k"))
    req.__class__ = Generation
    return req


def generation_of(body: dict) -> Generation:
    """The `Generation` of a body given as a dict (tests, benchmarks), as if it had come over HTTP: a chat
    request when it has `messages`, else a completion."""
    return parse_generation(json.dumps(body).encode(), "chat" if "messages" in body else "completions")
