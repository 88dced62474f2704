"""Pieces shared by the SGLang and vLLM launch-command builders.

A pool's `launch:` section (docs/INTERFACES.md, config.py) carries what the proxy does not need but the
engine does. Keys read here (all optional unless the builder says so):

    model: DIR_OR_ID            target model (required)
    draft_model: DIR_OR_ID      draft / EAGLE head model (required for proposers draft and eagle)
    python: python3             interpreter that has the engine installed
    host: 0.0.0.0               bind address (port comes from each worker's url)
    algorithm: EAGLE3           SGLang only: override --speculative-algorithm
    eagle_topk: 1               SGLang only: --speculative-eagle-topk (1 = chain drafting)
    num_draft_tokens: N         SGLang only: --speculative-num-draft-tokens (default gamma + 1 with topk 1)
    speculative_config: {...}   vLLM only: merged into the generated --speculative-config JSON
    extra_args: [..]            appended verbatim
    env: {NAME: value}          environment for the engine process
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from adaptspec.errors import ConfigError


def get(obj: object, key: str, default=None):
    """Read a field from a pydantic model, a dataclass or a plain dict alike."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    value = getattr(obj, key, default)
    return default if value is None else value


def launch_section(pool: object) -> dict:
    launch = get(pool, "launch", None) or {}
    if hasattr(launch, "model_dump"):
        launch = launch.model_dump(exclude_none=True)
    return dict(launch)


@dataclass(frozen=True)
class EngineCommand:
    """One engine process to start: argv plus extra environment."""

    worker: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        import shlex

        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def worker_port(url: str, *, file: str | None, key: str) -> int:
    parts = urlsplit(url)
    if parts.port is None:
        raise ConfigError("worker url needs an explicit port to launch an engine on", file=file, key=key,
                          value=url)
    return parts.port


def require(launch: dict, name: str, *, pool: str, file: str | None, why: str) -> str:
    value = launch.get(name)
    if not value:
        raise ConfigError(f"pool {pool!r}: launch.{name} is required {why}", file=file,
                          key=f"pools.{pool}.launch.{name}", value=value)
    return str(value)


def env_of(launch: dict) -> dict[str, str]:
    return {str(k): str(v) for k, v in (launch.get("env") or {}).items()}


def extra_args(launch: dict, *, pool: str, file: str | None) -> list[str]:
    extra = launch.get("extra_args") or []
    if isinstance(extra, str) or not all(isinstance(a, str | int | float) for a in extra):
        raise ConfigError(f"pool {pool!r}: launch.extra_args must be a list of strings", file=file,
                          key=f"pools.{pool}.launch.extra_args", value=extra)
    return [str(a) for a in extra]
