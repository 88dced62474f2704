"""Shared state of the proxy: alpha estimates and other replicas' in-flight counts.

    StateBackend (protocol)
    ├── MemoryState   one replica: the AlphaTable in process memory (default)
    └── RedisState    several replicas share what they learn and their occupancy through Redis

The request path only ever touches local memory: `observe(obs)` counts a typed `Observation` (control/types.py,
made by control/learn.py) into the local AlphaTable at once (and, with Redis, into a small delta table beside
it) and `remote_inflight` is a plain dict. Redis traffic happens in background rounds, at a cost that does not
grow with the request rate:

- learning, every `learn_interval_s` (state.learn_interval_s, default 1 s): the replica's updates since the
  last round, aggregated per key (worker, proposer, class) into count deltas (control/alpha.py `KeyStats`,
  decayed inside the interval exactly as the table decays them), go out as ONE entry of the stream
  `{prefix}learn` (XADD; fields: replica, sequence number, the deltas as JSON); one XREAD brings the other
  replicas' entries, each applied with `AlphaTable.add_stats`. Per replica that is one write and one read per
  interval, whatever the traffic: Redis work grows with replicas x keys / interval, not with requests. A
  replica that starts later replays the stream, which keeps the last `_HISTORY_S` (10 min) of entries and at
  most ~`_HISTORY_MAX` of them (XADD MAXLEN ~; XTRIM MINID ~ once a minute): a bound on Redis memory that
  does not depend on traffic either.
- exactly once across Redis losing its data: each entry carries (replica, seq); a reader applies a replica's
  entries in order and skips a seq it has already applied. Every replica writes a random epoch to
  `{prefix}epoch` (SET NX); finding another one (a restarted, empty Redis) it re-sends the entries it pushed in
  the last `_RETAIN_S`, which the others skip if they had them, and re-reads the new stream from its start.
- occupancy, every `sync_interval_s` (0.1 s): each replica writes its in-flight count per worker as one field
  of the hash `{prefix}occ` and reads the hash back (HSET + HGETALL), summing the others' fresh fields into
  `remote_inflight`, which the decision path adds to its own count; a dead replica's field goes stale and is
  deleted by whoever sees it.
- counter leases: scraped engine counters are global to a worker, so only the replica holding the
  lease `{prefix}lease:{worker}` (SET NX PX, renewed four times per lease lifetime) turns them into
  observations; the others only track baselines. Without the lease each replica would count the same
  tokens again.

Redis going away: the proxy keeps serving from local state, logs once, counts every failed sync in
`adaptspec_state_backend_errors_total{backend="redis"}` with `adaptspec_state_backend_up=0`, keeps learning
into its delta table (bounded by the number of keys, not the outage's length), holds all leases locally,
and sends the deltas when Redis answers again (logged once as well). On shutdown (`close`) the last deltas
are sent before the connection closes. A replica killed outright loses at most its last interval's deltas.
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

from adaptspec.control.alpha import GREEDY, AlphaTable, regime_key
from adaptspec.control.trials import totals_observation
from adaptspec.control.types import Observation
from adaptspec.proxy.upstream import Pools

log = logging.getLogger(__name__)

_HISTORY_S = 600.0  # the learning stream keeps this much (a late replica's replay); forgetting's default scale
_HISTORY_MAX = 10_000  # entries at most: 100 replicas' last 100 s at the default interval
_TRIM_EVERY_S = 60.0
_RETAIN_S = 120.0  # own entries kept to re-send after Redis lost its data
_FORGET_ORIGIN_S = 3600.0  # a replica not heard from this long is forgotten (its sequence number)
_READ_COUNT = 1000


def redact_url(url: str) -> str:
    """The URL without user/password, for logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class StateTable:
    """AlphaTable-shaped writer that hands a state backend typed observations (for `ingest_vllm` & co.)."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    def observe(self, *args, **kwargs) -> None:
        obs = totals_observation(*args, **kwargs)
        if obs is not None:
            self._state.observe(obs)

    def observe_counts(self, *args, **kwargs) -> None:
        self._state.observe(Observation(*args, **kwargs))


class StateBackend(Protocol):
    backend: str
    alphas: object  # AlphaTable (an AlphaSource)
    remote_inflight: dict[str, int]
    up: bool

    def observe(self, obs: Observation) -> None: ...

    def counter_leader(self, worker: str) -> bool: ...

    def table(self) -> StateTable: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class MemoryState:
    backend = "memory"

    def __init__(self, alphas) -> None:
        self.alphas = alphas
        self.remote_inflight: dict[str, int] = {}
        self.up = True

    def observe(self, obs: Observation) -> None:
        """One alpha table update, applied locally at once."""
        self.alphas.add(obs)

    def table(self) -> StateTable:
        return StateTable(self)

    def counter_leader(self, worker: str) -> bool:
        return True

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


class DeltaTable(AlphaTable):
    """The updates of one learning interval, per key, with the same forgetting as the table they came from,
    and the draft tokens behind each key's counts (what the receiving table decays its history by)."""

    def __init__(self, like: AlphaTable) -> None:
        super().__init__(half_life_tokens=like.half_life_tokens, half_life_s=like.half_life_s, clock=like.clock,
                         max_positions=like.max_positions)
        self.tokens: dict[tuple[str, str, str], float] = {}

    def observe_counts(self, worker: str, proposer: str, content_class: str, successes: float, failures: float,
                       pos_trials=(), pos_accepted=(), *, draft_tokens: float | None = None, now: float | None = None,
                       steps: float = 0.0, drafts: float = 0.0, regime: str = GREEDY) -> None:
        super().observe_counts(worker, proposer, content_class, successes, failures, pos_trials, pos_accepted,
                               draft_tokens=draft_tokens, now=now, steps=steps, drafts=drafts, regime=regime)
        if successes + failures <= 0 and not any(pos_trials) and steps <= 0:
            return  # AlphaTable ignored it too
        key = (worker, proposer, regime_key(content_class, regime))
        self.tokens[key] = self.tokens.get(key, 0.0) + (successes + failures if draft_tokens is None else draft_tokens)

    def payload(self) -> list:
        """[[worker, proposer, key class, KeyStats dict, tokens], ...]: JSON-safe."""
        return [[w, p, c, st.to_dict(), self.tokens.get((w, p, c), 0.0)] for (w, p, c), st in self._stats.items()]


