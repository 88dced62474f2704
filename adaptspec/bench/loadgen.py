"""An async load generator for any OpenAI-compatible endpoint (streaming chat completions, aiohttp).

Closed loop (`concurrency` clients, each sends its next request as soon as the last one ends) or open loop
(Poisson arrivals at `rate` req/s). A point runs for a number of requests or a duration, after a warm-up
whose requests are not measured. Per request it records time to first token (first content chunk), time
per output token ((end - first token) / (tokens - 1)), end-to-end latency, output tokens (`usage` of the
final chunk when the server sends it, else one per content chunk), errors, and the adaptspec proxy's
decision headers (`x-adaptspec-class`, `x-adaptspec-proposer`, `x-adaptspec-gamma`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from adaptspec.bench.prompts import PromptItem

log = logging.getLogger(__name__)


@dataclass
class RequestRecord:
    category: str
    start: float
    end: float = 0.0
    first_token: float | None = None
    output_tokens: int = 0
    status: int = 0
    error: str | None = None
    proposer: str | None = None
    gamma: int | None = None
    served_class: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class LoadConfig:
    url: str
    model: str | None = None
    concurrency: int | None = None
    rate: float | None = None
    requests: int | None = None  # measured requests per point
    duration_s: float | None = None  # or: measure for this long
    warmup_s: float = 0.0
    warmup_requests: int = 0
    max_tokens: int = 128
    temperature: float = 0.0
    timeout_s: float = 300.0
    api_key: str | None = None
    extra_body: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give exactly one of concurrency (closed loop) or rate (open loop)")
        if self.requests is None and self.duration_s is None:
            raise ValueError("give requests or duration_s")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        if base.endswith("/chat/completions"):
            return base
        return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


def _headers(cfg: LoadConfig) -> dict[str, str]:
    h = {"content-type": "application/json"}
    if cfg.api_key:
        h["authorization"] = f"Bearer {cfg.api_key}"
    return h


async def discover_model(session: aiohttp.ClientSession, cfg: LoadConfig) -> str:
    """The first model of the server's /v1/models (when --model is not given)."""
    base = cfg.endpoint.rsplit("/chat/completions", 1)[0]
    try:
        async with session.get(base + "/models", headers=_headers(cfg)) as resp:
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"GET {base}/models failed: {type(exc).__name__}: {exc}") from None
    if resp.status != 200 or not isinstance(body, dict) or not body.get("data"):
        raise RuntimeError(f"GET {base}/models -> {resp.status}: {str(body)[:200]}")
    return body["data"][0]["id"]


async def one_request(session: aiohttp.ClientSession, cfg: LoadConfig, item: PromptItem) -> RequestRecord:
    body = {"model": cfg.model, "messages": item.chat_messages(), "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature if item.temperature is None else item.temperature, "stream": True, "stream_options": {"include_usage": True},
            **cfg.extra_body}
    rec = RequestRecord(item.category, time.perf_counter())
    chunks = 0
    usage_tokens = None
    try:
        async with session.post(cfg.endpoint, json=body, headers=_headers(cfg)) as resp:
            rec.status = resp.status
            rec.proposer = resp.headers.get("x-adaptspec-proposer")
            g = resp.headers.get("x-adaptspec-gamma")
            rec.gamma = int(g) if g and g.lstrip("-").isdigit() else None
            rec.served_class = resp.headers.get("x-adaptspec-class")
            if resp.status != 200:
                text = await resp.text()
                rec.error = f"HTTP {resp.status}: {text[:200]}"
                return rec
            buf = b""
            async for raw in resp.content.iter_any():
                buf += raw
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        continue
                    msg = json.loads(data)
                    if "error" in msg:
                        rec.error = f"stream error: {str(msg['error'])[:200]}"
                        continue
                    for ch in msg.get("choices") or ():
                        delta = ch.get("delta") or {}
                        if delta.get("content") or ch.get("text"):
                            chunks += 1
                            if rec.first_token is None:
                                rec.first_token = time.perf_counter()
                    if msg.get("usage"):
                        usage_tokens = msg["usage"].get("completion_tokens")
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
    rec.end = time.perf_counter()
    rec.output_tokens = int(usage_tokens) if usage_tokens is not None else chunks
    if rec.error is None and rec.first_token is None and rec.output_tokens > 0:
        rec.first_token = rec.end
    return rec


