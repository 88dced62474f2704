"""`adaptspec serve`: the OpenAI-compatible proxy that decides speculation per request.

    adaptspec serve                                   # embedded reference worker, in-memory state
    adaptspec serve --config pools.yaml               # your pools / policy / state (see README)
    adaptspec serve --upstream http://127.0.0.1:8001 --engine adaptspec   # one-worker shortcut
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger("adaptspec.serve")

DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "policies" / "default.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="run the proxy (OpenAI-compatible; decides speculation per request)",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics in front "
                    "of the configured worker pools. Without pools, start an embedded reference worker.")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="YAML config (policy, estimator, pools, state, server); ${VAR} is expanded from the "
                        "environment. Default: policies/default.yaml with an embedded worker")
    p.add_argument("--host", default=None, help="bind address (default: server.host or 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: server.port or 8000)")
    p.add_argument("--upstream", metavar="URL", action="append", default=[],
                   help="shortcut: a pool with this worker (repeatable); replaces the config's pools")
    p.add_argument("--engine", default="openai", choices=("adaptspec", "vllm", "sglang", "openai"),
                   help="engine of the --upstream workers (default: openai, i.e. no speculation control)")
    p.add_argument("--model", default=None, help="model id the --upstream workers serve (default: learned "
                                                  "from their /v1/models)")
    p.add_argument("--watch", type=float, default=1.0, metavar="SECONDS",
                   help="poll the config file for changes this often (0: only reload on SIGHUP; default 1)")
    p.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the embedded `adaptspec worker` (repeatable)")
    p.set_defaults(func=run)


def load_serve_config(path: str | None, *, upstreams: list[str], engine: str, model: str | None):
    """The config to serve: the file (or the default policy), with --upstream pools if given."""
    from adaptspec.control.config import Config, PoolConfig
    from adaptspec.proxy.configfile import load_config_file

    if path is not None:
        cfg = load_config_file(path)
    elif DEFAULT_POLICY.is_file():
        cfg = load_config_file(DEFAULT_POLICY)
    else:  # installed without the repo's policies/: the schema's defaults are the default policy
        cfg = Config()
    if upstreams:
        per_request = engine in ("adaptspec", "vllm")
        pool = PoolConfig.model_validate({
            "name": "upstream", "engine": engine, "per_request": per_request,
            "proposers": ["ngram", "draft"] if per_request else [], "gamma": 0,
            "models": [model] if model else None,
            "workers": [{"name": f"upstream-{i}", "url": u} for i, u in enumerate(upstreams)]})
        cfg = cfg.model_copy(update={"pools": [pool]})
    return cfg


def run(args: argparse.Namespace) -> int:
    from adaptspec.errors import ConfigError

    try:
        config = load_serve_config(args.config, upstreams=args.upstream, engine=args.engine, model=args.model)
    except ConfigError as exc:
        print(f"adaptspec serve: {exc}")
        return 2
    from adaptspec.proxy.serve import serve

    host = args.host or getattr(config.server, "host", None) or "127.0.0.1"
    port = args.port if args.port is not None else (getattr(config.server, "port", None) or 8000)
    return serve(config, host=host, port=port, config_path=args.config if not args.upstream else None,
                 watch_s=args.watch, worker_args=args.worker_arg)
