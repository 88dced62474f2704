"""Shared state of the proxy: alpha estimates and other replicas' in-flight counts.

    StateBackend (protocol)
    ├── MemoryState   one replica: the AlphaTable in process memory (default)
    └── RedisState    several replicas share observations and occupancy through Redis

The request path only ever touches local memory: `apply()` updates the local AlphaTable at once
and `remote_inflight` is a plain dict. Redis traffic happens in one background task every
`sync_interval_s`:

- observations: every replica appends its own AlphaTable updates (`observe` / `observe_counts` calls with
  their arguments, as JSON) to the stream `{prefix}obs` (XADD, trimmed to ~100k entries) and replays the
  other replicas' entries (XREAD from the last id seen) on its local table. All replicas therefore see every observation once,
  their own instantly and the others' within one interval; a replica that starts later replays the stream.
- occupancy: each replica writes its in-flight count per worker to the hash `{prefix}occ:{replica}`
  (expires after a few intervals, so a dead replica drops out) and sums the others' into
  `remote_inflight`, which the decision path adds to its own count.
- counter leases: scraped engine counters are global to a worker, so only the replica holding the
  lease `{prefix}lease:{worker}` (SET NX PX) turns them into observations; the others only track
  baselines. Without the lease each replica would count the same tokens again.

Redis going away: the proxy keeps serving from local state, logs once, counts every failed sync in
`adaptspec_state_backend_errors_total{backend="redis"}` with `adaptspec_state_backend_up=0`, keeps its
own observations in a bounded outbox, holds all leases locally, and pushes the outbox when Redis
answers again (logged once as well).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import deque
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

_STREAM_MAXLEN = 100_000
_OUTBOX_MAX = 100_000


def redact_url(url: str) -> str:
    """The URL without user/password, for logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


_METHODS = frozenset({"observe", "observe_counts"})


