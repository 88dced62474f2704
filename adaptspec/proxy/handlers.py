"""HTTP handlers: /v1/chat/completions, /v1/completions, /health, /metrics (/v1/models: modelcards.py).

The generation path, in order: auth -> read body (decompressed while read; size cap and timeout) ->
parse + validate (JSON depth / number limits) -> workers serving the model (404) -> classify -> decide
(`Proxy.decide`, synchronous, in memory) -> `_Plan`: the body for this worker (its engine adapter,
engines.py) -> send; connection failures, timeouts and ejections before the first byte move the request
to another eligible worker ->
relay (non-stream: whole body; stream: SSE chunk by chunk, a stall ends it with an SSE error) -> `_record`
(feedback + metrics of the finished attempt) -> `_count_request` (once per request). One `_Attempt` carries
the request's context through these steps. Client strings never become metric labels or response headers
(closed sets only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
import zlib

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from adaptspec.control.alpha import GREEDY, sampling_regime
from adaptspec.control.shadow import ShadowStats
from adaptspec.errors import RequestError, UpstreamError
from adaptspec.jsonlimits import loads_limited
from adaptspec.proxy import accesslog
from adaptspec.proxy import metrics as mn
from adaptspec.proxy.errors import sse_error_event
from adaptspec.proxy.feedback import lookup_drafts, position_stats, prompt_tokens, shadow_stats, spec_stats
from adaptspec.proxy.h1client import ConnectFailed, Deadline, Response, UpstreamConnectionError
from adaptspec.proxy.report import record as record_experiment

log = logging.getLogger(__name__)

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_UPSTREAM_ERRORS = (UpstreamConnectionError, TimeoutError)  # before the first byte: retried; after: cut
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


class _Attempt:
    """One request's context through the path: the parsed request, its class and regime, the workers it may
    use, the failures so far and the current plan. Built once by `_generate`, passed to every step."""

    __slots__ = ("request", "proxy", "path", "t0", "body", "raw", "stream", "model", "candidates", "cls",
                 "regime", "failed", "plan", "features")

    def __init__(self, request: web.Request, proxy, path: str, t0: float):
        self.request, self.proxy, self.path, self.t0 = request, proxy, path, t0
        self.body: dict = {}
        self.raw, self.stream, self.model = b"", False, None
        self.candidates: list = []
        self.cls, self.regime = "unknown", GREEDY
        self.failed: dict[str, int] = {}
        self.plan: _Plan | None = None
        self.features = None  # control.predict.RequestFeatures, when acceptance prediction is on


class _Plan:
    """What one attempt sends: worker, applied (proposer, gamma), body bytes, and whether to strip usage."""

    __slots__ = ("worker", "decision", "proposer", "gamma", "payload", "strip_usage", "scan", "regime", "schedule")

    def __init__(self, ctx: _Attempt, decision, worker):
        body, engine = ctx.body, worker.adapter
        self.worker, self.decision, self.regime = worker, decision, ctx.regime
        client_spec = engine.client_speculation(body) if worker.per_request else None
        self.schedule = None  # the decision's gamma caps by running batch, sent as is (the worker checks them)
        if client_spec is not None and ctx.proxy.allow_client_speculation:  # benchmarks, debugging: opt-in
            self.proposer, self.gamma = _client_speculation(client_spec, worker)
        elif worker.per_request:
            k = decision.max_k  # with a schedule: its highest cap (the worker applies min(k, cap) per step)
            ok = k > 0 and decision.proposer in worker.proposers
            self.proposer = decision.proposer if ok else "none"
            self.gamma = min(int(k), worker.max_gamma) if ok else 0
            if ok and decision.schedule:
                self.schedule = [[b, min(c, self.gamma)] for b, c in decision.schedule]
        else:
            self.proposer, self.gamma = worker.fixed_plan()
        self.scan = engine.scan
        self.strip_usage = False
        rewrite, drop = engine.rewrite(body, worker.per_request, self.proposer, self.gamma, ctx.cls, self.schedule)
        if ctx.stream and self.scan and worker.per_request:
            opts = body.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                rewrite["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
                self.strip_usage = True
        if rewrite or drop:
            out = {k: v for k, v in body.items() if k not in drop}
            self.payload = json.dumps({**out, **rewrite}, separators=(",", ":")).encode()
        else:
            self.payload = ctx.raw

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
    ctx = _Attempt(request, proxy, path, time.perf_counter())
    status = 500
    try:
        proxy.check_auth(request)
        ctx.raw = await _read_body(request, proxy.max_body_bytes, proxy.body_timeout_s)
        ctx.body, ctx.model, ctx.stream = _parse(ctx.raw, kind)
        ctx.candidates = proxy.pools.serving(ctx.model)
        t1 = time.perf_counter()
        ctx.cls, ctx.features = proxy.classify_body(ctx.body, ctx.candidates)
        ctx.regime = sampling_regime(ctx.body.get("temperature"), ctx.body.get("top_k"))
        decision, worker = proxy.decide(ctx.cls, ctx.candidates, regime=ctx.regime, features=ctx.features)
        mn.observe(proxy.metrics.decision_time, time.perf_counter() - t1)
        if log.isEnabledFor(logging.DEBUG):  # why this request speculates (or not): for tuning and bug reports
            log.debug("decision on %s: %s", worker.name, decision.reason)
        ctx.plan = _Plan(ctx, decision, worker)
        resp, status = await _dispatch(ctx)
        return resp
    except RequestError as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # client went away (nginx's convention)
        raise
    finally:
        _count_request(ctx, status)


def _count_request(ctx: _Attempt, status: int) -> None:
    """The request's access-log fields and its `requests` count, once, with the final plan (after retries)."""
    m, plan = ctx.proxy.metrics, ctx.plan
    accesslog.note(model=ctx.model, status=status, **{"class": ctx.cls}, **({} if plan is None else {
        "proposer": plan.proposer, "gamma": plan.gamma, "worker": plan.worker.name}))
    if plan is None:
        mn.inc(m.child(m.requests, ctx.cls, "none", "0", "none", str(status)))
    else:
        mn.inc(m.child(m.requests, ctx.cls, plan.proposer, str(plan.gamma), plan.worker.name, str(status)))


