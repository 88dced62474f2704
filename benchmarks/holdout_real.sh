#!/usr/bin/env bash
# The real check of issue 17 on this CPU: the realized speedup the proxy reports per class at concurrency 1
# (static n-gram with a 50% holdout) against the side-by-side comparison of off vs n-gram on the same prompts
# (TPOT p50 off / n-gram), all three behind one reference worker (tiny pair) and interleaved: each class runs
# in ROUNDS rounds that visit the three proxies in a rotated order with the same prompts (seed = round), so a
# drift in the machine's load hits all three alike. Run it when the machine is otherwise idle
# (`pgrep -f "bench compare"` empty). Results in $OUT (default benchmarks/results/holdout/real);
# `python benchmarks/holdout_real.py $OUT` prints the comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-benchmarks/results/holdout/real}
N=${N:-40}            # measured requests per class and proxy
ROUNDS=${ROUNDS:-4}
CLASSES=${CLASSES:-code chat}
mkdir -p "$OUT"
port() { $PY -c 'from adaptspec.bench.loadgen import free_port; print(free_port())'; }
WPORT=$(port)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
healthy() {
    for _ in $(seq 180); do curl -sf "$1/health" > /dev/null && return 0; sleep 1; done
    echo "not healthy: $1" >&2
    return 1
}
$PY -m adaptspec worker --port "$WPORT" > "$OUT/worker.log" 2>&1 &
PIDS+=($!)
healthy "http://127.0.0.1:$WPORT"
declare -A URL
for name in off ngram held; do
    p=$(port)
    case $name in
        off) pol="{kind: static, proposer: none, gamma: 0}" ;;
        ngram) pol="{kind: static, proposer: ngram, gamma: 4}" ;;
        held) pol="{kind: static, proposer: ngram, gamma: 4, holdout: {share: 0.5, min_samples: 5, guard: false}}" ;;
    esac
    cat > "$OUT/proxy-$name.yaml" <<YAML
policy: $pol
pools:
  - {name: tiny, engine: adaptspec, per_request: true, proposers: [ngram, draft], max_gamma: 8, profile: cpu-tiny,
     workers: [{name: w0, url: "http://127.0.0.1:$WPORT"}]}
server: {host: 127.0.0.1, port: $p}
YAML
    $PY -m adaptspec serve --config "$OUT/proxy-$name.yaml" --port "$p" --watch 0 > "$OUT/proxy-$name.log" 2>&1 &
    PIDS+=($!)
    URL[$name]="http://127.0.0.1:$p"
    healthy "${URL[$name]}"
done
order=(off ngram held)
for cls in $CLASSES; do
    for r in $(seq "$ROUNDS"); do
        for i in 0 1 2; do
            name=${order[$(((i + r) % 3))]}
            $PY -m adaptspec bench --url "${URL[$name]}" --concurrency 1 --requests $((N / ROUNDS)) \
                --warmup-requests 1 --workload "$cls" --max-tokens 64 --seed "$r" --label "$name" \
                --json "$OUT/$cls-$name-r$r.json" --no-progress > /dev/null
        done
    done
done
$PY -m adaptspec report --url "${URL[held]}" --json > "$OUT/report.json"
