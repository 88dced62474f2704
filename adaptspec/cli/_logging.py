"""Logging setup for every `adaptspec` command: `--log-level`, `--log-format text|json`, on stderr.

    --log-format text   2026-12-01 14:40:15,123 INFO adaptspec.serve: message
    --log-format json   {"ts": "2026-12-01T14:40:15.123Z", "level": "INFO", "logger": "adaptspec.serve",
                         "message": "...", <fields passed as `extra=`>}   one object a line

Fields given to a log call through `extra={...}` (a worker name) become keys of the JSON object, so log
shippers can index them without parsing the message. Lines logged while the proxy serves a request carry its
`request_id` (adaptspec.logcontext), in both formats (text: a trailing ` request_id=...`).
"""

from __future__ import annotations

import json
import logging
import sys
import time

from adaptspec.logcontext import RequestIdFilter

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# attributes every LogRecord has; anything else on a record came from `extra=`
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", None)
        return f"{line} request_id={rid}" if rid is not None else line


def configure_access_log(target: str) -> None:
    """The proxy's access log (logger `adaptspec.access`, one JSON object a line, independent of --log-level
    and --log-format): "-" for stderr, "off", or a file to append to."""
    log = logging.getLogger("adaptspec.access")
    log.propagate = False
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    if target == "off":
        log.setLevel(logging.CRITICAL + 1)
        return
    handler = logging.StreamHandler(sys.stderr) if target == "-" else logging.FileHandler(target)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def configure(level: str, fmt: str) -> None:
    """Replace the root handlers: one stderr handler at `level` in format `fmt` (validated by the parser)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
