"""The short form of benchmarks/soak.py in CI: 3 replicas sharing Redis, rotating faults (a frozen worker, a
killed worker, Redis killed and restarted) under normal and hostile load for ~30 s; nothing lost, no 5xx to
a client error, the samples and their summary written. The hour-long run and its plot: docs/scale-out.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_short_soak_with_three_replicas_passes(tmp_path):
    # 6 samples over 45 s (one every 7 s): the quarter-on-quarter flatness gate (>= 8 samples) is for the long soak; 45 s is the
    # replicas' warm-up (RSS: allocator, caches; /metrics was too, before its series were created at startup, and
    # failed CI once at +5.1%). The absolute bounds (RSS growth, /metrics size) and every answer still count here.
    out = tmp_path / "summary.json"
    # 45 s: the three faults asserted below fit in 30 s on an idle box, but not always on a loaded one (a killed
    # worker's restart takes seconds there: 2 of 3 ran once beside an hour-long soak)
    proc = subprocess.run([sys.executable, str(SOAK), "--minutes", "0.75", "--clients", "4", "--fault-every", "5",
                           "--freeze", "2", "--sample-every", "7", "--json", str(out), "--samples",
                           str(tmp_path / "s.csv")], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["replica_count"] == 3 and report["samples"] >= 4
    assert [f.split()[1] for f in report["faults"]][:3] == ["sigstop", "sigkill", "redis"]
    assert report["normal"].get("ok", 0) > 100 and not report["normal"].get("lost")
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[0].startswith("t_s,rss_mb,fds,metrics_bytes,redis_used_memory") and len(rows) >= 5
