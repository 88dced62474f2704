"""Tokens/s and acceptance of each proposer in the reference engine at concurrency 1 (greedy, this CPU).

Three prompt sets:
- copy-heavy: held-out "Complete this <lang> function" stubs (HumanEval / HumanEval-X rows never trained on;
  the tiny target restates the stub before completing it, so its output copies long spans of the prompt);
- summarize: the shipped `summarize` class (answers restate the given text; `--summarize` prompts, 0: skip);
- mixed: the shipped benchmark prompts (adaptspec/bench/prompts.py, `--per-class` of each of the six classes).

Every prompt runs once per proposer, the proposers interleaved prompt by prompt (round robin), so that load
from other processes on a shared machine hits all of them alike; at temperature 0 every proposer emits the
same tokens (checked), so tokens/s compares equal work. Per proposer: generated tokens / wall seconds,
acceptance rate (accepted / drafted), tokens per target step, drafting wall seconds per step (the proposer's
propose calls), and for hybrid the steps and tokens each source drafted and the lookup misses where its model
declined to draft or drafted fewer than k (`--hybrid-model-cost`: its price of a model token, engine default).

    PYTHONPATH=. .venv/bin/python benchmarks/measure_proposers.py --data ../shared/data --gamma 4 --json out.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # train_tiny_models
from train_tiny_models import build_corpus  # noqa: E402

from adaptspec.bench.prompts import default_prompts  # noqa: E402
from adaptspec.worker.engine import Engine, GenRequest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROPOSERS = ("none", "ngram", "draft", "eagle", "hybrid")


def copy_heavy_prompts(data: Path, n: int) -> list[list[dict]]:
    rows = build_corpus(data)["code"]
    return [m[:1] for split, m in rows if split == "heldout" and m[0]["content"].startswith("Complete this")][:n]


def mixed_prompts(per_class: int) -> list[list[dict]]:
    seen: dict[str, int] = {}
    out = []
    for item in default_prompts():
        if seen.get(item.category, 0) < per_class:
            seen[item.category] = seen.get(item.category, 0) + 1
            out.append(item.chat_messages())
    return out


def summarize_prompts(n: int) -> list[list[dict]]:
    return [item.chat_messages() for item in default_prompts() if item.category == "summarize"][:n]


class ProposeTimer:
    """Wall seconds of each proposer's outermost propose calls (a hybrid's call includes its parts')."""

    def __init__(self, engine: Engine):
        self.seconds: dict[str, float] = {}
        self._depth = 0
        for name, prop in engine._proposers.items():
            prop.propose = self._timed(name, prop.propose)

    def _timed(self, name: str, fn):
        def propose(batch):
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(batch)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        return propose


class StepRecorder:
    """One record per engine step of a concurrency-1 run: the row's label, what drafted (`source`: "ngram",
    the model's name, or "plain" for a step without a draft), the tokens it drafted and accepted, and the
    step's wall seconds (propose + forward + verify + commit). `label` is set by the caller before each
    request."""

    def __init__(self, engine: Engine):
        self.label = ""
        self.steps: list[dict] = []
        step = engine.step

        def recorded(batch):
            before = [(s.draft_tokens, s.accepted_tokens, len(s.tokens)) for s in batch]
            t0 = time.perf_counter()
            step(batch)
            dt = time.perf_counter() - t0
            for s, (d0, a0, n0) in zip(batch, before, strict=True):
                k = s.draft_tokens - d0
                self.steps.append({"label": self.label, "source": s.source if k else "plain", "k": k,
                                   "accepted": s.accepted_tokens - a0, "position": n0 - s.num_prompt,
                                   "seconds": dt})
        engine.step = recorded


HYBRID_COUNTERS = ("drafts_by_source", "tokens_by_source", "model_declined", "model_shortened")


def _hybrid_counters(hybrid) -> dict:
    return {name: (dict(v) if isinstance(v := getattr(hybrid, name), dict) else v) for name in HYBRID_COUNTERS}


