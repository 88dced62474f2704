"""Record a worker's step counters during a benchmark, and replay them offline through the online step-time fit.

    python benchmarks/vllm_calibration_replay.py scrape http://127.0.0.1:PORT steps.jsonl   # Ctrl-C to stop
    python benchmarks/vllm_calibration_replay.py replay steps.jsonl [--profile cpu-tiny] [--every 100]

`scrape` reads the worker's `adaptspec:engine_*_total` counters every `--interval` seconds (what the proxy
scrapes) and appends them as JSON lines; `replay` feeds them in order to `StepCalibrator` with the profile
as the prior and prints the fit every `--every` scrapes and at the end: coefficients, trust, and which
coefficients were fitted or tied at the profile's ratio. Used for docs/results/cpu-compare-vllm.md (the
fit on run A's telemetry; the fit before the collinearity change: the same replay in a checkout of f82e6ac).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from dataclasses import asdict

from adaptspec.control.calibration import StepCalibrator
from adaptspec.control.profiles import load_profile
from adaptspec.control.telemetry import StepCounters
from adaptspec.proxy.scrape import parse_metrics


def scrape(url: str, out: str, interval: float) -> None:
    with open(out, "a") as f:
        while True:
            try:
                with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as r:
                    steps = parse_metrics(r.read().decode()).steps
            except OSError as exc:
                sys.stderr.write(f"scrape failed: {exc}\n")
                steps = None
            if steps is not None:
                f.write(json.dumps({"t": time.time(), **asdict(steps)}) + "\n")
                f.flush()
            time.sleep(interval)


def describe(cal: StepCalibrator, i: int) -> str:
    c = cal.costs()
    co = c.coefficients
    fitted = ",".join(k for k, v in c.fitted.items() if v)
    return (f"scrape {i}: {c.steps:.0f} steps trusted={c.trusted} overhead {co['overhead_s'] * 1e3:.1f} ms, "
            f"{co['compute_s_per_token'] * 1e3:.3f} ms per batched token, {co['kv_s_per_token'] * 1e6:.2f} us per "
            f"KV token, context {c.context_tokens:.0f}; fitted {fitted}; tied {','.join(getattr(c, 'tied', ()))}")


def replay(path: str, profile: str, every: int) -> None:
    cal = StepCalibrator(load_profile(profile))
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, row in enumerate(rows):
        row.pop("t", None)
        cal.update(StepCounters(**row))
        if i % every == 0 or i == len(rows) - 1:
            sys.stdout.write(describe(cal, i) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scrape")
    s.add_argument("url")
    s.add_argument("out")
    s.add_argument("--interval", type=float, default=2.0)
    r = sub.add_parser("replay")
    r.add_argument("path")
    r.add_argument("--profile", default="cpu-tiny")
    r.add_argument("--every", type=int, default=100)
    args = p.parse_args()
    if args.cmd == "scrape":
        scrape(args.url, args.out, args.interval)
    else:
        replay(args.path, args.profile, args.every)


if __name__ == "__main__":
    main()
