"""Ratios of `adaptspec bench compare` rows to a reference policy, with their spread over the rounds.

In round r of a compare run every policy served the same prompts (interleaved, rotated order), so the per-round
ratio tokens/s(policy) / tokens/s(reference) is a paired sample; the table gives, per load point and policy,
tokens/s over all rounds, the ratio of those totals, and the min / median / max of the per-round ratios (a
ratio whose per-round range excludes 1.0 is outside the run's spread).

    python benchmarks/compare_ratios.py c1-mixed.json --reference static:ngram:4 [--reference static:hybrid:4]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def ratio_rows(rows: list[dict], reference: str) -> list[str]:
    out = [f"| point | policy | tokens/s | x {reference} | per-round x {reference}: min / median / max |",
           "|---|---|---:|---:|---|"]
    by_point: dict[str, dict[str, dict]] = {}
    for r in rows:
        point = ", ".join(f"{k}={r[k]:g}" for k in ("concurrency", "rate") if k in r)
        by_point.setdefault(point, {})[r["policy"]] = r
    for point, rs in by_point.items():
        ref = rs.get(reference)
        if ref is None:
            raise SystemExit(f"no row for reference policy {reference!r} at {point} (have {sorted(rs)})")
        for name, r in rs.items():
            per = [a / b for a, b in zip(r["round_output_tokens_per_s"], ref["round_output_tokens_per_s"], strict=True)
                   if b > 0]
            total = r["output_tokens_per_s"] / ref["output_tokens_per_s"]
            spread = f"{min(per):.2f} / {statistics.median(per):.2f} / {max(per):.2f}" if per else "-"
            out.append(f"| {point} | {name} | {r['output_tokens_per_s']:.1f} | {total:.2f} | {spread} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path, help="rows written by `adaptspec bench compare --json`")
    ap.add_argument("--reference", action="append", required=True, help="policy label to divide by (repeatable)")
    args = ap.parse_args()
    data = json.loads(args.json.read_text())
    rows = data["rows"] if isinstance(data, dict) else data
    for ref in args.reference:
        print("\n".join(ratio_rows(rows, ref)) + "\n")


if __name__ == "__main__":
    main()
