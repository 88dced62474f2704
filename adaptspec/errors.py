"""Exceptions raised by adaptspec.

    AdaptspecError
    ├── ConfigError            bad YAML / policy / pool config (names file, key and value)
    ├── ModelLoadError         a model directory that cannot be loaded
    └── RequestError           a bad client request (carries HTTP status + OpenAI error type/code)
        └── UpstreamError      no eligible / healthy upstream (503) or upstream failure (502)
"""

from __future__ import annotations


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
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}


class UpstreamError(RequestError):
    def __init__(self, message: str, *, status: int = 503, code: str | None = "upstream_unavailable"):
        super().__init__(message, status=status, type="upstream_error", code=code)
