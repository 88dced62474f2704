"""Soak test: minutes of mixed traffic and rotating faults against two `adaptspec serve` replicas, printing
the figures the fault suite (tests/faults) asserts on a short run.

Everything runs on loopback: two test upstreams (tests/proxy/upstream_app.py), redis-server when installed
(the replicas share state through it), two proxy replicas. Normal load (streams and non-stream requests)
runs on both replicas the whole time, interleaved with hostile requests from the deterministic corpus
(tests/faults/corpus.py) and distinct client strings. Every `--fault-every` seconds the next fault in turn
is applied: SIGSTOP a worker (SIGCONT after `--freeze`), SIGKILL a worker (restarted after), kill Redis
(restarted after), a burst of clients that disconnect, compressed bombs.

    .venv/bin/python benchmarks/soak.py                        # 3 minutes
    .venv/bin/python benchmarks/soak.py --minutes 10 --clients 16 --json soak.json

Prints: outcomes of normal requests (ok / stream_error / lost / http_*), hostile requests answered by
status (a 5xx or no answer is a failure), hangs, and per replica RSS, open fds and /metrics size at the
start (after a warm-up) and the end. Exit status 1 when anything was lost, hung, or answered 5xx to a client
error, or a replica grew past 50 MB RSS / 100 KB of /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from faults.corpus import corpus, hostile, send  # noqa: E402
from faults.load import one_request, summary  # noqa: E402
from proxy.conftest import ProxyProcess, RedisServer, Upstream, pool  # noqa: E402


def figures(px: ProxyProcess) -> dict:
    status = Path(f"/proc/{px.proc.pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    with urllib.request.urlopen(px.url + "/metrics", timeout=10) as r:
        size = len(r.read())
    return {"rss_mb": round(rss_kb / 1024, 1), "fds": len(os.listdir(f"/proc/{px.proc.pid}/fd")),
            "metrics_bytes": size}


class Soak:
    def __init__(self, args: argparse.Namespace, tmp: Path):
        self.args, self.tmp = args, tmp
        self.rng = random.Random(args.seed)
        self.normal: list = []
        self.hostile: dict[str, int] = {}
        self.hostile_bad: list = []
        self.faults: list[str] = []

    def start(self) -> None:
        self.workers = [Upstream("w0", delay_ms=10).start(), Upstream("w1", delay_ms=10).start()]
        self.redis = RedisServer(self.tmp).start() if shutil.which("redis-server") else None
        cfg = {"pools": [pool("p", self.workers, profile="cpu-tiny")],
               "server": {"scrape_interval_s": 0.1, "first_byte_timeout_s": 5, "stall_timeout_s": 3,
                          "eject_backoff_s": 0.5, "max_body_bytes": 1 << 20, "body_timeout_s": 3,
                          "keepalive_timeout_s": 5}}
        if self.redis is not None:
            cfg["state"] = {"backend": "redis", "url": self.redis.url, "key_prefix": "soak:"}
        self.proxies = [ProxyProcess(cfg, self.tmp, name=f"proxy{i}").start() for i in range(2)]

    def stop(self) -> None:
        for px in self.proxies:
            px.stop()
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
            w.kill()
        if self.redis is not None:
            self.redis.stop()

    async def normal_client(self, i: int, stop: float) -> None:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            n = 0
            while time.monotonic() < stop:
                px = self.proxies[(i + n) % 2]
                self.normal.append(await one_request(session, px.url, stream=(i + n) % 2 == 0, max_tokens=8,
                                                     timeout=60))
                n += 1

    async def hostile_client(self, cases: list, stop: float) -> None:
        n = 0
        while time.monotonic() < stop:
            case = cases[n % len(cases)]
            host, port = self.proxies[n % 2].url.removeprefix("http://").split(":")
            try:
                status, _, body = await send(host, int(port), case.raw, timeout=30)
            except TimeoutError:
                status, body = "hung", b""
            key = str(status)
            self.hostile[key] = self.hostile.get(key, 0) + 1
            if status is None or status == "hung" or status >= 500:
                self.hostile_bad.append((case.name, status, body[:120]))
            n += 1

    async def fault_loop(self, stop: float) -> None:
        kinds = ["sigstop", "sigkill", "redis", "disconnects", "bombs"]
        k = 0
        while time.monotonic() + self.args.fault_every < stop:
            await asyncio.sleep(self.args.fault_every)
            kind = kinds[k % len(kinds)]
            k += 1
            w = self.workers[k % 2]
            self.faults.append(f"{time.strftime('%H:%M:%S')} {kind}")
            if kind == "sigstop":
                w.proc.send_signal(signal.SIGSTOP)
                await asyncio.sleep(self.args.freeze)
                w.proc.send_signal(signal.SIGCONT)
            elif kind == "sigkill":
                await asyncio.to_thread(w.kill)
                await asyncio.sleep(2)
                await asyncio.to_thread(w.start)
            elif kind == "redis" and self.redis is not None:
                await asyncio.to_thread(self.redis.stop)
                await asyncio.sleep(3)
                await asyncio.to_thread(self.redis.start)
            elif kind == "disconnects":
                await self.disconnect_burst(40)
            elif kind == "bombs":
                bombs = [c for c in corpus(self.args.seed) if c.name.startswith("bomb-")]
                await self.hostile_client(bombs * 3, time.monotonic() + 5)

    async def disconnect_burst(self, n: int) -> None:
        import aiohttp

        async def leave(session, url):
            try:
                async with asyncio.timeout(0.2):
                    async with session.post(url + "/v1/chat/completions", json={
                            "model": "tiny", "stream": True, "max_tokens": 50,
                            "messages": [{"role": "user", "content": "hi"}]}) as r:
                        await r.content.readline()
                        await asyncio.sleep(1)
            except (TimeoutError, aiohttp.ClientError):
                pass

        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(leave(session, self.proxies[i % 2].url) for i in range(n)))

    async def run(self) -> dict:
        warm_stop = time.monotonic() + 10
        await asyncio.gather(*(self.normal_client(i, warm_stop) for i in range(4)),
                             self.hostile_client(hostile(300, seed=self.args.seed + 1), warm_stop))
        self.normal.clear()
        self.hostile.clear()
        before = [figures(px) for px in self.proxies]
        stop = time.monotonic() + self.args.minutes * 60
        cases = hostile(5000, seed=self.args.seed)
        self.rng.shuffle(cases)
        await asyncio.gather(*(self.normal_client(i, stop) for i in range(self.args.clients)),
                             *(self.hostile_client(cases[i::4], stop) for i in range(4)),
                             self.fault_loop(stop))
        await asyncio.sleep(2)
        after = [figures(px) for px in self.proxies]
        return {"minutes": self.args.minutes, "normal": summary(self.normal), "hostile": self.hostile,
                "hostile_failures": self.hostile_bad[:20], "faults": self.faults,
                "replicas": [{"before": b, "after": a} for b, a in zip(before, after, strict=True)],
                "lost_examples": [r.detail for r in self.normal if r.outcome == "lost"][:10]}


def verdict(report: dict) -> list[str]:
    problems = []
    if report["normal"].get("lost"):
        problems.append(f"{report['normal']['lost']} normal requests lost")
    if report["hostile_failures"]:
        problems.append(f"{len(report['hostile_failures'])}+ hostile requests got a 5xx or no answer")
    if any(k.startswith("http_5") for k in report["normal"]):
        problems.append("5xx answers to normal requests")
    for i, r in enumerate(report["replicas"]):
        if r["after"]["rss_mb"] - r["before"]["rss_mb"] >= 50:
            problems.append(f"replica {i} RSS grew {r['after']['rss_mb'] - r['before']['rss_mb']:.1f} MB")
        if r["after"]["metrics_bytes"] - r["before"]["metrics_bytes"] >= 100_000:
            problems.append(f"replica {i} /metrics grew past 100 KB")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=8, help="normal closed-loop clients (default 8)")
    ap.add_argument("--fault-every", type=float, default=20.0, metavar="S")
    ap.add_argument("--freeze", type=float, default=8.0, metavar="S", help="SIGSTOP duration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        soak = Soak(args, Path(tmp))
        soak.start()
        try:
            report = asyncio.run(soak.run())
        finally:
            soak.stop()
    print(f"soak: {report['minutes']:g} min, faults: {', '.join(f.split()[1] for f in report['faults']) or 'none'}")
    print(f"normal requests:  {report['normal']}")
    print(f"hostile requests: {dict(sorted(report['hostile'].items()))}")
    for i, r in enumerate(report["replicas"]):
        b, a = r["before"], r["after"]
        print(f"replica {i}: RSS {b['rss_mb']} -> {a['rss_mb']} MB, fds {b['fds']} -> {a['fds']}, "
              f"/metrics {b['metrics_bytes']} -> {a['metrics_bytes']} bytes")
    problems = verdict(report)
    print("verdict: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
