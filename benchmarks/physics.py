"""The physics of speculative decoding, measured on this machine's reference worker.

Two claims, each measured side by side in one run against one worker process:

  (a) concurrency 1, copy-heavy prompts (summarise an article, rewrite a function): speculation with the
      best proposer and k gives >= 1.3x the output tokens/s of no speculation (decode is dominated by fixed
      and weight-reading cost, so verifying k+1 tokens costs about as much as generating 1);
  (b) concurrency 32 / 64: static always-on speculation is *slower* than none (a big batch is compute-bound,
      so every rejected draft token is paid for in full).

Two diagnostics explain what (a) and (b) show: (s) the forward time of target and draft over a grid of
batch B x tokens per request T (and, at the biggest B, over the context length: the per-step attention cost
that does not grow with T is what makes k extra tokens cheap even at a big batch); (e) the (b) load fed
straight into the engine in this process, without HTTP (what the serving path adds per token).

Configurations are interleaved request by request (a: every prompt runs under every configuration, in a
rotating order) or round by round (b), so drift in the machine's load hits all of them alike. At
temperature 0 every configuration must produce the same text; the script checks that too.

    .venv/bin/python benchmarks/physics.py                       # starts its own worker, ~5-10 min
    .venv/bin/python benchmarks/physics.py --quick               # fewer prompts and shorter outputs
    .venv/bin/python benchmarks/physics.py --url http://127.0.0.1:8001 --part a
    .venv/bin/python benchmarks/physics.py --part be --rounds-b 3        # (b) and its no-HTTP twin

Writes `physics.json` and `physics.md` (and `physics.png` when matplotlib is present) to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ADAPTSPEC_DATA", ROOT.parent / "shared" / "data"))

CONFIGS_A = [("none", 0), ("ngram", 2), ("ngram", 4), ("ngram", 6), ("draft", 2), ("draft", 4)]
CONFIGS_B = [("none", 0), ("ngram", 4), ("draft", 4)]


# ---------------------------------------------------------------------------------------------------------
# Prompts: copy-heavy requests built from ../shared/data.


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize_prompts(n: int, max_chars: int, truncate: bool = False) -> list[dict]:
    """News articles and passages to summarise or answer from (t0_p3: cnn_dailymail, duorc).

    truncate: cut long articles (the instruction comes first in these templates) instead of skipping them.
    """
    rows = [r for r in _jsonl(DATA / "t0_p3" / "cnn_dailymail.jsonl") if r["label"] == "summarization"]
    if not truncate:
        rows += [r for r in _jsonl(DATA / "t0_p3" / "duorc.jsonl") if r["label"] == "summarization"]
    out = []
    for r in rows:
        text = r["prompt"]
        if truncate and r["prompt"].find("\n") < max_chars // 3:
            text = text[:max_chars]
        if len(text) > max_chars:
            continue
        out.append({"class": "summarize", "id": r["id"], "messages": [{"role": "user", "content": text}]})
        if len(out) >= n:
            break
    return out


def code_edit_prompts(n: int, max_chars: int) -> list[dict]:
    """Code requests whose answer restates most of the prompt's code.

    Alternates "complete this function" over HumanEval stubs (the answer repeats the stub, then the body)
    with "rewrite this function ..." over MBPP solutions (the answer is the same code, lightly edited).
    """
    complete = [(r["task_id"], "Complete this Python function.\n\n" + r["prompt"])
                for r in _jsonl(DATA / "humaneval" / "HumanEval.jsonl.gz")]
    asks = ["Rewrite this function with clearer variable names, keeping its behaviour:",
            "Add type hints to this function and return the full code:",
            "Rewrite this function with a docstring, changing nothing else:"]
    rewrite = [(f"mbpp-{r['task_id']}",
                f"{asks[i % len(asks)]}\n\n```python\n{r['code'].replace(chr(13), '').strip()}\n```")
               for i, r in enumerate(_jsonl(DATA / "mbpp" / "mbpp.jsonl"))]
    out = []
    for pair in zip(complete[1::3], rewrite[1::3], strict=False):
        for ident, body in pair:
            if len(body) <= max_chars and len(out) < n:
                out.append({"class": "code", "id": ident, "messages": [{"role": "user", "content": body}]})
    return out


# ---------------------------------------------------------------------------------------------------------
# Worker process and HTTP.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "adaptspec", "worker", "--host", "127.0.0.1", "--port", str(port),
           "--max-batch", str(args.max_batch)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.model:
        cmd += ["--model", args.model]
    if args.draft:
        cmd += ["--draft", args.draft]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"worker exited with code {proc.returncode}: {' '.join(cmd)}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("worker did not become healthy within 120 s")


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("vllm:", "adaptspec:")):
            name_labels, value = line.rsplit(" ", 1)
            out[name_labels] = float(value)
    return out


@dataclass
class Outcome:
    text: str
    tokens: int
    seconds: float  # request sent -> last chunk
    first: float  # absolute time of the first token (perf_counter)
    last: float  # absolute time of the last token
    first_tokens: int  # tokens in the first chunk (prefill step)
    draft_tokens: int
    accepted_tokens: int
    steps: int
    timeline: list[tuple[float, int]]  # (perf_counter, cumulative completion tokens) per chunk


async def one_request(session: aiohttp.ClientSession, url: str, prompt: dict, proposer: str, k: int,
                      max_tokens: int, ignore_eos: bool = False) -> Outcome:
    """One streamed chat request at temperature 0; per-chunk token counts from vLLM-style continuous usage."""
    body = {"messages": prompt["messages"], "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "ignore_eos": ignore_eos,
            "speculation": {"proposer": proposer, "num_speculative_tokens": k, "content_class": prompt["class"]}}
    text, timeline, usage = [], [], None
    t0 = time.perf_counter()
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {await r.text()}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            now = time.perf_counter()
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk["choices"]:
                content = choice["delta"].get("content")
                if content:
                    text.append(content)
                    timeline.append((now, usage["completion_tokens"] if usage else 0))
    assert usage is not None, "no usage in the stream"
    spec = usage.get("speculative") or {}
    first, last = (timeline[0][0], timeline[-1][0]) if timeline else (time.perf_counter(),) * 2
    return Outcome("".join(text), usage["completion_tokens"], last - t0, first, last,
                   timeline[0][1] if timeline else 0, spec.get("draft_tokens", 0), spec.get("accepted_tokens", 0),
                   spec.get("steps", 0), timeline)


def _name(proposer: str, k: int) -> str:
    return "none" if proposer == "none" else f"{proposer} k={k}"


# ---------------------------------------------------------------------------------------------------------
# (a) concurrency 1.


async def part_a(url: str, prompts: list[dict], max_tokens: int, ignore_eos: bool) -> dict:
    configs = CONFIGS_A
    rows: dict[str, dict] = {_name(*c): {"tokens": 0, "seconds": 0.0, "draft": 0, "accepted": 0, "steps": 0,
                                         "decode_tokens": 0, "decode_seconds": 0.0, "by_class": {}}
                             for c in configs}
    mismatches = []
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        for c in configs:  # warm-up: first-use costs (allocations, lazy init) out of the measurement
            await one_request(s, url, prompts[0], *c, max_tokens=8, ignore_eos=True)
        for i, p in enumerate(prompts):
            order = configs[i % len(configs):] + configs[: i % len(configs)]
            texts = {}
            for proposer, k in order:
                o = await one_request(s, url, p, proposer, k, max_tokens, ignore_eos)
                row = rows[_name(proposer, k)]
                row["decode_tokens"] += o.tokens - o.first_tokens
                row["decode_seconds"] += o.last - o.first
                row["tokens"] += o.tokens
                row["seconds"] += o.seconds
                row["draft"] += o.draft_tokens
                row["accepted"] += o.accepted_tokens
                row["steps"] += o.steps
                cls = row["by_class"].setdefault(p["class"], {"tokens": 0, "seconds": 0.0})
                cls["tokens"] += o.tokens
                cls["seconds"] += o.seconds
                texts[_name(proposer, k)] = o.text
            if len(set(texts.values())) != 1:
                mismatches.append({"prompt": p["id"], "texts": texts})
            print(f"  (a) prompt {i + 1}/{len(prompts)} {p['class']:9s} "
                  + " ".join(f"{n}:{rows[n]['tokens'] / max(rows[n]['seconds'], 1e-9):.0f}" for n in rows),
                  file=sys.stderr)
    base = rows["none"]["tokens"] / rows["none"]["seconds"]
    for row in rows.values():
        row["tokens_per_s"] = row["tokens"] / row["seconds"]
        row["ratio_vs_none"] = row["tokens_per_s"] / base
        row["decode_tokens_per_s"] = row["decode_tokens"] / row["decode_seconds"] if row["decode_seconds"] else 0
        row["alpha"] = row["accepted"] / row["draft"] if row["draft"] else None
        row["tokens_per_step"] = row["tokens"] / row["steps"] if row["steps"] else None
        for cls in row["by_class"].values():
            cls["tokens_per_s"] = cls["tokens"] / cls["seconds"]
    best = max((n for n in rows if n != "none"), key=lambda n: rows[n]["tokens_per_s"])
    return {"rows": rows, "best": best, "best_ratio": rows[best]["ratio_vs_none"],
            "lossless_mismatches": mismatches, "prompts": len(prompts), "max_tokens": max_tokens,
            "ignore_eos": ignore_eos}


# ---------------------------------------------------------------------------------------------------------
# (b) high concurrency.


async def run_load(url: str, prompts: list[dict], proposer: str, k: int, concurrency: int,
                   max_tokens: int) -> dict:
    """`concurrency` streamed requests at once, all of exactly `max_tokens` (ignore_eos).

    tokens_per_s: all output tokens / makespan (prefill included). steady_tokens_per_s: output tokens
    produced while every request was decoding (after the last first token, before the first finish),
    i.e. the decode throughput of a full batch.
    """
    timeout = aiohttp.ClientTimeout(total=1800)
    conn = aiohttp.TCPConnector(limit=concurrency + 4)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as s:
        t0 = time.perf_counter()
        flat = await asyncio.gather(*(one_request(s, url, prompts[c % len(prompts)], proposer, k, max_tokens,
                                                  ignore_eos=True) for c in range(concurrency)))
        wall = time.perf_counter() - t0
    tokens = sum(o.tokens for o in flat)
    draft, accepted = sum(o.draft_tokens for o in flat), sum(o.accepted_tokens for o in flat)
    lo, hi = max(o.first for o in flat), min(o.last for o in flat)

    def at(o: Outcome, t: float) -> int:
        n = 0
        for when, count in o.timeline:
            if when > t:
                break
            n = count
        return n

    steady = (sum(at(o, hi) - at(o, lo) for o in flat) / (hi - lo)) if hi > lo else None
    return {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall, "requests": len(flat),
            "steady_tokens_per_s": steady, "steady_window_s": max(hi - lo, 0.0),
            "alpha": accepted / draft if draft else None, "texts": [o.text for o in flat]}


async def part_b(url: str, prompt_sets: dict[str, list[dict]], concurrencies: list[int], max_tokens: int,
                 rounds: int) -> dict:
    out = {}
    for set_name, prompts in prompt_sets.items():
        for conc in concurrencies:
            acc: dict[str, dict] = {}
            for r in range(rounds):
                order = CONFIGS_B[r % len(CONFIGS_B):] + CONFIGS_B[: r % len(CONFIGS_B)]
                for proposer, k in order:
                    res = await run_load(url, prompts, proposer, k, conc, max_tokens)
                    row = acc.setdefault(_name(proposer, k), {"tokens": 0, "seconds": 0.0, "steady": [],
                                                              "alpha": res["alpha"], "texts": res["texts"]})
                    row["tokens"] += res["tokens"]
                    row["seconds"] += res["seconds"]
                    if res["steady_tokens_per_s"]:
                        row["steady"].append(res["steady_tokens_per_s"])
                    print(f"  (b) {set_name} c={conc} round {r + 1} {_name(proposer, k):10s} "
                          f"{res['tokens_per_s']:.0f} tok/s, steady {res['steady_tokens_per_s'] or 0:.0f} tok/s "
                          f"over {res['steady_window_s']:.1f} s", file=sys.stderr)
            base = acc["none"]["tokens"] / acc["none"]["seconds"]
            texts_none = acc["none"]["texts"]
            for row in acc.values():
                row["tokens_per_s"] = row["tokens"] / row["seconds"]
                row["ratio_vs_none"] = row["tokens_per_s"] / base
                row["steady_tokens_per_s"] = sum(row["steady"]) / len(row["steady"]) if row["steady"] else None
                row["lossless"] = row.pop("texts") == texts_none
            steady_base = acc["none"]["steady_tokens_per_s"]
            for row in acc.values():
                row["steady_ratio_vs_none"] = (row["steady_tokens_per_s"] / steady_base
                                               if row["steady_tokens_per_s"] and steady_base else None)
            out[f"{conc} / {set_name}"] = acc
    return {"by_concurrency": out, "max_tokens": max_tokens, "rounds": rounds,
            "prompt_sets": {name: len(ps) for name, ps in prompt_sets.items()}}


# ---------------------------------------------------------------------------------------------------------
# (s) the step-time grid behind (a) and (b): one ragged forward of the target (and the draft) for B requests
# feeding T tokens each at a context of C, in this process (no HTTP, no engine loop).


def _median_ms(call, min_seconds: float) -> float:
    """Median wall time of one call, in ms: robust to the spikes of a CPU shared with other jobs."""
    call()
    times: list[float] = []
    t_end = time.perf_counter() + min_seconds
    while len(times) < 5 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def part_s(args: argparse.Namespace, batches=(1, 8, 32, 64), tokens=(1, 3, 5, 7), context: int = 300,
           min_seconds: float = 0.4, sweep_contexts=(30, 100, 300, 600)) -> dict:
    import torch

    from adaptspec.worker.model import TinyLlama

    torch.set_num_threads(args.threads)
    assets = ROOT / "adaptspec" / "assets"
    out: dict = {"context": context, "threads": args.threads, "models": {}}
    for role, path in (("target", args.model or assets / "tiny-target"), ("draft", args.draft or assets / "tiny-draft")):
        model = TinyLlama.from_pretrained(path).eval()
        cache = model.new_cache(max(batches), context + max(tokens) + 1)
        grid = {}
        with torch.inference_mode():
            for B in batches:
                for T in tokens:
                    feed = [[7] * T for _ in range(B)]
                    slots, starts = list(range(B)), [context] * B

                    grid[f"{B}x{T}"] = _median_ms(partial(model.forward, feed, slots, starts, cache), min_seconds)
                print(f"  (s) {role} B={B:3d} " + " ".join(f"T={T}:{grid[f'{B}x{T}']:.1f}ms" for T in tokens),
                      file=sys.stderr)
        sweep = {}
        if role == "target":  # what a big batch pays per step that does not grow with T: attention over context
            cache = model.new_cache(max(batches), max(sweep_contexts) + max(tokens) + 1)
            with torch.inference_mode():
                B = max(batches)
                for ctx in sweep_contexts:
                    for T in (1, 5):
                        feed, slots, starts = [[7] * T for _ in range(B)], list(range(B)), [ctx] * B
                        sweep[f"{ctx}x{T}"] = _median_ms(partial(model.forward, feed, slots, starts, cache),
                                                         min_seconds)
                    print(f"  (s) target B={B} context {ctx}: T=1 {sweep[f'{ctx}x1']:.1f} ms, "
                          f"T=5 {sweep[f'{ctx}x5']:.1f} ms", file=sys.stderr)
        out["models"][role] = {"params": sum(p.numel() for p in model.parameters()), "ms": grid,
                               "context_sweep_ms": sweep}
    out["sweep_contexts"] = list(sweep_contexts)
    out["batches"], out["tokens"] = list(batches), list(tokens)
    return out


# ---------------------------------------------------------------------------------------------------------
# (e) the same high-concurrency load straight into the engine (no HTTP): separates the engine's physics from
# the serving path's per-token costs.


def part_e(args: argparse.Namespace, prompt_sets: dict[str, list[dict]], concurrencies: list[int],
           max_tokens: int, rounds: int) -> dict:
    import torch

    from adaptspec.worker.engine import Engine, GenRequest

    torch.set_num_threads(args.threads)
    assets = ROOT / "adaptspec" / "assets"
    engine = Engine.from_dirs(args.model or assets / "tiny-target", args.draft or assets / "tiny-draft",
                              max_batch=args.max_batch, num_threads=args.threads)
    out: dict = {}
    try:
        for set_name, prompts in prompt_sets.items():
            ids = [engine.encode(engine.apply_chat_template(p["messages"])) for p in prompts]
            for conc in concurrencies:
                acc: dict[str, list[float]] = {}
                for r in range(rounds):
                    for proposer, k in CONFIGS_B[r % len(CONFIGS_B):] + CONFIGS_B[: r % len(CONFIGS_B)]:
                        reqs = [GenRequest(f"e{r}-{proposer}-{i}", ids[i % len(ids)], max_tokens=max_tokens,
                                           temperature=0.0, proposer=proposer, num_speculative_tokens=k,
                                           ignore_eos=True) for i in range(conc)]
                        t0 = time.perf_counter()
                        got = engine.generate_sync(reqs)
                        row = acc.setdefault(_name(proposer, k), [0, 0.0])
                        row[0] += sum(len(v) for v in got.values())
                        row[1] += time.perf_counter() - t0
                base = acc["none"][0] / acc["none"][1]
                out[f"{conc} / {set_name}"] = {
                    name: {"tokens_per_s": t / s, "ratio_vs_none": t / s / base} for name, (t, s) in acc.items()}
                print(f"  (e) {set_name} c={conc}: " + " ".join(
                    f"{n}:{v['tokens_per_s']:.0f}" for n, v in out[f"{conc} / {set_name}"].items()), file=sys.stderr)
    finally:
        engine.stop()
    return {"by_concurrency": out, "max_tokens": max_tokens, "rounds": rounds}


# ---------------------------------------------------------------------------------------------------------
# Report.


def markdown(result: dict) -> str:
    lines = [f"# Physics benchmark ({result['when']}, {result['machine']})", "",
             f"Command: `{result['command']}`", ""]
    st = result.get("s")
    if st:
        toks = st["tokens"]
        lines += [f"## (s) forward time per step, ms (B requests × T tokens each, context {st['context']}, "
                  f"{st['threads']} torch thread(s))", "",
                  "| model | B | " + " | ".join(f"T={t}" for t in toks) + " | T=5 ÷ T=1 |",
                  "|---|---:|" + "---:|" * (len(toks) + 1)]
        for role, m in st["models"].items():
            for B in st["batches"]:
                ms = [m["ms"][f"{B}x{t}"] for t in toks]
                ratio = m["ms"][f"{B}x5"] / m["ms"][f"{B}x1"] if 5 in toks else float("nan")
                lines.append(f"| {role} ({m['params'] / 1e6:.1f}M) | {B} | " + " | ".join(f"{v:.1f}" for v in ms)
                             + f" | {ratio:.2f} |")
        sw = st["models"].get("target", {}).get("context_sweep_ms")
        if sw:
            B = max(st["batches"])
            lines += ["", f"Target, B={B}: the per-step cost that does not grow with T (attention over the context) "
                      "decides what k extra tokens per request cost at a big batch:", "",
                      "| context | T=1 ms | T=5 ms | T=5 ÷ T=1 |", "|---:|---:|---:|---:|"]
            for ctx in st["sweep_contexts"]:
                lines.append(f"| {ctx} | {sw[f'{ctx}x1']:.1f} | {sw[f'{ctx}x5']:.1f} | "
                             f"{sw[f'{ctx}x5'] / sw[f'{ctx}x1']:.2f} |")
        lines.append("")
    a = result.get("a")
    if a:
        lines += [f"## (a) concurrency 1, copy-heavy prompts ({a['prompts']} prompts, max_tokens "
                  f"{a['max_tokens']}, temperature 0)", "",
                  "| config | output tok/s | × none | decode-only tok/s | α (accepted/draft) | tokens/step | "
                  "code tok/s | summarize tok/s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, row in a["rows"].items():
            bc = row["by_class"]
            alpha = f"{row['alpha']:.2f}" if row["alpha"] is not None else "–"
            tps = f"{row['tokens_per_step']:.2f}" if row["tokens_per_step"] else "–"
            lines.append(f"| {name} | {row['tokens_per_s']:.1f} | {row['ratio_vs_none']:.2f} | "
                         f"{row['decode_tokens_per_s']:.1f} | {alpha} | {tps} | "
                         f"{bc.get('code', {}).get('tokens_per_s', 0):.1f} | "
                         f"{bc.get('summarize', {}).get('tokens_per_s', 0):.1f} |")
        lines += ["", f"Best speculation: **{a['best']}**, **{a['best_ratio']:.2f}×** the output tokens/s of none "
                  f"(target ≥ 1.3×). Lossless (same text under every config): "
                  f"{'yes' if not a['lossless_mismatches'] else 'NO: ' + str(len(a['lossless_mismatches']))}.", ""]
    b = result.get("b")
    if b:
        lines += [f"## (b) high concurrency, static always-on speculation (all requests at once, exactly "
                  f"{b['max_tokens']} output tokens each, {b['rounds']} interleaved rounds)", "",
                  "| concurrency / prompts | config | output tok/s (makespan) | × none | steady decode tok/s | × none "
                  "| α | same text as none |", "|---|---|---:|---:|---:|---:|---:|---|"]
        for conc, rows in b["by_concurrency"].items():
            for name, row in rows.items():
                alpha = f"{row['alpha']:.2f}" if row["alpha"] is not None else "–"
                st = row["steady_tokens_per_s"]
                st_r = row["steady_ratio_vs_none"]
                lines.append(f"| {conc} | {name} | {row['tokens_per_s']:.1f} | {row['ratio_vs_none']:.2f} | "
                             f"{f'{st:.1f}' if st else '–'} | {f'{st_r:.2f}' if st_r else '–'} | "
                             f"{alpha} | {'yes' if row['lossless'] else 'NO'} |")
        lines.append("")
    e = result.get("e")
    if e:
        lines += [f"## (e) the (b) load straight into the engine, no HTTP ({e['rounds']} interleaved rounds)", "",
                  "| concurrency / prompts | config | output tok/s | × none |", "|---|---|---:|---:|"]
        for key, rows in e["by_concurrency"].items():
            for name, row in rows.items():
                lines.append(f"| {key} | {name} | {row['tokens_per_s']:.1f} | {row['ratio_vs_none']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    panels = [("a", "concurrency 1")] if result.get("a") else []
    panels += [(c, f"concurrency {c}") for c in (result.get("b") or {}).get("by_concurrency", {})]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        rows = result["a"]["rows"] if key == "a" else result["b"]["by_concurrency"][key]
        names = list(rows)
        ratios = [rows[n]["ratio_vs_none"] for n in names]
        ax.bar(names, ratios, color=["#888" if n == "none" else ("#2a7" if r >= 1 else "#c44")
                                     for n, r in zip(names, ratios, strict=True)])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_title(title)
        ax.set_ylabel("output tok/s ÷ none")
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="use a running worker instead of starting one")
    ap.add_argument("--model"), ap.add_argument("--draft")
    ap.add_argument("--threads", type=int, default=1, help="worker torch threads (default 1)")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--part", default="sab",
                    help="any of s (forward grid), a, b, e (b's load without HTTP) (default: sab)")
    ap.add_argument("--prompts-a", type=int, default=8, help="prompts for (a), half code half summarize")
    ap.add_argument("--max-tokens-a", type=int, default=128)
    ap.add_argument("--max-chars", type=int, default=1800, help="skip source prompts longer than this")
    ap.add_argument("--max-chars-b", default="250,900",
                    help="(b): prompt-length caps, comma-separated; each is a separate prompt set (default 250,900)")
    ap.add_argument("--concurrency", default="32,64")
    ap.add_argument("--ignore-eos-a", action="store_true", help="(a): fixed-length outputs")
    ap.add_argument("--max-tokens-b", type=int, default=96)
    ap.add_argument("--rounds-b", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="4 prompts, short outputs, 1 round")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "physics"))
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts_a, args.max_tokens_a, args.max_tokens_b, args.rounds_b = 4, 64, 32, 1

    half = args.prompts_a // 2
    prompts_a = [p for pair in zip(code_edit_prompts(half, args.max_chars),
                                   summarize_prompts(args.prompts_a - half, args.max_chars), strict=False)
                 for p in pair]
    conc = [int(c) for c in args.concurrency.split(",") if c]
    prompt_sets_b = {}
    for chars in (int(c) for c in str(args.max_chars_b).split(",") if c):
        prompt_sets_b[f"prompts <= {chars} chars"] = [
            p for pair in zip(code_edit_prompts(max(conc) // 2, chars),
                              summarize_prompts(max(conc) // 2, chars, truncate=True), strict=False) for p in pair]
    result: dict = {}
    if "s" in args.part:
        result["s"] = part_s(args)
    proc = None
    url = args.url
    if url is None and ("a" in args.part or "b" in args.part):
        proc, url = start_worker(args)
    try:
        result |= {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, worker threads {args.threads}",
                        "command": " ".join(["benchmarks/physics.py", *(argv if argv is not None else sys.argv[1:])]),
                        "url": url}
        before = scrape(url) if url else {}
        if "a" in args.part:
            result["a"] = asyncio.run(part_a(url, prompts_a, args.max_tokens_a, args.ignore_eos_a))
        if "b" in args.part:
            result["b"] = asyncio.run(part_b(url, prompt_sets_b, conc, args.max_tokens_b, args.rounds_b))
        if "e" in args.part:
            result["e"] = part_e(args, prompt_sets_b, conc, args.max_tokens_b, args.rounds_b)
        after = scrape(url) if url else {}
        result["metrics_delta"] = {k: after[k] - before.get(k, 0.0) for k in after
                                   if "_total" in k and after[k] != before.get(k, 0.0)}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "physics.json").write_text(json.dumps(result, indent=2, default=str))
    md = markdown(result)
    (out / "physics.md").write_text(md)
    plot(result, out / "physics.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
