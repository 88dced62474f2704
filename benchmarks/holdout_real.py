"""The real check's comparison (benchmarks/holdout_real.sh): per class, the proxy's realized speedup at c=1 (holdout
interval of the class's n-gram stratum with the most held requests) against the interleaved side-by-side runs of
off and n-gram on the same prompts (geometric mean over rounds of TPOT p50 off / n-gram), each with its 95%
interval (the side by side: t over its rounds), and the interval of their ratio: the two are independent
measurements, so on the log scale the ratio's standard error is sqrt(se_holdout^2 + se_side^2) (normal
approximation; the holdout's se read back from its interval's width at z = 1.96, a little wider than its t).
A ratio interval that contains 1 +- 10% but reaches past it says the check cannot resolve 10% at this size.

    python benchmarks/holdout_real.py [DIR]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from adaptspec.control.holdout import t_quantile


def main() -> int:
    d = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "holdout" / "real")
    report = json.loads((d / "report.json").read_text())
    rows: dict[str, dict] = {}  # per class the n-gram stratum with the most held requests (the load bucket the
    for r in report["requests"]:  # proxy sees at c=1 can be 1 or 2-3: the next request arrives before the feedback)
        if r["arm"] == "ngram" and r["n_control"] > rows.get(r["content_class"], {"n_control": -1})["n_control"]:
            rows[r["content_class"]] = r
    sys.stdout.write("| class | load | n spec / off | realized (proxy) | 95% interval | side by side (TPOT p50 off / "
                     "ngram, rounds) | its 95% interval | difference | its 95% interval |\n"
                     "|---|---|---:|---:|---|---:|---|---:|---|\n")
    for cls in sorted({p.name.split("-")[0] for p in d.glob("*-off-r*.json")}):
        logs = []
        for off_path in sorted(d.glob(f"{cls}-off-r*.json")):
            ng_path = d / off_path.name.replace("-off-", "-ngram-")
            off, ng = json.loads(off_path.read_text())[0], json.loads(ng_path.read_text())[0]
            logs.append(math.log(off["tpot_ms_p50"] / ng["tpot_ms_p50"]))
        m = sum(logs) / len(logs)
        bench = math.exp(m)
        se_b = math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1) / len(logs)) if len(logs) > 1 else math.inf
        tb = t_quantile(0.975, len(logs) - 1) if len(logs) > 1 else math.inf
        side = f"[{math.exp(m - tb * se_b):.2f}, {math.exp(m + tb * se_b):.2f}]" if se_b < math.inf else "-"
        r = rows.get(cls)
        if r is None or r["speedup"] is None:
            sys.stdout.write(f"| {cls} | - | - | - | - | {bench:.3f} ({len(logs)}) | {side} | - | - |\n")
            continue
        se_h = (math.log(r["high"]) - math.log(r["low"])) / (2 * 1.96)
        diff = math.log(r["speedup"]) - m
        half = 1.96 * math.sqrt(se_h ** 2 + se_b ** 2)
        sys.stdout.write(f"| {cls} | {r['load_bucket']} | {r['n_treated']} / {r['n_control']} | {r['speedup']:.3f} | "
                         f"[{r['low']:.3f}, {r['high']:.3f}] | {bench:.3f} ({len(logs)}) | {side} | "
                         f"{100 * (math.exp(diff) - 1):+.1f}% | [{100 * (math.exp(diff - half) - 1):+.0f}%, "
                         f"{100 * (math.exp(diff + half) - 1):+.0f}%] |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
