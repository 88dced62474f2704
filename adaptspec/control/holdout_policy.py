"""`Experimented`: any policy, wrapped in a request-level holdout, switchback windows and the guard.

    policy = Experimented(build_inner(cfg), cfg.holdout, cfg.switchback, clock=time.time)
    d = policy.decide(cls, workers, alphas)        # the inner decision, or off (reason holdout / guard /
                                                   # switchback), with `d.assignment` set
    policy.record(d, output_tokens, decode_s_per_token, now)   # when the request has finished
    policy.report()                                 # the realized-speedup tables (control/holdout.py)

Engine-side switch: a worker that can cap its running requests' gamma at once (`policy.engine_switch(worker)`,
from its advertised capability) gets its switchback regime as that cap instead of at admission:
`cap = policy.engine_tick(worker, now, output_tokens_total)` at each look at the worker (the proxy's scrape;
cap 0 in an off window, None otherwise) hands the worker's step-level token counter to the windows and says
what the worker should apply to every running request from its next step on. Its decisions keep the policy's
proposer (the cap turns it off while the window is off, and it drafts again in the next policy window), its
windows are measured from their start (+ washout) with the worker's own token count, and a request counts as
evidence of its regime only if no switch happened on its worker during its life. Other workers keep the
admission path (regime per new request; windows measured once the other regime's requests have drained).

The statistics, the assignment and the guard rules are in `control/holdout.py`. `clock` gives the switchback
windows their time: wall time in the proxy (replicas agree on the window), the simulated clock in the
simulator. The capabilities `PolicyBase` declares (e.g. `default_profile`), and any attribute the wrapper does
not have, are the inner policy's; `experiment` is the wrapper itself.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from adaptspec.control.config import HoldoutConfig, SwitchbackConfig
from adaptspec.control.holdout import (
    CONTROL,
    TREATED,
    Assignment,
    BlockAssigner,
    Guard,
    Interval,
    RegimeOccupancy,
    RegimeRequests,
    RequestBook,
    SwitchbackBook,
    load_bucket,
    switchback_rows,
    table_rows,
)
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.types import AlphaSource, Decision, WorkerState


class Experimented(PolicyBase):
    def __init__(self, inner, holdout: HoldoutConfig | None, switchback: SwitchbackConfig | None,
                 clock: Callable[[], float] = time.time) -> None:
        self.inner, self.holdout, self.switchback, self.clock = inner, holdout, switchback, clock
        self.name = inner.name
        self.assigner = BlockAssigner(holdout.share, holdout.seed) if holdout is not None else None
        self.requests = RequestBook(holdout.max_samples if holdout is not None else 2000)
        self.windows = (SwitchbackBook(switchback.share, switchback.window_s, switchback.washout_s, switchback.seed,
                                       settle_s=switchback.settle_s, cooldown_s=switchback.cooldown_s,
                                       order=switchback.order)
                        if switchback is not None else None)
        self.regimes = RegimeRequests(first_look=switchback.first_look) if switchback is not None else None
        self.occupancy = RegimeOccupancy(switchback.inflight_s) if switchback is not None else None
        self._evidence: dict[str, dict[str, Interval]] = {}  # bucket -> {"windows" | "requests": latest}
        self.guard = Guard()
        self.engine_workers: set[str] = set()  # workers that apply the regime to running requests (engine_tick)
        self._applied: dict[str, tuple[str, float]] = {}  # worker -> (regime it runs, since when)
        self._bucket_of: dict[str, str] = {}  # worker -> load bucket of its latest decision
        # decisions the experiment changed, by (content_class, load_bucket, arm, reason)
        self.changed: Counter[tuple[str, str, str, str]] = Counter()
        self._closed = 0

    # the capabilities PolicyBase declares are the inner policy's; the experiment is this object
    @property
    def uses_alphas(self) -> bool:
        return self.inner.uses_alphas

    @property
    def default_profile(self):
        return self.inner.default_profile

    @property
    def contrast_probe(self):
        return self.inner.contrast_probe

    @property
    def gamma_probe(self):
        return self.inner.gamma_probe

    @property
    def rules(self):
        return self.inner.rules

    @property
    def rates(self):
        return self.inner.rates

    @property
    def experiment(self) -> Experimented:
        return self

    # -- decision ----------------------------------------------------------------------------------
    def decide(self, content_class: str, workers: Sequence[WorkerState], alphas: AlphaSource) -> Decision:
        d = self.inner.decide(content_class, workers, alphas)
        state = next((x for x in workers if x.name == d.worker), None)
        load = (state.load if state is not None else 0.0) + 1.0
        bucket = load_bucket(load)
        arm = d.proposer if d.max_k > 0 else "none"  # a schedule may start at gamma 0 and draft later
        key = (content_class, bucket, arm)
        window = regime = None
        group, why = TREATED, ""
        now = 0.0
        seq, clean = 0, False
        plan = self.switchback.control_plan if self.switchback is not None else None
        # an engine-side switch can only cap gamma (off): a fixed control plan is switched at admission
        engine = d.worker in self.engine_workers and plan is None
        if self.windows is not None:
            now = self.clock()
            window = self.windows.index(now)
            guarded = bucket in self.guard.buckets
            self._bucket_of[d.worker] = bucket
            regime = self.windows.regime(d.worker, window, guarded=guarded)
            w = self.windows.open(d.worker, window, regime, now,
                                  next_regime=self.windows.regime(d.worker, window + 1, guarded=guarded),
                                  pure_since=None if engine else self.occupancy.pure_since(d.worker, regime, now),
                                  engine=engine)
            w.loads.append(load)
            if regime == "off" and (arm != "none" or plan is not None):  # a control plan replaces every decision
                group, why = CONTROL, ("guard" if bucket in self.guard.buckets else "switchback")
            seq, clean = self.occupancy.admit(d.worker, regime, now)
        if arm != "none" and regime != "off" and self.assigner is not None:
            pick = self.assigner.pick(key, self._block(key, d.expected_speedup))
            if key in self.guard.strata:  # guarded: off, but for a randomized share that keeps the evidence fresh
                group, why = (TREATED, "guard probe") if pick else (CONTROL, "guard")
            elif pick:
                group, why = CONTROL, "holdout"
        a = Assignment(content_class, bucket, arm, group, d.worker, window, regime, why, load, now, seq, clean)
        if engine and regime == "off" and group == CONTROL:  # the worker's cap keeps it off while the window is
            self.changed[(content_class, bucket, arm, why)] += 1
            # the decision keeps its plan, which the worker does not run: no evidence
            return replace(d, reason=f"{why} off (window {window}, engine); {d.reason}", assignment=a, priced=None)
        if group == CONTROL and plan is not None and why != "holdout":
            self.changed[(content_class, bucket, arm, why)] += 1
            return replace(d, **self._control_fields(plan, state),
                           reason=f"{why} control {self.switchback.control} (window {window}); policy: {d.reason}",
                           assignment=a)
        if group == CONTROL:
            self.changed[(content_class, bucket, arm, why)] += 1
            shown = {"switchback": f"switchback off (window {window})", "guard": "guard: realized speedup < 1",
                     "holdout": "holdout"}[why]
            return replace(d, proposer="none", gamma=0, schedule=None, reason=f"{shown}; policy: {d.reason}",
                           expected_speedup=1.0, assignment=a)
        if why:
            self.changed[(content_class, bucket, arm, why)] += 1
            return replace(d, reason=f"{why}; {d.reason}", assignment=a)
        return replace(d, assignment=a)

    @staticmethod
    def _control_fields(plan: tuple[str, int], worker: WorkerState | None) -> dict:
        """The decision fields of the fixed control plan on `worker` (off where it does not offer the proposer)."""
        p, g = plan
        if worker is not None and p not in worker.proposers:
            return {"proposer": "none", "gamma": 0, "schedule": None, "expected_speedup": 1.0}
        g = min(g, worker.max_gamma) if worker is not None else g
        return {"proposer": p, "gamma": g, "schedule": None, "priced": None}  # a control request is no evidence

    def _block(self, key: tuple[str, str, str], expected: float) -> int | None:
        """Block size for the stratum: the share's, or larger where the share is one of decode time
        (`share_of: time`) or `max_cost` caps what the holdout may cost. Speedup S: the realized estimate once
        there is one, else the policy's expectation.

        share_of time: held requests run S times longer, so a request share p holds p S / (p S + 1 - p) of the
        time; p = share / (S (1 - share) + share) makes that `share`, and the cost (closed loop, where time
        is throughput) 1 - 1 / (1 + p (S - 1)) = share (1 - 1/S)."""
        cfg = self.holdout
        if cfg.max_cost is None and cfg.share_of == "requests":
            return None
        iv = self.requests.interval(key, cfg.confidence, cfg.min_samples)
        s = iv.estimate if iv is not None else expected
        if s <= 1.0:
            return None
        share = cfg.share
        if cfg.share_of == "time":
            share = share / (s * (1.0 - share) + share)
        if cfg.max_cost is not None:
            share = min(share, cfg.max_cost / ((s - 1.0) * (1.0 - cfg.max_cost)))
        return max(1, round(1.0 / share))

    # -- outcome -----------------------------------------------------------------------------------
    def record(self, decision: Decision, output_tokens: float, decode_s_per_token: float | None,
               now: float | None = None) -> None:
        """A request finished: its output tokens and decode seconds per token (None when unknown, e.g. a
        non-streamed reply or a single token)."""
        a = decision.assignment
        if not isinstance(a, Assignment):
            return
        now = self.clock() if now is None else now
        switched = False  # engine-side switch: a switch on its worker during its life (its time mixes regimes)
        if self.windows is not None and a.window is not None:
            alone = self.occupancy.finish(a.worker, a.regime, a.seq, a.decided_at, a.clean, now)
            if a.worker in self.engine_workers:
                applied = self._applied.get(a.worker)
                switched = applied is None or applied[0] != a.regime or applied[1] > a.decided_at
                alone = not switched
            pure = alone and (a.regime == "off" or a.group == TREATED) and decode_s_per_token is not None \
                and decode_s_per_token > 0
            self.windows.finish(a.worker, a.window, output_tokens, decode_s_per_token, now)
            if pure and self.switchback.guard_requests:
                self.regimes.observe(a.bucket, a.regime, decode_s_per_token)
            self._update_bucket_guard(now, a.bucket if pure and self.switchback.guard_requests else None)
        if a.arm == "none" or a.regime == "off" or switched or decode_s_per_token is None or decode_s_per_token <= 0:
            return  # request-level strata compare requests that shared the policy's windows only
        key = (a.content_class, a.bucket, a.arm)
        self.requests.observe(key, a.group, decode_s_per_token)
        if self.holdout is not None and self.holdout.guard:
            self.guard.update(key, self.requests.interval(key, self.holdout.confidence, self.holdout.min_samples),
                              self.guard.strata)

    # -- engine-side switch ---------------------------------------------------------------------------
    def engine_switch(self, worker: str, supported: bool = True) -> None:
        """Whether `worker` applies a regime to its running requests (`engine_tick` sets it); without, the
        switch happens at admission and the windows wait for the drain."""
        (self.engine_workers.add if supported else self.engine_workers.discard)(worker)

    def engine_regime(self, worker: str, now: float) -> str | None:
        """The regime the worker should run now ('policy' | 'off'; None without switchback)."""
        if self.windows is None:
            return None
        guarded = self._bucket_of.get(worker) in self.guard.buckets
        return self.windows.regime(worker, self.windows.index(now), guarded=guarded)

    def engine_tick(self, worker: str, now: float, output_tokens: float | None) -> int | None:
        """One look at an engine-switched worker: its cumulative output tokens (step-level; None: unknown)
        feed the windows; returns the gamma cap it should apply to every running request from its next step
        (0: the window is off; None: no cap, the policy's own per-request choice)."""
        regime = self.engine_regime(worker, now)
        if regime is None or worker not in self.engine_workers or self.switchback.control_plan is not None:
            return None
        window = self.windows.index(now)
        guarded = self._bucket_of.get(worker) in self.guard.buckets
        self.windows.open(worker, window, regime, now,
                          next_regime=self.windows.regime(worker, window + 1, guarded=guarded), engine=True)
        if output_tokens is not None:
            self.windows.note_tokens(worker, now, output_tokens)
        if self._applied.get(worker, ("", 0.0))[0] != regime:
            self._applied[worker] = (regime, now)
        self._update_bucket_guard(now)
        return 0 if regime == "off" else None

    def _update_bucket_guard(self, now: float, bucket: str | None = None) -> None:
        """The load buckets' guard from two kinds of evidence: the windows' throughput (each new closed window)
        and the requests of the windows' measured parts (`bucket`: one just arrived; sequential looks).
        Engaged when either interval lies below 1; released by the windows only (their estimate back at or
        above 1): where batches mix across a switch the requests' ratio is pulled towards speculation (its
        requests run beside cheaper plain ones, the plain ones beside drafting), so it may engage - late - but
        must not release."""
        sb, cfg = self.windows, self.switchback
        conf = self.holdout.confidence if self.holdout else 0.95
        n = sum(len(sb.windows(b)) for b in sb.buckets())
        changed = set()
        if n != self._closed:
            self._closed = n
            for b in sb.buckets():
                res = sb.interval(b, conf, cfg.min_windows)
                if res is not None:
                    self._evidence.setdefault(b, {})["windows"] = res["throughput"]
                    changed.add(b)
        if bucket is not None and bucket not in self.guard.buckets:
            iv = self.regimes.look(bucket, conf, 2)
            if iv is not None:
                self._evidence.setdefault(bucket, {})["requests"] = iv
                changed.add(bucket)
        if not cfg.guard:
            return
        for b in changed:
            ev = self._evidence[b]
            if b in self.guard.buckets:
                self.guard.update(b, ev.get("windows"), self.guard.buckets)
            else:
                self.guard.update(b, min(ev.values(), key=lambda x: x.high), self.guard.buckets)

    def adopt(self, previous: PolicyBase | None) -> None:
        """Keep the evidence of the experiment this one replaces (a config reload): the request book and the
        guard when the holdout's confidence and sample rules are unchanged, the windows when the switchback's
        timing is. Requests decided before the reload still report to the old object, and are lost."""
        self.inner.adopt(previous)  # what the inner policy keeps (the hybrid's rule book)
        if not isinstance(previous, Experimented):
            return
        self.engine_workers = previous.engine_workers  # what the workers can do is no part of the config
        h0, h1 = previous.holdout, self.holdout
        if h0 is not None and h1 is not None and (h0.confidence, h0.min_samples, h0.max_samples) == (
                h1.confidence, h1.min_samples, h1.max_samples):
            self.requests, self.changed = previous.requests, previous.changed
            self.guard.strata = previous.guard.strata
        s0, s1 = previous.switchback, self.switchback
        if s0 is not None and s1 is not None and s0.model_dump(exclude={"guard", "min_windows"}) == s1.model_dump(
                exclude={"guard", "min_windows"}):
            self.windows, self.regimes, self._evidence = previous.windows, previous.regimes, previous._evidence
            self.occupancy, self._applied, self._bucket_of = previous.occupancy, previous._applied, previous._bucket_of
            self.guard.buckets = previous.guard.buckets

    # -- report ------------------------------------------------------------------------------------
    def report(self) -> dict:
        conf = self.holdout.confidence if self.holdout is not None else 0.95
        min_n = self.holdout.min_samples if self.holdout is not None else 2
        if self.windows is not None:
            self.windows.close_all(self.clock())
        return {
            "policy": self.name,
            "confidence": conf,
            "holdout": self.holdout.model_dump() if self.holdout is not None else None,
            "switchback": self.switchback.model_dump() if self.switchback is not None else None,
            # what the control windows ran: "off", or the fixed plan the policy is hedged against
            "control": self.switchback.control if self.switchback is not None else "off",
            "requests": table_rows(self.requests, self.guard, conf, min_n),
            "windows": switchback_rows(self.windows, self.guard, conf, self.switchback.min_windows)
            if self.windows is not None else [],
            "guard": {"strata": [list(k) for k in sorted(self.guard.strata)], "buckets": sorted(self.guard.buckets),
                      "engaged": self.guard.engaged, "released": self.guard.released,
                      "evidence": {b: {k: iv.as_dict() for k, iv in ev.items()} for b, ev in sorted(self._evidence.items())}},
            "changed": [{"content_class": c, "load_bucket": b, "arm": arm, "reason": r, "count": n}
                        for (c, b, arm, r), n in sorted(self.changed.items())],
        }
