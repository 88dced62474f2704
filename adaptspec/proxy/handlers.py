"""HTTP handlers: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics.

The generation path, in order: auth -> read body (decompressed while read; size cap and timeout) ->
parse + validate (JSON depth / number limits) -> workers serving the model (404) -> classify -> decide
(`Proxy.decide`, synchronous, in memory) -> rewrite the body for per-request workers -> send; connection
failures, timeouts and ejections before the first byte move the request to another eligible worker ->
relay (non-stream: whole body; stream: SSE chunk by chunk, a stall ends it with an SSE error) -> feedback
+ metrics. Client strings never become metric labels or response headers (closed sets only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
import zlib

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from adaptspec.control.estimators import sampling_regime
from adaptspec.errors import RequestError, UpstreamError
from adaptspec.jsonlimits import loads_limited
from adaptspec.proxy import accesslog
from adaptspec.proxy.errors import error_response, sse_error_event
from adaptspec.proxy.feedback import position_stats, prompt_tokens, spec_stats

log = logging.getLogger(__name__)

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_PRE_RESPONSE_ERRORS = (aiohttp.ClientConnectionError, TimeoutError)
_STREAM_ERRORS = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError)
_FEEDBACK_ENGINES = frozenset({"adaptspec", "vllm", "sglang"})
SPEC_PROPOSERS = frozenset({"none", "ngram", "draft", "eagle", "hybrid"})  # names a client may ask for


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


async def _read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The body, decompressed while it streams in; 413 as soon as either size passes `limit` (a 291 KB gzip
    of 200 MB stops after ~limit bytes of output), 400 for a body that is not what its encoding claims,
    408 when it takes longer than `timeout_s`."""
    if request.content_length is not None and request.content_length > limit:
        raise RequestError(f"Request body of {request.content_length} bytes exceeds the limit of {limit} bytes.",
                           status=413, code="body_too_large")
    decoder = _decoder(request)
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


def _parse(raw: bytes, kind: str) -> tuple[dict, str, bool]:
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
    return body, model, stream


