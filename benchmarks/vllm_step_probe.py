"""Probe: what one speculating request costs a vLLM (CPU) batch of non-speculating ones.

Starts one vLLM server with the plugin (n-gram, max 4; bench/vllm_pool.py) and keeps `--clients` closed-loop
clients on it, each with its own vllm_xargs draft length, in three rotated modes: `off` (every k = 0), `one`
(client 0 k = 4, the others 0), `all` (every k = 4). Per mode it prints the engine's step telemetry over its
windows (adaptspec:engine_* counters): mean step ms, batched tokens, drafted tokens per step, output tokens/s.

    python benchmarks/vllm_step_probe.py --clients 16 --window 15 --rounds 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from adaptspec.bench import vllm_pool
from adaptspec.bench.loadgen import free_port
from adaptspec.proxy.scrape import parse_metrics

PROMPT = ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\n"
          "def sub(a, b):\n    return a - b\n\ndef add(a, b):\n")
MODES = {"off": lambda i: 0, "one": lambda i: 4 if i == 0 else 0, "all": lambda i: 4}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vllm-probe-"))
    url = f"http://127.0.0.1:{free_port()}"
    section = vllm_pool.pool("probe", "ngram", [url], python=vllm_pool.default_python(), max_gamma=4)
    with vllm_pool.started(section, work):
        mode = {"name": "off"}
        stop = threading.Event()

        def client(i: int) -> None:
            with httpx.Client(timeout=300) as c:
                while not stop.is_set():
                    name = mode["name"]
                    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": args.max_tokens, "temperature": 0,
                            "vllm_xargs": {"adaptspec_num_spec_tokens": MODES[name](i)}}
                    try:
                        c.post(url + "/v1/completions", json=body).raise_for_status()
                    except httpx.TransportError:
                        if not stop.is_set():  # the server going away at the end is expected, nothing else
                            raise
                        return

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(args.window)  # warm-up
        acc = {m: None for m in MODES}
        names = list(MODES)
        for r in range(args.rounds):
            for name in names[r % 3:] + names[:r % 3]:
                mode["name"] = name
                time.sleep(3.0)  # let requests of the previous mode drain out of the batch
                before = parse_metrics(httpx.get(url + "/metrics").text).steps
                time.sleep(args.window)
                after = parse_metrics(httpx.get(url + "/metrics").text).steps
                d = after.since(before)
                acc[name] = d if acc[name] is None else _sum(acc[name], d)
        stop.set()
        for t in threads:
            t.join(timeout=120)  # their last requests finish before the server stops
        out = [f"{args.clients} clients, {args.rounds} rounds x {args.window:g} s per mode",
               "| mode | steps | ms / step | batched tokens / step | requests / step | drafted / step |",
               "|---|---:|---:|---:|---:|---:|"]
        for name in names:
            w = acc[name]
            n = w.steps or 1
            out.append(f"| {name} | {w.steps:.0f} | {1e3 * w.step_seconds / n:.1f} | {w.batched_tokens / n:.1f} | "
                       f"{w.requests / n:.1f} | {sum(w.drafted_tokens.values()) / n:.2f} |")
        sys.stdout.write("\n".join(out) + "\n")


def _sum(a, b):
    from adaptspec.bench.compare import _add
    return _add(a, b)


if __name__ == "__main__":
    main()
