"""HTTP handlers: /v1/chat/completions, /v1/completions, /health, /metrics (/v1/models: modelcards.py).

The generation path, in order: auth -> read body (decompressed while read; size cap and timeout) ->
parse + validate into one frozen `Generation` (request.py; JSON depth / number limits) -> workers serving
the model (404) -> classify -> decide (`Proxy.decide`, synchronous, in memory) -> `_Plan`: the body for
this worker (its engine adapter, engines.py) -> the relay (relay.py, shared with pass-through): send;
connection failures, timeouts and ejections before the first byte move the request to another eligible
worker (a new decision without the failed ones); non-stream: whole body; stream: SSE chunk by chunk through
`_SseScan`, a stall ends it with an SSE error -> `_record` (feedback + metrics of the finished attempt) ->
`_count_request` (once per request). One `_Attempt` carries the request's context through these steps.
Client strings never become metric labels or response headers (closed sets only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from adaptspec.control.shadow import ShadowStats
from adaptspec.control.types import PROPOSERS  # the names a client may ask for
from adaptspec.errors import RequestError
from adaptspec.proxy import accesslog, relay
from adaptspec.proxy import metrics as mn
from adaptspec.proxy.feedback import (
    idle_steps,
    lookup_drafts,
    position_stats,
    prompt_tokens,
    rule_stats,
    shadow_stats,
    source_stats,
    spec_stats,
)
from adaptspec.proxy.h1client import Response
from adaptspec.proxy.report import record as record_experiment
from adaptspec.proxy.report import record_rate
from adaptspec.proxy.request import Generation, parse_generation, read_body

log = logging.getLogger(__name__)

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')


class _Attempt(relay.Exchange):
    """One request's context through the path: the parsed request, its class and features, the workers it
    may use and the current plan. Built once by `_generate`, passed to every step; the
    relay (relay.py) sends it, moves it on failures before the first byte and hands it the answer."""

    __slots__ = ("t0", "req", "candidates", "cls", "plan", "features")

    def __init__(self, request: web.Request, proxy, path: str, t0: float):
        self.request, self.proxy, self.path, self.t0 = request, proxy, path, t0
        self.req: Generation | None = None
        self.stream = False
        self.candidates: list = []
        self.cls = "unknown"
        self.plan: _Plan | None = None
        self.features = None  # control.predict.RequestFeatures, when acceptance prediction is on

    # -- relay.Exchange ---------------------------------------------------------------------------------
    def target(self) -> tuple:
        return self.plan.worker, self.plan.payload

    def sending(self) -> None:
        plan, m = self.plan, self.proxy.metrics
        mn.inc(m.child(m.decisions, self.cls, plan.proposer, str(plan.gamma), plan.decision.policy))
        mn.observe(m.overhead, time.perf_counter() - self.t0)

    def move(self, exclude: set[str]) -> None:
        req = self.req
        decision, nxt = self.proxy.decide(self.cls, self.candidates, exclude, req.regime, self.features)
        self.plan = _Plan(self, decision, nxt)

    def headers(self) -> dict[str, str]:
        return self.plan.headers(self.cls)

    def answered(self, up: Response, data: bytes) -> None:
        """Account a whole 200 answer (its first byte is its last)."""
        if up.status != 200:
            return
        done = time.perf_counter()
        out = _Outcome()
        if self.plan.scan:
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):  # a worker's bad JSON is not ours to crash on
                payload = None
            if isinstance(payload, dict):
                out.read(payload)
        else:
            out.scan_bytes(data)
        _record(self, out, done)

    def tap(self) -> _SseScan:
        return _SseScan(self.plan, self)


class _Plan:
    """What one attempt sends: worker, applied (proposer, gamma), body bytes, and whether to strip usage."""

    __slots__ = ("worker", "decision", "proposer", "gamma", "payload", "strip_usage", "scan", "regime", "schedule",
                 "rule")

    def __init__(self, ctx: _Attempt, decision, worker):
        req, engine = ctx.req, worker.adapter
        body = req.body
        self.worker, self.decision, self.regime = worker, decision, req.regime
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
        # a per-step hybrid's rule where the policy's rule book runs the class with another than the worker's own
        self.rule = decision.hybrid_rule if worker.per_request and self.proposer == "hybrid" else None
        rewrite, drop = engine.rewrite(body, worker.per_request, self.proposer, self.gamma, ctx.cls, self.schedule,
                                       self.rule)
        if req.stream and self.scan and worker.per_request:
            opts = body.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                rewrite["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
                self.strip_usage = True
        if rewrite or drop:
            out = {k: v for k, v in body.items() if k not in drop}
            self.payload = json.dumps({**out, **rewrite}, separators=(",", ":")).encode()
        else:
            self.payload = req.raw

    def headers(self, cls: str) -> dict[str, str]:
        # every value comes from a closed set (classes, proposer names, config worker names) or is an int
        out = {"x-adaptspec-class": cls, "x-adaptspec-proposer": self.proposer,
               "x-adaptspec-gamma": str(self.gamma), "x-adaptspec-worker": self.worker.name}
        if self.rule is not None:
            out["x-adaptspec-hybrid-rule"] = self.rule
        return out


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
    if not isinstance(proposer, str) or proposer not in PROPOSERS:
        raise RequestError(f"Invalid value for 'speculation.proposer': expected one of "
                           f"{', '.join(sorted(PROPOSERS))}, got {_short(proposer)}.", status=422,
                           code="invalid_value", param="speculation.proposer")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise RequestError(f"Invalid value for 'speculation.num_speculative_tokens': expected an integer >= 0, "
                           f"got {_short(k)}.", status=422, code="invalid_value",
                           param="speculation.num_speculative_tokens")
    gamma = min(int(k or 0), worker.max_gamma)
    if proposer == "none" or proposer not in worker.proposers or gamma == 0:
        return "none", 0
    return proposer, gamma


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat", "/v1/chat/completions")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completions", "/v1/completions")


async def _generate(request: web.Request, kind: str, path: str) -> web.StreamResponse:
    proxy = request.app["proxy"]
    ctx = _Attempt(request, proxy, path, time.perf_counter())
    status = 500
    try:
        raw = await read_body(request, proxy.max_body_bytes, proxy.body_timeout_s)
        req = ctx.req = parse_generation(raw, kind)
        ctx.stream = req.stream
        ctx.candidates = proxy.pools.serving(req.model)
        t1 = time.perf_counter()
        ctx.cls, ctx.features = proxy.classify_body(req, ctx.candidates)
        decision, worker = proxy.decide(ctx.cls, ctx.candidates, regime=req.regime, features=ctx.features)
        mn.observe(proxy.metrics.decision_time, time.perf_counter() - t1)
        if log.isEnabledFor(logging.DEBUG):  # why this request speculates (or not): for tuning and bug reports
            log.debug("decision on %s: %s", worker.name, decision.reason)
        ctx.plan = _Plan(ctx, decision, worker)
        resp, status = await relay.dispatch(ctx)
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
    accesslog.note(model=None if ctx.req is None else ctx.req.model, status=status, **{"class": ctx.cls}, **({} if plan is None else {
        "proposer": plan.proposer, "gamma": plan.gamma, "worker": plan.worker.name}))
    if plan is None:
        mn.inc(m.child(m.requests, ctx.cls, "none", "none", mn.code_label(status)))
    else:
        mn.inc(m.child(m.requests, ctx.cls, plan.proposer, plan.worker.name, mn.code_label(status)))


class _Outcome:
    """What a finished attempt reported: output / prompt tokens and the engine's speculation stats."""

    __slots__ = ("tokens", "prompt", "stats", "positions", "lookups", "idle", "shadows", "sources", "rules")

    def __init__(self) -> None:
        self.tokens: float | None = None
        self.prompt: float | None = None
        self.stats: tuple[float, float, float | None] | None = None
        self.positions: tuple[list[float], list[float]] | None = None
        self.lookups: float | None = None  # hybrid: drafting steps its n-gram lookup served
        self.idle = 0.0  # steps whose gamma was capped to 0 (a schedule, an engine switched off)
        # proposers scored along the output of a request that ran without them (n-gram lookup, the hybrid)
        self.shadows: tuple[tuple[str, ShadowStats], ...] = ()
        self.sources: dict[str, ShadowStats] | None = None  # a per-step hybrid's steps by draft source
        self.rules: dict[str, ShadowStats] | None = None  # every hybrid rule walked along the output

    def read(self, payload: dict) -> None:
        """Take usage and speculation stats from one response body or stream chunk (later ones win)."""
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.tokens = float(usage["completion_tokens"])
            self.prompt = prompt_tokens(usage)
        stats = spec_stats(payload)
        if stats is not None:
            self.stats, self.positions, self.lookups = stats, position_stats(payload), lookup_drafts(payload)
            self.idle, self.shadows, self.sources = idle_steps(payload), shadow_stats(payload), source_stats(payload)
            self.rules = rule_stats(payload)

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
                                   out.positions, out.prompt, plan.regime, ctx.features, out.lookups, out.shadows,
                                   idle=out.idle, sources=out.sources, rules=out.rules)
    # the holdout / switchback experiment: decode time per token needs a stream's first-token time
    record_experiment(ctx.proxy.policy, plan, tokens, t_first if streamed else None, now)
    record_rate(ctx.proxy.policy, plan, cls, tokens, ctx.t0, t_first if streamed else None, now)
    accesslog.note(prompt_tokens=out.prompt, output_tokens=tokens,
                   ttft_ms=None if t_first is None else accesslog.ms(t_first - ctx.t0))
    mn.observe(m.child(m.e2e, cls, plan.proposer), now - ctx.t0)
    if t_first is not None:
        mn.observe(m.child(m.ttft, cls, plan.proposer), t_first - ctx.t0)
        if streamed and tokens > 1:
            mn.observe(m.child(m.tpot, cls, plan.proposer), (now - t_first) / (tokens - 1))


