"""Config hot reload: file watch and SIGHUP; a bad file is rejected and the last good config stays."""

from __future__ import annotations

import signal
import threading

import pytest

from .conftest import eventually, metric, pool

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "hello there"}]


def _models(px) -> set[str]:
    return {m.id for m in px.client().models.list()}


def test_valid_reload_takes_effect_without_dropping_requests(upstreams, proxies):
    a, b = upstreams("wa", model="alpha", delay_ms=100), upstreams("wb", model="beta")
    cfg = {"pools": [pool("pa", [a])]}
    px = proxies(cfg)
    eventually(lambda: _models(px) == {"alpha"})
    client = px.client(timeout=30)
    result = {}

    def slow():  # in flight across the reload: ~1.5 s
        result["r"] = client.chat.completions.create(model="alpha", messages=CHAT, max_tokens=15)

    t = threading.Thread(target=slow)
    t.start()
    eventually(lambda: a.state()["running"] == 1)
    px.write_config({"pools": [pool("pa", [a]), pool("pb", [b])]})
    eventually(lambda: _models(px) == {"alpha", "beta"}, timeout=10)
    assert client.chat.completions.create(model="beta", messages=CHAT).choices
    t.join()
    assert result["r"].choices[0].message.content.count("tok") == 15
    assert metric(px.metrics(), "adaptspec_config_reloads_total", result="ok") == 1
    assert "config reloaded from" in px.log()


def test_invalid_reload_is_rejected_and_named(upstreams, proxies):
    a = upstreams("wa", model="alpha")
    px = proxies({"pools": [pool("pa", [a])]})
    bad = {"pools": [pool("pa", [a], engine="tgi")]}
    px.write_config(bad)
    eventually(lambda: metric(px.metrics(), "adaptspec_config_reloads_total", result="error") == 1, timeout=10)
    log = px.log()
    assert str(px.config_path) in log and "pools[0].engine" in log and "'tgi'" in log
    assert px.client().chat.completions.create(model="alpha", messages=CHAT).choices  # last good config

    px.write_config("pools: [\n")  # not even YAML
    eventually(lambda: metric(px.metrics(), "adaptspec_config_reloads_total", result="error") == 2, timeout=10)
    assert px.client().chat.completions.create(model="alpha", messages=CHAT).choices


def test_sighup_reloads(upstreams, proxies, tmp_path):
    a, b = upstreams("wa", model="alpha"), upstreams("wb", model="beta")
    px = proxies({"pools": [pool("pa", [a])]}, args=["--watch", "0"])  # no file watching: only the signal
    eventually(lambda: _models(px) == {"alpha"})
    px.write_config({"pools": [pool("pb", [b])]})
    px.proc.send_signal(signal.SIGHUP)
    eventually(lambda: _models(px) == {"beta"}, timeout=5)
    assert metric(px.metrics(), "adaptspec_config_reloads_total", result="ok") >= 1


def test_env_vars_in_config(upstreams, proxies):
    a = upstreams("wa", model="alpha")
    cfg = {"pools": [{"name": "p", "engine": "openai", "workers": [{"name": "u0", "url": "${TEST_UP_URL}"}]}],
           "server": {"max_body_bytes": "${TEST_MAX_BODY:-100000}"}}
    px = proxies(cfg, env={"TEST_UP_URL": a.url})
    assert px.client().chat.completions.create(model="alpha", messages=CHAT).choices
