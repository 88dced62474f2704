"""Steady-state throughput of a closed loop (`bench compare --duration`): warm up until the pool cycled, then
count the tokens that arrive inside a fixed window.

Why. At high concurrency a request lives longer than a short round (CPU vLLM at 128 clients: 14-31 s), so a
round that starts from an empty pool and counts whole requests measures one wave: the burst of prefills, the
decode of one batch, the drain. That is not the steady load a server sees, and it favours whichever policy
finishes the wave first.

How. `concurrency` clients send back to back from the start. The warm-up ends once every client has finished
`lifetimes` requests (one request lifetime, measured in the warm-up itself: it scales with the load and the
policy's speed) and at least `min_warmup_s` passed; the pool is then full and its requests at mixed ages.
The window [t_w, t_w + window_s] follows, the clients keep sending through it, and stop after it (the
requests in flight finish: the drain is not measured). A request's tokens are spread evenly over
[first token, end] (its first token at the first token's time); the tokens inside the window over its length
are the throughput, so a request that straddles an edge counts for its part inside. Latencies are those of
the requests started inside the window. `on_window(edge)` is called (in a thread) at the window's start
("start") and end ("end"), e.g. to read the workers' counters over exactly the window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import aiohttp

from adaptspec.bench.loadgen import LoadConfig, RequestRecord, discover_model, one_request
from adaptspec.bench.prompts import PromptItem


@dataclass
class SteadyResult:
    """One steady run: every request (warm-up and drain included), the window, and the warm-up it took."""

    records: list[RequestRecord] = field(default_factory=list)
    window: tuple[float, float] = (0.0, 0.0)  # perf_counter seconds
    warmup_s: float = 0.0

    @property
    def window_s(self) -> float:
        return self.window[1] - self.window[0]

    def measured(self) -> list[RequestRecord]:
        """The requests started inside the window (their latencies describe the steady load)."""
        a, b = self.window
        return [r for r in self.records if a <= r.start < b]

    def tokens_in_window(self) -> float:
        return tokens_between(self.records, *self.window)

    def completed_in_window(self) -> int:
        a, b = self.window
        return sum(1 for r in self.records if r.ok and a <= r.end < b)


def tokens_between(records: Sequence[RequestRecord], a: float, b: float) -> float:
    """Output tokens of successful requests that arrived in [a, b): the first at the first token's time, the
    rest evenly over (first token, end]."""
    total = 0.0
    for r in records:
        if not r.ok or r.first_token is None or r.output_tokens <= 0:
            continue
        if a <= r.first_token < b:
            total += 1.0
        rest = r.output_tokens - 1
        span = r.end - r.first_token
        if rest <= 0:
            continue
        if span <= 0.0:
            total += rest if a <= r.end < b else 0.0
            continue
        overlap = max(0.0, min(b, r.end) - max(a, r.first_token))
        total += rest * overlap / span
    return total


async def run_steady(cfg: LoadConfig, prompts: Iterator[PromptItem], window_s: float, *, min_warmup_s: float = 0.0,
                     lifetimes: int = 1, on_window: Callable[[str], object] | None = None) -> SteadyResult:
    """Closed loop of `cfg.concurrency` clients: warm-up (module doc), `window_s` measured, then the drain."""
    if cfg.concurrency is None:
        raise ValueError("steady-state measurement needs a closed loop (concurrency)")
    if window_s <= 0 or lifetimes < 1:
        raise ValueError("window_s must be > 0 and lifetimes >= 1")
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    out = SteadyResult()
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        if cfg.model is None:
            cfg.model = await discover_model(session, cfg)
        t0 = time.perf_counter()
        finished = [0] * cfg.concurrency  # requests each client has finished
        cycled = asyncio.Event()  # every client finished `lifetimes` requests
        stop_at = [float("inf")]

        async def client(i: int) -> None:
            while time.perf_counter() < stop_at[0]:
                rec = await one_request(session, cfg, next(prompts))
                out.records.append(rec)
                finished[i] += 1
                if min(finished) >= lifetimes:
                    cycled.set()

        async def clock() -> None:
            await cycled.wait()
            await asyncio.sleep(max(0.0, t0 + min_warmup_s - time.perf_counter()))
            start = time.perf_counter()
            stop_at[0] = start + window_s
            out.warmup_s = start - t0
            if on_window is not None:
                await asyncio.to_thread(on_window, "start")
            await asyncio.sleep(max(0.0, stop_at[0] - time.perf_counter()))
            # the window ends when the clients stop sending, not when this task wakes: on a busy loop the wake can
            # come after every request in flight at the end finished, and the window would swallow their tails
            end = stop_at[0]
            if on_window is not None:
                await asyncio.to_thread(on_window, "end")
            out.window = (start, end)

        await asyncio.gather(clock(), *(client(i) for i in range(cfg.concurrency)))
    return out
