"""Redis work against request rate with several proxy replicas: the cost of sharing what they learn.

    .venv/bin/python benchmarks/redis_ops.py                          # 3 replicas, 25 / 50 / 100 req/s
    .venv/bin/python benchmarks/redis_ops.py --rates 20 80 --seconds 30 --json ops.json
    .venv/bin/python benchmarks/redis_ops.py --code ../old-checkout   # the same load on another checkout

Everything on loopback: redis-server, one test upstream (tests/proxy/upstream_app.py, speculative usage in
every answer, so every request is an observation), N `adaptspec serve` replicas sharing state through Redis.
For each rate it sends paced non-stream requests spread over the replicas for --seconds and reads Redis'
INFO stats before and after: commands processed per second (total_commands_processed), network bytes in /
out per second, and the learning stream's length. Prints one row per rate and the growth from the lowest
to the highest rate; docs/scale-out.md turns the per-replica figures into the arithmetic for 100 replicas.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from faults.load import one_request  # noqa: E402
from proxy.conftest import RedisServer, Upstream, free_port, stop_process, wait_http  # noqa: E402


def start_proxy(code: Path, cfg: dict, tmp: Path, name: str) -> tuple[subprocess.Popen, str]:
    import yaml

    port = free_port()
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(code), "ADAPTSPEC_ACCESS_LOG": "off"}
    log = open(tmp / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([sys.executable, "-m", "adaptspec", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--config", str(path)], cwd=code, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", proc=proc, ok=(200, 503), timeout=60)
    return proc, url


async def paced(urls: list[str], rate: float, seconds: float) -> dict[str, int]:
    import aiohttp

    outcomes: dict[str, int] = {}
    tasks = set()

    async def one(session, url):
        r = await one_request(session, url, stream=False, max_tokens=8, timeout=30)
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as session:
        t0 = time.monotonic()
        n = 0
        while (due := t0 + n / rate) < t0 + seconds:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            t = asyncio.create_task(one(session, urls[n % len(urls)]))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            n += 1
        await asyncio.gather(*tasks)
    return outcomes


def stats(url: str) -> dict:
    import redis

    with redis.Redis.from_url(url) as r:
        info = r.info("stats")
        learn = r.xlen("ops:learn") if r.exists("ops:learn") else (r.xlen("ops:obs") if r.exists("ops:obs") else 0)
        return {"commands": info["total_commands_processed"], "in": info["total_net_input_bytes"],
                "out": info["total_net_output_bytes"], "stream": learn, "t": time.monotonic()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--rates", type=float, nargs="+", default=[25.0, 50.0, 100.0], help="requests per second")
    ap.add_argument("--seconds", type=float, default=20.0, help="per rate (default 20)")
    ap.add_argument("--code", type=Path, default=REPO, help="checkout whose adaptspec the replicas run")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        up = Upstream("w0", alpha=0.8).start()
        rs = RedisServer(tmp).start()
        state = {"backend": "redis", "url": rs.url, "key_prefix": "ops:"}
        cfg = {"pools": [{"name": "spec", "engine": "adaptspec", "per_request": True, "proposers": ["ngram"],
                          "profile": "cpu-tiny", "workers": [{"name": "w0", "url": up.url}]}],
               "policy": {"kind": "static", "proposer": "ngram", "gamma": 4}, "state": state}
        procs = []
        try:
            for i in range(args.replicas):
                procs.append(start_proxy(args.code, cfg, tmp, f"proxy{i}"))
            urls = [u for _, u in procs]
            asyncio.run(paced(urls, 10, 3))  # warm-up
            for rate in args.rates:
                s0 = stats(rs.url)
                outcomes = asyncio.run(paced(urls, rate, args.seconds))
                s1 = stats(rs.url)
                dt = s1["t"] - s0["t"]
                rows.append({"rate": rate, "achieved": round(sum(outcomes.values()) / dt, 1), "outcomes": outcomes,
                             "ops_per_s": round((s1["commands"] - s0["commands"] - 4) / dt, 1),
                             "in_kb_per_s": round((s1["in"] - s0["in"]) / dt / 1024, 1),
                             "out_kb_per_s": round((s1["out"] - s0["out"]) / dt / 1024, 1),
                             "stream_entries_added": s1["stream"] - s0["stream"]})
                r = rows[-1]
                print(f"{rate:6.0f} req/s offered ({r['achieved']} done): {r['ops_per_s']:8.1f} Redis commands/s, "
                      f"in {r['in_kb_per_s']} KB/s, out {r['out_kb_per_s']} KB/s, "
                      f"stream +{r['stream_entries_added']} entries  {outcomes}", flush=True)
        finally:
            for proc, _ in procs:
                stop_process(proc, __import__("signal").SIGINT)
            up.kill()
            rs.stop()
    growth = rows[-1]["ops_per_s"] / rows[0]["ops_per_s"]
    print(f"Redis commands/s grew {growth:.2f}x while the request rate grew {rows[-1]['rate'] / rows[0]['rate']:g}x "
          f"({args.replicas} replicas, {args.code})")
    if args.json:
        Path(args.json).write_text(json.dumps({"replicas": args.replicas, "code": str(args.code), "rows": rows,
                                               "growth": round(growth, 3)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
