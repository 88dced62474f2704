"""What one `adaptspec serve` hop costs, measured side by side against a trivial fast upstream.

Starts (on loopback) a minimal asyncio HTTP/1.1 upstream that answers OpenAI chat completions at once
(fixed JSON, or an SSE stream of N chunks), `adaptspec serve` in front of it with a pool of engine
`openai` (classification + policy decision run on every request; no body rewrite), and as the floor a bare
aiohttp server + client pass-through. Then, for each workload, alternates runs direct (A) and through
each gateway (B), A B A B' ..., each a closed loop of
`concurrency` clients on keep-alive connections for `--duration` seconds after a warm-up; reports
median over reps of: throughput ratio (proxied / direct), added p50 / p99 latency, and the proxy's CPU
per request. Separately it times the decision path in process (classify + state read + policy.decide,
no I/O) over many calls: p50 / p99.

Placement like ../shared/bench/overhead: the load client on CPU 0, upstream and proxy share CPU 1, so
the proxy's CPU shows up as lost throughput (change with --client-cpus / --server-cpus).

    .venv/bin/python benchmarks/proxy_overhead.py                    # ~2 min on 2 cores
    .venv/bin/python benchmarks/proxy_overhead.py --reps 3 --duration 5 --workloads ns1,ns32,s1,s32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------------------
# the trivial upstream: raw asyncio protocol, keep-alive, Content-Length bodies; ~20 us per request


def _upstream_main(port: int, chunks: int) -> None:
    body = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 8, "completion_tokens": 8, "total_tokens": 16}}).encode()
    plain = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    ev = b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"fake","choices":[{"index":0,' \
         b'"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
    fin = b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"fake","choices":[{"index":0,' \
          b'"delta":{},"finish_reason":"stop"}]}\n\n'
    models = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
    models_resp = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % len(models)) + models

    def chunk(b: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(b), b)

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.t, self.buf = transport, b""

        def data_received(self, data):
            self.buf += data
            while True:
                head_end = self.buf.find(b"\r\n\r\n")
                if head_end < 0:
                    return
                head = self.buf[:head_end].lower()
                i = head.find(b"content-length:")
                n = int(head[i + 15:head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None]) if i >= 0 else 0
                if len(self.buf) < head_end + 4 + n:
                    return
                req_body = self.buf[head_end + 4:head_end + 4 + n]
                self.buf = self.buf[head_end + 4 + n:]
                if head.startswith(b"get"):
                    self.t.write(models_resp)
                elif b'"stream":true' in req_body.replace(b" ", b""):
                    self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
                    for _ in range(chunks):
                        self.t.write(chunk(ev))
                    self.t.write(chunk(fin) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                else:
                    self.t.write(plain)

    async def serve():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Proto, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    _run(serve())


def _run(coro):
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


# ---------------------------------------------------------------------------------------------------------
# the floor: a bare aiohttp server + client pass-through (no parsing, no decision, no metrics)


def _passthrough_main(port: int, upstream: str) -> None:
    import aiohttp
    from aiohttp import web

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with request.app["client"].post(upstream + request.path, data=body,
                                              headers={"Content-Type": "application/json"}) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers["Content-Type"]})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", proxy)
        app.router.add_get("/health", lambda r: web.Response(text="ok"))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False) as c:
            app["client"] = c
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            await asyncio.Event().wait()

    _run(main())


# ---------------------------------------------------------------------------------------------------------
# the load client: closed loop over raw keep-alive sockets; latency per response


def _client_main(url: str, concurrency: int, duration: float, warmup: float, stream: bool, out: str) -> None:
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"model": "fake", "stream": stream,
                       "messages": [{"role": "user", "content": "Say hello in one word."}]}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Authorization: Bearer bench\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    lat: list[float] = []
    errors = 0

    async def one_client(stop_at: float, record_from: float):
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < stop_at:
                t = time.perf_counter()
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                ok = head.startswith(b"HTTP/1.1 200")
                low = head.lower()
                if b"transfer-encoding: chunked" in low:
                    data = b""
                    while True:
                        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
                        piece = await reader.readexactly(size + 2)
                        if size == 0:
                            break
                        data += piece[:-2]
                    ok = ok and (b"[DONE]" in data if stream else b'"choices"' in data)
                else:
                    i = low.find(b"content-length:")
                    n = int(low[i + 15:low.find(b"\r\n", i)])
                    data = await reader.readexactly(n)
                    ok = ok and b'"choices"' in data
                now = time.perf_counter()
                if t >= record_from and now <= stop_at:
                    if ok:
                        lat.append(now - t)
                    else:
                        errors += 1
        finally:
            writer.close()

    async def main():
        t0 = time.perf_counter()
        await asyncio.gather(*(one_client(t0 + warmup + duration, t0 + warmup) for _ in range(concurrency)))

    _run(main())
    Path(out).write_text(json.dumps({"lat": lat, "errors": errors, "duration": duration}))


# ---------------------------------------------------------------------------------------------------------
# orchestration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(url)


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _load(url: str, args, conc: int, stream: bool, tmp: str) -> dict:
    out = os.path.join(tmp, "load.json")
    cmd = ["taskset", "-c", args.client_cpus, sys.executable, __file__, "--_client", url, str(conc),
           str(args.duration), str(args.warmup), "1" if stream else "0", out]
    subprocess.run(cmd, check=True)
    res = json.loads(Path(out).read_text())
    lat = res["lat"]
    return {"rps": len(lat) / res["duration"], "p50": _pct(lat, 0.5) * 1e3, "p99": _pct(lat, 0.99) * 1e3,
            "n": len(lat), "errors": res["errors"]}


def decision_timing(n: int = 20000) -> dict:
    """classify + state read + policy.decide in process, as the handler runs it (no I/O)."""
    sys.path.insert(0, str(REPO))
    from adaptspec.cli._serve import load_serve_config
    from adaptspec.proxy.app import Proxy
    from adaptspec.proxy.upstream import Worker

    config = load_serve_config(None, upstreams=[], engine="openai", model=None)  # policies/default.yaml
    workers = [Worker(name=f"w{i}", url=f"http://127.0.0.1:{9000 + i}", pool="spec", engine="adaptspec",
                      profile="cpu-tiny", running=float(4 * i)) for i in range(2)]
    proxy = Proxy(config, extra_workers=workers)
    from adaptspec.proxy.app import _fallback_class

    classifier = "fallback (artifact missing)" if proxy.classify is _fallback_class else "shipped model"
    bodies = [{"model": "tiny", "messages": [{"role": "user", "content": c}]} for c in (
        "Summarize the following article in two sentences: The city council met on Tuesday to discuss ...",
        "def fib(n):\n    # complete this python function\n", "Translate to French: good morning, how are you?",
        "What is 17 * 23? Show your steps.", "hi, how are you today?")]
    cands = list(proxy.pools.workers.values())
    times = []
    for i in range(n):
        body = bodies[i % len(bodies)]
        t = time.perf_counter_ns()
        cls = proxy.classify(body)
        proxy.decide(cls, cands)
        times.append(time.perf_counter_ns() - t)
    times.sort()
    return {"p50_us": times[n // 2] / 1e3, "p99_us": times[int(n * 0.99)] / 1e3, "n": n, "classifier": classifier}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--workloads", default="ns1,ns32,s1,s32")
    ap.add_argument("--client-cpus", default="0")
    ap.add_argument("--server-cpus", default="1")
    ap.add_argument("--no-baseline", action="store_true", help="skip the bare aiohttp pass-through row")
    ap.add_argument("--out", default=None, help="write the JSON result here too")
    args = ap.parse_args()

    up_port = _free_port()
    up_url = f"http://127.0.0.1:{up_port}"
    pin = ["taskset", "-c", args.server_cpus]
    procs: list[subprocess.Popen] = []
    rows = []
    try:
        procs.append(subprocess.Popen([*pin, sys.executable, __file__, "--_upstream", str(up_port), str(args.chunks)]))
        _wait(up_url + "/v1/models")
        gateways: dict[str, tuple[str, subprocess.Popen]] = {}
        if not args.no_baseline:
            port = _free_port()
            p = subprocess.Popen([*pin, sys.executable, __file__, "--_passthrough", str(port), up_url])
            procs.append(p)
            gateways["aiohttp pass-through"] = (f"http://127.0.0.1:{port}", p)
        port = _free_port()
        p = subprocess.Popen([*pin, sys.executable, "-m", "adaptspec", "--log-level", "WARNING", "serve",
                              "--upstream", up_url, "--engine", "openai", "--model", "fake", "--host", "127.0.0.1",
                              "--port", str(port)], cwd=REPO)
        procs.append(p)
        gateways["adaptspec serve"] = (f"http://127.0.0.1:{port}", p)
        for url, _ in gateways.values():
            _wait(url + "/health")
        with tempfile.TemporaryDirectory() as tmp:
            for wl in args.workloads.split(","):
                stream, conc = wl.startswith("s"), int(wl.lstrip("ns"))
                runs: dict[str, list[tuple[dict, dict]]] = {name: [] for name in gateways}
                for _ in range(args.reps):  # A B, A B', ... : each gateway paired with its own direct run
                    for name, (url, proc) in gateways.items():
                        a = _load(up_url, args, conc, stream, tmp)
                        c0 = _cpu_of(proc.pid)
                        b = _load(url, args, conc, stream, tmp)
                        b["cpu_us_per_req"] = (_cpu_of(proc.pid) - c0) / max(1, b["n"]) * 1e6
                        runs[name].append((a, b))
                med = statistics.median
                for name, pairs in runs.items():
                    rows.append({
                        "gateway": name,
                        "workload": (f"stream{args.chunks}" if stream else "non-stream") + f" c={conc}",
                        "direct_rps": med(a["rps"] for a, _ in pairs), "proxy_rps": med(b["rps"] for _, b in pairs),
                        "ratio": med(b["rps"] / a["rps"] for a, b in pairs),
                        "direct_p50_ms": med(a["p50"] for a, _ in pairs),
                        "added_p50_ms": med(b["p50"] - a["p50"] for a, b in pairs),
                        "added_p99_ms": med(b["p99"] - a["p99"] for a, b in pairs),
                        "proxy_cpu_us_per_req": med(b["cpu_us_per_req"] for _, b in pairs),
                        "errors": sum(a["errors"] + b["errors"] for a, b in pairs)})
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    dec = decision_timing()
    print("| gateway | workload | direct rps | gw rps | ratio | direct p50 ms | added p50 ms | added p99 ms "
          "| gw CPU us/req | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['gateway']} | {r['workload']} | {r['direct_rps']:.0f} | {r['proxy_rps']:.0f} | {r['ratio']:.3f} | "
              f"{r['direct_p50_ms']:.3f} | {r['added_p50_ms']:.3f} | {r['added_p99_ms']:.3f} | "
              f"{r['proxy_cpu_us_per_req']:.0f} | {r['errors']} |")
    print(f"\ndecision path (classify + state + policy.decide), in process: p50 {dec['p50_us']:.1f} us, "
          f"p99 {dec['p99_us']:.1f} us over {dec['n']} calls (classifier: {dec['classifier']})")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "decision": dec, "args": vars(args)}, indent=2))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--_upstream":
        _upstream_main(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--_passthrough":
        _passthrough_main(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--_client":
        _client_main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "1",
                     sys.argv[7])
    else:
        sys.exit(main())
