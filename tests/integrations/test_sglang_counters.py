"""A pool's acceptance from SGLang's speculative counters and gauges (sglang 0.5.23 names), scraped over real HTTP
from a loopback server that serves /metrics as that release writes it, through the sglang adapter's `ingest`."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from adaptspec.control.alpha import ANY_CLASS, AlphaTable
from adaptspec.control.counters import CounterTracker
from adaptspec.proxy.engines import adapter
from adaptspec.proxy.scrape import parse_metrics

LABELS = 'engine_type="unified",model_name="m",tp_rank="0"'


def exposition(verify: float | None, tokens: float, *, steps: int = 3, draft_tokens: int = 4,
               length: float = 2.44, rate: float | None = None) -> str:
    """/metrics text in sglang 0.5.23's shapes (metrics_collector.py); `verify` None: a release without the counter."""
    lines = [
        "# TYPE sglang:num_running_reqs gauge", f"sglang:num_running_reqs{{{LABELS}}} 4.0",
        "# TYPE sglang:spec_accept_length gauge", f"sglang:spec_accept_length{{{LABELS}}} {length}",
        "# TYPE sglang:spec_num_steps gauge", f"sglang:spec_num_steps{{{LABELS}}} {steps}",
        "# TYPE sglang:spec_num_draft_tokens gauge", f"sglang:spec_num_draft_tokens{{{LABELS}}} {draft_tokens}",
        "# TYPE sglang:generation_tokens_total counter",
        f'sglang:generation_tokens_total{{{LABELS},is_streaming="false"}} {tokens}',
    ]
    if rate is not None:
        lines += ["# TYPE sglang:spec_accept_rate gauge", f"sglang:spec_accept_rate{{{LABELS}}} {rate}"]
    if verify is not None:
        lines += ["# TYPE sglang:spec_verify_calls_total counter", f"sglang:spec_verify_calls_total{{{LABELS}}} {verify}"]
    return "\n".join(lines) + "\n"


class Engine:
    """A loopback HTTP server whose /metrics body the test sets between scrapes."""

    def __init__(self) -> None:
        self.body = ""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                data = owner.body.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # keep pytest's output clean
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Engine:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def scrape(engine: Engine, table: AlphaTable, tracker: CounterTracker, gamma: int, now: float) -> int:
    with urllib.request.urlopen(engine.url + "/metrics", timeout=10) as r:
        sample = parse_metrics(r.read().decode())
    got = adapter("sglang").ingest(table, tracker, "s0", sample.spec, "eagle", gamma)
    tracker.scraped()
    return got


def root(k: int, accepted: float) -> float:
    """alpha with a + a^2 + ... + a^k = accepted."""
    r = np.roots([1.0] * k + [-accepted])
    return next(x.real for x in r if abs(x.imag) < 1e-9 and 0 < x.real < 1)


@pytest.fixture
def engine():
    with Engine() as e:
        yield e


def test_verify_counter_gives_the_window_accept_length_at_the_live_depth(engine):
    table, tracker = AlphaTable(prior_strength=1e-3, half_life_tokens=None), CounterTracker()
    engine.body = exposition(verify=1000, tokens=3000)
    assert scrape(engine, table, tracker, gamma=5, now=0.0) == 0  # the baseline
    # 400 verify steps made 1200 tokens: 3 per step, 2 accepted drafts at depth 3 (spec_num_draft_tokens 4 - 1),
    # whatever the interval gauge (2.44) and the launch gamma (5) say
    engine.body = exposition(verify=1400, tokens=4200)
    assert scrape(engine, table, tracker, gamma=5, now=1.0) == 1
    est = table.get("s0", "eagle", ANY_CLASS)
    assert est.mean == pytest.approx(root(3, 2.0), abs=0.005)
    a = root(3, 2.0)  # the evidence: 400 steps of Bernoulli trials (accepted drafts + the steps that rejected one)
    assert est.n == pytest.approx(400 * (2.0 + 1.0 - a**3), rel=0.01)


def test_adaptive_depth_change_is_followed(engine):
    table, tracker = AlphaTable(prior_strength=1e-3, half_life_tokens=None), CounterTracker()
    engine.body = exposition(verify=0, tokens=0, steps=1, draft_tokens=2)
    scrape(engine, table, tracker, gamma=3, now=0.0)
    engine.body = exposition(verify=500, tokens=900, steps=1, draft_tokens=2)  # depth 1: 0.8 accepted per step
    assert scrape(engine, table, tracker, gamma=3, now=1.0) == 1
    assert table.get("s0", "eagle", ANY_CLASS).mean == pytest.approx(0.8, abs=0.005)


def test_no_verify_steps_in_the_window_teach_nothing(engine):
    table, tracker = AlphaTable(), CounterTracker()
    engine.body = exposition(verify=100, tokens=300)
    scrape(engine, table, tracker, gamma=3, now=0.0)
    assert scrape(engine, table, tracker, gamma=3, now=1.0) == 0  # idle: same counters
    assert table.get("s0", "eagle", ANY_CLASS).n == 0


def test_accept_rate_gauge_without_the_counter(engine):
    table, tracker = AlphaTable(prior_strength=1e-3, half_life_tokens=None), CounterTracker()
    engine.body = exposition(verify=None, tokens=1000, rate=0.5)
    scrape(engine, table, tracker, gamma=3, now=0.0)
    engine.body = exposition(verify=None, tokens=3500, rate=0.5)  # 0.5 x 3 = 1.5 accepted drafts per step
    assert scrape(engine, table, tracker, gamma=3, now=1.0) == 1
    est = table.get("s0", "eagle", ANY_CLASS)
    assert est.mean == pytest.approx(root(3, 1.5), abs=0.005)
    a = root(3, 1.5)  # steps = tokens / (1 + accepted) = 1000
    assert est.n == pytest.approx(1000 * (1.5 + 1.0 - a**3), rel=0.01)


def test_accept_length_gauge_alone_as_before(engine):
    table, tracker = AlphaTable(prior_strength=1e-3, half_life_tokens=None), CounterTracker()
    engine.body = exposition(verify=None, tokens=1000, steps=0, draft_tokens=0)
    scrape(engine, table, tracker, gamma=3, now=0.0)
    engine.body = exposition(verify=None, tokens=2220, steps=0, draft_tokens=0)  # 1.44 accepted, launch gamma 3
    assert scrape(engine, table, tracker, gamma=3, now=1.0) == 1
    assert table.get("s0", "eagle", ANY_CLASS).mean == pytest.approx(root(3, 1.44), abs=0.005)
