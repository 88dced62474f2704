"""The config / policy file: typed pydantic models (unknown keys rejected) and `load_config(path)`.

    policy:    {kind: goodput|static|threshold|bandit, ...kind-specific,
                holdout: {share, seed, confidence, min_samples, max_samples, guard, max_cost},
                switchback: {share, window_s, washout_s, cooldown_s, settle_s, seed, min_windows, guard}}
    estimator: {prior: {strength, alpha: {proposer: {class|default: alpha}}}, half_life_tokens, half_life_s,
                max_positions, predict}
    pools:     [{name, engine, per_request, proposers, gamma, max_gamma, profile, models, workers, launch}]
    state:     {backend: memory|redis, url, key_prefix, learn_interval_s}
    server:    {host, port, api_keys_env, max_body_bytes, scrape_interval_s, request_timeout_s,
                allow_client_speculation, keepalive_timeout_s, body_timeout_s, first_byte_timeout_s,
                stall_timeout_s, eject_after_failures, eject_backoff_s, drain_delay_s, grace_period_s,
                classify: speculating|always}

Every section is optional; a file without `pools` is valid (`adaptspec serve` then starts an embedded
worker). Any error raises `ConfigError` naming the file, the dotted key (`pools[0].engine`) and the value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from adaptspec.control.alpha import DEFAULT_HALF_LIFE_TOKENS
from adaptspec.control.types import CONTENT_CLASSES, DRAFTING_PROPOSERS, PROPOSERS, DraftingProposer, Proposer
from adaptspec.errors import ConfigError

POLICY_KINDS = ("static", "threshold", "goodput", "bandit", "sglang_adaptive", "draft_len_schedule", "batch_cutoff",
                "smartspec", "banditspec_ucb")  # the last five: peer policies (control/peers/)
SpecProposer = DraftingProposer
AnyProposer = Proposer
ContentClass = Literal["code", "structured", "summarize", "translate", "math", "chat"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- policy --------------------------------------------------------------------------------------------
class HoldoutConfig(_Strict):
    """Request-level holdout (control/holdout.py): a randomized share served without speculation."""

    share: float = Field(default=0.02, gt=0.0, le=0.5)  # one request in round(1/share) per stratum
    seed: int | None = 0
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    min_samples: int = Field(default=10, ge=2)  # per group, before a stratum gets an interval
    max_samples: int = Field(default=2000, ge=10)  # per group: the most recent ones are kept
    guard: bool = True  # strata confidently slower with speculation run without it
    # cap on the throughput a stratum's holdout costs: with realized speedup S the share becomes at most
    # max_cost / ((S - 1) (1 - max_cost)) (None: always `share`)
    max_cost: float | None = Field(default=None, gt=0.0, lt=0.5)
    # what `share` is a share of: "requests" (one in round(1/share) per stratum) or "time" (the held requests'
    # share of the stratum's decode time: a held request runs S times longer, S the stratum's speedup, so
    # one in round((S (1 - share) + share) / share) is held; throughput cost at most share (1 - 1/S))
    share_of: Literal["requests", "time"] = "requests"


class SwitchbackConfig(_Strict):
    """Switchback windows per worker: speculation off in a randomized `share` of windows (off by default)."""

    share: float = Field(default=0.5, gt=0.0, lt=1.0)
    window_s: float = Field(default=30.0, gt=0.0)
    washout_s: float = Field(default=10.0, ge=0.0)  # not measured after a switch; >= a typical request's time
    settle_s: float | None = Field(default=None, ge=0.0)  # a window is evaluated this long after its end
    cooldown_s: float = Field(default=0.0, ge=0.0)  # nor measured before its end (requests change pace there)
    seed: int | None = 0
    min_windows: int = Field(default=3, ge=2)  # per regime, before a load bucket gets an interval
    guard: bool = True  # buckets whose system throughput is confidently lower with the policy: off
    # the guard also tests the requests decided in windows' measured parts, one sample each, sequentially
    # (control/holdout.py RegimeRequests), from `first_look` requests on; windows are then not waited for
    guard_requests: bool = True
    first_look: int = Field(default=20, ge=4)
    # window order: "pairs" (every 2 windows one of each, random order) or "abba" (every 4 windows x y y x, x
    # random; share 0.5 only): a worker's 2nd regime then lasts two windows, long enough to drain at load
    order: Literal["pairs", "abba"] = "pairs"
    # a request still not reported this long after its decision no longer counts as running (purity bookkeeping)
    inflight_s: float = Field(default=600.0, gt=0.0)
    # what the control windows (and a guarded load bucket) run: "off" (the realized speedup over plain decoding)
    # or a fixed plan "<proposer>:<gamma>" for every request (the hedge: the policy measured against its strongest
    # fixed alternative on the same worker, which then runs it while the policy measurably loses to it)
    control: str = "off"

    @property
    def control_plan(self) -> tuple[str, int] | None:
        """The control windows' fixed plan (proposer, gamma); None for "off"."""
        if self.control == "off":
            return None
        p, g = self.control.split(":")
        return p, int(g)

    @model_validator(mode="after")
    def _control_plan(self) -> SwitchbackConfig:
        if self.control != "off":
            p, _, g = self.control.partition(":")
            if p not in PROPOSERS or p == "none" or not g.isdigit() or int(g) < 1:
                raise ValueError(f"control must be 'off' or '<proposer>:<gamma>' with a proposer of "
                                 f"{', '.join(x for x in PROPOSERS if x != 'none')} and gamma >= 1 "
                                 f"(got {self.control!r})")
        return self

    @model_validator(mode="after")
    def _washout_inside(self) -> SwitchbackConfig:
        if self.order == "abba" and self.share != 0.5:
            raise ValueError(f"order abba needs share 0.5 (got {self.share:g})")
        if self.washout_s + self.cooldown_s >= self.window_s:
            raise ValueError(f"washout_s + cooldown_s ({self.washout_s + self.cooldown_s:g}) must be shorter than "
                             f"window_s ({self.window_s:g})")
        return self


