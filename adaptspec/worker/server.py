"""The reference worker's OpenAI-compatible HTTP server (FastAPI + uvicorn) around `Engine`.

Endpoints: POST /v1/completions, POST /v1/chat/completions (stream and not), GET /v1/models, /health,
/metrics (vLLM names, see `_metrics.py`); POST /tokenize, /detokenize, /v1/embeddings (`_tokenize.py`).
Per request, the body field
`speculation: {"proposer", "num_speculative_tokens", "content_class", "schedule"}` picks the proposer and k for
that request only (schedule: `[[max_running_batch, cap], ...]`, k capped by the running batch at every step);
the response carries `usage.speculative: {"draft_tokens", "accepted_tokens", "steps", "drafts",
"tried_per_position", "accepted_per_position", "steps_by_gamma"}` (drafts: steps that drafted; steps_by_gamma:
steps per gamma the step allowed, keys as strings; proposer "hybrid" adds "lookup_drafts": the drafting steps
that n-gram lookup served, and "by_source": {"ngram": {...}, "<its model>": {...}}, its decode steps split by draft
source, each in the shadow's form (requests.py `SourceTally`); per draft position j, the drafts
that tried it and those that accepted it, so accepted[j] / tried[j] is the per-position acceptance rate (an
n-gram draft that the text cut short, fewer tokens than the step allowed, counts as tried and missed at the
position where it ends: the rate then prices the truncation);
a finished request not run with n-gram lookup adds "shadow": {"ngram": {...}}, the same counts for lookup
scored along its output, control/shadow.py, and one not run with the per-step hybrid "shadow": {"hybrid": {...}},
the hybrid rule's lookup steps along it, control/hybrid_rule.py)
(stream: in the usage chunk, sent when `stream_options.include_usage` is true; with vLLM's
`continuous_usage_stats` too, every chunk carries the running usage).

Engine-side switch (engines with `set_speculation_cap`): PUT /adaptspec/speculation_cap `{"cap": 0}` caps every
request's gamma from the next step on, running requests included (`{"cap": null}` lifts it); GET returns the
current cap. The model card says `"speculation_cap": true` where it is supported (the proxy's switchback then
switches running requests instead of waiting for them to drain), and /metrics counts output tokens at every
step (`adaptspec:engine_output_tokens_total`, a window's throughput).

Stop strings are matched on text: the output ends before the first stop string. A client that goes away
(stream or not) cancels its generation, which closes the engine's iterator and frees the slot at once.

    app = build_app(engine, WorkerSettings(served_model_name="tiny"))
    uvicorn.run(app, host="127.0.0.1", port=8001)
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from adaptspec.control.hybrid_rule import RULES, lookup_runs, walk_hybrid, walk_rules
from adaptspec.control.shadow import SHADOW_K, NgramIndex, ShadowStats, walk_lookup
from adaptspec.errors import RequestError
from adaptspec.jsonlimits import loads_limited
from adaptspec.worker import _metrics, _tokenize
from adaptspec.worker._asgi import BodyLimit, Guard, SSEResponse, collect_unless_gone, sse
from adaptspec.worker._generation import Job, JobResult, TextTracker
from adaptspec.worker._openai import (
    ChatCompletionRequest,
    CompletionRequest,
    check_unsupported,
    error_body,
    parse_body,
    resolve_speculation,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class WorkerSettings:
    served_model_name: str = "tiny"
    max_model_len: int | None = None  # None -> the engine's
    default_proposer: str = "none"
    default_k: int = 4
    max_k: int = 16
    max_body_bytes: int = 8 * 1024 * 1024
    body_timeout_s: float = 60.0  # the whole request body (408 after)
    model_root: str | None = None
    draft_root: str | None = None


# ---------------------------------------------------------------------------------------------------------
# The application.

_OFFLOAD_BYTES = 64 * 1024
_SHADOW_INLINE_TOKENS = 256  # a finished request's shadow walks run on the event loop up to this many tokens


class _Worker:
    """Request handling around one engine (kept on `app.state.worker`)."""

    def __init__(self, engine: Any, settings: WorkerSettings) -> None:
        self.engine, self.settings = engine, settings
        self.counters = _metrics.ServerCounters()
        self.max_model_len = settings.max_model_len or int(engine.max_model_len)
        self.proposers = tuple(getattr(engine, "proposers", ("ngram", "draft")))
        self.max_k = min(settings.max_k, int(getattr(engine, "max_speculative_tokens", settings.max_k)))
        # every finished request not run with n-gram lookup is scored for it (control/shadow.py), at the
        # policies' largest gamma (8) or the worker's max k
        self.shadow_sizes = getattr(engine, "ngram_sizes", None) if "ngram" in self.proposers else None
        self.shadow_k = max(1, min(self.max_k, SHADOW_K))
        # ... and for the per-step hybrid's lookup steps (control/hybrid_rule.py), every request not run with it
        self.hybrid_rule = getattr(engine, "hybrid_rule", None) if "hybrid" in self.proposers else None
        self.created = int(time.time())
        self._tokenizer = engine.tokenizer
        # a text longer than this cannot fit the context whatever it tokenises to: refuse it without
        # tokenising (a 3.9 MB prompt took seconds of CPU to be refused); x2 leaves room for normalisers
        per_token = getattr(self._tokenizer, "max_token_chars", None)
        self.max_prompt_chars = self.max_model_len * per_token() * 2 if per_token is not None else None
        # bodies and prompts past _OFFLOAD_BYTES are parsed and tokenised here, off the event loop, so
        # /health and running streams keep answering; two threads bound the CPU one client can take
        self._cpu = ThreadPoolExecutor(max_workers=2, thread_name_prefix="adaptspec-worker-cpu")

    async def off_loop(self, size: int, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, in the CPU pool when the input is `size` bytes past _OFFLOAD_BYTES, else inline."""
        if size <= _OFFLOAD_BYTES:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn, *args)

    async def run_cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in the CPU pool (model forwards outside the engine: embeddings)."""
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn, *args)

    # -- tokenizer glue
    def encode(self, text: str) -> list[int]:
        if self.max_prompt_chars is not None and len(text) > self.max_prompt_chars:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, the prompt has "
                f"{len(text)} characters, more than any {self.max_model_len}-token text. Please reduce the "
                "length of the prompt.", param="prompt", code="context_length_exceeded")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # e.g. a lone surrogate escaped in the JSON ("\ud800")
            raise RequestError(f"The text is not valid Unicode: {exc.reason} at position {exc.start}.",
                               code="invalid_value") from None
        enc = getattr(self.engine, "encode", None)
        if enc is not None:
            return list(enc(text))
        out = self._tokenizer.encode(text)
        return list(getattr(out, "ids", out))

    def decode(self, ids: list[int]) -> str:
        dec = getattr(self.engine, "decode", None)
        if dec is not None:
            return dec(ids)
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def render_chat(self, req: ChatCompletionRequest) -> str:
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        render = getattr(self.engine, "apply_chat_template", None) or getattr(
            self._tokenizer, "apply_chat_template", None)
        if render is None or not (getattr(self._tokenizer, "chat_template", None)
                                  or getattr(self.engine, "chat_template", None)):
            raise RequestError("This model has no chat template; use /v1/completions.",
                               code="no_chat_template")
        try:
            return render(messages)
        except ValueError as exc:  # the template's raise_exception(): e.g. roles out of order
            raise RequestError(f"Cannot apply the chat template to these messages: {exc}",
                               param="messages") from None

    # -- validation
    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.settings.served_model_name:
            raise RequestError(f"The model `{name}` does not exist. This worker serves "
                               f"`{self.settings.served_model_name}`.", status=404,
                               type="not_found_error", code="model_not_found", param="model")

    def prompt_ids(self, req: CompletionRequest) -> list[int]:
        p = req.prompt
        if isinstance(p, str):
            return self.encode(p)
        if not p:
            raise RequestError("prompt must not be empty.", param="prompt")
        if isinstance(p[0], int):
            ids = list(p)  # type: ignore[arg-type]
        elif len(p) != 1:
            raise RequestError(f"Only one prompt per request is supported; got {len(p)}.", param="prompt",
                               code="unsupported_value")
        else:
            ids = self.encode(p[0]) if isinstance(p[0], str) else list(p[0])
        vocab = int(getattr(self.engine, "vocab_size", 0) or 0)
        if vocab and any(not 0 <= t < vocab for t in ids):
            raise RequestError(f"prompt token ids must be in [0, {vocab}).", param="prompt")
        return ids

    def make_job(self, req: CompletionRequest | ChatCompletionRequest, prompt_ids: list[int],
                 prefix: str) -> Job:
        check_unsupported(req)
        spec = resolve_speculation(req.speculation, default_proposer=self.settings.default_proposer,
                                   default_k=self.settings.default_k, proposers=self.proposers,
                                   max_k=self.max_k)
        n_prompt, limit = len(prompt_ids), self.max_model_len
        if n_prompt == 0:
            raise RequestError("The prompt is empty after tokenisation.", param="prompt")
        max_tokens = req.max_tokens
        if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
            max_tokens = req.max_completion_tokens
        if n_prompt >= limit or (max_tokens is not None and n_prompt + max_tokens > limit):
            asked = n_prompt + (max_tokens or 0)
            raise RequestError(
                f"This model's maximum context length is {limit} tokens. However, you requested {asked} "
                f"tokens ({n_prompt} in the prompt, {max_tokens or 0} in the completion). Please reduce "
                "the length of the prompt or completion.", param="prompt" if n_prompt >= limit else "max_tokens",
                code="context_length_exceeded")
        if max_tokens is None:
            max_tokens = limit - n_prompt
        return Job(
            request_id=f"{prefix}-{uuid.uuid4().hex}", prompt_ids=prompt_ids, max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            # a top_p below float32's resolution would round to 0 in the sampler; 1e-6 keeps the same top-1 nucleus
            top_p=1.0 if req.top_p is None else max(req.top_p, 1e-6), seed=req.seed, stops=req.stop, spec=spec,
            ignore_eos=req.ignore_eos, stream=req.stream)

    # -- generation
    async def generate(self, job: Job) -> AsyncIterator[str]:
        """Text deltas of one job; fills job.result. Closing it early aborts the engine request."""
        res, tracker = job.result, TextTracker(self.decode, job.stops, lazy=not job.stream)
        arrived = last = time.monotonic()  # for the latency histograms (_metrics.py)
        first = True
        gen = self.engine.generate(self._gen_request(job))
        try:
            async for out in gen:
                new = list(out.new_token_ids)[: job.max_tokens - res.completion_tokens]
                res.completion_tokens += len(new)
                if new:
                    now = time.monotonic()
                    if first:
                        self.counters.first_output(now - arrived, float(getattr(out, "queue_s", 0.0)))
                    else:
                        self.counters.next_output(now - last)
                    first, last = False, now
                res.draft_tokens, res.accepted_tokens, res.steps, res.drafts = (
                    int(out.draft_tokens), int(out.accepted_tokens), int(out.steps), int(out.drafts))
                res.tried_per_position, res.accepted_per_position = out.tried_per_position, out.accepted_per_position
                res.steps_by_gamma = dict(getattr(out, "steps_by_gamma", None) or {})
                if job.spec.proposer == "hybrid" or out.lookup_drafts:  # (hybrid as the default too)
                    res.lookup_drafts = int(out.lookup_drafts)
                if getattr(out, "by_source", None) is not None:
                    res.by_source = out.by_source
                delta = tracker.add(new)
                if tracker.stopped:
                    res.finish_reason = "stop"
                elif out.finished or res.completion_tokens >= job.max_tokens:
                    res.finish_reason = out.finish_reason if out.finished else "length"
                    delta += tracker.flush()
                if delta:
                    yield delta
                if res.finish_reason is not None:
                    break
        finally:
            await gen.aclose()
            res.text = tracker.text
            if res.finish_reason is not None:
                args = (job.spec.proposer, job.prompt_ids, tracker.ids[: res.completion_tokens])
                # one lookup per output position: a long output's walk goes to the CPU pool, off the event loop
                res.shadow, res.hybrid_shadow, res.hybrid_rules = (
                    await self.run_cpu(self._shadows, *args) if res.completion_tokens > _SHADOW_INLINE_TOKENS
                    else self._shadows(*args))
            self.counters.add_steps_by_gamma(res.steps_by_gamma)
            if res.finish_reason is None:
                self.counters.aborted(len(job.prompt_ids), res.completion_tokens)
            else:
                self.counters.finished(len(job.prompt_ids), res.completion_tokens, res.finish_reason,
                                       time.monotonic() - arrived)

    def _shadows(self, proposer: str, prompt_ids: list[int], output_ids: list[int]
                 ) -> tuple[ShadowStats | None, ShadowStats | None, dict[str, ShadowStats] | None]:
        """A finished request's shadows: prompt lookup along its output (not run with n-gram), the per-step
        hybrid's lookup steps (not run with the hybrid), and every rule of `RULES` walked along it (a per-step
        hybrid's worker, every request: the proxy's per-class choice of rule), over one n-gram index."""
        ngram = self.shadow_sizes is not None and proposer != "ngram"
        hybrid = self.hybrid_rule is not None and proposer != "hybrid"
        if not (ngram or self.hybrid_rule is not None):
            return None, None, None
        index = NgramIndex(np.asarray([*prompt_ids, *output_ids], dtype=np.int64), *self.engine.ngram_sizes)
        own = rules = None
        if self.hybrid_rule is not None:
            runs, n = lookup_runs(prompt_ids, output_ids, self.shadow_k, index), len(output_ids)
            rules = walk_rules(runs, n, self.shadow_k)
            if hybrid:  # the worker's own rule is usually one of them (the default's): walked once
                same = next((name for name, rule in RULES.items() if rule == self.hybrid_rule), None)
                own = rules[same] if same is not None else walk_hybrid(runs, n, self.hybrid_rule, self.shadow_k)
        return walk_lookup(prompt_ids, output_ids, self.shadow_k, index) if ngram else None, own, rules

    def _gen_request(self, job: Job) -> Any:
        from adaptspec.worker.engine import GenRequest

        return GenRequest(
            request_id=job.request_id, prompt_token_ids=job.prompt_ids, max_tokens=job.max_tokens,
            temperature=job.temperature, top_p=job.top_p, seed=job.seed, proposer=job.spec.proposer,
            num_speculative_tokens=job.spec.k, content_class=job.spec.content_class,
            ignore_eos=job.ignore_eos, schedule=job.spec.schedule,
            hybrid_rule=job.spec.hybrid_rule)

    async def collect(self, job: Job) -> JobResult:
        gen = self.generate(job)
        try:
            async for _ in gen:
                pass
        finally:
            await gen.aclose()
        return job.result

    def usage(self, job: Job) -> dict:
        n_prompt, n_out = len(job.prompt_ids), job.result.completion_tokens
        return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out,
                "speculative": job.result.speculative()}


def _json(obj: dict, status: int = 200) -> Response:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    # a lone surrogate from the client ("\ud800" in a field echoed by an error message) cannot be UTF-8:
    # write it as the JSON escape it came in as
    return Response(text.encode("utf-8", "backslashreplace"), status_code=status, media_type="application/json")


def build_app(engine: Any, settings: WorkerSettings | None = None) -> FastAPI:
    """The ASGI app serving `engine` (an `adaptspec.worker.engine.Engine` or anything with its API)."""
    settings = settings or WorkerSettings()
    app = FastAPI(title="adaptspec worker", docs_url=None, redoc_url=None, openapi_url=None)
    worker = _Worker(engine, settings)
    app.state.worker = worker
    _add_error_handlers(app)
    capped = callable(getattr(engine, "set_speculation_cap", None))
    _add_info_routes(app, engine, worker, settings, capped)
    if capped:
        _add_cap_routes(app, engine)
    _add_generation_routes(app, worker, settings)
    _tokenize.add_routes(app, worker, _json)
    return Guard(BodyLimit(app, settings.max_body_bytes, settings.body_timeout_s))  # type: ignore[return-value]


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as an OpenAI-style JSON error body: request errors with their status, a client gone while
    sending (499, unread), HTTP errors (404 naming the path), anything else a logged 500."""

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> Response:
        return _json(error_body(exc.status, exc.message, type=exc.type, code=exc.code, param=exc.param),
                     exc.status)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        log.info("client disconnected while sending %s %s", request.method, request.url.path)
        return Response(status_code=499)  # nobody reads it; not an error of ours

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = (f"Not found: {request.method} {request.url.path}" if exc.status_code == 404
                   else str(exc.detail))
        return _json(error_body(exc.status_code, message), exc.status_code)

    @app.exception_handler(Exception)
    async def _server_error(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error in request handler")
        return _json(error_body(500, f"Internal server error: {type(exc).__name__}"), 500)


def _add_info_routes(app: FastAPI, engine: Any, worker: _Worker, settings: WorkerSettings, capped: bool) -> None:
    """GET /health (the proposers the proxy offers), /v1/models (the model card; `capped`: the engine takes the
    worker-wide speculation cap) and /metrics (Prometheus text)."""

    @app.get("/health")
    async def health() -> Response:
        alive = getattr(engine, "is_alive", None)
        if alive is not None and not (alive() if callable(alive) else alive):
            return _json(error_body(503, "engine loop is not running"), 503)
        return _json({"status": "ok", "proposers": list(worker.proposers)})  # the proxy offers these

    @app.get("/v1/models")
    async def models() -> Response:
        card = {"id": settings.served_model_name, "object": "model", "created": worker.created,
                "owned_by": "adaptspec", "root": settings.model_root or settings.served_model_name,
                "parent": None, "max_model_len": worker.max_model_len}
        if capped:
            card["speculation_cap"] = True  # the engine-side switch (PUT /adaptspec/speculation_cap)
        return _json({"object": "list", "data": [card]})

    @app.get("/metrics")
    async def metrics() -> Response:
        body = _metrics.render(engine.metrics(), worker.counters, settings.served_model_name)
        return Response(body, media_type=_metrics.CONTENT_TYPE)


def _add_generation_routes(app: FastAPI, worker: _Worker, settings: WorkerSettings) -> None:
    """POST /v1/completions and /v1/chat/completions: parsed off the loop, queued as a job on the engine, answered
    whole or streamed as SSE chunks (499 when the client went away before a whole answer)."""

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        raw = await request.body()
        req: CompletionRequest = await worker.off_loop(len(raw), parse_body, raw, CompletionRequest)
        worker.check_model(req.model)
        job = worker.make_job(req, await worker.off_loop(len(raw), worker.prompt_ids, req), "cmpl")
        created = int(time.time())

        def chunk(text: str, finish: str | None) -> dict:
            return {"id": job.request_id, "object": "text_completion", "created": created,
                    "model": settings.served_model_name,
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}

        if req.stream:
            return SSEResponse(_stream(worker, job, req, chunk, created, "text_completion"))
        res = await collect_unless_gone(request, worker, job)
        if res is None:
            return Response(status_code=499)
        body = chunk(res.text, res.finish_reason)
        body["usage"] = worker.usage(job)
        return _json(body)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        raw = await request.body()
        req: ChatCompletionRequest = await worker.off_loop(len(raw), parse_body, raw, ChatCompletionRequest)
        worker.check_model(req.model)
        prompt = await worker.off_loop(len(raw), lambda: worker.encode(worker.render_chat(req)))
        job = worker.make_job(req, prompt, "chatcmpl")
        created = int(time.time())

        def chunk(text: str, finish: str | None, first: bool = False) -> dict:
            delta: dict[str, str] = {"role": "assistant", "content": text} if first else (
                {"content": text} if text else {})
            return {"id": job.request_id, "object": "chat.completion.chunk", "created": created,
                    "model": settings.served_model_name,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        if req.stream:
            return SSEResponse(_stream(worker, job, req, chunk, created, "chat.completion.chunk"))
        res = await collect_unless_gone(request, worker, job)
        if res is None:
            return Response(status_code=499)
        return _json({
            "id": job.request_id, "object": "chat.completion", "created": created,
            "model": settings.served_model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": res.text},
                         "logprobs": None, "finish_reason": res.finish_reason}],
            "usage": worker.usage(job),
        })


