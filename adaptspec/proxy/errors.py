"""OpenAI-style JSON errors for the proxy: `{"error": {"message", "type", "code", "param"}}`.

Every client mistake becomes a 4xx with this body (never a 500); the middleware also turns aiohttp's
own HTTP exceptions (404 route, 405 method, 413 body) into the same shape.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler

from adaptspec.errors import RequestError, error_body

log = logging.getLogger(__name__)

def error_response(status: int, message: str, *, type: str | None = None, code: str | None = None,
                   param: str | None = None, headers: dict | None = None) -> web.Response:
    body = error_body(status, message, type=type, code=code, param=param)
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json",
                        headers=headers)


def from_request_error(exc: RequestError) -> web.Response:
    resp = error_response(exc.status, exc.message, type=exc.type, code=exc.code, param=exc.param)
    if exc.status in (408, 413):
        resp.force_close()  # the rest of the body is unread: close instead of draining it for keep-alive
    return resp


def sse_error_event(message: str, *, type: str = "upstream_error", code: str = "upstream_disconnected") -> bytes:
    """A final SSE event the `openai` client raises as an APIError."""
    payload = error_body(502, message, type=type, code=code)
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _parser_status(exc: BaseException | None) -> int:
    if isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and "Too many headers" in exc.message):
        return 431  # Request Header Fields Too Large
    return 400


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler with its own error answers (bad request line or headers, header limits)
    in the OpenAI JSON shape instead of plain text: 431 for oversized/too many headers, 400 for the rest."""

    __slots__ = ()

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status == 500:
            return super().handle_error(request, status, exc, message)  # logs with the traceback
        status = _parser_status(exc)
        log.debug("bad HTTP request from %s: %s", request.remote, exc)  # the client's problem, not a log line each
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        text = {431: "Request header fields too large or too many (limits: 8190 bytes per field, 128 fields)."}.get(
            status, f"Malformed HTTP request: {message or exc}")
        resp = error_response(status, text, code="headers_too_large" if status == 431 else "bad_request")
        resp.force_close()
        return resp


class JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorHandler(self, loop=self._loop, **self._kwargs)


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
