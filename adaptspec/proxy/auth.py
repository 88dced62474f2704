"""Client authentication: with `server.api_keys_env` set, every route but the probes and the metrics needs one of
the keys (`Authorization: Bearer <key>`, or `x-api-key`), checked once per request in `middleware`, before any
handler reads the body. A missing or wrong key is a 401 with an OpenAI-style body (`invalid_api_key`); the keys
are the proxy's current ones (a config reload may change them)."""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web

from adaptspec.errors import RequestError

# open to anyone: liveness / readiness probes, the version, Prometheus' scrape
PUBLIC_PATHS = frozenset({"/health", "/health/live", "/health/ready", "/version", "/metrics"})


def check(api_keys: Collection[str], request: web.Request) -> None:
    """Raise a 401 `RequestError` unless the request carries one of `api_keys` (none configured: open)."""
    if not api_keys:
        return
    auth = request.headers.get("Authorization", "")
    token = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key")
    if token not in api_keys:
        raise RequestError("Incorrect or missing API key (send 'Authorization: Bearer <key>').", status=401,
                           type="authentication_error", code="invalid_api_key")


@web.middleware
async def middleware(request: web.Request, handler):
    keys = request.app["proxy"].api_keys
    if keys and request.path not in PUBLIC_PATHS:
        check(keys, request)
    return await handler(request)
