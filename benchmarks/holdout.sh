#!/usr/bin/env bash
# The holdout / switchback / guard acceptance checks in the simulator (issue 17); results in
# benchmarks/results/holdout/*.jsonl (one JSON line per seed, then a summary line), summarised in
# docs/results/holdout.md. About an hour of one CPU core in all; `benchmarks/holdout.sh NAME...` runs only
# the named checks (e.g. switchback-h200), so two can run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=benchmarks/results/holdout
TRACE=benchmarks/traces/tiny-shipped.jsonl
mkdir -p "$OUT"
ONLY=" $* "
sim() {
    local name=$1; shift
    if [[ "$ONLY" != "  " && "$ONLY" != *" $name "* ]]; then return 0; fi
    $PY -m adaptspec.bench.holdout_sim "$@" > "$OUT/$name.jsonl"
    tail -n 1 "$OUT/$name.jsonl"
}

# 1. request-level interval vs the paired true per-request speedup, low load (adaptive policy, 10% holdout)
sim coverage-h200 coverage --profile h200-llama3-70b --concurrency 1 --seeds 20 --requests 1000 --share 0.1
sim coverage-trace coverage --trace $TRACE --profile cpu-tiny --concurrency 1 --seeds 20 --requests 900 --share 0.1
# 2. switchback interval vs the true system throughput ratio, high load (forced always-on draft g=4)
# (washout only after a switch, cooldown only before one: a window between two of its regime is measured whole)
sim switchback-trace switchback --trace $TRACE --profile cpu-tiny --concurrency 128 --seeds 20 --requests 24000 \
    --warmup 1000 --window-s 150 --washout-s 75 --cooldown-s 30
sim switchback-h200 switchback --profile h200-llama3-70b --concurrency 128 --seeds 20 --requests 20000 \
    --warmup 1000 --window-s 300 --washout-s 90 --cooldown-s 60
# 3. throughput cost of a 2% holdout (adaptive policy), low and high load
sim cost-h200 cost --profile h200-llama3-70b --concurrency 1,64 --seeds 20 --requests 1500 --share 0.02
sim cost-h200-capped cost --profile h200-llama3-70b --concurrency 1 --seeds 20 --requests 1500 --share 0.02 \
    --max-cost 0.015
sim cost-trace cost --trace $TRACE --profile cpu-tiny --concurrency 1 --seeds 10 --requests 1500 --share 0.02
# the share as one of decode time (holdout.share_of: time): cost share x (1 - 1/S)
sim cost-h200-time cost --profile h200-llama3-70b --concurrency 1 --seeds 20 --requests 1500 --share 0.02 \
    --share-of time
sim cost-trace-time cost --trace $TRACE --profile cpu-tiny --concurrency 1 --seeds 10 --requests 1500 --share 0.02 \
    --share-of time
# 4. the guard against a forced always-on policy where it is slower than off (and not against a faster one)
sim guard-trace guard --trace $TRACE --profile cpu-tiny --concurrency 1 --seeds 20 --requests 300 \
    --window-s 3 --washout-s 0.6
sim guard-trace-faster guard --trace $TRACE --profile cpu-tiny --policy static:ngram:4 --concurrency 1 --seeds 20 \
    --requests 300 --window-s 3 --washout-s 0.6
sim guard-h200 guard --profile h200-llama3-70b --concurrency 128 --seeds 6 --requests 6000 \
    --window-s 300 --washout-s 90 --cooldown-s 60
# ... and not against a faster always-on at low load on H200-70B (1.44x at c=1, 1.38x at c=8)
sim guard-h200-c1-faster guard --profile h200-llama3-70b --policy static:draft:4 --concurrency 1 --seeds 20 \
    --requests 300 --window-s 20 --washout-s 4
sim guard-h200-c8-faster guard --profile h200-llama3-70b --concurrency 8 --seeds 20 --requests 1500 \
    --window-s 20 --washout-s 4
# one switchback config across loads, windows in x y y x blocks (the regime after a switch runs 240 s: the
# drain after on->off takes ~64 s at c=128): slower than off at c=128 / c=64, faster at c=32 / 8 / 1
# guard_loads NAME FLAGS...: one guard config at the five loads, NAME, NAME-c64 (slower than off), NAME-c32-faster,
# NAME-c8-faster, NAME-c1-faster (faster than off)
guard_loads() {
    local name=$1; shift
    sim "$name" guard "$@" --concurrency 128 --requests 3000
    sim "$name-c64" guard "$@" --concurrency 64 --requests 3000
    sim "$name-c32-faster" guard "$@" --concurrency 32 --requests 2000
    sim "$name-c8-faster" guard "$@" --concurrency 8 --requests 1500
    sim "$name-c1-faster" guard "$@" --concurrency 1 --requests 300
}
ABBA="--profile h200-llama3-70b --window-s 120 --washout-s 30 --order abba --seeds 20"
guard_loads guard-h200-abba $ABBA
# engine-side switch (issue 17, h-guard2): the worker applies the window's regime to its running requests from
# the next step on (no drain), and a window's throughput is the worker's step-level token count; one config
# across loads: 6 s windows (1 s washout after a switch), x y y x blocks
ENG="--profile h200-llama3-70b --window-s 6 --washout-s 1 --order abba --seeds 20 --engine-switch"
guard_loads guard-h200-engine $ENG
# ... and the switchback interval of the same windows vs the true throughput ratio at c=128
sim switchback-h200-engine switchback --profile h200-llama3-70b --concurrency 128 --seeds 20 --requests 4000 \
    --warmup 500 --window-s 6 --washout-s 1 --order abba --engine-switch
