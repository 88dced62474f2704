"""The one-command real comparison of policies on this machine (`adaptspec bench compare`).

Starts `--workers` reference workers (`adaptspec worker`, the built-in tiny target/draft pair), then for each
policy file in turn an adaptspec proxy (`adaptspec serve`) whose only pool is those workers (per-request
speculation, step-time profile `--profile`, default `cpu-tiny`) and whose policy and estimator sections come from the file, and runs the same
load sweep (same prompts in the same order) through it. Every policy has its own proxy (its own alpha
estimates); the workers are shared. All proxies run at once and each load point is split into `--rounds`
rounds that visit every policy in a balanced order (`round_order`), so slow drifts of a shared machine hit all alike. Rows are labelled `off`, `static:<proposer>:<gamma>`, `threshold`,
`adaptive` (goodput) or `bandit` from the file's policy section.

`--engine vllm`: the workers are real vLLM servers with the adaptspec plugin instead (bench/vllm_pool.py: the
`engine: vllm` per-request pool a user would write, one speculative method per process, `--vllm-proposer`),
started and stopped by the command; `--worker-url` uses running workers of either kind instead. A policy the
pool cannot run is skipped, a threshold table runs with the pool's proposer (`policy_for_pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import yaml

from adaptspec.bench._server import Server
from adaptspec.bench.loadgen import LoadConfig, free_port, run_point, summarize
from adaptspec.bench.prompts import PromptItem
from adaptspec.bench.steady import run_steady
from adaptspec.control.config import pool_proposers
from adaptspec.control.promtext import parse_metrics
from adaptspec.control.telemetry import StepCounters
from adaptspec.errors import ConfigError

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


def reference_pool(worker_urls: Sequence[str], profile: str, proposers: Sequence[str]) -> dict:
    """The pool of reference workers (`adaptspec worker`), offering `proposers` per request."""
    return {"name": "tiny", "engine": "adaptspec", "per_request": True, "proposers": list(proposers),
            "max_gamma": 8, "profile": profile,
            "workers": [{"name": f"w{i}", "url": u} for i, u in enumerate(worker_urls)]}


def policy_for_pool(policy: dict, offered: Sequence[str]) -> dict | None:
    """The file's policy as it can run on a pool that offers only `offered`: None for a static policy whose
    proposer it lacks (it would be plain decoding, a second `off`); a threshold table's proposers not
    offered become the pool's only one (a vLLM pool runs one method). Anything else unchanged."""
    kind, want = policy.get("kind"), policy.get("proposer", "none")
    if kind == "static" and int(policy.get("gamma", 0)) > 0 and want not in ("none", *offered):
        return None
    if kind == "threshold" and len(offered) == 1:
        only = offered[0]
        by_class = {c: (p if p in ("none", *offered) else only)
                    for c, p in (policy.get("proposer_by_class") or {}).items()}
        return {**policy, "proposer": only, "proposer_by_class": by_class}
    return policy


def proxy_config(policy_file: Path, pool_section: dict, port: int) -> dict | None:
    """The proxy config for one run: the file's policy (fitted to the pool, `policy_for_pool`) + estimator,
    `pool_section` as the only pool; None when the policy cannot run on that pool."""
    from adaptspec.control.config import load_config, parse_config

    load_config(policy_file)  # validates; errors name file, key and value
    raw = yaml.safe_load(policy_file.read_text()) or {}
    cfg = {k: raw[k] for k in ("policy", "estimator") if k in raw}
    if "policy" in cfg:
        cfg["policy"] = policy_for_pool(cfg["policy"], pool_section["proposers"])
        if cfg["policy"] is None:
            return None
    cfg["pools"] = [pool_section]
    cfg["server"] = {"host": "127.0.0.1", "port": port}
    parse_config(cfg, str(policy_file))  # the rewritten policy validates too
    return cfg


def _labels(files: Sequence[Path]) -> list[str]:
    labels: list[str] = []
    for f in files:
        raw = yaml.safe_load(f.read_text()) or {}
        label = label_for(raw.get("policy") or {"kind": "goodput"})
        labels.append(label if label not in labels else f"{label}({f.stem})")
    return labels