class _Plan:
    """What one attempt sends: worker, applied (proposer, gamma), body bytes, and whether to strip usage."""

    __slots__ = ("worker", "decision", "proposer", "gamma", "payload", "strip_usage", "scan", "regime", "schedule")

    def __init__(self, proxy, body: dict, raw: bytes, stream: bool, decision, worker, cls: str):
        self.worker, self.decision = worker, decision
        self.regime = sampling_regime(body.get("temperature"), body.get("top_k"))
        own = worker.engine == "adaptspec"  # the engine that reads a body `speculation` field
        client_spec = body.get("speculation") if own and worker.per_request else None
        self.schedule = None  # the decision's gamma caps by running batch, sent as is (the worker checks them)
        if client_spec is not None and proxy.allow_client_speculation:  # benchmarks, debugging: opt-in
            self.proposer, self.gamma = _client_speculation(client_spec, worker)
        elif worker.per_request and worker.engine in ("adaptspec", "vllm"):
            k = decision.max_k  # with a schedule: its highest cap (the worker applies min(k, cap) per step)
            ok = k > 0 and decision.proposer in worker.proposers
            self.proposer = decision.proposer if ok else "none"
            self.gamma = min(int(k), worker.max_gamma) if ok else 0
            if ok and decision.schedule:
                self.schedule = [[b, min(c, self.gamma)] for b, c in decision.schedule]
        else:
            self.proposer, self.gamma = worker.fixed_plan()
        self.scan = worker.engine in _FEEDBACK_ENGINES
        self.strip_usage = False
        rewrite: dict = {}
        drop = ()
        if own and worker.per_request:  # always ours (validated, clamped): the client's field never passes as is
            rewrite["speculation"] = {"proposer": self.proposer, "num_speculative_tokens": self.gamma,
                                      "content_class": cls}
            if self.schedule:
                rewrite["speculation"]["schedule"] = self.schedule
        elif own and "speculation" in body:
            drop = ("speculation",)  # a fixed-speculation worker would honour it: not the client's call
        elif worker.per_request and worker.engine == "vllm":
            xargs = body.get("vllm_xargs") or {}
            if not isinstance(xargs, dict):
                raise RequestError("Invalid value for 'vllm_xargs': expected an object.", status=422,
                                   code="invalid_type", param="vllm_xargs")
            xargs = dict(xargs)
            xargs.update(adaptspec_num_spec_tokens=self.gamma, adaptspec_proposer=self.proposer,
                         adaptspec_content_class=cls)
            if self.schedule:  # vllm_xargs values are scalars: "max_running_batch:cap,..." (vllm_plugin.py)
                xargs["adaptspec_schedule"] = ",".join(f"{b}:{c}" for b, c in self.schedule)
            rewrite["vllm_xargs"] = xargs
        if stream and self.scan and worker.per_request:
            opts = body.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                rewrite["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
                self.strip_usage = True
        if rewrite or drop:
            out = {k: v for k, v in body.items() if k not in drop}
            self.payload = json.dumps({**out, **rewrite}, separators=(",", ":")).encode()
        else:
            self.payload = raw

    def headers(self, cls: str) -> dict[str, str]:
        # every value comes from a closed set (classes, proposer names, config worker names) or is an int
        return {"x-adaptspec-class": cls, "x-adaptspec-proposer": self.proposer,
                "x-adaptspec-gamma": str(self.gamma), "x-adaptspec-worker": self.worker.name}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _client_speculation(spec: object, worker) -> tuple[str, int]:
    """The client's `speculation` field -> (proposer, gamma), clamped to what `worker`'s pool allows.

    Only names from a closed set are accepted (they become metric labels and response headers); a known
    proposer the pool does not offer means speculation off, a gamma above the pool's max_gamma is capped.
    """
    if not isinstance(spec, dict):
        raise RequestError("Invalid value for 'speculation': expected an object.", status=422,
                           code="invalid_type", param="speculation")
    proposer = spec.get("proposer")
    proposer = "none" if proposer is None else proposer
    k = spec.get("num_speculative_tokens")
    if not isinstance(proposer, str) or proposer not in SPEC_PROPOSERS:
        raise RequestError(f"Invalid value for 'speculation.proposer': expected one of "
                           f"{', '.join(sorted(SPEC_PROPOSERS))}, got {_short(proposer)}.", status=422,
                           code="invalid_value", param="speculation.proposer")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise RequestError(f"Invalid value for 'speculation.num_speculative_tokens': expected an integer >= 0, "
                           f"got {_short(k)}.", status=422, code="invalid_value",
                           param="speculation.num_speculative_tokens")
    gamma = min(int(k or 0), worker.max_gamma)
    if proposer == "none" or proposer not in worker.proposers or gamma == 0:
        return "none", 0
    return proposer, gamma


def _upstream_headers(proxy, request: web.Request, worker) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if worker.api_key:
        headers.update(worker.auth_headers)
    elif not proxy.api_keys:
        auth = request.headers.get("Authorization")
        if auth:  # transparent proxy: no keys of ours in play, pass the client's through
            headers["Authorization"] = auth
    headers.update(accesslog.upstream_headers(request))  # request id, W3C trace context
    return headers


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat", "/v1/chat/completions")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completions", "/v1/completions")


async def _generate(request: web.Request, kind: str, path: str) -> web.StreamResponse:
    proxy = request.app["proxy"]
    t0 = time.perf_counter()
    cls, plan, model = "unknown", None, None
    status = 500
    try:
        proxy.check_auth(request)
        raw = await _read_body(request, proxy.max_body_bytes, proxy.body_timeout_s)
        body, model, stream = _parse(raw, kind)
        candidates = proxy.pools.serving(model)
        t1 = time.perf_counter()
        cls = proxy.classify(body)
        decision, worker = proxy.decide(cls, candidates, regime=sampling_regime(body.get("temperature"),
                                                                                body.get("top_k")))
        proxy.metrics.decision_time.observe(time.perf_counter() - t1)
        plan = _Plan(proxy, body, raw, stream, decision, worker, cls)
        resp, status, plan = await _dispatch(request, proxy, plan, body, raw, stream, candidates, cls, path, t0)
        return resp
    except RequestError as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # client went away (nginx's convention)
        raise
    finally:
        m = proxy.metrics
        accesslog.note(model=model, status=status, **{"class": cls}, **({} if plan is None else {
            "proposer": plan.proposer, "gamma": plan.gamma, "worker": plan.worker.name}))
        if plan is None:
            m.child(m.requests, cls, "none", "0", "none", str(status)).inc()
        else:
            m.child(m.requests, cls, plan.proposer, str(plan.gamma), plan.worker.name, str(status)).inc()