class RedisState(MemoryState):
    backend = "redis"

    def __init__(self, alphas, url: str, key_prefix: str = "adaptspec:", sync_interval_s: float = 0.1,
                 learn_interval_s: float = 1.0, metrics=None, pools: Pools | None = None) -> None:
        super().__init__(alphas)
        import redis.asyncio as aioredis  # imported here: memory-only deployments never load it

        self.url, self.prefix, self.metrics = url, key_prefix, metrics
        self.pools = pools  # this replica's workers: its in-flight counts, the leases it takes
        self.sync_interval_s, self.learn_interval_s = sync_interval_s, learn_interval_s
        self.replica = uuid.uuid4().hex[:12]
        self.client = aioredis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0,
                                        retry_on_timeout=False, decode_responses=True)
        self.up = False
        self._ever_up = False
        self._delta = DeltaTable(alphas)  # updates not yet taken into an entry
        self._seq = 0
        self._unsent: deque[tuple[int, str, float]] = deque()  # (seq, JSON, taken at): at most one, or re-sends
        self._sent: deque[tuple[int, str, float]] = deque()  # pushed in the last _RETAIN_S
        self._epoch: str | None = None  # the Redis data generation this replica has seen
        self._last_id = "0-0"
        self._server_ms = 0  # time part of the last stream id seen (Redis' clock, for trimming)
        self._applied: dict[str, tuple[int, float]] = {}  # replica -> (last seq applied, when)
        self._next_learn = 0.0
        self._next_lease = 0.0
        self._next_trim = 0.0
        self._leases: set[str] = set()
        self._task: asyncio.Task | None = None
        self.synced = asyncio.Event()  # set after each successful sync round (tests wait on it)

    # -- request path (synchronous, local) -------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        super().observe(obs)
        self._delta.add(obs)

    def counter_leader(self, worker: str) -> bool:
        return (not self.up) or worker in self._leases

    # -- background sync ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.sync_once()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="adaptspec-redis-sync")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        import redis.exceptions

        try:  # the last interval's learning goes out before the replica does
            self._next_learn = 0.0
            await self._learn()
            await self.client.hdel(self.prefix + "occ", self.replica)
        except (redis.exceptions.RedisError, OSError, asyncio.TimeoutError) as exc:
            log.warning("state backend redis: the last %d update(s) were not shared on shutdown (%s: %s)",
                        len(self._delta.keys()), exc.__class__.__name__, exc)
        await self.client.aclose()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.sync_interval_s)
            await self.sync_once()

    async def sync_once(self) -> None:
        import redis.exceptions

        try:
            await self._learn()
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
            self._next_learn = self._next_lease = 0.0  # learning and leases go first when Redis is back
            self._leases.clear()
            self.remote_inflight = {}
            return
        if not self.up:
            log.info("state backend redis at %s is up; %s", redact_url(self.url),
                     "resynced" if self._ever_up else "connected")
        self.up = self._ever_up = True
        self.synced.set()

    # -- learning ----------------------------------------------------------------------------------
    async def _learn(self) -> None:
        now = time.monotonic()
        if now < self._next_learn:
            return
        self._next_learn = now + self.learn_interval_s
        await self._check_epoch()
        if not self._unsent and self._delta.keys():  # one entry in the making at a time: a failed push waits
            self._seq += 1
            body = json.dumps(self._delta.payload(), separators=(",", ":"))
            self._unsent.append((self._seq, body, time.time()))
            self._delta = DeltaTable(self.alphas)
        await self._push()
        await self._pull()
        self._forget_old(time.time())

    async def _check_epoch(self) -> None:
        key = self.prefix + "epoch"
        pipe = self.client.pipeline(transaction=False)
        pipe.set(key, uuid.uuid4().hex[:12], nx=True)
        pipe.get(key)
        epoch = (await pipe.execute())[1]
        if epoch == self._epoch:
            return
        if self._epoch is not None:  # Redis came back empty (or was flushed): re-send, re-read from the start
            log.warning("state backend redis lost its data (epoch %s -> %s); re-sending the last %d learning "
                        "entries", self._epoch, epoch, len(self._sent))
            self._unsent.extendleft(reversed(self._sent))
            self._sent.clear()
            self._last_id = "0-0"
        self._epoch = epoch

    async def _push(self) -> None:
        stream = self.prefix + "learn"
        while self._unsent:
            seq, body, taken = self._unsent[0]
            fields = {"r": self.replica, "n": seq, "x": body}
            entry_id = await self.client.xadd(stream, fields, maxlen=_HISTORY_MAX, approximate=True)
            self._server_ms = max(self._server_ms, int(entry_id.split("-")[0]))
            self._sent.append(self._unsent.popleft())  # only once Redis has it: a failed push stays queued
        while self._sent and self._sent[0][2] < time.time() - _RETAIN_S:
            self._sent.popleft()
        if self._server_ms and time.monotonic() >= self._next_trim:
            self._next_trim = time.monotonic() + _TRIM_EVERY_S
            await self.client.xtrim(stream, minid=int(self._server_ms - _HISTORY_S * 1000), approximate=True)

    async def _pull(self) -> None:
        stream = self.prefix + "learn"
        while True:
            resp = await self.client.xread({stream: self._last_id}, count=_READ_COUNT)
            if not resp:
                return
            entries = resp[0][1]
            for entry_id, f in entries:
                self._last_id = entry_id
                self._server_ms = max(self._server_ms, int(entry_id.split("-")[0]))
                origin = f.get("r")
                if origin == self.replica:
                    continue
                try:
                    self._apply_entry(origin, int(f["n"]), json.loads(f["x"]))
                except (KeyError, ValueError, TypeError) as exc:
                    log.warning("skipping malformed learning entry %s in redis stream: %s", entry_id, exc)
            if len(entries) < _READ_COUNT:
                return

    def _apply_entry(self, origin: str, seq: int, deltas: list) -> None:
        last = self._applied.get(origin)
        if last is not None and seq <= last[0]:
            return  # re-sent after a Redis restart, and already applied
        if last is not None and seq > last[0] + 1:
            log.warning("learning entries %d-%d of replica %s never arrived (Redis lost them before they were "
                        "read and they aged out of the re-send window)", last[0] + 1, seq - 1, origin)
        for worker, proposer, key_class, stats, tokens in deltas:
            self.alphas.add_stats(str(worker), str(proposer), str(key_class), stats, float(tokens))
        self._applied[origin] = (seq, time.time())

    def _forget_old(self, now: float) -> None:
        if len(self._applied) > 64:
            for r in [r for r, (_, t) in self._applied.items() if t < now - _FORGET_ORIGIN_S]:
                del self._applied[r]

    # -- occupancy and leases ----------------------------------------------------------------------
    async def _occupancy(self) -> None:
        now = time.time()
        ttl = max(1.0, self.sync_interval_s * 10)
        mine = {name: w.inflight for name, w in self.pools.workers.items()} if self.pools is not None else {}
        key = self.prefix + "occ"
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, self.replica, json.dumps({"t": now, "w": mine}, separators=(",", ":")))
        pipe.hgetall(key)
        fields = (await pipe.execute())[1]
        total: dict[str, int] = {}
        stale = []
        for r, raw in fields.items():
            if r == self.replica:
                continue
            try:
                occ = json.loads(raw)
                if occ["t"] < now - ttl:
                    stale.append(r)
                    continue
                for name, n in occ["w"].items():
                    total[name] = total.get(name, 0) + int(n)
            except (KeyError, ValueError, TypeError, AttributeError):
                stale.append(r)  # not ours to read: an older version's or a foreign field
        if stale:
            await self.client.hdel(key, *stale)
        self.remote_inflight = total

    async def _renew_leases(self) -> None:
        if self.pools is None:
            return
        ttl_ms = max(1000, int(self.sync_interval_s * 10_000))
        now = time.monotonic()
        if now < self._next_lease and self.up:  # renewed 4 times per lease lifetime, not every round
            return
        self._next_lease = now + ttl_ms / 4000
        names = [n for n, w in self.pools.workers.items() if w.adapter.scraped]
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