def _get(url: str) -> bytes:
    """GET a running worker's endpoint; RuntimeError (the command's error) when it does not answer 200."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()
    except (OSError, ValueError) as exc:  # URLError / HTTPError are OSErrors; a malformed URL a ValueError
        raise RuntimeError(f"--worker-url: {url} did not answer: {exc}") from exc


def _snapshot(url: str, path: Path) -> None:
    """Save a proxy's /metrics for the record; a proxy that does not answer is logged, not fatal (the rows
    are what the run is for)."""
    try:
        path.write_bytes(_get(url))
    except (RuntimeError, OSError) as exc:
        log.warning("could not save %s to %s: %s", url, path, exc)


def _reference_workers(args, stack: contextlib.ExitStack, logs: Path) -> dict:
    """Start `--workers` reference workers (or use `--worker-url`s) -> their pool section."""
    profile = getattr(args, "profile", None) or "cpu-tiny"
    urls = [u.rstrip("/") for u in getattr(args, "worker_url", None) or []]
    healths = [json.loads(_get(url + "/health")) for url in urls]
    if not urls:
        py = [sys.executable, "-m", "adaptspec"]
        for i in range(max(1, args.workers)):
            port = free_port()
            argv = [*py, "worker", "--port", str(port), *shlex.split(args.worker_args or "")]
            w = stack.enter_context(Server(argv, port, logs / f"worker{i}.log", f"worker {i}"))
            urls.append(w.url)
            healths.append(w.health)
    # what every worker reports (the same command line: the same models) and the profile prices
    offered = [p for p in pool_proposers(healths[0], profile) if all(p in pool_proposers(h, profile) for h in healths)]
    return reference_pool(urls, profile, offered)


def _vllm_workers(args, stack: contextlib.ExitStack, logs: Path) -> dict:
    """Start `--workers` vLLM servers with the plugin (or use `--worker-url`s) -> their pool section."""
    from adaptspec.bench import vllm_pool

    given = [u.rstrip("/") for u in getattr(args, "worker_url", None) or []]
    for url in given:
        _get(url + "/v1/models")
    python = Path(args.vllm_python) if args.vllm_python else vllm_pool.default_python()
    if not given:
        vllm_pool.check_python(python)
    urls = given or [f"http://127.0.0.1:{free_port()}" for _ in range(max(1, args.workers))]
    extra = shlex.split(args.worker_args or "")
    section = vllm_pool.pool("vllm", args.vllm_proposer, urls, python=python, max_gamma=args.max_gamma,
                             max_num_seqs=args.max_num_seqs, profile=getattr(args, "profile", None),
                             extra_args=extra)
    if not given:
        (logs / "pool-vllm.yaml").write_text(yaml.safe_dump({"pools": [section]}, sort_keys=False))
        log.info("starting %d vLLM server(s) (%s, up to %.0f s each; logs in %s)", len(urls), python,
                 vllm_pool.START_TIMEOUT_S, logs)
        stack.enter_context(vllm_pool.started(section, logs, file=str(logs / "pool-vllm.yaml")))
    return section


# the workers `bench compare` starts (or points at) per `--engine`
_WORKERS = {"adaptspec": _reference_workers, "vllm": _vllm_workers}
_TITLES = {"adaptspec": lambda args: "reference worker",
           "vllm": lambda args: f"vLLM (CPU) + plugin, {args.vllm_proposer}"}


def title(args) -> str:
    """The results' heading for the workers `--engine` names."""
    return f"adaptspec bench compare ({_TITLES[getattr(args, 'engine', 'adaptspec') or 'adaptspec'](args)} + proxy, this machine)"