async def _dispatch(request, proxy, plan: _Plan, body, raw, stream, candidates, cls, path, t0):
    """Send, moving to another worker on failures before the first byte -> (response, status, final plan)."""
    failed: dict[str, int] = {}
    session: aiohttp.ClientSession = proxy.session
    while True:
        worker = plan.worker
        proxy.metrics.child(proxy.metrics.decisions, cls, plan.proposer, str(plan.gamma), plan.decision.policy).inc()
        worker.inflight += 1
        up = None
        try:
            proxy.metrics.overhead.observe(time.perf_counter() - t0)
            # Until the client has seen a byte the attempt can move: a stream's head must come within
            # first_byte_timeout_s, a whole non-stream answer within request_timeout_s, and both end at once
            # when the worker is ejected meanwhile (Pools.mark_unhealthy expires the deadlines in `heads`).
            try:
                async with asyncio.timeout(proxy.first_byte_timeout_s if stream else proxy.request_timeout_s) as dl:
                    worker.heads.add(dl)
                    try:
                        up = await session.post(worker.url + path, data=plan.payload, timeout=proxy.upstream_timeout,
                                                headers=_upstream_headers(proxy, request, worker))
                        is_sse = stream and up.status == 200 and up.content_type == "text/event-stream"
                        if not is_sse:
                            data = await up.read()
                    finally:
                        worker.heads.discard(dl)
            except _PRE_RESPONSE_ERRORS as exc:
                if up is not None:
                    up.close()
                    up = None
                plan = _retry_plan(proxy, plan, failed, exc, body, raw, stream, candidates, cls)
                continue
            if up.status in (502, 503, 504):  # the worker (or what is behind it) is unwell; other 5xx can be
                proxy.pools.failure(worker, f"HTTP {up.status}")  # caused by a request: a client must not eject
            elif up.status < 500:
                proxy.pools.success(worker)
            if is_sse:
                resp, status = await _relay_stream(request, proxy, plan, up, cls, t0)
                return resp, status, plan
            return _finish_plain(proxy, plan, up, data, cls, t0), up.status, plan
        except BaseException:
            if up is not None:
                up.close()  # unfinished (client gone, error): drop the connection, which aborts upstream work
                up = None
            raise
        finally:
            worker.inflight -= 1
            if up is not None:
                up.release()


def _retry_plan(proxy, plan: _Plan, failed: dict[str, int], exc: BaseException, body, raw, stream, candidates, cls):
    worker = plan.worker
    failed[worker.name] = failed.get(worker.name, 0) + 1
    proxy.metrics.child(proxy.metrics.retries, worker.name).inc()
    accesslog.count_retry()
    # A refused/timed-out connect means the worker is down; a dropped pooled connection gets one more try.
    if isinstance(exc, (aiohttp.ClientConnectorError, TimeoutError)) or failed[worker.name] >= 2:
        proxy.pools.mark_unhealthy(worker, f"{exc.__class__.__name__}: {exc}")
    exclude = {name for name, n in failed.items() if n >= 2 or not proxy.pools.workers.get(name, worker).healthy}
    try:
        decision, nxt = proxy.decide(cls, candidates, exclude, plan.regime)
    except UpstreamError:
        raise UpstreamError(f"All workers for this model failed before answering (last: {worker.name}: "
                            f"{exc.__class__.__name__}); retry shortly.", status=503) from None
    log.info("retrying request on %s after %s failed before the first byte (%s)", nxt.name, worker.name,
             exc.__class__.__name__)
    return _Plan(proxy, body, raw, stream, decision, nxt, cls)


