"""A/B of the reference worker: the build cpu-tiny was measured on (2026-11-30, 02b79ff) against today's, same box,
side by side, no speculation, rounds interleaved (ABBA). Per window: the CPU seconds of each worker's busiest thread
(the engine thread: torch computes there with 1 thread) per generated token, which other load on the box inflates
far less than wall time.

    git archive 02b79ff | tar -x -C /tmp/old        # the old tree
    python benchmarks/calibration_cpu_tiny_ab.py /tmp/old . --json benchmarks/results/cpu-tiny-profile/calibration-cpu-tiny-ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_step_time import _free_port, _get, _thread_cpu, wait_healthy  # noqa: E402


def _counter(text: str, name: str) -> float:
    vals = [float(line.split()[-1]) for line in text.splitlines() if line.startswith((name + " ", name + "{"))]
    return sum(vals) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="tree of the old build")
    ap.add_argument("new", help="tree of the new build")
    ap.add_argument("--concurrency", default="1,16,32")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    arms = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    tmp = Path(tempfile.mkdtemp(prefix="ab-"))
    procs, urls, logs = {}, {}, []
    try:
        for arm, root in arms.items():
            port = _free_port()
            logs.append(open(tmp / f"{arm}.log", "w"))  # noqa: SIM115 (closed below)
            procs[arm] = subprocess.Popen([sys.executable, "-m", "adaptspec", "worker", "--port", str(port),
                                           "--threads", "1", "--max-batch", "64"], env={**os.environ, "PYTHONPATH": root},
                                          stdout=logs[-1], stderr=subprocess.STDOUT)
            urls[arm] = f"http://127.0.0.1:{port}"
        for arm, url in urls.items():
            wait_healthy(url, procs[arm])
        rows = []
        for c in (int(x) for x in args.concurrency.split(",")):
            for rep in range(2):
                for arm in (("old", "new") if rep == 0 else ("new", "old")):
                    cpu0, m0 = _thread_cpu(procs[arm].pid), _get(urls[arm] + "/metrics")
                    out = tmp / "bench.json"
                    subprocess.run([sys.executable, "-m", "adaptspec", "bench", "--url", urls[arm], "--concurrency",
                                    str(c), "--duration", str(args.duration), "--warmup", "2", "--max-tokens", "64",
                                    "--no-progress", "--json", str(out)], check=True, stdout=subprocess.DEVNULL,
                                   env={**os.environ, "PYTHONPATH": arms["new"]})
                    cpu1, m1 = _thread_cpu(procs[arm].pid), _get(urls[arm] + "/metrics")
                    spent = {t: cpu1[t] - cpu0.get(t, 0.0) for t in cpu1}
                    gen = _counter(m1, "vllm:generation_tokens_total") - _counter(m0, "vllm:generation_tokens_total")
                    row = {"arm": arm, "c": c, "rep": rep, "gen": gen, "engine_cpu_s": max(spent.values()),
                           "proc_cpu_s": sum(spent.values()), "engine_cpu_ms_per_token": 1e3 * max(spent.values()) / gen}
                    rows.append(row)
                    print(json.dumps(row), flush=True)  # noqa: T201 (a CLI: results to stdout)
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(timeout=30)
        for f in logs:
            f.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
