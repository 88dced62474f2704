"""Synthetic GPU-like acceptance traces (the format of benchmarks/traces/README.md) for robustness sweeps.

The acceptance SHAPE follows what public measurement studies of speculative decoding on GPUs report, written
down here as round numbers before any sweep was run (nothing is fitted to a figure this project reports):

- EAGLE-style heads: high per-token acceptance on chat / math / code (~0.6-0.8), lower on translation and
  summaries; it varies from request to request (Beta around the class mean) and decays mildly with depth.
- n-gram / prompt lookup: bimodal. A request either reuses its context (copy / edit / summarise / RAG: the
  answer has long spans that appear verbatim in the prompt or earlier output) or it does not (creative
  chat, translation: near-zero hits). In a copying request the output alternates between copied spans
  (geometric length) where the lookup drafts right until the span ends, and novel spans where it misses.

    python benchmarks/gpu_like_traces.py --kind mixed --n 400 --seed 0 --out /tmp/gpu-mixed.jsonl

Kinds: `mixed` (a general assistant fleet) and `copyheavy` (RAG / editing: mostly summarize, code, structured).
Lengths come from the simulator's class length model (adaptspec/bench/workloads.py CLASS_SPECS), not its
acceptance table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from adaptspec.bench.traces import TraceRequest, dump
from adaptspec.bench.workloads import CLASS_SPECS, Workload

# Per class: EAGLE mean per-token acceptance; share of requests that copy from context; mean copied span
# length (tokens); mean novel span length between copies; n-gram hit rate outside copied spans.
EAGLE_ALPHA = {"chat": 0.70, "math": 0.78, "code": 0.75, "structured": 0.72, "summarize": 0.62, "translate": 0.55}
EAGLE_DECAY = 0.97  # per draft position
EAGLE_CONCENTRATION = 8.0  # a + b of the per-request Beta
COPY_SHARE = {"chat": 0.08, "math": 0.15, "code": 0.45, "structured": 0.50, "summarize": 0.70, "translate": 0.05}
COPY_SPAN = {"chat": 12.0, "math": 10.0, "code": 30.0, "structured": 20.0, "summarize": 25.0, "translate": 8.0}
NOVEL_SPAN = {"chat": 40.0, "math": 30.0, "code": 15.0, "structured": 12.0, "summarize": 20.0, "translate": 30.0}
MISS_HIT = 0.04  # chance the lookup still drafts one right token outside a copied span

KINDS = {
    "mixed": {"chat": 0.30, "code": 0.20, "summarize": 0.20, "structured": 0.10, "math": 0.10, "translate": 0.10},
    "copyheavy": {"summarize": 0.45, "code": 0.25, "structured": 0.20, "chat": 0.10},
}


def eagle_runs(rng: np.random.Generator, cls: str, n_out: int, max_k: int) -> np.ndarray:
    """[n_out] runs of a head whose per-request rate is Beta around the class mean, decaying with depth."""
    m = EAGLE_ALPHA[cls]
    a = rng.beta(m * EAGLE_CONCENTRATION, (1.0 - m) * EAGLE_CONCENTRATION)
    rates = np.clip(a * EAGLE_DECAY ** np.arange(max_k), 0.0, 1.0)  # [max_k]
    ok = rng.random((n_out, max_k)) < rates  # [n_out, max_k]
    return 1 + np.cumprod(ok, axis=1).sum(axis=1)  # [n_out]


def ngram_runs(rng: np.random.Generator, cls: str, n_out: int, max_k: int) -> np.ndarray:
    """[n_out] runs of a prompt lookup: copied spans (run = what is left of the span + 1) between novel ones."""
    copying = rng.random() < COPY_SHARE[cls]
    run = np.ones(n_out, dtype=np.int64)
    run += (rng.random(n_out) < MISS_HIT)  # the odd lucky single-token hit
    if not copying:
        return run
    i = int(rng.geometric(1.0 / NOVEL_SPAN[cls])) - 1 if rng.random() < 0.5 else 0
    while i < n_out:
        span = int(rng.geometric(1.0 / COPY_SPAN[cls]))
        end = min(i + span, n_out)
        left = end - np.arange(i, end)  # tokens of the span from each position on
        run[i:end] = 1 + np.minimum(left, max_k)  # drafts right to the span's end, then the bonus token
        i = end + int(rng.geometric(1.0 / NOVEL_SPAN[cls]))
    return run


def make(kind: str, n: int, seed: int, max_k: int = 8) -> list[TraceRequest]:
    rng = np.random.default_rng([seed, 101])
    wl = Workload(kind, KINDS[kind], CLASS_SPECS)
    cls_idx, prompt, output = wl.sample(rng, n)
    out = []
    for r in range(n):
        cls, n_out = wl.classes[cls_idx[r]], int(output[r])
        cap = n_out - np.arange(n_out)  # a step cannot emit past the end
        runs = {"ngram": np.minimum(ngram_runs(rng, cls, n_out, max_k), cap),
                "eagle": np.minimum(eagle_runs(rng, cls, n_out, max_k), cap)}
        out.append(TraceRequest(f"gpu-{kind}-{seed}-{r}", cls, int(prompt[r]), n_out, max_k,
                                {p: tuple(int(x) for x in v) for p, v in runs.items()}))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=sorted(KINDS), default="mixed")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    path = dump(make(args.kind, args.n, args.seed, args.max_k), Path(args.out))
    sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
