"""Step time of the tiny pair on this CPU vs the number of batched tokens (calibrates `cpu-tiny`).

A decode step feeds each of B requests 1 + k tokens (k drafts) against a context of `--context` cached
tokens. The table gives the median wall time of one target (and draft) forward per (B, tokens per request),
so the roofline's fixed floor and compute slope can be read off: ms vs total batched tokens.

    .venv/bin/python benchmarks/measure_step_time.py --threads 1 --cpu-time --context 200 --reps 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from adaptspec.worker.model import TinyLlama

ASSETS = Path(__file__).resolve().parents[1] / "adaptspec" / "assets"
SHAPES = [(1, 1), (1, 2), (1, 3), (1, 5), (1, 9), (4, 1), (4, 5), (8, 1), (8, 5), (16, 1), (16, 5),
          (32, 1), (32, 2), (32, 3), (32, 5), (64, 1), (64, 5)]


@torch.inference_mode()
def time_forward(model: TinyLlama, batch: int, per_req: int, context: int, reps: int, clock=time.perf_counter) -> float:
    cache = model.new_cache(batch, context + per_req + 1)
    g = torch.Generator().manual_seed(0)
    model.forward([torch.randint(0, model.cfg.vocab_size, (context,), generator=g).tolist()] * batch,
                  list(range(batch)), [0] * batch, cache)
    toks = [torch.randint(0, model.cfg.vocab_size, (per_req,), generator=g).tolist() for _ in range(batch)]
    times = []
    for _ in range(reps + 2):
        t = clock()
        model.forward(toks, list(range(batch)), [context] * batch, cache)
        times.append(clock() - t)
    return statistics.median(times[2:]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the thread's CPU clock (needs --threads 1): robust to other load on the box")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time needs --threads 1")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    target = TinyLlama.from_pretrained(ASSETS / "tiny-target")
    draft = TinyLlama.from_pretrained(ASSETS / "tiny-draft")
    rows = []
    print(f"threads={args.threads} clock={'thread cpu' if args.cpu_time else 'wall'} context={args.context} target={target.cfg.num_params / 1e6:.2f}M "
          f"draft={draft.cfg.num_params / 1e6:.2f}M params")
    print(f"{'batch':>5} {'tok/req':>7} {'tokens':>6} {'target ms':>9} {'draft ms':>8} {'target us/token':>15}")
    for b, n in SHAPES:
        t = time_forward(target, b, n, args.context, args.reps, clock)
        d = time_forward(draft, b, n, args.context, args.reps, clock)
        rows.append({"batch": b, "tokens_per_request": n, "tokens": b * n, "target_ms": round(t, 3),
                     "draft_ms": round(d, 3)})
        print(f"{b:>5} {n:>7} {b * n:>6} {t:>9.2f} {d:>8.2f} {1e3 * t / (b * n):>15.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
