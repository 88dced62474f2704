"""Soak test: minutes (or an hour) of mixed traffic and rotating faults against `adaptspec serve` replicas
(3 by default), printing the figures the fault suite (tests/faults) asserts on a short run, sampling them
over time and, with --plot, drawing them (docs/scale-out.md shows an hour of it).

Everything runs on loopback: two test upstreams (tests/proxy/upstream_app.py), redis-server when installed
(the replicas share state through it), the proxy replicas. Normal load (streams and non-stream requests)
runs on every replica the whole time, interleaved with hostile requests from the deterministic corpus
(tests/faults/corpus.py) and distinct client strings. Every `--fault-every` seconds the next fault in turn
is applied: SIGSTOP a worker (SIGCONT after `--freeze`), SIGKILL a worker (restarted after), kill Redis
(restarted after), a burst of clients that disconnect, compressed bombs.

    .venv/bin/python benchmarks/soak.py                        # 3 minutes
    .venv/bin/python benchmarks/soak.py --minutes 10 --clients 16 --json soak.json
    .venv/bin/python benchmarks/soak.py --minutes 60 --json summary.json --plot soak.png --samples soak.csv

Prints: outcomes of normal requests (ok / stream_error / lost / http_*), hostile requests answered by
status (a 5xx or no answer is a failure), hangs, and per replica RSS, open fds and /metrics size at the
start (after a warm-up) and the end. Every --sample-every seconds it samples each replica's RSS, fds and
/metrics bytes, Redis' used memory, keys and commands processed, and the outcome counts so far. Exit
status 1 when anything was lost, hung, or answered 5xx to a client error, or a replica grew past 50 MB RSS /
100 KB of /metrics, or (with at least 8 samples) the median of the last quarter's samples of RSS, fds,
Redis memory or /metrics bytes is more than 5% above the second quarter's (fds: and more than 3 above).
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
from faults.load import one_request  # noqa: E402
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
        self.normal: dict[str, int] = {}
        self.lost_examples: list[str] = []
        self.samples: list[dict] = []
        self.cut_at = float("inf")  # SIGTERM / SIGINT: end the run now, with its report and plot
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
        self.proxies = [ProxyProcess(cfg, self.tmp, name=f"proxy{i}").start() for i in range(self.args.replicas)]

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
            while time.monotonic() < min(stop, self.cut_at):
                px = self.proxies[(i + n) % len(self.proxies)]
                r = await one_request(session, px.url, stream=(i + n) % 2 == 0, max_tokens=8, timeout=60)
                self.normal[r.outcome] = self.normal.get(r.outcome, 0) + 1
                if r.outcome == "lost" and len(self.lost_examples) < 10:
                    self.lost_examples.append(r.detail)
                n += 1

    async def hostile_client(self, cases: list, stop: float) -> None:
        n = 0
        while time.monotonic() < min(stop, self.cut_at):
            case = cases[n % len(cases)]
            host, port = self.proxies[n % len(self.proxies)].url.removeprefix("http://").split(":")
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
        while time.monotonic() + self.args.fault_every < min(stop, self.cut_at):
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
            await asyncio.gather(*(leave(session, self.proxies[i % len(self.proxies)].url) for i in range(n)))

    async def run(self) -> dict:
        warm_stop = time.monotonic() + 10
        await asyncio.gather(*(self.normal_client(i, warm_stop) for i in range(4)),
                             self.hostile_client(hostile(300, seed=self.args.seed + 1), warm_stop))
        self.normal.clear()
        self.hostile.clear()
        before = [figures(px) for px in self.proxies]
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: setattr(self, "cut_at", time.monotonic()))
        t0 = time.monotonic()
        stop = t0 + self.args.minutes * 60
        cases = hostile(5000, seed=self.args.seed)
        self.rng.shuffle(cases)
        await asyncio.gather(*(self.normal_client(i, stop) for i in range(self.args.clients)),
                             *(self.hostile_client(cases[i::4], stop) for i in range(4)),
                             self.fault_loop(stop), self.sampler(t0, stop))
        await asyncio.sleep(2)
        after = [figures(px) for px in self.proxies]
        return {"minutes": round(min(self.args.minutes, (time.monotonic() - t0 - 2) / 60), 1), "replica_count": len(self.proxies), "normal": dict(self.normal),
                "hostile": self.hostile, "hostile_failures": self.hostile_bad[:20], "faults": self.faults,
                "replicas": [{"before": b, "after": a} for b, a in zip(before, after, strict=True)],
                "lost_examples": self.lost_examples, "quarters": quarters(self.samples)}

    async def sampler(self, t0: float, stop: float) -> None:
        while time.monotonic() < min(stop, self.cut_at):
            sample = {"t": round(time.monotonic() - t0, 1), "outcomes": dict(self.normal),
                      "hostile_bad": len(self.hostile_bad), "redis": await asyncio.to_thread(self.redis_figures)}
            try:
                sample["replicas"] = await asyncio.to_thread(lambda: [figures(px) for px in self.proxies])
            except OSError as exc:  # a /metrics read that timed out under a fault: the next sample counts
                sample["replicas"] = None
                sample["error"] = str(exc)
            self.samples.append(sample)
            while time.monotonic() < min(stop, self.cut_at, t_next := self.samples[-1]["t"] + t0 + self.args.sample_every):
                await asyncio.sleep(min(1.0, max(0.0, t_next - time.monotonic())))

    def redis_figures(self) -> dict | None:
        """used_memory, keys and total commands processed, or None while Redis is down (a fault)."""
        if self.redis is None or self.redis.proc is None:
            return None
        import redis

        try:
            with redis.Redis.from_url(self.redis.url, socket_timeout=2) as r:
                info = r.info()
                return {"used_memory": info["used_memory"], "keys": r.dbsize(),
                        "commands": info["total_commands_processed"]}
        except (redis.exceptions.RedisError, OSError):
            return None


FLAT = {"rss_mb": 0.0, "fds": 3.0, "metrics_bytes": 0.0, "redis_used_memory": 0.0}  # absolute slack


def series(samples: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """(t, value) per figure: the replicas' summed RSS / fds / /metrics bytes, Redis' memory and keys."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in (*FLAT, "redis_keys")}
    for s in samples:
        if s.get("replicas"):
            for k in ("rss_mb", "fds", "metrics_bytes"):
                out[k].append((s["t"], sum(r[k] for r in s["replicas"])))
        if s.get("redis"):
            out["redis_used_memory"].append((s["t"], s["redis"]["used_memory"]))
            out["redis_keys"].append((s["t"], s["redis"]["keys"]))
    return out


