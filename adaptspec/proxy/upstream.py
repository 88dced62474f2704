"""Upstream pools: worker records (config + live occupancy + health), model routing, the policy's choice of a
worker among them (`Pools.route`), the HTTP client.

A `Worker` is the proxy's view of one engine endpoint. Its live fields are written by the scraper
(running, waiting, kv_usage), by the request path (inflight, healthy) and read synchronously by the
decision path; everything runs on one event loop, so no locks.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp

from adaptspec.control.traffic import TrafficShape
from adaptspec.control.types import Decision, WorkerState
from adaptspec.errors import RequestError, UpstreamError
from adaptspec.proxy.engines import adapter

log = logging.getLogger(__name__)

def redact_userinfo(url: str) -> str:
    """`scheme://user:pass@host/...` -> `scheme://***@host/...`; other URLs unchanged."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if not sep or "@" not in netloc:
        return url
    return f"{scheme}://***@{netloc.rpartition('@')[2]}{slash}{path}"


@dataclass(eq=False)
class Worker:
    name: str
    url: str = field(repr=False)  # may carry credentials (user:pass@): log `safe_url`
    pool: str
    engine: str = "adaptspec"
    per_request: bool = True
    proposers: tuple[str, ...] = ("ngram", "draft")
    gamma: int = 0
    max_gamma: int = 8
    profile: str | None = None
    models: frozenset[str] | None = None  # None: not known yet -> accepts any model
    cards: dict[str, dict] | None = None  # its /v1/models cards by id (None: not read yet; modelcards.py)
    api_key: str | None = field(default=None, repr=False)  # never logged or echoed
    healthy: bool = True
    inflight: int = 0
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    sampled_at: float = 0.0
    # requests of this proxy that finished on it since its last sample: the sample still counts them as running
    # (at one client, for up to a scrape interval after each request, the next one would be planned at batch 2)
    finished: int = 0
    request_feedback: bool = False  # has delivered per-request speculation stats (see feedback.py)
    traffic: TrafficShape = field(default_factory=TrafficShape)  # recent prompt / generated tokens per request
    step_costs: object | None = None  # control.calibration.CalibratedCosts from its step telemetry (feedback.py)
    # outlier ejection (Pools): failures in a row, when it last answered anything, ejections in a row, when
    # the ejected worker may be probed again, and the deadlines of attempts still waiting for its first byte
    failures: int = 0
    last_ok: float = field(default_factory=time.monotonic)
    ejections: int = 0
    retry_at: float = 0.0
    heads: set = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.safe_url = redact_userinfo(self.url)  # for logs: `http://user:pass@h` -> `http://***@h`
        self.auth_headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self.adapter = adapter(self.engine)  # what differs per engine (engines.py)
        self.per_request = self.per_request and self.adapter.per_request
        self._last_state: tuple[tuple, WorkerState] | None = None  # state()'s last (inputs, record)

    def apply_sample(self, sample) -> None:
        if sample.running is not None:
            self.running = sample.running
        if sample.waiting is not None:
            self.waiting = sample.waiting
        if sample.kv_usage is not None:
            self.kv_usage = sample.kv_usage
        self.finished = 0
        self.sampled_at = time.monotonic()

    def state(self, other_inflight: int = 0) -> WorkerState:
        """The worker as the policy sees it (a frozen record: the last one is reused while nothing in it changed,
        as between most requests)."""
        t = self.traffic
        running = max(self.running - self.finished, 0.0) if self.finished else self.running
        key = (self.name, self.engine, self.per_request, self.proposers, self.gamma, self.max_gamma, self.profile,
               running, self.waiting, self.kv_usage, self.inflight + other_inflight, self.healthy,
               t.prefill_ratio, t.prompt_tokens, self.step_costs, self.adapter.flat_verify)
        last = self._last_state
        if last is not None and last[0] == key:
            return last[1]
        state = WorkerState(*key)
        self._last_state = (key, state)
        return state

    def fixed_plan(self) -> tuple[str, int]:
        """(proposer, gamma) a fixed-speculation worker applies to every request."""
        if self.gamma <= 0 or not self.proposers:
            return "none", 0
        return self.proposers[0], self.gamma

    def same_endpoint(self, other: Worker) -> bool:
        return (self.name, self.url, self.api_key) == (other.name, other.url, other.api_key)


def workers_from_config(pools: Iterable) -> list[Worker]:
    """Worker records from the `pools:` section (pydantic models of adaptspec.control.config)."""
    out: list[Worker] = []
    for pool in pools:
        for i, w in enumerate(pool.workers):
            key_env = getattr(w, "api_key_env", None)
            models = getattr(pool, "models", None)
            out.append(Worker(
                name=getattr(w, "name", None) or f"{pool.name}-{i}", url=str(w.url), pool=pool.name,
                engine=pool.engine, per_request=bool(pool.per_request),
                proposers=tuple(pool.proposers or ()),
                gamma=int(pool.gamma or 0), max_gamma=int(pool.max_gamma), profile=getattr(pool, "profile", None),
                models=frozenset(models) if models else None,
                api_key=os.environ.get(key_env) if key_env else None))
    return out


