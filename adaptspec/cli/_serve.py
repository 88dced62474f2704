"""`adaptspec serve`: the OpenAI-compatible proxy that decides speculation per request.

    adaptspec serve                                   # embedded reference worker, in-memory state
    adaptspec serve --config pools.yaml               # your pools / policy / state (see README)
    adaptspec serve --upstream http://127.0.0.1:8001 --engine adaptspec   # one-worker shortcut
    ADAPTSPEC_CONFIG=pools.yaml ADAPTSPEC_PORT=9000 adaptspec serve   # the same, from the environment
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from pathlib import Path

from adaptspec.control.types import ENGINES

log = logging.getLogger("adaptspec.serve")

DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "policies" / "default.yaml"
ENV_CONFIG, ENV_HOST, ENV_PORT = "ADAPTSPEC_CONFIG", "ADAPTSPEC_HOST", "ADAPTSPEC_PORT"
ENV_ACCESS_LOG = "ADAPTSPEC_ACCESS_LOG"
ENVIRONMENT = f"""environment (a flag given on the command line wins):
  {ENV_CONFIG}      default for --config
  {ENV_HOST}        default for --host
  {ENV_PORT}        default for --port
  {ENV_ACCESS_LOG}  default for --access-log (-, off, or a file)
  ADAPTSPEC_OTEL=1      an OpenTelemetry span per API request, exported over OTLP/HTTP
                        (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME; pip install 'adaptspec[otel]')
  ADAPTSPEC_LOG_LEVEL   default for --log-level (DEBUG, INFO, WARNING, ERROR, CRITICAL)
  ADAPTSPEC_LOG_FORMAT  default for --log-format (text, json)
  ${{VAR}} and ${{VAR:-default}} in the config file are expanded from the environment (e.g. worker URLs);
  server.api_keys_env and a worker's api_key_env name the variables that hold API keys."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="run the proxy (OpenAI-compatible; decides speculation per request)",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics in front "
                    "of the configured worker pools. Without pools, start an embedded reference worker.",
        epilog=ENVIRONMENT, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", default=None,
                   help=f"YAML config (policy, estimator, pools, state, server); ${{VAR}} is expanded from the "
                        f"environment. Default: ${ENV_CONFIG}, else policies/default.yaml with an embedded worker")
    p.add_argument("--host", default=None,
                   help=f"bind address (default: ${ENV_HOST}, else server.host, else 127.0.0.1)")
    p.add_argument("--port", type=int, default=None,
                   help=f"port (default: ${ENV_PORT}, else server.port, else 8000)")
    p.add_argument("--upstream", metavar="URL", action="append", default=[],
                   help="shortcut: a pool with this worker (repeatable); replaces the config's pools")
    p.add_argument("--engine", default="openai", choices=ENGINES,
                   help="engine of the --upstream workers (default: openai, i.e. no speculation control)")
    p.add_argument("--model", default=None, help="model id the --upstream workers serve (default: learned "
                                                  "from their /v1/models)")
    p.add_argument("--watch", type=float, default=1.0, metavar="SECONDS",
                   help="poll the config file for changes this often (0: only reload on SIGHUP; default 1)")
    p.add_argument("--access-log", default=None, metavar="-|off|FILE",
                   help=f"one JSON line per API request (id, model, class, proposer, gamma, worker, status, "
                        f"tokens, TTFT, total, retries) to stderr (-), a file, or off "
                        f"(default: ${ENV_ACCESS_LOG}, else -)")
    p.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the embedded `adaptspec worker` (repeatable)")
    p.set_defaults(func=run)


def load_serve_config(path: str | None, *, upstreams: list[str], engine: str, model: str | None):
    """The config to serve: the file (or the default policy), with --upstream pools if given."""
    from adaptspec.control.config import Config, PoolConfig
    from adaptspec.proxy.configfile import load_config_file
    from adaptspec.proxy.engines import adapter

    if path is not None:
        cfg = load_config_file(path)
    elif DEFAULT_POLICY.is_file():
        cfg = load_config_file(DEFAULT_POLICY)
    else:  # installed without the repo's policies/: the schema's defaults are the default policy
        cfg = Config()
    if upstreams:
        per_request = adapter(engine).per_request
        pool = PoolConfig.model_validate({
            "name": "upstream", "engine": engine, "per_request": per_request,
            "proposers": ["ngram", "draft"] if per_request else [], "gamma": 0,
            "models": [model] if model else None,
            "workers": [{"name": f"upstream-{i}", "url": u} for i, u in enumerate(upstreams)]})
        cfg = cfg.model_copy(update={"pools": [pool]})
    return cfg


def _fail(message: str, code: int = 2) -> int:
    print(f"adaptspec serve: error: {message}", file=sys.stderr)
    return code


def _from_environment(args: argparse.Namespace) -> str | None:
    """Fill --config/--host/--port from ADAPTSPEC_* where not given; return an error message or None."""
    if args.config is None and os.environ.get(ENV_CONFIG):
        args.config = os.environ[ENV_CONFIG]
    if args.host is None and os.environ.get(ENV_HOST):
        args.host = os.environ[ENV_HOST]
    if args.access_log is None:
        args.access_log = os.environ.get(ENV_ACCESS_LOG) or "-"
    if args.port is None and os.environ.get(ENV_PORT):
        raw = os.environ[ENV_PORT]
        if not raw.strip().isdigit() or not 0 <= int(raw) <= 65535:
            return f"{ENV_PORT}={raw!r} is not a port number (0-65535)"
        args.port = int(raw)
    return None


def run(args: argparse.Namespace) -> int:
    from adaptspec.errors import ConfigError

    if (problem := _from_environment(args)) is not None:
        return _fail(problem)
    try:
        config = load_serve_config(args.config, upstreams=args.upstream, engine=args.engine, model=args.model)
    except ConfigError as exc:
        return _fail(str(exc))
    if not config.pools and importlib.util.find_spec("torch") is None:
        return _fail("no pools are configured, and the embedded reference worker needs the worker extra: "
                     "pip install 'adaptspec[worker]', or give --config with pools / --upstream URL")
    from adaptspec.cli._logging import configure_access_log
    from adaptspec.proxy import tracing
    from adaptspec.proxy.serve import serve

    try:
        configure_access_log(args.access_log)
    except OSError as exc:
        return _fail(f"cannot open the access log {args.access_log!r}: {exc.strerror or exc}")
    if tracing.enabled():
        try:
            tracing.setup()
        except ConfigError as exc:
            return _fail(str(exc))
    host = args.host or getattr(config.server, "host", None) or "127.0.0.1"
    port = args.port if args.port is not None else (getattr(config.server, "port", None) or 8000)
    return serve(config, host=host, port=port, config_path=args.config if not args.upstream else None,
                 watch_s=args.watch, worker_args=args.worker_arg)
