"""One load point of the simulator as a state object: `_Simulation` admits requests, steps the engine, finishes
requests and accounts the measured ones (the model it plays is documented in bench/simulator.py, whose
`simulate` builds one and runs it).

The state is the running batch, one row per slot (bench/sim_slots.py `_Slots`: the request in the slot, its
decision and its counts so far), the arrival queues, the simulated clock and the measured window's totals. A
run is the loop `arrive` -> `admit` -> `step` -> `finish` (which learns from each finished request and
`account`s the measured ones) until the point's completions are done; `result` then makes the SimResult.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from adaptspec.bench.oracle import LiveBatch, Oracle, OracleStep
from adaptspec.bench.sim_core import (
    _CLASS_INDEX,
    _PROPOSER_INDEX,
    _SPAN_ELEMENTS,
    WORKER,
    SimConfig,
    SimResult,
    _hybrid_parts,
    _offering,
    _prefill_chunks,
    _report,
    _row,
    _shadows,
    _Telemetry,
    _uniforms,
    _with_load,
    accept_counts,
    replay_accepts,
)
from adaptspec.bench.sim_slots import _Slots
from adaptspec.bench.stepcost import StepCost
from adaptspec.bench.stepwise import HybridRule, hybrid_plan
from adaptspec.bench.trace_predict import TracePredictor
from adaptspec.bench.traces import TraceRequest, TraceWorkload
from adaptspec.bench.workloads import AlphaModel, Workload
from adaptspec.control.calibration import StepCalibrator
from adaptspec.control.estimators import AlphaTable, TrafficShape
from adaptspec.control.hybrid_rule import DEFAULT_RULE
from adaptspec.control.learn import Outcome, Speculation, learn
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.shadow import SHADOW_K
from adaptspec.control.telemetry import StepCounters
from adaptspec.control.types import CONTENT_CLASSES, PROPOSERS, Decision, Policy, WorkerState


class _Simulation:
    """One load point (`simulate`'s arguments, same names): the engine's state and the loop that runs it."""

    def __init__(self, policy: Policy, cost: StepCost, workload: Workload, config: SimConfig, *,
                 truth: AlphaModel | None, alphas: object | None, worker: WorkerState | None,
                 on_step: Callable[[float], None] | None, fast: bool, t0: float,
                 telemetry: Callable[[float, StepCounters], None] | None, telemetry_interval_s: float,
                 counters: StepCounters | None, calibrator: StepCalibrator | None,
                 on_finish: Callable[[object, int, float, int, float | None], None] | None,
                 predictor: TracePredictor | None,
                 engine_control: Callable[[float, int], tuple[int | None, float]] | None,
                 hybrid_rule: HybridRule | None, on_outcome: Callable[[Outcome], None] | None) -> None:
        self.policy, self.cost, self.config, self.fast, self.t0 = policy, cost, config, fast, t0
        self.on_step, self.on_finish, self.on_outcome = on_step, on_finish, on_outcome
        self.engine_control = engine_control
        self.telemetry, self.telemetry_interval_s, self.calibrator = telemetry, telemetry_interval_s, calibrator
        self.predictor = predictor
        self.rule = hybrid_rule or HybridRule()
        self.fixed_rule = hybrid_rule is not None  # `--hybrid-rule`: every hybrid request runs it (no rule book)
        self.truth = truth or AlphaModel()
        self.replay = workload if isinstance(workload, TraceWorkload) else None
        self.hindsight = policy.hindsight if isinstance(policy, Oracle) else None
        if self.hindsight is not None and self.replay is None:
            from adaptspec.errors import ConfigError

            raise ConfigError("the oracle policy needs acceptance traces (--trace)", key="--policies",
                              value=policy.name)
        if alphas is None:
            alphas = AlphaTable()
        self.alphas = alphas
        self.record = alphas.add if isinstance(alphas, AlphaTable) else None  # a fixed AlphaSource learns nothing
        self._offer(worker or WorkerState(name=WORKER, max_gamma=config.max_gamma))
        self._draw(workload)
        self.sl = _Slots(self.n_slots, self.G, self.replay.max_output if self.replay else 1)
        self.tele = _Telemetry(counters) if telemetry is not None or calibrator is not None else None
        self.step_costs = calibrator.costs() if calibrator is not None else None
        self.next_report = t0 + telemetry_interval_s
        self.free = list(range(self.n_slots - 1, -1, -1))
        self.prefilling: deque[int] = deque()
        self.traffic = TrafficShape()  # what the proxy learns from finished requests' usage, for the prefill term
        self.waiting: deque[tuple[int, float]] = deque()
        self.t = 0.0
        self.completed = self.steps = self.tokens_total = self.n_arrived = self.n_active = 0
        # the measured window: where it starts, and the totals of the requests completed inside it
        self.t_warm: float | None = 0.0 if self.n_warm == 0 else None
        self.tokens_at_warm = self.steps_at_warm = 0
        self.draft_total = self.acc_total = self.decode_steps_total = 0
        self.gamma_steps = np.zeros(self.G + 1, dtype=np.int64)  # measured requests' decode steps by gamma
        self.running_area = 0.0
        self.m_ttft, self.m_tpot, self.m_e2e, self.m_prop, self.m_gamma = [], [], [], [], []
        self.m_lookup = self.m_head = self.m_plan_steps = self.m_plans = 0

    def _offer(self, base_worker: WorkerState) -> None:
        """What the worker offers and how far a request may draft on it (its gamma bound G, the shadows)."""
        config = self.config
        self.base_worker = base_worker
        self.G = G = max(1, min(config.max_gamma, base_worker.max_gamma))
        # the gamma a traced request's n-gram runs are walked at when it ran without lookup (0: none are walked)
        self.shadow_k = min(SHADOW_K, G) if config.shadow and "ngram" in base_worker.proposers else 0
        self.hyb_head = getattr(self.cost, "hybrid_head", None) or next(
            (p for p in ("eagle", "draft") if p in base_worker.proposers), None)
        self.step_plan = self.policy.step_plan if isinstance(self.policy, OracleStep) else None
        # the per-step hybrid's rule walked along every other traced request's n-gram runs teaches its key (what
        # its lookup steps would have been: the lookup is scored on every request, as the n-gram shadow is)
        self.shadow_hybrid = config.shadow and "hybrid" in base_worker.proposers and self.hyb_head is not None
        # a cost-model policy runs each class's hybrid requests with the rule its walks price best (its `rules`,
        # fed below as the proxy feeds it from the worker's reports; the decision names the rule)
        self.book = self.policy.rules if isinstance(self.policy, PolicyBase) and self.shadow_hybrid and \
            not self.fixed_rule and self.replay is not None else None
        self.m_rules: dict[str, int] = {}

    def _draw(self, workload: Workload) -> None:
        """The point's requests (class, prompt and output lengths) and, open loop, their arrival times."""
        config = self.config
        self.closed = closed = config.clients is not None
        self.n_warm, n_meas = config.n_warmup, config.n_measured
        self.n_target = self.n_warm + n_meas
        self.n_slots = min(config.max_batch, config.clients) if closed else config.max_batch
        self.n_pool = self.n_target + (config.clients or 0) + 8
        rng = np.random.default_rng([config.seed, 1])
        self.wl_cls, self.wl_prompt, self.wl_out = workload.sample(rng, self.n_pool)
        self.cls_names = workload.classes
        self.cls_global = np.array([_CLASS_INDEX[c] for c in self.cls_names])[self.wl_cls]
        if closed:
            self.clients = config.target_clients(0.0)  # closed-loop clients in the system (waiting or running)
            self.arrivals_q: deque[tuple[int, float]] = deque((i, 0.0) for i in range(self.clients))
            self.next_rid = self.clients
            self.open_arrivals = None
        else:
            gaps = rng.exponential(1.0 / config.rate, size=self.n_pool)
            self.open_arrivals = np.cumsum(gaps)
            self.arrivals_q = deque()
            self.next_rid = 0

    # ---- the loop --------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run the point to its last completion (or, open loop, until its arrivals drain)."""
        while self.completed < self.n_target:
            if not self.arrive():
                break
            self.admit()
            if self.n_active == 0:
                break  # nothing left to do (open loop drained)
            self.finish(self.step())
        return self.result()

    def arrive(self) -> bool:
        """Queue the requests that have arrived by now; open loop with nothing to run, jump to the next
        arrival. False when none is left to come (open loop drained)."""
        if self.closed:
            target = self.config.target_clients(self.t)
            while self.clients < target:  # the ramp steps up: new clients arrive now
                self.arrivals_q.append((self.next_rid, self.t))
                self.next_rid += 1
                self.clients += 1
            while self.arrivals_q:
                self.waiting.append(self.arrivals_q.popleft())
            return True
        while True:
            while self.n_arrived < self.n_pool and self.open_arrivals[self.n_arrived] <= self.t:
                self.waiting.append((self.n_arrived, float(self.open_arrivals[self.n_arrived])))
                self.n_arrived += 1
            if self.n_active or self.waiting:
                return True
            if self.n_arrived >= self.n_pool:
                return False
            self.t = float(self.open_arrivals[self.n_arrived])

    # ---- admission -------------------------------------------------------------------------------------

    def admit(self) -> None:
        """Seat waiting requests while the batch has free slots: one decision per request, with the live
        occupancy (running, waiting) and the calibrated step costs as the policy would see them."""
        while self.waiting and self.free:
            r, ta = self.waiting.popleft()
            s = self.free.pop()
            cname = self.cls_names[self.wl_cls[r]]
            state = _with_load(self.base_worker, self.n_active, len(self.waiting), self.traffic, self.step_costs)
            req = self.replay.request(r) if self.replay is not None else None
            if req is not None:
                state = _offering(state, req, self.hyb_head)
            d = self._decide(s, req, state, cname)
            self._seat(s, r, ta, d, req, state, cname)

    def _decide(self, s: int, req: TraceRequest | None, state: WorkerState, cname: str) -> Decision:
        """The policy's decision for the request entering slot s (the oracle's with hindsight of the batch)."""
        sl = self.sl
        sl.feats[s] = None
        if self.hindsight is not None:
            on = np.flatnonzero(sl.active)
            live = LiveBatch([self.replay.request(int(x)) for x in sl.rid[on]],
                             [PROPOSERS[x] for x in sl.prop[on]], [int(x) for x in sl.gamma[on]],
                             float(sl.ctx.sum()))
            return self.hindsight(req, state, live)
        if self.predictor is not None and req is not None:
            sl.feats[s] = self.predictor.features(req)
        seen = self.predictor.view(self.alphas, sl.feats[s], cname) if sl.feats[s] is not None else self.alphas
        return self.policy.decide(cname, [state], seen)

    def _seat(self, s: int, r: int, ta: float, d: Decision, req: TraceRequest | None, state: WorkerState,
              cname: str) -> None:
        """Put request r (arrived at ta) in slot s as decided: its proposer, gamma caps, acceptance source."""
        sl, G = self.sl, self.G
        g = min(d.max_k, G) if d.proposer != "none" else 0
        sl.decisions[s] = d
        p = d.proposer if g > 0 else "none"
        plan = None
        if req is not None and g and p == "hybrid":
            if self.step_plan is not None:
                plan = self.step_plan(req, state, G)
            elif self.hyb_head is not None:
                plan = hybrid_plan(req, self.hyb_head, g, G, self._rule(d))
        sl.plans[s] = plan
        sl.stepwise[s] = plan is not None
        sl.lookup_always[s] = plan is not None and plan.lookup_always
        sl.lookup_steps[s] = sl.head_steps[s] = 0
        if req is not None and g and plan is None:
            sl.runs[s] = 1  # a proposer the trace lacks for this request never gets a draft accepted
            got = req.accept_runs.get(p)
            if got is not None:
                sl.runs[s, :len(got)] = got
        sl.active[s] = True
        self.n_active += 1
        sl.rid[s], sl.cls_of[s], sl.prop[s], sl.gamma[s] = r, self.cls_global[r], _PROPOSER_INDEX[p], g
        sl.caps[s] = g
        if g and d.schedule:
            edge = np.array([b for b, _ in d.schedule])
            row = np.searchsorted(edge, sl.batch_sizes, side="left")  # first row with max_running_batch >= b
            cap = np.array([c for _, c in d.schedule] + [0])[row]
            sl.caps[s] = np.minimum(g, cap)
        sl.reset(s, self.wl_prompt[r], self.wl_out[r], ta)
        if g and plan is None:  # the synthetic workloads' acceptance (a per-step plan reads its trace)
            sl.alpha[s, :g] = self.truth.curve(p, cname, g)
        self.prefilling.append(s)

    # ---- engine steps ----------------------------------------------------------------------------------

    def step(self) -> list[int]:
        """One engine step, or a span of decode-only steps drawn at once; the slots whose requests finished.

        The step's composition: every decoding request's gamma + 1 tokens (capped by the running batch's
        schedule and the engine-wide cap), then prefill up to the token budget."""
        sl = self.sl
        dec_idx = np.flatnonzero(sl.active & (sl.prefill_left == 0))
        n_dec = len(dec_idx)
        g_dec = sl.caps[dec_idx, min(self.n_active, self.n_slots)]  # this step's gamma: k capped by the batch
        engine_until = math.inf
        engine_cap = None
        if self.engine_control is not None:  # the worker-wide cap (engine-side switch), on running requests
            engine_cap, engine_until = self.engine_control(self.t0 + self.t, self.tokens_total)
            if engine_cap is not None:
                g_dec = np.minimum(g_dec, engine_cap)
        if self.replay is not None and n_dec and sl.stepwise[dec_idx].any():
            chunks, emitted = self._step_planned(dec_idx, g_dec, engine_cap, engine_until)
        else:
            chunks, emitted = self._step_plain(dec_idx, g_dec, engine_until)
        finished = [int(x) for x in dec_idx[sl.out_left[dec_idx] <= 0]] if n_dec else []
        emitted += self._prefill(chunks, finished)
        self.tokens_total += emitted
        if self.on_step is not None:
            self.on_step(self.t0 + self.t)
        if self.tele is not None and self.t0 + self.t >= self.next_report:
            self.step_costs = _report(self.tele.snapshot(), self.t0 + self.t, self.telemetry, self.calibrator,
                                      self.step_costs)
            self.next_report = self.t0 + self.t + self.telemetry_interval_s
        return finished

    def _span(self, chunks: list, dec_idx: np.ndarray) -> int:
        """Steps drawn at once. A decode-only batch stays the same until its first completion (or, open loop,
        the next arrival): its acceptance is drawn for that span at once; the coins are keyed by (request, its
        step), so a span of H steps gives exactly what H single steps would."""
        if self.fast and not chunks and len(dec_idx):
            return max(1, min(int(self.sl.out_left[dec_idx].min()), _SPAN_ELEMENTS // (len(dec_idx) * self.G)))
        return 1

    def _span_stop(self, engine_until: float) -> float:
        """The simulated time a span stops at: the next open-loop arrival, the ramp's next phase, the engine
        controller's next look."""
        config = self.config
        pending = not self.closed and self.n_arrived < self.n_pool
        next_arrival = float(self.open_arrivals[self.n_arrived]) if pending else math.inf
        if config.ramp:  # a span stops at the ramp's next step, like at an arrival
            next_arrival = min(next_arrival, config.next_phase(self.t))
        return min(next_arrival, engine_until - self.t0)  # and at the engine controller's next look

    def _tick(self, dt: float, tokens: int, kv: int, drafting: list, stop_at: float) -> bool:
        """Advance the clock by one step of dt seconds; True when a span must end after it (an arrival or a
        telemetry report is due; same coins either way)."""
        if self.tele is not None:
            self.tele.step(dt, tokens, kv, drafting, self.n_active)
        self.running_area += dt * self.n_active
        self.t += dt
        self.steps += 1
        return self.t >= stop_at or (self.tele is not None and self.t0 + self.t >= self.next_report)

    def _step_plain(self, dec_idx: np.ndarray, g_dec: np.ndarray, engine_until: float) -> tuple[list, int]:
        """A step (span) where every decoding request drafts its gamma with its own proposer: acceptance from the
        trace's runs or the synthetic coins. Returns the prefill chunks and the tokens emitted by decoding."""
        sl, G, n_dec = self.sl, self.G, len(dec_idx)
        decode_tokens = int(g_dec.sum()) + n_dec
        chunks = _prefill_chunks(self.prefilling, sl.prefill_left, self.config.max_batched_tokens - decode_tokens)
        prefill_tokens = sum(c for _, c in chunks)
        step_tokens = decode_tokens + prefill_tokens
        kv0 = int(sl.ctx.sum()) + prefill_tokens  # ctx is 0 on free slots
        H = self._span(chunks, dec_idx)
        acc = np.zeros((n_dec, H), dtype=np.int64)
        spec = g_dec > 0
        if spec.any():
            si, g_si = dec_idx[spec], g_dec[spec]
            if self.replay is not None:
                acc[spec] = replay_accepts(sl.runs, si, sl.gen[si], g_si, H)
            else:
                u = _uniforms(self.config.seed, sl.rid[si], sl.nstep[si], H, G)  # [n_spec, H, G]
                acc[spec] = accept_counts(u, sl.alpha[si][:, None, :], g_si[:, None])
        cum = np.cumsum(acc + 1, axis=1)  # [n_dec, H] tokens emitted by the end of each step
        ol = sl.out_left[dec_idx]
        if n_dec:
            fin = (cum >= ol[:, None]).any(axis=0)
            h = int(np.argmax(fin)) + 1 if fin.any() else H
        else:
            h = 1
        prev_tot = (cum - acc - 1).sum(axis=0) if n_dec else np.zeros(1, dtype=np.int64)
        drafting = []
        for pname in ("ngram", "draft", "eagle"):
            m = (sl.prop[dec_idx] == _PROPOSER_INDEX[pname]) & spec
            if m.any():
                drafting.append((pname, g_dec[m], int(sl.ctx[dec_idx[m]].sum()), (cum[m] - acc[m] - 1).sum(axis=0)))
        stop_at = self._span_stop(engine_until)
        for j in range(h):
            dt = 0.0
            verify = self.cost.verify_time(step_tokens, kv0 + int(prev_tot[j]))
            for pname, gs, kvp, prev in drafting:
                dt += self.cost.draft_time(pname, gs, kvp + int(prev[j]), verify_s=verify)
            dt += verify
            if self._tick(dt, step_tokens, kv0 + int(prev_tot[j]), drafting, stop_at) and j < h - 1:
                h = j + 1  # stop the span at the arrival / the telemetry report
                break
        if not n_dec:
            return chunks, 0
        return chunks, sl.tally_plain(dec_idx, g_dec, acc[:, :h], np.minimum(cum[:, h - 1], ol))

    def _step_planned(self, dec_idx: np.ndarray, g_dec: np.ndarray, engine_cap: int | None,
                      engine_until: float) -> tuple[list, int]:
        """A step (span) with per-step plans in the batch (bench/stepwise.py): each step's sources and lengths
        vary per request. Returns the prefill chunks and the tokens emitted by decoding."""
        sl, n_dec = self.sl, len(dec_idx)
        sw_rows = [int(r) for r in np.flatnonzero(sl.stepwise[dec_idx])]
        dl0 = g_dec.copy()
        for r in sw_rows:
            sr_ = int(dec_idx[r])
            dl0[r] = sl.plans[sr_].step(int(sl.gen[sr_]), int(g_dec[r]), engine_cap)[1]
        decode_tokens = int(dl0.sum()) + n_dec
        chunks = _prefill_chunks(self.prefilling, sl.prefill_left, self.config.max_batched_tokens - decode_tokens)
        prefill_tokens = sum(c for _, c in chunks)
        kv0 = int(sl.ctx.sum()) + prefill_tokens
        H = self._span(chunks, dec_idx)
        acc = np.zeros((n_dec, H), dtype=np.int64)
        dl = np.repeat(g_dec[:, None], H, axis=1)  # drafted tokens per request and step
        sr = np.repeat(np.where(g_dec > 0, sl.prop[dec_idx], 0)[:, None], H, axis=1)  # their proposer
        plain = np.flatnonzero(~sl.stepwise[dec_idx] & (g_dec > 0))
        if len(plain):
            acc[plain] = replay_accepts(sl.runs, dec_idx[plain], sl.gen[dec_idx[plain]], g_dec[plain], H)
        for r in sw_rows:
            sr_ = int(dec_idx[r])
            plan, pos, gc = sl.plans[sr_], int(sl.gen[sr_]), int(g_dec[r])
            for j in range(H):
                src_, d_, e_ = plan.step(pos, gc, engine_cap)
                sr[r, j], dl[r, j], acc[r, j] = src_, d_, e_ - 1
                pos += e_
        cum = np.cumsum(acc + 1, axis=1)
        ol = sl.out_left[dec_idx]
        fin = (cum >= ol[:, None]).any(axis=0)
        h = int(np.argmax(fin)) + 1 if fin.any() else H
        h = self._planned_steps(dec_idx, acc, cum, dl, sr, h, prefill_tokens, kv0, self._span_stop(engine_until))
        return chunks, sl.tally_planned(dec_idx, acc[:, :h], dl[:, :h], sr[:, :h], np.minimum(cum[:, h - 1], ol))

    def _planned_steps(self, dec_idx: np.ndarray, acc: np.ndarray, cum: np.ndarray, dl: np.ndarray, sr: np.ndarray,
                       h: int, prefill_tokens: int, kv0: int, stop_at: float) -> int:
        """Time the first h steps of a planned span, each priced in the groups of the sources its requests
        draft with (and the hybrid's lookup at every step); the steps actually taken."""
        sl, n_dec = self.sl, len(dec_idx)
        la = sl.lookup_always[dec_idx]  # the hybrid's lookup runs at every step
        prev = cum - acc - 1  # [n_dec, H] tokens each request emitted in the span before step j
        prev_tot = prev.sum(axis=0)
        ctx_dec = sl.ctx[dec_idx]
        for j in range(h):
            step_tokens = int(dl[:, j].sum()) + n_dec + prefill_tokens
            kv_j = kv0 + int(prev_tot[j])
            verify = self.cost.verify_time(step_tokens, kv_j)
            dt = verify
            drafting = []
            for pname in ("ngram", "draft", "eagle"):
                mine = (sr[:, j] == _PROPOSER_INDEX[pname]) & (dl[:, j] > 0)
                m = mine | la if pname == "ngram" else mine
                if m.any():
                    gs = np.where(mine[m], dl[m, j], 0)
                    kvp = int(ctx_dec[m].sum() + prev[m, j].sum())
                    drafting.append((pname, gs, kvp, None))
                    dt += self.cost.draft_time(pname, gs, kvp, verify_s=verify)
            if self._tick(dt, step_tokens, kv_j, drafting, stop_at) and j < h - 1:
                return j + 1
        return h

    def _prefill(self, chunks: list[tuple[int, int]], finished: list[int]) -> int:
        """Prefill progress; completing a prompt's prefill emits its first token (a one-token reply finishes
        there: onto `finished`). Returns the first tokens emitted."""
        sl, emitted = self.sl, 0
        for s, take in chunks:
            sl.prefill_left[s] -= take
            sl.ctx[s] += take
            if sl.prefill_left[s] == 0:
                self.prefilling.remove(s)
                sl.t_first[s] = self.t
                sl.gen[s] = 1
                sl.ctx[s] += 1
                sl.out_left[s] -= 1
                emitted += 1
                if sl.out_left[s] <= 0:
                    finished.append(s)
        return emitted

    # ---- completions -----------------------------------------------------------------------------------

    def finish(self, finished: list[int]) -> None:
        """Completions: each request is learned from, accounted (if measured) and its slot freed."""
        for s in finished:
            s = int(s)
            self.completed += 1
            self._learn(s)
            self.account(s)
            self._release(s)

    def _rule(self, d: Decision) -> HybridRule:
        """The rule a hybrid request runs with: the one its decision names (the rule book's choice for its
        class), else the worker's own (the fixed rule)."""
        if self.book is None:
            return self.rule
        name = d.hybrid_rule or DEFAULT_RULE
        if self.t_warm is not None:
            self.m_rules[name] = self.m_rules.get(name, 0) + 1
        return self.book.rules[name] if d.hybrid_rule else self.rule

    def _shadow_rule(self, cname: str) -> HybridRule | None:
        """The rule walked along a request not run with the hybrid to teach the hybrid's key: the one its class's
        hybrid requests run with now."""
        if not self.shadow_hybrid:
            return None
        return self.rule if self.book is None else self.book.rules[self.book.chosen(self.base_worker.name, cname)]

    def _walk_rules(self, rid: int, generated: int, cname: str) -> None:
        """Every rule of the book walked along a finished traced request's n-gram runs (`RuleBook.observe`)."""
        req = self.replay.request(rid) if self.replay is not None else None
        runs = req.accept_runs.get("ngram") if req is not None else None
        if runs is not None:
            walks = self.book.walks(runs, generated, min(self.G, req.max_k))
            self.book.observe(self.base_worker.name, cname, walks)

    def _learn(self, s: int) -> None:
        """The worker's report of slot s's request (usage.speculative) and its shadow runs, learned as the proxy
        learns them; then the on_outcome / on_finish callbacks."""
        sl = self.sl
        pname = PROPOSERS[sl.prop[s]]
        cname = CONTENT_CLASSES[sl.cls_of[s]]
        top = int(np.flatnonzero(sl.step_gamma[s])[-1]) if sl.d_tok[s] > 0 else 0  # positions: its highest gamma
        parts = None  # a per-step plan reports its draft sources apart (a hindsight plan teaches no key)
        if sl.stepwise[s]:
            parts = () if not sl.lookup_always[s] or self.step_plan is not None else _hybrid_parts(
                pname, self.hyb_head, top, sl.lk_try[s], sl.lk_acc[s], int(sl.lk_tok[s]), int(sl.lookup_steps[s]),
                int(sl.head_pos[s]), sl.hd_try[s], sl.hd_acc[s], int(sl.d_tok[s] - sl.lk_tok[s]))
        spec = Speculation(float(sl.d_tok[s]), float(sl.a_tok[s]), float(sl.nstep[s]), _row(sl.pos_try[s], top),
                           _row(sl.pos_acc[s], top), idle_steps=float(sl.step_gamma[s, 0]), parts=parts)
        scored = self.replay is not None and self.record and not sl.stepwise[s]
        traced = self.replay.request(int(sl.rid[s])) if scored else None
        shadows = _shadows(traced, int(sl.gen[s]), pname, self.shadow_k, self._shadow_rule(cname), self.G)
        if self.book is not None and self.record is not None:
            self._walk_rules(int(sl.rid[s]), int(sl.gen[s]), cname)
        outcome = Outcome(self.base_worker.name, pname, cname, int(sl.gamma[s]), output_tokens=float(sl.gen[s]),
                          prompt_tokens=float(self.wl_prompt[sl.rid[s]]), speculation=spec, shadows=shadows,
                          worker_proposers=self.base_worker.proposers, features=sl.feats[s], now=self.t0 + self.t)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        predictor = self.predictor.predictor if self.predictor is not None else None
        learn(outcome, self.alphas).apply(self.record, predictor, self.traffic)
        d, rates = sl.decisions[s], self.policy.rates if isinstance(self.policy, PolicyBase) else None
        if rates is not None and d.rate_evidence and sl.gen[s] > 1:  # as the proxy's report.record_rate
            rates.observe(self.base_worker.name, cname, pname, float(sl.gen[s] - 1), self.t - float(sl.t_first[s]),
                          d.expected_speedup)
        if self.on_finish is not None:
            self.on_finish(sl.decisions[s], int(sl.rid[s]), self.t0 + self.t, int(sl.gen[s]),
                           (self.t - sl.t_first[s]) / (sl.gen[s] - 1) if sl.gen[s] > 1 else None)

    def account(self, s: int) -> None:
        """Slot s's finished request into the measured totals, if it completed inside the measured window."""
        if self.t_warm is None or not (self.n_warm < self.completed <= self.n_target):
            return
        sl = self.sl
        n_out = sl.gen[s]
        self.m_ttft.append(sl.t_first[s] - sl.t_arr[s])
        self.m_e2e.append(self.t - sl.t_arr[s])
        self.m_tpot.append((self.t - sl.t_first[s]) / (n_out - 1) if n_out > 1 else 0.0)
        self.m_prop.append(sl.prop[s])
        self.m_gamma.append(sl.gamma[s])
        self.draft_total += int(sl.d_tok[s])
        self.acc_total += int(sl.a_tok[s])
        self.decode_steps_total += int(sl.nstep[s])
        self.gamma_steps += sl.step_gamma[s]
        if sl.stepwise[s]:
            self.m_plans += 1
            self.m_lookup += int(sl.lookup_steps[s])
            self.m_head += int(sl.head_steps[s])
            self.m_plan_steps += int(sl.nstep[s])

    def _release(self, s: int) -> None:
        """Free slot s; closed loop, its client comes back with a new request (or leaves, as the ramp steps down);
        the measured window opens after the warm-up completions."""
        self.sl.active[s] = False
        self.sl.ctx[s] = 0
        self.n_active -= 1
        self.free.append(s)
        if self.closed and self.clients > self.config.target_clients(self.t):
            self.clients -= 1  # the ramp steps down: this client leaves
        elif self.closed:
            self.arrivals_q.append((self.next_rid, self.t))
            self.next_rid += 1
        if self.t_warm is None and self.completed >= self.n_warm:
            self.t_warm, self.tokens_at_warm, self.steps_at_warm = self.t, self.tokens_total, self.steps

    def result(self) -> SimResult:
        """The point's SimResult over the measured window (and the final telemetry report)."""
        t = self.t
        t_warm = self.t_warm if self.t_warm is not None else 0.0
        if self.tele is not None:
            _report(self.tele.snapshot(), self.t0 + t, self.telemetry, self.calibrator, self.step_costs)
        m_plan_steps, decode_steps = self.m_plan_steps, self.decode_steps_total
        return SimResult(
            output_tokens=self.tokens_total - self.tokens_at_warm,
            window_s=t - t_warm,
            ttft_s=np.asarray(self.m_ttft),
            tpot_s=np.asarray(self.m_tpot),
            e2e_s=np.asarray(self.m_e2e),
            proposers=np.asarray(self.m_prop, dtype=np.int64),
            gammas=np.asarray(self.m_gamma, dtype=np.int64),
            draft_tokens=self.draft_total,
            accepted_tokens=self.acc_total,
            steps=self.steps - self.steps_at_warm,
            mean_running=self.running_area / t if t > 0 else 0.0,
            sim_time_s=t,
            counters=self.tele.snapshot() if self.tele is not None else None,
            extra={"mean_step_gamma": self.draft_total / decode_steps if decode_steps else 0.0,
                   "steps_by_gamma": {str(g): int(n) for g, n in enumerate(self.gamma_steps) if n},
                   # per-step plans (hybrid, oracle-step): the share of their decode steps that drafted with
                   # lookup / with the head (the rest drafted nothing), over the measured requests that ran one
                   "hybrid_requests": self.m_plans,
                   "hybrid_lookup_steps_share": self.m_lookup / m_plan_steps if m_plan_steps else None,
                   "hybrid_head_steps_share": self.m_head / m_plan_steps if m_plan_steps else None,
                   # the rules the measured window's hybrid requests ran with (`RuleBook`; absent: a fixed rule)
                   **({"hybrid_rules": dict(self.m_rules)} if self.m_rules else {})},
        )
