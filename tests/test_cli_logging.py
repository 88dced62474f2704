"""The JSON log format: one parseable object a line, with the fields passed through `extra=`."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys

from adaptspec.cli._logging import BufferedLineHandler, JsonFormatter


def record(msg: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("adaptspec.proxy", logging.WARNING, __file__, 1, msg, args, exc_info)
    rec.__dict__.update(extra)
    return rec


def test_message_level_logger_and_utc_time():
    out = json.loads(JsonFormatter().format(record("worker %s down after %d tries", "a0", 3)))
    assert out["message"] == "worker a0 down after 3 tries"
    assert out["level"] == "WARNING" and out["logger"] == "adaptspec.proxy"
    assert out["ts"].endswith("Z") and len(out["ts"]) == len("2026-12-01T14:40:15.123Z")
    assert set(out) == {"ts", "level", "logger", "message"}


def test_extra_fields_become_keys_and_non_json_values_are_strings():
    out = json.loads(JsonFormatter().format(record("done", request_id="r-1", status=200, worker=object())))
    assert out["request_id"] == "r-1" and out["status"] == 200 and out["worker"].startswith("<object")


def test_exception_is_one_line_of_json():
    try:
        raise ValueError("boom")
    except ValueError:
        line = JsonFormatter().format(record("failed", exc_info=sys.exc_info()))
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exception"]


def test_lines_logged_inside_a_request_carry_its_id_in_both_formats():
    from adaptspec.cli._logging import TextFormatter
    from adaptspec.logcontext import REQUEST, RequestIdFilter

    outside = record("idle")
    assert RequestIdFilter().filter(outside) and not hasattr(outside, "request_id")
    token = REQUEST.set({"request_id": "req-7"})
    try:
        inside = record("retrying on %s", "w1")
        assert RequestIdFilter().filter(inside)
    finally:
        REQUEST.reset(token)
    assert json.loads(JsonFormatter().format(inside))["request_id"] == "req-7"
    assert TextFormatter().format(inside).endswith("adaptspec.proxy: retrying on w1 request_id=req-7")
    assert TextFormatter().format(outside).endswith("adaptspec.proxy: idle")


def test_buffered_lines_wait_for_the_timer_or_the_size_limit_and_keep_their_order():
    out = io.StringIO()
    handler = BufferedLineHandler(out, flush_s=0.05, max_bytes=30)

    async def serve() -> None:
        handler.handle(record("a"))
        handler.handle(record("b"))
        assert out.getvalue() == ""  # waiting for the timer
        await asyncio.sleep(0.15)  # past the timer's deadline: it ran before this sleep ends
        assert out.getvalue() == "a\nb\n"
        handler.handle(record("x" * 40))  # over max_bytes: written at once
        assert out.getvalue() == "a\nb\n" + "x" * 40 + "\n"
        handler.handle(record("c"))

    asyncio.run(serve())
    assert out.getvalue().endswith("x\n")  # "c" waits ...
    handler.close()  # ... until close (logging.shutdown at exit)
    assert out.getvalue().splitlines() == ["a", "b", "x" * 40, "c"]
    handler.handle(record("no loop"))  # outside an event loop: written at once
    assert out.getvalue().endswith("no loop\n")


def test_a_failing_stream_is_reported_not_raised(capsys):
    class Broken(io.StringIO):
        def write(self, text):
            raise OSError(28, "No space left on device")

    handler = BufferedLineHandler(Broken())
    handler.handle(record("lost"))  # no loop: written (and failing) at once
    assert "No space left on device" in capsys.readouterr().err
