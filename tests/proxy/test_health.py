"""Probe endpoints of a real `adaptspec serve` in front of a real upstream process that starts late:
liveness 200 throughout, readiness 503 until a worker has answered, 200 after, 503 again when it dies;
/version; /health keeps its meaning."""

from __future__ import annotations

import pytest

import adaptspec

from .conftest import Upstream, eventually, http_json, pool

pytestmark = pytest.mark.integration


def status(url: str) -> int:
    return http_json("GET", url)[0]


@pytest.mark.parametrize("engine", ["adaptspec", "openai"])  # scraped (metrics) / not scraped (probed)
def test_live_while_no_worker_is_ready_then_ready(proxies, engine):
    up = Upstream("w0", engine=engine)  # port chosen, not started yet
    px = proxies({"pools": [pool("p", [up], engine=engine, per_request=engine == "adaptspec")]})
    try:
        code, _, body = http_json("GET", px.url + "/health/ready")
        assert code == 503 and body["status"] == "not_ready" and "w0" in body["reason"]
        code, _, body = http_json("GET", px.url + "/health/live")
        assert code == 200 and body == {"status": "alive"}

        up.start()
        eventually(lambda: status(px.url + "/health/ready") == 200, timeout=15)
        code, _, body = http_json("GET", px.url + "/health/ready")
        assert code == 200 and body == {"status": "ready", "workers": ["w0"]}
        assert status(px.url + "/health/live") == 200
        assert status(px.url + "/health") == 200
    finally:
        up.kill()
    if engine == "adaptspec":  # the scraper sees it die: not ready again, still alive
        eventually(lambda: status(px.url + "/health/ready") == 503, timeout=15)
        assert status(px.url + "/health/live") == 200
        assert status(px.url + "/health") == 503  # today's meaning: no worker healthy


def test_version(proxies, upstreams):
    up = upstreams("w0")
    px = proxies({"pools": [pool("p", [up])]})
    code, _, body = http_json("GET", px.url + "/version")
    assert code == 200 and body == {"name": "adaptspec", "version": adaptspec.__version__}