def run_set(engine: Engine, prompts: list[list[dict]], gamma: int, max_tokens: int, timer: ProposeTimer,
            hybrid_costs: tuple[tuple[float, float], ...] = (), recorder: StepRecorder | None = None, name: str = "",
            rotate: int = 0, proposers: tuple[str, ...] = PROPOSERS) -> dict:
    """Every prompt through every proposer (and the hybrid again at each of `hybrid_costs`, (model cost, call
    cost) pairs, rows "hybrid@C" (call cost 0) or "hybrid@C+F"; they share the hybrid's pooled survival
    counts), one request at a time, round robin; the rows' order rotates by one per prompt (starting at
    `rotate`), so that no row always follows the same one."""
    hybrid = engine._proposers["hybrid"]
    default_cost = (hybrid.model_cost, hybrid.call_cost)
    rows = [(p, p, default_cost) for p in proposers] + \
        [(f"hybrid@{c:g}" + (f"+{f:g}" if f else ""), "hybrid", (c, f)) for c, f in hybrid_costs]
    res = {label: {"tokens": 0, "seconds": 0.0, "draft_tokens": 0, "accepted": 0, "drafts": 0, "steps": 0,
                   "propose_seconds": 0.0} for label, _, _ in rows}
    hc: dict[str, dict] = {label: {} for label, p, _ in rows if p == "hybrid"}  # hybrid counters per row
    for n, messages in enumerate(prompts):
        ids = engine.encode(engine.apply_chat_template(messages))
        ref = None
        turn = (n + rotate) % len(rows)
        for label, p, cost in rows[turn:] + rows[:turn]:
            hybrid.model_cost, hybrid.call_cost = cost
            if recorder is not None:
                recorder.label = f"{name}/{label}/{n}"
            c0 = _hybrid_counters(hybrid)
            req = GenRequest(f"{label}-{n}", ids, max_tokens=max_tokens, temperature=0.0, proposer=p,
                             num_speculative_tokens=gamma if p != "none" else 0)
            m0 = engine.metrics()
            d0 = timer.seconds.get(p, 0.0)
            t0 = time.perf_counter()
            out = engine.generate_sync([req])[req.request_id]
            dt = time.perf_counter() - t0
            res[label]["propose_seconds"] += timer.seconds.get(p, 0.0) - d0
            if label in hc:
                _add_counters(hc[label], c0, _hybrid_counters(hybrid))
            m1 = engine.metrics()
            if ref is None:
                ref = out
            elif out != ref:
                raise AssertionError(f"greedy output of {label} differs from none on prompt {n}")
            r = res[label]
            r["tokens"] += len(out)
            r["seconds"] += dt
            r["draft_tokens"] += m1.spec_num_draft_tokens - m0.spec_num_draft_tokens
            r["accepted"] += m1.spec_num_accepted_tokens - m0.spec_num_accepted_tokens
            r["drafts"] += m1.spec_num_drafts - m0.spec_num_drafts
            r["steps"] += m1.num_steps - m0.num_steps
    hybrid.model_cost, hybrid.call_cost = default_cost
    for label, counters in hc.items():
        res[label].update(counters)
    return res


def merged(rounds: list[dict]) -> dict:
    """One set's rows summed over rounds, with the derived figures (tokens/s, acceptance, ...)."""
    out: dict[str, dict] = {}
    for res in rounds:
        for label, r in res.items():
            acc = out.setdefault(label, {})
            for k, v in r.items():
                if isinstance(v, dict):
                    d = acc.setdefault(k, dict.fromkeys(v, 0))
                    for kk, vv in v.items():
                        d[kk] += vv
                else:
                    acc[k] = acc.get(k, 0) + v
    for r in out.values():
        r["tokens_per_s"] = round(r["tokens"] / r["seconds"], 1)
        r["acceptance"] = round(r["accepted"] / r["draft_tokens"], 3) if r["draft_tokens"] else None
        r["tokens_per_step"] = round(r["tokens"] / r["steps"], 2)
        r["propose_ms_per_step"] = round(1e3 * r["propose_seconds"] / r["steps"], 3)
        r["seconds"] = round(r["seconds"], 2)
        r["propose_seconds"] = round(r["propose_seconds"], 3)
    return out


def ratios(rounds: list[dict]) -> dict:
    """Per round, each hybrid row's tokens/s over max(ngram, eagle)'s in the same round; median, min, max."""
    out = {}
    for label in (x for x in rounds[0] if x.startswith("hybrid")):
        rs = [(r[label]["tokens"] / r[label]["seconds"])
              / max(r[p]["tokens"] / r[p]["seconds"] for p in ("ngram", "eagle")) for r in rounds]
        out[label] = {"rounds": [round(x, 3) for x in rs], "median": round(statistics.median(rs), 3),
                      "min": round(min(rs), 3), "max": round(max(rs), 3)}
    return out


def _add_counters(acc: dict, before: dict, after: dict) -> None:
    for name in HYBRID_COUNTERS:
        a, b = before[name], after[name]
        if isinstance(b, dict):
            acc.setdefault(name, dict.fromkeys(b, 0))
            for k, v in b.items():
                acc[name][k] += v - a[k]
        else:
            acc[name] = acc.get(name, 0) + b - a


