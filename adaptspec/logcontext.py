"""The request being served, for every log line written while serving it (stdlib only).

    token = REQUEST.set({"request_id": "3f2a...", ...})   # the proxy's access-log middleware, per request
    log.info("retrying ...")               # -> the record carries request_id="3f2a..." (RequestIdFilter)
    current_request_id()                   # -> "3f2a..." (None outside a request)

One context variable per request holds the request's access-log record (a dict with at least
"request_id"): one `ContextVar.set` per request instead of one per thing remembered.
Lives outside adaptspec.proxy so the CLI's logging setup can install the filter without importing aiohttp.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

REQUEST: ContextVar[dict | None] = ContextVar("adaptspec_request", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context (None outside a request)."""
    record = REQUEST.get()
    return None if record is None else record.get("request_id")


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to records logged inside a request's context (a handler filter: it never drops)."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = current_request_id()
        if rid is not None and not hasattr(record, "request_id"):
            record.request_id = rid
        return True
