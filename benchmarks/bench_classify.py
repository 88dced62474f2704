"""Cost of classifying one unseen prompt: the shipped classifier vs another artifact or revision, side by side.

    .venv/bin/python benchmarks/bench_classify.py [--data ../shared/data] [--artifact DIR] [--baseline REV]
        [--rounds 3] [--instructions N] [--limit K] [--chars LO HI] [--json]

Prompts: the held-out test split of scripts/train_classifier.py (every class, real length distribution)
when ../shared/data is there, else a few built-in prompts. Each implementation runs in a child process of
its own, which times every prompt alone (perf_counter_ns and thread CPU time around one `predict`):
`shipped` = this checkout's `Classifier.default()`; `--artifact DIR` adds `artifact` = `Classifier.load(DIR)`
(e.g. a hashed model from `scripts/train_classifier.py --features hashed --out DIR`); `--baseline REV` adds
`baseline` = REV's shipped classifier (`git archive REV adaptspec`). The rounds alternate between them
(A, B, A, B, ...) so that all see the same load. The p50 /
p90 / p99 of all calls are printed per implementation, with new / old ratios.

`--instructions N` counts instead the instructions one prediction executes (valgrind's callgrind, user
space): each child runs under callgrind once with the first N prompts and once with none (same imports and
warm-up), and the difference / N is the figure: it does not depend on the box's load.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

# The child: load the shipped model, warm up, then time each prompt of the file (or just predict them all).
_CHILD = r"""
import gc, json, sys, time
from adaptspec.control.classify import Classifier
texts = json.load(open(sys.argv[1], encoding="utf-8"))
mode, n, artifact = sys.argv[2], int(sys.argv[3]), sys.argv[4]
model = Classifier.load(artifact) if artifact else Classifier.default()
for t in ("warm up", "Translate to German: good night", "def f(x):\n    return x"):
    model.predict(t)
if mode == "count":
    for t in texts[:n]:
        model.predict(t)
    sys.exit(0)
wall, cpu = [], []
gc.disable()
for t in texts:
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    model.predict(t)
    wall.append(time.perf_counter_ns() - t0)
    cpu.append(time.thread_time_ns() - c0)
json.dump({"wall": wall, "cpu": cpu, "model": type(model).__name__, "path": sys.modules["adaptspec"].__file__},
          sys.stdout)
"""


def _trainer():
    spec = importlib.util.spec_from_file_location("train_classifier", REPO / "scripts" / "train_classifier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _percentiles(ns: list[int]) -> dict[str, float]:
    us = np.array(ns) / 1000.0
    return {"p50_us": round(float(np.percentile(us, 50)), 1), "p90_us": round(float(np.percentile(us, 90)), 1),
            "p99_us": round(float(np.percentile(us, 99)), 1), "mean_us": round(float(us.mean()), 1)}


def _export(rev: str, into: Path) -> Path:
    """`adaptspec/` of revision `rev` under `into` (the package only: its classifier artifact included)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "adaptspec"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _child(path: Path, artifact: str, prompts: Path, mode: str, n: int,
           valgrind: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(path), "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, "-c", _CHILD, str(prompts), mode, str(n), artifact]
    if valgrind:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command]
    # cwd = the package root too: `python -c` puts the working directory first on sys.path
    return subprocess.run(command, env=env, cwd=path, capture_output=True, text=True, check=True)


def _instructions(path: Path, artifact: str, prompts: Path, n: int) -> int:
    """Instructions per prediction: callgrind's total with n prompts minus its total with none, / n."""
    totals = []
    for k in (0, n):
        err = _child(path, artifact, prompts, "count", k, valgrind=True).stderr
        totals.append(int(re.search(r"Collected : (\d+)", err).group(1)))
    return round((totals[1] - totals[0]) / n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--artifact", default="", metavar="DIR", help="a classifier artifact to compare with")
    ap.add_argument("--baseline", default="", metavar="REV", help="git revision to compare with (default: none)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0, help="time at most this many prompts (0 = all)")
    ap.add_argument("--chars", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                    help="only prompts of LO..HI characters (hop_cpu.py --prompts distinct: 200 4000)")
    ap.add_argument("--instructions", type=int, default=0, metavar="N",
                    help="count instructions per prediction over the first N prompts instead of timing")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    args = ap.parse_args(argv)

    if (args.data / "combined" / "classifier_prompts.jsonl.gz").exists():
        rows = [r for r in _trainer().load_rows(args.data) if r["split"] == "test"]
        source = "held-out test split"
    else:
        rows = [{"text": t, "label": "?"} for t in ("Translate to German: good night", "What is 12 * 7?",
                                                     "Write a Python function that sorts a list.")]
        source = "built-in prompts"
    if args.chars:
        rows = [r for r in rows if args.chars[0] <= len(r["text"]) <= args.chars[1]]
    if args.limit:
        rows = rows[:: max(1, len(rows) // args.limit)][: args.limit]
    texts = [r["text"] for r in rows]
    result: dict = {"prompts": len(texts), "source": source,
                    "prompt_chars_p50": int(np.median([len(t) for t in texts])),
                    "load_average_1m": round(os.getloadavg()[0], 2), "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-classify-") as tmp:
        prompts = Path(tmp) / "prompts.json"
        prompts.write_text(json.dumps(texts), encoding="utf-8")
        runs_of: dict[str, tuple[Path, str]] = {"shipped": (REPO, "")}  # name -> (package root, artifact)
        if args.baseline:
            runs_of = {"baseline": (_export(args.baseline, Path(tmp)), ""), **runs_of}
            result["baseline"] = args.baseline
        if args.artifact:
            runs_of["artifact"] = (REPO, str(Path(args.artifact).resolve()))
            result["artifact"] = args.artifact
        if args.instructions:
            n = min(args.instructions, len(texts))
            result["instructions_per_prediction"] = {
                name: _instructions(path, artifact, prompts, n) for name, (path, artifact) in runs_of.items()}
            result["instructions_prompts"] = n
        else:
            runs: dict[str, dict[str, list[int]]] = {name: {"wall": [], "cpu": []} for name in runs_of}
            for _ in range(args.rounds):
                for name, (path, artifact) in runs_of.items():
                    out = json.loads(_child(path, artifact, prompts, "time", len(texts)).stdout)
                    runs[name]["wall"] += out["wall"]
                    runs[name]["cpu"] += out["cpu"]
                    result.setdefault("models", {})[name] = out["model"]
            result["rounds"] = args.rounds
            for name, r in runs.items():
                result[name] = {"wall": _percentiles(r["wall"]), "thread_cpu": _percentiles(r["cpu"])}
    other = "artifact" if args.artifact else "shipped"
    base = "shipped" if args.artifact else "baseline"
    if other in result and base in result:
        result[f"{other}_over_{base}"] = {
            k: {q: round(result[other][k][q] / result[base][k][q], 3) for q in result[other][k]}
            for k in ("wall", "thread_cpu")}
    ipp = result.get("instructions_per_prediction", {})
    if other in ipp and base in ipp:
        result[f"instructions_{other}_over_{base}"] = round(ipp[other] / ipp[base], 3)
    print(json.dumps(result, indent=None if args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