def compare(args, loads: Sequence[tuple[str, float]], stream: Callable[[], Iterator[PromptItem]]) -> list[dict]:
    """Run every policy file over the same sweep; returns the combined rows."""
    files = _policy_files(getattr(args, "policies", None))
    labels = _labels(files)
    logs = Path(args.logs or tempfile.mkdtemp(prefix="adaptspec-compare-"))
    logs.mkdir(parents=True, exist_ok=True)
    engine = getattr(args, "engine", "adaptspec") or "adaptspec"
    with contextlib.ExitStack() as stack:
        section = _WORKERS[engine](args, stack, logs)
        worker_urls = [w["url"] for w in section["workers"]]
        log.info("workers up: %s (%s, proposers %s; logs in %s)", ", ".join(worker_urls), engine,
                 ", ".join(section["proposers"]), logs)
        targets = []
        for label, f in zip(labels, files, strict=True):
            port = free_port()
            cfg = proxy_config(f, section, port)
            if cfg is None:
                log.warning("%s (%s) skipped: the pool offers only %s", label, f.name, ", ".join(section["proposers"]))
                continue
            cfg_path = logs / f"proxy-{f.stem}.yaml"
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            argv = [sys.executable, "-m", "adaptspec", "serve", "--config", str(cfg_path), "--port", str(port),
                    "--watch", "0"]
            proxy = stack.enter_context(Server(argv, port, logs / f"proxy-{f.stem}.log", f"proxy ({f.name})"))
            targets.append((label, proxy, f))
        rows = interleaved(args, loads, stream, targets, worker_urls, snapshots=logs)
    for r in rows:
        r["engine_kind"] = engine
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
    model passes and drafted tokens per proposer (shows *why* a policy is faster or slower); the context tokens
    attended per step (`kv_per_step`) too, the term a step-time fit needs besides the batched tokens."""
    n = w.steps or 1.0
    return {"steps": w.steps, "step_ms": 1e3 * w.step_seconds / n, "batched_per_step": w.batched_tokens / n,
            "kv_per_step": w.kv_tokens / n, "requests_per_step": w.requests / n,
            "passes_per_step": {p: v / n for p, v in w.draft_passes.items() if v},
            "drafted_per_step": {p: v / n for p, v in w.drafted_tokens.items() if v}}


def round_order(n: int, r: int) -> list[int]:
    """The order of n policies in round r: a Williams design (rows of a balanced Latin square).

    A policy run right after another can inherit its state (the worker's memory after a draft model's rounds, a
    slow spell of the host that started during the other's window). A cyclic rotation puts every policy after
    the same one in every round, so such carry-over would land on one policy only (runs 9-12 always ran adaptive
    right after static draft; a reordered check's 1.06x at c=1 turned out to be drift, not the order:
    docs/results/cpu-c1-gap.md). Here each policy takes every position once in n rounds and follows every other
    policy once (n even; n odd: once in 2n rounds, the second n rows reversed). Row 0 starts with policy 0."""
    if n <= 0:
        return []
    base = [0]
    lo, hi = 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    row = [(b + r) % n for b in base]
    return row[::-1] if n % 2 and (r // n) % 2 else row


def interleaved(args, loads: Sequence[tuple[str, float]], stream: Callable[[], Iterator[PromptItem]],
                targets: Sequence[tuple[str, Server, Path]], worker_urls: Sequence[str] = (),
                snapshots: Path | None = None) -> list[dict]:
    """Each load point in `rounds` rounds; each round runs every policy once, in `round_order`.

    On a shared machine the speed drifts over minutes; interleaving puts every policy under the same
    drift, so their ratios at a point are fair. A policy's row merges its rounds (tokens over the summed
    measured windows) and keeps each round's tokens/s (`round_output_tokens_per_s`, in round order: the
    run-to-run spread of a ratio is that of its per-round ratios, `report.round_spread_text`).

    `--duration` at a concurrency: every policy's round is a steady-state run (bench/steady.py): it warms
    up until each client finished `--steady-lifetimes` requests (and `--warmup` seconds passed), then counts
    the tokens that arrive in a window of duration / rounds seconds; the workers' counters are read at the
    window's edges. `--requests` (or a rate, or --steady-lifetimes 0): whole requests started in the round
    are counted, with warm-up requests in the first round of each point only.

    `snapshots`: a directory where each proxy's /metrics is saved after each point's rounds
    (`proxy-<policy file stem>-<kind><value>.metrics`): its alpha estimates and fitted step model as they
    stood when the point ended.
    """
    from adaptspec.bench._progress import progress_bar

    rounds = max(1, int(getattr(args, "rounds", 1) or 1))
    streams = {label: stream() for label, _, _ in targets}  # same prompt order for every policy
    per_round = None if args.requests is None else max(1, -(-args.requests // rounds))
    per_round_s = None if args.duration is None else args.duration / rounds
    lifetimes = int(getattr(args, "steady_lifetimes", 1) or 0)
    rows = []
    with progress_bar(len(loads) * rounds * len(targets), "compare", not args.no_progress) as bar:
        for kind, value in loads:
            steady = kind == "concurrency" and per_round_s is not None and per_round is None and lifetimes > 0
            tally = _PointTally([label for label, _, _ in targets])
            for r in range(rounds):
                order = [targets[i] for i in round_order(len(targets), r)]
                for label, proxy, _ in order:
                    bar.set_postfix_str(f"{kind}={value:g} round {r + 1} {label}")
                    cfg = LoadConfig(url=proxy.url, model=args.model, requests=per_round, duration_s=per_round_s,
                                     warmup_s=args.warmup if r == 0 else 0.0,
                                     warmup_requests=args.warmup_requests if r == 0 else 0,
                                     max_tokens=args.max_tokens, temperature=args.temperature,
                                     timeout_s=args.timeout, api_key=args.api_key, **{kind: value})
                    recs, window, rate, res, delta = _policy_round(args, cfg, streams[label], steady, per_round_s,
                                                                   lifetimes, worker_urls)
                    if res is not None:
                        log.info("%s %s=%g round %d: warm-up %.1f s, %.0f tokens in %.1f s", label, kind, value,
                                 r + 1, res.warmup_s, res.tokens_in_window(), window)
                    tally.add(label, recs, window, rate, res, delta)
                    bar.update(1)
            if snapshots is not None:
                for _, proxy, f in targets:
                    _snapshot(proxy.url + "/metrics", snapshots / f"proxy-{f.stem}-{kind}{value:g}.metrics")
            rows += tally.rows(kind, value, targets, rounds, steady)
    return rows


def _policy_round(args, cfg: LoadConfig, stream: Iterator[PromptItem], steady: bool, per_round_s: float | None,
                  lifetimes: int, worker_urls: Sequence[str]) -> tuple[list, float, float, object | None,
                                                                      StepCounters | None]:
    """One policy's round at a load point: a steady-state window (`steady`, bench/steady.py) or whole requests.
    Returns its records, measured window (s), tokens/s, the steady run (None for whole requests) and the
    workers' step counters over the window (None when they could not be read at both edges)."""
    edges: dict[str, StepCounters | None] = {}

    def read_counters(edge: str, edges=edges) -> None:
        edges[edge] = engine_counters(worker_urls) if worker_urls else None

    res = None
    if steady:
        res = asyncio.run(run_steady(cfg, stream, per_round_s, min_warmup_s=args.warmup, lifetimes=lifetimes,
                                     on_window=read_counters))
        recs, window = res.measured(), res.window_s
        rate = res.tokens_in_window() / window if window > 0 else 0.0
    else:
        read_counters("start")
        recs, window = asyncio.run(run_point(cfg, stream))
        read_counters("end")
        rate = summarize(recs, window)["output_tokens_per_s"]
    before, after = edges.get("start"), edges.get("end")
    delta = after.since(before) if after is not None and before is not None else None
    return recs, window, rate, res, delta


