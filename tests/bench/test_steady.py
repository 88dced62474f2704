"""Steady-state measurement (bench/steady.py): the token count inside a window, the warm-up that lasts until
every client finished a request, and `bench compare`'s rounds measured that way, against a real streaming
server on loopback."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math

import pytest
from _fake_openai import FakeOpenAI

from adaptspec.bench.compare import interleaved
from adaptspec.bench.loadgen import LoadConfig, RequestRecord
from adaptspec.bench.prompts import PromptItem
from adaptspec.bench.steady import run_steady, tokens_between


def _rec(start: float, first: float | None, end: float, tokens: int, error: str | None = None) -> RequestRecord:
    r = RequestRecord("chat", start)
    r.first_token, r.end, r.output_tokens, r.error = first, end, tokens, error
    return r


def test_tokens_between_spreads_a_request_over_its_decode():
    r = _rec(0.0, 1.0, 5.0, 9)  # first token at 1, then 8 more evenly over (1, 5]
    assert tokens_between([r], 0.0, 10.0) == 9
    assert tokens_between([r], 2.0, 4.0) == pytest.approx(8 * 2 / 4)
    assert tokens_between([r], 1.0, 2.0) == pytest.approx(1 + 8 * 1 / 4)
    assert tokens_between([r], 5.5, 9.0) == 0
    # a partition of time counts every token once
    edges = [-1.0, 0.7, 1.0, 2.2, 3.9, 5.0, 6.0]
    assert sum(tokens_between([r], a, b) for a, b in itertools.pairwise(edges)) == pytest.approx(9)
    # failed requests count nothing; a request whose tokens all came at once counts them at its end
    assert tokens_between([_rec(0.0, 1.0, 2.0, 5, error="HTTP 500")], 0.0, 3.0) == 0
    assert tokens_between([_rec(0.0, 2.0, 2.0, 5)], 1.5, 2.5) == 5


def _prompts():
    return itertools.cycle([PromptItem("chat", "Hello there"), PromptItem("summarize", "Summarize this: a b")])


def test_run_steady_warms_up_until_every_client_finished_then_counts_the_window():
    edges = []
    with FakeOpenAI(delay_s=0.005) as srv:
        cfg = LoadConfig(url=srv.url, concurrency=4, duration_s=1.0, max_tokens=10)
        res = asyncio.run(run_steady(cfg, _prompts(), 0.4, on_window=edges.append))
        assert srv.max_inflight == 4
    a, b = res.window
    assert edges == ["start", "end"] and b - a == pytest.approx(0.4) and res.warmup_s > 0  # the planned window
    assert sum(1 for r in res.records if r.end <= a) >= 4  # each of the 4 clients finished one before the window
    assert all(a <= r.start < b for r in res.measured()) and res.measured()
    assert all(r.ok and r.output_tokens == 10 for r in res.records)
    total = sum(r.output_tokens for r in res.records)
    before, after = tokens_between(res.records, -math.inf, a), tokens_between(res.records, b, math.inf)
    assert 0 < res.tokens_in_window() < total
    assert before + res.tokens_in_window() + after == pytest.approx(total)  # the drain and warm-up are not counted
    assert before > 0 and after > 0


def test_run_steady_needs_a_closed_loop():
    with pytest.raises(ValueError, match="closed loop"):
        asyncio.run(run_steady(LoadConfig(url="http://127.0.0.1:9", rate=1.0, duration_s=1.0), _prompts(), 1.0))


class _Target:
    def __init__(self, url: str) -> None:
        self.url = url


def _args(**kw) -> argparse.Namespace:
    base = dict(rounds=2, requests=None, duration=0.6, model=None, warmup=0.0, warmup_requests=0, max_tokens=8,
                temperature=0.0, timeout=30.0, api_key=None, no_progress=True, steady_lifetimes=1)
    return argparse.Namespace(**{**base, **kw})


def test_compare_rounds_measure_steady_windows_with_duration():
    with FakeOpenAI(delay_s=0.004) as srv:
        targets = [("a", _Target(srv.url), "a.yaml"), ("b", _Target(srv.url), "b.yaml")]
        rows = interleaved(_args(), [("concurrency", 3)], _prompts, targets)
        old = interleaved(_args(steady_lifetimes=0), [("concurrency", 3)], _prompts, targets[:1])
    assert [r["policy"] for r in rows] == ["a", "b"]
    for r in rows:
        assert r["measure"] == "steady" and len(r["warmup_s"]) == 2 and all(w > 0 for w in r["warmup_s"])
        assert r["window_s"] == pytest.approx(2 * 0.3) and r["errors"] == 0  # two planned windows
        assert r["output_tokens_per_s"] == pytest.approx(r["window_tokens"] / r["window_s"])
        assert len(r["round_output_tokens_per_s"]) == 2
    # --steady-lifetimes 0: whole requests started in the round, as before
    assert "measure" not in old[0] and old[0]["output_tokens_per_s"] == pytest.approx(
        old[0]["output_tokens"] / old[0]["window_s"])
