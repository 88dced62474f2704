"""Markdown tables from benchmarks/results/holdout/*.jsonl (written by benchmarks/holdout.sh).

    python benchmarks/holdout_summary.py [DIR]      # prints the tables of docs/results/holdout.md
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def load(path: Path) -> tuple[list[dict], list[dict]]:
    rows, sums = [], []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        (sums if "summary" in obj else rows).append(obj.get("summary", obj))
    return rows, sums


def f(x, nd=3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def coverage(name: str, rows: list[dict]) -> None:
    strata = sum(r["strata"] for r in rows)
    cov = sum(r["covered_strata"] for r in rows)
    prim = [r["primary"] for r in rows if r["primary"]]
    hits = sum(p["covered"] for p in prim)
    print(f"**{name}**: primary stratum (most held requests) covered in **{hits}/{len(rows)}** seeds; all strata "
          f"with an interval: {cov}/{strata} ({100 * cov / max(strata, 1):.1f}%).\n")
    print("| seed | stratum | n spec / off | estimate | 95% interval | paired truth | covered |")
    print("|---:|---|---:|---:|---|---:|:-:|")
    for r in rows:
        p = r["primary"]
        if p:
            print(f"| {r['seed']} | {p['content_class']} {p['load_bucket']} {p['arm']} | {p['n_treated']} / "
                  f"{p['n_control']} | {f(p['speedup'])} | [{f(p['low'])}, {f(p['high'])}] | {f(p['truth'])} | "
                  f"{'yes' if p['covered'] else 'NO'} |")
    print()


def switchback(name: str, rows: list[dict]) -> None:
    hits = sum(r["covered"] for r in rows)
    print(f"**{name}**: covered in **{hits}/{len(rows)}** seeds.\n")
    print("| seed | windows policy / off | estimate | 95% interval | true ratio | covered |")
    print("|---:|---:|---:|---|---:|:-:|")
    for r in rows:
        print(f"| {r['seed']} | {r['windows_policy']} / {r['windows_off']} | {f(r['estimate'])} | "
              f"[{f(r['low'])}, {f(r['high'])}] | {f(r['truth'])} | {'yes' if r['covered'] else 'NO'} |")
    print()


def cost(name: str, rows: list[dict]) -> None:
    print(f"**{name}**\n")
    print("| concurrency | seeds | mean cost | max cost | seeds <= 1.5% | held / requests (mean) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c in sorted({r["concurrency"] for r in rows}):
        rs = [r for r in rows if r["concurrency"] == c]
        costs = [r["cost"] for r in rs]
        print(f"| {c} | {len(rs)} | {100 * sum(costs) / len(costs):.2f}% | {100 * max(costs):.2f}% | "
              f"{sum(x <= 0.015 for x in costs)}/{len(rs)} | {sum(r['held'] for r in rs) / len(rs):.0f} / "
              f"{sum(r['requests'] for r in rs) / len(rs):.0f} |")
    print()


def guard(name: str, rows: list[dict]) -> None:
    at = [r["guard_at_s"] for r in rows]
    ok = sum(a is not None and a <= 120 for a in at)
    got = sorted(a for a in at if a is not None)
    med = got[len(got) // 2] if got else None
    held = sum(bool(r["guarded_buckets"]) for r in rows)
    conc = sorted({r["concurrency"] for r in rows})
    print(f"**{name}** (c={','.join(map(str, conc))}): guard engaged in {len(got)}/{len(rows)} seeds, within 120 s in "
          f"**{ok}/{len(rows)}** (min {f(got[0] if got else None, 0)} s, median {f(med, 0)} s, max "
          f"{f(got[-1] if got else None, 0)} s; runs of {f(min(r['sim_time_s'] for r in rows), 0)} s or more), "
          f"guarded at the end in {held}/{len(rows)}; policy / off throughput (truth) "
          f"{f(sum(r['ratio_truth'] for r in rows) / len(rows))}; with the guard the run made "
          f"{f(sum(r['tok_s_with_guard'] for r in rows) / len(rows), 0)} tok/s vs off "
          f"{f(sum(r['tok_s_off'] for r in rows) / len(rows), 0)}.\n")


def main() -> None:
    d = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "holdout")
    for path in sorted(d.glob("*.jsonl")):
        rows, _ = load(path)
        if not rows:
            continue
        kind = path.stem.split("-")[0]
        {"coverage": coverage, "switchback": switchback, "cost": cost, "guard": guard}[kind](path.stem, rows)


if __name__ == "__main__":
    main()
