"""The overhead harness's load client (../shared/bench/overhead/load.py), each request with the next prompt of a file.

    /tmp/gw/venv-base/bin/python benchmarks/load_distinct.py --harness ../shared/bench/overhead \\
        --prompts prompts.jsonl -- --url http://127.0.0.1:PORT/v1/chat/completions -c 1 -d 4

The harness sends one fixed request, so a gateway that remembers what it computed per prompt text (adaptspec's
classifier and feature memos) never pays for it there; real traffic rarely repeats a prompt. This runs the
harness's own client (same closed loop, same HTTP parser, same JSON output) with its one prepared request
replaced by one per line of `--prompts` (JSONL, a "prompt" or "text" field per line), sent in order and round
and round: with more lines than a memo holds (1024 for adaptspec's), no request finds its prompt remembered.
Everything after `--` goes to load.py as is (its --prompt is ignored). Runs under the harness's interpreter
(httptools, uvloop); stdlib only here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from itertools import cycle


def _prompts(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    prompts = [r.get("prompt", r.get("text")) for r in rows]
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise SystemExit(f"{path}: every line needs a string 'prompt' or 'text' field")
    return prompts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--harness", required=True, help="the overhead harness folder (load.py)")
    ap.add_argument("--prompts", required=True, help="JSONL file, one prompt per line ('prompt' or 'text')")
    args, rest = ap.parse_known_args()
    rest = [a for a in rest if a != "--"]
    spec = importlib.util.spec_from_file_location("overhead_load", f"{args.harness}/load.py")
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    prompts = _prompts(args.prompts)
    build_one = load.build_request

    def build_all(load_args, host, port, path):  # one prepared request per prompt, in file order
        requests = []
        for p in prompts:
            load_args.prompt = p
            requests.append(build_one(load_args, host, port, path))
        return requests

    class DistinctRunner(load.Runner):
        """load.Runner whose `req` (read once per issued request) is the next prepared request."""

        def __init__(self, load_args, host, port, requests):
            super().__init__(load_args, host, port, b"")
            self._next = cycle(requests).__next__

        @property
        def req(self) -> bytes:
            return self._next()

        @req.setter
        def req(self, value: bytes) -> None:  # load.Runner.__init__ assigns the single request
            pass

    load.build_request = build_all
    load.Runner = DistinctRunner
    sys.argv = [sys.argv[0], *rest]
    load.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
