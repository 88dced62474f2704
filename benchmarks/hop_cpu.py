"""CPU per request of the proxy's non-stream path, in process, with parts of the decision priced out.

    .venv/bin/python benchmarks/hop_cpu.py --harness ../shared/bench/overhead --python /tmp/gw/venv-base/bin/python \
        [--stub classify,decide] [--profile] [--seconds 4]

Starts the overhead harness's fake upstream and load client (closed loop, c=1) as subprocesses and the proxy
(`engine: openai` pool, goodput policy) in this process on uvloop; prints process CPU per request. `--stub
classify` replaces the classifier by a constant class, `--stub classify,decide` the policy's decision too, so
the difference prices each part. `--profile` prints cProfile's cumulative list for the adaptspec functions.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import subprocess
import sys
import time

import uvloop

from adaptspec.control.config import parse_config
from adaptspec.proxy.app import Proxy, create_app, start_site

UP_PORT, GW_PORT = 18931, 18932


def _stub(proxy: Proxy, parts: set[str]) -> None:
    if "classify" in parts:
        proxy.classify = lambda body: "chat"
    if "decide" in parts:
        fixed = proxy.decide("chat", proxy.pools.serving("fake"))
        proxy.decide = lambda *args, **kwargs: fixed


async def _run(args) -> dict:
    cfg = parse_config({"pools": [{"name": "u", "engine": "openai", "per_request": False, "proposers": [],
                                   "workers": [{"name": "u0", "url": f"http://127.0.0.1:{UP_PORT}"}]}]})
    proxy = Proxy(cfg)
    _stub(proxy, set(filter(None, args.stub.split(","))))
    runner = await start_site(create_app(proxy), "127.0.0.1", GW_PORT)
    await asyncio.sleep(1.5)
    prof = cProfile.Profile() if args.profile else None
    t0 = time.process_time()
    if prof is not None:
        prof.enable()
    load = await asyncio.create_subprocess_exec(
        args.python, f"{args.harness}/load.py", "--url", f"http://127.0.0.1:{GW_PORT}/v1/chat/completions",
        "-c", "1", "-d", str(args.seconds), "--warmup", "1", stdout=asyncio.subprocess.PIPE)
    out, _ = await load.communicate()
    if prof is not None:
        prof.disable()
    cpu = time.process_time() - t0
    await runner.cleanup()
    res = json.loads(out)
    requests = res["rps"] * (args.seconds + 1)  # the warm-up second is served (and costs CPU) too
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats("adaptspec", 40)
    return {"stub": args.stub or "-", "rps": res["rps"], "p50_ms": res.get("p50_ms"),
            "cpu_us_per_request": round(cpu / requests * 1e6)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", required=True, help="the overhead harness folder (fake_upstream.py, load.py)")
    ap.add_argument("--python", required=True, help="interpreter with the harness's deps (uvicorn, httptools)")
    ap.add_argument("--stub", default="", help="comma list of classify, decide")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    up = subprocess.Popen([args.python, f"{args.harness}/fake_upstream.py", str(UP_PORT)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        print(json.dumps(uvloop.run(_run(args))))
    finally:
        up.terminate()
        up.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
