"""`adaptspec simulate`: what the policies do on a GPU engine, from the step-time profiles, before production.

    adaptspec simulate --profile h200-llama3-70b --workload mixed \\
        --policies off,static:draft:4,static:ngram:4,threshold,adaptive \\
        --concurrency 1,2,4,8,16,32,64,128,256 --json sim.json --plot sim.png

    adaptspec simulate --trace measured.jsonl --profile h100-llama3-8b-measured \\
        --policies off,static:eagle:3,static:ngram:8,adaptive,oracle --concurrency 1,8,32,128

Policies: `off`, `static:<proposer>:<gamma>`, `threshold`, `adaptive` (the goodput policy; on traces with
prompts it predicts each request's acceptance as `estimator.predict` says, default on; `adaptive+predict` /
`adaptive-class` force that on / off), `bandit` (the
exploring one), `oracle` (per-request hindsight optimum; needs `--trace`), plus any policy YAML via
`--policy-file` (named after the file); `oracle-step` (the per-step hindsight bound, `--trace`) and
`static:hybrid:<g>` (the causal per-step hybrid of lookup and the head, `--trace` and `--proposers ...,hybrid`;
rule: `--hybrid-rule`, adaptspec/bench/stepwise.py). `--trace FILE` (repeatable; `--trace-order shuffle` by default) replays measured
acceptance, classes and lengths from acceptance traces (format: adaptspec/bench/traces.py) instead of the
synthetic `--workload`. `--profile` is what the policies believe, `--truth-profile` what the simulated
engine costs (default: the same); both take a built-in name or a YAML path. As in the proxy, the policies
calibrate the step-time model online from the engine's step telemetry with --profile as the prior
(`--no-calibration`: the belief alone); each row's `calibration` has the fit and, for an additive truth, its
relative errors. Closed-loop clients per
`--concurrency` point, or open-loop Poisson arrivals per `--rate` point. Deterministic under `--seed`.
The engine model is documented in adaptspec/bench/simulator.py, the calibration in adaptspec/bench/workloads.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_POLICIES = "off,static:draft:4,static:ngram:4,threshold,adaptive"


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="discrete-event simulation of policies on a GPU profile",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="h200-llama3-70b",
                   help="step-time profile the policies plan with: name or YAML path (default h200-llama3-70b)")
    p.add_argument("--truth-profile", help="step-time profile the simulated engine costs (default: --profile)")
    p.add_argument("--trace", action="append", default=[],
                   help="acceptance trace JSONL to replay instead of --workload (repeatable)")
    p.add_argument("--trace-order", choices=("shuffle", "file"), default="shuffle",
                   help="replay order of the traces' requests: shuffle (default: one random permutation per "
                        "--seed, every file mixed, as live arrivals interleave users; recorded files often come "
                        "in class blocks) or file (the files' order, one after another)")
    p.add_argument("--workload", default="mixed", help="mixed | rag | agent | a class name (default mixed)")
    p.add_argument("--mix", help="class weights instead of the workload's, e.g. code=1,summarize=2")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    p.add_argument("--policy-file", action="append", default=[], help="policy YAML (repeatable)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="closed-loop clients per point (default 1,2,4,...,256)")
    load.add_argument("--rate", help="open-loop Poisson arrival rates per point (req/s)")
    p.add_argument("--requests", type=int, help="measured completions per point (default max(64, 6 x concurrency))")
    p.add_argument("--warmup", type=int, help="completions discarded first (default max(32, 2 x concurrency))")
    p.add_argument("--max-batch", type=int, default=256, help="running-batch slots (default 256)")
    p.add_argument("--max-gamma", type=int, default=8)
    p.add_argument("--proposers", help="proposers the simulated worker offers (default: all of the profile's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hybrid-rule", metavar="K=V,...",
                   help="the per-step hybrid's causal rule on traces (adaptspec/bench/stepwise.py HybridRule): "
                        "min_match, multiplier, lookup_cap, window; e.g. min_match=2,multiplier=2. Default: static "
                        "hybrid runs HybridRule's defaults and adaptive / goodput / bandit run, per class, the rule of "
                        "control/hybrid_rule.py RULES that its walks along the class's requests price best; a rule "
                        "given here is what every hybrid request runs")
    p.add_argument("--cold-start", action="store_true",
                   help="a fresh policy, alpha estimates and step-time fit from the priors at every point (default: all "
                        "carried over from the policy's previous point, like a proxy that has been serving)")
    p.add_argument("--no-calibration", action="store_true",
                   help="price with --profile alone (default: calibrate the step-time model online from the "
                        "simulated engine's telemetry, with --profile as the prior, as the proxy does)")
    p.add_argument("--no-shadow", action="store_true",
                   help="traced requests served without n-gram lookup do not teach its keys (default: they do, "
                        "from their recorded n-gram runs, as the reference worker's usage.speculative.shadow does)")
    p.add_argument("--tolerance", type=float, default=0.98, help="target: adaptive >= this x best static")
    p.add_argument("--json", help="write the rows as JSON")
    p.add_argument("--md", help="write markdown tables")
    p.add_argument("--plot", help="write a PNG plot")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def _loads(args) -> list[tuple[str, float]]:
    if args.rate:
        vals = [float(x) for x in args.rate.split(",") if x.strip()]
        if not vals or any(v <= 0 for v in vals):
            raise ValueError(f"--rate: values must be > 0, got {args.rate!r}")
        return [("rate", v) for v in vals]
    text = args.concurrency or "1,2,4,8,16,32,64,128,256"
    vals = [int(x) for x in text.split(",") if x.strip()]
    if not vals or any(v < 1 for v in vals):
        raise ValueError(f"--concurrency: values must be integers >= 1, got {text!r}")
    return [("concurrency", v) for v in vals]


def _hybrid_rule(text: str):
    import dataclasses

    from adaptspec.bench.stepwise import HybridRule

    fields = {f.name: f.type for f in dataclasses.fields(HybridRule)}
    kw: dict = {}
    for part in (x.strip() for x in text.split(",") if x.strip()):
        key, _, value = part.partition("=")
        if key not in fields or not value:
            raise ValueError(f"--hybrid-rule: expected K=V with K one of {', '.join(fields)}, got {part!r}")
        kw[key] = float(value) if key == "multiplier" else (None if value == "none" else int(value))
    return HybridRule(**kw)


def run(args) -> int:
    from adaptspec.bench import report
    from adaptspec.bench.simulator import parse_policy, policy_from_file, sweep
    from adaptspec.bench.traces import TraceWorkload
    from adaptspec.bench.workloads import get_workload
    from adaptspec.control.profiles import load_profile
    from adaptspec.errors import ConfigError

    try:
        load_profile(args.profile)
        if args.truth_profile:
            load_profile(args.truth_profile)
        loads = _loads(args)
        if args.trace:
            if args.mix:
                raise ConfigError("--mix re-weights a synthetic workload; a trace has its own requests",
                                  key="--mix", value=args.mix)
            workload = TraceWorkload.from_files(args.trace, order=args.trace_order, seed=args.seed)
        else:
            workload = get_workload(args.workload, args.mix)
        specs = [parse_policy(s, args.profile, args.seed) for s in args.policies.split(",") if s.strip()]
        specs += [policy_from_file(f) for f in args.policy_file]
        if not specs:
            raise ValueError("no policies given")
        proposers = [p.strip() for p in args.proposers.split(",")] if args.proposers else None
        hybrid_rule = _hybrid_rule(args.hybrid_rule) if args.hybrid_rule else None
        rows = sweep(specs, args.profile, workload, loads, truth_profile=args.truth_profile, seed=args.seed,
                     requests=args.requests,
                     warmup=args.warmup, max_batch=args.max_batch, max_gamma=args.max_gamma,
                     proposers=proposers, progress=not args.no_progress, warm_start=not args.cold_start,
                     calibrate=not args.no_calibration, shadow=not args.no_shadow, hybrid_rule=hybrid_rule)
    except (ConfigError, ValueError) as exc:
        print(f"adaptspec simulate: error: {exc}", file=sys.stderr)
        return 2
    truth = f" (truth {args.truth_profile})" if args.truth_profile else ""
    title = f"simulated {args.profile}{truth}, workload {workload.name}, seed {args.seed}"
    text = "\n\n".join([f"### {title}: output tokens/s", report.throughput_table(rows),
                        report.detail_table(rows)])
    if any(r["policy"] == "adaptive" for r in rows):
        text += "\n\n" + report.targets_text(report.check_targets(rows, tolerance=args.tolerance))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.md:
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        Path(args.md).write_text(text + "\n")
    print(text)
    if args.plot:
        try:
            report.plot_sweep(rows, args.plot, title=title)
        except ConfigError as exc:
            print(f"adaptspec simulate: error: {exc}", file=sys.stderr)
            return 1
    return 0
