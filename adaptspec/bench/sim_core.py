"""The simulator's parts that hold no load point's state: its configuration and result, the counter-based
acceptance coins and trace replay's accepted counts, and the small helpers one engine step uses (chunked
prefill, the worker as the policy sees it, the engine's step telemetry, what a finished request reports).

The engine itself is bench/sim_engine.py (`_Simulation`), the public entry bench/simulator.py (`simulate`,
`sweep`), which also documents the model these parts play.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from adaptspec.bench.stepwise import HybridRule, walk_hybrid
from adaptspec.bench.traces import TraceRequest
from adaptspec.control.calibration import CalibratedCosts, StepCalibrator
from adaptspec.control.estimators import TrafficShape
from adaptspec.control.learn import Part
from adaptspec.control.shadow import ShadowStats, walk_runs
from adaptspec.control.telemetry import StepCounters
from adaptspec.control.types import CONTENT_CLASSES, PROPOSERS, WorkerState

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