def table(name: str, res: dict) -> str:
    base = res["none"]["tokens_per_s"]
    lines = [f"### {name}", "", "| proposer | tokens/s | x none | acceptance | tokens/step | propose ms/step | "
             "tokens | seconds |", "|---|---|---|---|---|---|---|---|"]
    for p in res:
        r = res[p]
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        lines.append(f"| {p} | {r['tokens_per_s']} | {r['tokens_per_s'] / base:.2f} | {acc} | "
                     f"{r['tokens_per_step']} | {r['propose_ms_per_step']} | {r['tokens']} | {r['seconds']} |")
    best = max(res["ngram"]["tokens_per_s"], res["eagle"]["tokens_per_s"])
    vs_draft = (f"eagle / draft = {res['eagle']['tokens_per_s'] / res['draft']['tokens_per_s']:.3f}; "
                if "draft" in res else "")
    lines += ["", f"hybrid / max(ngram, eagle) = {res['hybrid']['tokens_per_s'] / best:.3f}; {vs_draft}hybrid: "
              + ", ".join(f"{k} {res['hybrid'][k]}" for k in HYBRID_COUNTERS)]
    for label in (x for x in res if x.startswith("hybrid@")):
        lines.append(f"{label} / max(ngram, eagle) = {res[label]['tokens_per_s'] / best:.3f}; "
                     + ", ".join(f"{k} {res[label][k]}" for k in HYBRID_COUNTERS))
    return "\n".join(lines)


def price_check(res: dict, gamma: int, profile_name: str = "cpu-tiny") -> dict:
    """Each hybrid row's drafting as measured (propose seconds per step over the `none` row's step) next to the
    cost model's price at batch 1 (`DraftCost.time` over the profile's step) with the row's lookup hit rate pi
    and model tokens per miss m, and at m = gamma (the unpriced hybrid's price); drafted tokens per step as
    measured and as `costmodel.hybrid_step` puts them (lookup drafts taken as gamma long)."""
    from adaptspec.control.costmodel import hybrid_step
    from adaptspec.control.profiles import load_profile

    prof = load_profile(profile_name)
    cost, kv = prof.draft("hybrid"), prof.context_tokens
    step = prof.target.time(1, kv)
    none_s = res["none"]["seconds"] / res["none"]["steps"]
    out = {}
    for label in (x for x in res if x.startswith("hybrid")):
        r = res[label]
        model = next(k for k in r["drafts_by_source"] if k != "ngram")
        hits, misses = r["drafts_by_source"]["ngram"], r["drafts_by_source"][model] + r["model_declined"]
        pi, m = hits / (hits + misses), r["tokens_by_source"][model] / max(misses, 1)
        out[label] = {"lookup_rate": round(pi, 3), "model_tokens_per_miss": round(m, 2),
                      "measured_share": round(r["propose_seconds"] / r["steps"] / none_s, 3),
                      "priced_share": round(cost.time(gamma, 1, kv, prof.target, lookup_rate=pi,
                                                      fallback_tokens=m) / step, 3),
                      "priced_share_at_gamma": round(cost.time(gamma, 1, kv, prof.target, lookup_rate=pi) / step, 3),
                      "drafted_per_step": round(r["draft_tokens"] / r["steps"], 2),
                      "drafted_per_step_priced": round(hybrid_step(gamma, pi, m).drafted, 2)}
    return out