def _finish_plain(proxy, plan: _Plan, up: aiohttp.ClientResponse, data: bytes, cls: str, t0: float) -> web.Response:
    now = time.perf_counter()
    worker = plan.worker
    tokens, stats, positions, prompt = 0.0, None, None, None
    if up.status == 200:
        if plan.scan:
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):  # a worker's bad JSON is not ours to crash on
                payload = None
            if isinstance(payload, dict):
                usage = payload.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    tokens = float(usage["completion_tokens"])
                    prompt = prompt_tokens(usage)
                stats = spec_stats(payload)
                positions = position_stats(payload) if stats is not None else None
        else:
            m = _COMPLETION_TOKENS.search(data)
            tokens = float(m.group(1)) if m else 0.0
            m = _PROMPT_TOKENS.search(data)
            prompt = float(m.group(1)) if m else None
        proxy.feedback.on_response(worker, cls, plan.proposer, plan.gamma, tokens, stats, positions, prompt,
                                   plan.regime)
        e2e = now - t0
        accesslog.note(prompt_tokens=prompt, output_tokens=tokens, ttft_ms=round(e2e * 1000, 3))
        proxy.metrics.child(proxy.metrics.e2e, cls, plan.proposer).observe(e2e)
        proxy.metrics.child(proxy.metrics.ttft, cls, plan.proposer).observe(e2e)
    headers = plan.headers(cls)
    return web.Response(status=up.status, body=data, headers=headers,
                        content_type=up.content_type or "application/json")


async def _relay_stream(request, proxy, plan: _Plan, up: aiohttp.ClientResponse, cls: str, t0: float):
    worker = plan.worker
    resp = web.StreamResponse(status=200, headers={**plan.headers(cls), "Cache-Control": "no-cache"})
    resp.content_type = "text/event-stream"
    await resp.prepare(request)
    t_first = None
    tail = b""
    events = 0
    usage_payloads: list[dict] = []
    strip = plan.strip_usage
    accounted = False
    stall = proxy.stall_timeout_s
    quiet_since = time.monotonic()
    while True:
        try:
            async with asyncio.timeout(stall):  # a worker silent this long is stalled (frozen)
                chunk = await up.content.readany()
        except _STREAM_ERRORS as exc:
            stalled = isinstance(exc, TimeoutError)
            if stalled and _queued_not_stalled(proxy, worker, quiet_since):
                continue
            what = f"sent nothing for {stall:g} s" if stalled else f"failed mid-stream ({exc.__class__.__name__})"
            proxy.pools.mark_unhealthy(worker, f"stream {what}")
            log.warning("upstream %s %s; ending the client's stream with an error event", worker.name, what)
            try:
                await resp.write(sse_error_event(
                    f"The upstream worker {worker.name} {what}; the response is incomplete.",
                    code="upstream_timeout" if stalled else "upstream_disconnected"))
                await resp.write_eof()
            except ConnectionResetError:
                pass  # the client is gone too; nothing left to tell it
            if not accounted:
                _stream_metrics(proxy, plan, cls, t0, t_first, events, usage_payloads)
            return resp, 504 if stalled else 502  # the client saw 200 + an error event; metrics count the failure
        if not chunk:
            break
        quiet_since = worker.last_ok = time.monotonic()  # any chunk on any stream shows the worker is alive
        if t_first is None:
            t_first = time.perf_counter()
        out = chunk
        if plan.scan:
            buf = tail + chunk if tail else chunk
            cut = buf.rfind(b"\n\n")
            if cut < 0:
                tail = buf
                if strip:
                    continue
            else:
                complete, tail = buf[:cut + 2], buf[cut + 2:]
                if b'"usage"' in complete or b'"speculative_decoding"' in complete:
                    complete = _take_usage(complete, usage_payloads, strip)
                if strip:
                    out = complete
        events += out.count(b"data:")
        if not accounted and b"data: [DONE]" in out:
            # account before the client can see the end of its stream, so anything it reads next
            # (metrics, the next decision's alpha) already includes this request
            _stream_metrics(proxy, plan, cls, t0, t_first, events, usage_payloads)
            accounted = True
        if out:
            try:
                await resp.write(out)
            except ConnectionResetError:
                up.close()  # client gone: drop the upstream connection so the worker aborts the request
                return resp, 499
    if tail and strip:
        await resp.write(tail)
    if not accounted:
        _stream_metrics(proxy, plan, cls, t0, t_first, events, usage_payloads)
    await resp.write_eof()
    return resp, 200


