"""Acceptance feedback -> alpha estimates: per-request stats and scraped counters, never both.

What a finished request teaches (alpha table, acceptance predictor, traffic shape) is control/learn.py's `learn`,
which the simulator calls too; this module parses responses into its `Outcome` and counts the proxy's metrics.

Which source wins, per worker:

1. per-request stats in the response (to the key of the request's sampling regime, greedy or sampled) (exact, attributed to this request's proposer, gamma and class,
   and naturally split between proxy replicas, since each sees only its own responses):
   `usage.speculative {draft_tokens, accepted_tokens, steps}` (adaptspec worker; with its
   `tried_per_position` / `accepted_per_position` the per-position conditional rates are counted exactly) or
   `metrics.speculative_decoding {num_draft_tokens, num_accepted_draft_tokens, num_spec_steps}` (vLLM
   0.32 with per-request spec-decode metrics, as `adaptspec launch vllm` sets). Workers of engine `adaptspec` always use these; any other worker
   switches to them for good once one of its responses carries them.
2. otherwise, scraped counters via `adaptspec.control.estimators.ingest_vllm` (per-class
   `adaptspec:*_by_class_total` to their class; engine-wide `vllm:spec_decode_*` to class "*", which
   the per-class estimates use as their prior) or `ingest_sglang` (accept-length gauge), for the
   worker's launch proposer/gamma. Only the replica holding the worker's lease ingests (RedisState).

Shadow n-gram evidence (control/shadow.py: lookup scored along requests that ran without it) comes per response
from the adaptspec worker (`usage.speculative.shadow`) and as scraped counters from the vLLM plugin
(`adaptspec:shadow_ngram_*_by_class_total`, `counters.shadow_deltas`), which are ingested in both modes (by the
lease holder): no vLLM response carries them. Both go to the worker's (n-gram, class, regime) key.

Step telemetry (`adaptspec:engine_*`, control/telemetry.py) feeds one `StepCalibrator` per worker, whose prior
is the worker's profile (or the policy's default); its fit goes to `worker.step_costs`, which the cost-model
policies price with once trusted, and to the `adaptspec_step_model_*` gauges (`calibration_gauges`). Every
replica fits from its own scrapes (a fit is not a count: nothing is counted twice).

Counter baselines are tracked in both modes (ingested into a null table in mode 1), so a worker that
changes mode is never counted twice, and a proxy starting next to a long-running engine does not take
its whole history as one burst.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from adaptspec.control.calibration import StepCalibrator
from adaptspec.control.config import CalibrationConfig
from adaptspec.control.counters import shadow_deltas
from adaptspec.control.estimators import GREEDY, SAMPLED, CounterTracker
from adaptspec.control.hybrid_rule import RULES
from adaptspec.control.learn import Outcome, Speculation, learn, shadow_observation, source_parts
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.predict import AcceptancePredictor
from adaptspec.control.profiles import Profile, load_profile
from adaptspec.control.shadow import ShadowStats
from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError
from adaptspec.proxy import metrics as mn
from adaptspec.proxy.metrics import ProxyMetrics
from adaptspec.proxy.state import StateBackend
from adaptspec.proxy.upstream import Pools

log = logging.getLogger(__name__)


class _NullTable:
    def observe(self, *args, **kwargs) -> None:
        return None

    def observe_counts(self, *args, **kwargs) -> None:
        return None


_NULL = _NullTable()


def _num(d: dict, *names: str) -> float | None:
    for n in names:
        v = d.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def spec_stats(payload: dict) -> tuple[float, float, float | None] | None:
    """(draft_tokens, accepted_tokens, steps or None) from a response body or a final stream chunk."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    if not isinstance(spec, dict):
        metrics = payload.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return None
    draft = _num(spec, "draft_tokens", "num_draft_tokens")
    accepted = _num(spec, "accepted_tokens", "num_accepted_draft_tokens", "num_accepted_tokens")
    if draft is None or accepted is None or draft < 0 or accepted < 0:
        return None
    return draft, min(accepted, draft), _num(spec, "steps", "num_spec_steps", "num_drafts")


