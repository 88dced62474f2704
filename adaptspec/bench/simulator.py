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
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptspec.bench.oracle import LiveBatch, Oracle, OracleStep
from adaptspec.bench.sim_policies import PolicySpec, parse_policy, policy_from_file  # noqa: F401 (re-exported)
from adaptspec.bench.stepcost import ProfileCost, StepCost
from adaptspec.bench.stepwise import HybridRule, StepPlan, hybrid_plan, walk_hybrid
from adaptspec.bench.trace_predict import TracePredictor
from adaptspec.bench.traces import TraceRequest, TraceWorkload
from adaptspec.bench.workloads import AlphaModel, Workload
from adaptspec.control.calibration import (
    BASE_FEATURES,
    CalibratedCosts,
    StepCalibrator,
    feature_names,
    prior_coefficients,
    regressors,
)
from adaptspec.control.estimators import AlphaTable, TrafficShape
from adaptspec.control.learn import Outcome, Part, Speculation, learn
from adaptspec.control.profiles import Profile
from adaptspec.control.shadow import SHADOW_K, ShadowStats, walk_runs
from adaptspec.control.telemetry import StepCounters
from adaptspec.control.types import CONTENT_CLASSES, PROPOSERS, Policy, WorkerState

WORKER = "sim0"
_SPAN_ELEMENTS = 1 << 16  # cap on coins drawn at once (n_requests * span * gamma)
_PROPOSER_INDEX = {p: i for i, p in enumerate(PROPOSERS)}  # none=0, ngram=1, draft=2, eagle=3
_CLASS_INDEX = {c: i for i, c in enumerate(CONTENT_CLASSES)}


@dataclass
class SimConfig:
    concurrency: int | None = 1  # closed-loop clients; None with `rate` for open loop
    rate: float | None = None  # Poisson arrivals per second (open loop)
    requests: int | None = None  # measured completions (default: max(64, 6 * concurrency))
    warmup: int | None = None  # completions discarded first (default: max(32, 2 * concurrency))
    max_batch: int = 256  # running-batch slots (vLLM max_num_seqs)
    max_batched_tokens: int = 8192  # per-step token budget (vLLM max_num_batched_tokens)
    max_gamma: int = 8
    seed: int = 0
    # closed loop whose client count steps over time: ((seconds, clients), ...) phases, cycled (concurrency
    # and rate None). Above the target, a client whose reply ends leaves; below it, new clients arrive at once.
    ramp: tuple[tuple[float, int], ...] | None = None
    # a traced request served without n-gram lookup is scored for it along its recorded runs, as the reference
    # worker reports (usage.speculative.shadow, control/shadow.py); False: only lookup requests teach its keys
    shadow: bool = True

    def __post_init__(self) -> None:
        if self.ramp is not None:
            if self.concurrency is not None or self.rate is not None:
                raise ValueError("a ramp replaces concurrency and rate: give neither with it")
            if not self.ramp or any(not d > 0 or c < 1 for d, c in self.ramp):
                raise ValueError(f"ramp phases must be (seconds > 0, clients >= 1), got {self.ramp!r}")
            return
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give exactly one of concurrency (closed loop) or rate (open loop)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")

    @property
    def clients(self) -> int | None:
        """Closed-loop clients at most (the ramp's peak), None for open loop."""
        return max(c for _, c in self.ramp) if self.ramp else self.concurrency

    def target_clients(self, t: float) -> int:
        """Closed-loop clients wanted at simulated time t."""
        if not self.ramp:
            return int(self.concurrency or 0)
        t = t % sum(d for d, _ in self.ramp)
        for d, c in self.ramp:
            if t < d:
                return c
            t -= d
        return self.ramp[-1][1]

    def next_phase(self, t: float) -> float:
        """The first ramp phase change after time t (inf without a ramp)."""
        if not self.ramp:
            return math.inf
        period = sum(d for d, _ in self.ramp)
        base, edge = math.floor(t / period) * period, 0.0
        for d, _ in self.ramp:
            edge += d
            if base + edge > t:
                return base + edge
        return base + period + self.ramp[0][0]

    @property
    def n_measured(self) -> int:
        return self.requests if self.requests is not None else max(64, 6 * (self.clients or 16))

    @property
    def n_warmup(self) -> int:
        # long enough for the estimators to learn every class from per-request feedback
        return self.warmup if self.warmup is not None else max(32, 2 * (self.clients or 16))


