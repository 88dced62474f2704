"""Offline evaluation of per-request acceptance prediction (adaptspec/control/predict.py) on acceptance traces.

For each proposer in the traces, the quantity predicted (--target) is a request's per-token alpha when
served at --gamma (accepted / tried draft positions: what the cost model takes), its tokens per step served
at --gamma, or its mean run over output positions at max_k (the trace's own form). Compared, on the same
requests:
  - class mean: the mean of the quantity over the training requests of the request's class (the best a
    class table can know);
  - class alpha: the class's pooled alpha over the training requests (for steps / positions turned into the
    quantity with the request's true output length, the same conversion the predictor gets);
  - predictor: `AcceptancePredictor` trained online on the training requests' feedback (the per-request
    stats a proxy sees serving them at --gamma), from the prompt text and the shipped classifier's scores;
  - class mean alpha + adjust: the class's mean per-request alpha moved by `AcceptancePredictor.adjust` (the
    way a policy keeps its table's level and adds the per-request part).
Split: a seeded half / half shuffle (train, test), and prequential (each request predicted before it is
learned from, in a seeded order; the class-mean baseline is then a running mean).

    PYTHONPATH=. python benchmarks/eval_predict.py --trace benchmarks/traces/tiny-shipped.jsonl \\
        --trace benchmarks/traces/tiny-extra.jsonl [--gamma 8] [--seeds 0,1,2,3,4]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np

from adaptspec.control.classify import Classifier
from adaptspec.control.predict import AcceptancePredictor, RequestFeatures
from adaptspec.control.types import CONTENT_CLASSES


def load(paths: list[str]) -> list[dict]:
    seen, out = set(), []
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    if r.get("prompt") not in seen:  # the same prompt in two files is one request
                        seen.add(r.get("prompt"))
                        out.append(r)
    return out


def feedback(runs: list[int], gamma: int) -> tuple[int, int, int, int, int]:
    """What serving the request at `gamma` reports: (draft_tokens, accepted, steps, drafts, tried)."""
    n, pos = len(runs), 0
    draft_tokens = accepted = steps = drafts = tried = 0
    while pos < n:
        k = min(gamma, n - pos - 1)
        emitted = min(runs[pos], k + 1)
        steps += 1
        if k > 0:
            drafts += 1
            draft_tokens += k
            accepted += emitted - 1
            tried += min(k, emitted)
        pos += emitted
    return draft_tokens, accepted, steps, drafts, tried


def mean_run_from_alpha(alpha: float, n: int, max_k: int) -> float:
    """Mean over the n positions of the expected run (truncated geometric, capped like the trace's)."""
    caps = np.minimum(max_k, n - 1 - np.arange(n)).clip(min=0)  # [n] drafted tokens per position
    if alpha >= 1.0:
        return float(np.mean(caps + 1))
    return float(np.mean((1.0 - alpha ** (caps + 1)) / (1.0 - alpha)))


def tokens_per_step_from_alpha(alpha: float, n: int, gamma: int) -> float:
    """n / E[steps] of serving n tokens at `gamma` when each drafted token is accepted with prob. alpha
    (independently), with the last steps' drafts capped by the tokens left (a small DP over positions)."""
    alpha = min(max(alpha, 0.0), 1.0 - 1e-9)
    steps = np.zeros(n + 1)  # steps[pos]: expected steps to finish from pos
    for pos in range(n - 1, -1, -1):
        k = min(gamma, n - pos - 1)
        e = np.arange(1, k + 2)  # tokens the step may emit
        p = alpha ** (e - 1) * (1.0 - alpha)
        p[-1] = alpha**k  # all k drafts accepted (+ the bonus token)
        steps[pos] = 1.0 + float(p @ steps[pos + e])
    return n / steps[0]


def actual(runs: list[int], max_k: int, gamma: int, target: str) -> float:
    if target == "positions":
        return float(np.mean(runs))
    _, accepted, steps, _, tried = feedback(runs, gamma)
    if target == "alpha":
        return accepted / tried if tried else 0.0
    return len(runs) / steps


def predicted(alpha: float, n: int, max_k: int, gamma: int, target: str) -> float:
    if target == "positions":
        return mean_run_from_alpha(alpha, n, max_k)
    if target == "alpha":
        return alpha
    return tokens_per_step_from_alpha(alpha, n, gamma)


def r2(pred: np.ndarray, y: np.ndarray) -> float:
    return float(1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))


