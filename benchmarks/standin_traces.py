"""Stand-in measured-form acceptance traces (benchmarks/traces/README.md) in families with different properties.

Issue 31 item 5: a robustness harness needs traces LIKE a held-out GPU set (an 8B target, prompt lookup `ngram`
and an EAGLE-3 head `eagle`, drafts up to 20) and families UNLIKE it. Nothing here is fitted to a result; the
`fleet` targets are the issue's round numbers (check them with --stats):

- output tokens median ~200, p99 ~1,700, a few up to 8k; prompt tokens median ~150, p90 ~900;
- lookup run >= 2 at ~40% of positions, >= 10 at ~18% (long copied stretches); head >= 2 at ~70%, >= 10 at ~5%;
- walking gamma 8 (a step at i emits min(run[i], 9), the next starts at i + that): lookup ~1.7 tokens a step
  (p90 of per-request means ~2.9), head ~3 (p90 ~4).

Model, per request: a class (family mix) and whether it copies from its context (class probability). A copying
request alternates copied stretches (geometric length, class mean) with novel ones so that a per-request share
`frac` (Beta) of its output is copied; inside a stretch the lookup drafts right to the stretch's end, outside it
hits by luck (per-request rate, short runs). The head has a per-request per-token rate (Beta around the class
mean, +0.10 inside copied stretches, mild decay with depth). The `prompt` is templated by class and is weakly
informative: copying requests usually (not always) carry a passage / code to work on, others sometimes do.

    python benchmarks/standin_traces.py --family fleet --n 600 --seed 0 --out /tmp/fleet-0.jsonl [--stats]
    python benchmarks/standin_traces.py --family nocopy --stats          # statistics only
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from adaptspec.bench.traces import TraceRequest, dump

CLASSES = ("chat", "math", "code", "structured", "summarize", "translate")
# Per class: P(request copies), mean copied share of its output, mean copied-stretch length, lookup hit rate
# outside stretches, head per-token rate, output-length multiplier.
COPY_P = {"chat": 0.12, "math": 0.25, "code": 0.60, "structured": 0.60, "summarize": 0.75, "translate": 0.05}
COPY_FRAC = {"chat": 0.25, "math": 0.20, "code": 0.50, "structured": 0.45, "summarize": 0.40, "translate": 0.25}
SPAN = {"chat": 25.0, "math": 18.0, "code": 70.0, "structured": 40.0, "summarize": 35.0, "translate": 12.0}
HIT = {"chat": 0.18, "math": 0.27, "code": 0.27, "structured": 0.29, "summarize": 0.22, "translate": 0.10}
HEAD = {"chat": 0.65, "math": 0.72, "code": 0.70, "structured": 0.68, "summarize": 0.63, "translate": 0.58}
OUT_MULT = {"chat": 1.0, "math": 1.3, "code": 1.2, "structured": 0.9, "summarize": 0.8, "translate": 0.6}
HEAD_CONC, HEAD_DECAY, HEAD_COPY_BONUS = 50.0, 0.995, 0.10

FAMILIES: dict[str, dict] = {
    # like the held-out set: a general fleet of copy-heavy tasks, reasoning and open conversation
    "fleet": dict(mix={"chat": 0.27, "summarize": 0.18, "code": 0.18, "structured": 0.10, "math": 0.17,
                       "translate": 0.10}, max_k=20, out=(200.0, 0.75, 0.003), copy=1.0, frac=0.0, hit=1.0,
                  head=0.0),
    # RAG / editing: most requests copy long stretches, the head is mediocre -> lookup at a high gamma wins
    "copyheavy": dict(mix={"summarize": 0.35, "code": 0.30, "structured": 0.25, "chat": 0.10}, max_k=20,
                      out=(260.0, 0.8, 0.004), copy=1.5, frac=0.25, hit=1.3, head=-0.10),
    # open conversation and reasoning with nothing to copy, a strong head -> the head at a high gamma wins
    "nocopy": dict(mix={"chat": 0.40, "math": 0.30, "code": 0.15, "translate": 0.15}, max_k=20,
                   out=(220.0, 0.9, 0.004), copy=0.03, frac=0.0, hit=0.3, head=0.10),
    # the fleet's lookup with a weak head (~0.4 per token) -> lookup (or off) wins, the head does not pay
    "weakhead": dict(mix={"chat": 0.27, "summarize": 0.18, "code": 0.18, "structured": 0.10, "math": 0.17,
                          "translate": 0.10}, max_k=20, out=(200.0, 0.75, 0.003), copy=1.0, frac=0.0, hit=1.0,
                     head=-0.30),
    # short chat / translation answers with max_k 8, little to copy, a head whose acceptance falls fast with
    # depth (x0.7 a position) -> the head, gamma past 3-4 buys ~nothing (a low gamma wins once verify costs)
    "short": dict(mix={"chat": 0.40, "translate": 0.25, "structured": 0.15, "math": 0.20}, max_k=8,
                  out=(75.0, 0.7, 0.0), copy=0.5, frac=-0.1, hit=0.8, head=0.12, decay=0.7),
}

# --- prompts: class templates, weakly informative (copying requests usually carry something to copy) ---
TASKS = {
    "chat": ["What do you think about {t}?", "Can you give me some advice on {t}?", "Tell me a story about {t}.",
             "I'm feeling stuck with {t}. Any ideas?", "Explain {t} like I'm five."],
    "math": ["Solve step by step: {a}x + {b} = {c}.", "What is the derivative of x^{a} * sin({b}x)?",
             "A train travels {c} km in {a} hours. What is its average speed?", "Prove that {a}^n - 1 is divisible "
             "by {d} for every n."],
    "code": ["Write a Python function that {t2}.", "Fix the bug in this code:", "Refactor this function to be "
             "more readable:", "Add type hints and docstrings to the following code:", "Why does this raise an error?"],
    "structured": ["Convert this to JSON with keys name, date and amount:", "Extract all the dates into a table:",
                   "Return a YAML config for {t}.", "Fill in the CSV below with the missing columns:"],
    "summarize": ["Summarize the following article in a few sentences:", "Using the passage below, answer: what "
                  "caused {t}?", "TL;DR of this text:", "Give the key points of the document below."],
    "translate": ["Translate into French: {s}", "Translate this to German, keeping the formatting: {s}",
                  "How do you say '{s}' in Spanish?"],
}
TOPICS = ["learning the guitar", "remote work", "a lighthouse keeper", "the water cycle", "saving money",
          "the French revolution", "sleep habits", "a dragon who hates fire", "inflation", "climate policy"]
FUNCS = ["reverses a linked list", "parses ISO dates", "merges two sorted lists", "counts word frequencies"]
SENTS = ["The meeting was moved to Thursday.", "Our new product ships next month.", "Please keep the door closed."]
CONTEXT = {
    "code": ["```python\ndef total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n```",
             "```js\nfunction fetchAll(urls) {\n  return Promise.all(urls.map(u => fetch(u)));\n}\n```"],
    "structured": ["Name: Ada Lovelace, born 10 Dec 1815; paid 120.50", "date,amount\n2024-01-03,17.20\n2024-02-11,"],
    "summarize": ["Article: The city council voted on Tuesday to expand the bike-lane network, citing ...",
                  "Passage: In 1903 the Wright brothers made the first powered flight near Kitty Hawk ..."],
}
CONTEXT_DEFAULT = ["Here is the text:\n\"The committee reviewed the proposal and agreed to revisit it ...\""]


def make_prompt(rng: np.random.Generator, cls: str, copying: bool) -> str:
    t = str(rng.choice(TASKS[cls])).format(t=rng.choice(TOPICS), t2=rng.choice(FUNCS), s=rng.choice(SENTS),
                                           a=rng.integers(2, 9), b=rng.integers(1, 20), c=rng.integers(30, 400),
                                           d=rng.integers(2, 5))
    if rng.random() < (0.8 if copying else 0.2):  # weakly informative: a context to copy, usually
        t += "\n\n" + str(rng.choice(CONTEXT.get(cls, CONTEXT_DEFAULT)))
    return t


def beta(rng: np.random.Generator, mean: float, conc: float) -> float:
    m = min(max(mean, 0.02), 0.98)
    return float(rng.beta(m * conc, (1 - m) * conc))


def lookup_and_copy(rng, cls, fam, n, max_k, copying):
    """[n] lookup runs and [n] bool copied-position mask."""
    h = beta(rng, HIT[cls] * fam["hit"], 6.0)
    run = np.where(rng.random(n) < h, 1 + np.minimum(rng.geometric(0.55, n), 3), 1)  # luck: 1-3 tokens
    mask = np.zeros(n, dtype=bool)
    if copying:
        frac, span = beta(rng, COPY_FRAC[cls] + fam["frac"], 5.0), SPAN[cls]
        novel = max(span * (1 - frac) / max(frac, 0.02), 1.0)
        i = int(rng.geometric(1.0 / novel)) - 1 if rng.random() < 0.7 else 0
        while i < n:
            end = min(i + int(rng.geometric(1.0 / span)), n)
            run[i:end] = 1 + np.minimum(end - np.arange(i, end), max_k)  # drafts right to the stretch's end
            mask[i:end] = True
            i = end + int(rng.geometric(1.0 / novel))
    return run, mask


def head_runs(rng, cls, fam, n, max_k, mask):
    a = beta(rng, HEAD[cls] + fam["head"], HEAD_CONC)
    per_pos = np.clip(a + HEAD_COPY_BONUS * mask, 0.0, 0.97)[:, None] * fam.get("decay", HEAD_DECAY) ** np.arange(max_k)  # [n, k]
    return 1 + np.cumprod(rng.random((n, max_k)) < per_pos, axis=1).sum(axis=1)


def make(family: str, n: int, seed: int) -> list[TraceRequest]:
    fam = FAMILIES[family]
    rng = np.random.default_rng([seed, 31, sorted(FAMILIES).index(family)])
    names = list(fam["mix"])
    probs = np.array([fam["mix"][c] for c in names])
    max_k, (med, sigma, tail) = fam["max_k"], fam["out"]
    out = []
    for r in range(n):
        cls = names[int(rng.choice(len(names), p=probs / probs.sum()))]
        copying = rng.random() < min(COPY_P[cls] * fam["copy"], 0.95)
        n_out = med * OUT_MULT[cls] * (1.6 if copying else 0.75) * np.exp(sigma * rng.standard_normal())
        if rng.random() < tail:
            n_out = rng.uniform(2000, 8192)
        n_out = int(np.clip(n_out, 4, 8192))
        p_tok = int(np.clip(150 * (1.8 if copying else 0.75) * np.exp(1.25 * rng.standard_normal()), 12, 32768))
        ng, mask = lookup_and_copy(rng, cls, fam, n_out, max_k, copying)
        ea = head_runs(rng, cls, fam, n_out, max_k, mask)
        cap = n_out - np.arange(n_out)  # a step cannot emit past the end
        runs = {p: tuple(np.minimum(v, cap).tolist()) for p, v in (("ngram", ng), ("eagle", ea))}
        out.append(TraceRequest(f"{family}-{seed}-{r:04d}", cls, p_tok, n_out, max_k, runs,
                                make_prompt(rng, cls, copying)))
    return out


def walk(runs: tuple[int, ...], gamma: int) -> tuple[int, int]:
    """(tokens, steps) of serving one request at a fixed gamma from position 0."""
    i = steps = 0
    while i < len(runs):
        i += min(runs[i], gamma + 1)
        steps += 1
    return len(runs), steps


# Batch-1 step prices of benchmarks/profiles/standin-8b-eagle-heavy.yaml (for the rough "which static wins" line).
T_OVER, T_TOK, EAGLE_STEP, EAGLE_TOK, NGRAM_FRAC = 7.0e-3, 2.1e-5, 2.1e-3, 8e-7, 0.006


def stats(reqs: list[TraceRequest]) -> dict:
    s: dict = {}
    outs = np.array([r.output_tokens for r in reqs])
    prompts = np.array([r.prompt_tokens for r in reqs])
    s["output_tokens p50/p90/p99/max"] = [int(np.percentile(outs, q)) for q in (50, 90, 99)] + [int(outs.max())]
    s["prompt_tokens p50/p90"] = [int(np.percentile(prompts, q)) for q in (50, 90)]
    for p in ("ngram", "eagle"):
        allr = np.concatenate([np.asarray(r.accept_runs[p]) for r in reqs])
        s[f"{p} share run>=2 / run>=10"] = [round(float((allr >= 2).mean()), 3), round(float((allr >= 10).mean()), 3)]
        per = np.array([walk(r.accept_runs[p], 8) for r in reqs])
        means = per[:, 0] / per[:, 1]
        s[f"{p} gamma-8 tokens/step mean-of-requests / pooled / p90"] = [
            round(float(means.mean()), 2), round(float(per[:, 0].sum() / per[:, 1].sum()), 2),
            round(float(np.percentile(means, 90)), 2)]
    t_off = T_OVER + T_TOK
    best = []
    for p in ("ngram", "eagle"):
        for g in sorted({1, 2, 3, 4, 6, 8, reqs[0].max_k}):
            per = np.array([walk(r.accept_runs[p], g) for r in reqs])
            verify = T_OVER + T_TOK * (g + 1)
            step = verify * (1 + NGRAM_FRAC) if p == "ngram" else verify + EAGLE_STEP + EAGLE_TOK * g
            best.append((round(float(per[:, 0].sum() / per[:, 1].sum() * t_off / step), 2), f"{p}:{g}"))
    s["batch-1 speedup vs off, best 4 statics (eagle-heavy prices)"] = sorted(best, reverse=True)[:4]
    s["classes"] = {c: sum(r.content_class == c for r in reqs) for c in CLASSES if any(r.content_class == c
                                                                                       for r in reqs)}
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="fleet")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="JSONL file to write (leave out with --stats for statistics only)")
    ap.add_argument("--stats", action="store_true", help="print the family's statistics")
    args = ap.parse_args(argv)
    if not args.out and not args.stats:
        ap.error("give --out and/or --stats")
    reqs = make(args.family, args.n, args.seed)
    if args.out:
        sys.stdout.write(f"{dump(reqs, Path(args.out))}\n")
    if args.stats:
        sys.stdout.write(f"family {args.family}, n {args.n}, seed {args.seed}, max_k {reqs[0].max_k}\n")
        for k, v in stats(reqs).items():
            sys.stdout.write(f"  {k}: {v}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
