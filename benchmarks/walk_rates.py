"""Rates counted along one gamma's walk, priced at every gamma: the estimator's rates vs the walk-corrected ones.

For every shipped trace and proposer, the trace's requests are walked at a counted gamma G (10% of the requests
at a gamma drawn from 1-8, as exploration does; the engine's room: a step drafts no further than the output
can take), the per-position counts go into an `AlphaTable`, and its estimate prices every gamma g = 1..8
(`costmodel.expected_tokens_any`) with the conditional rates (`per_position`, what the cost model used before)
and with the walk-corrected rates (`priced`, `alpha.walk_rates`). Truth: the tokens per step of the walk at g
over the same requests. Prints the error of each, in percent, and a summary table.

    python benchmarks/walk_rates.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from adaptspec.bench.traces import load_traces
from adaptspec.control.alpha import AlphaTable
from adaptspec.control.costmodel import expected_tokens_any

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "benchmarks" / "traces").glob("*.jsonl"))
DEPTHS = (2, 3, 4, 5, 8)
GAMMAS = range(1, 9)


def walk(requests, proposer: str, gamma_of) -> tuple[list[int], list[int], float]:
    """Per-position (tried, accepted) counts and tokens per step of walking each request at gamma_of(request)."""
    tried, accepted, steps, tokens = [0] * 8, [0] * 8, 0, 0
    for r in requests:
        g, runs, i = gamma_of(r), r.accept_runs[proposer], 0
        while i < r.output_tokens:
            room = min(g, r.output_tokens - i - 1)
            a = min(runs[i] - 1, room) if room > 0 else 0
            for j in range(min(a + 1, room)):
                tried[j] += 1
            for j in range(a):
                accepted[j] += 1
            steps, tokens, i = steps + 1, tokens + a + 1, i + a + 1
    return tried, accepted, tokens / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows, out = [], sys.stdout
    for path in TRACES:
        for proposer in ("draft", "ngram"):
            reqs = [r for r in load_traces(path) if proposer in r.accept_runs]
            if not reqs:
                continue
            truth = {g: walk(reqs, proposer, lambda r, g=g: g)[2] for g in GAMMAS}
            for depth in DEPTHS:
                rng = random.Random(depth)
                tried, acc, _ = walk(reqs, proposer,
                                     lambda r, d=depth, q=rng: q.randint(1, 8) if q.random() < 0.1 else d)
                n = max(j + 1 for j in range(8) if tried[j] > 0)
                table = AlphaTable(half_life_tokens=None, half_life_s=None)
                table.observe_counts("w", proposer, "chat", sum(acc), sum(tried) - sum(acc), tried[:n], acc[:n], now=0.0)
                est = table.get("w", proposer, "chat", now=0.0)
                row = {"trace": path.stem, "proposer": proposer, "counted_at": depth}
                for name, alpha in (("conditional", est.per_position), ("walk", est.priced)):
                    row[name] = [100.0 * (expected_tokens_any(alpha, g) / truth[g] - 1.0) for g in GAMMAS]
                rows.append(row)
                for name in ("conditional", "walk"):
                    out.write(f"{path.stem:24s} {proposer:5s} G={depth} {name:11s} "
                              + " ".join(f"{x:+5.1f}" for x in row[name]) + "\n")
    out.write("\n| proposer | rates | max abs error % | mean abs error % | below G, mean signed % "
              "| above G, mean signed % |\n|---|---|---:|---:|---:|---:|\n")
    for proposer in ("draft", "ngram"):
        for name in ("conditional", "walk"):
            sel = [r for r in rows if r["proposer"] == proposer]
            errs = [abs(x) for r in sel for x in r[name]]
            below = [r[name][g - 1] for r in sel for g in GAMMAS if g < r["counted_at"]]
            above = [r[name][g - 1] for r in sel for g in GAMMAS if g > r["counted_at"]]
            out.write(f"| {proposer} | {name} | {max(errs):.1f} | {statistics.mean(errs):.2f} | "
                      f"{statistics.mean(below):+.2f} | {statistics.mean(above):+.2f} |\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
