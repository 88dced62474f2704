"""Step time of the tiny pair on this CPU vs the number of batched tokens (calibrates `cpu-tiny`).

Forwards (default): a decode step feeds each of B requests 1 + k tokens (k drafts) against a context of
`--context` cached tokens. The table gives the median (or `--stat min`) time of one bare target (and draft)
forward per (B, tokens per request), so the fixed floor and the slopes can be read off (`--fit` prints the
additive least-squares fit, costmodel.fit_step_time(additive=True), with `--context`'s KV tokens per row):

    .venv/bin/python benchmarks/measure_step_time.py --threads 1 --cpu-time --context 200 --reps 20 --fit

Engine (`--worker`): the same steps end to end, as the reference worker runs them (propose, forward,
verify, commit, streaming). Starts `adaptspec worker --threads 1` with each default speculation in turn
(none at every concurrency; draft k=2, k=4 and n-gram k=4 at the first and the last), drives `adaptspec bench
--url`, and reads per window the
worker's own step counters (/metrics: steps, step seconds, batched and KV tokens, draft passes) and the CPU
time of the worker's busiest thread (/proc: the engine thread, where torch computes with 1 thread) and of the
whole process. The counters are wall time, inflated when other processes share the cores; the engine
thread's CPU seconds per step are not (much), so both are reported:

    .venv/bin/python benchmarks/measure_step_time.py --worker --concurrency 1,8,16,32 --duration 10 \
        --json out.json

Profile (`--profile FORWARDS.json WORKER.json PROPOSERS.json`, the last from benchmarks/fit_proposer_costs.py):
the end-to-end step model from the three runs, on the engine thread's CPU time. A model proposer's pass is its
measured share of a batch-1 step (fit_proposer_costs: propose time per pass over the `none` step of the same
prompt) times the worker's batch-1 `none` step; the draft model's is split into the bare draft forward's
slopes (FORWARDS) and the rest as its overhead (EAGLE's pass is reported). The target's overhead and its slopes
per batched token and per KV token are then the least squares, in relative error, of every window (`none`,
draft and n-gram, batch 1 to 32) after its draft passes. The bare forwards' slope per batched token is not
used for the target: a token through the engine also costs its sampling, verification and commit, and the
drafting windows at 32 clients measure 20-34% above a model built on the bare slope. Prints the profile
lines and the check against every window.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

from adaptspec.control.costmodel import fit_step_time
from adaptspec.control.promtext import parse_metrics
from adaptspec.worker.model import TinyLlama

ASSETS = Path(__file__).resolve().parents[1] / "adaptspec" / "assets"
SHAPES = [(1, 1), (1, 2), (1, 3), (1, 5), (1, 9), (4, 1), (4, 5), (8, 1), (8, 5), (16, 1), (16, 5),
          (32, 1), (32, 2), (32, 3), (32, 5), (64, 1), (64, 5)]


@torch.inference_mode()
def time_forward(model: TinyLlama, batch: int, per_req: int, context: int, reps: int, clock=time.perf_counter,
                 stat=statistics.median) -> float:
    cache = model.new_cache(batch, context + per_req + 1)
    g = torch.Generator().manual_seed(0)
    model.forward([torch.randint(0, model.cfg.vocab_size, (context,), generator=g).tolist()] * batch,
                  list(range(batch)), [0] * batch, cache)
    toks = [torch.randint(0, model.cfg.vocab_size, (per_req,), generator=g).tolist() for _ in range(batch)]
    times = []
    for _ in range(reps + 2):
        t = clock()
        model.forward(toks, list(range(batch)), [context] * batch, cache)
        times.append(clock() - t)
    return stat(times[2:]) * 1e3


def fit_forwards(rows: list[dict], context: int) -> dict[str, dict[str, float]]:
    """Additive fit t = o + c * tokens + k * kv of the target's and the draft's forward times (seconds)."""
    out = {}
    for model in ("target", "draft"):
        pts = [(r["tokens"], r["batch"] * (context + r["tokens_per_request"]), r[f"{model}_ms"] / 1e3) for r in rows]
        m = fit_step_time(pts, additive=True)
        out[model] = {"overhead_s": m.overhead_s, "compute_s_per_token": m.compute_s_per_token,
                      "kv_s_per_token": m.kv_s_per_token}
    return out


def forwards(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    stat = min if args.stat == "min" else statistics.median
    target = TinyLlama.from_pretrained(ASSETS / "tiny-target")
    draft = TinyLlama.from_pretrained(ASSETS / "tiny-draft")
    rows = []
    print(f"threads={args.threads} clock={'thread cpu' if args.cpu_time else 'wall'} stat={args.stat} "
          f"context={args.context} target={target.cfg.num_params / 1e6:.2f}M draft={draft.cfg.num_params / 1e6:.2f}M")
    print(f"{'batch':>5} {'tok/req':>7} {'tokens':>6} {'target ms':>9} {'draft ms':>8} {'target us/token':>15}")
    for b, n in SHAPES:
        t = time_forward(target, b, n, args.context, args.reps, clock, stat)
        d = time_forward(draft, b, n, args.context, args.reps, clock, stat)
        rows.append({"batch": b, "tokens_per_request": n, "tokens": b * n, "target_ms": round(t, 3),
                     "draft_ms": round(d, 3)})
        print(f"{b:>5} {n:>7} {b * n:>6} {t:>9.2f} {d:>8.2f} {1e3 * t / (b * n):>15.1f}")
    out: dict = {"rows": rows, "context": args.context, "stat": args.stat,
                 "clock": "thread" if args.cpu_time else "wall"}
    if args.fit:
        out["fit"] = fit_forwards(rows, args.context)
        for model, f in out["fit"].items():
            print(f"{model}: {1e3 * f['overhead_s']:.2f} ms + {1e6 * f['compute_s_per_token']:.1f} us/token + "
                  f"{1e6 * f['kv_s_per_token']:.3f} us/kv-token")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_healthy(url: str, proc: subprocess.Popen | None = None, log: str = "", timeout: float = 120.0) -> None:
    """Poll `url`/health until it answers; a worker process that exits first, or `timeout`, raises."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}; log: {log}")
        try:
            _get(url + "/health")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(url) from None
            time.sleep(0.5)


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of process `pid`."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended between listdir and read
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15 of stat)
    return out


