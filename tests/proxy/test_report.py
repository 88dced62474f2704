"""/adaptspec/report, its gauges and `adaptspec report`: the proxy in process, in front of a real upstream whose
decode is faster with speculation (a loopback aiohttp app that streams its tokens with a per-token sleep)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys

import aiohttp
import pytest
from aiohttp import web

from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy, create_app, start_site

from .conftest import free_port, metric

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")]  # app["proxy"]
OFF_S, SPEC_S = 0.040, 0.004  # the upstream's decode seconds per token without / with speculation


def _upstream() -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        spec = body.get("speculation") or {}
        on = spec.get("proposer", "none") != "none" and spec.get("num_speculative_tokens", 0) > 0
        n = int(body.get("max_tokens") or 6)
        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
        if not body.get("stream"):
            await asyncio.sleep(n * (SPEC_S if on else OFF_S))
            return web.json_response({"id": "x", "object": "chat.completion", "model": body["model"], "usage": usage,
                                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "t"},
                                                   "finish_reason": "length"}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            if i:
                await asyncio.sleep(SPEC_S if on else OFF_S)
            chunk = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "t"},
                                                                               "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@contextlib.asynccontextmanager
async def stack(policy: dict, server: dict | None = None):
    up = web.AppRunner(_upstream(), access_log=None)
    await up.setup()
    site = web.TCPSite(up, "127.0.0.1", 0)
    await site.start()
    up_url = f"http://127.0.0.1:{up.addresses[0][1]}"
    config = parse_config({"policy": policy, "server": {"scrape_interval_s": 30, **(server or {})},
                           "pools": [{"name": "p", "engine": "adaptspec", "proposers": ["ngram"],
                                      "workers": [{"name": "w0", "url": up_url}]}]})
    port = free_port()
    runner = await start_site(create_app(Proxy(config)), "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as session:
            yield f"http://127.0.0.1:{port}", session
    finally:
        await runner.cleanup()
        await up.cleanup()


CHAT = [{"role": "user", "content": "Write a haiku about the sea."}]


async def _stream(session, url: str) -> dict:
    body = {"model": "tiny", "messages": CHAT, "stream": True, "max_tokens": 6}
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200
        await r.read()
        return dict(r.headers)


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "adaptspec", "report", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=os.environ.copy())
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_report_shows_the_realized_speedup_of_the_holdout():
    policy = {"kind": "static", "proposer": "ngram", "gamma": 4, "holdout": {"share": 0.25, "min_samples": 3}}
    async with stack(policy) as (url, session):
        heads = [await _stream(session, url) for _ in range(24)]
        off = [h for h in heads if h["x-adaptspec-proposer"] == "none"]
        assert len(off) == 6 and all(h["x-adaptspec-gamma"] == "0" for h in off)  # one in every block of 4
        cls = heads[0]["x-adaptspec-class"]
        async with session.get(url + "/adaptspec/report") as r:
            assert r.status == 200
            rep = await r.json()
        assert rep["enabled"] and rep["policy"] == "static" and rep["holdout"]["share"] == 0.25
        (row,) = rep["requests"]
        assert (row["content_class"], row["load_bucket"], row["arm"]) == (cls, "1", "ngram")
        assert (row["n_treated"], row["n_control"]) == (18, 6)
        # designed 10x faster decode with speculation; the proxy sees it through real streams (loosely: on a
        # loaded machine every sleep overshoots by a few ms, which shrinks the ratio)
        assert row["low"] <= row["speedup"] <= row["high"] and row["speedup"] > 1.3
        assert rep["changed"] == [{"content_class": cls, "load_bucket": "1", "arm": "ngram", "reason": "holdout",
                                   "count": 6}]
        async with session.get(url + "/metrics") as r:
            text = await r.text()
        labels = {"content_class": cls, "load_bucket": "1", "arm": "ngram"}
        assert metric(text, "adaptspec_realized_speedup", **labels) == pytest.approx(row["speedup"])
        assert metric(text, "adaptspec_realized_speedup_samples", group="control", **labels) == 6
        assert metric(text, "adaptspec_guard_active", **labels) == 0
        assert metric(text, "adaptspec_experiment_decisions_total", reason="holdout", **labels) == 6
        rc, out, err = await _cli("--url", url)
        assert rc == 0, err
        assert cls in out and "ngram" in out and f"{row['speedup']:.3f}" in out
        rc, out, _ = await _cli("--url", url, "--json")
        assert rc == 0 and json.loads(out)["requests"][0]["n_control"] == 6


async def test_non_streamed_replies_count_for_nothing_at_request_level():
    policy = {"kind": "static", "proposer": "ngram", "gamma": 4, "holdout": {"share": 0.5}}
    async with stack(policy) as (url, session):
        for _ in range(4):
            async with session.post(url + "/v1/chat/completions",
                                    json={"model": "tiny", "messages": CHAT, "max_tokens": 2}) as r:
                assert r.status == 200
        async with session.get(url + "/adaptspec/report") as r:
            rep = await r.json()
        assert rep["requests"] == []  # no first-token time: no decode time per token to compare
        assert sum(c["count"] for c in rep["changed"]) == 2


async def test_report_without_an_experiment_and_behind_auth(monkeypatch):
    monkeypatch.setenv("ADAPTSPEC_TEST_REPORT_KEYS", "k1")
    async with stack({"kind": "static"}, {"api_keys_env": "ADAPTSPEC_TEST_REPORT_KEYS"}) as (url, session):
        async with session.get(url + "/adaptspec/report") as r:
            assert r.status == 401
        async with session.get(url + "/adaptspec/report", headers={"Authorization": "Bearer k1"}) as r:
            assert r.status == 200 and (await r.json())["enabled"] is False
        async with session.get(url + "/metrics") as r:
            text = await r.text()
        assert "# TYPE adaptspec_realized_speedup gauge" in text  # declared for dashboards, without samples
        assert metric(text, "adaptspec_realized_speedup") is None
        rc, out, err = await _cli("--url", url, "--api-key", "k1")
        assert rc == 0 and "no experiment running" in out
        rc, out, err = await _cli("--url", url)
        assert rc == 1 and "401" in err
    rc, out, err = await _cli("--url", "ftp://x")
    assert rc == 2 and "--url" in err


def test_config_reload_keeps_the_experiment_evidence():
    pools = [{"name": "p", "engine": "adaptspec", "proposers": ["ngram"],
              "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]
    policy = {"kind": "static", "proposer": "ngram", "gamma": 4, "holdout": {"share": 0.25}}
    proxy = Proxy(parse_config({"policy": policy, "pools": pools}))
    book = proxy.policy.requests
    proxy.apply_config(parse_config({"policy": {**policy, "holdout": {"share": 0.1}}, "pools": pools}))
    assert proxy.policy.requests is book and proxy.policy.holdout.share == 0.1
    proxy.apply_config(parse_config({"policy": {"kind": "static"}, "pools": pools}))
    assert not hasattr(proxy.policy, "requests")


async def test_hedge_serves_the_control_plan_where_the_policy_is_measured_slower():
    """switchback.control "ngram:4" against a policy that never drafts (off): the control windows run lookup, the
    upstream decodes 10x faster with it, so the policy is measured slower and the guard hands the load bucket to
    the plan; the report, the gauge and `adaptspec report` name it."""
    policy = {"kind": "static", "proposer": "none", "gamma": 0,
              "switchback": {"control": "ngram:4", "share": 0.25, "window_s": 0.6, "washout_s": 0.05,
                             "min_windows": 2, "first_look": 4}}
    async with stack(policy) as (url, session):
        proposers = [(await _stream(session, url))["x-adaptspec-proposer"] for _ in range(60)]
        assert {"none", "ngram"} <= set(proposers)  # both regimes ran
        async with session.get(url + "/adaptspec/report") as r:
            rep = await r.json()
        assert rep["control"] == "ngram:4" and rep["guard"]["buckets"] == ["1"]
        # guarded: the plan runs in all but a quarter of the windows, as reason "guard" (before: "switchback")
        reasons = {c["reason"] for c in rep["changed"]}
        assert {"switchback", "guard"} <= reasons
        async with session.get(url + "/metrics") as r:
            text = await r.text()
        assert metric(text, "adaptspec_hedge_serving_control", load_bucket="1", control="ngram:4") == 1
        rc, out, err = await _cli("--url", url)
        assert rc == 0, err
        assert "switchback control plan: ngram:4" in out and "1" in out.split("control plan")[1]
