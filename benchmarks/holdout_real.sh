#!/usr/bin/env bash
# The real check of issue 17 on this CPU: the realized speedup the proxy reports per class at concurrency 1
# (static n-gram with a 50% holdout, reference worker on the tiny pair) against a side-by-side
# `adaptspec bench compare` of off vs n-gram on the same prompts (TPOT p50 off / n-gram). Run it when the
# machine is otherwise idle (`pgrep -f "bench compare"` empty). Results in $OUT (default
# benchmarks/results/holdout/real); `python benchmarks/holdout_real.py $OUT` prints the comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-benchmarks/results/holdout/real}
N=${N:-40}
CLASSES=${CLASSES:-code chat}
mkdir -p "$OUT"
port() { $PY -c 'from adaptspec.bench.loadgen import free_port; print(free_port())'; }
WPORT=$(port)
PPORT=$(port)
cat > "$OUT/proxy.yaml" <<YAML
policy: {kind: static, proposer: ngram, gamma: 4, holdout: {share: 0.5, min_samples: 5, guard: false}}
pools:
  - {name: tiny, engine: adaptspec, per_request: true, proposers: [ngram, draft], max_gamma: 8, profile: cpu-tiny,
     workers: [{name: w0, url: "http://127.0.0.1:$WPORT"}]}
server: {host: 127.0.0.1, port: $PPORT}
YAML
$PY -m adaptspec worker --port "$WPORT" > "$OUT/worker.log" 2>&1 &
WPID=$!
$PY -m adaptspec serve --config "$OUT/proxy.yaml" --port "$PPORT" --watch 0 > "$OUT/proxy.log" 2>&1 &
SPID=$!
trap 'kill $SPID $WPID 2>/dev/null || true' EXIT
for url in "http://127.0.0.1:$WPORT/health" "http://127.0.0.1:$PPORT/health"; do
    for _ in $(seq 180); do curl -sf "$url" > /dev/null && break; sleep 1; done
    curl -sf "$url" > /dev/null || { echo "not healthy: $url" >&2; exit 1; }
done
for cls in $CLASSES; do
    $PY -m adaptspec bench --url "http://127.0.0.1:$PPORT" --concurrency 1 --requests "$N" --warmup-requests 2 \
        --workload "$cls" --max-tokens 64 --json "$OUT/holdout-$cls.json" --no-progress
done
$PY -m adaptspec report --url "http://127.0.0.1:$PPORT" --json > "$OUT/report.json"
kill $SPID $WPID
wait $SPID $WPID 2>/dev/null || true
trap - EXIT
for cls in $CLASSES; do
    $PY -m adaptspec bench compare --concurrency 1 --requests "$N" --warmup-requests 2 --rounds 2 --workload "$cls" \
        --max-tokens 64 --policies policies/static-off.yaml,policies/static-ngram.yaml \
        --json "$OUT/compare-$cls.json" --no-progress
done
