"""The proxy's collaborators built from real parts, without a `Proxy`; and, inside one, reading what a config
reload replaces when they use it (never a copy taken before it)."""

from __future__ import annotations

import aiohttp
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.promtext import parse_metrics
from adaptspec.proxy.app import Proxy
from adaptspec.proxy.configfile import load_config_file
from adaptspec.proxy.engine_switch import EngineSwitch
from adaptspec.proxy.feedback import Feedback
from adaptspec.proxy.metrics import ProxyMetrics
from adaptspec.proxy.reload import Reloader
from adaptspec.proxy.report import ReportCollector
from adaptspec.proxy.scrape import Scraper
from adaptspec.proxy.state import MemoryState
from adaptspec.proxy.upstream import Pools, Worker

POOLS = [{"name": "p", "engine": "adaptspec", "proposers": ["ngram"],
          "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]
COUNTERS = """\
vllm:num_requests_running 3
vllm:spec_decode_num_drafts_total {d}
vllm:spec_decode_num_draft_tokens_total {t}
vllm:spec_decode_num_accepted_tokens_total {a}
"""


def _policy(**section):
    return build_policy(parse_config({"policy": section}).policy)


async def test_the_scraper_feeds_a_workers_counters_to_feedback():
    scrapes = iter([COUNTERS.format(d=10, t=40, a=30), COUNTERS.format(d=110, t=440, a=330)])

    async def metrics_text(request: web.Request) -> web.Response:
        return web.Response(text=next(scrapes))

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    app = web.Application()
    app.router.add_get("/metrics", metrics_text)
    app.router.add_get("/v1/models", models)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        worker = Worker("n0", str(server.make_url("")), "p", engine="vllm", per_request=False, proposers=("ngram",),
                        gamma=4)
        pools, metrics, state = Pools([worker]), ProxyMetrics(), MemoryState(AlphaTable())
        policy = _policy(kind="static")
        scraper = Scraper(pools, metrics, Feedback(metrics, state, pools, policy=lambda: policy),
                          EngineSwitch(lambda: policy), interval_s=lambda: 0.05, stall_timeout_s=lambda: 1.0)
        scraper.session = session  # `start` sets it and runs the rounds; here they are called one by one
        await scraper.scrape_once()  # the counters' baseline: never a burst
        assert worker.models == frozenset({"m"}) and worker.running == 3 and state.alphas.keys() == []
        await scraper.scrape_once()
    assert state.alphas.keys() == [("n0", "ngram", "*")]
    assert state.alphas.get("n0", "ngram", "*").mean > 0.5


async def test_the_engine_switch_reads_the_current_policys_experiment():
    caps = []

    async def cap(request: web.Request) -> web.Response:
        caps.append((await request.json())["cap"])
        return web.json_response({})

    app = web.Application()
    app.router.add_put("/adaptspec/speculation_cap", cap)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        worker = Worker("w0", str(server.make_url("")), "p", cards={"m": {"id": "m", "speculation_cap": True}})
        current = [_policy(kind="static", proposer="ngram", gamma=4,
                           switchback={"share": 0.5, "window_s": 1.0, "washout_s": 0.1})]
        switch = EngineSwitch(lambda: current[0])
        timeout = aiohttp.ClientTimeout(total=5)
        await switch.after_scrape(worker, parse_metrics(""), session, timeout)
        assert current[0].experiment.engine_workers == {"w0"} and len(caps) == 1 and caps[0] in (0, None)
        current[0] = _policy(kind="static")  # the switchback is gone: a cap it left is lifted
        await switch.after_scrape(worker, parse_metrics(""), session, timeout)
    assert caps[-1] is None


def test_the_report_collector_reads_the_current_policy():
    current = [_policy(kind="static")]
    collector = ReportCollector(lambda: current[0])
    assert all(not family.samples for family in collector.collect())  # declared, without samples
    current[0] = _policy(kind="static", holdout={"share": 0.5})
    assert current[0].experiment is not None
    assert [f.name for f in collector.collect()][0] == "adaptspec_realized_speedup"


async def test_the_reloader_hands_a_valid_file_to_apply(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"pools": POOLS}))
    applied, metrics = [load_config_file(path)], ProxyMetrics()
    reloader = Reloader(str(path), load_config_file, apply=applied.append, current=lambda: applied[-1],
                        metrics=metrics, describe=lambda: "described", poll_s=0)
    path.write_text(yaml.safe_dump({"pools": POOLS, "server": {"scrape_interval_s": 0.5}}))
    assert await reloader.reload("test") is True
    assert applied[-1].server.scrape_interval_s == 0.5
    path.write_text("pools: [\n")
    assert await reloader.reload("test") is False and len(applied) == 2
    assert metrics.config_reloads.labels("error")._value.get() == 1


def test_after_a_reload_the_collaborators_read_the_new_policy_and_settings():
    proxy = Proxy(parse_config({"policy": {"kind": "goodput"}, "pools": POOLS}))
    assert proxy.feedback.policy() is proxy.policy and proxy.policy.contrast_probe is not None
    proxy.apply_config(parse_config({"policy": {"kind": "static"}, "pools": POOLS, "calibration": {"enabled": False},
                                     "server": {"scrape_interval_s": 0.25, "stall_timeout_s": 7.0}}))
    assert proxy.feedback.policy() is proxy.policy and proxy.policy.name == "static"
    assert proxy.feedback.calibration().enabled is False
    assert proxy.scraper.interval_s() == 0.25 and proxy.scraper.stall_timeout_s() == 7.0
    assert proxy.scraper.switch.policy() is proxy.policy
    gauges = proxy.feedback.gauges()  # no probes now: the static policy makes none
    assert gauges["adaptspec_step_model_probes"][1] == []
