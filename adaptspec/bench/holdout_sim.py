"""Holdouts and switchbacks in the simulator, checked against the truth the simulator knows.

    python -m adaptspec.bench.holdout_sim coverage --profile h200-llama3-70b --seeds 20
    python -m adaptspec.bench.holdout_sim switchback --profile h200-llama3-70b --concurrency 128 --seeds 20
    python -m adaptspec.bench.holdout_sim cost --profile h200-llama3-70b --concurrency 1,64 --seeds 20
    python -m adaptspec.bench.holdout_sim guard --profile h200-llama3-70b --concurrency 128 --seeds 20
    (any of them with --trace benchmarks/traces/tiny-shipped.jsonl --profile cpu-tiny: trace replay)

The policy runs wrapped in `control/holdout_policy.Experimented` exactly as in the proxy (its decisions through
`simulate`'s policy, its feedback through `simulate(on_finish=...)`, its switchback windows on the simulated
clock). The truth is a paired run of the same requests (same seed: same requests, same acceptance coins):

* request level: every request once more with the decision the policy made for it (`Replay`) and once with
  speculation off; the true speedup of a stratum is the geometric mean over its requests of
  decode-time-per-token off / with speculation, which the holdout's interval should cover;
* system level: the policy alone vs off on the same requests; the ratio of output tokens/s is what the
  switchback interval should cover;
* cost: output tokens/s with the holdout vs the policy alone;
* guard: the simulated time at which the guard first holds off the load bucket of a forced always-on policy
  at a concurrency where it is slower than off.
Every command prints one JSON line per seed and a summary line (stdout).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass

from adaptspec.bench.simulator import (
    WORKER,
    PolicySpec,
    ProfileCost,
    SimConfig,
    _SimClock,
    parse_policy,
    simulate,
)
from adaptspec.bench.workloads import AlphaModel, get_workload
from adaptspec.control.config import EstimatorConfig, HoldoutConfig, SwitchbackConfig
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.holdout import CONTROL, load_bucket
from adaptspec.control.holdout_policy import Experimented
from adaptspec.control.policy import build_policy
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.profiles import load_profile
from adaptspec.control.types import Decision


class Recorder(PolicyBase):
    """The inner policy, remembering every decision in call order (= request id order: FIFO admission); what it
    learns from its requests (its realized-rate corrections) is the inner policy's."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.decisions = inner, inner.name, []
        self.rates = inner.rates if isinstance(inner, PolicyBase) else None

    def decide(self, content_class, workers, alphas) -> Decision:
        d = self.inner.decide(content_class, workers, alphas)
        self.decisions.append(d)
        return d


class Replay(PolicyBase):
    """The recorded decisions again, in the same order (the paired 'with speculation' run): it learns nothing."""

    def __init__(self, decisions: list[Decision]) -> None:
        self.name, self._d, self._i = "replay", decisions, 0

    def decide(self, content_class, workers, alphas) -> Decision:
        d = self._d[self._i] if self._i < len(self._d) else Decision(workers[0].name, "none", 0, content_class,
                                                                      "replay", "past the recording")
        self._i += 1
        return d


@dataclass
class Setup:
    profile: str
    workload: object
    concurrency: int
    seed: int
    requests: int
    warmup: int
    max_gamma: int = 8
    engine_switch: bool = False  # the worker applies the switchback regime to running requests (EngineLooks)
    look_s: float = 1.0  # how often the proxy looks at it (its scrape interval)
    truth_profile: str | None = None  # what the simulated engine costs (default: `profile`, what policies believe)


def _workload(trace: str | None, name: str):
    if trace:
        from adaptspec.bench.traces import TraceWorkload

        return TraceWorkload.from_files([trace])
    return get_workload(name)


def _run(policy, s: Setup, finish=None, clock: _SimClock | None = None, engine=None):
    cost = ProfileCost(load_profile(s.truth_profile or s.profile))
    worker = cost.worker(max_gamma=s.max_gamma, profile=s.profile)
    clock = clock or _SimClock()
    alphas = AlphaTable.from_config(EstimatorConfig(), clock=clock)
    cfg = SimConfig(concurrency=s.concurrency, requests=s.requests, warmup=s.warmup, max_gamma=s.max_gamma,
                    seed=s.seed)
    return simulate(policy, cost, s.workload, cfg, truth=AlphaModel(aliases=cost.truth_aliases()), alphas=alphas,
                    worker=worker, on_step=clock.set, on_finish=finish, engine_control=engine)


