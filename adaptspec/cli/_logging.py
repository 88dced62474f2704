"""Logging setup for every `adaptspec` command: `--log-level`, `--log-format text|json`, on stderr.

    --log-format text   2026-12-01 14:40:15,123 INFO adaptspec.serve: message
    --log-format json   {"ts": "2026-12-01T14:40:15.123Z", "level": "INFO", "logger": "adaptspec.serve",
                         "message": "...", <fields passed as `extra=`>}   one object a line

Fields given to a log call through `extra={...}` (a request id, a worker name) become keys of the JSON object,
so log shippers can index them without parsing the message.
"""

from __future__ import annotations

import json
import logging
import sys
import time

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


def configure(level: str, fmt: str) -> None:
    """Replace the root handlers: one stderr handler at `level` in format `fmt` (validated by the parser)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