async def _dispatch(ctx: _Attempt) -> tuple[web.StreamResponse, int]:
    """Send, moving to another worker on failures before the first byte -> (response, status); `ctx.plan`
    ends as the plan that answered."""
    proxy = ctx.proxy
    while True:
        plan = ctx.plan
        worker = plan.worker
        mn.inc(proxy.metrics.child(proxy.metrics.decisions, ctx.cls, plan.proposer, str(plan.gamma),
                                        plan.decision.policy))
        worker.inflight += 1
        up = None
        try:
            mn.observe(proxy.metrics.overhead, time.perf_counter() - ctx.t0)
            try:
                up, data = await _send(ctx, plan)
            except _UPSTREAM_ERRORS as exc:
                ctx.plan = _retry_plan(ctx, exc)
                continue
            if up.status in (502, 503, 504):  # the worker (or what is behind it) is unwell; other 5xx can be
                proxy.pools.failure(worker, f"HTTP {up.status}")  # caused by a request: a client must not eject
            elif up.status < 500:
                proxy.pools.success(worker)
            if data is None:
                return await _relay_stream(ctx, up)
            return _finish_plain(ctx, up, data), up.status
        except BaseException:
            if up is not None:
                up.close()  # unfinished (client gone, error): drop the connection, which aborts upstream work
                up = None
            raise
        finally:
            worker.inflight -= 1
            if up is not None:
                up.release()


async def _send(ctx: _Attempt, plan: _Plan) -> tuple[Response, bytes | None]:
    """POST the plan's body -> (response, whole body; None for an SSE stream still to relay).

    Until the client has seen a byte the attempt can move: a stream's head must come within
    first_byte_timeout_s, a whole non-stream answer within request_timeout_s (TimeoutError), and both end at
    once when the worker is ejected meanwhile (Pools.mark_unhealthy expires the deadlines in `heads`)."""
    proxy, worker = ctx.proxy, plan.worker
    dl = Deadline(proxy.first_byte_timeout_s if ctx.stream else proxy.request_timeout_s)
    worker.heads.add(dl)
    up = None
    try:
        up = await proxy.h1.post(worker.url, ctx.path, plan.payload, _upstream_headers(proxy, ctx.request, worker),
                                 dl)
        if ctx.stream and up.status == 200 and up.content_type == "text/event-stream":
            up.end_deadline()  # from here on its stalls are watched (_relay_stream)
            return up, None
        return up, await up.read()
    except BaseException:
        if up is not None:
            up.close()
        raise
    finally:
        worker.heads.discard(dl)


def _retry_plan(ctx: _Attempt, exc: BaseException) -> _Plan:
    proxy, failed, worker = ctx.proxy, ctx.failed, ctx.plan.worker
    failed[worker.name] = failed.get(worker.name, 0) + 1
    proxy.metrics.child(proxy.metrics.retries, worker.name).inc()
    accesslog.count_retry()
    # A refused/timed-out connect means the worker is down; a dropped pooled connection gets one more try.
    if isinstance(exc, (ConnectFailed, TimeoutError)) or failed[worker.name] >= 2:
        proxy.pools.mark_unhealthy(worker, f"{exc.__class__.__name__}: {exc}")
    exclude = {name for name, n in failed.items() if n >= 2 or not proxy.pools.workers.get(name, worker).healthy}
    try:
        decision, nxt = proxy.decide(ctx.cls, ctx.candidates, exclude, ctx.regime, ctx.features)
    except UpstreamError:
        raise UpstreamError(f"All workers for this model failed before answering (last: {worker.name}: "
                            f"{exc.__class__.__name__}); retry shortly.", status=503) from None
    log.info("retrying request on %s after %s failed before the first byte (%s)", nxt.name, worker.name,
             exc.__class__.__name__)
    return _Plan(ctx, decision, nxt)