class _PointTally:
    """One load point's measurements per policy, merged over its rounds: the records and measured windows, the
    steady-state window tokens, completions and warm-ups, each round's tokens/s and the workers' step counters."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.records: dict[str, list] = {label: [] for label in labels}
        self.windows = dict.fromkeys(self.records, 0.0)
        self.tokens = dict.fromkeys(self.records, 0.0)  # steady: tokens that arrived inside the windows
        self.done = dict.fromkeys(self.records, 0)  # steady: requests completed inside the windows
        self.warmups: dict[str, list[float]] = {label: [] for label in self.records}
        self.by_round: dict[str, list[float]] = {label: [] for label in self.records}  # tokens/s of each round
        # step telemetry (None once a round could not be read)
        self.engine: dict[str, StepCounters | None] = dict.fromkeys(self.records, StepCounters())

    def add(self, label: str, recs: list, window: float, rate: float, res, delta: StepCounters | None) -> None:
        """A round of policy `label` (what `_policy_round` returned)."""
        if res is not None:
            self.tokens[label] += res.tokens_in_window()
            self.done[label] += res.completed_in_window()
            self.warmups[label].append(res.warmup_s)
        self.by_round[label].append(rate)
        acc = self.engine[label]
        self.engine[label] = None if delta is None or acc is None else _add(acc, delta)
        self.records[label] += recs
        self.windows[label] += window

    def rows(self, kind: str, value: float, targets: Sequence[tuple[str, Server, Path]], rounds: int,
             steady: bool) -> list[dict]:
        """The point's row per policy, in `targets` order (failed requests logged)."""
        rows = []
        for label, _, f in targets:
            row = {kind: value, **summarize(self.records[label], self.windows[label]), "policy": label,
                   "policy_file": str(f), "rounds": rounds, "round_output_tokens_per_s": self.by_round[label]}
            if steady and self.windows[label] > 0:
                # the steady throughput: tokens and completions inside the windows (latencies: the
                # requests started inside them)
                row.update(measure="steady", window_tokens=self.tokens[label], warmup_s=self.warmups[label],
                           output_tokens_per_s=self.tokens[label] / self.windows[label],
                           requests_per_s=self.done[label] / self.windows[label])
            engine = self.engine[label]
            if engine is not None and engine.steps:
                row["engine"] = engine_summary(engine)
            if row["errors"]:
                log.warning("%s %s=%g: %d of %d requests failed (%s)", label, kind, value, row["errors"],
                            row["requests"], row["error_kinds"])
            rows.append(row)
        return rows
