"""The real check's comparison (benchmarks/holdout_real.sh): per class, the proxy's realized speedup at c=1 (holdout
interval of the class's n-gram stratum with the most held requests) against the interleaved side-by-side runs of
off and n-gram on the same prompts (geometric mean over rounds of TPOT p50 off / n-gram).

    python benchmarks/holdout_real.py [DIR]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def main() -> int:
    d = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "holdout" / "real")
    report = json.loads((d / "report.json").read_text())
    rows: dict[str, dict] = {}  # per class the n-gram stratum with the most held requests (the load bucket the
    for r in report["requests"]:  # proxy sees at c=1 can be 1 or 2-3: the next request arrives before the feedback)
        if r["arm"] == "ngram" and r["n_control"] > rows.get(r["content_class"], {"n_control": -1})["n_control"]:
            rows[r["content_class"]] = r
    sys.stdout.write("| class | load | n spec / off | realized (proxy) | 95% interval | side by side (TPOT p50 off / "
                     "ngram, rounds) | difference |\n|---|---|---:|---:|---|---:|---:|\n")
    for cls in sorted({p.name.split("-")[0] for p in d.glob("*-off-r*.json")}):
        logs = []
        for off_path in sorted(d.glob(f"{cls}-off-r*.json")):
            ng_path = d / off_path.name.replace("-off-", "-ngram-")
            off, ng = json.loads(off_path.read_text())[0], json.loads(ng_path.read_text())[0]
            logs.append(math.log(off["tpot_ms_p50"] / ng["tpot_ms_p50"]))
        bench = math.exp(sum(logs) / len(logs))
        r = rows.get(cls)
        if r is None or r["speedup"] is None:
            sys.stdout.write(f"| {cls} | - | - | - | - | {bench:.3f} ({len(logs)}) | - |\n")
            continue
        sys.stdout.write(f"| {cls} | {r['load_bucket']} | {r['n_treated']} / {r['n_control']} | {r['speedup']:.3f} | "
                         f"[{r['low']:.3f}, {r['high']:.3f}] | {bench:.3f} ({len(logs)}) | "
                         f"{100 * (r['speedup'] / bench - 1):+.1f}% |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
