"""How much of n-gram lookup's per-position evidence is truncation (drafts shorter than gamma) on the tiny pair.

    python benchmarks/ngram_truncation.py [N]      # N prompts of the shipped set (default 120), ~10 s

The tiny target's greedy outputs (64 tokens) of the shipped prompts, walked with the reference worker's lookup
(latest match, n 2-4) at every gamma k: per class, the tokens a drafting step really emits at k ("walked"), and
what the cost model prices from the k=8 walk's per-position rates counted two ways: conditional on a draft
reaching the position ("cond": the worker's counting before 2026-12-02 evening) and with a draft the text cut
short counted as a miss where it ends ("reach": the counting since). Printed for docs/results/ngram-truncation.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from adaptspec.bench.prompts import default_prompts
from adaptspec.bench.trace_record import _chat_ids, greedy_outputs
from adaptspec.control.costmodel import expected_tokens_per_position, position_rates
from adaptspec.control.shadow import NgramIndex, walk_lookup
from adaptspec.worker.engine import Engine
from adaptspec.worker.model import TinyLlama
from adaptspec.worker.tokenizer import Tokenizer

ASSETS = Path(__file__).resolve().parents[1] / "adaptspec" / "assets"


def walk(reqs, k: int):
    """Pooled (tried, accepted) per position, decode steps, drafts, draft tokens and emitted tokens (after the
    first) of the walk at k."""
    tried, acc = np.zeros(k), np.zeros(k)
    steps = drafts = draft_tokens = emitted = 0
    for p, o in reqs:
        s = walk_lookup(p, o, k, (2, 4))
        tried[:len(s.tried_per_position)] += s.tried_per_position
        acc[:len(s.accepted_per_position)] += s.accepted_per_position
        steps += s.steps - 1
        drafts += s.drafts
        draft_tokens += s.draft_tokens
        emitted += len(o) - 1
    return tried, acc, steps, drafts, draft_tokens, emitted


def main() -> None:
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 120
    eng = Engine(TinyLlama.from_pretrained(ASSETS / "tiny-target"), Tokenizer.from_dir(ASSETS / "tiny-target"), None,
                 max_batch=32, max_speculative_tokens=16, num_threads=1)
    items = default_prompts()[:n]
    ids = [_chat_ids(eng.tokenizer, it) for it in items]
    outs = greedy_outputs(eng, ids, 64)
    eng.stop()
    by: dict[str, list] = {}
    for it, p, o in zip(items, ids, outs, strict=True):
        by.setdefault(it.category, []).append((p, o))
    by["all"] = [x for v in by.values() for x in v]
    out = sys.stdout
    out.write("| class | gamma | walked E | priced E (reach) | priced E (cond) | drafted / step walked | priced |\n")
    out.write("|---|---:|---:|---:|---:|---:|---:|\n")
    for cls, reqs in by.items():
        tried, acc, steps, drafts, _, _ = walk(reqs, 8)
        pi = drafts / steps
        reach = acc / np.maximum(tried, 1)  # the walk counts as the worker does now: a short draft is a miss
        cond = _conditional_rates(reqs)
        for g in (2, 3, 4, 5, 6, 8):
            _, _, st, _, dt, em = walk(reqs, g)
            e_reach = 1 + pi * (expected_tokens_per_position(position_rates(tuple(reach), g)) - 1)
            e_cond = 1 + pi * (expected_tokens_per_position(position_rates(tuple(cond), g)) - 1)
            out.write(f"| {cls} | {g} | {em / st:.3f} | {e_reach:.3f} | {e_cond:.3f} | {dt / st:.2f} | {pi * g:.2f} |\n")


def _conditional_rates(reqs) -> list[float]:
    """Per-position rates at k=8 counted conditional on the draft reaching the position (drafted >= j+1): the
    walk of `walk_lookup` with the counting it had before (it now counts the room, not the draft)."""
    tried, acc = np.zeros(8), np.zeros(8)
    for p, o in reqs:
        seq = np.asarray([*p, *o], dtype=np.int64)
        idx = NgramIndex(seq, 2, 4)
        i, n = 1, len(o)
        while i < n:
            room = min(8, n - i - 1)
            d = idx.lookup(len(p) + i, 8)[:room]
            if d.size == 0:
                i += 1
                continue
            same = d == seq[len(p) + i:len(p) + i + d.size]
            m = int(d.size if same.all() else np.argmin(same))
            tried[:min(m + 1, d.size)] += 1
            acc[:m] += 1
            i += m + 1
    return [a / t for t, a in zip(tried, acc, strict=True) if t]


if __name__ == "__main__":
    main()
