"""Issue 34's peer table: adaptive (policies/default.yaml) vs each peer policy (policies/peers/*.yaml) and the
best static, on the measured-form stand-in traces, as `adaptspec simulate` runs them.

The trace is benchmarks/standin_traces.py's family (default fleet, 600 requests, trace seed = --seed), replayed in
shuffled order on benchmarks/profiles/standin-8b-eagle-heavy.yaml with --proposers ngram,eagle at concurrency
1,8,32,128 (lowest first, learning carried over, calibration on): the setting of benchmarks/sim_learning.py.

    nice -n 5 python benchmarks/peer_table.py --md docs/results/peers-table.md --json docs/results/peers.json

The same run through the CLI (the trace written first):

    python benchmarks/standin_traces.py --family fleet --n 600 --seed 0 --out /tmp/fleet-0.jsonl
    adaptspec simulate --trace /tmp/fleet-0.jsonl --profile benchmarks/profiles/standin-8b-eagle-heavy.yaml \\
      --proposers ngram,eagle --concurrency 1,8,32,128 --seed 0 \\
      --policies off,static:eagle:3,static:eagle:8,static:ngram:8 --policy-file policies/default.yaml \\
      --policy-file policies/peers/<each>.yaml

Acceptance (issue 34): adaptive >= 0.98x every peer at every level, and >= 1.05x each peer somewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import standin_traces  # noqa: E402  (a sibling script)

from adaptspec.bench.simulator import parse_policy, policy_from_file, sweep  # noqa: E402
from adaptspec.bench.traces import TraceWorkload  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STATICS = ("off", "static:eagle:3", "static:eagle:8", "static:ngram:8")
KEEP = ("policy", "concurrency", "output_tokens_per_s", "tpot_ms_p50", "proposer_mix", "mean_gamma_speculating",
        "speculation_share")
FLOOR, WIN = 0.98, 1.05


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="fleet")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default=str(ROOT / "benchmarks/profiles/standin-8b-eagle-heavy.yaml"))
    ap.add_argument("--concurrency", default="1,8,32,128")
    ap.add_argument("--adaptive", default=str(ROOT / "policies/default.yaml"))
    ap.add_argument("--peers", default=",".join(str(p) for p in sorted((ROOT / "policies/peers").glob("*.yaml"))))
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args(argv)

    reqs = standin_traces.make(args.family, args.n, args.seed)
    wl = TraceWorkload(reqs, f"standin-{args.family}-{args.seed}", order="shuffle", seed=args.seed)
    peers = [policy_from_file(p) for p in args.peers.split(",") if p]
    adaptive = policy_from_file(args.adaptive)
    adaptive.name = "adaptive"
    specs = [parse_policy(s, args.profile, args.seed) for s in STATICS] + [adaptive] + peers
    loads = [("concurrency", float(c)) for c in args.concurrency.split(",")]
    rows = [{k: r[k] for k in KEEP if k in r} for r in
            sweep(specs, args.profile, wl, loads, seed=args.seed, proposers=("ngram", "eagle"), progress=False)]
    rows = json.loads(json.dumps(rows, default=float))
    tput = {(r["policy"], int(r["concurrency"])): r["output_tokens_per_s"] for r in rows}
    levels = [int(float(c)) for c in args.concurrency.split(",")]
    names = [p.name for p in peers]
    best_static = {c: max(STATICS, key=lambda s: tput[(s, c)]) for c in levels}

    lines = [f"Trace: standin {args.family}, {args.n} requests, seed {args.seed}; profile {Path(args.profile).stem}; "
             "proposers ngram,eagle. Output tokens/s; in brackets adaptive / that policy.", "",
             "| concurrency | adaptive | best static | " + " | ".join(names) + " |",
             "|---:|---:|---:|" + "---:|" * len(names)]
    ratios: dict[str, dict[int, float]] = {n: {} for n in names}
    for c in levels:
        a = tput[("adaptive", c)]
        s = best_static[c]
        cells = [f"{a:,.0f}", f"{tput[(s, c)]:,.0f} {s} ({a / tput[(s, c)]:.2f}x)"]
        for n in names:
            ratios[n][c] = a / tput[(n, c)]
            cells.append(f"{tput[(n, c)]:,.0f} ({ratios[n][c]:.2f}x)")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("")
    verdict = {}
    for n in names:
        low = min(ratios[n].items(), key=lambda kv: kv[1])
        high = max(ratios[n].items(), key=lambda kv: kv[1])
        ok_floor, ok_win = low[1] >= FLOOR, high[1] >= WIN
        verdict[n] = {"min_ratio": low[1], "min_at": low[0], "max_ratio": high[1], "max_at": high[0],
                      "floor_met": ok_floor, "win_met": ok_win}
        lines.append(f"- [{'PASS' if ok_floor and ok_win else 'MISS'}] adaptive vs {n}: min {low[1]:.3f}x at "
                     f"c={low[0]} (>= {FLOOR} {'met' if ok_floor else 'NOT met'}), max {high[1]:.3f}x at c={high[0]} "
                     f"(>= {WIN} {'met' if ok_win else 'NOT met'})")
    lines.append("")
    lines.append("What each ran (proposer mix, mean admitted k while speculating):")
    lines.append("")
    for r in rows:
        if r["policy"] in ("adaptive", *names):
            mix = " + ".join(f"{'off' if p == 'none' else p} {v:.0%}"
                             for p, v in sorted(r["proposer_mix"].items(), key=lambda kv: -kv[1]) if v >= 0.005)
            lines.append(f"- {r['policy']} c={int(r['concurrency'])}: {mix}, k {r['mean_gamma_speculating']:.1f}")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.md:
        Path(args.md).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "verdict": verdict, "best_static": best_static},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
