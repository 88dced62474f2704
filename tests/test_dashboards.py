"""Grafana dashboards (dashboards/*.json): generated from dashboards/generate.py, every PromQL expression
parses and names only metrics that exist; with a real Prometheus scraping a real proxy and worker, every
panel query evaluates without error and the core panels have data."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import httpx
import promql_parser
import pytest
import yaml

from adaptspec.control import metric_names as names

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
FIXTURES = ROOT / "tests" / "integrations" / "fixtures"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
REQUIRED_TOPICS = {  # what the dashboards must show -> a word every such panel title has
    "decisions by class/proposer/gamma": "Decisions by class",
    "alpha estimate vs observed": "alpha estimate vs observed",
    "occupancy per worker": "Occupancy per worker",
    "speculation on/off share": "on / off share",
    "TTFT percentiles": "TTFT percentiles",
    "TPOT percentiles": "TPOT percentiles",
    "goodput": "Goodput",
    "errors": "Error ratio",
    "redis": "State backend (Redis)",
    "scrape health": "Scrape health",
    "engine TTFT next to the proxy's": "TTFT: proxy vs engine",
    "engine inter-token latency": "Inter-token latency: engine",
    "engine end-to-end latency": "End-to-end: proxy vs engine",
    "engine queue time": "Engine queue time",
    "step-time calibration": "Calibrated step model",
}
# names a panel reads only as the fallback of an `or` for engines older than the captured vLLM
LEGACY_ALIASES = {names.VLLM_ITL_OLD + "_bucket"}


def panels(dash: dict):
    for p in dash["panels"]:
        if p["type"] != "row":
            yield p


def expressions() -> list[tuple[str, str, str]]:
    out = []
    for path in DASHBOARDS:
        for p in panels(json.loads(path.read_text())):
            for t in p["targets"]:
                out.append((path.name, p["title"], t["expr"]))
    return out


def concrete(expr: str, rate_interval: str = "1m") -> str:
    """Replace Grafana's variables by what Grafana would send."""
    expr = expr.replace("$__rate_interval", rate_interval)
    return re.sub(r"\$\{?[a-z_]+\}?", ".*", expr)


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(concrete(expr)), visit)
    return names


def documented_names() -> set[str]:
    """Metric names in docs/INTERFACES.md (table rows list `a` / `_b` meaning a and prefix_b)."""
    text = (ROOT / "docs" / "INTERFACES.md").read_text()
    names: set[str] = set()
    for line in text.splitlines():
        found = re.findall(r"`([a-zA-Z_:][a-zA-Z0-9_:]*)(?:`|\{)", line)
        first = None
        for n in found:
            if n.startswith("_") and first:
                names.add(first.rsplit("_", 1)[0] + n)
            elif ":" in n or n.startswith("adaptspec_"):
                names.add(n)
                first = n
    return names


def fixture_names() -> set[str]:
    from prometheus_client.parser import text_string_to_metric_families

    names = set()
    for f in ("vllm_0.32.0_ngram_metrics.txt", "sglang_metrics.txt"):
        for fam in text_string_to_metric_families((FIXTURES / f).read_text()):
            names.update(s.name for s in fam.samples)
    return names


def test_json_is_what_generate_py_writes():
    sys.path.insert(0, str(ROOT / "dashboards"))
    try:
        import generate
    finally:
        sys.path.pop(0)
    expected = {"adaptspec.json": generate.proxy_dashboard(), "engines.json": generate.engines_dashboard()}
    assert sorted(p.name for p in DASHBOARDS) == sorted(expected)
    for name, dash in expected.items():
        assert json.loads((ROOT / "dashboards" / name).read_text()) == json.loads(json.dumps(dash)), name


def test_required_panels_present():
    titles = [p["title"] for path in DASHBOARDS for p in panels(json.loads(path.read_text()))]
    for topic, word in REQUIRED_TOPICS.items():
        assert any(word in t for t in titles), topic


