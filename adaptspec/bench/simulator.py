"""A discrete-event simulator of one GPU engine with continuous batching and per-request speculation.

What it models, one engine step at a time (vLLM-v1-like scheduling):

* Requests arrive (closed loop: ``concurrency`` clients that resubmit as soon as a reply ends; or open loop:
  Poisson arrivals at ``rate`` req/s), wait in a FIFO queue and are admitted while the running batch has
  room (``max_batch``). At admission the policy decides proposer and gamma for the request from its content
  class, the live occupancy (``WorkerState.running`` / ``waiting``) and the alpha estimates of a real
  :class:`~adaptspec.control.estimators.AlphaTable` that the simulated acceptance feeds (per request, at
  completion, through control/learn.py as the proxy learns from ``usage.speculative``), so ``goodput`` and
  ``bandit`` learn online.
* Prefill is chunked: each step carries the decode tokens of every running request (gamma_i + 1 each) plus
  as much prefill as fits in ``max_batched_tokens``; a request's first token comes at the end of the step
  that completes its prefill.
* Step time = draft time (each proposer kind drafts its requests' tokens; a draft model runs gamma
  sequential batched passes) + verify time of the target at the step's total tokens and KV context, both
  from the controller's step-time model and profile (:mod:`adaptspec.control.costmodel`).
* Acceptance: draft token k of a request is accepted, given the ones before it were, with the ground-truth
  per-class, per-proposer rate ``alpha_k`` of :mod:`adaptspec.bench.workloads`; emitted = accepted + 1.
  Uniforms come from a counter-based hash of (seed, request id, output position, k), so two policies run
  on the same seed see the same requests *and* the same coin at the same place: their difference is the
  policy, not the noise (common random numbers).
* Trace replay (:class:`~adaptspec.bench.traces.TraceWorkload`, `adaptspec simulate --trace`): requests are
  the trace's, in file order (cycled), with its class and lengths; a step of a request at output position i
  that drafts gamma tokens with proposer p emits ``min(accept_runs[p][i], gamma + 1)``, i being the tokens
  generated so far (the prefill emits token 0, so decoding starts at index 1). A request is offered only the
  proposers its trace has runs for (the worker does not offer the others to it). `oracle`
  (:mod:`adaptspec.bench.oracle`) decides with hindsight from the request's runs.

Metrics per point: output tokens/s over the measured window (after ``warmup`` completions), requests/s,
TTFT / TPOT / end-to-end percentiles of the measured requests, the share of requests that speculated, mean
gamma, the proposer mix, mean running batch and the realised acceptance rate.

Code: `simulate` (one load point) and `sweep` (policies x load points) are here; the engine is
bench/sim_engine.py (`_Simulation`: admit / step / finish / account), its running batch bench/sim_slots.py, and
the configuration, result, acceptance coins and step helpers bench/sim_core.py (their names are importable from
this module too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from adaptspec.bench.oracle import Oracle, OracleStep
from adaptspec.bench.sim_core import (  # noqa: F401 (re-exported: the simulator's names live here)
    WORKER,
    SimConfig,
    SimResult,
    _uniforms,
    _with_load,
    accept_counts,
    replay_accepts,
)
from adaptspec.bench.sim_engine import _Simulation
from adaptspec.bench.sim_policies import PolicySpec, parse_policy, policy_from_file  # noqa: F401 (re-exported)
from adaptspec.bench.stepcost import ProfileCost, StepCost
from adaptspec.bench.stepwise import HybridRule
from adaptspec.bench.trace_predict import TracePredictor
from adaptspec.bench.traces import TraceWorkload
from adaptspec.bench.workloads import AlphaModel, Workload
from adaptspec.control.calibration import (
    BASE_FEATURES,
    CalibratedCosts,
    StepCalibrator,
    feature_names,
    prior_coefficients,
    regressors,
)
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.learn import Outcome
from adaptspec.control.profiles import Profile
from adaptspec.control.telemetry import StepCounters
from adaptspec.control.types import Policy, WorkerState


def simulate(
    policy: Policy,
    cost: StepCost,
    workload: Workload,
    config: SimConfig,
    *,
    truth: AlphaModel | None = None,
    alphas: object | None = None,
    worker: WorkerState | None = None,
    on_step: Callable[[float], None] | None = None,
    fast: bool = True,
    t0: float = 0.0,
    telemetry: Callable[[float, StepCounters], None] | None = None,
    telemetry_interval_s: float = 0.25,
    counters: StepCounters | None = None,
    calibrator: StepCalibrator | None = None,
    on_finish: Callable[[object, int, float, int, float | None], None] | None = None,
    predictor: TracePredictor | None = None,
    engine_control: Callable[[float, int], tuple[int | None, float]] | None = None,
    hybrid_rule: HybridRule | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> SimResult:
    """Run one load point. `alphas` is the AlphaSource handed to the policy (fed if it is an
    `AlphaTable`, by control/learn.py as the proxy feeds its own).

    `t0`: the clock reading at the start of the point (estimates and `on_step` see t0 + simulated time), so
    an AlphaTable can carry over from one point to the next with its time-based forgetting intact.

    `telemetry(now, counters)`: the engine's cumulative step counters (adaptspec.control.telemetry), from the
    truth cost of every step, at most every `telemetry_interval_s` simulated seconds (and once at the end);
    they start from `counters` (e.g. the previous point's `SimResult.counters`) or zero.

    `calibrator`: the proxy's online step-time calibration, played here: every telemetry report is fed to it
    (`StepCalibrator.update`, cumulative counters as a scrape gives them) and the worker the policy sees
    carries its fit as `step_costs` (priced with once trusted), as proxy/feedback.py does. Carry one over from
    point to point together with `counters` (its baseline is the previous point's last report).

    `on_finish(decision, request id, now, output tokens, decode seconds per token after the first or None)`:
    every completion, with the policy's Decision for it (the holdout / switchback experiment's feedback).

    `engine_control(now, output tokens emitted so far) -> (cap, until)`: a worker-wide cap on every running
    request's gamma (None: no cap; 0: speculation off for all, from this step on), as a proxy sets it on a
    worker that supports the switch (a switchback's off window); asked before each step, and again no later
    than `until` (the next time the controller looks: spans of steps stop there).

    `predictor`: per-request acceptance prediction on trace replays (bench/trace_predict.py): each traced
    request with a prompt is decided on its own predicted alphas and teaches the predictor when it finishes.

    `hybrid_rule`: the causal per-step rule of a traced request planned with proposer "hybrid" (bench/stepwise.py;
    default `HybridRule()`): lookup while its match holds, the head (`cost.hybrid_head`) with the request's gamma
    elsewhere, each step priced in the group of the source it drafts with (and the lookup's every step). A
    hybrid request teaches the (worker, "hybrid", class) key as the proxy counts the worker's report: per-position
    tried / accepted, and its lookup steps as the propose rate's numerator over its drafting steps.

    `on_outcome(outcome)`: every finished request as learning sees it (control/learn.py `Outcome`: what the
    reference worker would report), before it is learned (tests/control/test_learn.py replays them through the
    proxy's feedback).
    """
    return _Simulation(policy, cost, workload, config, truth=truth, alphas=alphas, worker=worker, on_step=on_step,
                       fast=fast, t0=t0, telemetry=telemetry, telemetry_interval_s=telemetry_interval_s,
                       counters=counters, calibrator=calibrator, on_finish=on_finish, predictor=predictor,
                       engine_control=engine_control, hybrid_rule=hybrid_rule, on_outcome=on_outcome).run()


# ---- policy sweeps ------------------------------------------------------------------------------------


def sweep(
    specs: Sequence[PolicySpec],
    profile: str,
    workload: Workload | TraceWorkload,
    loads: Sequence[tuple[str, float | tuple]],  # ("concurrency" | "rate", value) or ("ramp", phases)
    *,
    truth_profile: str | None = None,
    seed: int = 0,
    requests: int | None = None,
    warmup: int | None = None,
    max_batch: int = 256,
    max_gamma: int = 8,
    proposers: Sequence[str] | None = None,
    progress: bool = True,
    warm_start: bool = True,
    telemetry: Callable[[float, StepCounters], None] | None = None,
    calibrate: bool = True,
    shadow: bool = True,
    hybrid_rule: HybridRule | None = None,
) -> list[dict]:
    """Every policy at every load point (same seed: same requests and coins); one row per pair.

    `profile` is what the policies believe (a profile name or YAML path); `truth_profile` what the simulated
    engine costs (default: the same). With `warm_start` a policy object and its AlphaTable carry over from its
    previous point (like a proxy that has been serving: estimates learnt at one load are valid at the next, and
    its probes' schedules go on); `warm_start=False` starts each point from a fresh policy and the priors.
    `telemetry(now, counters)`: the engine's step counters (see `simulate`), continued from point to point
    of a policy; a new policy is a new engine (its counters start from zero: a reset to the consumer).

    `calibrate`: play the proxy's online step-time calibration (`simulate(calibrator=...)`): one
    StepCalibrator per policy whose prior is the belief, fed by the engine's telemetry, carried over between
    points like the AlphaTable (fresh at each point with `warm_start=False`). Each row then has a
    `calibration` entry (`calibration_summary`). False: the policies price with the belief alone.
    `shadow`: traced requests served without n-gram lookup teach its keys (`SimConfig.shadow`).
    `proposers`: what the simulated worker offers (default: the profile's options, never "hybrid"); "hybrid" is
    offered only when named here, on trace replay, with a truth profile that has n-gram and a head (its parts),
    and then to the requests whose trace has runs for both. `hybrid_rule`: its per-step rule (`simulate`).
    """
    from adaptspec.bench._progress import progress_bar
    from adaptspec.control.profiles import load_profile

    belief = load_profile(profile)  # the belief must load too
    truth_name = truth_profile or profile
    cost = ProfileCost(load_profile(truth_name))
    worker = _offered(cost, workload, specs, proposers, max_gamma, profile, truth_name)
    fields = {"requests": requests, "warmup": warmup, "max_batch": max_batch, "max_gamma": max_gamma, "seed": seed,
              "shadow": shadow}
    run = _Sweep(profile, truth_profile, belief, cost, AlphaModel(aliases=cost.truth_aliases()), worker, workload,
                 fields, warm_start, calibrate, telemetry, hybrid_rule)
    rows = []
    with progress_bar(len(specs) * len(loads), "simulate", progress) as bar:
        for spec in specs:
            rows += run.policy_rows(spec, loads, bar)
    return rows


def _offered(cost: ProfileCost, workload: Workload | TraceWorkload, specs: Sequence[PolicySpec],
             proposers: Sequence[str] | None, max_gamma: int, profile: str, truth_name: str) -> WorkerState:
    """The worker a sweep's engine offers (`proposers`, default the truth profile's options), checked against
    the policies: the oracle needs traces, a hybrid policy a worker that offers "hybrid"."""
    from adaptspec.errors import ConfigError

    worker = cost.worker(max_gamma=max_gamma, profile=profile)
    if proposers is not None:
        if "hybrid" in proposers and (cost.hybrid_head is None or not isinstance(workload, TraceWorkload)):
            raise ConfigError("'hybrid' is replayed per step from acceptance traces (--trace), with a profile that "
                              "offers ngram and a model head (eagle or draft)", key="--proposers", value="hybrid")
        bad = [p for p in proposers if p not in worker.proposers and p != "hybrid"]
        if bad:
            raise ConfigError(f"profile {truth_name!r} offers {list(worker.proposers)}", key="--proposers",
                              value=bad)
        worker = _with_proposers(worker, tuple(proposers))
    if any(s.hindsight for s in specs) and not isinstance(workload, TraceWorkload):
        raise ConfigError("the oracle policy needs acceptance traces (--trace)", key="--policies", value="oracle")
    for spec in specs:  # the oracle has no policy section
        hybrid = spec.policy is not None and spec.policy.named_proposer == "hybrid"
        if hybrid and "hybrid" not in worker.proposers:
            raise ConfigError("a hybrid policy needs the worker to offer it: add hybrid to --proposers (with --trace)",
                              key="--policies", value=spec.name)
    return worker


@dataclass
class _Sweep:
    """What every policy and point of a sweep shares: the belief, the truth's cost and acceptance, the worker the
    engine offers, the points' SimConfig fields besides the load, and how learning carries over."""

    profile: str
    truth_profile: str | None
    belief: Profile
    cost: ProfileCost
    truth: AlphaModel
    worker: WorkerState
    workload: Workload | TraceWorkload
    fields: dict  # SimConfig's fields other than the load: requests, warmup, max_batch, max_gamma, seed, shadow
    warm_start: bool
    calibrate: bool
    telemetry: Callable[[float, StepCounters], None] | None
    hybrid_rule: HybridRule | None

    def policy_rows(self, spec: PolicySpec, loads: Sequence[tuple[str, float | tuple]], bar) -> list[dict]:
        """One policy at every load point in turn. With `warm_start` everything a live proxy keeps while its
        load moves carries over from point to point: the policy object (its rule book, its calibration probes'
        schedules and back-offs, its hedges), its learning (the AlphaTable on simulated seconds, the step-time
        calibrator, the acceptance predictor) and the engine's counters; else each point starts afresh."""
        from adaptspec.control.policy import build_policy

        clock, alphas = _fresh_table(spec)
        oracle = ((OracleStep if spec.stepwise else Oracle)(self.cost, self.fields["max_gamma"])
                  if spec.hindsight else None)  # memoised per request: one per sweep
        predicting = not spec.hindsight and isinstance(self.workload, TraceWorkload) and spec.predicting()
        predictor = TracePredictor() if predicting else None  # learns on, point to point, like the table
        counters = None
        calibrator = StepCalibrator(self.belief) if self.calibrate else None
        rows, policy = [], None
        for kind, value in loads:
            bar.set_postfix_str(f"{spec.name} {kind}={value if kind == 'ramp' else format(value, 'g')}")
            cfg = SimConfig(concurrency=int(value) if kind == "concurrency" else None,
                            rate=value if kind == "rate" else None,
                            ramp=tuple(map(tuple, value)) if kind == "ramp" else None, **self.fields)
            if policy is None or not self.warm_start:
                policy = oracle or build_policy(spec.policy)
            if not self.warm_start:
                clock, alphas = _fresh_table(spec)
                calibrator = StepCalibrator(self.belief) if self.calibrate else None
                predictor = TracePredictor() if predicting else None
            res = simulate(policy, self.cost, self.workload, cfg, truth=self.truth, alphas=alphas, worker=self.worker,
                           on_step=clock.set, t0=clock.t, telemetry=self.telemetry, counters=counters,
                           calibrator=calibrator, predictor=predictor, hybrid_rule=self.hybrid_rule)
            rows.append(self._row(spec, kind, value, res, calibrator, counters))
            counters = res.counters
            bar.update(1)
        return rows

    def _row(self, spec: PolicySpec, kind: str, value: float | tuple, res: SimResult,
             calibrator: StepCalibrator | None, before: StepCounters | None) -> dict:
        """A point's JSON row: the policy, the load, the setting, the SimResult's metrics and, when calibrating,
        the fit as the point left it (judged on the engine's counters since `before`)."""
        point = res.counters.since(before or StepCounters()) if res.counters is not None else None
        row = {"policy": spec.name, kind: value, "profile": self.profile, "workload": self.workload.name,
               "seed": self.fields["seed"]}
        if self.truth_profile is not None:
            row["truth_profile"] = self.truth_profile
        row = {**row, **res.row()}
        if calibrator is not None:
            row["calibration"] = calibration_summary(calibrator.costs(), self.cost.profile, point)
        return row


def _fresh_table(spec: PolicySpec) -> tuple[_SimClock, AlphaTable]:
    """A policy's AlphaTable from its priors, forgetting on a clock of simulated seconds (and that clock)."""
    from adaptspec.control.config import EstimatorConfig

    clock = _SimClock()  # the estimator's time-based forgetting runs on simulated seconds
    return clock, AlphaTable.from_config(spec.estimator or EstimatorConfig(), clock=clock)


def calibration_summary(costs: CalibratedCosts, truth: Profile, window: StepCounters | None = None) -> dict:
    """A fit at the end of a point, for its row: trusted, evidence, the target's fitted coefficients and,
    when the truth's target is additive (so that its coefficients are the fit's true values), their relative
    errors; the model proposers' fitted per-pass / per-token costs where identified; and, given the point's
    telemetry `window`, the relative error of the engine time the fit (snapped, as priced) predicts for it
    (`step_time_rel_error`: what the policy's pricing depends on, whatever the truth's form), the mean step
    and the fit's per-step residual `sigma_s`."""
    sigma = costs.sigma_s if math.isfinite(costs.sigma_s) else None
    out: dict = {"trusted": costs.trusted, "steps": costs.steps, "sigma_s": sigma,
                 "coefficients": {k: costs.coefficients[k] for k in BASE_FEATURES},
                 "fitted": {k: costs.fitted[k] for k in BASE_FEATURES},
                 "proposers": {k: v for k, v in costs.coefficients.items()
                               if k not in BASE_FEATURES and costs.fitted[k]}}
    if truth.target.additive:
        true = dict(zip(BASE_FEATURES, prior_coefficients(truth)[:3].tolist(), strict=True))
        out["truth"] = true
        out["rel_error"] = {k: (costs.coefficients[k] - v) / v if v > 0 else None for k, v in true.items()}
    if window is not None and window.step_seconds > 0:
        theta = np.array([costs.snapped[k] for k in feature_names(costs.proposers)])  # [d], as the policy prices
        predicted = float(theta @ regressors(window, costs.proposers))
        out["step_time_rel_error"] = predicted / window.step_seconds - 1.0
        out["mean_step_s"] = window.step_seconds / window.steps
    return out


def _with_proposers(w: WorkerState, proposers: tuple[str, ...]) -> WorkerState:
    return WorkerState(name=w.name, engine=w.engine, per_request=w.per_request, proposers=proposers,
                       gamma=w.gamma, max_gamma=w.max_gamma, profile=w.profile)


class _SimClock:
    def __init__(self) -> None:
        self.t = 0.0

    def set(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
