"""The proxy application: `Proxy` (everything one app holds) and `create_app` (aiohttp routes + lifecycle).

    proxy = Proxy(config, config_path="pools.yaml")
    app = create_app(proxy)            # web.Application; run with `run(app, host, port)`

State lives on the `Proxy` object stored in `app["proxy"]`; nothing is module-global.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

from aiohttp import web

from adaptspec.control.classify import (
    MEMO_MAX_CHARS,
    MEMO_SIZE,
    Classifier,
    check_request_text,
    classify_request,
    request_text,
)
from adaptspec.control.estimators import GREEDY, AlphaTable
from adaptspec.control.policy import build_policy
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.predict import AcceptancePredictor, RequestFeatures
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError, ModelLoadError
from adaptspec.proxy import accesslog, auth, handlers, health, modelcards, passthrough, report
from adaptspec.proxy import metrics as mn
from adaptspec.proxy.engine_switch import EngineSwitch
from adaptspec.proxy.errors import JsonErrorServer, error_middleware
from adaptspec.proxy.feedback import Feedback
from adaptspec.proxy.h1client import H1Client
from adaptspec.proxy.metrics import ProxyMetrics, StateCollector
from adaptspec.proxy.request import Generation
from adaptspec.proxy.scrape import Scraper
from adaptspec.proxy.state import MemoryState, RedisState
from adaptspec.proxy.upstream import Pools, Worker, make_session, workers_from_config

log = logging.getLogger(__name__)

FALLBACK_CLASS = "chat"
# the class of a generation request that was not classified (`server.classify: speculating` and no candidate
# worker speculates): no decision or estimate depends on it, only the labels
UNCLASSIFIED = "unclassified"


def _fallback_class(body: dict) -> str:
    return FALLBACK_CLASS


def _speculating(workers: Sequence[Worker]) -> bool:
    """Whether any of `workers` has a proposer: only then do a request's predicted alphas matter."""
    for w in workers:  # loops, not any(generator): this runs for every request
        for p in w.proposers:
            if p != "none":
                return True
    return False


