"""`adaptspec bench` against the real reference worker, and `adaptspec bench compare` through the real proxy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from adaptspec.bench.compare import Server
from adaptspec.bench.loadgen import free_port
from adaptspec.cli import main

pytestmark = pytest.mark.integration
POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    argv = [sys.executable, "-m", "adaptspec", "worker", "--port", str(port), "--threads", "1"]
    with Server(argv, port, log, "worker") as srv:
        yield srv.url


def test_bench_against_the_reference_worker(worker, tmp_path):
    out = tmp_path / "w.json"
    rc = main(["bench", "--url", worker, "--concurrency", "1,3", "--requests", "6", "--max-tokens", "16",
               "--warmup-requests", "1", "--no-progress", "--json", str(out), "--md", str(tmp_path / "w.md")])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["concurrency"] for r in rows] == [1, 3]
    for r in rows:
        assert r["errors"] == 0 and r["requests"] == 6 and r["model"] == "tiny"
        assert 6 <= r["output_tokens"] <= 6 * 16  # usage from the worker's final chunk
        assert r["ttft_ms_p50"] > 0 and r["e2e_s_p50"] > 0 and r["output_tokens_per_s"] > 0
        assert r["proposer_mix"] == {}  # a bare worker sets no decision headers


def test_compare_runs_each_policy_through_the_proxy(tmp_path):
    files = ",".join(str(POLICIES / f) for f in ("static-off.yaml", "static-ngram.yaml", "default.yaml"))
    out = tmp_path / "c.json"
    rc = main(["bench", "compare", "--policies", files, "--concurrency", "1,2", "--requests", "4", "--rounds", "2",
               "--max-tokens", "16", "--worker-args", "--threads 1", "--no-progress", "--logs", str(tmp_path),
               "--json", str(out), "--plot", str(tmp_path / "c.png")])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [(r["policy"], r["concurrency"]) for r in rows] == [
        (p, c) for c in (1, 2) for p in ("off", "static:ngram:4", "adaptive")]
    assert all(r["requests"] == 4 and r["rounds"] == 2 for r in rows)  # 2 rounds of 2 requests each
    by = {(r["policy"], r["concurrency"]): r for r in rows}
    for r in rows:
        assert r["errors"] == 0 and r["output_tokens"] > 0
    # the proxy's decision headers come back: off never speculates, static n-gram always does
    assert by[("off", 1)]["proposer_mix"] == {"none": 1.0} and by[("off", 1)]["mean_gamma"] == 0
    assert by[("static:ngram:4", 2)]["proposer_mix"] == {"ngram": 1.0} and by[("static:ngram:4", 2)]["mean_gamma"] == 4
    assert sum(by[("adaptive", 1)]["proposer_mix"].values()) == pytest.approx(1.0)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    # each proxy's /metrics after each point, for the record: the adaptive proxy's decisions at 2 clients
    snap = (tmp_path / "proxy-default-concurrency2.metrics").read_text()
    assert sorted(f.name for f in tmp_path.glob("*.metrics")) == sorted(
        f"proxy-{stem}-concurrency{c}.metrics" for stem in ("static-off", "static-ngram", "default") for c in (1, 2))
    assert 'adaptspec_decisions_total{' in snap
