"""What one batched proposer pass costs against the rows in it: the EAGLE head and the draft model of the tiny pair.

    python benchmarks/measure_proposer_passes.py [--rows 1,8,32,64,128,256] [--reps 7] [--context 150]
                                                 [--json docs/results/proposer-passes.json]

Calls the worker's own proposers (`EagleProposer`, `DraftModelProposer`) on a batch of `rows` greedy requests
drafting gamma 4, 1 torch thread, and reports the median wall time per pass (propose time / 4) per batch size
and a least-squares line (overhead + per row). The draft model's requests are `--context` tokens long; each
timed call first catches up the one token accepted since the previous call, as in serving. This is the bare
propose call: the engine's own work around it (building the inputs, committing) is not in it, which is why
cpu-tiny keeps the batch-1 overheads measured end to end (scripts/fit_proposer_costs.py) and takes only the
per-row slopes from here.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from rich.progress import track

from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers.base import ProposeInput, SamplingParams
from adaptspec.worker.proposers.draft import DraftModelProposer
from adaptspec.worker.proposers.eagle import EagleProposer

ASSETS = Path(__file__).resolve().parent.parent / "adaptspec" / "assets"
GAMMA = 4


def _median_pass_ms(call, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) / GAMMA)
    return 1e3 * float(np.median(times))


def eagle_pass_ms(rows: int, reps: int, proposer: EagleProposer, gen: torch.Generator) -> float:
    hidden = proposer.head.cfg.hidden_size
    batch = [ProposeInput(f"e{i}", list(range(5, 60)), GAMMA, SamplingParams(0.0, 1.0),
                          torch.randn(hidden, generator=gen)) for i in range(rows)]
    proposer.propose(batch)  # warm-up
    return _median_pass_ms(lambda: proposer.propose(batch), reps)


def draft_pass_ms(rows: int, reps: int, context: int, proposer: DraftModelProposer) -> float:
    ids = [f"d{rows}-{i}" for i in range(rows)]
    seqs = {r: list(range(5, 5 + context)) for r in ids}
    for r in ids:
        proposer.add(r)

    def call() -> None:
        drafts = proposer.propose([ProposeInput(r, seqs[r], GAMMA, SamplingParams(0.0, 1.0)) for r in ids])
        for r, d in zip(ids, drafts, strict=True):
            seqs[r] = seqs[r] + d.token_ids[:1]  # one token accepted: the next call catches it up

    call()  # the draft's prefill of every request (not timed)
    try:
        return _median_pass_ms(call, reps)
    finally:
        for r in ids:
            proposer.remove(r)


def line(rows: list[int], ms: list[float]) -> tuple[float, float]:
    """Least squares ms = a + b * rows: (a ms, b us per row)."""
    a, b = np.linalg.lstsq(np.stack([np.ones(len(rows)), rows], 1), np.asarray(ms), rcond=None)[0]
    return float(a), float(1e3 * b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,8,32,64,128,256")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--context", type=int, default=150)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.set_num_threads(1)
    target = TinyLlama.from_pretrained(str(ASSETS / "tiny-target"))
    eagle = EagleProposer.from_dir(ASSETS / "tiny-eagle", target)
    draft = DraftModelProposer.from_dir(ASSETS / "tiny-draft", max_slots=max(rows) + 1,
                                        max_len=args.context + 8 * args.reps + 64)
    gen = torch.Generator().manual_seed(0)
    out = {"rows": rows, "gamma": GAMMA, "context": args.context, "eagle_ms": [], "draft_ms": []}
    with torch.inference_mode():
        for r in track(rows, description="proposer passes"):
            out["eagle_ms"].append(eagle_pass_ms(r, args.reps, eagle, gen))
            out["draft_ms"].append(draft_pass_ms(r, args.reps, args.context, draft))
    print("| rows | EAGLE head ms per pass | draft model ms per pass |\n|---:|---:|---:|")
    for r, e, d in zip(rows, out["eagle_ms"], out["draft_ms"], strict=True):
        print(f"| {r} | {e:.2f} | {d:.2f} |")
    for name in ("eagle", "draft"):
        a, b = line(rows, out[f"{name}_ms"])
        out[f"{name}_fit"] = {"overhead_ms": a, "us_per_row": b}
        print(f"{name}: {a:.2f} ms + {b:.1f} us per row")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
