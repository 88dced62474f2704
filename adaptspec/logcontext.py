"""The id of the request being served, for every log line written while serving it (stdlib only).

    token = REQUEST_ID.set("3f2a...")      # the proxy's access-log middleware, per request (one task each)
    log.info("retrying ...")               # -> the record carries request_id="3f2a..." (RequestIdFilter)

Lives outside adaptspec.proxy so the CLI's logging setup can install the filter without importing aiohttp.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

REQUEST_ID: ContextVar[str | None] = ContextVar("adaptspec_request_id", default=None)


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to records logged inside a request's context (a handler filter: it never drops)."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        if rid is not None and not hasattr(record, "request_id"):
            record.request_id = rid
        return True