def analyze_steps(records: list[dict], set_name: str) -> dict:
    """Where each row's time went, from `--steps` records of one set (decode steps only: a request's first,
    prefill step is left out). A least-squares fit over every row's steps of

        step seconds = t_step + t_draft * [drafted at all] + t_token * drafted tokens verified
                       + t_call * [the model drafted] + t_pass * model passes

    (batch 1: a model-drafted step runs k passes) prices the work (`fit_ms`, and `fit_share`: over t_step);
    per row: steps, drafted tokens, passes, the measured seconds and the fitted ones (a row whose measured time
    exceeds its fitted time by more than the others' does pays for something the terms miss), steps by
    source with their median seconds, and seconds per round."""
    import numpy as np

    def terms(st: dict) -> list[float]:
        model = st["source"] not in ("plain", "ngram")
        return [1.0, float(st["k"] > 0), st["k"], float(model), st["k"] if model else 0.0]

    rows: dict[str, list[dict]] = {}
    for st in (x for x in records if x["label"].count("/") == 3):  # not the warm-up's
        r, name, label, _ = st["label"].split("/")
        if name == set_name and st["position"] > 0:
            rows.setdefault(label, []).append({**st, "round": int(r)})
    every = [st for sts in rows.values() for st in sts]
    design = np.array([terms(st) for st in every])  # [steps, 5]
    secs = np.array([st["seconds"] for st in every])
    coef = np.linalg.lstsq(design, secs, rcond=None)[0]
    names = ("step", "any_draft", "per_token", "model_call", "per_pass")
    out: dict = {"fit_ms": {n: round(1e3 * c, 3) for n, c in zip(names, coef, strict=True)},
                 "fit_share": {n: round(c / coef[0], 3) for n, c in zip(names, coef, strict=True)}, "rows": {}}
    for label, sts in rows.items():
        x = np.array([terms(st) for st in sts])
        measured, fitted = float(sum(st["seconds"] for st in sts)), float((x @ coef).sum())
        by_source: dict[str, dict] = {}
        for st in sts:
            b = by_source.setdefault(st["source"], {"steps": 0, "drafted": 0, "accepted": 0, "seconds": []})
            b["steps"] += 1
            b["drafted"] += st["k"]
            b["accepted"] += st["accepted"]
            b["seconds"].append(st["seconds"])
        for b in by_source.values():
            b["median_ms"] = round(1e3 * statistics.median(b.pop("seconds")), 2)
        per_round = {}
        for st in sts:
            per_round[st["round"]] = per_round.get(st["round"], 0.0) + st["seconds"]
        out["rows"][label] = {"steps": len(sts), "drafted": int(x[:, 2].sum()), "passes": int(x[:, 4].sum()),
                              "measured_s": round(measured, 2), "fitted_s": round(fitted, 2),
                              "measured_over_fitted": round(measured / fitted, 3), "by_source": by_source,
                              "seconds_by_round": {r: round(v, 2) for r, v in sorted(per_round.items())}}
    return out