class _Outcome:
    """What a finished attempt reported: output / prompt tokens and the engine's speculation stats."""

    __slots__ = ("tokens", "prompt", "stats", "positions", "lookups", "shadow")

    def __init__(self) -> None:
        self.tokens: float | None = None
        self.prompt: float | None = None
        self.stats: tuple[float, float, float | None] | None = None
        self.positions: tuple[list[float], list[float]] | None = None
        self.lookups: float | None = None  # hybrid: drafting steps its n-gram lookup served
        self.shadow: ShadowStats | None = None  # n-gram lookup scored along the output (control/shadow.py)

    def read(self, payload: dict) -> None:
        """Take usage and speculation stats from one response body or stream chunk (later ones win)."""
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.tokens = float(usage["completion_tokens"])
            self.prompt = prompt_tokens(usage)
        stats = spec_stats(payload)
        if stats is not None:
            self.stats, self.positions, self.lookups = stats, position_stats(payload), lookup_drafts(payload)
            self.shadow = shadow_stats(payload)

    def scan_bytes(self, data: bytes) -> None:
        """Token counts from an unparsed body (engines whose answers carry no stats worth a JSON parse)."""
        m = _COMPLETION_TOKENS.search(data)
        self.tokens = float(m.group(1)) if m else None
        m = _PROMPT_TOKENS.search(data)
        self.prompt = float(m.group(1)) if m else None


def _record(ctx: _Attempt, out: _Outcome, t_first: float | None, *, streamed: bool = False) -> None:
    """The one place a finished attempt is accounted: alpha feedback, traffic shape, access log, latency
    histograms (e2e; ttft; tpot for streams)."""
    now = time.perf_counter()
    plan, m, cls = ctx.plan, ctx.proxy.metrics, ctx.cls
    tokens = out.tokens or 0.0
    ctx.proxy.feedback.on_response(plan.worker, cls, plan.proposer, plan.gamma, tokens, out.stats,
                                   out.positions, out.prompt, plan.regime, ctx.features, out.lookups, out.shadow)
    # the holdout / switchback experiment: decode time per token needs a stream's first-token time
    record_experiment(ctx.proxy, plan, tokens, t_first if streamed else None, now)
    accesslog.note(prompt_tokens=out.prompt, output_tokens=tokens,
                   ttft_ms=None if t_first is None else accesslog.ms(t_first - ctx.t0))
    mn.observe(m.child(m.e2e, cls, plan.proposer), now - ctx.t0)
    if t_first is not None:
        mn.observe(m.child(m.ttft, cls, plan.proposer), t_first - ctx.t0)
        if streamed and tokens > 1:
            mn.observe(m.child(m.tpot, cls, plan.proposer), (now - t_first) / (tokens - 1))


def _finish_plain(ctx: _Attempt, up: Response, data: bytes) -> web.Response:
    plan = ctx.plan
    if up.status == 200:
        done = time.perf_counter()
        out = _Outcome()
        if plan.scan:
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):  # a worker's bad JSON is not ours to crash on
                payload = None
            if isinstance(payload, dict):
                out.read(payload)
        else:
            out.scan_bytes(data)
        _record(ctx, out, done)  # a whole answer: its first byte is its last
    return web.Response(status=up.status, body=data, headers=plan.headers(ctx.cls),
                        content_type=up.content_type or "application/json")


