"""The switchback's engine-side switch end to end: the proxy in process in front of a real reference worker (tiny
pair, loopback) that advertises `speculation_cap`; after each scrape the proxy sets the worker's cap to the
window's regime, so a request admitted with the policy's proposer stops and resumes drafting while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import aiohttp
import pytest

from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy, create_app, start_site

from .conftest import free_port

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")]
ASSETS = Path(os.environ.get("ADAPTSPEC_ASSETS", Path(__file__).resolve().parents[2] / "adaptspec" / "assets"))
SWITCHBACK = {"share": 0.5, "window_s": 1.0, "washout_s": 0.1, "guard": False}


def _config(url: str, switchback: dict | None):
    policy = {"kind": "static", "proposer": "draft", "gamma": 4, **({"switchback": switchback} if switchback else {})}
    return parse_config({"policy": policy, "server": {"scrape_interval_s": 0.05},
                         "pools": [{"name": "p", "engine": "adaptspec", "proposers": ["ngram", "draft"],
                                    "workers": [{"name": "w0", "url": url}]}]})


@contextlib.asynccontextmanager
async def stack():
    from adaptspec.worker.engine import Engine
    from adaptspec.worker.server import ServerThread, WorkerSettings, build_app

    engine = Engine.from_dirs(ASSETS / "tiny-target", ASSETS / "tiny-draft", max_batch=8, max_model_len=512,
                              num_threads=1)
    engine.start()
    worker = ServerThread(build_app(engine, WorkerSettings(served_model_name="tiny", max_model_len=512))).start()
    proxy = Proxy(_config(worker.url, SWITCHBACK))
    port = free_port()
    runner = await start_site(create_app(proxy), "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as session:
            yield proxy, engine, worker.url, f"http://127.0.0.1:{port}", session
    finally:
        await runner.cleanup()
        worker.stop()
        engine.stop()


async def _caps(engine, seconds: float) -> list:
    seen = []
    for _ in range(int(seconds / 0.02)):
        seen.append(engine.speculation_cap)
        await asyncio.sleep(0.02)
    return seen


async def test_the_proxy_switches_the_workers_running_requests_by_window():
    async with stack() as (proxy, engine, worker_url, url, session):
        seen = await _caps(engine, 4.0)
        assert 0 in seen and None in seen  # off and policy windows, set by the proxy after its scrapes
        assert "w0" in proxy.policy.engine_workers
        # the worker's regime is the window's, one scrape (0.05 s) after its boundary at most
        exp = proxy.policy
        agree = []
        for _ in range(100):
            now = exp.clock()
            want = 0 if exp.engine_regime("w0", now) == "off" else None
            if (now % SWITCHBACK["window_s"]) > 0.2:  # away from a boundary
                agree.append(engine.speculation_cap == want)
            await asyncio.sleep(0.02)
        assert agree and sum(agree) >= 0.9 * len(agree)
        # long greedy requests through the proxy: admitted with the policy's draft:4 in any window, each drafts in
        # policy windows and not in off windows while it runs. Windows are assigned at random (share 0.5), so a
        # request of ~1-2 windows may see only one regime (p <= ~0.3): up to 6 requests, one must see both
        body = {"model": "tiny", "prompt": "def f(x):\n    return x\n" * 4, "max_tokens": 240, "temperature": 0,
                "ignore_eos": True}
        seen_gammas = []
        for _ in range(6):
            async with session.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200
                out = await r.json()
            steps = out["usage"]["speculative"]["steps_by_gamma"]
            assert sum(steps.values()) > 0, steps
            seen_gammas.append(steps)
            if steps.get("0", 0) > 0 and steps.get("4", 0) > 0:
                break
        else:
            pytest.fail(f"no request stepped at both gamma 0 and 4: {seen_gammas}")
        # the config drops the switchback: the proxy lifts the cap it may have left
        proxy.apply_config(_config(worker_url, None))
        for _ in range(100):
            if engine.speculation_cap is None and await _still_none(engine):
                break
            await asyncio.sleep(0.05)
        assert engine.speculation_cap is None


async def _still_none(engine) -> bool:
    await asyncio.sleep(0.3)
    return engine.speculation_cap is None
