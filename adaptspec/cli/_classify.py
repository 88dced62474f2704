"""`adaptspec classify`: content class of a prompt (or of each request in a JSONL file) as JSON.

    adaptspec classify "Translate to German: good night"
    adaptspec classify --jsonl requests.jsonl > classes.jsonl     # '-' reads stdin

Each JSONL line is an object with a `prompt` (completions style) or `messages` (chat style) field; the
request fields `tools`, `functions` and `response_format` are honoured as the proxy does. Output: one line
`{"class": ..., "scores": {...}}` per input line, in order (blank lines are skipped); a bad line stops the
run with an error naming its line number and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("classify", help="classify a prompt's content type", description=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("text", nargs="?", help="the prompt text")
    src.add_argument("--jsonl", metavar="FILE", help="JSONL file of requests ('-' for stdin)")
    p.set_defaults(func=run)


def _result(cls: str, scores: dict[str, float], forced_by: str | None = None) -> str:
    out: dict = {"class": cls, "scores": {k: round(v, 6) for k, v in scores.items()}}
    if forced_by:
        out["forced_by"] = forced_by
    return json.dumps(out)


def run(args: argparse.Namespace) -> int:
    from adaptspec.control.classify import Classifier
    from adaptspec.errors import RequestError

    model = Classifier.default()
    if args.jsonl is None:
        print(_result(*model.predict(args.text)))
        return 0
    name = "<stdin>" if args.jsonl == "-" else args.jsonl
    try:
        f = sys.stdin if args.jsonl == "-" else open(args.jsonl, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        print(f"adaptspec classify: cannot read {name}: {exc.strerror}", file=sys.stderr)
        return 2
    with f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                body = json.loads(line)
                if not isinstance(body, dict):
                    raise RequestError(f"expected a JSON object, got {type(body).__name__}")
                if "prompt" not in body and "messages" not in body:
                    raise RequestError("no 'prompt' or 'messages' field")
                print(_result(*model.predict_request(body)), flush=False)
            except (json.JSONDecodeError, RequestError) as exc:
                sys.stdout.flush()
                print(f"adaptspec classify: {name}, line {lineno}: {exc}", file=sys.stderr)
                return 2
    return 0
