"""Pass-through endpoints: POST /v1/embeddings, /v1/responses, /tokenize, /detokenize.

No classification and no speculation decision: the body goes unchanged to the least-loaded healthy worker
whose engine offers the endpoint (`Engine.passthrough`, engines.py) and that serves the body's `model` (any
such worker when the body names none, as /tokenize allows). Everything else is the generation path's: API
keys, the body limits (size after decompression, read timeout, JSON depth; request.py), the request id and
trace context forwarded upstream, the access-log line (class / proposer / gamma stay null: no decision), and
the relay (relay.py, on the same upstream client): failures before the answer's first byte (refused
connection, timeout, ejection) move the request to another worker. Answers, errors included, are relayed as
the worker wrote them; an SSE stream (/v1/responses with `"stream": true`) chunk by chunk, ended with an SSE
error event when its worker stalls or drops (a silent stream on a worker that is alive waits, as a
generation's does).

Errors of the proxy's own: 404 `endpoint_not_supported` when no configured worker's engine offers the
endpoint (for the model), 404 `model_not_found` for a model nobody serves, 503 when no offering worker is
healthy. Counted in `adaptspec_passthrough_requests_total{endpoint, worker, code}`.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from adaptspec.errors import RequestError
from adaptspec.jsonlimits import loads_limited
from adaptspec.proxy import accesslog, relay
from adaptspec.proxy.engines import PASSTHROUGH
from adaptspec.proxy.metrics import code_label
from adaptspec.proxy.request import read_body
from adaptspec.proxy.upstream import Pools, Worker


def add_routes(app: web.Application) -> None:
    for path in PASSTHROUGH:
        app.router.add_post(path, _handler(path))


def _handler(path: str):
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _Call(request, path).run()

    handle.__name__ = f"passthrough_{path.rsplit('/', 1)[-1]}"
    return handle


def offering(pools: Pools, path: str, model: str | None) -> list[Worker]:
    """Workers (healthy or not) whose engine offers `path` and that serve `model` (any model when None)."""
    workers = pools.serving(model) if model is not None else list(pools.workers.values())
    found = [w for w in workers if path in w.adapter.passthrough]
    if not found:
        which = f" for the model {model!r}" if model is not None else ""
        raise RequestError(f"{path} is not offered by any worker{which}: their engines do not serve it.",
                           status=404, type="invalid_request_error", code="endpoint_not_supported")
    return found


def _parse(raw: bytes) -> tuple[str | None, bool]:
    """(model or None, stream) of a JSON object body; the rest is the worker's to validate."""
    body = loads_limited(raw)  # depth and number limits: 400, never a RecursionError / ValueError 500
    if not isinstance(body, dict):
        raise RequestError("Request body must be a JSON object.", code="invalid_json")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise RequestError(f"Invalid value for 'model': expected a non-empty string, got {model!r}.",
                           code="invalid_type", param="model")
    return model, body.get("stream") is True


class _Call(relay.Exchange):
    """One pass-through request: read and check the body, pick a worker, then the relay (relay.py) sends it,
    moving it on failures before the first byte, and relays the answer as is. `worker` ends as the worker
    that answered."""

    __slots__ = ("raw", "candidates", "worker")

    def __init__(self, request: web.Request, path: str):
        self.request, self.path, self.proxy = request, path, request.app["proxy"]
        self.raw, self.stream = b"", False
        self.candidates: list[Worker] = []
        self.worker: Worker | None = None

    @property
    def serving(self) -> str:
        return f"offering {self.path}"

    async def run(self) -> web.StreamResponse:
        proxy, status = self.proxy, 500
        try:
            self.raw = await read_body(self.request, proxy.max_body_bytes, proxy.body_timeout_s)
            model, self.stream = _parse(self.raw)
            accesslog.note(model=model)
            self.candidates = offering(proxy.pools, self.path, model)
            self.worker = self._pick()
            resp, status = await relay.dispatch(self)
            return resp
        except RequestError as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # client went away (nginx's convention)
            raise
        finally:
            name = "none" if self.worker is None else self.worker.name
            accesslog.note(status=status, **({} if self.worker is None else {"worker": name}))
            proxy.metrics.child(proxy.metrics.passthrough, self.path, name, code_label(status)).inc()

    def _pick(self, exclude: set[str] | frozenset[str] = frozenset()) -> Worker:
        """The least-loaded healthy candidate (in flight from every replica + the worker's own batch)."""
        remote = self.proxy.state.remote_inflight
        eligible = Pools.eligible(self.candidates, exclude)  # 503 when none is healthy
        return min(eligible, key=lambda w: w.state(remote.get(w.name, 0)).load)

    # -- relay.Exchange ---------------------------------------------------------------------------------
    def target(self) -> tuple[Worker, bytes]:
        return self.worker, self.raw  # the body unchanged

    def move(self, exclude: set[str]) -> None:
        self.worker = self._pick(exclude)

    def headers(self) -> dict[str, str]:
        return {"x-adaptspec-worker": self.worker.name}  # a config name: a closed set