class Pools:
    """All workers by name, and which ones serve a model."""

    def __init__(self, workers: Iterable[Worker] = ()):
        self.workers: dict[str, Worker] = {}
        self._by_model: dict[str, list[Worker]] = {}
        self._any: list[Worker] = []
        self.replace(workers)

    def replace(self, workers: Iterable[Worker]) -> None:
        """Swap in a new worker set; records of unchanged endpoints keep their live state."""
        new: dict[str, Worker] = {}
        for w in workers:
            old = self.workers.get(w.name)
            if old is not None and old.same_endpoint(w):
                for attr in ("pool", "engine", "per_request", "proposers", "gamma", "max_gamma", "profile"):
                    setattr(old, attr, getattr(w, attr))
                if w.models is not None:
                    old.models = w.models
                w = old
            if w.name in new:
                raise ValueError(f"duplicate worker name {w.name!r}")
            new[w.name] = w
        self.workers = new
        self.models_changed()

    def models_changed(self) -> None:
        by_model: dict[str, list[Worker]] = {}
        anyw: list[Worker] = []
        for w in self.workers.values():
            if w.models is None:
                anyw.append(w)
            else:
                for m in w.models:
                    by_model.setdefault(m, []).append(w)
        self._by_model, self._any = by_model, anyw

    def model_ids(self) -> list[str]:
        return sorted(self._by_model)

    def serving(self, model: str) -> list[Worker]:
        """Workers that serve `model` (healthy or not); 404 when none does."""
        found = self._by_model.get(model)
        if found is None:
            if not self._any:
                raise RequestError(f"The model {model!r} does not exist or is not served here.",
                                   status=404, type="invalid_request_error", code="model_not_found", param="model")
            return self._any
        return found + self._any if self._any else found

    @staticmethod
    def eligible(workers: list[Worker], exclude: set[str] | frozenset[str] = frozenset()) -> list[Worker]:
        out = [w for w in workers if w.healthy and w.name not in exclude]
        if not out:
            names = ", ".join(w.name for w in workers) or "none"
            raise UpstreamError(f"No healthy worker available for this model (workers: {names}); "
                                "retry shortly.", status=503)
        return out

    # -- health: outlier ejection --------------------------------------------------------------------------
    eject_after = 3  # 502/503/504 answers in a row that eject a worker (refused connections and timeouts: at once)
    backoff_s = 2.0  # first ejection; doubles with each ejection in a row, up to 32x

    def route(self, policy, content_class: str, candidates: list[Worker], alphas,
              remote: Mapping[str, int], exclude: set[str] | frozenset[str] = frozenset()) -> tuple[Decision, Worker]:
        """The policy's decision over the healthy candidates not in `exclude` -> (Decision, Worker). `alphas`:
        the estimates the request is decided on; `remote`: other replicas' in-flight requests per worker (each
        worker's load). A decision naming no eligible worker goes to the least loaded one."""
        eligible = self.eligible(candidates, exclude)
        decision = policy.decide(content_class, [w.state(remote.get(w.name, 0)) for w in eligible], alphas)
        worker = self.workers.get(decision.worker)
        if worker is None or worker not in eligible:
            worker = min(eligible, key=lambda w: w.state(remote.get(w.name, 0)).load)
        return decision, worker

    def failure(self, worker: Worker, reason: str) -> None:
        """One failed exchange with `worker` (a 502/503/504); `eject_after` in a row eject it."""
        worker.failures += 1
        if worker.failures >= self.eject_after:
            self.mark_unhealthy(worker, f"{worker.failures} failures in a row, last: {reason}")

    def success(self, worker: Worker) -> None:
        worker.failures = 0
        worker.ejections = 0
        worker.last_ok = time.monotonic()

    def answered(self, worker: Worker) -> None:
        """The worker answered a scrape or probe: it is alive (slow answers from a busy worker count)."""
        worker.last_ok = time.monotonic()

    def unanswered(self, worker: Worker, silence_s: float) -> None:
        """A scrape timed out: eject the worker once it has answered nothing for `silence_s` (a frozen,
        SIGSTOPped or swapping worker accepts connections and then says nothing). Single slow scrapes of a
        busy worker do not count."""
        silent = time.monotonic() - worker.last_ok
        if silent > silence_s:
            self.mark_unhealthy(worker, f"no answer for {silent:.1f} s")

    def mark_unhealthy(self, worker: Worker, reason: str) -> None:
        """Eject `worker` for a backoff period (then the scraper probes it), and move the attempts still
        waiting for its first byte to other workers (their deadlines expire now: handlers retry them)."""
        if worker.healthy:
            worker.ejections += 1
            worker.retry_at = time.monotonic() + self._backoff(worker)
            log.warning("worker %s (%s) ejected for %.1f s: %s", worker.name, worker.safe_url,
                        self._backoff(worker), reason)
        worker.healthy = False
        for deadline in list(worker.heads):
            if not deadline.expired():  # (one expiring now is already on its way to a retry)
                deadline.reschedule(-1.0)  # in the past: fires on the loop's next iteration

    def probe_failed(self, worker: Worker) -> None:
        """The ejected worker did not answer its probe: eject it again, for longer."""
        worker.ejections += 1
        worker.retry_at = time.monotonic() + self._backoff(worker)

    def mark_healthy(self, worker: Worker) -> None:
        if not worker.healthy:
            log.info("worker %s (%s) is healthy again", worker.name, worker.safe_url)
        worker.healthy = True
        worker.failures = 0
        worker.last_ok = time.monotonic()

    def _backoff(self, worker: Worker) -> float:
        return self.backoff_s * 2 ** min(max(worker.ejections - 1, 0), 5)


def upstream_timeout(request_timeout_s: float | None) -> aiohttp.ClientTimeout:
    """No cap on a whole (long, streamed) generation; a worker silent for request_timeout_s is given up."""
    return aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=request_timeout_s)


def make_session(request_timeout_s: float | None) -> aiohttp.ClientSession:
    """One pooled client per app; keep-alive connections, no per-request setup."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=75, ttl_dns_cache=300),
        timeout=upstream_timeout(request_timeout_s),
        auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding"))