def test_panel_ids_and_layout_are_unique():
    for path in DASHBOARDS:
        dash = json.loads(path.read_text())
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids))
        spots = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in dash["panels"]]
        assert len(spots) == len(set(spots))
        for p in panels(dash):
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize(("dash", "title", "expr"), expressions())
def test_expression_parses_and_names_known_metrics(dash, title, expr):
    known = documented_names() | fixture_names() | LEGACY_ALIASES | {"up"}
    for name in metric_names(expr):
        base = name
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in known:
                base = name[: -len(suffix)]
        assert base in known, f"{dash} / {title}: unknown metric {name}"


def _sample_names(text: str) -> set[str]:
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def _declared(text: str) -> set[str]:
    """Sample names of every family an exposition declares (samples or not yet)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = set()
    for fam in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "histogram": HISTOGRAM_SUFFIXES}.get(fam.type, ("",))
        out.update(fam.name + x for x in suffixes)
    return out


def proxy_names() -> set[str]:
    """What a real proxy app's /metrics declares."""
    from prometheus_client import generate_latest

    from adaptspec.control.config import parse_config
    from adaptspec.proxy.app import Proxy

    proxy = Proxy(parse_config({"pools": [{"name": "p", "engine": "adaptspec", "profile": "cpu-tiny",
                                           "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]}))
    return _declared(generate_latest(proxy.metrics.registry).decode())


def worker_names() -> set[str]:
    """What the reference worker's /metrics exporter declares (worker/_metrics.py over a real EngineMetrics)."""
    from adaptspec.worker._metrics import ServerCounters, render
    from adaptspec.worker.engine import EngineMetrics

    return _declared(render(EngineMetrics(spec_accepted_per_pos=[0, 0]), ServerCounters(), "tiny").decode())


def test_every_panel_metric_is_emitted_by_its_exporter():
    """adaptspec_* by the proxy; vllm:* by real vLLM 0.32 (captured) AND the reference worker, so each engine
    panel has data with either engine; adaptspec:* by the worker or by the vLLM plugin; sglang:* by SGLang."""
    vllm = _sample_names((FIXTURES / "vllm_0.32.0_ngram_metrics.txt").read_text())
    sglang = _sample_names((FIXTURES / "sglang_metrics.txt").read_text())
    proxy, worker = proxy_names(), worker_names()
    plugin_source = (ROOT / "adaptspec" / "integrations" / "_vllm_patches.py").read_text()
    for dash, title, expr in expressions():
        for name in metric_names(expr):
            where = f"{dash} / {title}: {name}"
            if name.startswith("adaptspec_"):
                assert name in proxy, f"{where} is not on the proxy's /metrics"
            elif name.startswith("vllm:"):
                if name in LEGACY_ALIASES:
                    assert f"or rate({name}" in expr, f"{where}: a legacy name only as an `or` fallback"
                    continue
                assert name in vllm, f"{where} is not emitted by vLLM 0.32"
                assert name in worker, f"{where} is not emitted by the reference worker"
            elif name.startswith("adaptspec:"):
                assert name in worker or name in vllm or f'"{name}"' in plugin_source, \
                    f"{where} is emitted by neither the worker nor the vLLM plugin"
            elif name.startswith("sglang:"):
                assert name in sglang, f"{where} is not emitted by SGLang"
            else:
                assert name == "up", where


# -- a real Prometheus ---------------------------------------------------------------------------------
def _free_port() -> int:
    from tests.integrations._servers import free_port

    return free_port()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_every_panel_query_runs_on_real_prometheus(tmp_path):
    prom_bin = shutil.which("prometheus")
    if prom_bin is None:
        pytest.fail("Debian's prometheus binary is required (apt-get install prometheus)")
    from tests.integrations._servers import Server, worker_and_static_proxy

    worker_port, proxy_port, prom_port = _free_port(), _free_port(), _free_port()
    servers = []
    try:
        worker_and_static_proxy(tmp_path, worker_port, proxy_port, servers)
        worker, proxy = servers
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "adaptspec-proxy", "static_configs": [{"targets": [f"127.0.0.1:{proxy_port}"]}]},
                {"job_name": "vllm-workers", "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}]},
            ]}))
        prom = Server([prom_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
                       f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                      log=tmp_path / "prometheus.log", cwd=tmp_path)
        servers.append(prom)
        worker.wait_http(f"http://127.0.0.1:{worker_port}/health", timeout_s=120)
        proxy.wait_http(f"http://127.0.0.1:{proxy_port}/health", timeout_s=60)
        prom.wait_http(f"http://127.0.0.1:{prom_port}/-/ready", timeout_s=60)

        # traffic through the proxy: several classes, stream and not
        prompts = ["def add(a, b):\n    return a + b\n\ndef add(a, b):", "Translate to French: good morning",
                   '{"name": "x", "items": [1, 2, 3], "name": "x", "items": [1, 2, 3]', "What is 17 * 23?"]
        base = f"http://127.0.0.1:{proxy_port}/v1"
        for rnd in range(3):
            for i, p in enumerate(prompts):
                body = {"model": "tiny", "prompt": p, "max_tokens": 16, "temperature": 0, "stream": (i + rnd) % 2 == 0}
                r = httpx.post(f"{base}/completions", json=body, timeout=120)
                assert r.status_code == 200, r.text
            time.sleep(1.5)
        assert httpx.post(f"{base}/completions", json={"model": "nope", "prompt": "x"}, timeout=30).status_code >= 400

        api = f"http://127.0.0.1:{prom_port}/api/v1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both targets scraped a few times since the traffic
            up = httpx.get(f"{api}/query", params={"query": "count_over_time(up[20s])"}).json()["data"]["result"]
            if len(up) == 2 and all(float(s["value"][1]) >= 5 for s in up):
                break
            time.sleep(1)
        else:
            pytest.fail(f"prometheus did not scrape both targets: {up}")

        # every adaptspec_* series the dashboards read exists on the proxy's real /metrics
        from prometheus_client.parser import text_string_to_metric_families

        proxy_text = httpx.get(f"http://127.0.0.1:{proxy_port}/metrics").text
        families = {f.name for f in text_string_to_metric_families(proxy_text)}  # declared, even if no sample yet
        for _, title, expr in expressions():
            for name in metric_names(expr):
                if name.startswith("adaptspec_"):
                    base = re.sub(r"_(total|bucket|sum|count)$", "", name)
                    assert base in families, f"{title}: {name} not on the proxy"

        now = time.time()
        with_data: set[str] = set()
        for dash, title, expr in expressions():
            r = httpx.get(f"{api}/query_range", params={"query": concrete(expr, "10s"), "start": now - 60,
                                                        "end": now, "step": "2s"}, timeout=30)
            payload = r.json()
            assert r.status_code == 200 and payload["status"] == "success", (dash, title, expr, payload)
            if payload["data"]["result"]:
                with_data.add(title)  # a panel has data when any of its queries has
        must_have_data = ["Decisions by class / proposer / gamma", "Speculation on / off share", "TTFT percentiles",
                          "TTFT: proxy vs engine (p50 / p99)", "Inter-token latency: engine vs proxy TPOT (p50 / p99)",
                          "End-to-end: proxy vs engine (p50 / p99)", "Engine queue time (p50 / p99)",
                          "Engine TTFT p50 / p99", "Engine inter-token latency p50 / p99",
                          "Gamma schedules: engine steps by the gamma allowed",
                          "Occupancy per worker (running / waiting)", "Goodput: output tokens/s per worker",
                          "Request rate by status code", "Worker health", "alpha estimate vs observed"]
        assert set(must_have_data) <= with_data, set(must_have_data) - with_data
    finally:
        for s in reversed(servers):
            s.stop()
