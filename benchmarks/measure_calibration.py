"""Online calibration on this machine: `adaptspec serve` with a deliberately wrong profile in front of a real
reference worker learns the worker's step model from its telemetry.

    python benchmarks/measure_calibration.py [--profile h200-llama3-70b] [--concurrency 1,4,16,32]
                                          [--duration 12] [--json results/calibration.json]

Starts `adaptspec worker` (1 thread) and `adaptspec serve` (goodput policy, the pool's profile = --profile),
drives `adaptspec bench` through the proxy at each concurrency in turn, and reads the worker's own step
counters around each point (measured mean step time, batched / KV tokens and draft passes per step). At the
end it reads the proxy's fitted coefficients (adaptspec_step_model_* gauges) and reports, per point, the
measured step time against the fit's, cpu-tiny's and the wrong profile's prediction for the same per-step
tokens; and, over content classes x loads, how often the policy priced with the fit decides as it does with
cpu-tiny and with the wrong profile alone, and how often its decision's goodput is within 2% of the best
(priced by cpu-tiny, and by the fit: near-ties are not disagreements). Prints a markdown report; --json keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, replace
from pathlib import Path

import yaml

from adaptspec.control import costmodel
from adaptspec.control.calibration import CalibratedCosts, StepCalibrator, feature_names, prior_coefficients
from adaptspec.control.config import parse_config
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.policy import build_policy, estimate
from adaptspec.control.profiles import Profile, load_profile
from adaptspec.control.promtext import parse_metrics
from adaptspec.control.telemetry import StepCounters
from adaptspec.control.types import CONTENT_CLASSES, WorkerState


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def _wait(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(url)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gauges(text: str, worker: str) -> tuple[dict[str, float], dict[str, float], float, float, dict[str, float]]:
    """The proxy's fit of `worker`: coefficients, errors, trusted, steps, and {contrast_steps, probes}."""
    from prometheus_client.parser import text_string_to_metric_families

    coef, err, trusted, steps, extra = {}, {}, 0.0, 0.0, {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("worker") != worker:
                continue
            if s.name == "adaptspec_step_model_coefficient":
                coef[s.labels["coefficient"]] = s.value
            elif s.name == "adaptspec_step_model_coefficient_error":
                err[s.labels["coefficient"]] = s.value
            elif s.name == "adaptspec_step_model_trusted":
                trusted = s.value
            elif s.name == "adaptspec_step_model_steps":
                steps = s.value
            elif s.name == "adaptspec_step_model_contrast_steps":
                extra["contrast_steps"] = s.value
            elif s.name == "adaptspec_step_model_probes":
                extra["probes"] = s.value
    return coef, err, trusted, steps, extra


class _Recorder(threading.Thread):
    """Scrapes the worker's cumulative step counters every `interval_s` (as the proxy does), so that the run's
    windows can be replayed through StepCalibrator variants offline (`--json` keeps them as `scrapes`)."""

    def __init__(self, url: str, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.url, self.interval_s = url, interval_s
        self.scrapes: list[dict] = []
        self.failures = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                c = parse_metrics(_get(self.url)).steps
            except OSError:
                self.failures += 1
                continue
            self.scrapes.append({"t": time.monotonic(), **asdict(c)})

    def stop(self) -> list[dict]:
        self._halt.set()
        self.join(timeout=10)
        return self.scrapes


def scrape_windows(scrapes: list[dict]) -> list[StepCounters]:
    """The windows between consecutive recorded scrapes (a reset starts over, as StepCalibrator.update does)."""
    counters = [StepCounters(**{k: v for k, v in s.items() if k != "t"}) for s in scrapes]
    out = []
    for before, after in zip(counters, counters[1:], strict=False):
        w = after.since(before)
        if w is not None and w.steps >= 1:
            out.append(w)
    return out


def _predict(prof: Profile, w: StepCounters) -> float:
    """Mean step seconds the profile predicts for the window's per-step tokens (additive draft passes)."""
    n = w.steps
    t = prof.target.time(w.batched_tokens / n, w.kv_tokens / n)
    if prof.offers("draft") and w.draft_passes.get("draft"):
        cost = prof.draft("draft")
        if cost.kind == "draft" and cost.model is not None:
            per_pass = w.drafted_tokens.get("draft", 0.0) / w.draft_passes["draft"]  # requests per pass
            t += w.draft_passes["draft"] / n * cost.model.time(per_pass, per_pass * prof.context_tokens)
    return t


_NEAR = 0.02  # a decision whose goodput is this close to the best one is as good (near-ties are not errors)
_GRID = tuple(range(1, 9))


def _goodput(judge: Profile, pol, alphas: AlphaTable, cls: str, d, batch: float) -> float:
    """Goodput of decision `d` for a request of class `cls` in a batch of `batch`, as `judge` prices it
    (prior alphas; no prefill share: the same simplification for every decision compared)."""
    if d.gamma <= 0 or d.proposer == "none":
        return costmodel.evaluate(judge, "none", 0.0, 0, batch).goodput
    alpha, _ = pol.alpha(estimate(alphas, "w0", d.proposer, cls))
    rate = estimate(alphas, "w0", d.proposer, cls).propose_rate
    return costmodel.evaluate(judge, d.proposer, alpha, d.gamma, batch, propose_rate=rate).goodput


def _best_goodput(judge: Profile, pol, alphas: AlphaTable, cls: str, batch: float) -> float:
    """The best goodput over off and every (proposer, gamma) the pool offers, as `judge` prices them."""
    best = costmodel.evaluate(judge, "none", 0.0, 0, batch).goodput
    for proposer in ("ngram", "draft"):
        est = estimate(alphas, "w0", proposer, cls)
        alpha, _ = pol.alpha(est)
        for g in _GRID:
            best = max(best, costmodel.evaluate(judge, proposer, alpha, g, batch,
                                                propose_rate=est.propose_rate).goodput)
    return best


def _compare_decisions(profile: str, costs: CalibratedCosts, reference: str = "cpu-tiny") -> dict:
    """Over content classes x loads (prior alphas): how often the policy priced with the fit (on the wrong
    profile) decides as with the `reference` profile (cpu-tiny: the reference worker's measured one), and how
    often its decision's goodput is within _NEAR of the best, as priced by the reference and by the fit; the
    same for the wrong profile alone. Prints the summary lines. (JSON keys say cpu_tiny whatever the reference.)"""
    wrong, tiny = load_profile(profile), load_profile(reference)
    pol_wrong = build_policy(parse_config({"policy": {"kind": "goodput", "default_profile": profile}}).policy)
    pol_tiny = build_policy(parse_config({"policy": {"kind": "goodput", "default_profile": reference}}).policy)
    alphas = AlphaTable()
    judges = {"cpu-tiny": tiny, "fit": costs.apply(wrong)}
    same = {"fit": 0, "wrong": 0}
    near = {judge: {"fit": 0, "wrong": 0} for judge in judges}
    total = 0
    for cls in CONTENT_CLASSES:
        for load in (0, 1, 3, 7, 15, 31, 63):
            base = {"proposers": ("ngram", "draft"), "running": load}
            d_tiny = pol_tiny.decide(cls, [WorkerState("w0", **base)], alphas)
            made = {"fit": pol_wrong.decide(cls, [WorkerState("w0", step_costs=costs, **base)], alphas),
                    "wrong": pol_wrong.decide(cls, [WorkerState("w0", **base)], alphas)}
            total += 1
            for who, d in made.items():
                same[who] += (d.proposer, d.gamma) == (d_tiny.proposer, d_tiny.gamma)
                for jname, judge in judges.items():
                    best = _best_goodput(judge, pol_tiny, alphas, cls, load + 1)
                    near[jname][who] += _goodput(judge, pol_tiny, alphas, cls, d, load + 1) >= (1 - _NEAR) * best
    print(f"\nDecisions (6 classes x 7 loads, prior alphas) equal to {reference}'s: with the fit {same['fit']}/{total}, "
          f"with {profile} alone {same['wrong']}/{total}")
    for jname in judges:
        print(f"Decisions within {_NEAR:.0%} of the best goodput as priced by "
              f"{reference if jname == 'cpu-tiny' else jname}: with the fit "
              f"{near[jname]['fit']}/{total}, with {profile} alone {near[jname]['wrong']}/{total}")
    return {"decisions_equal_to_cpu_tiny": {**same, "of": total},
            "decisions_near_best": {j: {**v, "of": total, "within": _NEAR} for j, v in near.items()}}


def fitted_costs(coef: dict[str, float], err: dict[str, float], steps: float, trusted: bool, prior: Profile,
                 context_tokens: float) -> CalibratedCosts:
    """The proxy's fit (its adaptspec_step_model_* gauges) as CalibratedCosts: ONE builder for the live run and
    for --from-json. A coefficient counts as fitted only when the proxy exported it with a finite error (the
    gauge's NaN means held at the prior); one it did not export at all is the prior profile's and not fitted."""
    names = feature_names()
    coefficients = {n: float(coef[n]) if n in coef else float(v)
                    for n, v in zip(names, prior_coefficients(prior), strict=True)}
    errors = {n: float(err[n]) if err.get(n) is not None else math.nan for n in names}
    fitted = {n: n in coef and math.isfinite(errors[n]) for n in names}
    return CalibratedCosts(coefficients=coefficients, errors=errors, fitted=fitted, steps=steps, trusted=trusted,
                           key="measured", snapped=coefficients, context_tokens=context_tokens)


def mean_context(points: list[dict]) -> float:
    """Mean context of a request in a step over the run: KV tokens per request-step (the fit's context_tokens);
    runs saved before requests were recorded: KV tokens per batched token, as they were priced then."""
    kv = sum(p["steps"] * p["kv_per_step"] for p in points)
    if all(p.get("requests_per_step") for p in points):
        return kv / sum(p["steps"] * p["requests_per_step"] for p in points)
    return kv / sum(p["steps"] * p["batched_per_step"] for p in points)


def _replay_scrapes(path: str, probe_steps: float | None) -> int:
    """Feed a saved live run's recorded scrapes to a fresh StepCalibrator (the proxy's defaults, prior = the run's
    profile) and print how its fit and the drafted tokens' contrast evolve (no servers)."""
    run = json.loads(Path(path).read_text())
    ws = scrape_windows(run.get("scrapes", []))
    if not ws:
        print(f"{path}: no recorded scrapes", file=sys.stderr)
        return 2
    prior = load_profile(run["profile"])
    cal = StepCalibrator(prior) if probe_steps is None else StepCalibrator(prior, probe_steps=probe_steps)
    print(f"# {path}: {len(ws)} windows, {sum(w.steps for w in ws):.0f} steps, prior {run['profile']}\n")
    print("| windows | steps | overhead ms | per batched token ms | per KV token us | drafted contrast | contrast steps "
          "| probe asked | trusted |")
    print("|---|---|---|---|---|---|---|---|---|")
    every = max(1, len(ws) // 8)
    for i, w in enumerate(ws):
        cal.observe(w)
        if (i + 1) % every == 0 or i + 1 == len(ws):
            c = cal.costs()
            k = c.coefficients
            print(f"| {i + 1} | {c.steps:.0f} | {1e3 * k['overhead_s']:.2f} | {1e3 * k['compute_s_per_token']:.3f} | "
                  f"{1e6 * k['kv_s_per_token']:.2f} | {c.drafted_contrast:.2f} | {c.contrast_steps:.0f} | {c.probe} | "
                  f"{c.trusted} |")
    return 0


def _replay(path: str) -> int:
    """Recompute the decision comparison from a saved --json run (no servers)."""
    run = json.loads(Path(path).read_text())
    ctx = mean_context(run["points"])
    costs = fitted_costs(run["coefficients"], run["errors"], run["steps"], run["trusted"],
                         load_profile(run["profile"]), ctx)
    print(f"# {path}: fit over {run['steps']:.0f} steps, trusted={run['trusted']}, mean context {ctx:.0f} tokens")
    _compare_decisions(run["profile"], costs)
    return 0


def simulate_fit(profile: str, truth: str, levels: list[int], *, trace: list[str] | None = None,
                 workload: str = "mixed", requests: int = 400, seed: int = 0, max_batch: int = 64,
                 proposers: tuple[str, ...] = ("ngram", "draft"), calibrate: bool = True,
                 calibrator: StepCalibrator | None = None, probe_steps: float | None = None
                 ) -> tuple[StepCalibrator | None, list[dict]]:
    """The live run's loop in the simulator: `adaptive` believing `profile` on an engine that costs `truth`, its
    StepCalibrator (prior: `profile`) fed the simulated engine's telemetry, carried over the load levels in
    turn as the proxy's is. Returns the calibrator and per level its row: throughput, speculation share, the
    engine's step window and the simulated seconds (`calibrate=False`: priced with `profile` alone)."""
    from adaptspec.bench.simulator import (
        AlphaModel,
        ProfileCost,
        SimConfig,
        _SimClock,
        parse_policy,
        simulate,
    )
    from adaptspec.bench.traces import TraceWorkload
    from adaptspec.bench.workloads import get_workload
    from adaptspec.control.config import EstimatorConfig

    belief = load_profile(profile)
    cost = ProfileCost(load_profile(truth))
    worker = replace(cost.worker(max_gamma=8, profile=profile), proposers=proposers)
    wl = TraceWorkload.from_files(trace, order="shuffle", seed=seed) if trace else get_workload(workload)
    spec = parse_policy("adaptive", profile, seed)
    clock = _SimClock()
    alphas = AlphaTable.from_config(spec.estimator or EstimatorConfig(), clock=clock)
    if calibrate and calibrator is None:
        calibrator = StepCalibrator(belief) if probe_steps is None else StepCalibrator(belief, probe_steps=probe_steps)
    elif not calibrate:
        calibrator = None
    counters, rows = None, []
    for c in levels:
        cfg = SimConfig(concurrency=c, requests=requests, max_batch=max_batch, max_gamma=8, seed=seed)
        policy = build_policy(spec.policy)
        res = simulate(policy, cost, wl, cfg, truth=AlphaModel(aliases=cost.truth_aliases()),
                       alphas=alphas, worker=worker, on_step=clock.set, t0=clock.t, calibrator=calibrator,
                       counters=counters, telemetry=lambda now, snap: None)
        window = res.counters.since(counters or StepCounters())
        counters = res.counters
        probe = policy.contrast_probe
        fit = calibrator.costs() if calibrator is not None else None
        rows.append({"concurrency": c, "window": window, "sim_s": res.sim_time_s,
                     "probes": probe.probes if probe is not None else 0,
                     "contrast_steps": fit.contrast_steps if fit is not None else math.nan, **res.row()})
    return calibrator, rows


def _simulated(args) -> int:
    """--simulate: the same report from the simulator (truth = --truth-profile), no servers."""
    levels = [int(c) for c in args.concurrency.split(",")]
    trace = args.trace or None
    common = {"trace": trace, "workload": args.workload, "requests": args.requests, "seed": args.seed,
              "probe_steps": args.probe_steps}
    cal, rows = simulate_fit(args.profile, args.truth_profile, levels, **common)
    right = []
    if args.versus_truth:  # the truth believed, calibrated as well (the "adaptive run whose profile is the truth")
        _, right = simulate_fit(args.truth_profile, args.truth_profile, levels, **common)
    costs = cal.costs()
    wrong, truth = load_profile(args.profile), load_profile(args.truth_profile)
    elapsed = sum(r["sim_s"] for r in rows)
    print(f"# Simulated calibration: `{args.profile}` believed, `{args.truth_profile}` true "
          f"({'trace ' + ','.join(trace) if trace else 'workload ' + args.workload}, seed {args.seed})\n")
    print(f"{elapsed:.0f} simulated s at concurrency {args.concurrency}; fit over {costs.steps:.0f} engine steps, "
          f"trusted={costs.trusted}, tied={list(costs.tied)}, drafted contrast {costs.drafted_contrast:.2f} = "
          f"{costs.contrast_steps:.0f} steps "
          f"(probing: {costs.probe}; probes made {sum(r['probes'] for r in rows)})\n")
    p_truth, p_wrong = prior_coefficients(truth), prior_coefficients(wrong)
    print(f"| coefficient | fitted | +- | {args.truth_profile} (truth) | rel err | {args.profile} (prior) |")
    print("|---|---|---|---|---|---|")
    coef_rows = {}
    for i, n in enumerate(feature_names()):
        v = costs.coefficients[n]
        rel = (v - p_truth[i]) / p_truth[i] if p_truth[i] > 0 else math.nan
        coef_rows[n] = {"fitted": v, "error": costs.errors[n], "is_fitted": costs.fitted[n], "truth": p_truth[i],
                        "rel_error": rel}
        shown = f"{v:.4g}" if costs.fitted[n] else f"({v:.4g}: prior)"
        print(f"| {n} | {shown} | {costs.errors[n]:.2g} | {p_truth[i]:.4g} | {rel:+.1%} | {p_wrong[i]:.4g} |")
    print("\n| concurrency | sim s | steps | batched tok/step | kv tok/step | draft passes/step | tokens/s | "
          "speculation share" + (f" | {args.truth_profile} believed (calibrated) tokens/s | ratio" if right else "")
          + " |")
    print("|---|---|---|---|---|---|---|---" + ("|---|---" if right else "") + "|")
    points = []
    for i, r in enumerate(rows):
        w = r["window"]
        n = w.steps
        pt = {"concurrency": r["concurrency"], "sim_s": r["sim_s"], "steps": n,
              "batched_per_step": w.batched_tokens / n, "kv_per_step": w.kv_tokens / n,
              "draft_passes_per_step": w.draft_passes.get("draft", 0.0) / n,
              "output_tokens_per_s": r["output_tokens_per_s"], "speculation_share": r["speculation_share"]}
        line = (f"| {pt['concurrency']} | {pt['sim_s']:.0f} | {n:.0f} | {pt['batched_per_step']:.1f} | "
                f"{pt['kv_per_step']:.0f} | {pt['draft_passes_per_step']:.2f} | {pt['output_tokens_per_s']:.0f} | "
                f"{pt['speculation_share']:.2f}")
        if right:
            pt["truth_believed_tokens_per_s"] = right[i]["output_tokens_per_s"]
            pt["ratio"] = r["output_tokens_per_s"] / right[i]["output_tokens_per_s"]
            line += f" | {pt['truth_believed_tokens_per_s']:.0f} | {pt['ratio']:.3f}x"
        print(line + " |")
        points.append(pt)
    decisions = _compare_decisions(args.profile, costs, reference=args.truth_profile)
    ref_ctx = truth.context_tokens
    print(f"\nThe same at {args.truth_profile}'s context ({ref_ctx:g} tokens; the fit measured "
          f"{costs.context_tokens:.0f} on this traffic):")
    decisions["same_context"] = _compare_decisions(
        args.profile, replace(costs, context_tokens=ref_ctx, key=f"{costs.key}@ctx"), reference=args.truth_profile)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "simulated": True, "profile": args.profile, "truth_profile": args.truth_profile, "trace": trace,
            "workload": None if trace else args.workload, "seed": args.seed, "requests": args.requests,
            "sim_s": elapsed, "steps": costs.steps, "trusted": costs.trusted, "tied": list(costs.tied),
            "coefficients": coef_rows, "points": points, **decisions}, indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="h200-llama3-70b", help="the wrong profile the proxy starts with")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--duration", type=float, default=12.0, help="measured seconds per concurrency")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=64, help="the reference worker's running batch limit")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--from-json", metavar="FILE", help="only recompute the decision comparison of a saved run")
    ap.add_argument("--replay-scrapes", metavar="FILE",
                    help="feed a saved run's recorded scrapes to a fresh StepCalibrator and print its fit (no servers)")
    ap.add_argument("--simulate", action="store_true",
                    help="no servers: the simulator's engine costs --truth-profile and emits the same counters")
    ap.add_argument("--truth-profile", default="cpu-tiny", help="--simulate: what the simulated engine costs")
    ap.add_argument("--trace", action="append", default=[], help="--simulate: acceptance trace(s) to replay")
    ap.add_argument("--workload", default="mixed", help="--simulate without --trace: a synthetic workload")
    ap.add_argument("--requests", type=int, default=400, help="--simulate: measured requests per level")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe-steps", type=float, default=None,
                    help="the calibrator's probe_steps (0: no calibration probes; default the proxy's, 0: off)")
    ap.add_argument("--versus-truth", action="store_true",
                    help="--simulate: also run adaptive believing the truth (uncalibrated); throughput ratios")
    args = ap.parse_args()
    if args.from_json:
        return _replay(args.from_json)
    if args.replay_scrapes:
        return _replay_scrapes(args.replay_scrapes, args.probe_steps)
    if args.simulate:
        return _simulated(args)
    levels = [int(c) for c in args.concurrency.split(",")]
    wport, pport = _free_port(), _free_port()
    worker_url, proxy_url = f"http://127.0.0.1:{wport}", f"http://127.0.0.1:{pport}"
    tmp = Path(tempfile.mkdtemp(prefix="adaptspec-calib-"))
    config = tmp / "proxy.yaml"
    config.write_text(yaml.safe_dump({
        "policy": {"kind": "goodput"},
        "pools": [{"name": "ref", "engine": "adaptspec", "per_request": True, "proposers": ["ngram", "draft"],
                   "max_gamma": 8, "profile": args.profile, "workers": [{"name": "w0", "url": worker_url}]}],
        "server": {"host": "127.0.0.1", "port": pport, "scrape_interval_s": 0.25},
        **({"calibration": {"probe_steps": args.probe_steps}} if args.probe_steps is not None else {})}))
    py = sys.executable
    procs = []
    rows = []
    try:
        procs.append(subprocess.Popen([py, "-m", "adaptspec", "worker", "--port", str(wport), "--threads", "1",
                                       "--max-batch", str(args.max_batch)], stdout=open(tmp / "worker.log", "w"),  # noqa: SIM115
                                      stderr=subprocess.STDOUT))
        _wait(worker_url + "/health", procs[-1])
        procs.append(subprocess.Popen([py, "-m", "adaptspec", "serve", "--config", str(config), "--watch", "0"],
                                      stdout=open(tmp / "proxy.log", "w"), stderr=subprocess.STDOUT))  # noqa: SIM115
        _wait(proxy_url + "/health", procs[-1])
        started = time.monotonic()
        recorder = _Recorder(worker_url + "/metrics")
        recorder.start()
        for c in levels:
            before = parse_metrics(_get(worker_url + "/metrics")).steps
            out = tmp / f"bench-{c}.json"
            subprocess.run([py, "-m", "adaptspec", "bench", "--url", proxy_url, "--concurrency", str(c),
                            "--duration", str(args.duration), "--warmup", "2", "--max-tokens", str(args.max_tokens),
                            "--no-progress", "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
            window = parse_metrics(_get(worker_url + "/metrics")).steps.since(before)
            bench = json.loads(out.read_text())
            bench = bench[0] if isinstance(bench, list) else bench
            rows.append({"concurrency": c, "window": window, "bench": bench})
        elapsed = time.monotonic() - started
        scrapes = recorder.stop()
        coef, err, trusted, steps, extra = _gauges(_get(proxy_url + "/metrics"), "w0")
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)

    wrong, tiny = load_profile(args.profile), load_profile("cpu-tiny")
    names = feature_names()
    report = []
    for r in rows:
        w, b = r["window"], r["bench"]
        n = w.steps
        report.append({"concurrency": r["concurrency"], "steps": n, "batched_per_step": w.batched_tokens / n,
                       "kv_per_step": w.kv_tokens / n, "requests_per_step": w.requests / n,
                       "draft_passes_per_step": w.draft_passes.get("draft", 0.0) / n,
                       "measured_s": w.step_seconds / n, "cpu_tiny_s": _predict(tiny, w), "wrong_s": _predict(wrong, w),
                       "output_tokens_per_s": b.get("output_tokens_per_s", float("nan")),
                       "speculation_share": b.get("speculation_share", float("nan"))})
    costs = fitted_costs(coef, err, steps, bool(trusted), wrong, mean_context(report))
    fitted = costs.apply(wrong)
    for r, p in zip(rows, report, strict=True):
        p["fit_s"] = _predict(fitted, r["window"])
    print(f"# Online calibration: proxy started with `{args.profile}` in front of the reference worker"
          + (f" (calibration.probe_steps {args.probe_steps:g})" if args.probe_steps is not None else "") + "\n")
    print(f"{elapsed:.0f} s of load at concurrency {args.concurrency}; fit over {steps:.0f} engine steps, "
          f"trusted={bool(trusted)}; contrast {extra.get('contrast_steps', math.nan):.0f} steps, "
          f"calibration probes made {extra.get('probes', math.nan):.0f}\n")
    print("| coefficient | fitted | +- | cpu-tiny | " + args.profile + " (additive) |")
    print("|---|---|---|---|---|")
    p_tiny, p_wrong = prior_coefficients(tiny), prior_coefficients(wrong)
    for i, n in enumerate(names):
        shown = f"{costs.coefficients[n]:.4g}" if costs.fitted[n] else f"({costs.coefficients[n]:.4g}: prior)"
        print(f"| {n} | {shown} | {costs.errors[n]:.2g} | {p_tiny[i]:.4g} | {p_wrong[i]:.4g} |")
    print("\n| concurrency | steps | batched tok/step | kv tok/step | draft passes/step | measured ms/step | "
          "fit ms | fit err | cpu-tiny ms | cpu-tiny err | " + args.profile + " ms | tokens/s | speculation share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in report:
        m = p["measured_s"]
        print(f"| {p['concurrency']} | {p['steps']:.0f} | {p['batched_per_step']:.1f} | {p['kv_per_step']:.0f} | "
              f"{p['draft_passes_per_step']:.2f} | {1e3 * m:.1f} | {1e3 * p['fit_s']:.1f} | "
              f"{(p['fit_s'] - m) / m:+.0%} | {1e3 * p['cpu_tiny_s']:.1f} | {(p['cpu_tiny_s'] - m) / m:+.0%} | "
              f"{1e3 * p['wrong_s']:.1f} | {p['output_tokens_per_s']:.0f} | {p['speculation_share']:.2f} |")
    decisions = _compare_decisions(args.profile, costs)
    if args.json:  # NaN errors (held at the prior) are written as NaN, which json.loads reads back
        Path(args.json).write_text(json.dumps({
            "profile": args.profile, "probe_steps": args.probe_steps, "elapsed_s": elapsed, "steps": steps,
            "trusted": bool(trusted),
            "coefficients": coef, "errors": err, "points": report, **extra,
            **decisions, "scrapes": scrapes}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
