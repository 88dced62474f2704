"""Latency of one content classification: the numpy path vs scikit-learn's per-call predict, side by side.

    .venv/bin/python benchmarks/bench_classify.py [--data ../shared/data] [--rounds 3] [--json]

Prompts: the held-out test split of scripts/train_classifier.py (every class, real length distribution)
when ../shared/data is there, else a few built-in prompts. Each prompt is timed alone (perf_counter_ns
around one `Classifier.predict`), over several rounds; the p50 / p90 / p99 of all calls are printed, per
class too. The scikit-learn column runs `LogisticRegression.predict_proba` on the same features (features
included) with the same weights, to show what the hand-written inference saves. Wall time counts the
time a busy machine keeps the thread off the CPU; the thread CPU time column does not, so both are shown
with the load average.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from adaptspec.control.classify import ARTIFACT_DIR, Classifier

REPO = Path(__file__).resolve().parents[1]


def _trainer():
    spec = importlib.util.spec_from_file_location("train_classifier", REPO / "scripts" / "train_classifier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _percentiles(ns: list[int]) -> dict[str, float]:
    us = np.array(ns) / 1000.0
    return {"p50_us": round(float(np.percentile(us, 50)), 1), "p90_us": round(float(np.percentile(us, 90)), 1),
            "p99_us": round(float(np.percentile(us, 99)), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0, help="time at most this many prompts (0 = all)")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    args = ap.parse_args(argv)

    trainer = _trainer()
    if (args.data / "combined" / "classifier_prompts.jsonl.gz").exists():
        rows = [r for r in trainer.load_rows(args.data) if r["split"] == "test"]
        source = "held-out test split"
    else:
        rows = [{"text": t, "label": "?"} for t in ("Translate to German: good night", "What is 12 * 7?",
                                                     "Write a Python function that sorts a list.")]
        source = "built-in prompts"
    if args.limit:
        rows = rows[:: max(1, len(rows) // args.limit)][: args.limit]
    model = Classifier.load(ARTIFACT_DIR)

    from sklearn.linear_model import LogisticRegression

    twin = LogisticRegression()
    twin.classes_ = np.arange(len(model.classes))
    twin.coef_, twin.intercept_ = model._w.T.copy(), model._b.copy()

    for r in rows[:50]:  # warm up caches and lazy imports
        model.predict(r["text"])
    ours: list[int] = []
    ours_cpu: list[int] = []
    by_class: dict[str, list[int]] = {}
    gc.disable()
    try:
        for _ in range(args.rounds):
            for r in rows:
                c0 = time.thread_time_ns()
                t0 = time.perf_counter_ns()
                model.predict(r["text"])
                dt = time.perf_counter_ns() - t0
                ours_cpu.append(time.thread_time_ns() - c0)
                ours.append(dt)
                by_class.setdefault(r["label"], []).append(dt)
        theirs: list[int] = []
        for r in rows[:: max(1, len(rows) // 500)]:
            t0 = time.perf_counter_ns()
            twin.predict_proba(trainer.matrix(model.featurizer, [r["text"]]))
            theirs.append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    result = {
        "prompts": len(rows),
        "source": source,
        "rounds": args.rounds,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
        "numpy_predict": _percentiles(ours),
        "numpy_predict_thread_cpu_time": _percentiles(ours_cpu),
        "sklearn_predict_proba_per_call": _percentiles(theirs),
        "per_class_numpy": {c: _percentiles(v) for c, v in sorted(by_class.items())},
    }
    result["sklearn_over_numpy_p50"] = round(
        result["sklearn_predict_proba_per_call"]["p50_us"] / result["numpy_predict"]["p50_us"], 1
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