class Proxy:
    """Config-derived parts (policy, pools, limits) are swapped whole on reload; live state is kept."""

    def __init__(self, config, *, config_path: str | None = None, extra_workers: Sequence[Worker] = (),
                 classify: Callable[[dict], str] = classify_request) -> None:
        self.config_path = config_path
        self.extra_workers = list(extra_workers)  # e.g. the embedded worker when the config has no pools
        self.metrics = ProxyMetrics()
        self.pools = Pools()
        self.classify = classify
        try:  # load the classifier now, not on the first request
            classify({"model": "", "messages": [{"role": "user", "content": "hello"}]})
        except ModelLoadError as exc:
            log.error("content classifier unavailable (%s); every request is classed %r until it is installed",
                      exc, FALLBACK_CLASS)
            self.classify = _fallback_class
        self.started = int(time.time())
        self.draining = False  # set on SIGTERM (serve.drain): readiness 503, responses close their connection
        self.session = None  # aiohttp: scrapes and probes
        self.h1 = H1Client()  # every proxied request, generation and pass-through (relay.py)
        self._features_memo: dict[tuple, RequestFeatures] = {}  # classify_body: recent prompts' features
        self.policy: PolicyBase | None = None  # apply_config sets it
        self.apply_config(config)
        self.state = self._make_state(config)
        # per-request acceptance prediction (estimator.predict); learnt online, kept across reloads
        self.predictor = AcceptancePredictor(prior_table=config.estimator.prior.alpha if config.estimator else None)
        # what a reload replaces (the policy, config sections, settings) the collaborators read when they use it
        self.feedback = Feedback(self.metrics, self.state, self.pools, self.predictor, policy=self._policy,
                                 calibration=lambda: self.config.calibration)
        self.scraper = Scraper(self.pools, self.metrics, self.feedback, EngineSwitch(self._policy),
                               interval_s=lambda: self.scrape_interval_s, stall_timeout_s=lambda: self.stall_timeout_s)
        self.metrics.add_collector(StateCollector(self._gauges))
        self.metrics.add_collector(StateCollector(self.feedback.gauges))
        self.metrics.add_collector(report.ReportCollector(self._policy))

    # -- configuration -------------------------------------------------------------------------------
    def apply_config(self, config) -> None:
        """Build everything from `config` first, then swap (an error leaves the old config in place)."""
        server = config.server
        policy = build_policy(config.policy)
        workers = workers_from_config(config.pools or ()) or self.extra_workers
        if not workers:
            raise ValueError("no workers: the config has no pools and no embedded worker was started")
        keys = frozenset(self._env_keys(server.api_keys_env))
        self.pools.replace(workers)
        policy.adopt(self.policy)  # e.g. the holdout / switchback evidence survives a reload
        self.policy = policy
        self.api_keys = keys
        self.max_body_bytes = server.max_body_bytes
        self.request_timeout_s = server.request_timeout_s
        self.allow_client_speculation = server.allow_client_speculation
        self.keepalive_timeout_s = server.keepalive_timeout_s
        self.body_timeout_s = server.body_timeout_s
        self.first_byte_timeout_s = server.first_byte_timeout_s
        self.stall_timeout_s = server.stall_timeout_s
        self.pools.eject_after = server.eject_after_failures
        self.pools.backoff_s = server.eject_backoff_s
        self.scrape_interval_s = server.scrape_interval_s
        self.classify_always = server.classify == "always"
        redis = config.state is not None and config.state.backend == "redis"
        backend = "redis" if redis else None
        self.metrics.precreate(self.pools.workers.values(), policy.name, backend)
        plain = [w for w in self.pools.workers.values() if not _speculating((w,))]
        if plain and not self.classify_always:  # the label of the requests only these workers can serve
            self.metrics.precreate(plain, policy.name, backend, classes=(UNCLASSIFIED,))
        self.config = config

    def _policy(self) -> PolicyBase:
        return self.policy

    def describe(self) -> str:
        """What runs now, for the log: after a reload."""
        return f"{len(self.pools.workers)} worker(s), policy {self.policy.name}"

    def _env_keys(self, env: str | None) -> list[str]:
        """Client keys from `server.api_keys_env`; a named variable that is unset or empty fails closed."""
        if not env:
            return []
        keys = [k.strip() for k in os.environ.get(env, "").split(",") if k.strip()]
        if not keys:
            # serving /v1/* without keys because a secret went missing would fail open: refuse instead
            raise ConfigError("the API key variable is unset or holds no key; set it (comma-separated keys) "
                              "or remove server.api_keys_env", file=self.config_path,
                              key="server.api_keys_env", value=env)
        return keys

    def _make_state(self, config):
        alphas = AlphaTable.from_config(config.estimator) if config.estimator is not None else AlphaTable()
        st = config.state
        if st is not None and st.backend == "redis":
            return RedisState(alphas, st.url, st.key_prefix, sync_interval_s=min(0.1, self.scrape_interval_s),
                              learn_interval_s=st.learn_interval_s, metrics=self.metrics, pools=self.pools)
        return MemoryState(alphas)

    # -- request path ------------------------------------------------------------------------------
    @property
    def predicting(self) -> bool:
        """Per-request acceptance prediction: `estimator.predict`, for a policy that reads alpha estimates."""
        est = getattr(self.config, "estimator", None)
        return (est is None or est.predict) and self.policy.uses_alphas

    def classify_body(self, req: Generation, candidates: Sequence[Worker] | None = None
                      ) -> tuple[str, RequestFeatures | None]:
        """(content class, the request's features for acceptance prediction or None when it is off).

        With prediction on and the shipped classifier, one classifier pass gives both the class and the class
        scores the features carry; a custom `classify` gives the class, whose score is then 1. `candidates`:
        the workers that may serve it; when none of them speculates, no alpha is read or learnt for it, so its
        features are not computed (None). The features read the request's `max_tokens` and `temperature` as
        parsed (request.py), the same temperature its sampling regime comes from. With `server.classify:
        speculating` (the default), a request none of whose candidates speculates is not classified: its body
        is checked as classification checks it (request_text) and it is labelled UNCLASSIFIED."""
        body = req.body
        if candidates is not None and not _speculating(candidates):
            if self.classify_always:
                return self.classify(body), None
            check_request_text(body)  # the same 400s for a malformed body as when it is classified
            return UNCLASSIFIED, None
        if not self.predicting:
            return self.classify(body), None
        custom = self.classify is not classify_request
        if custom:
            cls = self.classify(body)
            scores = {cls: 1.0}
            last, context = request_text(body)
        else:
            last, context = request_text(body)
            cls, scores, _ = Classifier.default().predict_request(body, (last, context))  # scores remembered there
        max_tokens, temperature = req.max_tokens, req.temperature
        # the features are a pure function of (text, scores, max_tokens, temperature), the scores one of the
        # text (or of a custom classifier's class): a repeated prompt (retries, templates, benchmarks) reuses them
        memo = self._features_memo
        key = (last, context, max_tokens, temperature, cls if custom else None)
        keep = len(last) + len(context) <= MEMO_MAX_CHARS
        feats = memo.get(key) if keep else None
        if feats is None:
            text = f"{context}\n\n{last}" if context else last
            feats = RequestFeatures.from_prompt(text, max_tokens, temperature, scores)
            if keep:
                feats.x.flags.writeable = False  # shared by the requests that hit it
                if len(memo) >= MEMO_SIZE:
                    del memo[next(iter(memo))]
                memo[key] = feats
        return cls, feats

    def decide(self, content_class: str, candidates: list[Worker], exclude: set[str] | frozenset = frozenset(),
               regime: str = GREEDY, features: RequestFeatures | None = None):
        """Policy decision over the healthy candidates -> (Decision, Worker). Synchronous, in memory.
        `regime`: the request's sampling regime (estimators.sampling_regime), whose alpha estimates it reads.
        `features`: the request's (`classify_body`): it is then decided on its own predicted alphas
        (`AcceptancePredictor.view` of its regime's estimates)."""
        alphas = self.state.alphas if regime == GREEDY else self.state.alphas.view(regime)
        if features is not None:
            alphas = self.predictor.view(alphas, features, content_class)
        return self.pools.route(self.policy, content_class, candidates, alphas, self.state.remote_inflight, exclude)

    # -- metrics read at scrape time ---------------------------------------------------------------
    def _gauges(self):
        workers = list(self.pools.workers.values())
        remote = self.state.remote_inflight
        out = {
            mn.WORKER_RUNNING: (("worker",), [((w.name,), w.running) for w in workers]),
            mn.WORKER_WAITING: (("worker",), [((w.name,), w.waiting) for w in workers]),
            mn.WORKER_KV_USAGE: (("worker",), [((w.name,), w.kv_usage) for w in workers]),
            mn.WORKER_INFLIGHT: (("worker",), [((w.name,), w.inflight + remote.get(w.name, 0))
                                               for w in workers]),
            mn.WORKER_HEALTHY: (("worker",), [((w.name,), float(w.healthy)) for w in workers]),
            mn.WORKER_PREFILL_RATIO: (("worker",), [((w.name,), w.traffic.prefill_ratio) for w in workers]),
            mn.STATE_BACKEND_UP: (("backend",), [((self.state.backend,), float(self.state.up))]),
        }
        means, stds, rates, reports = [], [], [], []
        for w in workers:
            proposers = [p for p in w.proposers if p != "none"]
            for p in proposers:
                for cls in CONTENT_CLASSES:
                    est = self.state.alphas.get(w.name, p, cls)
                    means.append(((w.name, p, cls), est.mean))
                    stds.append(((w.name, p, cls), est.std))
                    rates.append(((w.name, p, cls), est.propose_rate))
                    reports.append(((w.name, p, cls), est.reports))
        labels = ("worker", "proposer", "content_class")
        out[mn.ALPHA_ESTIMATE] = (labels, means)
        out[mn.ALPHA_ESTIMATE_STD] = (labels, stds)
        out[mn.PROPOSE_RATE_ESTIMATE] = (labels, rates)
        out[mn.ALPHA_ESTIMATE_REPORTS] = (labels, reports)
        return out

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self.session = make_session(self.request_timeout_s)
        await self.state.start()
        self.scraper.start(self.session)

    async def stop(self) -> None:
        await self.scraper.stop()
        await self.state.close()
        if self.session is not None:
            await self.session.close()
        await self.h1.close()




