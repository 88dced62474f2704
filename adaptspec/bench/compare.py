"""The one-command real comparison of policies on this machine (`adaptspec bench compare`).

Starts `--workers` reference workers (`adaptspec worker`, the built-in tiny target/draft pair), then for each
policy file in turn an adaptspec proxy (`adaptspec serve`) whose only pool is those workers (per-request
speculation, step-time profile `--profile`, default `cpu-tiny`) and whose policy and estimator sections come from the file, and runs the same
load sweep (same prompts in the same order) through it. Every policy has its own proxy (its own alpha
estimates); the workers are shared. All proxies run at once and each load point is split into `--rounds`
rounds that visit every policy in a rotated order, so slow drifts of a shared machine hit all alike. Rows are labelled `off`, `static:<proposer>:<gamma>`, `threshold`,
`adaptive` (goodput) or `bandit` from the file's policy section.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import yaml

from adaptspec.bench.loadgen import LoadConfig, free_port, run_point, summarize
from adaptspec.bench.prompts import PromptItem
from adaptspec.control.config import pool_proposers
from adaptspec.control.telemetry import StepCounters
from adaptspec.errors import ConfigError
from adaptspec.proxy.scrape import parse_metrics

log = logging.getLogger(__name__)

DEFAULT_POLICY_FILES = ("static-off.yaml", "static-ngram.yaml", "static-draft.yaml", "threshold.yaml",
                        "default.yaml")


def policies_dir() -> Path:
    """./policies when run from a checkout's root, else the checkout the package lives in."""
    for cand in (Path.cwd() / "policies", Path(__file__).resolve().parents[2] / "policies"):
        if cand.is_dir():
            return cand
    raise ConfigError("no policies/ directory found; pass --policies FILE,FILE,...", key="--policies")


def label_for(policy: dict) -> str:
    kind = policy.get("kind")
    if kind == "static":
        g, p = int(policy.get("gamma", 0)), policy.get("proposer", "none")
        return "off" if g == 0 or p == "none" else f"static:{p}:{g}"
    return {"goodput": "adaptive"}.get(kind, str(kind))


class Server:
    """A child process serving HTTP on loopback; started and health-checked on enter, stopped on exit."""

    def __init__(self, argv: Sequence[str], port: int, log_path: Path, name: str, start_timeout_s: float = 180.0):
        self.argv, self.port, self.log_path, self.name = list(argv), port, log_path, name
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.health: object = None  # the /health body once healthy (a worker's reports its proposers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._stop()
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while starting:\n{tail}")
            with contextlib.suppress(urllib.error.URLError, OSError), \
                    urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    with contextlib.suppress(ValueError):
                        self.health = json.loads(resp.read())
                    return self
            time.sleep(0.3)
        self._stop()
        raise RuntimeError(f"{self.name} did not become healthy within {self.start_timeout_s:.0f}s "
                           f"(log: {self.log_path})")

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def __exit__(self, *exc: object) -> None:
        self._stop()


def _policy_files(spec: str | None) -> list[Path]:
    if spec:
        files = [Path(s.strip()) for s in spec.split(",") if s.strip()]
    else:
        d = policies_dir()
        files = [d / f for f in DEFAULT_POLICY_FILES]
    for f in files:
        if not f.is_file():
            raise ConfigError("policy file not found", file=str(f))
    return files


def proxy_config(policy_file: Path, worker_urls: Sequence[str], port: int, profile: str = "cpu-tiny",
                 proposers: Sequence[str] = ("ngram", "draft")) -> dict:
    """The proxy config for one run: the file's policy + estimator, our workers as the only pool, offering
    `proposers` per request."""
    from adaptspec.control.config import load_config

    load_config(policy_file)  # validates; errors name file, key and value
    raw = yaml.safe_load(policy_file.read_text()) or {}
    cfg = {k: raw[k] for k in ("policy", "estimator") if k in raw}
    cfg["pools"] = [{"name": "tiny", "engine": "adaptspec", "per_request": True, "proposers": list(proposers),
                     "max_gamma": 8, "profile": profile,
                     "workers": [{"name": f"w{i}", "url": u} for i, u in enumerate(worker_urls)]}]
    cfg["server"] = {"host": "127.0.0.1", "port": port}
    return cfg


def compare(args, loads: Sequence[tuple[str, float]], stream: Callable[[], Iterator[PromptItem]]) -> list[dict]:
    """Run every policy file over the same sweep; returns the combined rows."""
    files = _policy_files(getattr(args, "policies", None))
    labels = []
    for f in files:
        raw = yaml.safe_load(f.read_text()) or {}
        label = label_for(raw.get("policy") or {"kind": "goodput"})
        labels.append(label if label not in labels else f"{label}({f.stem})")
    logs = Path(args.logs or tempfile.mkdtemp(prefix="adaptspec-compare-"))
    logs.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "adaptspec"]
    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        workers = []
        for i in range(max(1, args.workers)):
            port = free_port()
            argv = [*py, "worker", "--port", str(port), *shlex.split(args.worker_args or "")]
            workers.append(stack.enter_context(Server(argv, port, logs / f"worker{i}.log", f"worker {i}")))
        profile = getattr(args, "profile", None) or "cpu-tiny"
        # what every worker reports (the same command line: the same models) and the profile prices
        offered = [p for p in pool_proposers(workers[0].health, profile)
                   if all(p in pool_proposers(w.health, profile) for w in workers)]
        log.info("workers up: %s (proposers %s; logs in %s)", ", ".join(w.url for w in workers),
                 ", ".join(offered), logs)
        proxies = []
        for f in files:
            port = free_port()
            cfg_path = logs / f"proxy-{f.stem}.yaml"
            cfg = proxy_config(f, [w.url for w in workers], port, profile, offered)
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            argv = [*py, "serve", "--config", str(cfg_path), "--port", str(port), "--watch", "0"]
            proxies.append(stack.enter_context(Server(argv, port, logs / f"proxy-{f.stem}.log", f"proxy ({f.name})")))
        rows = interleaved(args, loads, stream, list(zip(labels, proxies, files, strict=True)),
                           [w.url for w in workers])
    return rows