def _add_cap_routes(app: FastAPI, engine: Any) -> None:
    """GET / PUT /adaptspec/speculation_cap: the worker-wide gamma cap (the proxy's engine-side switch)."""

    @app.get("/adaptspec/speculation_cap")
    async def get_cap() -> Response:
        return _json({"cap": engine.speculation_cap})

    @app.put("/adaptspec/speculation_cap")
    async def put_cap(request: Request) -> Response:
        data = loads_limited(await request.body())
        if not isinstance(data, dict) or "cap" not in data:
            raise RequestError('Request body must be a JSON object {"cap": null | integer}.', param="cap",
                               code="invalid_value")
        try:
            engine.set_speculation_cap(data["cap"])
        except ValueError as exc:
            raise RequestError(f"Invalid value for 'cap': {exc}", param="cap", code="invalid_value") from None
        return _json({"cap": engine.speculation_cap})


async def _stream(worker: _Worker, job: Job, req: Any, chunk: Callable[..., dict], created: int,
                  obj: str) -> AsyncIterator[str]:
    chat = obj == "chat.completion.chunk"
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    # vLLM's extension: cumulative usage on every chunk (load generators count tokens per chunk with it)
    continuous = include_usage and bool(req.stream_options.continuous_usage_stats)
    if chat:
        yield sse(chunk("", None, first=True))
    gen = worker.generate(job)
    try:
        async for delta in gen:
            body = chunk(delta, None)
            if continuous:
                body["usage"] = worker.usage(job)
            yield sse(body)
    except RequestError as exc:  # refused by the engine after the 200 went out: an error event, as vLLM does
        yield sse(error_body(exc.status, exc.message, type=exc.type, code=exc.code, param=exc.param))
        yield "data: [DONE]\n\n"
        return
    except RuntimeError as exc:  # the engine step failed (logged by the engine)
        yield sse(error_body(500, str(exc)))
        yield "data: [DONE]\n\n"
        return
    finally:
        await gen.aclose()
    yield sse(chunk("", job.result.finish_reason))
    if include_usage:
        yield sse({"id": job.request_id, "object": obj, "created": created,
                    "model": worker.settings.served_model_name, "choices": [], "usage": worker.usage(job)})
    yield "data: [DONE]\n\n"


# ---------------------------------------------------------------------------------------------------------
# Running it.


class ServerThread:
    """uvicorn serving an app on a background thread (tests, the embedded worker of `adaptspec serve`)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        import uvicorn

        self._config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                                      access_log=False)
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._server.run, name="adaptspec-worker-http", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"worker HTTP server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