def create_app(proxy: Proxy) -> web.Application:
    # errors as OpenAI-style JSON around everything, then the client's key (proxy/auth.py)
    app = web.Application(middlewares=[error_middleware, auth.middleware],
                          client_max_size=1 << 30)  # our own limit: request.read_body
    app["proxy"] = proxy
    r = app.router
    r.add_post("/v1/chat/completions", handlers.chat_completions)
    r.add_post("/v1/completions", handlers.completions)
    r.add_get("/v1/models", modelcards.models)  # the workers' model cards, merged
    passthrough.add_routes(app)  # /v1/embeddings, /v1/responses, /tokenize, /detokenize: no decision
    r.add_get("/health", handlers.health)
    r.add_get("/metrics", handlers.metrics)
    health.add_routes(app)  # /health/live, /health/ready, /version
    accesslog.install(app)  # request ids (echoed, forwarded, in log lines), trace context, access log
    report.add_routes(app)  # /adaptspec/report

    async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if proxy.draining:  # a client's keep-alive connection would pin it to a replica that is going away
            response.force_close()

    app.on_response_prepare.append(on_response_prepare)

    async def on_startup(app: web.Application) -> None:
        await proxy.start()

    async def on_cleanup(app: web.Application) -> None:
        await proxy.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


class _Runner(web.AppRunner):
    """AppRunner whose connections answer HTTP parser errors (431 headers, 400) in JSON (errors.py)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = JsonErrorServer  # the same server; only how it makes connection handlers changes
        return server

    def set_shutdown_timeout(self, seconds: float) -> None:
        """How long `cleanup()` waits for the handlers in flight once the listener is closed (aiohttp keeps the
        setting private; serve.drain sets what is left of the grace period)."""
        self._shutdown_timeout = seconds


async def start_site(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Start serving `app`; `handler_cancellation` cancels a handler when its client disconnects.

    Request bodies are decompressed by `request.read_body` (auto_decompress off), which counts the
    decompressed bytes against the limit; `keepalive_timeout` closes idle connections and, from the
    connection's start, ones that never finish sending a request head (slowloris).
    """
    proxy = app["proxy"]
    runner = _Runner(app, access_log=None, handler_cancellation=True, auto_decompress=False,
                     keepalive_timeout=proxy.keepalive_timeout_s)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=1024).start()
    except OSError:
        await runner.cleanup()  # stops the scraper, state sync and client session started by setup()
        raise
    return runner