def quarters(samples: list[dict]) -> dict[str, dict[str, float]]:
    """Median of each figure over the second and the last quarter of the run (the first is warm-up)."""
    import statistics

    if not samples:
        return {}
    end = samples[-1]["t"]
    out = {}
    for k, pts in series(samples).items():
        q2 = [v for t, v in pts if end / 4 <= t < end / 2]
        q4 = [v for t, v in pts if t >= 3 * end / 4]
        if q2 and q4:
            out[k] = {"q2": statistics.median(q2), "q4": statistics.median(q4)}
    return out


def plot(samples: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ser = series(samples)
    fig, axes = plt.subplots(3, 2, figsize=(11, 8), sharex=True)
    panels = [("rss_mb", "RSS, all replicas (MB)"), ("fds", "open fds, all replicas"),
              ("redis_used_memory", "Redis used_memory (bytes)"), ("redis_keys", "Redis keys"),
              ("metrics_bytes", "/metrics bytes, all replicas")]
    for ax, (k, label) in zip(axes.flat, panels, strict=False):
        pts = ser[k]
        ax.plot([t / 60 for t, _ in pts], [v for _, v in pts], lw=1)
        ax.set_title(label, fontsize=9)
        ax.set_ylim(bottom=0)
    ax = axes.flat[5]
    kinds = sorted({k for s in samples for k in s["outcomes"]})
    for kind in kinds:
        ax.plot([s["t"] / 60 for s in samples], [s["outcomes"].get(kind, 0) for s in samples], lw=1, label=kind)
    ax.set_title("normal requests by outcome (cumulative)", fontsize=9)
    ax.legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


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
    for k, q in report.get("quarters", {}).items():
        if k in FLAT and report.get("samples", 0) >= 8 and q["q4"] > q["q2"] * 1.05 + FLAT[k]:
            problems.append(f"{k} grew: last quarter's median {q['q4']:g} > 1.05 x second quarter's {q['q2']:g}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=8, help="normal closed-loop clients (default 8)")
    ap.add_argument("--fault-every", type=float, default=20.0, metavar="S")
    ap.add_argument("--freeze", type=float, default=8.0, metavar="S", help="SIGSTOP duration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=3, help="proxy replicas (default 3)")
    ap.add_argument("--sample-every", type=float, default=30.0, metavar="S", help="sampling period (default 30)")
    ap.add_argument("--json", metavar="FILE", help="also write the report (a summary, no samples) as JSON")
    ap.add_argument("--samples", metavar="FILE", help="write the samples as CSV")
    ap.add_argument("--plot", metavar="PNG", help="plot the samples (matplotlib)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        soak = Soak(args, Path(tmp))
        soak.start()
        try:
            report = asyncio.run(soak.run())
        finally:
            soak.stop()
    report["samples"] = len(soak.samples)
    if args.samples:
        write_csv(soak.samples, args.samples)
    if args.plot:
        plot(soak.samples, args.plot, f"soak: {len(soak.proxies)} replicas, {report['minutes']:g} min, "
             f"faults every {args.fault_every:g} s; {sum(report['normal'].values())} normal requests")
    print(f"soak: {report['minutes']:g} min, faults: {', '.join(f.split()[1] for f in report['faults']) or 'none'}")
    print(f"normal requests:  {report['normal']}")
    for k, q in report["quarters"].items():
        print(f"{k}: median {q['q2']:g} in the second quarter, {q['q4']:g} in the last")
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


def write_csv(samples: list[dict], path: str) -> None:
    ser = series(samples)
    keys = list(ser)
    by_t: dict[float, dict] = {}
    for k, pts in ser.items():
        for t, v in pts:
            by_t.setdefault(t, {})[k] = v
    lines = ["t_s," + ",".join(keys)]
    lines += [f"{t}," + ",".join(str(row.get(k, "")) for k in keys) for t, row in sorted(by_t.items())]
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