def _take_usage(complete: bytes, sink: list[dict], strip: bool) -> bytes:
    kept: list[bytes] = []
    for event in complete.split(b"\n\n"):
        if not event:
            continue
        if (b'"usage"' in event or b'"speculative_decoding"' in event) and event.startswith(b"data:"):
            try:
                payload = json.loads(event[5:])
            except (ValueError, RecursionError):  # a worker's bad JSON is not ours to crash on
                payload = None
            if isinstance(payload, dict) and (isinstance(payload.get("usage"), dict) or "metrics" in payload):
                sink.append(payload)
                if strip and not payload.get("choices"):
                    continue  # the usage-only chunk we asked for; the client did not
                if strip:
                    payload = {k: v for k, v in payload.items() if k != "usage"}
                    event = b"data: " + json.dumps(payload, separators=(",", ":")).encode()
        kept.append(event + b"\n\n")
    return b"".join(kept)


def _queued_not_stalled(proxy, worker, quiet_since: float) -> bool:
    """A silent stream on a worker that is alive (chunks on its other streams, answered scrapes within the
    stall timeout) is waiting in the engine's queue or behind a long prefill under load, not frozen: keep
    waiting, up to request_timeout_s of silence for this stream. A frozen worker answers nothing at all."""
    now = time.monotonic()
    return now - worker.last_ok < proxy.stall_timeout_s and now - quiet_since < (proxy.request_timeout_s or math.inf)


def _stream_metrics(proxy, plan: _Plan, cls: str, t0: float, t_first: float | None, events: int,
                    usage_payloads: list[dict]) -> None:
    now = time.perf_counter()
    tokens, stats, positions, prompt = None, None, None, None
    for p in usage_payloads:
        u = p.get("usage") or {}
        if isinstance(u.get("completion_tokens"), int):
            tokens = float(u["completion_tokens"])
            prompt = prompt_tokens(u)
        s = spec_stats(p)
        if s is not None:
            stats, positions = s, position_stats(p)
    if tokens is None:
        tokens = float(max(0, events - 2))  # content events, less the finish chunk and [DONE]
    proxy.feedback.on_response(plan.worker, cls, plan.proposer, plan.gamma, tokens, stats, positions, prompt,
                               plan.regime)
    accesslog.note(prompt_tokens=prompt, output_tokens=tokens,
                   ttft_ms=None if t_first is None else round((t_first - t0) * 1000, 3))
    m = proxy.metrics
    m.child(m.e2e, cls, plan.proposer).observe(now - t0)
    if t_first is not None:
        m.child(m.ttft, cls, plan.proposer).observe(t_first - t0)
        if tokens > 1:
            m.child(m.tpot, cls, plan.proposer).observe((now - t_first) / (tokens - 1))


async def models(request: web.Request) -> web.Response:
    proxy = request.app["proxy"]
    proxy.check_auth(request)
    data = [{"id": m, "object": "model", "created": proxy.started, "owned_by": "adaptspec"}
            for m in proxy.pools.model_ids()]
    return web.json_response({"object": "list", "data": data})


async def health(request: web.Request) -> web.Response:
    proxy = request.app["proxy"]
    workers = {name: w.healthy for name, w in proxy.pools.workers.items()}
    ok = any(workers.values())
    body = {"status": "ok" if ok else "unavailable", "workers": workers, "state": proxy.state.backend,
            "state_up": proxy.state.up}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    proxy = request.app["proxy"]
    return web.Response(body=generate_latest(proxy.metrics.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def not_found(request: web.Request) -> web.Response:
    return error_response(404, f"Unknown path {request.path!r}.", code="not_found")
