"""How long a switch takes to give a pure regime at load, and how much per-request decode times drift over a run
(docs/results/holdout.md, "Guard latency"): why the guard cannot decide within 2 minutes at H200-70B c=128.

    python benchmarks/holdout_drain.py drain --first on --switch-s 150 --seeds 20   # policy -> off
    python benchmarks/holdout_drain.py drain --first off --switch-s 150 --seeds 20  # off -> policy
    python benchmarks/holdout_drain.py drift --seeds 2

drain: forced always-on `static:draft:4` and off; new requests get the first until --switch-s, the other after;
per seed the seconds from the switch until the last request of the first regime ends (the batch is then pure).
drift: always off (and always on); per seed the geometric mean of decode seconds per token of the requests that
started and ended inside each interval: concurrent requests share every step, so these move together.
One JSON line per seed, then a summary line (stdout).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

from adaptspec.bench.holdout_sim import Setup, _run, _workload
from adaptspec.bench.simulator import _SimClock, parse_policy
from adaptspec.control.policy import build_policy


class _Switch:
    """`first` for decisions before `at` on the clock, `then` after."""

    def __init__(self, first, then, at: float, clock: _SimClock) -> None:
        self.name, self.first, self.then, self.at, self.clock = "switch", first, then, at, clock

    def decide(self, content_class, workers, alphas):
        return (self.first if self.clock() < self.at else self.then).decide(content_class, workers, alphas)


def drain(args, profile: str) -> None:
    waits = []
    for seed in range(args.seeds):
        on = build_policy(parse_policy("static:draft:4", profile).policy)
        off = build_policy(parse_policy("off", profile).policy)
        clock = _SimClock()
        first, then = (on, off) if args.first == "on" else (off, on)
        ends: list[tuple[float, bool, float]] = []  # (end, drafted, decode seconds)
        s = Setup(profile, _workload(None, "mixed"), args.concurrency, seed, args.requests, 0)
        _run(_Switch(first, then, args.switch_s, clock), s,
             lambda d, rid, now, n, dec, ends=ends: ends.append((now, d.max_k > 0, dec * (n - 1) if dec else 0.0)),
             clock)
        left = [t for t, drafted, _ in ends if drafted == (args.first == "on") and t > args.switch_s]
        wait = max(left) - args.switch_s if left else 0.0
        waits.append(wait)
        sys.stdout.write(json.dumps({"seed": seed, "first": args.first, "pure_after_s": wait,
                                     "longest_decode_s": max(x for _, _, x in ends)}) + "\n")
    sys.stdout.write(json.dumps({"summary": {"first": args.first, "switch_s": args.switch_s, "seeds": len(waits),
                                             "min": min(waits), "median": statistics.median(waits),
                                             "max": max(waits)}}) + "\n")


def drift(args, profile: str) -> None:
    spans = ((20, 40), (60, 80), (100, 120), (200, 400))
    for policy in ("off", "static:draft:4"):
        for seed in range(args.seeds):
            rows: list[tuple[float, float, float]] = []  # (start of decode, end, decode s per token)
            s = Setup(profile, _workload(None, "mixed"), args.concurrency, seed, args.requests, 0)
            _run(build_policy(parse_policy(policy, profile).policy), s,
                 lambda d, rid, now, n, dec, rows=rows: rows.append((now - dec * (n - 1), now, dec)) if dec else None)
            out = {}
            for lo, hi in spans:
                inside = [dec for t0, t1, dec in rows if lo <= t0 and t1 <= hi]
                out[f"{lo}-{hi}"] = math.exp(sum(map(math.log, inside)) / len(inside)) if inside else None
            sys.stdout.write(json.dumps({"policy": policy, "seed": seed, "geomean_decode_s": out}) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("check", choices=("drain", "drift"))
    ap.add_argument("--profile", default="h200-llama3-70b")
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--first", choices=("on", "off"), default="on")
    ap.add_argument("--switch-s", type=float, default=150.0)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--requests", type=int, default=2500)
    args = ap.parse_args(argv)
    (drain if args.check == "drain" else drift)(args, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
