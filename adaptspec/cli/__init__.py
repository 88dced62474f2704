"""The `adaptspec` command line.

Each subcommand lives in its own module `adaptspec/cli/_<name>.py` exposing

    def register(subparsers) -> None   # adds its parser; sets `func=run` as default
    def run(args) -> int               # heavy imports happen here, not at module top

so `adaptspec classify ...` never imports torch and `adaptspec --help` stays fast.

Conventions shared by every command: `--log-level` and `--log-format` are accepted before or after the
subcommand (defaults from ADAPTSPEC_LOG_LEVEL / ADAPTSPEC_LOG_FORMAT), logs and errors go to stderr, results
to stdout, and a failure exits non-zero (2: bad usage or input, 1: failed while running).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from adaptspec import __version__
from adaptspec.cli._logging import FORMATS, LEVELS, configure

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
    "trace": "adaptspec.cli._trace",
    "report": "adaptspec.cli._report",
    "calibrate": "adaptspec.cli._calibrate",
}


ENV_LOG_LEVEL = "ADAPTSPEC_LOG_LEVEL"
ENV_LOG_FORMAT = "ADAPTSPEC_LOG_FORMAT"


def _add_logging_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The top-level parser holds the defaults; a subcommand's copy only overrides them when given."""
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, metavar="LEVEL",
                        default="INFO" if top else argparse.SUPPRESS,
                        help=f"logging level: {', '.join(LEVELS)} (default: ${ENV_LOG_LEVEL} or INFO)")
    parser.add_argument("--log-format", choices=FORMATS, default="text" if top else argparse.SUPPRESS,
                        help=f"log lines as text or one JSON object each (default: ${ENV_LOG_FORMAT} or text)")


def _subcommand_parsers(parser: argparse.ArgumentParser):
    """Every parser below `parser` (subcommands, and theirs: `policy check`, `bench compare`), once each."""
    seen: set[int] = set()
    todo = [parser]
    while todo:
        for action in todo.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    if id(child) not in seen:
                        seen.add(id(child))
                        todo.append(child)
                        yield child


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adaptspec", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"adaptspec {__version__}")
    _add_logging_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # command not built yet in this checkout
        module.register(sub)
    for child in _subcommand_parsers(parser):
        _add_logging_options(child, top=False)
    return parser


def _env_defaults(parser: argparse.ArgumentParser) -> None:
    """ADAPTSPEC_LOG_LEVEL / ADAPTSPEC_LOG_FORMAT as defaults; a bad value is a usage error naming the variable."""
    level = os.environ.get(ENV_LOG_LEVEL, "").strip().upper()
    if level and level not in LEVELS:
        parser.error(f"{ENV_LOG_LEVEL}={os.environ[ENV_LOG_LEVEL]!r} is not one of {', '.join(LEVELS)}")
    fmt = os.environ.get(ENV_LOG_FORMAT, "").strip().lower()
    if fmt and fmt not in FORMATS:
        parser.error(f"{ENV_LOG_FORMAT}={os.environ[ENV_LOG_FORMAT]!r} is not one of {', '.join(FORMATS)}")
    parser.set_defaults(**({"log_level": level} if level else {}), **({"log_format": fmt} if fmt else {}))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _env_defaults(parser)
    args = parser.parse_args(argv)
    configure(args.log_level, args.log_format)
    if not getattr(args, "func", None):
        parser.print_usage(sys.stderr)
        print("adaptspec: error: give a command (adaptspec --help lists them)", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `adaptspec ... | head`: the reader left early; stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 1
