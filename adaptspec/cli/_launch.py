"""`adaptspec launch sglang|vllm --config FILE [--pool NAME] [--run]`: engine command lines for a config's pools.

Prints one shell line per worker of each matching pool (the engine's own flags for the pool's proposer and
gamma; see adaptspec/integrations/launch.py, sglang.py and _vllm_launch.py), or with --run starts them and waits.
"""

from __future__ import annotations

import os
import subprocess
import sys


def register(subparsers) -> None:
    from adaptspec.integrations.launch import LAUNCHERS

    p = subparsers.add_parser("launch", help="print (or run) the engine command line for each pool of a config")
    p.add_argument("engine", choices=tuple(LAUNCHERS), help="engine whose pools to launch")
    p.add_argument("--config", required=True, metavar="FILE", help="adaptspec config with pools")
    p.add_argument("--pool", metavar="NAME", help="only this pool (default: every pool of the engine)")
    p.add_argument("--run", action="store_true", help="start the engines instead of printing the commands")
    p.set_defaults(func=run)


def commands_for(cfg, engine: str, pool_name: str | None, file: str):
    """[(pool name, EngineCommand)]: integrations/launch.py's table picks the builder and the pools."""
    from adaptspec.integrations.launch import pool_commands

    return pool_commands(cfg, engine, pool_name, file)


def run(args) -> int:
    from adaptspec.control.config import load_config
    from adaptspec.errors import ConfigError

    try:
        cfg = load_config(args.config)
        commands = commands_for(cfg, args.engine, args.pool, args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.run:
        for pool, cmd in commands:
            print(f"# pool {pool}, worker {cmd.worker}")
            print(cmd.shell())
        return 0
    procs = []
    for pool, cmd in commands:
        print(f"starting pool {pool}, worker {cmd.worker}: {cmd.shell()}", file=sys.stderr)
        procs.append(subprocess.Popen(cmd.argv, env={**os.environ, **cmd.env}))
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        codes = [p.wait() for p in procs]
    return max(codes, default=0)