def _timed_ms(fns: dict, reps: int) -> dict:
    """Median and minimum ms per call of each fn, the fns interleaved call by call (shared-machine noise
    hits all alike; the minimum is the least disturbed pass)."""
    ts: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(reps + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r:  # the first round warms up
                ts[name].append(time.perf_counter() - t0)
    return {name: {"median_ms": round(1e3 * statistics.median(t), 3), "min_ms": round(1e3 * min(t), 3)}
            for name, t in ts.items()}


@torch.inference_mode()
def pass_costs_at(engine: Engine, b: int, context: int = 200, reps: int = 100) -> dict:
    """Median and min ms of one pass at batch b: the target's decode step (1 token per request at `context`), a
    verify step with 4 drafts, the draft model's 1-token step, and the EAGLE head's draft step (head +
    lm_head + the request's distribution + sampling, as `EagleProposer` runs it)."""
    from adaptspec.worker.sampling import logits_to_probs, sample_from_probs

    target, draft = engine.model, engine._proposers["draft"].model
    eagle = engine._proposers["eagle"]
    tcache, dcache = target.new_cache(b, context + 8), draft.new_cache(b, context + 8)
    slots, starts = list(range(b)), [context] * b
    f, tok = torch.randn(b, target.cfg.hidden_size), torch.randint(0, target.cfg.vocab_size, (b,))

    def head_pass():
        g = eagle.head(f, eagle.embed(tok))
        sp = logits_to_probs(eagle.lm_head(g), [0.0] * b, [1.0] * b)
        sample_from_probs(sp.probs, None, greedy=sp.greedy)

    return _timed_ms({"target_decode": lambda: target.forward([[1]] * b, slots, starts, tcache),
                      "target_verify_k4": lambda: target.forward([[1] * 5] * b, slots, starts, tcache),
                      "draft_pass": lambda: draft.forward([[1]] * b, slots, starts, dcache),
                      "eagle_pass": head_pass}, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "../shared/data")
    ap.add_argument("--copy-prompts", type=int, default=12)
    ap.add_argument("--per-class", type=int, default=4)
    ap.add_argument("--summarize", type=int, default=0, help="shipped summarize prompts (0: skip the set)")
    ap.add_argument("--hybrid-costs", default="", metavar="C[+F],...",
                    help="also run the hybrid at these model costs C (and call costs F, default 0), interleaved "
                         "(rows hybrid@C, hybrid@C+F)")
    ap.add_argument("--hybrid-model-cost", type=float, default=None,
                    help="the hybrid's price of a model-drafted token, share of a step (default: the engine's)")
    ap.add_argument("--hybrid-call-cost", type=float, default=None,
                    help="the hybrid's price of drafting at all at a miss, share of a step (default: the engine's)")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every set this many times, interleaved; ratios per round, median and range")
    ap.add_argument("--steps", type=Path, default=None, metavar="JSONL",
                    help="write one record per engine step (row, source, drafted, accepted, wall seconds)")
    ap.add_argument("--costs", default=None, metavar="B,B,...",
                    help="only time single passes (target, draft model, EAGLE head) at these batch sizes")
    ap.add_argument("--skip", default="", metavar="P,P",
                    help="leave these proposers out (e.g. draft: the slowest; none, ngram, eagle, hybrid stay)")
    ap.add_argument("--analyze", type=Path, default=None, metavar="JSONL",
                    help="only analyse a --steps file (.gz too): where each row's time went, per set (JSON to stdout)")
    args = ap.parse_args()
    if args.analyze:
        raw = args.analyze.read_bytes()
        text = (gzip.decompress(raw) if args.analyze.suffix == ".gz" else raw).decode()
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        names = sorted({st["label"].split("/")[1] for st in records if st["label"].count("/") == 3})
        print(json.dumps({name: analyze_steps(records, name) for name in names}, indent=2))
        return
    opts = {name: getattr(args, name) for name in ("hybrid_model_cost", "hybrid_call_cost")
            if getattr(args, name) is not None}
    engine = Engine.tiny(max_batch=4, max_model_len=1024, num_threads=args.threads, **opts)
    if args.costs:
        torch.set_num_threads(args.threads)
        costs = {b: pass_costs_at(engine, int(b)) for b in args.costs.split(",")}
        print(json.dumps(costs, indent=2))
        if args.json:
            args.json.write_text(json.dumps(costs, indent=2) + "\n")
        return
    timer = ProposeTimer(engine)
    recorder = StepRecorder(engine) if args.steps else None
    costs = tuple((float(c.partition("+")[0]), float(c.partition("+")[2] or 0.0))
                  for c in args.hybrid_costs.split(",") if c)
    sets = {"copy_heavy": copy_heavy_prompts(args.data.resolve(), args.copy_prompts) if args.copy_prompts else [],
            "summarize": summarize_prompts(args.summarize), "mixed": mixed_prompts(args.per_class)}
    sets = {name: prompts for name, prompts in sets.items() if prompts}
    rows = tuple(p for p in PROPOSERS if p not in args.skip.split(","))
    if not {"none", "ngram", "eagle", "hybrid"} <= set(rows):
        ap.error(f"--skip {args.skip}: only draft may be left out (the ratios need none, ngram, eagle, hybrid)")
    per_round: dict[str, list[dict]] = {name: [] for name in sets}
    with engine:
        warm = [[{"role": "user", "content": "Hello there."}]]
        run_set(engine, warm, args.gamma, 16, timer)
        for r in range(args.rounds):  # rounds interleave the sets too: a slow minute hits all of them
            for name, prompts in sets.items():
                per_round[name].append(run_set(engine, prompts, args.gamma, args.max_tokens, timer, costs,
                                               recorder, f"{r}/{name}", rotate=r, proposers=rows))
    out = {"gamma": args.gamma, "max_tokens": args.max_tokens, "rounds": args.rounds,
           "hybrid_model_cost": engine._proposers["hybrid"].model_cost,
           "hybrid_call_cost": engine._proposers["hybrid"].call_cost}
    for name in sets:
        out[name] = merged(per_round[name])
        out[name + "_ratios"] = ratios(per_round[name])
        out[name + "_tokens_per_s_by_round"] = [{label: round(x["tokens"] / x["seconds"], 1) for label, x in res.items()}
                                                for res in per_round[name]]
        print(table(f"{name} (gamma {args.gamma}, max_tokens {args.max_tokens}, concurrency 1, {args.rounds} "
                    f"round(s), hybrid model_cost {out['hybrid_model_cost']}, call_cost {out['hybrid_call_cost']})",
                    out[name]))
        out[name + "_price_check"] = price_check(out[name], args.gamma)
        for label, q in out[name + "_price_check"].items():
            print(f"{label} drafting: measured {q['measured_share']} of a none step, priced {q['priced_share']} "
                  f"(at gamma: {q['priced_share_at_gamma']}; lookup rate {q['lookup_rate']}, "
                  f"{q['model_tokens_per_miss']} model tokens per miss); drafted tokens per step measured "
                  f"{q['drafted_per_step']}, priced {q['drafted_per_step_priced']}")
        for label, q in out[name + "_ratios"].items():
            print(f"{label} / max(ngram, eagle) by round: {q['rounds']}; median {q['median']} "
                  f"[{q['min']}, {q['max']}]")
        print()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    if recorder is not None:
        args.steps.write_text("".join(json.dumps(st) + "\n" for st in recorder.steps))


if __name__ == "__main__":
    main()
