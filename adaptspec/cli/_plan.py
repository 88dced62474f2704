"""`adaptspec plan`: the cost model's best (proposer, gamma) for an alpha, a draft cost or a profile.

    adaptspec plan --alpha 0.8 --draft-cost 0.1 --max-gamma 8          # Leviathan memory-bound limit
    adaptspec plan --profile h200-llama3-70b --batch 1,16,64 --proposer draft-8b --alpha 0.8
    adaptspec plan --profile h100-llama3-8b --batch 8 --class code      # alpha from the built-in prior
    adaptspec plan --profile h200-llama3-70b --batch 16 --proposer ngram --alpha 0.8 --propose-rate 0.4 \
        --prefill-ratio 20 --prompt-tokens 4000                        # RAG-like traffic
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="cost-model optimum (gamma, proposer, speedup) as JSON",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alpha", help="per-token acceptance rate, or conditional rates per position "
                   "'0.84,0.60,0.39' (default with --profile: the prior for --class)")
    p.add_argument("--draft-cost", type=float, help="c = draft step / target step (memory-bound mode)")
    p.add_argument("--max-gamma", type=int, default=8, help="largest gamma to consider (default 8)")
    p.add_argument("--profile", help="step-time profile name or YAML path (see --list-profiles)")
    p.add_argument("--batch", default="1", help="batch size(s), comma-separated (default 1)")
    p.add_argument("--proposer", action="append",
                   help="proposer option(s) of the profile (repeatable; default: all)")
    p.add_argument("--class", dest="content_class", default="chat", help="content class for the prior")
    p.add_argument("--margin", type=float, default=1.0, help="a plan must beat off by this factor")
    p.add_argument("--propose-rate", type=float, default=1.0,
                   help="share of steps on which n-gram lookup finds a draft (n-gram and hybrid options only; "
                        "default 1)")
    p.add_argument("--prefill-ratio", type=float, default=0.0,
                   help="prompt tokens prefilled per generated token in the traffic (default 0)")
    p.add_argument("--prompt-tokens", type=float, default=0.0,
                   help="mean prompt tokens per request, the size of a prefill chunk (default 0: spread)")
    p.add_argument("--list-profiles", action="store_true", help="print the built-in profile names")
    p.set_defaults(func=run)


def _alpha(text: str) -> float | tuple[float, ...]:
    parts = [float(x) for x in text.split(",") if x.strip()]
    for a in parts:
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {a}")
    if not parts:
        raise ValueError("empty --alpha")
    return parts[0] if len(parts) == 1 else tuple(parts)


def _round(d: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def run(args) -> int:
    from adaptspec.control import costmodel
    from adaptspec.control.estimators import prior_alpha
    from adaptspec.control.profiles import Profile, list_profiles, load_profile
    from adaptspec.errors import ConfigError

    if args.list_profiles:
        print(json.dumps(list_profiles()))
        return 0
    try:
        alpha = _alpha(args.alpha) if args.alpha is not None else None
        batches = [float(b) for b in str(args.batch).split(",")]
        batches = [int(b) if b.is_integer() else b for b in batches]
        if any(b < 1 for b in batches):
            raise ValueError("--batch must be >= 1")
        if args.max_gamma < 0:
            raise ValueError("--max-gamma must be >= 0")
        if not 0.0 < args.propose_rate <= 1.0:
            raise ValueError(f"--propose-rate must be in (0, 1], got {args.propose_rate}")
        if args.prefill_ratio < 0 or args.prompt_tokens < 0:
            raise ValueError("--prefill-ratio and --prompt-tokens must be >= 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.profile is None:
        if alpha is None or args.draft_cost is None:
            print("error: give --alpha and --draft-cost (memory-bound limit), or --profile", file=sys.stderr)
            return 2
        if args.draft_cost < 0:
            print("error: --draft-cost must be >= 0", file=sys.stderr)
            return 2
        profile = Profile.memory_bound(args.draft_cost)
        plan = costmodel.best_plan({"draft": alpha}, profile, 1, args.max_gamma, args.margin)
        by_gamma = [round(costmodel.evaluate(profile, "draft", alpha, g, 1).speedup, 4)
                    for g in range(args.max_gamma + 1)]
        print(json.dumps({"mode": "memory-bound", "alpha": alpha, "draft_cost": args.draft_cost,
                          "max_gamma": args.max_gamma, "gamma": plan.gamma, "proposer": plan.proposer,
                          "speedup": round(plan.speedup, 4),
                          "expected_tokens": round(plan.expected_tokens, 4),
                          "speedup_by_gamma": by_gamma}, indent=1))
        return 0

    try:
        profile = load_profile(args.profile)
        names = args.proposer or list(profile.drafts)
        for n in names:
            profile.resolve(n)
    except (ConfigError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    alphas = {n: alpha if alpha is not None else prior_alpha(profile.draft(n).kind, args.content_class)
              for n in names}
    traffic = {"prefill_ratio": args.prefill_ratio, "prefill_chunk": args.prompt_tokens}
    rates = {n: args.propose_rate if profile.draft(n).kind in ("ngram", "hybrid") else 1.0 for n in names}
    out = []
    for b in batches:
        plan = costmodel.best_plan(alphas, profile, b, args.max_gamma, args.margin, rates, **traffic)
        candidates = {}
        for n, a in alphas.items():
            c = costmodel.best_gamma(profile, n, a, b, args.max_gamma, propose_rate=rates[n], **traffic) \
                if args.max_gamma else None
            candidates[n] = {"gamma": c.gamma, "speedup": round(c.speedup, 4)} if c else None
        row = {"profile": profile.name, "batch": b, "proposer": plan.proposer, "gamma": plan.gamma,
               "speedup": plan.speedup, "alpha": plan.alpha, "expected_tokens": plan.expected_tokens,
               "goodput_tokens_s": plan.goodput, "step_ms": plan.baseline_time_s * 1e3,
               "draft_ms": plan.draft_time_s * 1e3, "verify_ms": plan.verify_time_s * 1e3}
        row = _round(row)
        row["alphas"] = alphas
        row["candidates"] = candidates
        if profile.provisional:
            row["provisional_profile"] = True
        out.append(row)
    print(json.dumps(out[0] if len(out) == 1 else out, indent=1))
    return 0
