"""The `adaptspec` command line.

Each subcommand lives in its own module `adaptspec/cli/_<name>.py` exposing

    def register(subparsers) -> None   # adds its parser; sets `func=run` as default
    def run(args) -> int               # heavy imports happen here, not at module top

so `adaptspec classify ...` never imports torch and `adaptspec --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> module; modules are imported when the parser is built (keep their tops light).
COMMANDS: dict[str, str] = {
    "serve": "adaptspec.cli._serve",
    "worker": "adaptspec.cli._worker",
    "classify": "adaptspec.cli._classify",
    "plan": "adaptspec.cli._plan",
    "policy": "adaptspec.cli._policy",
    "simulate": "adaptspec.cli._simulate",
    "bench": "adaptspec.cli._bench",
    "launch": "adaptspec.cli._launch",
    "calibrate": "adaptspec.cli._calibrate",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adaptspec", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # command not built yet in this checkout
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)