class _Experiments(_Strict):
    """Sections every policy kind takes: the measurement of its realized speedup (holdout, switchback); and the
    capabilities its readers use, declared here with defaults (as control/policy_base.py declares a built
    policy's), so that no reader probes a section for a field."""

    holdout: HoldoutConfig | None = None
    switchback: SwitchbackConfig | None = None

    @property
    def priced_profile(self) -> str | None:
        """The step-cost profile the kind prices with where a worker names none; None: it prices with none."""
        return None

    @property
    def named_proposer(self) -> str | None:
        """The one proposer the kind drafts with (threshold: where a class names none); None: it chooses."""
        return None


class _Priced(_Experiments):
    """A kind that prices plans with a step-cost profile (goodput, bandit, the smartspec / banditspec peers)."""

    default_profile: str = "cpu-tiny"  # for workers whose pool names no profile

    @property
    def priced_profile(self) -> str | None:
        return self.default_profile


class _OneProposer(_Experiments):
    """A kind that drafts with one proposer it names (static, threshold, the single-proposer peers); each
    narrows `proposer`'s type and default."""

    proposer: AnyProposer = "none"

    @property
    def named_proposer(self) -> str | None:
        return self.proposer


class StaticPolicy(_OneProposer):
    """Always the same proposer and gamma (proposer `none` / gamma 0: speculation off)."""

    kind: Literal["static"]
    proposer: AnyProposer = "none"
    gamma: int = Field(default=0, ge=0, le=32)

class ThresholdRow(_Strict):
    max_load: float = Field(ge=0)  # applies while the batch the request joins is <= max_load
    gamma: int = Field(ge=0, le=32)


