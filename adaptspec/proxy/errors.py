"""OpenAI-style JSON errors for the proxy: `{"error": {"message", "type", "code", "param"}}`.

Every client mistake becomes a 4xx with this body (never a 500); the middleware also turns aiohttp's
own HTTP exceptions (404 route, 405 method, 413 body) into the same shape.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from adaptspec.errors import RequestError

log = logging.getLogger(__name__)

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_response(status: int, message: str, *, type: str | None = None, code: str | None = None,
                   param: str | None = None, headers: dict | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type or _TYPE_BY_STATUS.get(status, "server_error"),
                      "code": code, "param": param}}
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json",
                        headers=headers)


def from_request_error(exc: RequestError) -> web.Response:
    return error_response(exc.status, exc.message, type=exc.type, code=exc.code, param=exc.param)


def sse_error_event(message: str, *, type: str = "upstream_error", code: str = "upstream_disconnected") -> bytes:
    """A final SSE event the `openai` client raises as an APIError."""
    payload = {"error": {"message": message, "type": type, "code": code, "param": None}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except RequestError as exc:
        return from_request_error(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(exc.status)
        return error_response(exc.status, exc.reason if exc.text is None else exc.text.removeprefix(
            f"{exc.status}: "), code=code, headers={"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None)
    except ConnectionResetError:
        raise  # the client is gone; nobody to answer
    except Exception:
        log.exception("internal error while handling %s %s", request.method, request.path)
        return error_response(500, "Internal error in the adaptspec proxy (logged).", type="server_error",
                              code="internal_error")