class EngineLooks:
    """The proxy's looks at an engine-switched worker, on the simulated clock: every `every_s` (its scrape) it
    reads the worker's cumulative output tokens, hands them to the experiment and applies the cap it returns to
    the worker's running requests until the next look (so a switch lands up to one look after the window's
    boundary, as in the proxy)."""

    def __init__(self, policy: Experimented, worker: str = WORKER, every_s: float = 1.0) -> None:
        self.policy, self.worker, self.every_s = policy, worker, every_s
        self.cap: int | None = None
        self.next_at = 0.0
        self.switches = 0
        self.guarded_at: float | None = None  # the first look that found the guard engaged

    def __call__(self, now: float, output_tokens: int) -> tuple[int | None, float]:
        if now >= self.next_at:
            cap = self.policy.engine_tick(self.worker, now, float(output_tokens))
            self.switches += cap != self.cap
            self.cap = cap
            self.next_at = now + self.every_s
            if self.guarded_at is None and (self.policy.guard.buckets or self.policy.guard.strata):
                self.guarded_at = now
        return self.cap, self.next_at


def run_experiment(spec: PolicySpec, s: Setup, holdout: HoldoutConfig | None,
                   switchback: SwitchbackConfig | None):
    """The policy with the experiment: (SimResult, Experimented, Recorder, {rid: (decision, decode)}, t_guard)."""
    clock = _SimClock()
    rec = Recorder(build_policy(spec.policy))
    pol = Experimented(rec, holdout, switchback, clock=clock)
    seen: dict[int, tuple[Decision, float | None]] = {}
    guard_at: list[float] = []

    def finish(d, rid, now, tokens, decode):
        pol.record(d, tokens, decode, now)
        seen[rid] = (d, decode)
        if not guard_at and (pol.guard.buckets or pol.guard.strata):
            guard_at.append(float(now))

    engine = None
    if s.engine_switch and switchback is not None:
        pol.engine_switch(WORKER)
        engine = EngineLooks(pol, WORKER, s.look_s)
    res = _run(pol, s, finish, clock, engine)
    times = guard_at + ([engine.guarded_at] if engine is not None and engine.guarded_at is not None else [])
    return res, pol, rec, seen, (min(times) if times else None)


def _decode_by_rid(policy, s: Setup) -> tuple[object, dict[int, float | None]]:
    out: dict[int, float | None] = {}
    res = _run(policy, s, lambda d, rid, now, tokens, decode: out.__setitem__(rid, decode))
    return res, out


def coverage(spec: PolicySpec, s: Setup, holdout: HoldoutConfig) -> list[dict]:
    """Per stratum with an interval: the holdout's interval and the paired true speedup of its requests."""
    _, pol, rec, seen, _ = run_experiment(spec, s, holdout, None)
    _, spec_d = _decode_by_rid(Replay(rec.decisions), s)
    _, off_d = _decode_by_rid(build_policy(parse_policy("off", s.profile).policy), s)
    logs: dict[tuple, list[float]] = {}
    for rid, (d, _) in seen.items():
        a = d.assignment
        on, off = spec_d.get(rid), off_d.get(rid)
        if a is None or a.arm == "none" or not on or not off:
            continue
        logs.setdefault((a.content_class, a.bucket, a.arm), []).append(math.log(off / on))
    rows = []
    for r in pol.report()["requests"]:
        key = (r["content_class"], r["load_bucket"], r["arm"])
        if r["speedup"] is None or key not in logs:
            continue
        truth = math.exp(sum(logs[key]) / len(logs[key]))
        rows.append({**r, "truth": truth, "covered": bool(r["low"] <= truth <= r["high"])})
    return rows


def switchback_check(spec: PolicySpec, s: Setup, sb: SwitchbackConfig) -> dict:
    """The switchback interval vs the true throughput ratio, both after the start-up transient: the truth
    over the runs' measured part (after `s.warmup` completions), the windows that start after the
    experiment run's warmup."""
    res, pol, _, _, _ = run_experiment(spec, s, None, sb.model_copy(update={"guard": False}))
    alone = _run(build_policy(spec.policy), s)
    off = _run(build_policy(parse_policy("off", s.profile).policy), s)
    truth = float(alone.row()["output_tokens_per_s"] / off.row()["output_tokens_per_s"])
    bucket = load_bucket(s.concurrency)
    since = res.sim_time_s - res.window_s  # when the warmup ended
    pol.windows.close_all(res.sim_time_s)
    got = pol.windows.interval(bucket, 0.95, sb.min_windows, since=since)
    ws = [w for w in pol.windows.windows(bucket) if w.start >= since]
    thr = got["throughput"] if got else None
    return {"truth": truth, "bucket": bucket, "estimate": thr.estimate if thr else None,
            "low": thr.low if thr else None, "high": thr.high if thr else None,
            "windows_policy": sum(w.regime == "policy" for w in ws), "windows_off": sum(w.regime == "off" for w in ws),
            "covered": bool(thr is not None and thr.low <= truth <= thr.high), "sim_time_s": float(res.sim_time_s),
            "warmup_s": float(since)}