@dataclass
class SimResult:
    """Raw per-point outcome; `row()` turns it into the JSON row."""

    output_tokens: int
    window_s: float
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    proposers: np.ndarray  # per measured request: index into PROPOSERS
    gammas: np.ndarray
    draft_tokens: int
    accepted_tokens: int
    steps: int
    mean_running: float
    sim_time_s: float
    extra: dict = field(default_factory=dict)
    counters: StepCounters | None = None  # the engine's cumulative step telemetry at the end (with `telemetry`)

    def row(self) -> dict:
        n = len(self.e2e_s)
        mix = {p: float(np.mean(self.proposers == i)) if n else 0.0 for i, p in enumerate(PROPOSERS)}
        spec = self.gammas > 0
        return {
            "output_tokens_per_s": self.output_tokens / self.window_s if self.window_s > 0 else 0.0,
            "requests_per_s": n / self.window_s if self.window_s > 0 else 0.0,
            "tpot_ms_p50": _pct(self.tpot_s, 50) * 1e3,
            "tpot_ms_p99": _pct(self.tpot_s, 99) * 1e3,
            "ttft_ms_p50": _pct(self.ttft_s, 50) * 1e3,
            "ttft_ms_p99": _pct(self.ttft_s, 99) * 1e3,
            "e2e_s_p50": _pct(self.e2e_s, 50),
            "e2e_s_p99": _pct(self.e2e_s, 99),
            "speculation_share": float(spec.mean()) if n else 0.0,
            "mean_gamma": float(self.gammas.mean()) if n else 0.0,
            "mean_gamma_speculating": float(self.gammas[spec].mean()) if spec.any() else 0.0,
            "proposer_mix": mix,
            "acceptance_rate": self.accepted_tokens / self.draft_tokens if self.draft_tokens else None,
            "tokens_per_step": self.output_tokens / self.steps if self.steps else 0.0,
            "mean_running": float(self.mean_running),
            "requests": n,
            **self.extra,
        }


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


