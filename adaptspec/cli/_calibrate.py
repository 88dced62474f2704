"""`adaptspec calibrate`: fit a worker's step-time model from its step telemetry and print it as a profile.

    adaptspec calibrate --url http://127.0.0.1:8001 --duration 60 > my-worker.yaml
    adaptspec serve --config pools.yaml        # with `profile: my-worker.yaml` on the pool
    adaptspec calibrate --url http://127.0.0.1:8001 --duration 0   # one read of the cumulative counters

Scrapes the worker's /metrics (`adaptspec:engine_*` counters, control/telemetry.py) every `--interval`
seconds for `--duration` seconds and fits them as the proxy does online (control/calibration.py), with
`--prior` as the prior. Serve traffic meanwhile, at several loads: a slope is fitted only once the batch
varies (otherwise it keeps the prior's value, and the YAML says so). `--duration 0` reads the cumulative
counters once as a single window: the level is fitted, every slope stays the prior's.

The YAML (stdout, or `--output FILE`) is a direct-form profile (`combine: sum`) that `load_profile` accepts:
the target's overhead / per-token / per-KV-token seconds, each model proposer of the prior as a draft
model with its per-pass and per-token seconds, n-gram lookup as in the prior; its header comments give
the standard error of every coefficient.
"""

from __future__ import annotations

import argparse
import sys
import time


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="fit a worker's step-time model from its /metrics; print a profile",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="worker base URL (its /metrics is read)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds to scrape (default 30; 0: one read)")
    p.add_argument("--interval", type=float, default=0.25, help="seconds between scrapes (default 0.25)")
    p.add_argument("--prior", default="cpu-tiny", help="profile name or YAML path used as the prior")
    p.add_argument("--name", default="calibrated", help="name of the printed profile")
    p.add_argument("--output", help="write the YAML here instead of stdout")
    p.set_defaults(func=run)


def _scrape(url: str, timeout: float):
    import urllib.request

    from adaptspec.control.promtext import parse_metrics

    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as r:
        return parse_metrics(r.read().decode()).steps


def run(args) -> int:
    import urllib.error

    from adaptspec.control.calibration import StepCalibrator
    from adaptspec.control.profiles import load_profile
    from adaptspec.control.telemetry import StepCounters
    from adaptspec.errors import ConfigError

    if args.duration < 0 or args.interval <= 0:
        print("error: --duration must be >= 0 and --interval > 0", file=sys.stderr)
        return 2
    try:
        prior = load_profile(args.prior)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cal = StepCalibrator(prior)
    started = time.monotonic()
    try:
        first = _scrape(args.url, max(5.0, 4 * args.interval))
        if first is None:
            print(f"error: {args.url}/metrics has no adaptspec:engine_* step counters (an adaptspec worker, or "
                  "vLLM with the adaptspec plugin, exports them)", file=sys.stderr)
            return 1
        if args.duration == 0:
            cal.observe(first.since(StepCounters()) or first)
        else:
            cal.update(first)
            while time.monotonic() - started < args.duration:
                time.sleep(args.interval)
                steps = _scrape(args.url, max(5.0, 4 * args.interval))
                if steps is not None:
                    cal.update(steps)
    except (urllib.error.URLError, OSError) as exc:
        print(f"error: cannot read {args.url}/metrics: {exc}", file=sys.stderr)
        return 1
    costs = cal.costs()
    if costs.steps <= 0:
        print("error: the worker made no engine steps while it was scraped; send it traffic", file=sys.stderr)
        return 1
    text = profile_yaml(costs, prior, args.name, args.url, time.monotonic() - started)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if not costs.trusted:
        print(f"warning: only {costs.steps:.0f} engine steps (the proxy trusts a fit after {cal.min_steps:.0f}); "
              "the profile is marked provisional", file=sys.stderr)
    return 0


def profile_yaml(costs, prior, name: str, url: str, seconds: float) -> str:
    """The fit as a direct-form profile YAML (see the module doc)."""
    import yaml

    c = costs.coefficients
    held = [k for k, f in costs.fitted.items() if not f]
    target = {"name": name, "combine": "sum", "overhead_s": c["overhead_s"], "memory_floor_s": 0.0,
              "kv_s_per_token": c["kv_s_per_token"], "compute_s_per_token": c["compute_s_per_token"]}
    proposers: dict[str, dict] = {}
    aliases: dict[str, str] = {}
    for option, cost in prior.drafts.items():
        if cost.kind == "ngram":
            proposers[option] = {"kind": "ngram", "step_s": cost.step_s, "request_s": cost.request_s}
    for p in costs.proposers:
        if not prior.offers(p) or prior.draft(p).kind == "ngram":
            continue
        option = prior.resolve(p)
        if c[f"{p}_call_s"] > 0.0 and c[f"{p}_pass_s"] <= 0.0:  # priced per drafting step: EAGLE's measured form
            proposers[option] = {"kind": "eagle", "overhead_s": c[f"{p}_call_s"], "per_token_s": c[f"{p}_token_s"],
                                 "kv_s_per_token": 0.0}
        else:  # per pass (a per-call cost fitted beside it has no field in this form and is left out)
            proposers[option] = {"kind": "draft", "combine": "sum", "overhead_s": c[f"{p}_pass_s"],
                                 "memory_floor_s": 0.0, "kv_s_per_token": 0.0, "compute_s_per_token": c[f"{p}_token_s"]}
        if option != p:
            aliases[p] = option
    for option, cost in prior.drafts.items():  # hybrids are priced from their parts: keep those that still exist
        if cost.kind == "hybrid" and all(part in proposers for part in cost.parts):
            proposers[option] = {"kind": "hybrid", "lookup": cost.parts[0], "fallback": cost.parts[1],
                                 **{k: v for k, v in (("model_cost", cost.model_cost),
                                                      ("model_call_cost", cost.model_call_cost)) if v}}
    spec = {
        "name": name,
        "description": f"fitted by adaptspec calibrate from {url} (prior {prior.name})",
        "provisional": not costs.trusted,
        "calibration": (f"{costs.steps:.0f} engine steps over {seconds:.0f} s, mean {costs.batch:.1f} batched tokens "
                        f"per step; held at the prior: {', '.join(held) or 'none'}"),
        "target": target,
        "context_tokens": round(costs.context_tokens or prior.context_tokens, 1),
        "proposers": proposers,
    }
    if aliases:
        spec["aliases"] = aliases
    head = [f"# adaptspec calibrate --url {url}: additive step model t = overhead_s + compute_s_per_token * "
            "batched + kv_s_per_token * kv", f"# per-step residual noise: {costs.sigma_s:.3g} s; standard errors:"]
    head += [f"#   {k}: {v:.4g} +- {costs.errors[k]:.2g}" + ("" if costs.fitted[k] else " (prior)")
             for k, v in c.items()]
    return "\n".join(head) + "\n" + yaml.safe_dump(spec, sort_keys=False, width=120)
