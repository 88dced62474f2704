"""`adaptspec worker`: the reference engine worker behind an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import logging
import sys

from adaptspec.control.types import PROPOSERS

log = logging.getLogger("adaptspec.worker")

PROPOSER_CHOICES = PROPOSERS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "worker", help="run the reference worker (continuous batching, per-request speculation)",
        description="Serve a tiny Llama pair (default: the built-in adaptspec/assets/tiny-target and "
                    "tiny-draft) with continuous batching and per-request speculation behind "
                    "/v1/completions, /v1/chat/completions, /v1/models, /health and /metrics.")
    p.add_argument("--model", metavar="DIR", default=None, help="target model dir (default: built-in tiny-target)")
    p.add_argument("--draft", metavar="DIR", default=None, help="draft model dir (default: built-in tiny-draft)")
    p.add_argument("--eagle", metavar="DIR", default=None,
                   help="EAGLE-style head dir for proposer 'eagle' (default: the built-in tiny-eagle with the "
                        "built-in target; none otherwise)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8001, help="port (default: 8001; 0 = any free port)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="most requests in the running batch (default: the engine's)")
    p.add_argument("--max-model-len", type=int, default=None, metavar="L",
                   help="context length, prompt + output tokens (default: the model's)")
    p.add_argument("--default-proposer", choices=PROPOSER_CHOICES, default="none",
                   help="proposer for requests without a `speculation` field (default: none)")
    p.add_argument("--default-k", type=int, default=4, metavar="K",
                   help="speculative tokens when a request names a proposer but no k (default: 4)")
    p.add_argument("--served-model-name", default=None, metavar="NAME",
                   help="model id in /v1/models and responses (default: 'tiny' for the built-in pair, "
                        "else the model dir's name)")
    p.add_argument("--threads", type=int, default=1, metavar="T",
                   help="torch intra-op threads (default: 1; more only on idle cores: spinning OpenMP threads "
                        "on a shared, oversubscribed CPU make every step many times slower)")
    p.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024, metavar="B",
                   help="refuse request bodies larger than this with 413 (default: 8 MiB)")
    p.add_argument("--hybrid-model-cost", type=_share(1.0), default=None, metavar="C",
                   help="proposer 'hybrid': the price of one more model-drafted token (a model pass and a verified "
                        "position) as a share of a target step, in [0, 1); at a lookup miss its model part (EAGLE "
                        "head, else the draft model) drafts the j tokens whose learned chances to survive S_1.. "
                        "S_j are >= C, and only if sum(S_i - C) >= --hybrid-call-cost (0: always k tokens; "
                        "default: the engine's, 0.35, measured on a 2-core CPU; a memory-bound GPU, where verified "
                        "positions are nearly free, wants less)")
    p.add_argument("--hybrid-call-cost", type=_share(4.0), default=None, metavar="F",
                   help="proposer 'hybrid': the price of drafting at all at a lookup miss (the model call, and a "
                        "step that verifies a draft instead of decoding one token) as a share of a target step, "
                        "in [0, 4) (default: the engine's, 0: not weighed)")
    p.add_argument("--hybrid-min-match", type=int, default=None, metavar="M",
                   help="proposer 'hybrid': draft with n-gram lookup once its drafts predicted M emitted tokens in a "
                        "row (the match in progress), with the model elsewhere (default: 2; 0: lookup whenever it "
                        "finds the n-gram, the model only where it finds none)")
    p.set_defaults(func=run)


def _share(top: float):
    """argparse type of a price as a share of a step: a float in [0, top)."""
    def share(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in [0, {top:g}), got {text!r}") from None
        if not 0.0 <= value < top:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be in [0, {top:g}), got {text!r}")
        return value
    share.__name__ = "share"
    return share


def run(args: argparse.Namespace) -> int:
    from adaptspec.errors import AdaptspecError

    if args.default_k < 0:
        print(f"adaptspec worker: error: --default-k must be >= 0, got {args.default_k}", file=sys.stderr)
        return 2
    try:
        engine, settings = build_engine(args)
    except AdaptspecError as exc:
        print(f"adaptspec worker: error: {exc}", file=sys.stderr)
        return 2
    import asyncio

    import uvicorn

    from adaptspec.worker.server import build_app

    app = build_app(engine, settings)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            lifespan="off")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            log.info("adaptspec worker serving %r (target %s, draft %s) on http://%s:%d  (max_batch=%s, "
                     "max_model_len=%d, default speculation %s k=%d)", settings.served_model_name,
                     settings.model_root, settings.draft_root, args.host, port, engine.max_batch,
                     engine.max_model_len, settings.default_proposer, settings.default_k)
        await task

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
    return 0 if server.started else 1


def build_engine(args: argparse.Namespace):
    """Engine + server settings from parsed `adaptspec worker` arguments (shared with `adaptspec serve`)."""
    from pathlib import Path

    from adaptspec.errors import ModelLoadError
    from adaptspec.worker.engine import Engine
    from adaptspec.worker.server import WorkerSettings

    assets = Path(__file__).resolve().parent.parent / "assets"
    model = Path(args.model) if args.model else assets / "tiny-target"
    draft = Path(args.draft) if args.draft else assets / "tiny-draft"
    opts: dict = {}
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
        opts["num_threads"] = args.threads
    if args.max_batch is not None:
        opts["max_batch"] = args.max_batch
    if args.max_model_len is not None:
        opts["max_model_len"] = args.max_model_len
    if getattr(args, "hybrid_min_match", None) is not None and args.hybrid_min_match < 0:
        raise SystemExit(f"--hybrid-min-match must be >= 0, got {args.hybrid_min_match}")
    for name in ("hybrid_model_cost", "hybrid_call_cost", "hybrid_min_match"):
        if getattr(args, name, None) is not None:
            opts[name] = getattr(args, name)
    eagle = Path(args.eagle) if getattr(args, "eagle", None) else None
    if eagle is None and not args.model and (assets / "tiny-eagle" / "config.json").is_file():
        eagle = assets / "tiny-eagle"  # the head is trained for the built-in target only
    for what, path in (("--model", model), ("--draft", draft), ("--eagle", eagle)):
        if path is not None and not (path / "config.json").is_file():
            raise ModelLoadError(f"{what} {path}: not a model directory (no config.json)")
    engine = Engine.from_dirs(str(model), str(draft), str(eagle) if eagle else None, **opts)
    name = args.served_model_name or ("tiny" if not args.model else model.name)
    settings = WorkerSettings(served_model_name=name, max_model_len=engine.max_model_len,
                              default_proposer=args.default_proposer, default_k=args.default_k,
                              max_body_bytes=args.max_body_bytes, model_root=str(model),
                              draft_root=str(draft))
    return engine, settings
