"""`adaptspec trace record`: acceptance traces (JSONL, one request a line) for `adaptspec simulate --trace`.

    # the reference worker's tiny pair, in process: greedy target output, then n-gram and draft runs
    adaptspec trace record --prompts prompts.jsonl --out tiny.jsonl --max-k 8 --max-tokens 96

    # any OpenAI endpoint's greedy chat output: n-gram runs computed offline on the returned text
    adaptspec trace record --url http://127.0.0.1:8000 --model M --prompts prompts.jsonl --out m.jsonl \\
        [--tokenizer DIR]

A record's `accept_runs[p][i]` is the number of tokens a step starting at output position i emits when
proposer p drafts up to `max_k` tokens (1: the first draft token was rejected or nothing was drafted). With
`--url`, the text is re-tokenised with `--tokenizer` (default: the tiny pair's): when the endpoint's model uses
another tokenizer the n-gram runs approximate its own n-gram proposer's. Prompt files: the format of
`adaptspec bench --prompts` (default: the shipped set). Method: adaptspec/bench/trace_record.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="record acceptance traces", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    r = sub.add_parser("record", help="record an acceptance trace over a prompt file", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--prompts", metavar="FILE", help="prompt set (JSONL; default: the shipped set)")
    r.add_argument("--out", metavar="FILE", required=True, help="trace file to write ('-': stdout)")
    r.add_argument("--max-k", type=int, default=8, help="most tokens a proposer drafts per step (default 8)")
    r.add_argument("--max-tokens", type=int, default=96, help="output tokens per request (default 96)")
    r.add_argument("--limit", type=int, help="only the first N prompts")
    r.add_argument("--url", help="an OpenAI endpoint (base URL, with or without /v1) instead of the tiny pair: "
                                 "n-gram runs only")
    r.add_argument("--model", help="model name to send to --url")
    r.add_argument("--api-key-env", metavar="VAR", default="OPENAI_API_KEY",
                   help="environment variable holding the --url bearer token, if any (default OPENAI_API_KEY)")
    r.add_argument("--tokenizer", metavar="DIR", help="tokenizer dir for --url output (default: the tiny pair's)")
    r.add_argument("--concurrency", type=int, default=4, help="requests in flight with --url (default 4)")
    r.add_argument("--target", metavar="DIR", help="target model dir (default: built-in tiny-target)")
    r.add_argument("--draft", metavar="DIR", help="draft model dir (default: built-in tiny-draft)")
    r.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=run_record)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _check(args) -> None:
    for name in ("max_k", "max_tokens", "threads", "concurrency"):
        v = getattr(args, name)
        if v < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    if args.url and (args.target or args.draft):
        raise ValueError("--target/--draft record the local pair; they cannot be combined with --url")


def run_record(args) -> int:
    from adaptspec.errors import AdaptspecError

    try:
        _check(args)
        from adaptspec.bench.prompts import default_prompts, load_prompts

        items = load_prompts(args.prompts) if args.prompts else default_prompts()
        if args.limit:
            items = items[: args.limit]
        n = _write(args, items)
    except (AdaptspecError, ValueError, OSError) as exc:
        print(f"adaptspec trace record: error: {exc}", file=sys.stderr)
        return 2
    print(f"adaptspec trace record: {n} of {len(items)} requests written to {args.out}", file=sys.stderr)
    return 0


def _records(args, items, bar):
    import torch

    from adaptspec.bench.trace_record import RecordOptions, record_endpoint, record_tiny
    from adaptspec.worker.tokenizer import Tokenizer

    torch.set_num_threads(args.threads)
    opts = RecordOptions(max_k=args.max_k, max_tokens=args.max_tokens)
    assets = Path(__file__).resolve().parents[1] / "assets"
    if args.url:
        tok = Tokenizer.from_dir(args.tokenizer or assets / "tiny-target")
        return record_endpoint(items, args.url, args.model, tok, opts, concurrency=args.concurrency,
                               api_key=os.environ.get(args.api_key_env) or None, bar=bar)
    from adaptspec.worker.engine import Engine
    from adaptspec.worker.model import TinyLlama

    target_dir = Path(args.target) if args.target else assets / "tiny-target"
    draft = TinyLlama.from_pretrained(Path(args.draft) if args.draft else assets / "tiny-draft")
    engine = Engine(TinyLlama.from_pretrained(target_dir), Tokenizer.from_dir(target_dir), draft,
                    max_batch=opts.batch, max_speculative_tokens=max(16, opts.max_k),
                    num_threads=args.threads)
    return _stopping(engine, record_tiny(items, engine, draft, opts, bar=bar))


def _stopping(engine, records):
    try:
        yield from records
    finally:
        engine.stop()


def _write(args, items) -> int:
    from adaptspec.bench._progress import progress_bar

    n = 0
    out = sys.stdout if args.out == "-" else None
    if out is None:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with progress_bar(len(items), "trace record", enabled=not args.no_progress) as bar:
        fh = out or open(args.out, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            for rec in _records(args, items, bar):
                fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                n += 1
        finally:
            if out is None:
                fh.close()
    return n
