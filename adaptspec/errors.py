"""Exceptions raised by adaptspec.

    AdaptspecError
    ├── ConfigError            bad YAML / policy / pool config (names file, key and value)
    ├── ModelLoadError         a model directory that cannot be loaded
    └── RequestError           a bad client request (carries HTTP status + OpenAI error type/code)
        └── UpstreamError      no eligible / healthy upstream (503) or upstream failure (502)
"""

from __future__ import annotations

# OpenAI error `type` by HTTP status, where the raiser names none
_TYPE_BY_STATUS = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
    415: "invalid_request_error", 422: "invalid_request_error", 431: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(status: int, message: str, *, type: str | None = None, code: object = None,
               param: str | None = None) -> dict:
    """The OpenAI error body `{"error": {"message", "type", "code", "param"}}`, built here for the proxy and
    the worker alike; `type` defaults by status (5xx: "server_error")."""
    return {"error": {"message": message, "type": type or _TYPE_BY_STATUS.get(status, "server_error"),
                      "code": code, "param": param}}


class AdaptspecError(Exception):
    pass


class ConfigError(AdaptspecError):
    def __init__(self, message: str, *, file: str | None = None, key: str | None = None, value: object = None):
        self.file, self.key, self.value = file, key, value
        where = []
        if file:
            where.append(f"file {file!r}")
        if key:
            where.append(f"key {key!r}")
        if value is not None:
            where.append(f"value {value!r}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class ModelLoadError(AdaptspecError):
    pass


class RequestError(AdaptspecError):
    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.type, self.code, self.param = message, status, type, code, param

    def to_dict(self) -> dict:
        return error_body(self.status, self.message, type=self.type, code=self.code, param=self.param)


class UpstreamError(RequestError):
    def __init__(self, message: str, *, status: int = 503, code: str | None = "upstream_unavailable"):
        super().__init__(message, status=status, type="upstream_error", code=code)
