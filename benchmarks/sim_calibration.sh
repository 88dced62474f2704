#!/usr/bin/env bash
# Online step-time calibration in the simulator under a wrong belief (issue 11): every run behind
# docs/results/sim-calibration.md. Run from the repository root: bash benchmarks/sim_calibration.sh
# Each scenario runs `adaptive` four times on the same seed and requests: belief wrong / right (= the truth),
# with online calibration (the default) and without (--no-calibration).
set -euo pipefail
OUT=${OUT:-results/sim-calibration}   # raw outputs (git-ignored); the write-up is docs/results/sim-calibration.md
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PY=${PY:-python}
SIM="$PY -m adaptspec simulate --concurrency 1,8,32,128 --seed 0 --tolerance 0.97 --no-progress"

# the synthetic mixed trace of docs/results/sim-traces.md (sha256 5aa0f656...)
$PY -c "from adaptspec.bench.traces import synthesize, dump; from adaptspec.bench.workloads import get_workload; \
dump(synthesize(get_workload('mixed'), 400, seed=0, max_k=8, proposers=('ngram', 'eagle')), '$TMP/synthetic-mixed.jsonl')"

run() {  # scenario wrong-belief truth proposers policies-for-wrong+cal workload-args...
  local name=$1 wrong=$2 truth=$3 props=$4 pols=$5; shift 5
  echo "$name" >> "$TMP/order.txt"
  $SIM "$@" --proposers "$props" --policies "$pols" --profile "$wrong" --truth-profile "$truth" \
    --json "$TMP/$name@wrong+cal.json" > /dev/null
  $SIM "$@" --proposers "$props" --policies adaptive --profile "$truth" --truth-profile "$truth" \
    --json "$TMP/$name@right+cal.json" > /dev/null
  $SIM "$@" --proposers "$props" --policies adaptive --profile "$wrong" --truth-profile "$truth" --no-calibration \
    --json "$TMP/$name@wrong.json" > /dev/null
  $SIM "$@" --proposers "$props" --policies adaptive --profile "$truth" --truth-profile "$truth" --no-calibration \
    --json "$TMP/$name@right.json" > /dev/null
}
M=h100-llama3-8b-measured
run "synthetic trace, h200-70b believed, 8b-measured true" h200-llama3-70b $M ngram,eagle \
  off,static:eagle:3,static:ngram:8,adaptive,oracle --trace "$TMP/synthetic-mixed.jsonl"
run "tiny-shipped trace, h200-70b believed, 8b-measured true" h200-llama3-70b $M ngram,eagle \
  off,static:ngram:4,static:ngram:8,adaptive,oracle --trace benchmarks/traces/tiny-shipped.jsonl
run "tiny-extra trace, h200-70b believed, 8b-measured true" h200-llama3-70b $M ngram,eagle \
  off,static:ngram:4,static:ngram:8,adaptive,oracle --trace benchmarks/traces/tiny-extra.jsonl
run "tiny-shipped trace, h200-70b believed, cpu-tiny true" h200-llama3-70b cpu-tiny ngram,draft \
  off,static:ngram:4,static:draft:4,adaptive,oracle --trace benchmarks/traces/tiny-shipped.jsonl
run "mixed workload, h200-70b believed, 8b-measured true" h200-llama3-70b $M ngram,eagle \
  off,static:eagle:3,static:ngram:4,adaptive --workload mixed
run "reverse: mixed workload, cpu-tiny believed, h200-70b true" cpu-tiny h200-llama3-70b ngram,draft \
  off,static:draft:4,static:ngram:4,adaptive --workload mixed
run "reverse: mixed workload, h100-8b believed, h200-70b true" h100-llama3-8b h200-llama3-70b ngram,draft \
  off,static:draft:4,static:ngram:4,adaptive --workload mixed

# the README's H200-70B sweep (belief = truth, a roofline) with calibration on, as `adaptspec simulate` now runs
$PY -m adaptspec simulate --profile h200-llama3-70b --workload mixed --proposers ngram,draft \
  --policies off,static:draft:4,static:ngram:4,threshold,adaptive,bandit \
  --concurrency 1,2,4,8,16,32,64,128,256 --seed 0 --no-progress \
  --json "$OUT/sim-h200-llama3-70b-mixed-calibrated.json" --md "$OUT/sim-h200-llama3-70b-mixed-calibrated.md" > /dev/null

$PY - "$TMP" "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
from adaptspec.bench import report
tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
order = (tmp / "order.txt").read_text().splitlines()
rows = [{"scenario": s, "mode": m, **r} for s in order for m in report.CALIBRATION_MODES
        for r in json.loads((tmp / f"{s}@{m}.json").read_text())]
(out / "sim-calibration.json").write_text(json.dumps(rows, indent=1) + "\n")
parts = []
for s in order:
    mine = [r for r in rows if r["scenario"] == s]
    parts.append(f"### {s}\n\n{report.calibration_table(mine, s)}")
    full = [r for r in mine if r["mode"] == "wrong+cal"]
    if len({r["policy"] for r in full}) > 1:
        parts.append(f"All policies, wrong belief + calibration:\n\n{report.throughput_table(full)}\n\n"
                     + report.targets_text(report.check_targets(full, tolerance=0.97)))
(out / "sim-calibration-tables.md").write_text("\n\n".join(parts) + "\n")
report.plot_calibration(rows, out / "sim-calibration.png")
PYEOF
