"""SGLang adapter: launch command lines for a pool (metric mapping: adaptspec.control.promtext + control.counters).

SGLang fixes speculation at launch, so adaptspec routes between pools launched differently (for example
one EAGLE3 pool with gamma 4 and one pool without speculation) instead of choosing gamma per request.

Flags, checked against SGLang's documentation (docs.sglang.io: advanced_features/speculative_decoding,
"Full Parameter Reference"; references/production_metrics for --enable-metrics):
    python -m sglang.launch_server --model-path M --host H --port P --enable-metrics
        --speculative-algorithm EAGLE|EAGLE3|STANDALONE|NGRAM
        --speculative-draft-model-path D      (EAGLE / EAGLE3 / STANDALONE)
        --speculative-num-steps gamma         (depth of autoregressive drafting)
        --speculative-eagle-topk k            (branching per step; 1 = a chain of gamma tokens)
        --speculative-num-draft-tokens n      (tokens verified per step; gamma + 1 for a chain)
NGRAM needs no draft model and, per the docs, runs on CUDA only.
"""

from __future__ import annotations

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

# adaptspec proposer -> SGLang --speculative-algorithm
SGLANG_ALGORITHMS = {"eagle": "EAGLE3", "draft": "STANDALONE", "ngram": "NGRAM"}
VALID_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM")
# the release the metric names and launch flags are checked against (integrations/sglang_seams.py, in CI)
PINNED_SGLANG = "0.5.23"


def sglang_commands(pool: object, *, file: str | None = None) -> list[EngineCommand]:
    """One `sglang.launch_server` command per worker of a fixed-speculation pool."""
    name = str(get(pool, "name", "?"))
    launch = launch_section(pool)
    if get(pool, "per_request", False):
        raise ConfigError(f"pool {name!r}: SGLang fixes speculation at launch; set per_request: false",
                          file=file, key=f"pools.{name}.per_request", value=True)
    gamma = int(get(pool, "gamma", 0) or 0)
    proposers = list(get(pool, "proposers", []) or [])
    proposer = proposers[0] if proposers else "none"
    model = require(launch, "model", pool=name, file=file, why="to launch an engine")
    python = str(launch.get("python", "python3"))
    host = str(launch.get("host", "0.0.0.0"))

    spec: list[str] = []
    if gamma > 0 and proposer != "none":
        algorithm = str(launch.get("algorithm") or SGLANG_ALGORITHMS.get(proposer, ""))
        if algorithm not in VALID_ALGORITHMS:
            raise ConfigError(f"pool {name!r}: no SGLang speculative algorithm for proposer {proposer!r}",
                              file=file, key=f"pools.{name}.launch.algorithm", value=algorithm or proposer)
        topk = int(launch.get("eagle_topk", 1))
        n_draft = int(launch.get("num_draft_tokens", gamma + 1 if topk == 1 else gamma * topk + 1))
        spec = ["--speculative-algorithm", algorithm]
        if algorithm != "NGRAM":
            draft = require(launch, "draft_model", pool=name, file=file,
                            why=f"for --speculative-algorithm {algorithm}")
            spec += ["--speculative-draft-model-path", draft, "--speculative-num-steps", str(gamma),
                     "--speculative-eagle-topk", str(topk)]
        spec += ["--speculative-num-draft-tokens", str(n_draft)]

    commands = []
    for i, worker in enumerate(get(pool, "workers", []) or []):
        url = str(get(worker, "url"))
        port = worker_port(url, file=file, key=f"pools.{name}.workers[{i}].url")
        argv = [python, "-m", "sglang.launch_server", "--model-path", model, "--host", host,
                "--port", str(port), "--enable-metrics", *spec, *extra_args(launch, pool=name, file=file)]
        commands.append(EngineCommand(str(get(worker, "name", f"{name}-{i}")), argv, env_of(launch)))
    return commands