class ThresholdPolicy(_OneProposer):
    """gamma from a load table (vLLM's dynamic speculative decoding, TRT-LLM's draft_len_schedule)."""

    kind: Literal["threshold"]
    proposer: SpecProposer = "draft"
    proposer_by_class: dict[ContentClass, AnyProposer] = Field(default_factory=dict)
    table: list[ThresholdRow] = Field(min_length=1)  # past the last row: gamma 0

    @field_validator("table")
    @classmethod
    def _ascending(cls, rows: list[ThresholdRow]) -> list[ThresholdRow]:
        loads = [r.max_load for r in rows]
        if loads != sorted(loads) or len(set(loads)) != len(loads):
            raise ValueError(f"max_load must be strictly ascending, got {loads}")
        return rows


class GoodputPolicy(_Priced):
    """Per request: alpha per proposer -> best gamma at the worker's live load -> max expected goodput."""

    kind: Literal["goodput"]
    margin: float = Field(default=1.05, ge=1.0)  # a speculative plan must beat off by this factor
    max_gamma: int = Field(default=8, ge=0, le=32)
    risk: float = Field(default=0.0, ge=0.0)  # plan with alpha = mean - risk * std
    tie_tolerance: float = Field(default=0.02, ge=0.0, lt=1.0)  # goodputs this close: least loaded wins
    # a batch's shared gamma (a draft model's or head's passes at load): the shorter of the best over the worker's
    # mix at the posterior means and at this many standard errors lower (keys with evidence; the one-standard-
    # error rule); 0: the best at the means
    gamma_se: float = Field(default=1.0, ge=0.0, le=4.0)
    # probes, so a pessimistic prior or a stale estimate cannot keep a proposer off for good: while its
    # evidence for a class is thin (fewer than explore_below_tokens drafted tokens, e.g. never tried, or
    # forgotten) a request drafts with it with the probability that a draw from its posterior beats the plan
    # (request-local probes: n-gram lookup at any load, any proposer at batch 1), and a request whose plan is
    # off with probability `explore`; explore 0: no probes
    explore: float = Field(default=0.05, ge=0.0, le=1.0)
    explore_below_tokens: float = Field(default=256.0, ge=0.0)
    seed: int | None = 0
    # per-request gamma schedules: the best gamma at every running-batch level, applied by the worker at
    # every step (control/schedule.py), instead of the gamma of the admission load only
    schedule: bool = False
    # at batch 1, rank a class's plans at the model's price times what their requests' decode rates are sure of
    # (control/realized.py); false: the model's price alone
    measured: bool = True


class BanditPolicy(_Priced):
    """Thompson sampling (or UCB) on alpha, then the cost model: keys with no data get tried."""

    kind: Literal["bandit"]
    algorithm: Literal["thompson", "ucb"] = "thompson"
    seed: int | None = 0
    ucb_c: float = Field(default=1.0, ge=0.0)  # UCB: alpha = mean + ucb_c * std
    margin: float = Field(default=1.0, ge=1.0)
    max_gamma: int = Field(default=8, ge=0, le=32)
    tie_tolerance: float = Field(default=0.02, ge=0.0, lt=1.0)


# the peer policies' sections (control/peers/config.py builds on the bases above, hence the late import)
from adaptspec.control.peers.config import (  # noqa: E402
    BanditSpecPolicy,
    BatchCutoffPolicy,
    DraftLenSchedulePolicy,
    SglangAdaptivePolicy,
    SmartSpecPolicy,
)

PolicyConfig = Annotated[
    Union[StaticPolicy, ThresholdPolicy, GoodputPolicy, BanditPolicy,  # noqa: UP007
          SglangAdaptivePolicy, DraftLenSchedulePolicy, BatchCutoffPolicy, SmartSpecPolicy, BanditSpecPolicy],
    Field(discriminator="kind"),
]


# -- estimator -----------------------------------------------------------------------------------------
class PriorConfig(_Strict):
    strength: float = Field(default=20.0, gt=0)  # pseudo draft tokens behind the prior
    alpha: dict[SpecProposer, dict[str, float]] = Field(default_factory=dict)  # proposer -> class|default