class _SseScan(relay.Tap):
    """A generation stream through the relay: cut at event boundaries to read usage / speculation chunks,
    dropping the usage the proxy asked for and the client did not (`strip`); and the attempt (`ctx`; None:
    scan only) accounted once, before the client can see the end of its stream ([DONE]), so that anything
    it reads next (metrics, the next decision's alpha) already includes this request; a stream that ends or
    fails without [DONE] is accounted then. One object, one call per chunk: the relay's per-chunk cost."""

    __slots__ = ("scan", "strip", "tail", "events", "payloads", "ctx", "t_first", "accounted")

    def __init__(self, plan: _Plan, ctx: _Attempt | None = None) -> None:
        self.whole = self.ends = False  # relay.Tap's
        self.scan, self.strip = plan.scan, plan.strip_usage
        self.tail = b""
        self.events = 0
        self.payloads: list[dict] = []
        self.ctx = ctx
        self.t_first: float | None = None
        self.accounted = False

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to forward to the client for this upstream chunk."""
        if self.t_first is None:
            self.t_first = time.perf_counter()
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
        if not self.accounted and b"data: [DONE]" in out:
            self._account()
            self.whole = True
        if self.whole:  # the client's stream ends with this write (the worker's rest is drained)
            self.ends = not self.tail and out.endswith(b"data: [DONE]\n\n")
        return out

    def close(self, ended: bool) -> bytes:
        if not self.accounted:
            self._account()
        return self.tail if ended and self.strip else b""

    def outcome(self) -> _Outcome:
        out = _Outcome()
        for p in self.payloads:
            out.read(p)
        if out.tokens is None:
            out.tokens = float(max(0, self.events - 2))  # content events, less the finish chunk and [DONE]
        return out

    def _account(self) -> None:
        if self.ctx is not None:
            _record(self.ctx, self.outcome(), self.t_first, streamed=True)
        self.accounted = True


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
    return web.Response(body=proxy.metrics.exposition(),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})