def engine_counters(urls: Sequence[str]) -> StepCounters | None:
    """The workers' step telemetry, summed (None when one does not export it or does not answer)."""
    total = StepCounters()
    for url in urls:
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
                steps = parse_metrics(r.read().decode()).steps
        except (OSError, ValueError) as exc:
            log.warning("no step telemetry from %s: %s", url, exc)
            return None
        if steps is None:
            return None
        total = _add(total, steps)
    return total


def _add(a: StepCounters, b: StepCounters) -> StepCounters:
    def both(x, y) -> dict[str, float]:
        return {k: x.get(k, 0.0) + y.get(k, 0.0) for k in {*x, *y}}

    return StepCounters(a.steps + b.steps, a.step_seconds + b.step_seconds, a.batched_tokens + b.batched_tokens,
                        a.kv_tokens + b.kv_tokens, both(a.drafted_tokens, b.drafted_tokens),
                        both(a.draft_passes, b.draft_passes), a.requests + b.requests)


def engine_summary(w: StepCounters) -> dict:
    """What the workers did during a policy's rounds: steps, mean step time, tokens and requests per step,
    model passes and drafted tokens per proposer (shows *why* a policy is faster or slower)."""
    n = w.steps or 1.0
    return {"steps": w.steps, "step_ms": 1e3 * w.step_seconds / n, "batched_per_step": w.batched_tokens / n,
            "requests_per_step": w.requests / n,
            "passes_per_step": {p: v / n for p, v in w.draft_passes.items() if v},
            "drafted_per_step": {p: v / n for p, v in w.drafted_tokens.items() if v}}


def interleaved(args, loads: Sequence[tuple[str, float]], stream: Callable[[], Iterator[PromptItem]],
                targets: Sequence[tuple[str, Server, Path]], worker_urls: Sequence[str] = ()) -> list[dict]:
    """Each load point in `rounds` rounds; each round runs every policy once, in a rotated order.

    On a shared machine the speed drifts over minutes; interleaving puts every policy under the same
    drift, so their ratios at a point are fair. A policy's row merges its rounds (tokens over the summed
    measured windows) and keeps each round's tokens/s (`round_output_tokens_per_s`, in round order: the
    run-to-run spread of a ratio is that of its per-round ratios, `report.round_spread_text`). Warm-up requests run in the first round of each point only.
    """
    from adaptspec.bench._progress import progress_bar

    rounds = max(1, int(getattr(args, "rounds", 1) or 1))
    streams = {label: stream() for label, _, _ in targets}  # same prompt order for every policy
    per_round = None if args.requests is None else max(1, -(-args.requests // rounds))
    per_round_s = None if args.duration is None else args.duration / rounds
    rows = []
    with progress_bar(len(loads) * rounds * len(targets), "compare", not args.no_progress) as bar:
        for kind, value in loads:
            records: dict[str, list] = {label: [] for label, _, _ in targets}
            windows = dict.fromkeys(records, 0.0)
            by_round: dict[str, list[float]] = {label: [] for label in records}  # tokens/s of each round
            engine: dict[str, StepCounters | None] = dict.fromkeys(records, StepCounters())  # step telemetry
            for r in range(rounds):
                order = list(targets[r % len(targets):]) + list(targets[:r % len(targets)])
                for label, proxy, _ in order:
                    bar.set_postfix_str(f"{kind}={value:g} round {r + 1} {label}")
                    cfg = LoadConfig(url=proxy.url, model=args.model, requests=per_round, duration_s=per_round_s,
                                     warmup_s=args.warmup if r == 0 else 0.0,
                                     warmup_requests=args.warmup_requests if r == 0 else 0,
                                     max_tokens=args.max_tokens, temperature=args.temperature,
                                     timeout_s=args.timeout, api_key=args.api_key, **{kind: value})
                    before = engine_counters(worker_urls) if worker_urls else None
                    recs, window = asyncio.run(run_point(cfg, streams[label]))
                    after = engine_counters(worker_urls) if before is not None else None
                    delta = after.since(before) if after is not None and before is not None else None
                    acc = engine[label]
                    engine[label] = None if delta is None or acc is None else _add(acc, delta)
                    records[label] += recs
                    windows[label] += window
                    by_round[label].append(summarize(recs, window)["output_tokens_per_s"])
                    bar.update(1)
            for label, _, f in targets:
                row = {kind: value, **summarize(records[label], windows[label]), "policy": label,
                       "policy_file": str(f), "rounds": rounds, "round_output_tokens_per_s": by_round[label]}
                if engine[label] is not None and engine[label].steps:
                    row["engine"] = engine_summary(engine[label])
                if row["errors"]:
                    log.warning("%s %s=%g: %d of %d requests failed (%s)", label, kind, value, row["errors"],
                                row["requests"], row["error_kinds"])
                rows.append(row)
    return rows
