"""Logging setup for every `adaptspec` command: `--log-level`, `--log-format text|json`, on stderr.

    --log-format text   2026-12-01 14:40:15,123 INFO adaptspec.serve: message
    --log-format json   {"ts": "2026-12-01T14:40:15.123Z", "level": "INFO", "logger": "adaptspec.serve",
                         "message": "...", <fields passed as `extra=`>}   one object a line

Fields given to a log call through `extra={...}` (a worker name) become keys of the JSON object, so log
shippers can index them without parsing the message. Lines logged while the proxy serves a request carry its
`request_id` (adaptspec.logcontext), in both formats (text: a trailing ` request_id=...`).
"""

from __future__ import annotations

import asyncio
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


class BufferedLineHandler(logging.Handler):
    """Formatted records as lines, written in batches: once `max_bytes` are waiting, else `flush_s` after the
    first waiting line (a timer on the running event loop); at once where no loop runs, and on flush/close
    (logging.shutdown at exit). One write per batch instead of one per request: the access log's write cost
    ~120 µs per request at c=1 on the 2-core box (docs/results/hop.md); nginx's `access_log ... buffer= flush=`."""

    def __init__(self, stream, *, flush_s: float = 0.1, max_bytes: int = 64 * 1024, owns_stream: bool = False):
        super().__init__()
        self.stream, self.flush_s, self.max_bytes, self._owns = stream, flush_s, max_bytes, owns_stream
        self._lines: list[str] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # logging's contract: a bad record is reported by handleError, never raised
            self.handleError(record)
            return
        self.add_line(line)

    def add_line(self, line: str) -> None:
        """A line formatted already, batched as emit() batches a record's (the access log's fast path:
        proxy/accesslog.py, when this handler's formatter is plain "%(message)s"). Without the lock: called
        by emit() (which holds it) or from the event loop's thread, where the flush timer runs too."""
        self._lines.append(line)
        self._size += len(line) + 1
        if self._size >= self.max_bytes:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._timer = loop.call_later(self.flush_s, self.flush)

    def flush(self) -> None:
        with self.lock:
            self._write()

    def _write(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._lines:
            return
        lines, self._lines, self._size = self._lines, [], 0
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # disk full, closed stream: reported as logging reports it, serving goes on
            self.handleError(logging.makeLogRecord({"msg": "a batch of access-log lines"}))

    def close(self) -> None:
        self.flush()
        if self._owns:
            self.stream.close()
        super().close()


def configure_access_log(target: str) -> None:
    """The proxy's access log (logger `adaptspec.access`, one JSON object a line, independent of --log-level
    and --log-format): "-" for stderr, "off", or a file to append to. Lines are written in batches, at most
    0.1 s late (BufferedLineHandler)."""
    log = logging.getLogger("adaptspec.access")
    log.propagate = False
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    if target == "off":
        log.setLevel(logging.CRITICAL + 1)
        return
    handler = BufferedLineHandler(sys.stderr) if target == "-" else \
        BufferedLineHandler(open(target, "a", encoding="utf-8"), owns_stream=True)  # noqa: SIM115 (closed by close())
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def configure(level: str, fmt: str) -> None:
    """Replace the root handlers: one stderr handler at `level` in format `fmt` (validated by the parser)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
