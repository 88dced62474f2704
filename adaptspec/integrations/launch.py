"""The engine launch table: which integration builds the command lines of which engine's pools.

    LAUNCHERS                                   # engine -> builder(pool, *, file) -> [EngineCommand]
    pool_commands(cfg, "vllm", None, "pools.yaml")  # [(pool name, EngineCommand)] of every vLLM pool

`adaptspec launch ENGINE` (cli/_launch.py) and the tests that compare compose / Kubernetes files with it go
through here; the choice of builder and the match of a pool's engine live in this table, not in the CLI.
"""

from __future__ import annotations

from collections.abc import Callable

from adaptspec.errors import ConfigError
from adaptspec.integrations._launch_common import EngineCommand
from adaptspec.integrations._vllm_launch import vllm_commands
from adaptspec.integrations.sglang import sglang_commands

LAUNCHERS: dict[str, Callable[..., list[EngineCommand]]] = {"sglang": sglang_commands, "vllm": vllm_commands}


def pool_commands(cfg, engine: str, pool_name: str | None, file: str) -> list[tuple[str, EngineCommand]]:
    """(pool name, command) for each worker of the config's pools of `engine` (only `pool_name` if given);
    a ConfigError naming the pools there are when none matches."""
    build = LAUNCHERS.get(engine)
    if build is None:
        raise ConfigError(f"no launcher for this engine; expected one of {', '.join(LAUNCHERS)}", file=file,
                          key="engine", value=engine)
    pools = [p for p in cfg.pools if p.engine == engine and (pool_name is None or p.name == pool_name)]
    if not pools:
        names = ", ".join(f"{p.name} ({p.engine})" for p in cfg.pools) or "none"
        what = f"pool {pool_name!r} with engine {engine!r}" if pool_name else f"pools with engine {engine!r}"
        raise ConfigError(f"no {what}; pools: {names}", file=file, key="pools", value=pool_name)
    return [(p.name, c) for p in pools for c in build(p, file=file)]