def corr(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(pred, y)[0, 1]) if np.std(pred) > 0 else float("nan")


def evaluate(recs: list[dict], feats: list[RequestFeatures], proposer: str, gamma: int, seed: int,
             target: str, opts: dict) -> dict:
    idx = [i for i, r in enumerate(recs) if proposer in r["accept_runs"]]
    y = np.array([actual(recs[i]["accept_runs"][proposer], recs[i]["max_k"], gamma, target) for i in idx])
    order = np.random.default_rng(seed).permutation(len(idx))
    half = len(idx) // 2
    train, test = order[:half], order[half:]
    fb = [feedback(recs[i]["accept_runs"][proposer], gamma) for i in idx]
    cls = [recs[i]["class"] for i in idx]
    n_out = [recs[i]["output_tokens"] for i in idx]
    max_k = [recs[i]["max_k"] for i in idx]

    # class mean / class alpha from the training half
    by_cls, succ, trials = defaultdict(list), defaultdict(float), defaultdict(float)
    for j in train:
        by_cls[cls[j]].append(y[j])
        succ[cls[j]] += fb[j][1]
        trials[cls[j]] += fb[j][4]
    overall = float(np.mean(y[train]))
    cm = np.array([np.mean(by_cls[cls[j]]) if by_cls[cls[j]] else overall for j in test])
    ca = np.array([predicted(succ[cls[j]] / trials[cls[j]] if trials[cls[j]] else 0.5, n_out[j], max_k[j], gamma,
                             target) for j in test])
    pred = AcceptancePredictor(**opts)
    for j in train:
        d, a, s, nd, t = fb[j]
        pred.observe(feats[idx[j]], proposer, d, a, s, drafts=nd, tried_per_position=[t], accepted_per_position=[a])
    pm = np.array([predicted(pred.predict(feats[idx[j]], proposer).alpha, n_out[j], max_k[j], gamma, target)
                   for j in test])
    # the class's mean per-request alpha moved per request by `adjust` (how the policy would use it)
    alpha_cls = defaultdict(list)
    for j in train:
        alpha_cls[cls[j]].append(fb[j][1] / fb[j][4] if fb[j][4] else 0.0)
    pa = np.array([predicted(pred.adjust(feats[idx[j]], proposer, float(np.mean(alpha_cls[cls[j]] or [0.5])))[0],
                             n_out[j], max_k[j], gamma, target) for j in test])
    yt = y[test]
    out = {"n": len(idx), "split": {"class_mean": (r2(cm, yt), corr(cm, yt)), "class_alpha": (r2(ca, yt), corr(ca, yt)),
                                    "predictor": (r2(pm, yt), corr(pm, yt)), "adjusted": (r2(pa, yt), corr(pa, yt))}}

    # prequential: predict, then learn, in a seeded order
    pred = AcceptancePredictor(**opts)
    run_sum, run_n = defaultdict(float), defaultdict(int)
    pc, pp = [], []
    for j in order:
        pp.append(predicted(pred.predict(feats[idx[j]], proposer).alpha, n_out[j], max_k[j], gamma, target))
        tot_n = sum(run_n.values())
        pc.append(run_sum[cls[j]] / run_n[cls[j]] if run_n[cls[j]] else
                  (sum(run_sum.values()) / tot_n if tot_n else pp[-1]))
        d, a, s, nd, t = fb[j]
        pred.observe(feats[idx[j]], proposer, d, a, s, drafts=nd, tried_per_position=[t], accepted_per_position=[a])
        run_sum[cls[j]] += y[j]
        run_n[cls[j]] += 1
    skip = 20  # both start cold: score after the first requests
    yo = y[order][skip:]
    pc, pp = np.array(pc[skip:]), np.array(pp[skip:])
    out["prequential"] = {"class_mean": (r2(pc, yo), corr(pc, yo)), "predictor": (r2(pp, yo), corr(pp, yo))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", required=True)
    ap.add_argument("--gamma", type=int, default=8, help="gamma of the simulated serving feedback (default 8)")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--prior-var", type=float, default=0.5, help="AcceptancePredictor prior_var")
    ap.add_argument("--max-trials", type=float, default=8.0, help="AcceptancePredictor max_trials_per_request")
    ap.add_argument("--forget", type=float, default=1e-3, help="AcceptancePredictor forget")
    ap.add_argument("--target", choices=("alpha", "steps", "positions"), default="alpha",
                    help="alpha: the request's per-token acceptance served at --gamma (accepted / tried: what "
                         "the cost model takes; no output length needed); steps: tokens per step served at "
                         "--gamma; positions: the trace's mean run over output positions at max_k (steps and "
                         "positions convert predicted alphas with the request's true output length)")
    args = ap.parse_args()
    recs = load(args.trace)
    clf = Classifier.default()
    scores = [clf.predict(r["prompt"])[1] if r.get("prompt") else {r["class"]: 1.0} for r in recs]
    feats = [RequestFeatures.from_prompt(r.get("prompt", ""), max_tokens=128, temperature=0.0, class_scores=sc)
             for r, sc in zip(recs, scores, strict=True)]
    # cost of the prediction path (features + one prediction per proposer), CPU time: the box may be busy
    warm = AcceptancePredictor()
    t0 = time.process_time()
    for _ in range(5):
        for r, sc in zip(recs, scores, strict=True):
            f = RequestFeatures.from_prompt(r.get("prompt", ""), 128, 0.0, sc)
            warm.predict(f, "ngram")
            warm.predict(f, "draft")
    cost = (time.process_time() - t0) / (5 * len(recs)) * 1e6
    counts = ", ".join(f"{c} {sum(r['class'] == c for r in recs)}" for c in CONTENT_CLASSES)
    chars = np.mean([len(r.get("prompt", "")) for r in recs])
    print(f"{len(recs)} requests ({counts}); prompts {chars:.0f} chars on average; features + 2 predictions: "
          f"{cost:.0f} us CPU per request")
    seeds = [int(s) for s in args.seeds.split(",")]
    proposers = sorted({p for r in recs for p in r["accept_runs"]})
    print(f"\ntarget: {args.target}, gamma {args.gamma}")
    print("| proposer | eval | class mean R2 / r | class alpha R2 / r | predictor R2 / r | class mean alpha + adjust R2 / r |")
    print("|---|---|---|---|---|---|")
    for prop in proposers:
        opts = {"prior_var": args.prior_var, "max_trials_per_request": args.max_trials, "forget": args.forget}
        res = [evaluate(recs, feats, prop, args.gamma, s, args.target, opts) for s in seeds]

        def cell(kind, key, res=res):
            vals = np.array([r[kind][key] for r in res])  # [seeds, 2]
            m = vals.mean(axis=0)
            return f"{m[0]:.2f} / {m[1]:.2f}"

        print(f"| {prop} | half/half (mean of {len(seeds)} seeds) | {cell('split', 'class_mean')} | "
              f"{cell('split', 'class_alpha')} | {cell('split', 'predictor')} | {cell('split', 'adjusted')} |")
        print(f"| {prop} | prequential | {cell('prequential', 'class_mean')} | - | {cell('prequential', 'predictor')} "
              "| - |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