def _worker_window(url: str, pid: int, concurrency: int, args: argparse.Namespace, tmp: Path) -> dict:
    """One bench point against the worker; its step counters and CPU time over the point."""
    before, cpu0 = parse_metrics(_get(url + "/metrics")).steps, _thread_cpu(pid)
    out = tmp / f"bench-{concurrency}.json"
    subprocess.run([sys.executable, "-m", "adaptspec", "bench", "--url", url, "--concurrency", str(concurrency),
                    "--duration", str(args.duration), "--warmup", "2", "--max-tokens", str(args.max_tokens),
                    "--no-progress", "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
    w, cpu1 = parse_metrics(_get(url + "/metrics")).steps.since(before), _thread_cpu(pid)
    if w is None or w.steps <= 0:
        raise RuntimeError(f"no engine steps counted at concurrency {concurrency}")
    spent = {tid: cpu1[tid] - cpu0.get(tid, 0.0) for tid in cpu1}
    n = w.steps
    return {"concurrency": concurrency, "steps": n, "batched_per_step": w.batched_tokens / n,
            "kv_per_step": w.kv_tokens / n, "requests_per_step": w.requests / n,
            "draft_passes_per_step": w.draft_passes.get("draft", 0.0) / n,
            "drafted_per_step": w.drafted_tokens.get("draft", 0.0) / n,
            "ngram_drafted_per_step": w.drafted_tokens.get("ngram", 0.0) / n,
            "wall_ms": 1e3 * w.step_seconds / n, "engine_cpu_ms": 1e3 * max(spent.values()) / n,
            "process_cpu_ms": 1e3 * sum(spent.values()) / n}


def worker(args: argparse.Namespace) -> dict:
    levels = [int(c) for c in args.concurrency.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="adaptspec-steps-"))
    rows = []
    print("| speculation | concurrency | steps | batched tok/step | kv tok/step | requests/step | draft passes/step "
          "| wall ms/step | engine-thread CPU ms/step | process CPU ms/step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for proposer, k in (("none", 0), ("draft", 2), ("draft", 4), ("ngram", 4)):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(tmp / f"worker-{proposer}{k}.log", "w")  # noqa: SIM115 (closed after the worker)
        proc = subprocess.Popen([sys.executable, "-m", "adaptspec", "worker", "--port", str(port), "--threads", "1",
                                 "--max-batch", "64", "--default-proposer", proposer, "--default-k", str(max(k, 1))],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(url, proc, log.name)
            for c in levels if proposer == "none" else sorted({levels[0], levels[-1]}):
                r = {"speculation": f"{proposer}" + (f" k={k}" if k else ""), "proposer": proposer, "k": k,
                     **_worker_window(url, proc.pid, c, args, tmp)}
                rows.append(r)
                print(f"| {r['speculation']} | {c} | {r['steps']:.0f} | {r['batched_per_step']:.1f} | "
                      f"{r['kv_per_step']:.0f} | {r['requests_per_step']:.2f} | {r['draft_passes_per_step']:.2f} | "
                      f"{r['wall_ms']:.2f} | {r['engine_cpu_ms']:.2f} | {r['process_cpu_ms']:.2f} |", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    return {"windows": rows, "duration_s": args.duration, "max_tokens": args.max_tokens}


def end_to_end_profile(fwd: dict, windows: list[dict], pass_ratio: dict[str, float],
                       clock: str = "engine_cpu_ms") -> dict:
    """{'target': {...}, 'draft': {...}, 'eagle_pass_s', 'batch1_step_s', 'context_tokens'} (seconds): see the
    module docstring. `pass_ratio`: proposer -> pass seconds over the batch-1 `none` step."""
    import numpy as np

    none = [w for w in windows if w["proposer"] == "none"]
    ctx = sum(w["kv_per_step"] for w in none) / sum(w["requests_per_step"] for w in none)
    batch1 = statistics.fmean(w[clock] for w in none if w["requests_per_step"] < 1.5) / 1e3
    d = fwd["fit"]["draft"]
    draft = {"overhead_s": max(pass_ratio["draft"] * batch1 - d["compute_s_per_token"] - d["kv_s_per_token"] * ctx,
                               0.0),
             "compute_s_per_token": d["compute_s_per_token"], "kv_s_per_token": d["kv_s_per_token"]}
    design = np.array([[1.0, w["batched_per_step"], w["kv_per_step"]] for w in windows])  # [windows, 3]
    seconds = np.array([w[clock] / 1e3 for w in windows])  # [windows]
    rest = seconds - np.array([w["draft_passes_per_step"] * _draft_pass(draft, w, ctx) for w in windows])
    # relative error: each window counts alike, whatever its step time
    sol = np.linalg.lstsq(design / seconds[:, None], rest / seconds, rcond=None)[0]
    o, c, k = (max(float(x), 0.0) for x in sol)
    return {"target": {"overhead_s": o, "compute_s_per_token": c, "kv_s_per_token": k}, "draft": draft,
            "eagle_pass_s": pass_ratio.get("eagle", 0.0) * batch1, "batch1_step_s": batch1, "context_tokens": ctx}


def _draft_pass(draft: dict, w: dict, ctx: float) -> float:
    """Seconds of one draft-model pass over the window's drafting requests (drafted tokens per pass)."""
    per_pass = w["drafted_per_step"] / w["draft_passes_per_step"] if w["draft_passes_per_step"] else 0.0
    return draft["overhead_s"] + draft["compute_s_per_token"] * per_pass + draft["kv_s_per_token"] * per_pass * ctx


def _profile(args: argparse.Namespace) -> dict:
    fwd, run, props = (json.loads(Path(p).read_text()) for p in args.profile)
    ratio = {p: v["median"] for p, v in props["pass_over_step_paired"].items()}
    prof = end_to_end_profile(fwd, run["windows"], ratio)
    t, d = prof["target"], prof["draft"]
    print(f"batch-1 none step {1e3 * prof['batch1_step_s']:.2f} ms (engine CPU); pass / step: "
          + ", ".join(f"{p} {r:.3f}" for p, r in ratio.items()))
    print(f"target: {{combine: sum, overhead_s: {t['overhead_s']:.3g}, kv_s_per_token: {t['kv_s_per_token']:.3g}, "
          f"compute_s_per_token: {t['compute_s_per_token']:.3g}}}")
    print(f"draft-tiny: {{combine: sum, overhead_s: {d['overhead_s']:.3g}, kv_s_per_token: {d['kv_s_per_token']:.3g}, "
          f"compute_s_per_token: {d['compute_s_per_token']:.3g}}}")
    print(f"eagle pass {1e3 * prof['eagle_pass_s']:.2f} ms; context_tokens (KV tokens per request-step of the none "
          f"windows) {prof['context_tokens']:.0f}")
    print("| speculation | concurrency | engine-thread CPU ms/step | wall ms/step | model ms | vs CPU | vs wall |")
    print("|---|---|---|---|---|---|---|")
    checks = []
    for w in run["windows"]:
        pred = 1e3 * (t["overhead_s"] + t["compute_s_per_token"] * w["batched_per_step"]
                      + t["kv_s_per_token"] * w["kv_per_step"]
                      + w["draft_passes_per_step"] * _draft_pass(d, w, prof["context_tokens"]))
        checks.append({**w, "model_ms": pred})
        print(f"| {w['speculation']} | {w['concurrency']} | {w['engine_cpu_ms']:.2f} | {w['wall_ms']:.2f} | "
              f"{pred:.2f} | {pred / w['engine_cpu_ms'] - 1:+.0%} | {pred / w['wall_ms'] - 1:+.0%} |")
    return {**prof, "pass_ratio": ratio, "checks": checks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="of the repetitions per shape (min: the least disturbed by other load)")
    ap.add_argument("--fit", action="store_true", help="print the additive fit of the forward times")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the thread's CPU clock (needs --threads 1): robust to other load on the box")
    ap.add_argument("--worker", action="store_true", help="measure steps end to end through the reference worker")
    ap.add_argument("--concurrency", default="1,8,16,32", help="--worker: clients per point (the first and "
                    "the last also for draft k=2, k=4 and n-gram k=4)")
    ap.add_argument("--duration", type=float, default=10.0, help="--worker: measured seconds per point")
    ap.add_argument("--max-tokens", type=int, default=64, help="--worker: tokens per request")
    ap.add_argument("--profile", nargs=3, metavar=("FORWARDS_JSON", "WORKER_JSON", "PROPOSERS_JSON"),
                    help="fit the end-to-end profile from a --cpu-time --fit run, a --worker run and a "
                         "benchmarks/fit_proposer_costs.py --json run")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time needs --threads 1")
    out = _profile(args) if args.profile else worker(args) if args.worker else forwards(args)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
