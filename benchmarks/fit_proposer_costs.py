"""Per-pass cost of each model proposer through the reference engine, relative to a target step (fits `cpu-tiny`).

Runs the built-in tiny engine in process, one request at a time (batch 1), over the shipped mixed prompts with
`none`, `draft` and `eagle` at gamma 2 and 4, interleaved prompt by prompt (round robin) so that load from
other processes hits every configuration alike. Each run is one window of the engine's own step telemetry
(control/telemetry.py: steps, step seconds, model passes per proposer), and the wall time of the proposer's
`propose` calls is measured around them. Per window:

    pass_s = propose seconds / passes          (a drafted token at batch 1: the pass, its sampling, and for
                                                the draft model the catch-up of its cache)
    step_s = step seconds / steps              (the `none` windows: a batch-1 decode step through the engine)

What a profile needs are the RATIOS pass_s / step_s: on a loaded machine every timing is inflated, the ratios
much less; the medians over the windows (and their quartiles, for the spread) are reported, with the
`overhead_s` each proposer gets in a profile whose batch-1 step is `--profile`'s.

    PYTHONPATH=. nice -n 19 .venv/bin/python benchmarks/fit_proposer_costs.py --rounds 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from adaptspec.bench.prompts import default_prompts
from adaptspec.control.profiles import load_profile
from adaptspec.worker.engine import Engine, GenRequest

CONFIGS = (("none", 0), ("draft", 2), ("draft", 4), ("eagle", 2), ("eagle", 4))
MODELS = ("draft", "eagle")


def time_proposers(engine: Engine) -> dict[str, float]:
    """Wrap each model proposer's `propose` with a wall-clock accumulator; -> the live totals (seconds)."""
    spent = dict.fromkeys(MODELS, 0.0)
    for name in MODELS:
        prop = engine._proposers[name]

        def timed(batch, _inner=prop.propose, _name=name):
            t0 = time.perf_counter()
            try:
                return _inner(batch)
            finally:
                spent[_name] += time.perf_counter() - t0

        prop.propose = timed
    return spent


def windows(engine: Engine, prompts: list[list[int]], rounds: int, max_tokens: int) -> list[dict]:
    spent = time_proposers(engine)
    out = []
    for r in range(rounds):
        for n, ids in enumerate(prompts):
            for proposer, k in CONFIGS:
                before, spent0 = engine.metrics().step_counters, dict(spent)
                engine.generate_sync([GenRequest(f"{r}-{n}-{proposer}{k}", ids, max_tokens=max_tokens,
                                                 temperature=0.0, ignore_eos=True, proposer=proposer,
                                                 num_speculative_tokens=k)])
                w = engine.metrics().step_counters.since(before)
                assert w is not None
                row = {"proposer": proposer, "k": k, "steps": w.steps, "step_s": w.step_seconds / w.steps}
                if proposer != "none":
                    passes = w.draft_passes.get(proposer, 0.0)
                    row.update(passes=passes, pass_s=(spent[proposer] - spent0[proposer]) / max(passes, 1.0))
                out.append(row)
    return out


def summary(xs: list[float]) -> dict[str, float]:
    q1, med, q3 = np.percentile(xs, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "n": len(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-class", type=int, default=2, help="shipped prompts per content class")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--profile", default="cpu-tiny", help="profile whose batch-1 target step the ratios scale")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    engine = Engine.tiny(max_batch=2, max_model_len=1024, num_threads=1)
    seen: dict[str, int] = {}
    prompts = []
    for item in default_prompts():
        if seen.get(item.category, 0) < args.per_class:
            seen[item.category] = seen.get(item.category, 0) + 1
            prompts.append(engine.encode(engine.apply_chat_template(item.chat_messages())))
    try:
        rows = windows(engine, prompts, args.rounds, args.max_tokens)
    finally:
        engine.stop()
    step = summary([r["step_s"] for r in rows if r["proposer"] == "none"])
    passes = {p: summary([r["pass_s"] for r in rows if r["proposer"] == p]) for p in MODELS}
    # per round and prompt, the pass over the none step of the same prompt and round: the paired ratio
    # (rows come in blocks of len(CONFIGS), `none` first)
    paired = {p: summary([r["pass_s"] / rows[i - i % len(CONFIGS)]["step_s"] for i, r in enumerate(rows)
                          if r["proposer"] == p]) for p in MODELS}
    prof = load_profile(args.profile)
    prof_step1 = prof.target.time(1.0, prof.context_tokens)
    report = {"windows": len(rows), "none_step_s": step, "pass_s": passes, "pass_over_step_paired": paired,
              "profile": prof.name, "profile_batch1_step_s": prof_step1,
              "profile_pass_s": {p: paired[p]["median"] * prof_step1 for p in MODELS}}
    if prof.offers("draft"):
        report["profile_draft_pass_over_step"] = prof.draft("draft").time(1, 1.0, prof.context_tokens,
                                                                          prof.target) / prof_step1
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**report, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