class _SseScan:
    """Cuts a relayed SSE stream at event boundaries to read usage / speculation chunks; drops the usage
    the proxy asked for and the client did not (`strip`)."""

    __slots__ = ("scan", "strip", "tail", "events", "payloads")

    def __init__(self, plan: _Plan) -> None:
        self.scan, self.strip = plan.scan, plan.strip_usage
        self.tail = b""
        self.events = 0
        self.payloads: list[dict] = []

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to forward to the client for this upstream chunk."""
        out = chunk
        if self.scan:
            if not self.tail and chunk.endswith(b"\n\n"):  # whole events, the usual arrival: no copies
                complete = chunk
            else:  # b"" until an event is whole
                buf = self.tail + chunk if self.tail else chunk
                cut = buf.rfind(b"\n\n")
                cut = cut + 2 if cut >= 0 else 0
                complete, self.tail = buf[:cut], buf[cut:]
            if b'"usage"' in complete or b'"speculative_decoding"' in complete:  # parsed only then
                complete = _take_usage(complete, self.payloads, self.strip)
            if self.strip:
                out = complete
        self.events += out.count(b"data:")
        return out

    def outcome(self) -> _Outcome:
        out = _Outcome()
        for p in self.payloads:
            out.read(p)
        if out.tokens is None:
            out.tokens = float(max(0, self.events - 2))  # content events, less the finish chunk and [DONE]
        return out


async def _relay_stream(ctx: _Attempt, up: Response) -> tuple[web.StreamResponse, int]:
    plan = ctx.plan
    resp = web.StreamResponse(status=200, headers={**plan.headers(ctx.cls), "Cache-Control": "no-cache",
                                                   **accesslog.id_header()})
    resp.content_type = "text/event-stream"
    await resp.prepare(ctx.request)
    t_first = None
    sse = _SseScan(plan)
    accounted = False
    quiet_since = time.monotonic()
    up.watch(ctx.proxy.stall_timeout_s)  # a worker silent this long is stalled: readany raises TimeoutError
    while True:
        try:
            chunk = up.read_nowait()  # what has arrived; a wait only when there is nothing yet
            if chunk is None:
                chunk = await up.readany()
        except _UPSTREAM_ERRORS as exc:
            if isinstance(exc, TimeoutError) and _queued_not_stalled(ctx, quiet_since):
                continue
            status = await _stream_failed(ctx, resp, exc)
            if not accounted:
                _record(ctx, sse.outcome(), t_first, streamed=True)
            return resp, status
        if not chunk:
            break
        quiet_since = plan.worker.last_ok = time.monotonic()  # any chunk on any stream shows the worker is alive
        if t_first is None:
            t_first = time.perf_counter()
        out = sse.feed(chunk)
        if not accounted and b"data: [DONE]" in out:
            # account before the client can see the end of its stream, so anything it reads next
            # (metrics, the next decision's alpha) already includes this request
            _record(ctx, sse.outcome(), t_first, streamed=True)
            accounted = True
        if out:
            last = accounted and not sse.tail and out.endswith(b"data: [DONE]\n\n")
            try:
                await (resp.write_eof(out) if last else resp.write(out))  # the end: with the terminator, one write
            except ConnectionResetError:
                up.close()  # client gone: drop the upstream connection so the worker aborts the request
                return resp, 200 if last else 499
            if last:
                await _drain(up)
                return resp, 200
    if not accounted:
        _record(ctx, sse.outcome(), t_first, streamed=True)
    try:
        if sse.tail and sse.strip:
            await resp.write(sse.tail)
        await resp.write_eof()
    except ConnectionResetError:
        # a client that read [DONE] may close before the chunked terminator: it has its whole response
        return resp, 200 if accounted else 499
    return resp, 200


async def _drain(up: Response) -> None:
    """After [DONE] (the client has its whole stream): read the worker's stream to its end, so that its
    connection goes back to the pool; anything after [DONE] is not an OpenAI event and is dropped."""
    try:
        while await up.readany():
            pass
    except _UPSTREAM_ERRORS:
        up.close()


def _queued_not_stalled(ctx: _Attempt, quiet_since: float) -> bool:
    """A silent stream on a worker that is alive (chunks on its other streams, answered scrapes within the
    stall timeout) is waiting in the engine's queue or behind a long prefill under load, not frozen: keep
    waiting, up to request_timeout_s of silence for this stream. A frozen worker answers nothing at all."""
    now, proxy = time.monotonic(), ctx.proxy
    return (now - ctx.plan.worker.last_ok < proxy.stall_timeout_s
            and now - quiet_since < (proxy.request_timeout_s or math.inf))


async def _stream_failed(ctx: _Attempt, resp: web.StreamResponse, exc: BaseException) -> int:
    """A worker stalled or dropped mid-stream: eject it, end the client's stream with an SSE error event;
    the status the metrics count (the client saw 200 + the event)."""
    worker, stall = ctx.plan.worker, ctx.proxy.stall_timeout_s
    stalled = isinstance(exc, TimeoutError)
    what = f"sent nothing for {stall:g} s" if stalled else f"failed mid-stream ({exc.__class__.__name__})"
    ctx.proxy.pools.mark_unhealthy(worker, f"stream {what}")
    log.warning("upstream %s %s; ending the client's stream with an error event", worker.name, what)
    try:
        await resp.write(sse_error_event(f"The upstream worker {worker.name} {what}; the response is incomplete.",
                                         code="upstream_timeout" if stalled else "upstream_disconnected"))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client is gone too; nothing left to tell it
    return 504 if stalled else 502


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