class StateTable:
    """AlphaTable-shaped writer that routes updates through a state backend (for `ingest_vllm` & co.)."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    def observe(self, *args, **kwargs) -> None:
        self._state.apply("observe", _plain(args), kwargs)

    def observe_counts(self, *args, **kwargs) -> None:
        self._state.apply("observe_counts", _plain(args), kwargs)


def _plain(args: tuple) -> tuple:
    """Sequences as lists, so the call survives a JSON round trip through Redis unchanged."""
    return tuple(list(a) if isinstance(a, (tuple, list)) else a for a in args)


class StateBackend(Protocol):
    backend: str
    alphas: object  # AlphaTable (an AlphaSource)
    remote_inflight: dict[str, int]
    up: bool

    def apply(self, method: str, args: tuple, kwargs: dict) -> None: ...

    def counter_leader(self, worker: str) -> bool: ...

    async def start(self, proxy) -> None: ...

    async def close(self) -> None: ...


class MemoryState:
    backend = "memory"

    def __init__(self, alphas) -> None:
        self.alphas = alphas
        self.remote_inflight: dict[str, int] = {}
        self.up = True

    def apply(self, method: str, args: tuple, kwargs: dict) -> None:
        """One AlphaTable update (`observe` or `observe_counts`), applied locally at once."""
        if method not in _METHODS:
            raise ValueError(f"not an AlphaTable update: {method!r}")
        getattr(self.alphas, method)(*args, **kwargs)

    def table(self) -> StateTable:
        return StateTable(self)

    def counter_leader(self, worker: str) -> bool:
        return True

    async def start(self, proxy) -> None:
        return None

    async def close(self) -> None:
        return None


class RedisState(MemoryState):
    backend = "redis"

    def __init__(self, alphas, url: str, key_prefix: str = "adaptspec:", sync_interval_s: float = 0.1,
                 metrics=None) -> None:
        super().__init__(alphas)
        import redis.asyncio as aioredis  # imported here: memory-only deployments never load it

        self.url, self.prefix, self.sync_interval_s, self.metrics = url, key_prefix, sync_interval_s, metrics
        self.replica = uuid.uuid4().hex[:12]
        self.client = aioredis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0,
                                        retry_on_timeout=False, decode_responses=True)
        self.up = False
        self._ever_up = False
        self._outbox: deque[tuple] = deque(maxlen=_OUTBOX_MAX)
        self._last_id = "0-0"
        self._leases: set[str] = set()
        self._task: asyncio.Task | None = None
        self._proxy = None
        self.synced = asyncio.Event()  # set after each successful sync round (tests wait on it)

    # -- request path (synchronous, local) -------------------------------------------------------
    def apply(self, method: str, args: tuple, kwargs: dict) -> None:
        super().apply(method, args, kwargs)
        self._outbox.append((method, args, kwargs))

    def counter_leader(self, worker: str) -> bool:
        return (not self.up) or worker in self._leases

    # -- background sync ---------------------------------------------------------------------------
    async def start(self, proxy) -> None:
        self._proxy = proxy
        await self.sync_once()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="adaptspec-redis-sync")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.up:
            import redis.exceptions

            try:
                await self.client.delete(self._occ_key(self.replica))
                await self.client.zrem(self.prefix + "replicas", self.replica)
            except (redis.exceptions.RedisError, OSError) as exc:
                log.debug("redis cleanup on close failed (entries expire anyway): %s", exc)
        await self.client.aclose()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.sync_interval_s)
            await self.sync_once()

    def _occ_key(self, replica: str) -> str:
        return f"{self.prefix}occ:{replica}"

    async def sync_once(self) -> None:
        import redis.exceptions

        try:
            await self._push()
            await self._pull()
            await self._occupancy()
            await self._renew_leases()
        except (redis.exceptions.RedisError, OSError, asyncio.TimeoutError) as exc:
            if self.metrics is not None:
                self.metrics.state_errors.labels(self.backend).inc()
            if self.up or not self._ever_up:
                log.warning("state backend redis at %s unavailable (%s: %s); serving from local state and "
                            "retrying every %.2fs", redact_url(self.url), exc.__class__.__name__, exc,
                            self.sync_interval_s)
            self.up = False
            self._ever_up = True  # log the outage once, not on every retry
            self._leases.clear()
            self.remote_inflight = {}
            return
        if not self.up:
            log.info("state backend redis at %s is up; %s", redact_url(self.url),
                     "resynced" if self._ever_up else "connected")
        self.up = self._ever_up = True
        self.synced.set()

    async def _push(self) -> None:
        if not self._outbox:
            return
        batch = list(self._outbox)
        pipe = self.client.pipeline(transaction=False)
        for method, args, kwargs in batch:
            fields = {"r": self.replica, "m": method, "x": json.dumps([list(args), kwargs])}
            pipe.xadd(self.prefix + "obs", fields, maxlen=_STREAM_MAXLEN, approximate=True)
        await pipe.execute()
        for _ in range(len(batch)):  # only what was sent: observations made meanwhile stay queued
            self._outbox.popleft()

    async def _pull(self) -> None:
        while True:
            resp = await self.client.xread({self.prefix + "obs": self._last_id}, count=1000)
            if not resp:
                return
            entries = resp[0][1]
            for entry_id, f in entries:
                self._last_id = entry_id
                if f.get("r") == self.replica:
                    continue
                try:
                    args, kwargs = json.loads(f["x"])
                    MemoryState.apply(self, f["m"], tuple(args), kwargs)
                except (KeyError, ValueError, TypeError) as exc:
                    log.warning("skipping malformed observation %s in redis stream: %s", entry_id, exc)
            if len(entries) < 1000:
                return

    async def _occupancy(self) -> None:
        now = time.time()
        ttl_ms = max(1000, int(self.sync_interval_s * 10_000))
        mine = {name: w.inflight for name, w in self._proxy.pools.workers.items()} if self._proxy else {}
        pipe = self.client.pipeline(transaction=False)
        key = self._occ_key(self.replica)
        pipe.delete(key)
        if mine:
            pipe.hset(key, mapping=mine)
            pipe.pexpire(key, ttl_ms)
        pipe.zadd(self.prefix + "replicas", {self.replica: now})
        pipe.zremrangebyscore(self.prefix + "replicas", "-inf", now - ttl_ms / 1000)
        pipe.zrange(self.prefix + "replicas", 0, -1)
        replicas = (await pipe.execute())[-1]
        others = [r for r in replicas if r != self.replica]
        total: dict[str, int] = {}
        if others:
            pipe = self.client.pipeline(transaction=False)
            for r in others:
                pipe.hgetall(self._occ_key(r))
            for occ in await pipe.execute():
                for name, n in occ.items():
                    total[name] = total.get(name, 0) + int(n)
        self.remote_inflight = total

    async def _renew_leases(self) -> None:
        if self._proxy is None:
            return
        ttl_ms = max(1000, int(self.sync_interval_s * 10_000))
        names = [n for n, w in self._proxy.pools.workers.items() if w.adapter.scraped]
        if not names:
            return
        pipe = self.client.pipeline(transaction=False)
        for n in names:
            pipe.set(f"{self.prefix}lease:{n}", self.replica, nx=True, px=ttl_ms)
            pipe.get(f"{self.prefix}lease:{n}")
        res = await pipe.execute()
        held = {n for i, n in enumerate(names) if res[2 * i + 1] == self.replica}
        if held:
            pipe = self.client.pipeline(transaction=False)
            for n in held:
                pipe.pexpire(f"{self.prefix}lease:{n}", ttl_ms)
            await pipe.execute()
        self._leases = held
