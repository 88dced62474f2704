"""CPU per decision of the proxy's classify + decide step with and without per-request acceptance prediction.

    PYTHONPATH=. python benchmarks/predict_cpu.py --trace benchmarks/traces/reference-within-class.jsonl \\
        [--rounds 5] [--learn 400]

Builds a `Proxy` (one per-request adaptspec pool with ngram + draft, the goodput policy) in process, teaches
its predictor from `--learn` finished requests replayed from the trace (so shifts and gates are live, as in
a proxy that has been serving), then times, over the trace's prompts as chat bodies, rounds that alternate
`estimator.predict: false` (classify + decide) and `true` (classify_body: one classifier pass for class and
scores, the features; decide on the request's predicted alphas). Prints CPU microseconds per request of each
(median over rounds) and their difference.
"""

from __future__ import annotations

import argparse
import statistics
import time

from adaptspec.bench.traces import load_traces
from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy
from adaptspec.proxy.request import Generation, generation_of


def _proxy(predict: bool) -> Proxy:
    cfg = parse_config({"estimator": {"predict": predict}, "pools": [
        {"name": "p", "engine": "adaptspec", "proposers": ["ngram", "draft"], "profile": "cpu-tiny",
         "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]})
    return Proxy(cfg)


def _teach(proxy: Proxy, reqs, n: int) -> None:
    """n finished requests: each trace request served at ngram gamma 4, fed back as the worker reports it."""
    worker = proxy.pools.workers["w0"]
    for i in range(n):
        req = reqs[i % len(reqs)]
        body = {"model": "m", "messages": [{"role": "user", "content": req.prompt}]}
        cls, feats = proxy.classify_body(generation_of(body))
        runs, pos, tried, acc, steps = req.accept_runs["ngram"], 1, [0] * 4, [0] * 4, 0
        while pos < len(runs):
            r = min(runs[pos], 5)
            steps += 1
            for j in range(min(r, 4)):
                tried[j] += 1
                acc[j] += j < r - 1
            pos += r
        draft = steps * 4
        proxy.feedback.on_response(worker, cls, "ngram", 4, float(len(runs)), (draft, sum(acc), steps),
                                   ([float(x) for x in tried], [float(x) for x in acc]), 100.0, "greedy", feats)


def _round(proxy: Proxy, reqs: list[Generation], predict: bool) -> float:
    cands = proxy.pools.serving("m") or list(proxy.pools.workers.values())
    t0 = time.process_time()
    for req in reqs:
        if predict:
            cls, feats = proxy.classify_body(req)
            proxy.decide(cls, cands, features=feats)
        else:
            proxy.decide(proxy.classify(req.body), cands)
    return (time.process_time() - t0) / len(reqs) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--learn", type=int, default=400)
    args = ap.parse_args()
    reqs = [r for r in load_traces(args.trace) if r.prompt and "ngram" in r.accept_runs]
    bodies = [generation_of({"model": "m", "messages": [{"role": "user", "content": r.prompt}], "max_tokens": 128})
              for r in reqs]  # parsed as the proxy parses a request before it classifies it
    on, off = _proxy(True), _proxy(False)
    _teach(on, reqs, args.learn)
    _teach(off, reqs, args.learn)
    for p in (on, off):  # warm the caches (plans, classifier) once
        _round(p, bodies, p is on)
    t_on, t_off = [], []
    for _ in range(args.rounds):
        t_off.append(_round(off, bodies, False))
        t_on.append(_round(on, bodies, True))
    a, b = statistics.median(t_off), statistics.median(t_on)
    chars = sum(len(r.prompt) for r in reqs) / len(reqs)
    print(f"{len(bodies)} prompts ({chars:.0f} chars on average), {args.rounds} rounds: classify + decide "
          f"{a:.0f} us/request with estimator.predict false, {b:.0f} us with true (+{b - a:.0f} us)")


if __name__ == "__main__":
    main()