def prompt_tokens(usage: dict) -> float | None:
    """Prompt tokens the engine had to prefill: `prompt_tokens` less `prompt_tokens_details.cached_tokens`
    (prefix-cache hits cost no prefill)."""
    n = usage.get("prompt_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached <= n:
        n -= cached
    return float(n)


def position_stats(payload: dict) -> tuple[list[float], list[float]] | None:
    """(tried, accepted) per draft position from an adaptspec worker's `usage.speculative`, when present and
    consistent (accepted[j] <= tried[j], and position j+1 is tried only after position j was accepted)."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    if not isinstance(spec, dict):
        return None
    tried, acc = spec.get("tried_per_position"), spec.get("accepted_per_position")
    if not (isinstance(tried, list) and isinstance(acc, list)) or len(tried) != len(acc) or not tried:
        return None
    try:
        t = [float(x) for x in tried]
        a = [float(x) for x in acc]
    except (TypeError, ValueError):
        return None
    if any(not 0.0 <= y <= x for x, y in zip(t, a, strict=True)) or any(
            x > y for x, y in zip(t[1:], a, strict=False)):
        return None
    return t, a


_SHADOWED = ("ngram", "hybrid")  # the proposers a worker scores along requests that ran without them


def shadow_stats(payload: dict) -> tuple[tuple[str, ShadowStats], ...]:
    """The proposers scored along the output of a request that ran without them (`usage.speculative.shadow`):
    n-gram lookup (control/shadow.py) and the per-step hybrid's lookup steps (control/hybrid_rule.py); each
    left out when absent or inconsistent."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    shadow = spec.get("shadow") if isinstance(spec, dict) else None
    if not isinstance(shadow, dict):
        return ()
    found = ((p, ShadowStats.from_dict(shadow.get(p))) for p in _SHADOWED)
    return tuple((p, stats) for p, stats in found if stats is not None)


def source_stats(payload: dict) -> dict[str, ShadowStats] | None:
    """A per-step hybrid's decode steps by draft source (`usage.speculative.by_source`: {"ngram": ..., "<its
    model>": ...}, each in the shadow's form); None when absent or any part is inconsistent."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    by_source = spec.get("by_source") if isinstance(spec, dict) else None
    if not isinstance(by_source, dict) or not by_source or len(by_source) > 4:
        return None
    out = {name: ShadowStats.from_dict(d) for name, d in by_source.items() if isinstance(name, str)}
    return out if len(out) == len(by_source) and all(v is not None for v in out.values()) else None


def rule_stats(payload: dict) -> dict[str, ShadowStats] | None:
    """Every per-step hybrid rule walked along the output (`usage.speculative.hybrid_rules`, the reference
    worker's: {rule name: the walk in the shadow's form}, control/hybrid_rule.py RULES); None when absent or any
    part is inconsistent or unknown."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    walks = spec.get("hybrid_rules") if isinstance(spec, dict) else None
    if not isinstance(walks, dict) or not walks or not set(walks) <= set(RULES):
        return None
    out = {name: ShadowStats.from_dict(d) for name, d in walks.items()}
    return out if all(v is not None for v in out.values()) else None


