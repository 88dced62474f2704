"""Acceptance rate alpha per content class for the draft and n-gram proposers on the tiny pair.

Held-out prompts (every 50th row of each source, never trained on; see train_tiny_models.py) are run
through the reference engine with speculation gamma = k, all classes mixed in one continuous batch, and
the engine's per-(class, proposer) counters give

    alpha (vLLM's acceptance rate)  = accepted_tokens / draft_tokens
    mean acceptance length          = 1 + accepted_tokens / drafts   (tokens per target step)
    leviathan alpha                 = the a with sum_{j=1..k} a^j = accepted_tokens / drafts
    proposal rate (n-gram)          = drafts / steps  (steps where a match was found)

    .venv/bin/python benchmarks/measure_alpha.py --per-class 12 --max-tokens 64 --gamma 4
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from adaptspec.worker.engine import Engine, GenRequest

ROOT = Path(__file__).resolve().parents[1]


def load_training_module():
    spec = importlib.util.spec_from_file_location("train_tiny_models", ROOT / "scripts" / "train_tiny_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def leviathan_alpha(mean_accepted: float, k: int) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(1, k + 1)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "../shared/data")
    ap.add_argument("--per-class", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    mod = load_training_module()
    corpus = mod.build_corpus(args.data.resolve())
    engine = Engine.tiny(max_batch=32, max_model_len=1024, num_threads=args.threads)
    prompts = []
    for cls, rows in sorted(corpus.items()):
        held = [m for split, m in rows if split == "heldout"]
        step = max(1, len(held) // args.per_class)
        for m in held[::step][: args.per_class]:
            ids = engine.encode(engine.apply_chat_template(m[:-1]))  # drop the reference answer
            ids = ids[-(engine.max_model_len - args.max_tokens - 1):]
            prompts.append((cls, ids))
    results = {}
    with engine:
        for proposer in ("draft", "ngram"):
            reqs = [GenRequest(f"{proposer}-{i}", ids, max_tokens=args.max_tokens, temperature=args.temperature,
                               seed=i, proposer=proposer, num_speculative_tokens=args.gamma, content_class=cls)
                    for i, (cls, ids) in enumerate(prompts)]
            before = engine.metrics().spec_by_class
            engine.generate_sync(reqs)
            after = engine.metrics().spec_by_class
            for (cls, prop), (d, t, a) in after.items():
                if prop != proposer:
                    continue
                d0, t0, a0 = before.get((cls, prop), (0, 0, 0))
                d, t, a = d - d0, t - t0, a - a0
                results[(cls, proposer)] = {
                    "drafts": d, "draft_tokens": t, "accepted": a,
                    "alpha": round(a / t, 3) if t else None,
                    "mean_accept_len": round(1 + a / d, 3) if d else None,
                    "leviathan_alpha": round(leviathan_alpha(a / d, args.gamma), 3) if d else None,
                }
    print(f"gamma={args.gamma} temperature={args.temperature} max_tokens={args.max_tokens} "
          f"prompts/class={args.per_class}")
    print(f"{'class':<11} {'proposer':<8} {'alpha':>6} {'lev.alpha':>9} {'accept len':>10} {'drafts':>7} "
          f"{'draft tok':>9}")
    for (cls, prop), r in sorted(results.items()):
        print(f"{cls:<11} {prop:<8} {r['alpha']!s:>6} {r['leviathan_alpha']!s:>9} {r['mean_accept_len']!s:>10} "
              f"{r['drafts']:>7} {r['draft_tokens']:>9}")
    if args.json:
        args.json.write_text(json.dumps({f"{c}/{p}": r for (c, p), r in results.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
