"""The malformed-request corpus (tests/faults/corpus.py, 481 cases) against the proxy and the worker, and
2,000 hostile requests against one proxy process with its memory, /metrics size and open fds measured.

Every case must get an answer (no hang, no silent close), never a 5xx, and from the proxy always the
OpenAI JSON error shape. Runs on loopback in ~1 min on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import urllib.request
from pathlib import Path

import pytest
from proxy.conftest import pool

from .corpus import Case, corpus, hostile, send

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
SERVER = {"scrape_interval_s": 0.5, "max_body_bytes": 1 << 20, "body_timeout_s": 2, "keepalive_timeout_s": 2,
          "allow_client_speculation": True}


async def run_cases(url: str, cases: list[Case], concurrency: int = 16, timeout: float = 20.0):
    host, port = url.removeprefix("http://").split(":")
    sem = asyncio.Semaphore(concurrency)

    async def one(case: Case):
        async with sem:
            try:
                return case, await send(host, int(port), case.raw, timeout=timeout)
            except TimeoutError:
                return case, ("hung", b"", b"")

    return await asyncio.gather(*(one(c) for c in cases))


def json_error(body: bytes) -> dict | None:
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return err if isinstance(err, dict) and err.get("message") else None


def check(results, *, json_errors) -> dict[int, int]:
    by_status: dict[int, int] = {}
    bad = []
    for case, (status, _head, body) in results:
        by_status[status] = by_status.get(status, 0) + 1
        if status is None or status == "hung" or status >= 500:
            bad.append((case.name, status, body[:200]))
        elif status >= 400 and json_errors(case) and json_error(body) is None:
            bad.append((case.name, status, "not JSON", body[:200]))
    assert not bad, bad
    return by_status


def proc_figures(pid: int) -> tuple[float, int]:
    """(RSS in MB, open fds) of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def metrics_size(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return len(r.read())


async def test_corpus_against_the_proxy(upstreams, proxies):
    up = upstreams("w0")
    px = proxies({"pools": [pool("p", [up], profile="cpu-tiny")], "server": SERVER})
    cases = corpus(seed=0)
    assert len(cases) >= 300
    by_status = check(await run_cases(px.url, cases), json_errors=lambda case: True)
    assert by_status.get(200, 0) > 0 and by_status.get(400, 0) > 100, by_status
    assert by_status.get(413, 0) >= 3 and by_status.get(431, 0) >= 4 and by_status.get(408, 0) >= 1, by_status
    assert "Traceback" not in px.log()


async def test_corpus_against_the_worker():
    from adaptspec.worker.engine import Engine
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=8, max_model_len=256,
                              num_threads=1)
    settings = WorkerSettings(served_model_name="tiny", max_body_bytes=1 << 20, body_timeout_s=2)
    server = ServerThread(build_app(engine, settings), log_level="critical").start()
    try:
        # uvicorn answers HTTP-level errors itself, in plain text: the application's answers must be JSON
        cases = corpus(seed=0)
        by_status = check(await run_cases(server.url, cases), json_errors=lambda case: not case.protocol)
        assert by_status.get(200, 0) > 0 and by_status.get(400, 0) > 100, by_status
    finally:
        server.stop()
        engine.stop()


async def test_2000_hostile_requests_leave_memory_metrics_and_fds_bounded(upstreams, proxies):
    up = upstreams("w0")
    px = proxies({"pools": [pool("p", [up], profile="cpu-tiny")], "server": SERVER})
    warm = hostile(200, seed=7)
    check(await run_cases(px.url, warm), json_errors=lambda case: True)  # warm caches, pools, allocator
    rss0, fds0 = proc_figures(px.proc.pid)
    size0 = metrics_size(px.url)
    check(await run_cases(px.url, hostile(2000)), json_errors=lambda case: True)
    await asyncio.sleep(0.5)
    rss1, fds1 = proc_figures(px.proc.pid)
    size1 = metrics_size(px.url)
    log.info("proxy over 2000 hostile requests: RSS %.1f -> %.1f MB, /metrics %d -> %d bytes, fds %d -> %d",
             rss0, rss1, size0, size1, fds0, fds1)
    assert rss1 - rss0 < 50, (rss0, rss1)
    assert size1 - size0 < 100_000, (size0, size1)
    # client connections closed; the idle upstream pool may grow up to the run's concurrency (16: run_cases),
    # as many as were ever in flight at once
    assert fds1 <= fds0 + 16 + 5, (fds0, fds1)