def lookup_drafts(payload: dict) -> float | None:
    """A hybrid request's drafting steps that its n-gram lookup served (`usage.speculative.lookup_drafts`)."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    n = _num(spec, "lookup_drafts") if isinstance(spec, dict) else None
    return n if n is not None and n >= 0 else None


def idle_steps(payload: dict) -> float:
    """A request's steps whose gamma was capped to 0 (`usage.speculative.steps_by_gamma["0"]`: a schedule at a
    large batch, an engine switched off): steps without a chance to draft, which the propose rate leaves out."""
    usage = payload.get("usage")
    spec = usage.get("speculative") if isinstance(usage, dict) else None
    by_gamma = spec.get("steps_by_gamma") if isinstance(spec, dict) else None
    n = _num(by_gamma, "0") if isinstance(by_gamma, dict) else None
    return n if n is not None and n >= 0 else 0.0


_DEFAULT_PRIOR = "cpu-tiny"
_NO_POLICY = PolicyBase()  # no probes, no default profile


class Feedback:
    """What finished requests and scrapes teach, and the metrics they count. `policy` and `calibration` give
    the current policy and `calibration` config section (a config reload replaces them): read when used."""

    def __init__(self, metrics: ProxyMetrics, state: StateBackend, pools: Pools,
                 predictor: AcceptancePredictor | None = None, *,
                 policy: Callable[[], PolicyBase] = lambda: _NO_POLICY,
                 calibration: Callable[[], CalibrationConfig | None] = lambda: None) -> None:
        self.metrics, self.state, self.pools, self.predictor = metrics, state, pools, predictor
        self.policy, self.calibration = policy, calibration
        self._trackers: dict[str, CounterTracker] = {}
        self._calibrators: dict[str, StepCalibrator] = {}

    def on_response(self, worker, content_class: str, proposer: str, gamma: int, output_tokens: float,
                    stats: tuple[float, float, float | None] | None,
                    positions: tuple[list[float], list[float]] | None = None,
                    prompt: float | None = None, regime: str = GREEDY, features=None,
                    lookups: float | None = None, shadows: tuple[tuple[str, ShadowStats], ...] = (), idle: float = 0.0,
                    sources: dict[str, ShadowStats] | None = None,
                    rules: dict[str, ShadowStats] | None = None) -> None:
        """Account one response; what it teaches is control/learn.py's. `features`: the request's
        (control/predict.py), to teach the predictor. `lookups`: for proposer "hybrid", its drafting steps that
        n-gram lookup served. `shadows`: (proposer, stats) scored along the output of a request that ran without
        them (`shadow_stats`), each counted for the worker's key of that proposer. `idle`: its steps capped to gamma 0
        (`idle_steps`). `sources`: a per-step hybrid's steps by draft source (`source_stats`): each source teaches
        its own key (control/learn.py `source_parts`). `rules`: every per-step hybrid rule walked along the output
        (`rule_stats`), into the policy's rule book."""
        m = self.metrics
        if output_tokens > 0:
            mn.inc(m.child(m.output_tokens, worker.name, proposer, content_class), output_tokens)
        spec = None
        if stats is not None:
            if not worker.request_feedback:
                worker.request_feedback = True
                if not worker.adapter.own_feedback:
                    log.info("worker %s reports per-request speculation stats; using them instead of its "
                             "counters", worker.name)
            draft, accepted, steps = stats
            tried, acc = (tuple(positions[0]), tuple(positions[1])) if positions is not None else (None, None)
            parts = source_parts(proposer, sources) if proposer == "hybrid" and sources else None
            spec = Speculation(draft, accepted, steps, tried, acc, lookups, idle, parts)
            if draft > 0 and proposer != "none":
                m.child(m.draft_tokens, worker.name, proposer, content_class).inc(draft)
                m.child(m.accepted_tokens, worker.name, proposer, content_class).inc(accepted)
        outcome = Outcome(worker.name, proposer, content_class, gamma, regime, output_tokens, prompt, spec,
                          shadows, tuple(worker.proposers), features)
        updates = learn(outcome, self.state.alphas)
        for shadowed, counted in updates.shadows:
            if shadowed == "ngram":  # (the shadow lookup counters are the n-gram proposer's)
                self._shadow_metrics(worker, content_class, counted)
        # the predictor is touched only by a request with features (it has one then)
        updates.apply(self.state.observe, self.predictor if updates.lessons else None, worker.traffic)
        book = self.policy().rules
        if rules and book is not None:
            book.observe(worker.name, content_class, rules)

    def on_shadow(self, worker, content_class: str, shadow: ShadowStats, regime: str = GREEDY) -> None:
        """Scraped shadow n-gram counters (vLLM plugin) into (worker, "ngram", class), as learn counts a
        response's."""
        self._shadow_metrics(worker, content_class, shadow)
        obs = shadow_observation(worker.name, "ngram", content_class, shadow, regime)
        if not obs.empty:
            self.state.observe(obs)

    def _shadow_metrics(self, worker, content_class: str, shadow: ShadowStats) -> None:
        m = self.metrics
        m.child(m.shadow_draft_tokens, worker.name, content_class).inc(shadow.draft_tokens)
        m.child(m.shadow_accepted_tokens, worker.name, content_class).inc(shadow.accepted_tokens)

    def on_sample(self, worker, sample) -> None:
        if sample.steps is not None:
            self.on_steps(worker, sample.steps)
        if not sample.spec:
            return
        tracker = self._trackers.get(worker.name)
        if tracker is None:
            tracker = self._trackers[worker.name] = CounterTracker()
        leader = not worker.adapter.own_feedback and self.state.counter_leader(worker.name)
        table = self.state.table() if leader and not worker.request_feedback else _NULL
        proposer, gamma = worker.fixed_plan()
        worker.adapter.ingest(table, tracker, worker.name, sample.spec, proposer, gamma)
        # shadow n-gram counters (vLLM plugin) in either feedback mode: no response carries them
        shadow = shadow_deltas(tracker, worker.name, sample.spec)
        tracker.scraped()
        if leader and "ngram" in worker.proposers:
            for (content_class, regime), stats in shadow.items():
                self.on_shadow(worker, content_class, stats, regime)

    # -- step-time calibration ---------------------------------------------------------------------------
    def _prior(self, worker) -> Profile:
        default = self.policy().default_profile
        if worker.profile:
            try:
                return load_profile(worker.profile)
            except ConfigError as exc:
                log.warning("worker %s: profile %r unusable for calibration (%s)", worker.name, worker.profile, exc)
        return default if default is not None else load_profile(_DEFAULT_PRIOR)

    def on_steps(self, worker, counters) -> None:
        """One scrape of the worker's cumulative step counters -> its calibrator -> `worker.step_costs`
        (left None with `calibration.enabled: false`: the gauges still show the fit)."""
        cfg = self.calibration()
        opts = {} if cfg is None else {"min_steps": cfg.min_steps, "prior_steps": cfg.prior_steps,
                                       "half_life_steps": cfg.half_life_steps, "probe_steps": cfg.probe_steps}
        cal = self._calibrators.get(worker.name)
        prior = self._prior(worker)
        if cal is None or cal.prior.name != prior.name or any(getattr(cal, k) != v for k, v in opts.items()):
            cal = self._calibrators[worker.name] = StepCalibrator(prior, **opts)  # new, or reconfigured
        changed = cal.update(counters)
        if cfg is not None and not cfg.enabled:
            worker.step_costs = None
        elif changed or worker.step_costs is None:
            was = worker.step_costs is not None and worker.step_costs.trusted
            worker.step_costs = cal.costs()
            if worker.step_costs.trusted != was:
                c = worker.step_costs
                log.info("worker %s: decisions priced with %s after %.0f steps (profile bias %+.0f%%; fit %s)",
                         worker.name, "its fitted step model" if c.trusted else f"the profile {prior.name}",
                         c.steps, 100 * cal.profile_bias(),
                         ", ".join(f"{k}={v:.3g}" for k, v in c.coefficients.items() if c.fitted.get(k)))

    def gauges(self) -> dict:
        """{gauge name: (labels, rows)} for a `StateCollector`: sampled-regime alphas, step-model fits."""
        sampled = []
        alphas = self.state.alphas
        for w in list(self.pools.workers.values()):
            for p in w.proposers:
                if p != "none":
                    sampled += [((w.name, p, c), alphas.get(w.name, p, c, regime=SAMPLED).mean)
                                for c in CONTENT_CLASSES]
        coef, err, trusted, steps, need, mse, contrast, probes = [], [], [], [], [], [], [], []
        probe = self.policy().contrast_probe
        made = probe.made if probe is not None else {}
        for name, cal in self._calibrators.items():
            c = cal.costs()
            for k, v in c.coefficients.items():
                coef.append(((name, k), v))
                err.append(((name, k), c.errors[k]))
            trusted.append(((name,), float(c.trusted)))
            steps.append(((name,), c.steps))
            need.append(((name,), cal.required_steps()))
            mse += [((name, "fit"), c.fit_mse), ((name, "profile"), c.prior_mse)]
            contrast.append(((name,), c.contrast_steps))
            probes.append(((name,), float(made.get(name, 0))))
        labels = ("worker", "coefficient")
        # every (worker, class, proposer) from the first scrape, like the alpha gauges: traffic adds no series
        rates = self.policy().rates
        realized = [((w.name, c, p), rates.correction(w.name, c, p) if rates is not None else 1.0)
                    for w in list(self.pools.workers.values()) for p in w.proposers if p != "none"
                    for c in CONTENT_CLASSES]
        return {mn.REALIZED_CORRECTION: (("worker", "content_class", "proposer"), realized),
                mn.ALPHA_ESTIMATE_SAMPLED: (("worker", "proposer", "content_class"), sampled),
                mn.STEP_MODEL_COEFFICIENT: (labels, coef),
                mn.STEP_MODEL_COEFFICIENT_ERROR: (labels, err),
                mn.STEP_MODEL_TRUSTED: (("worker",), trusted),
                mn.STEP_MODEL_STEPS: (("worker",), steps),
                mn.STEP_MODEL_REQUIRED_STEPS: (("worker",), need),
                mn.STEP_MODEL_PREDICTION_MSE: (("worker", "model"), mse),
                mn.STEP_MODEL_CONTRAST_STEPS: (("worker",), contrast),
                mn.STEP_MODEL_PROBES: (("worker",), probes)}

    def forget(self, worker_name: str) -> None:
        self._trackers.pop(worker_name, None)
        self._calibrators.pop(worker_name, None)
