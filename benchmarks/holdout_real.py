"""The real check's comparison (benchmarks/holdout_real.sh): per class, the proxy's realized speedup at c=1 (holdout
interval of the class's n-gram stratum with the most held requests) against bench compare's TPOT p50 off / n-gram
on the same prompts.

    python benchmarks/holdout_real.py [DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    d = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "holdout" / "real")
    report = json.loads((d / "report.json").read_text())
    rows: dict[str, dict] = {}  # per class the n-gram stratum with the most held requests (the load bucket the
    for r in report["requests"]:  # proxy sees at c=1 can be 1 or 2-3: the next request arrives before the feedback)
        if r["arm"] == "ngram" and r["n_control"] > rows.get(r["content_class"], {"n_control": -1})["n_control"]:
            rows[r["content_class"]] = r
    sys.stdout.write("| class | load | n spec / off | realized (proxy) | 95% interval | bench compare (TPOT p50 off / ngram) "
                     "| difference |\n|---|---|---:|---:|---|---:|---:|\n")
    for path in sorted(d.glob("compare-*.json")):
        cls = path.stem.split("-", 1)[1]
        by = {r["policy"]: r for r in json.loads(path.read_text())}
        bench = by["off"]["tpot_ms_p50"] / by["static:ngram:4"]["tpot_ms_p50"]
        r = rows.get(cls)
        if r is None or r["speedup"] is None:
            sys.stdout.write(f"| {cls} | - | - | - | - | {bench:.3f} | - |\n")
            continue
        sys.stdout.write(f"| {cls} | {r['load_bucket']} | {r['n_treated']} / {r['n_control']} | {r['speedup']:.3f} | "
                         f"[{r['low']:.3f}, {r['high']:.3f}] | {bench:.3f} | {100 * (r['speedup'] / bench - 1):+.1f}% |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