def cost_check(spec: PolicySpec, s: Setup, holdout: HoldoutConfig) -> dict:
    res, pol, _, seen, _ = run_experiment(spec, s, holdout.model_copy(update={"guard": False}), None)
    alone = _run(build_policy(spec.policy), s)
    a, b = float(alone.row()["output_tokens_per_s"]), float(res.row()["output_tokens_per_s"])
    held = sum(1 for d, _ in seen.values() if d.assignment is not None and d.assignment.group == CONTROL)
    return {"policy_tok_s": a, "with_holdout_tok_s": b, "cost": 1.0 - b / a, "held": held, "requests": len(seen)}


def guard_check(spec: PolicySpec, s: Setup, holdout: HoldoutConfig, sb: SwitchbackConfig) -> dict:
    res, pol, _, _, t_guard = run_experiment(spec, s, holdout, sb)
    off = _run(build_policy(parse_policy("off", s.profile).policy), s)
    alone = _run(build_policy(spec.policy), s)
    rep = pol.report()
    a, o = float(alone.row()["output_tokens_per_s"]), float(off.row()["output_tokens_per_s"])
    return {"slower_than_off": a < o, "ratio_truth": a / o,
            "guard_at_s": t_guard, "guarded_buckets": rep["guard"]["buckets"], "evidence": rep["guard"]["evidence"],
            "guarded_strata": len(rep["guard"]["strata"]), "sim_time_s": res.sim_time_s,
            "tok_s_with_guard": float(res.row()["output_tokens_per_s"]), "tok_s_off": o}


def hedge_check(spec: PolicySpec, s: Setup, holdout: HoldoutConfig, sb: SwitchbackConfig) -> dict:
    """The policy hedged against a fixed plan (switchback `control`), the policy alone and the plan alone on the
    same requests: output tokens/s of each after the warmup, and when the guard first served the plan."""
    res, pol, _, _, t_guard = run_experiment(spec, s, None, sb)
    p, g = sb.control_plan
    alone = float(_run(build_policy(spec.policy), s).row()["output_tokens_per_s"])
    fixed = float(_run(build_policy(parse_policy(f"static:{p}:{g}", s.profile).policy), s).row()["output_tokens_per_s"])
    hedged = float(res.row()["output_tokens_per_s"])
    best = max(alone, fixed)
    rep = pol.report()
    windows = [r for r in rep["windows"] if r.get("windows_policy")]
    return {"control": sb.control, "share": sb.share, "policy_tok_s": alone, "control_tok_s": fixed,
            "hedged_tok_s": hedged, "hedged_over_best": hedged / best, "policy_over_best": alone / best,
            # the bound: a guarded bucket runs the policy in `share` of its windows, the other regime otherwise
            "bound": 1.0 - sb.share * abs(alone - fixed) / best,
            "guard_at_s": t_guard, "guarded_buckets": rep["guard"]["buckets"], "released": rep["guard"]["released"],
            "windows": windows, "sim_time_s": float(res.sim_time_s)}


