"""`adaptspec report --url PROXY`: the realized-speedup table of a running proxy (`GET /adaptspec/report`).

    adaptspec report --url http://127.0.0.1:8000            # text table: class x load bucket, arm, n, speedup
    adaptspec report --url http://127.0.0.1:8000 --json     # the route's JSON as is

The proxy needs `policy.holdout` (and/or `policy.switchback`) in its config; otherwise it says so.
An API key, when the proxy wants one, comes from --api-key or $ADAPTSPEC_API_KEY.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="realized speedup per class and load from a running proxy "
                                             "(holdout / switchback)")
    p.add_argument("--url", required=True, help="proxy base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--json", action="store_true", help="print the JSON of /adaptspec/report")
    p.add_argument("--api-key", default=None, help="client key (default: $ADAPTSPEC_API_KEY)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    p.set_defaults(func=run)


def fetch(url: str, api_key: str | None, timeout: float) -> dict:
    req = urllib.request.Request(url.rstrip("/") + "/adaptspec/report")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (an operator-given http URL)
        return json.loads(resp.read())


def run(args) -> int:
    from adaptspec.control.holdout import format_table

    if not args.url.startswith(("http://", "https://")):
        print(f"adaptspec report: error: --url must start with http:// or https://, got {args.url!r}",
              file=sys.stderr)
        return 2
    try:
        data = fetch(args.url, args.api_key or os.environ.get("ADAPTSPEC_API_KEY"), args.timeout)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        print(f"adaptspec report: error: {args.url} answered {exc.code}: {detail}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"adaptspec report: error: cannot read {args.url}/adaptspec/report: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    if not data.get("enabled"):
        print("no experiment running: add policy.holdout (or policy.switchback) to the proxy's config")
        return 0
    print(f"policy {data.get('policy')}: realized speedup with {100 * data.get('confidence', 0.95):.0f}% intervals "
          "(decode time per token, off / speculating; > 1 is faster)")
    print(format_table(data.get("requests", []), data.get("windows", [])))
    guard = data.get("guard") or {}
    control = data.get("control", "off")
    if control != "off":  # the hedge: switchback windows compare the policy with a fixed plan, not with off
        print(f"switchback control plan: {control} (windows' ratio = policy / {control}; a guarded load bucket runs "
              f"{control}): {', '.join(guard.get('buckets', [])) or 'none guarded'}")
    if guard.get("strata") or guard.get("buckets"):
        print(f"guard: off in {len(guard.get('strata', []))} strata and {len(guard.get('buckets', []))} load "
              f"buckets (engaged {guard.get('engaged', 0)}x, released {guard.get('released', 0)}x)")
    return 0
