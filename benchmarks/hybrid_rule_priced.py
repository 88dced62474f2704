"""The reference worker's hybrid rules side by side at batch 1, priced by the work they do (noise-free on a busy box).

Each configuration serves the same shipped prompts one at a time (greedy and T=0.7, seeded) on the built-in tiny
pair; the engine's step counters (steps, batched tokens, KV tokens, head passes and drafted tokens) are priced with
the `cpu-tiny` profile's coefficients (a step 5.11 ms + 0.494 ms per batched token + 2.43 us per KV token; a head
pass 1.725 ms + 0.085 ms per drafted token), so a loaded machine changes how long this takes, not its figures.
Wall time on a quiet box is `adaptspec bench compare`'s job; this isolates what the rule itself changes.

    python benchmarks/hybrid_rule_priced.py --prompts 40          # EAGLE:3 and hybrid:4 at min_match 0 / 2 / 32
"""

from __future__ import annotations

import argparse
import json
import logging

from adaptspec.bench.prompts import default_prompts
from adaptspec.worker.engine import Engine, GenRequest

log = logging.getLogger("hybrid_rule_priced")

STEP_MS, TOKEN_MS, KV_MS, PASS_MS, DRAFTED_MS = 5.11, 0.494, 0.00243, 1.725, 0.085
CONFIGS = (("EAGLE:3", "eagle", 3, 2), ("hybrid:4 lookup first", "hybrid", 4, 0),
           ("hybrid:4 per step (default)", "hybrid", 4, 2), ("hybrid:4 priced choice only", "hybrid", 4, 32))


def run_config(proposer: str, k: int, min_match: int, prompts, temperatures) -> dict:
    engine = Engine.tiny(max_batch=4, max_model_len=1024, hybrid_min_match=min_match)
    with engine:
        for t in temperatures:
            for i, p in enumerate(prompts):
                ids = engine.encode(engine.apply_chat_template(p.chat_messages()))
                engine.generate_sync([GenRequest(f"{t}-{i}", ids, max_tokens=64, temperature=t, seed=i,
                                                 proposer=proposer, num_speculative_tokens=k)])
        m = engine.metrics()
    c = m.step_counters
    passes = sum(c.draft_passes.values())
    model_tokens = sum(v for p, v in c.drafted_tokens.items() if p != "ngram")
    ms = (c.steps * STEP_MS + c.batched_tokens * TOKEN_MS + c.kv_tokens * KV_MS + passes * PASS_MS
          + model_tokens * DRAFTED_MS)
    return {"steps": c.steps, "tokens": m.num_generated_tokens, "tokens_per_step": m.num_generated_tokens / c.steps,
            "batched_per_step": c.batched_tokens / c.steps, "passes_per_step": passes / c.steps,
            "drafted_per_step": {p: v / c.steps for p, v in c.drafted_tokens.items()},
            "priced_tokens_per_s": m.num_generated_tokens / ms * 1000.0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=40, help="shipped prompts, spread over the six classes")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    every = max(1, len(default_prompts()) // args.prompts)
    prompts = default_prompts()[::every][:args.prompts]
    rows = {}
    for n, (label, proposer, k, min_match) in enumerate(CONFIGS, 1):
        log.info("[%d/%d] %s ...", n, len(CONFIGS), label)
        rows[label] = run_config(proposer, k, min_match, prompts, (0.0, 0.7))
    base = rows[CONFIGS[0][0]]["priced_tokens_per_s"]
    print("| configuration | tokens / step | batched / step | head passes / step | priced tokens/s | / EAGLE:3 |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in rows.items():
        print(f"| {label} | {r['tokens_per_step']:.2f} | {r['batched_per_step']:.2f} | {r['passes_per_step']:.2f} "
              f"| {r['priced_tokens_per_s']:.1f} | {r['priced_tokens_per_s'] / base:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