async def run_point(cfg: LoadConfig, prompts: Iterator[PromptItem],
                    on_done: Callable[[RequestRecord, bool], None] | None = None) -> tuple[list[RequestRecord], float]:
    """Run one load point; returns (measured records, measured window in seconds)."""
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        if cfg.model is None:
            cfg.model = await discover_model(session, cfg)
        t0 = time.perf_counter()
        t_warm = t0 + cfg.warmup_s
        state = {"started": 0, "measured": 0}
        records: list[RequestRecord] = []

        def want_more(now: float) -> bool:
            if cfg.duration_s is not None and now >= t_warm + cfg.duration_s:
                return False
            if cfg.requests is not None:
                return state["measured"] < cfg.requests
            return True

        def is_warmup(now: float) -> bool:
            return now < t_warm or state["started"] < cfg.warmup_requests

        async def fire(item: PromptItem, warm: bool) -> None:
            rec = await one_request(session, cfg, item)
            if not warm:
                records.append(rec)
            if on_done is not None:
                on_done(rec, warm)

        if cfg.concurrency is not None:
            async def client() -> None:
                while True:
                    now = time.perf_counter()
                    warm = is_warmup(now)
                    if not warm and not want_more(now):
                        return
                    state["started"] += 1
                    if not warm:
                        state["measured"] += 1
                    await fire(next(prompts), warm)

            await asyncio.gather(*(client() for _ in range(cfg.concurrency)))
        else:
            rng = random.Random(0)
            tasks = []
            next_t = time.perf_counter()
            while True:
                now = time.perf_counter()
                warm = is_warmup(now)
                if not warm and not want_more(now):
                    break
                state["started"] += 1
                if not warm:
                    state["measured"] += 1
                tasks.append(asyncio.create_task(fire(next(prompts), warm)))
                next_t += rng.expovariate(cfg.rate)
                await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
            await asyncio.gather(*tasks)
        if not records:
            return records, 0.0
        start = min(r.start for r in records)
        end = max(r.end for r in records)
        return records, end - start


def summarize(records: Sequence[RequestRecord], window_s: float) -> dict:
    """One row: throughput, latency percentiles, errors and the decision mix read from the headers."""
    ok = [r for r in records if r.ok]
    toks = sum(r.output_tokens for r in ok)
    ttft = np.array([r.first_token - r.start for r in ok if r.first_token is not None])
    tpot = np.array([(r.end - r.first_token) / (r.output_tokens - 1) for r in ok
                     if r.first_token is not None and r.output_tokens > 1])
    e2e = np.array([r.end - r.start for r in ok])

    def pct(x: np.ndarray, q: float, scale: float = 1.0) -> float | None:
        return float(np.percentile(x, q)) * scale if len(x) else None

    props = Counter(r.proposer for r in ok if r.proposer is not None)
    n_dec = sum(props.values())
    gammas = [r.gamma for r in ok if r.gamma is not None]
    errors = Counter((r.error or "").split(":")[0] for r in records if not r.ok)
    row = {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "error_kinds": dict(errors),
        "output_tokens": toks,
        "window_s": window_s,
        "output_tokens_per_s": toks / window_s if window_s > 0 else 0.0,
        "requests_per_s": len(ok) / window_s if window_s > 0 else 0.0,
        "ttft_ms_p50": pct(ttft, 50, 1e3),
        "ttft_ms_p99": pct(ttft, 99, 1e3),
        "tpot_ms_p50": pct(tpot, 50, 1e3),
        "tpot_ms_p99": pct(tpot, 99, 1e3),
        "e2e_s_p50": pct(e2e, 50),
        "e2e_s_p99": pct(e2e, 99),
        "mean_output_tokens": toks / len(ok) if ok else 0.0,
        "proposer_mix": {p: c / n_dec for p, c in sorted(props.items())} if n_dec else {},
        "mean_gamma": float(np.mean(gammas)) if gammas else None,
        "speculation_share": (sum(1 for g in gammas if g > 0) / len(gammas)) if gammas else None,
        "class_mix": dict(Counter(r.category for r in records)),
    }
    served = Counter(r.served_class for r in ok if r.served_class)
    if served:
        row["served_class_mix"] = dict(served)
    return row


def run_sweep(base: LoadConfig, loads: Sequence[tuple[str, float]], prompts: Iterator[PromptItem],
              progress: bool = True, label: str = "") -> list[dict]:
    """Run each (kind, value) load point in turn ("concurrency" or "rate"); returns one row per point."""
    from adaptspec.bench._progress import progress_bar

    rows = []
    for kind, value in loads:
        cfg = LoadConfig(**{**base.__dict__, "concurrency": None, "rate": None, kind: value})
        total = cfg.requests if cfg.requests is not None else None
        desc = f"{label + ' ' if label else ''}{kind}={value:g}"
        with progress_bar(total, desc, progress) as bar:
            def tick(rec: RequestRecord, warm: bool, bar=bar) -> None:
                if not warm:
                    bar.update(1)

            records, window = asyncio.run(run_point(cfg, prompts, tick))
        row = {kind: value, **summarize(records, window)}
        base.model = cfg.model
        if row["errors"]:
            log.warning("%s: %d of %d requests failed (%s)", desc, row["errors"], row["requests"],
                        row["error_kinds"])
        rows.append(row)
    return rows


def free_port() -> int:
    import socket

    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
