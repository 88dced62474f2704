"""`adaptspec policy check FILE...`: validate config / policy files; print a summary or the error."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("policy", help="policy / config file tools")
    sub = p.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    check = sub.add_parser("check", help="validate YAML config / policy files (exit 0 if all are valid)")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(func=run_check)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])  # a usage error: help on stderr


def summary(cfg) -> str:
    pol = cfg.policy
    fields = pol.model_dump(exclude={"kind"}, exclude_defaults=False)
    detail = ", ".join(f"{k}={v}" for k, v in fields.items() if v not in ({}, [], None))
    pools = "; ".join(
        f"{p.name}: {p.engine} x{len(p.workers)} "
        + (f"per-request {'/'.join(p.proposers)} max_gamma={p.max_gamma}" if p.per_request
           else (f"fixed {p.proposers[0]} gamma={p.gamma}" if p.gamma else "fixed off"))
        + (f" profile={p.profile}" if p.profile else "")
        for p in cfg.pools
    ) or "none (embedded reference worker)"
    return (f"policy: {pol.kind} ({detail})\npools: {pools}\nstate: {cfg.state.backend}\n"
            f"server: {cfg.server.host}:{cfg.server.port}")


def run_check(args) -> int:
    from adaptspec.control.config import load_config
    from adaptspec.errors import ConfigError

    rc = 0
    for f in args.files:
        try:
            cfg = load_config(f)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            rc = 1
            continue
        print(f"ok: {f}")
        print("  " + summary(cfg).replace("\n", "\n  "))
    return rc