_M1, _M2, _M3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _uniforms(seed: int, rid: np.ndarray, step: np.ndarray, h: int, k: int) -> np.ndarray:
    """Counter-based uniforms in [0, 1): U[i, j, m] = hash(seed, rid[i], step[i] + j, m), shape [n, h, k]."""
    x = rid.astype(np.uint64) * _M1 ^ np.uint64(seed & 0xFFFFFFFFFFFFFFFF)  # [n]
    steps = (step.astype(np.uint64)[:, None] + np.arange(h, dtype=np.uint64)[None, :]) * _M2
    x = (x[:, None] ^ steps)[:, :, None] + (np.arange(1, k + 1, dtype=np.uint64) * _M3)[None, None, :]
    x = x ^ (x >> np.uint64(30))
    x = x * _M2
    x = x ^ (x >> np.uint64(27))
    x = x * _M3
    x = x ^ (x >> np.uint64(31))
    x = x * _M1
    x = x ^ (x >> np.uint64(29))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def accept_counts(u: np.ndarray, alpha: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Accepted draft tokens: the length of the leading run of u[..., k] < alpha[..., k] over k < gamma.

    `u` is [..., K]; `alpha` and `gamma[..., None]` broadcast against it.
    """
    k = np.arange(u.shape[-1])
    ok = (u < alpha) & (k < gamma[..., None])
    return np.cumprod(ok, axis=-1).sum(axis=-1)


def replay_accepts(runs: np.ndarray, slots: np.ndarray, pos: np.ndarray, gamma: np.ndarray, h: int) -> np.ndarray:
    """Accepted draft tokens of h consecutive steps from a trace: step j of slot i starts at its current output
    position and emits min(run, gamma + 1). `runs` is [n_slots, L]; slots, pos, gamma are [n]; out is [n, h]."""
    out = np.empty((len(slots), h), dtype=np.int64)
    pos = pos.astype(np.int64).copy()
    last = runs.shape[1] - 1
    for j in range(h):
        a = np.minimum(runs[slots, np.minimum(pos, last)], gamma + 1) - 1
        out[:, j] = a
        pos += a + 1
    return out


def _offering(w: WorkerState, req: TraceRequest, head: str | None = None) -> WorkerState:
    """The worker as offered to a traced request: only the proposers its trace has runs for ("hybrid" when it
    has both of its parts: n-gram and the hybrid's `head`)."""
    offered = tuple(p for p in w.proposers if p in req.accept_runs
                    or (p == "hybrid" and head is not None and "ngram" in req.accept_runs and head in req.accept_runs))
    return w if offered == w.proposers else dataclasses.replace(w, proposers=offered)


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
    rule = hybrid_rule or HybridRule()
    truth = truth or AlphaModel()
    replay = workload if isinstance(workload, TraceWorkload) else None
    hindsight = policy.hindsight if isinstance(policy, Oracle) else None
    if hindsight is not None and replay is None:
        from adaptspec.errors import ConfigError

        raise ConfigError("the oracle policy needs acceptance traces (--trace)", key="--policies",
                          value=policy.name)
    if alphas is None:
        alphas = AlphaTable()
    record = alphas.add if isinstance(alphas, AlphaTable) else None  # a fixed AlphaSource learns nothing
    base_worker = worker or WorkerState(name=WORKER, max_gamma=config.max_gamma)
    G = max(1, min(config.max_gamma, base_worker.max_gamma))
    # the gamma a traced request's n-gram runs are walked at when it ran without lookup (0: none are walked)
    shadow_k = min(SHADOW_K, G) if config.shadow and "ngram" in base_worker.proposers else 0
    hyb_head = getattr(cost, "hybrid_head", None) or next((p for p in ("eagle", "draft")
                                                           if p in base_worker.proposers), None)
    step_plan = policy.step_plan if isinstance(policy, OracleStep) else None
    # the per-step hybrid's rule walked along every other traced request's n-gram runs teaches its key (what its
    # lookup steps would have been: the lookup is scored on every request, as the n-gram shadow is)
    shadow_hybrid = config.shadow and "hybrid" in base_worker.proposers and hyb_head is not None

    closed = config.clients is not None
    n_warm, n_meas = config.n_warmup, config.n_measured
    n_target = n_warm + n_meas
    slots = min(config.max_batch, config.clients) if closed else config.max_batch
    n_pool = n_target + (config.clients or 0) + 8

    rng = np.random.default_rng([config.seed, 1])
    wl_cls, wl_prompt, wl_out = workload.sample(rng, n_pool)
    cls_names = workload.classes
    cls_global = np.array([_CLASS_INDEX[c] for c in cls_names])[wl_cls]
    if closed:
        clients = config.target_clients(0.0)  # closed-loop clients in the system (waiting or running)
        arrivals_q: deque[tuple[int, float]] = deque((i, 0.0) for i in range(clients))
        next_rid = clients
        open_arrivals = None
    else:
        gaps = rng.exponential(1.0 / config.rate, size=n_pool)
        open_arrivals = np.cumsum(gaps)
        arrivals_q = deque()
        next_rid = 0

    # per-slot state
    active = np.zeros(slots, dtype=bool)
    rid = np.zeros(slots, dtype=np.int64)
    cls_of = np.zeros(slots, dtype=np.int64)
    prop = np.zeros(slots, dtype=np.int64)
    gamma = np.zeros(slots, dtype=np.int64)  # the request's k (its highest gamma)
    # per-slot gamma by running batch: caps[s, b] = min(k, the schedule's cap at batch b) (b = 0..slots)
    caps = np.zeros((slots, slots + 1), dtype=np.int64)
    batch_sizes = np.arange(slots + 1)
    alpha = np.zeros((slots, G), dtype=np.float64)
    prefill_left = np.zeros(slots, dtype=np.int64)
    ctx = np.zeros(slots, dtype=np.int64)
    out_left = np.zeros(slots, dtype=np.int64)
    gen = np.zeros(slots, dtype=np.int64)
    nstep = np.zeros(slots, dtype=np.int64)  # decode steps taken (keys the acceptance coins)
    t_arr = np.zeros(slots)
    t_first = np.zeros(slots)
    d_tok = np.zeros(slots, dtype=np.int64)
    a_tok = np.zeros(slots, dtype=np.int64)
    pos_acc = np.zeros((slots, G), dtype=np.int64)  # accepted count per draft position
    decisions: list = [None] * slots  # the Decision of the request in each slot (for on_finish)
    feats_of: list = [None] * slots  # the features of the request in each slot (with a predictor)
    # per position, the drafts that reached it (the worker's tried_per_position): exact conditional rates
    # whatever length each draft had, as the proxy counts them from usage.speculative
    pos_try = np.zeros((slots, G), dtype=np.int64)
    # per-step plans (trace replay of "hybrid" and oracle-step, bench/stepwise.py)
    stepwise = np.zeros(slots, dtype=bool)
    lookup_always = np.zeros(slots, dtype=bool)
    plans: list[StepPlan | None] = [None] * slots
    lookup_steps = np.zeros(slots, dtype=np.int64)  # a per-step plan's drafting steps by source
    head_steps = np.zeros(slots, dtype=np.int64)
    # a hybrid's lookup steps apart (what its key counts): tried / accepted per position, drafted tokens, and the
    # output positions its head steps covered
    lk_try = np.zeros((slots, G), dtype=np.int64)
    lk_acc = np.zeros((slots, G), dtype=np.int64)
    lk_tok = np.zeros(slots, dtype=np.int64)
    hd_try = np.zeros((slots, G), dtype=np.int64)  # ... and its head steps'
    hd_acc = np.zeros((slots, G), dtype=np.int64)
    head_pos = np.zeros(slots, dtype=np.int64)
    m_lookup = m_head = m_plan_steps = m_plans = 0
    tele = _Telemetry(counters) if telemetry is not None or calibrator is not None else None
    step_costs = calibrator.costs() if calibrator is not None else None
    next_report = t0 + telemetry_interval_s
    # trace replay: the chosen proposer's run per output position of the request in each slot
    runs = np.ones((slots, replay.max_output if replay else 1), dtype=np.int64)
    free = list(range(slots - 1, -1, -1))
    prefilling: deque[int] = deque()
    traffic = TrafficShape()  # what the proxy learns from finished requests' usage, for the prefill term

    waiting: deque[tuple[int, float]] = deque()
    t = 0.0
    completed = 0
    steps = 0
    tokens_total = 0
    tokens_at_warm = 0
    t_warm: float | None = 0.0 if n_warm == 0 else None
    steps_at_warm = 0
    draft_total = acc_total = 0
    decode_steps_total = 0
    gamma_steps = np.zeros(G + 1, dtype=np.int64)  # measured requests' decode steps by the gamma they ran
    step_gamma = np.zeros((slots, G + 1), dtype=np.int64)
    running_area = 0.0
    m_ttft, m_tpot, m_e2e, m_prop, m_gamma = [], [], [], [], []
    n_arrived = 0
    n_active = 0

    while completed < n_target:
        # arrivals
        if closed:
            target = config.target_clients(t)
            while clients < target:  # the ramp steps up: new clients arrive now
                arrivals_q.append((next_rid, t))
                next_rid += 1
                clients += 1
            while arrivals_q:
                waiting.append(arrivals_q.popleft())
        else:
            while n_arrived < n_pool and open_arrivals[n_arrived] <= t:
                waiting.append((n_arrived, float(open_arrivals[n_arrived])))
                n_arrived += 1
            if n_active == 0 and not waiting:
                if n_arrived >= n_pool:
                    break
                t = float(open_arrivals[n_arrived])
                continue
        # admission: one decision per request, with the live occupancy
        while waiting and free:
            r, ta = waiting.popleft()
            s = free.pop()
            cname = cls_names[wl_cls[r]]
            state = _with_load(base_worker, n_active, len(waiting), traffic, step_costs)
            req = replay.request(r) if replay is not None else None
            if req is not None:
                state = _offering(state, req, hyb_head)
            feats_of[s] = None
            if hindsight is not None:
                on = np.flatnonzero(active)
                live = LiveBatch([replay.request(int(x)) for x in rid[on]], [PROPOSERS[x] for x in prop[on]],
                                 [int(x) for x in gamma[on]], float(ctx.sum()))
                d = hindsight(req, state, live)
            else:
                if predictor is not None and req is not None:
                    feats_of[s] = predictor.features(req)
                seen = predictor.view(alphas, feats_of[s], cname) if feats_of[s] is not None else alphas
                d = policy.decide(cname, [state], seen)
            g = min(d.max_k, G) if d.proposer != "none" else 0
            decisions[s] = d
            p = d.proposer if g > 0 else "none"
            plan = None
            if req is not None and g and p == "hybrid":
                if step_plan is not None:
                    plan = step_plan(req, state, G)
                elif hyb_head is not None:
                    plan = hybrid_plan(req, hyb_head, g, G, rule)
            plans[s] = plan
            stepwise[s] = plan is not None
            lookup_always[s] = plan is not None and plan.lookup_always
            lookup_steps[s] = head_steps[s] = 0
            if req is not None and g and plan is None:
                runs[s] = 1  # a proposer the trace lacks for this request never gets a draft accepted
                got = req.accept_runs.get(p)
                if got is not None:
                    runs[s, :len(got)] = got
            active[s] = True
            n_active += 1
            rid[s], cls_of[s], prop[s], gamma[s] = r, cls_global[r], _PROPOSER_INDEX[p], g
            caps[s] = g
            if g and d.schedule:
                edge = np.array([b for b, _ in d.schedule])
                row = np.searchsorted(edge, batch_sizes, side="left")  # first row with max_running_batch >= b
                cap = np.array([c for _, c in d.schedule] + [0])[row]
                caps[s] = np.minimum(g, cap)
            step_gamma[s] = 0
            alpha[s] = 0.0
            if g and plan is None:  # the synthetic workloads' acceptance (a per-step plan reads its trace)
                alpha[s, :g] = truth.curve(p, cname, g)
            prefill_left[s] = wl_prompt[r]
            ctx[s] = 0
            out_left[s] = wl_out[r]
            gen[s] = 0
            nstep[s] = 0
            t_arr[s] = ta
            d_tok[s] = a_tok[s] = 0
            pos_acc[s] = pos_try[s] = 0
            lk_try[s] = lk_acc[s] = hd_try[s] = hd_acc[s] = 0
            lk_tok[s] = head_pos[s] = 0
            prefilling.append(s)

        if n_active == 0:
            break  # nothing left to do (open loop drained)

        # the step's composition: every decoding request's gamma + 1 tokens, then prefill up to the budget
        dec_idx = np.flatnonzero(active & (prefill_left == 0))
        n_dec = len(dec_idx)
        g_dec = caps[dec_idx, min(n_active, slots)]  # this step's gamma: k capped by the running batch
        engine_until = math.inf
        engine_cap = None
        if engine_control is not None:  # the worker-wide cap (engine-side switch), applied to running requests
            engine_cap, engine_until = engine_control(t0 + t, tokens_total)
            if engine_cap is not None:
                g_dec = np.minimum(g_dec, engine_cap)
        if replay is not None and n_dec and stepwise[dec_idx].any():
            # per-step plans in the batch (bench/stepwise.py): each step's sources and lengths vary per request
            sw_rows = [int(r) for r in np.flatnonzero(stepwise[dec_idx])]
            dl0 = g_dec.copy()
            for r in sw_rows:
                sr_ = int(dec_idx[r])
                dl0[r] = plans[sr_].step(int(gen[sr_]), int(g_dec[r]), engine_cap)[1]
            decode_tokens = int(dl0.sum()) + n_dec
            chunks = _prefill_chunks(prefilling, prefill_left, config.max_batched_tokens - decode_tokens)
            prefill_tokens = sum(c for _, c in chunks)
            kv0 = int(ctx.sum()) + prefill_tokens
            H = 1
            if fast and not chunks:
                H = max(1, min(int(out_left[dec_idx].min()), _SPAN_ELEMENTS // (n_dec * G)))
            acc = np.zeros((n_dec, H), dtype=np.int64)
            dl = np.repeat(g_dec[:, None], H, axis=1)  # drafted tokens per request and step
            sr = np.repeat(np.where(g_dec > 0, prop[dec_idx], 0)[:, None], H, axis=1)  # their proposer
            plain = np.flatnonzero(~stepwise[dec_idx] & (g_dec > 0))
            if len(plain):
                acc[plain] = replay_accepts(runs, dec_idx[plain], gen[dec_idx[plain]], g_dec[plain], H)
            for r in sw_rows:
                sr_ = int(dec_idx[r])
                plan, pos, gc = plans[sr_], int(gen[sr_]), int(g_dec[r])
                for j in range(H):
                    src_, d_, e_ = plan.step(pos, gc, engine_cap)
                    sr[r, j], dl[r, j], acc[r, j] = src_, d_, e_ - 1
                    pos += e_
            la = lookup_always[dec_idx]  # the hybrid's lookup runs at every step
            cum = np.cumsum(acc + 1, axis=1)
            ol = out_left[dec_idx]
            fin = (cum >= ol[:, None]).any(axis=0)
            h = int(np.argmax(fin)) + 1 if fin.any() else H
            prev = cum - acc - 1  # [n_dec, H] tokens each request emitted in the span before step j
            prev_tot = prev.sum(axis=0)
            ctx_dec = ctx[dec_idx]
            next_arrival = float(open_arrivals[n_arrived]) if not closed and n_arrived < n_pool else math.inf
            if config.ramp:
                next_arrival = min(next_arrival, config.next_phase(t))
            next_arrival = min(next_arrival, engine_until - t0)
            for j in range(h):
                step_tokens = int(dl[:, j].sum()) + n_dec + prefill_tokens
                kv_j = kv0 + int(prev_tot[j])
                verify = cost.verify_time(step_tokens, kv_j)
                dt = verify
                drafting = []
                for pname in ("ngram", "draft", "eagle"):
                    mine = (sr[:, j] == _PROPOSER_INDEX[pname]) & (dl[:, j] > 0)
                    m = mine | la if pname == "ngram" else mine
                    if m.any():
                        gs = np.where(mine[m], dl[m, j], 0)
                        kvp = int(ctx_dec[m].sum() + prev[m, j].sum())
                        drafting.append((pname, gs, kvp, None))
                        dt += cost.draft_time(pname, gs, kvp, verify_s=verify)
                if tele is not None:
                    tele.step(dt, step_tokens, kv_j, drafting, n_active)
                running_area += dt * n_active
                t += dt
                steps += 1
                if j < h - 1 and (t >= next_arrival or (tele is not None and t0 + t >= next_report)):
                    h = j + 1
                    break
            emitted = np.minimum(cum[:, h - 1], ol)
            acc_h, dl_h, sr_h = acc[:, :h], dl[:, :h], sr[:, :h]
            kk = np.arange(G)
            reach = kk[None, None, :] < dl_h[:, :, None]  # [n_dec, h, G] draft position k was drafted
            pos_acc[dec_idx] += (acc_h[:, :, None] > kk[None, None, :]).sum(axis=1)
            pos_try[dec_idx] += ((acc_h[:, :, None] >= kk[None, None, :]) & reach).sum(axis=1)
            d_tok[dec_idx] += dl_h.sum(axis=1)
            a_tok[dec_idx] += acc_h.sum(axis=1)
            nstep[dec_idx] += h
            np.add.at(step_gamma, (np.repeat(dec_idx, h), dl_h.ravel()), 1)
            lk = (sr_h == _PROPOSER_INDEX["ngram"]) & (dl_h > 0)
            lookup_steps[dec_idx] += lk.sum(axis=1)
            head_steps[dec_idx] += ((sr_h != _PROPOSER_INDEX["ngram"]) & (dl_h > 0)).sum(axis=1)
            lk_acc[dec_idx] += ((acc_h[:, :, None] > kk[None, None, :]) & lk[:, :, None]).sum(axis=1)
            # as `walk_hybrid` counts: a lookup draft accepted to its length is tried one position on
            lk_try[dec_idx] += ((acc_h[:, :, None] >= kk[None, None, :]) & lk[:, :, None]).sum(axis=1)
            lk_tok[dec_idx] += np.where(lk, dl_h, 0).sum(axis=1)
            hd = ~lk[:, :, None] & reach
            hd_acc[dec_idx] += ((acc_h[:, :, None] > kk[None, None, :]) & hd).sum(axis=1)
            hd_try[dec_idx] += ((acc_h[:, :, None] >= kk[None, None, :]) & hd).sum(axis=1)
            head_pos[dec_idx] += np.where(lk, 0, acc_h + 1).sum(axis=1)
            gen[dec_idx] += emitted
            ctx[dec_idx] += emitted
            out_left[dec_idx] -= emitted
            emitted_step = int(emitted.sum())
        else:
            decode_tokens = int(g_dec.sum()) + n_dec
            chunks = _prefill_chunks(prefilling, prefill_left, config.max_batched_tokens - decode_tokens)
            prefill_tokens = sum(c for _, c in chunks)
            step_tokens = decode_tokens + prefill_tokens
            kv0 = int(ctx.sum()) + prefill_tokens  # ctx is 0 on free slots

            # A decode-only batch stays the same until its first completion (or, open loop, the next arrival):
            # draw that span's acceptance at once; the coins are keyed by (request, its step), so a span of H
            # steps gives exactly what H single steps would.
            H = 1
            if fast and not chunks and n_dec:
                H = max(1, min(int(out_left[dec_idx].min()), _SPAN_ELEMENTS // (n_dec * G)))
            acc = np.zeros((n_dec, H), dtype=np.int64)
            spec = g_dec > 0
            if spec.any():
                si, g_si = dec_idx[spec], g_dec[spec]
                if replay is not None:
                    acc[spec] = replay_accepts(runs, si, gen[si], g_si, H)
                else:
                    u = _uniforms(config.seed, rid[si], nstep[si], H, G)  # [n_spec, H, G]
                    acc[spec] = accept_counts(u, alpha[si][:, None, :], g_si[:, None])
            cum = np.cumsum(acc + 1, axis=1)  # [n_dec, H] tokens emitted by the end of each step
            ol = out_left[dec_idx]
            if n_dec:
                fin = (cum >= ol[:, None]).any(axis=0)
                h = int(np.argmax(fin)) + 1 if fin.any() else H
            else:
                h = 1
            prev_tot = (cum - acc - 1).sum(axis=0) if n_dec else np.zeros(1, dtype=np.int64)
            drafting = []
            for pname in ("ngram", "draft", "eagle"):
                m = (prop[dec_idx] == _PROPOSER_INDEX[pname]) & spec
                if m.any():
                    drafting.append((pname, g_dec[m], int(ctx[dec_idx[m]].sum()), (cum[m] - acc[m] - 1).sum(axis=0)))
            next_arrival = float(open_arrivals[n_arrived]) if not closed and n_arrived < n_pool else math.inf
            if config.ramp:  # a span stops at the ramp's next step, like at an arrival
                next_arrival = min(next_arrival, config.next_phase(t))
            next_arrival = min(next_arrival, engine_until - t0)  # and at the engine controller's next look
            for j in range(h):
                dt = 0.0
                verify = cost.verify_time(step_tokens, kv0 + int(prev_tot[j]))
                for pname, gs, kvp, prev in drafting:
                    dt += cost.draft_time(pname, gs, kvp + int(prev[j]), verify_s=verify)
                dt += verify
                if tele is not None:
                    tele.step(dt, step_tokens, kv0 + int(prev_tot[j]), drafting, n_active)
                running_area += dt * n_active
                t += dt
                steps += 1
                if j < h - 1 and (t >= next_arrival or (tele is not None and t0 + t >= next_report)):
                    h = j + 1  # stop the span at the arrival / the telemetry report (same coins either way)
                    break

            # apply the h steps: acceptance per token, emitted = accepted + 1 (the last one capped by max_tokens)
            emitted_step = 0
            if n_dec:
                emitted = np.minimum(cum[:, h - 1], ol)
                acc_h = acc[:, :h]
                if spec.any():
                    kk = np.arange(G)
                    pos_acc[si] += (acc_h[spec][:, :, None] > kk[None, None, :]).sum(axis=1)
                    pos_try[si] += ((acc_h[spec][:, :, None] >= kk[None, None, :])
                                    & (kk[None, None, :] < g_si[:, None, None])).sum(axis=1)
                d_tok[dec_idx] += g_dec * h
                a_tok[dec_idx] += acc_h.sum(axis=1)
                nstep[dec_idx] += h
                step_gamma[dec_idx, g_dec] += h
                gen[dec_idx] += emitted
                ctx[dec_idx] += emitted
                out_left[dec_idx] -= emitted
                emitted_step += int(emitted.sum())
        finished = [int(x) for x in dec_idx[out_left[dec_idx] <= 0]] if n_dec else []
        # prefill progress; completing prefill emits the first token
        for s, take in chunks:
            prefill_left[s] -= take
            ctx[s] += take
            if prefill_left[s] == 0:
                prefilling.remove(s)
                t_first[s] = t
                gen[s] = 1
                ctx[s] += 1
                out_left[s] -= 1
                emitted_step += 1
                if out_left[s] <= 0:
                    finished.append(s)
        tokens_total += emitted_step
        if on_step is not None:
            on_step(t0 + t)
        if tele is not None and t0 + t >= next_report:
            step_costs = _report(tele.snapshot(), t0 + t, telemetry, calibrator, step_costs)
            next_report = t0 + t + telemetry_interval_s

        # completions
        for s in finished:
            s = int(s)
            completed += 1
            pname = PROPOSERS[prop[s]]
            cname = CONTENT_CLASSES[cls_of[s]]
            # the worker's report (usage.speculative) and its shadow runs, learned as the proxy learns them
            top = int(np.flatnonzero(step_gamma[s])[-1]) if d_tok[s] > 0 else 0  # positions: its highest gamma
            parts = None  # a per-step plan reports its draft sources apart (a hindsight plan teaches no key)
            if stepwise[s]:
                parts = () if not lookup_always[s] or step_plan is not None else _hybrid_parts(
                    pname, hyb_head, top, lk_try[s], lk_acc[s], int(lk_tok[s]), int(lookup_steps[s]),
                    int(head_pos[s]), hd_try[s], hd_acc[s], int(d_tok[s] - lk_tok[s]))
            spec = Speculation(float(d_tok[s]), float(a_tok[s]), float(nstep[s]), _row(pos_try[s], top),
                               _row(pos_acc[s], top), idle_steps=float(step_gamma[s, 0]), parts=parts)
            traced = replay.request(int(rid[s])) if replay is not None and record and not stepwise[s] else None
            shadows = _shadows(traced, int(gen[s]), pname, shadow_k, rule if shadow_hybrid else None, G)
            outcome = Outcome(base_worker.name, pname, cname, int(gamma[s]), output_tokens=float(gen[s]),
                              prompt_tokens=float(wl_prompt[rid[s]]), speculation=spec, shadows=shadows,
                              worker_proposers=base_worker.proposers, features=feats_of[s], now=t0 + t)
            if on_outcome is not None:
                on_outcome(outcome)
            learn(outcome, alphas).apply(record, predictor.predictor if predictor is not None else None, traffic)
            if on_finish is not None:
                on_finish(decisions[s], int(rid[s]), t0 + t, int(gen[s]),
                          (t - t_first[s]) / (gen[s] - 1) if gen[s] > 1 else None)
            if t_warm is not None and n_warm < completed <= n_target:
                n_out = gen[s]
                m_ttft.append(t_first[s] - t_arr[s])
                m_e2e.append(t - t_arr[s])
                m_tpot.append((t - t_first[s]) / (n_out - 1) if n_out > 1 else 0.0)
                m_prop.append(prop[s])
                m_gamma.append(gamma[s])
                draft_total += int(d_tok[s])
                acc_total += int(a_tok[s])
                decode_steps_total += int(nstep[s])
                gamma_steps += step_gamma[s]
                if stepwise[s]:
                    m_plans += 1
                    m_lookup += int(lookup_steps[s])
                    m_head += int(head_steps[s])
                    m_plan_steps += int(nstep[s])
            active[s] = False
            ctx[s] = 0
            n_active -= 1
            free.append(s)
            if closed and clients > config.target_clients(t):
                clients -= 1  # the ramp steps down: this client leaves
            elif closed:
                arrivals_q.append((next_rid, t))
                next_rid += 1
            if t_warm is None and completed >= n_warm:
                t_warm, tokens_at_warm, steps_at_warm = t, tokens_total, steps

    t_warm = t_warm if t_warm is not None else 0.0
    if tele is not None:
        _report(tele.snapshot(), t0 + t, telemetry, calibrator, step_costs)
    return SimResult(
        output_tokens=tokens_total - tokens_at_warm,
        window_s=t - t_warm,
        ttft_s=np.asarray(m_ttft),
        tpot_s=np.asarray(m_tpot),
        e2e_s=np.asarray(m_e2e),
        proposers=np.asarray(m_prop, dtype=np.int64),
        gammas=np.asarray(m_gamma, dtype=np.int64),
        draft_tokens=draft_total,
        accepted_tokens=acc_total,
        steps=steps - steps_at_warm,
        mean_running=running_area / t if t > 0 else 0.0,
        sim_time_s=t,
        counters=tele.snapshot() if tele is not None else None,
        extra={"mean_step_gamma": draft_total / decode_steps_total if decode_steps_total else 0.0,
               "steps_by_gamma": {str(g): int(n) for g, n in enumerate(gamma_steps) if n},
               # per-step plans (hybrid, oracle-step): the share of their decode steps that drafted with lookup /
               # with the head (the rest drafted nothing), over the measured requests that ran one
               "hybrid_requests": m_plans,
               "hybrid_lookup_steps_share": m_lookup / m_plan_steps if m_plan_steps else None,
               "hybrid_head_steps_share": m_head / m_plan_steps if m_plan_steps else None},
    )


def _row(counts: np.ndarray, n: int) -> tuple[float, ...]:
    return tuple(float(x) for x in counts[:n])


def _hybrid_parts(hybrid: str, head: str | None, n: int, lk_try: np.ndarray, lk_acc: np.ndarray, lk_tokens: int,
                  lk_steps: int, head_positions: int, hd_try: np.ndarray, hd_acc: np.ndarray,
                  hd_tokens: int) -> tuple[Part, ...]:
    """A replayed hybrid request's report by source: its lookup steps for its own key (the form of `walk_hybrid`:
    steps = lookup steps + the output positions the head covered, drafts = lookup steps), its head steps for the
    head's key; `n` positions each."""
    lookup = Part(hybrid, float(lk_tokens), _row(lk_try, n), _row(lk_acc, n), float(lk_steps + head_positions),
                  float(lk_steps))
    return (lookup,) if head is None else (lookup, Part(head, float(hd_tokens), _row(hd_try, n), _row(hd_acc, n)))


def _shadows(req: TraceRequest | None, output_tokens: int, proposer: str, k: int, rule: HybridRule | None,
             bound: int) -> tuple[tuple[str, ShadowStats], ...]:
    """What the reference worker reports as `usage.speculative.shadow` for a traced request: its recorded n-gram
    runs walked at gamma k (0: not scored; control/shadow.py) and, with a hybrid `rule`, that rule's lookup steps
    along them (`walk_hybrid`)."""
    runs = req.accept_runs.get("ngram") if req is not None else None
    if runs is None:
        return ()
    out: list[tuple[str, ShadowStats]] = []
    if k and proposer != "ngram":
        out.append(("ngram", walk_runs(runs, output_tokens, min(k, req.max_k))))
    if rule is not None:
        out.append(("hybrid", walk_hybrid(runs, output_tokens, rule, min(bound, req.max_k))))
    return tuple(out)


def _report(snap: StepCounters, now: float, telemetry: Callable[[float, StepCounters], None] | None,
            calibrator: StepCalibrator | None, costs: CalibratedCosts | None) -> CalibratedCosts | None:
    """One telemetry report: to the callback, and to the calibrator (the proxy's scrape); its current fit."""
    if telemetry is not None:
        telemetry(now, snap)
    if calibrator is not None and calibrator.update(snap):
        return calibrator.costs()
    return costs


def _prefill_chunks(prefilling, prefill_left, budget: int) -> list[tuple[int, int]]:
    """(slot, tokens) of the prompts prefilled this step, in admission order, within the step's token budget left
    after its decode rows (chunked prefill)."""
    chunks: list[tuple[int, int]] = []
    budget = max(0, budget)
    for s in prefilling:
        if budget <= 0:
            break
        take = int(min(prefill_left[s], budget))
        chunks.append((s, take))
        budget -= take
    return chunks


class _Telemetry:
    """The simulated engine's step counters, accumulated in place (a StepCounters is made per report)."""

    def __init__(self, start: StepCounters | None) -> None:
        c = start or StepCounters()
        self.steps, self.seconds, self.tokens, self.kv = c.steps, c.step_seconds, c.batched_tokens, c.kv_tokens
        self.drafted, self.passes, self.calls = dict(c.drafted_tokens), dict(c.draft_passes), dict(c.draft_calls)
        self.requests = c.requests

    def step(self, seconds: float, tokens: int, kv_tokens: int, drafting: list, requests: int) -> None:
        self.steps += 1
        self.requests += requests
        self.seconds += seconds
        self.tokens += tokens
        self.kv += kv_tokens
        for pname, gs, _, _ in drafting:
            self.drafted[pname] = self.drafted.get(pname, 0.0) + float(gs.sum())
            if pname != "ngram":  # a draft model / head runs max(gamma) sequential batched passes
                self.passes[pname] = self.passes.get(pname, 0.0) + float(gs.max())
                self.calls[pname] = self.calls.get(pname, 0.0) + 1.0

    def snapshot(self) -> StepCounters:
        return StepCounters(self.steps, self.seconds, self.tokens, self.kv, dict(self.drafted), dict(self.passes),
                            self.requests, dict(self.calls))


def _with_load(w: WorkerState, running: int, waiting: int, traffic: TrafficShape | None = None,
               step_costs: CalibratedCosts | None = None) -> WorkerState:
    traffic = traffic or TrafficShape()
    return WorkerState(
        name=w.name, engine=w.engine, per_request=w.per_request, proposers=w.proposers, gamma=w.gamma,
        max_gamma=w.max_gamma, profile=w.profile, running=float(running), waiting=float(waiting),
        kv_usage=w.kv_usage, inflight=running + waiting, healthy=w.healthy,
        prefill_ratio=traffic.prefill_ratio, prompt_tokens=traffic.prompt_tokens, step_costs=step_costs,
    )


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
    engine costs (default: the same). Each point starts from a fresh policy object. Its AlphaTable carries over from the policy's previous
    point (`warm_start`, like a proxy that has been serving: estimates learnt at one load are valid at the
    next) or starts from the priors at every point (`warm_start=False`, a cold start each time).
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
    from adaptspec.control.config import EstimatorConfig
    from adaptspec.control.policy import build_policy
    from adaptspec.control.profiles import load_profile
    from adaptspec.errors import ConfigError

    belief = load_profile(profile)  # the belief must load too
    truth_name = truth_profile or profile
    cost = ProfileCost(load_profile(truth_name))
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
    for spec in specs:
        if getattr(spec.policy, "proposer", None) == "hybrid" and "hybrid" not in worker.proposers:
            raise ConfigError("a hybrid policy needs the worker to offer it: add hybrid to --proposers (with --trace)",
                              key="--policies", value=spec.name)
    truth = AlphaModel(aliases=cost.truth_aliases())
    rows = []
    with progress_bar(len(specs) * len(loads), "simulate", progress) as bar:
        for spec in specs:
            clock = _SimClock()  # the estimator's time-based forgetting runs on simulated seconds
            alphas = AlphaTable.from_config(spec.estimator or EstimatorConfig(), clock=clock)
            oracle = ((OracleStep if spec.stepwise else Oracle)(cost, max_gamma)
                      if spec.hindsight else None)  # memoised per request: one per sweep
            predicting = not spec.hindsight and isinstance(workload, TraceWorkload) and spec.predicting()
            predictor = TracePredictor() if predicting else None  # learns on, point to point, like the table
            counters = None
            calibrator = StepCalibrator(belief) if calibrate else None
            for kind, value in loads:
                bar.set_postfix_str(f"{spec.name} {kind}={value if kind == 'ramp' else format(value, 'g')}")
                cfg = SimConfig(concurrency=int(value) if kind == "concurrency" else None,
                                rate=value if kind == "rate" else None,
                                ramp=tuple(map(tuple, value)) if kind == "ramp" else None, requests=requests, warmup=warmup,
                                max_batch=max_batch, max_gamma=max_gamma, seed=seed, shadow=shadow)
                policy = oracle or build_policy(spec.policy)
                if not warm_start:
                    clock = _SimClock()
                    alphas = AlphaTable.from_config(spec.estimator or EstimatorConfig(), clock=clock)
                    calibrator = StepCalibrator(belief) if calibrate else None
                    predictor = TracePredictor() if predicting else None
                res = simulate(policy, cost, workload, cfg, truth=truth, alphas=alphas, worker=worker,
                               on_step=clock.set, t0=clock.t, telemetry=telemetry, counters=counters,
                               calibrator=calibrator, predictor=predictor, hybrid_rule=hybrid_rule)
                point = res.counters.since(counters or StepCounters()) if res.counters is not None else None
                counters = res.counters
                row = {"policy": spec.name, kind: value, "profile": profile, "workload": workload.name,
                       "seed": seed}
                if truth_profile is not None:
                    row["truth_profile"] = truth_profile
                row = {**row, **res.row()}
                if calibrator is not None:
                    row["calibration"] = calibration_summary(calibrator.costs(), cost.profile, point)
                rows.append(row)
                bar.update(1)
    return rows


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
