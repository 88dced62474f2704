"""The reference worker's target forward at 128 running requests: what drafting rows cost it.

    python benchmarks/padded_attention.py

One `TinyLlama.forward` over 128 requests (contexts 60-250 tokens, 1 torch thread), median of 5: every row
decoding one token, then the same batch with some rows verifying 4 drafted tokens. Attention runs as one padded
SDPA call (adaptspec/worker/model.py), so a single drafting row pads every row's query to 5 positions. Printed
for the write-up in docs/results/cpu-compare-128-256.md (2026-12-02).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import torch

from adaptspec.worker.model import TinyLlama

ROWS = 128


def main() -> None:
    torch.set_num_threads(1)
    model = TinyLlama.from_pretrained(str(Path(__file__).resolve().parents[1] / "adaptspec" / "assets" / "tiny-target"))
    cache = model.new_cache(max_slots=ROWS, max_len=512)
    rng = random.Random(0)
    ctx = [rng.randint(60, 250) for _ in range(ROWS)]

    def ms(lens: list[int]) -> float:
        tokens = [[5] * n for n in lens]
        times = []
        with torch.inference_mode():
            for _ in range(5):
                t = time.perf_counter()
                model.forward(tokens, list(range(ROWS)), ctx, cache)
                times.append(time.perf_counter() - t)
        return 1e3 * statistics.median(times)

    cases = {
        "every row decoding (query 1)": [1] * ROWS,
        "one row verifying 4 drafts": [5] + [1] * (ROWS - 1),
        "every other row verifying 4": [5 if i % 2 else 1 for i in range(ROWS)],
        "n-gram-like mix (0,0,1,2,4 drafts)": [1 + rng.choice([0, 0, 1, 2, 4]) for _ in range(ROWS)],
        "every row verifying 4": [5] * ROWS,
    }
    sys.stdout.write(f"| {ROWS} requests | forward ms |\n|---|---:|\n")
    for name, lens in cases.items():
        sys.stdout.write(f"| {name} ({sum(lens)} tokens) | {ms(lens):.1f} |\n")


if __name__ == "__main__":
    main()