class EstimatorConfig(_Strict):
    prior: PriorConfig = Field(default_factory=PriorConfig)
    # long enough that a key's estimate averages over dozens of requests (control/alpha.py, "Forgetting")
    half_life_tokens: float | None = Field(default=DEFAULT_HALF_LIFE_TOKENS, gt=0)
    half_life_s: float | None = Field(default=600.0, gt=0)
    max_positions: int = Field(default=16, ge=1, le=64)
    # per-request acceptance prediction (control/predict.py): each request's own class estimates moved by
    # what its prompt's features predict, learnt online from the per-request feedback
    predict: bool = True


# -- pools ---------------------------------------------------------------------------------------------
class WorkerConfig(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$")
    api_key_env: str | None = None


class PoolConfig(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    engine: Literal["adaptspec", "vllm", "sglang", "openai"] = "adaptspec"
    per_request: bool = True  # the worker takes per-request proposer / gamma
    proposers: list[SpecProposer] = Field(default_factory=lambda: ["ngram", "draft"])
    gamma: int = Field(default=0, ge=0, le=32)  # fixed workers: launch gamma (0 = off)
    max_gamma: int = Field(default=8, ge=0, le=32)
    profile: str | None = None
    models: list[str] | None = None
    workers: list[WorkerConfig] = Field(min_length=1)
    launch: dict[str, Any] | None = None


class StateConfig(_Strict):
    backend: Literal["memory", "redis"] = "memory"
    url: str = Field(default="redis://127.0.0.1:6379/0", pattern=r"^(redis|rediss|unix)://\S+$")
    key_prefix: str = "adaptspec:"
    # replicas exchange their learning (per-key count deltas) this often: Redis work per replica is one
    # write and one read per interval, however many requests it served (proxy/state.py)
    learn_interval_s: float = Field(default=1.0, gt=0)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_keys_env: str | None = None  # name of an env var holding comma-separated client keys
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    scrape_interval_s: float = Field(default=0.25, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    # a client's own `speculation` field is ignored unless this is on; when on, it is clamped to the pool
    allow_client_speculation: bool = False
    keepalive_timeout_s: float = Field(default=30.0, gt=0)  # idle keep-alive connection, and slow header reads
    body_timeout_s: float = Field(default=60.0, gt=0)  # the whole request body, from the end of its headers
    # upstream attempts: a stream's response head (non-stream answers are bounded by request_timeout_s), the
    # longest silence inside a stream or of a worker's scrapes; any one ejects the worker and moves its
    # requests that have no byte yet
    first_byte_timeout_s: float = Field(default=60.0, gt=0)
    stall_timeout_s: float = Field(default=30.0, gt=0)
    eject_after_failures: int = Field(default=3, ge=1)  # 502/503/504 answers in a row
    eject_backoff_s: float = Field(default=2.0, gt=0)  # ejected this long, doubling per ejection in a row (32x)
    # SIGTERM: /health/ready answers 503 at once while new connections are still accepted for drain_delay_s
    # (a load balancer needs a few probe periods to take the replica out), then the listener closes and the
    # requests and streams in flight get until grace_period_s after the signal (Kubernetes' default
    # terminationGracePeriodSeconds is 30) before the process exits 0
    drain_delay_s: float = Field(default=5.0, ge=0)
    grace_period_s: float = Field(default=30.0, gt=0)
    # which generation requests the content classifier reads: "speculating" = those with a candidate worker that
    # speculates (the class picks their alpha estimates, features and learning keys); the others, whose
    # decision no class can change, are labelled "unclassified" in headers, metrics and the access log, which
    # saves ~100 us of CPU per unseen prompt. "always": every request, for per-class labels on every pool.
    classify: Literal["speculating", "always"] = "speculating"


class CalibrationConfig(_Strict):
    """Online step-time calibration (control/calibration.py) of every worker that exports step telemetry."""

    enabled: bool = True  # price a worker with its fitted step model once trusted (false: the profile only)
    min_steps: float = Field(default=300.0, ge=0)  # engine steps before the fit is trusted
    prior_steps: float = Field(default=20.0, gt=0)  # weight of the profile, in engine steps
    half_life_steps: float = Field(default=20_000.0, gt=0)  # forgetting
    probe_steps: float = Field(default=0.0, ge=0)  # opt in (e.g. 300): toggle speculation for 1/8 of admissions while the fit has
    # fewer steps' worth of drafted tokens varying on their own (a drafted token's price, control/calibration_probe.py); 0: never


class Config(_Strict):
    policy: PolicyConfig = Field(default_factory=lambda: GoodputPolicy(kind="goodput"))
    estimator: EstimatorConfig = Field(default_factory=EstimatorConfig)
    pools: list[PoolConfig] = Field(default_factory=list)
    state: StateConfig = Field(default_factory=StateConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)


# -- loading -------------------------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML silently keeps the last)."""


def _no_duplicates(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def dotted(loc: tuple) -> str:
    """('pools', 0, 'engine') -> 'pools[0].engine'; the policy's union tag is dropped."""
    out = ""
    prev = None
    for part in loc:
        if prev == "policy" and part in POLICY_KINDS:
            prev = part
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        prev = part
    return out


def _error(exc: ValidationError, source: str) -> ConfigError:
    errs = exc.errors()
    e = errs[0]
    key = dotted(e["loc"]) or None
    msg = e["msg"].removeprefix("Value error, ")
    value = e.get("input")
    if e["type"] == "missing":
        msg, value = "required key is missing", None
    elif e["type"] in ("union_tag_not_found", "union_tag_invalid"):
        tag = value.get("kind") if isinstance(value, dict) else None
        msg = f"policy.kind must be one of {', '.join(POLICY_KINDS)}"
        key, value = (key + ".kind") if key else "policy.kind", tag
    elif e["type"] == "extra_forbidden":
        msg = "unknown key"
    elif isinstance(value, dict) and e["type"] in ("value_error", "assertion_error"):
        value = None  # a cross-field rule: the key names the section
    if len(errs) > 1:
        msg += f" (and {len(errs) - 1} more error{'s' if len(errs) > 2 else ''})"
    return ConfigError(msg, file=source, key=key, value=value)


def _check(cfg: Config, source: str, base_dir: Path | None = None) -> None:
    """Rules that span fields: unique names, fixed-speculation pools, profiles that exist and fit."""
    from adaptspec.control.profiles import list_profiles, load_profile

    def fail(msg: str, key: str, value: object) -> ConfigError:
        return ConfigError(msg, file=source, key=key, value=value)

    def profile_error(exc: ConfigError, key: str, name: str) -> ConfigError:
        if exc.key == "profile":  # unknown name: say which exist, once
            return fail(f"unknown profile (built-in: {', '.join(list_profiles())}, or a path to a .yaml)",
                        key, name)
        return fail(f"bad profile file: {exc}", key, name)

    pools, workers = set(), set()
    for i, pool in enumerate(cfg.pools):
        at = f"pools[{i}]"
        if pool.name in pools:
            raise fail("duplicate pool name", f"{at}.name", pool.name)
        pools.add(pool.name)
        for j, w in enumerate(pool.workers):
            if w.name in workers:
                raise fail("duplicate worker name (names are unique across pools)", f"{at}.workers[{j}].name",
                           w.name)
            workers.add(w.name)
        if pool.gamma > pool.max_gamma:
            raise fail(f"gamma exceeds max_gamma ({pool.max_gamma})", f"{at}.gamma", pool.gamma)
        if not pool.per_request and pool.gamma > 0 and len(pool.proposers) != 1:
            raise fail("a fixed-speculation pool (per_request: false, gamma > 0) names exactly one proposer",
                       f"{at}.proposers", pool.proposers)
        if pool.per_request and pool.gamma > 0:
            raise fail("gamma is the launch gamma of fixed pools; per-request pools take max_gamma",
                       f"{at}.gamma", pool.gamma)
        if pool.profile is not None:
            if base_dir is not None and pool.profile.endswith((".yaml", ".yml")) \
                    and not Path(pool.profile).is_absolute() and (base_dir / pool.profile).exists():
                pool.profile = str(base_dir / pool.profile)  # profile files are relative to the config file
            try:
                prof = load_profile(pool.profile)
            except ConfigError as exc:
                raise profile_error(exc, f"{at}.profile", pool.profile) from None
            for p in pool.proposers if (pool.per_request or pool.gamma) else ():
                if not prof.offers(p):
                    raise fail(f"profile {prof.name!r} has no cost for this proposer", f"{at}.proposers", p)
    if cfg.server.drain_delay_s >= cfg.server.grace_period_s:
        raise fail(f"the drain delay must be shorter than server.grace_period_s ({cfg.server.grace_period_s:g}), "
                   "which also covers finishing the requests in flight", "server.drain_delay_s",
                   cfg.server.drain_delay_s)
    pol = cfg.policy
    if isinstance(pol, StaticPolicy) and (pol.proposer == "none") != (pol.gamma == 0):
        raise fail("proposer 'none' goes with gamma 0, and a proposer with gamma > 0", "policy.gamma", pol.gamma)
    for proposer, by_class in cfg.estimator.prior.alpha.items():
        for c, a in by_class.items():
            key = f"estimator.prior.alpha.{proposer}.{c}"
            if c not in CONTENT_CLASSES and c != "default":
                raise fail(f"unknown class (classes: {', '.join(CONTENT_CLASSES)}, default)", key, c)
            if not 0.0 <= a <= 1.0:
                raise fail("alpha must be in [0, 1]", key, a)
    profile = cfg.policy.priced_profile
    if profile is not None:
        try:
            load_profile(profile)
        except ConfigError as exc:
            raise profile_error(exc, "policy.default_profile", profile) from None


def parse_config(data: object, source: str = "<config>", base_dir: Path | None = None) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping of sections", file=source, value=type(data).__name__)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise _error(exc, source) from None
    _check(cfg, source, base_dir)
    return cfg


def load_config(path: str | Path, text_filter: Callable[[str], str] | None = None) -> Config:
    """Read and validate a YAML config / policy file.

    `text_filter` rewrites the file's text before YAML parsing (the proxy's `${VAR}` expansion), so
    filtered files get the same checks (duplicate keys, relative profile paths) as plain ones.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", file=str(path)) from None
    raw, text = text, (text_filter(text) if text_filter is not None else text)
    filtered = text != raw
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        after = " (after ${VAR} expansion)" if filtered else ""
        raise ConfigError(f"not valid YAML{after}: {exc}", file=str(path)) from None
    return parse_config(data, str(path), path.resolve().parent)


DEFAULT_POOL_PROPOSERS = ("ngram", "draft")  # what a reference worker offered before it reported its own


def pool_proposers(health: object, profile: str) -> list[str]:
    """The proposers a pool of reference workers offers per request: those a worker reports in its /health
    body (`{"proposers": [...]}`; absent: DEFAULT_POOL_PROPOSERS) that `profile` has a cost for, in the
    worker protocol's order (ngram, draft, eagle, hybrid)."""
    from adaptspec.control.profiles import load_profile

    reported = health.get("proposers") if isinstance(health, dict) else None
    names = set(reported) if isinstance(reported, list) else set(DEFAULT_POOL_PROPOSERS)
    prof = load_profile(profile)
    return [p for p in DRAFTING_PROPOSERS if p in names and prof.offers(p)]


__all__ = ["Config", "PolicyConfig", "HoldoutConfig", "SwitchbackConfig", "StaticPolicy", "ThresholdPolicy", "GoodputPolicy", "BanditPolicy",
           "EstimatorConfig", "PriorConfig", "PoolConfig", "WorkerConfig", "StateConfig", "ServerConfig",
           "load_config", "parse_config", "pool_proposers"]
