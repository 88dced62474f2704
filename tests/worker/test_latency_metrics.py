"""The reference worker's request latency histograms (vLLM's names and buckets, worker/_metrics.py) and its
steps-by-gamma counter: bucket arithmetic in closed form, and the counts a known set of requests must leave on a
real worker's /metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adaptspec.control import metric_names as names
from adaptspec.worker._metrics import Histogram

ASSETS = Path(__file__).resolve().parents[2] / "adaptspec" / "assets"
LATENCY = (names.VLLM_TTFT, names.VLLM_ITL, names.VLLM_E2E, names.VLLM_QUEUE_TIME)


def test_histogram_buckets_are_cumulative_and_upper_inclusive():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert h.sum == pytest.approx(4.65)


def _histograms(url: str) -> dict[str, dict[str, float]]:
    """{family: {"count", "sum", "<le>": cumulative}} from the worker's /metrics."""
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        if fam.name in LATENCY:
            row = out.setdefault(fam.name, {})
            for s in fam.samples:
                assert s.labels["model_name"] == "tiny" and s.labels["engine"] == "0"
                key = s.labels["le"] if s.name.endswith("_bucket") else s.name.rsplit("_", 1)[1]
                row[key] = s.value
    return out


@pytest.mark.integration
def test_a_known_workload_leaves_known_counts():
    from adaptspec.worker.engine import Engine
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    # one slot: of two requests sent together, the second waits in the queue until the first is done
    engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=1, max_model_len=256,
                              num_threads=1)
    server = ServerThread(build_app(engine, WorkerSettings(served_model_name="tiny"))).start()
    try:
        before = _histograms(server.url)
        assert set(before) == set(LATENCY) and all(h["count"] == 0 for h in before.values())

        async def two() -> None:
            async with httpx.AsyncClient(timeout=120) as c:
                body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True,
                        "temperature": 0, "speculation": {"proposer": "none"}}
                rs = await asyncio.gather(*(c.post(f"{server.url}/v1/completions", json=body) for _ in range(2)))
                assert all(r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5 for r in rs)

        asyncio.run(two())
        h = _histograms(server.url)
        assert h[names.VLLM_TTFT]["count"] == h[names.VLLM_E2E]["count"] == h[names.VLLM_QUEUE_TIME]["count"] == 2
        assert h[names.VLLM_ITL]["count"] == 2 * 4  # no speculation: one token per output, 4 gaps after the first
        assert h[names.VLLM_QUEUE_TIME]["sum"] > 0  # the second request queued behind the first
        assert h[names.VLLM_E2E]["sum"] >= h[names.VLLM_TTFT]["sum"]
        for row in h.values():
            assert row["+Inf"] == row["count"]

        # a gamma schedule that caps k=3 at 2 while one request runs: every step allowed gamma 2
        body = {"model": "tiny", "prompt": "a b a b a b a b a b", "max_tokens": 12, "ignore_eos": True,
                "temperature": 0, "speculation": {"proposer": "ngram", "num_speculative_tokens": 3,
                                                  "schedule": [[1, 2], [8, 1]]}}
        usage = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120).json()["usage"]["speculative"]
        assert usage["steps_by_gamma"] == {"2": usage["steps"]}
        by_gamma = {s.labels["gamma"]: s.value for fam in text_string_to_metric_families(
            httpx.get(f"{server.url}/metrics").text) if fam.name == names.ENGINE_STEPS_BY_GAMMA for s in fam.samples}
        assert by_gamma == {"0": 2 * 5, "2": usage["steps"]}  # the two earlier requests: 5 steps each, none
    finally:
        server.stop()
        engine.stop()