def _emit(obj: dict) -> None:
    """One result line on stdout (results, not logs)."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _parser() -> argparse.ArgumentParser:
    """The command line (module doc)."""
    ap = argparse.ArgumentParser(prog="python -m adaptspec.bench.holdout_sim", description=__doc__.split("\n")[0])
    ap.add_argument("check", choices=("coverage", "switchback", "cost", "guard", "hedge"))
    ap.add_argument("--profile", default="h200-llama3-70b")
    ap.add_argument("--truth-profile", default=None,
                    help="what the simulated engine costs (default: --profile; a different one: a wrong model)")
    ap.add_argument("--control", default="off",
                    help="switchback.control: off or the fixed plan <proposer>:<gamma> (hedge: default eagle:3)")
    ap.add_argument("--trace", default=None, help="acceptance traces (JSONL) to replay instead of --workload")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--policy", default=None, help="off, static:<p>:<g>, threshold, adaptive (default per check)")
    ap.add_argument("--concurrency", default="1", help="comma-separated")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--share", type=float, default=None, help="holdout share (coverage 0.1, cost 0.02) or "
                                                              "switchback share (0.5)")
    ap.add_argument("--max-cost", type=float, default=None, help="holdout.max_cost (cap on the holdout's cost)")
    ap.add_argument("--share-of", choices=("requests", "time"), default="requests",
                    help="holdout.share_of: the share counts requests or decode time")
    ap.add_argument("--window-s", type=float, default=60.0)
    ap.add_argument("--washout-s", type=float, default=20.0)
    ap.add_argument("--cooldown-s", type=float, default=0.0)
    ap.add_argument("--order", choices=("pairs", "abba"), default="pairs", help="switchback.order")
    ap.add_argument("--first-look", type=int, default=20, help="switchback.first_look (the guard's requests)")
    ap.add_argument("--engine-switch", action="store_true",
                    help="the worker applies the switchback regime to its running requests (engine-side switch)")
    ap.add_argument("--look-s", type=float, default=1.0,
                    help="with --engine-switch: how often the proxy looks at the worker (scrape interval)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    workload = _workload(args.trace, args.workload)
    default_policy = {"coverage": "adaptive", "cost": "adaptive", "switchback": "static:draft:4",
                      "guard": "static:draft:4", "hedge": "adaptive"}[args.check]
    spec = parse_policy(args.policy or default_policy, args.profile)
    sb = SwitchbackConfig(share=args.share if args.check == "switchback" and args.share else 0.5,
                          window_s=args.window_s, washout_s=args.washout_s, cooldown_s=args.cooldown_s,
                          order=args.order, first_look=args.first_look,
                          control=args.control if args.check != "hedge" or args.control != "off" else "eagle:3")
    if args.check == "hedge":
        sb = sb.model_copy(update={"share": args.share or 0.2})
    hshare = args.share if args.share and args.check != "switchback" else (0.1 if args.check == "coverage" else 0.02)
    holdout = HoldoutConfig(share=hshare, max_cost=args.max_cost, share_of=args.share_of)
    for conc in (int(c) for c in args.concurrency.split(",")):
        hits = total = 0
        costs = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            s = Setup(args.profile, workload, conc, seed, args.requests, args.warmup,
                      engine_switch=args.engine_switch, look_s=args.look_s, truth_profile=args.truth_profile)
            # the experiment's own randomness (which requests / windows) follows the seed too: a trace replay
            # has the same requests for every seed
            holdout = holdout.model_copy(update={"seed": seed})
            sb = sb.model_copy(update={"seed": seed})
            out, ok = _check(args.check, spec, s, holdout, sb)
            if args.check == "cost":
                costs.append(out["cost"])
            hits += bool(ok)
            total += 1
            _emit(out)
        summary = {"check": args.check, "policy": spec.name, "profile": args.profile,
                   "engine_switch": args.engine_switch,
                   "workload": args.trace or args.workload, "concurrency": conc, "seeds": total, "passed": hits}
        if costs:
            summary["mean_cost"] = sum(costs) / len(costs)
            summary["max_cost"] = max(costs)
        _emit({"summary": summary})
    return 0


def _check(check: str, spec: PolicySpec, s: Setup, holdout: HoldoutConfig, sb: SwitchbackConfig) -> tuple[dict, bool]:
    """One seed of `check`: its result line (the seed and concurrency first) and whether it passed."""
    head = {"seed": s.seed, "concurrency": s.concurrency}
    if check == "coverage":
        rows = coverage(spec, s, holdout)
        top = max(rows, key=lambda r: r["n_control"]) if rows else None
        out = {**head, "strata": len(rows), "covered_strata": sum(r["covered"] for r in rows), "primary": top}
        return out, bool(top and top["covered"])
    if check == "switchback":
        out = {**head, **switchback_check(spec, s, sb)}
        return out, out["covered"]
    if check == "cost":
        out = {**head, **cost_check(spec, s, holdout)}
        return out, out["cost"] <= 0.015
    if check == "hedge":
        out = {**head, **hedge_check(spec, s, holdout, sb)}
        return out, out["hedged_over_best"] >= out["bound"] - 0.03
    out = {**head, **guard_check(spec, s, holdout, sb)}
    return out, out["guard_at_s"] is not None and out["guard_at_s"] <= 120.0


if __name__ == "__main__":
    sys.exit(main())
