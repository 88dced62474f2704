"""CPU per request of the proxy hop, in process, side by side with the harness's bare aiohttp pass-through.

    .venv/bin/python benchmarks/hop_cpu.py --harness ../shared/bench/overhead --python /tmp/gw/venv-base/bin/python \
        [--gateways adaptspec,naive,adaptspec=/tmp/old-tree] [--stream] [--rounds 3] [--seconds 4] [--stub classify,decide] [--profile [--profile-out F]]
        [--instructions N] [--prompts distinct|FILE.jsonl]

Starts the overhead harness's fake upstream once, then for each round and each gateway: the gateway in a
fresh process on uvloop (`adaptspec`: the proxy with an `engine: openai` pool and the goodput policy, as the
harness row runs it; `naive`: the harness's naive_aiohttp_proxy.py), and the harness's load client (closed
loop, c=1, 1 s warm-up) against it; CPU of the gateway process / requests served. Gateways alternate within
each round (A B A B ...), and the medians per gateway are printed as JSON: the box is shared and noisy, so
compare figures from one run only. `--pin 0:1` places the processes as the harness does (client on CPU 0, upstream
and gateway sharing CPU 1), which sets how many SSE events one socket read brings. Per request, beside CPU µs: user and system µs, the gateway's read and
write system calls (/proc/self/io; libuv reads and writes sockets with read/readv/write/writev) and its
voluntary / involuntary context switches, which the box's load moves less than CPU time. `--stub classify` replaces the classifier by a constant class, `--stub
classify,decide` the policy's decision too, so the difference prices each part. `--profile` prints where
the gateway's time goes (cProfile's own time per file, then the top functions), one round. `--access-log`
writes adaptspec's access log as the CLI does (off here unless given; `adaptspec serve` defaults to stderr).
`adaptspec=DIR` in --gateways is the proxy imported from another source tree (a `git archive` of an earlier
commit): before and after in one run. `--instructions N` counts instead the instructions each gateway executes (user space, valgrind's callgrind,
instrumented only while N requests at c=1 run, after 100 unmeasured): a figure the box's load does not move.
Kernel time (syscalls, loopback TCP) is not in it, and the access log's batched writes weigh more than at
full speed (fewer lines per 0.1 s batch under valgrind).

`--prompts` sends a different prompt with every request (the harness client's own `--prompts`: one prepared
request per prompt) instead of the harness's one fixed prompt, which adaptspec's classifier and
feature memos remember after the first request. `distinct`: the classifier's held-out test split
(scripts/train_classifier.py's, from ../shared/data) cut to prompts of 200-4000 characters, shuffled (seed
0), at most 2000, so that with a 1024-entry memo no prompt is ever remembered; or a JSONL file of
{"prompt": ...} lines. The summary gives their count and median length.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import glob
import importlib.util
import json
import logging
import os
import pstats
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UP_PORT, GW_PORT = 18931, 18932
REPO = Path(__file__).resolve().parents[1]
DISTINCT_CHARS = (200, 4000)  # --prompts distinct: realistic prompt lengths, in characters
DISTINCT_MAX = 2000


def distinct_prompts(data: Path) -> list[str]:
    """The classifier's held-out test prompts of DISTINCT_CHARS characters, shuffled (seed 0), <= DISTINCT_MAX."""
    spec = importlib.util.spec_from_file_location("train_classifier", REPO / "scripts" / "train_classifier.py")
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    lo, hi = DISTINCT_CHARS
    texts = [r["text"] for r in trainer.load_rows(data) if r["split"] == "test" and lo <= len(r["text"]) <= hi]
    random.Random(0).shuffle(texts)
    return texts[:DISTINCT_MAX]


def _prepare_prompts(args) -> dict:
    """Resolve --prompts into the load client's prompts file (args.prompt_file); their count and median length."""
    args.prompt_file = None
    if not args.prompts:
        return {}
    if args.prompts == "distinct":
        texts = distinct_prompts(args.data)
    else:
        with open(args.prompts, encoding="utf-8") as f:
            texts = [json.loads(line)["prompt"] for line in f if line.strip()]
    # the harness client's --prompts format: one prompt a line, newlines written as a backslash + n
    fd, args.prompt_file = tempfile.mkstemp(prefix="hop_cpu_prompts_", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(t.replace("\n", "\\n") + "\n" for t in texts)
    return {"prompts": len(texts), "prompt_chars_p50": statistics.median(map(len, texts))}


def _stub(proxy, parts: set[str]) -> None:
    if "classify" in parts:
        proxy.classify = lambda body: "chat"
    if "decide" in parts:
        fixed = proxy.decide("chat", proxy.pools.serving("fake"))
        proxy.decide = lambda *args, **kwargs: fixed


async def _adaptspec_site(args):
    from adaptspec.control.config import parse_config
    from adaptspec.proxy.app import Proxy, create_app, start_site

    cfg = parse_config({"pools": [{"name": "u", "engine": "openai", "per_request": False, "proposers": [],
                                   "workers": [{"name": "u0", "url": f"http://127.0.0.1:{UP_PORT}"}]}]})
    if args.access_log != "off":  # as `adaptspec serve` sets it up (its default: "-", stderr)
        from adaptspec.cli._logging import configure_access_log

        configure_access_log(args.access_log)
        for handler in logging.getLogger("adaptspec.access").handlers:
            handler.flush_s = args.log_batch_s
    proxy = Proxy(cfg)
    _stub(proxy, set(filter(None, args.stub.split(","))))
    return await start_site(create_app(proxy), "127.0.0.1", GW_PORT)


async def _naive_site(args):
    from aiohttp import web

    os.environ["UPSTREAM_URL"] = f"http://127.0.0.1:{UP_PORT}"
    spec = importlib.util.spec_from_file_location("naive_aiohttp_proxy", f"{args.harness}/naive_aiohttp_proxy.py")
    naive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(naive)
    app = web.Application()  # as naive_aiohttp_proxy.main() builds it, without run_app's signal handling
    app.on_startup.append(naive.on_startup)
    app.on_cleanup.append(naive.on_cleanup)
    app.router.add_route("*", "/v1/{tail:.*}", naive.proxy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", GW_PORT).start()
    return runner


async def _load(args, *how: str) -> dict:
    extra = ["--stream", "--chunks", "32"] if args.stream else []
    if args.prompt_file:  # the same client, a different prompt per request
        extra += ["--prompts", args.prompt_file]
    load = await asyncio.create_subprocess_exec(
        args.python, f"{args.harness}/load.py", "--url", f"http://127.0.0.1:{GW_PORT}/v1/chat/completions",
        "-c", "1", *how, *extra, stdout=asyncio.subprocess.PIPE)
    if args.pin:  # the client on its own CPU, as the harness places it
        os.sched_setaffinity(load.pid, {_pins(args)[0]})
    out, _ = await load.communicate()
    return json.loads(out)


async def _callgrind(*command: str) -> None:
    """callgrind_control on this process (run by valgrind), awaited so that the loop stays responsive."""
    proc = await asyncio.create_subprocess_exec("callgrind_control", *command, str(os.getpid()),
                                                stdout=asyncio.subprocess.DEVNULL)
    if await proc.wait():
        raise RuntimeError(f"callgrind_control {' '.join(command)} failed")


async def _count_instructions(args) -> dict:
    """Under callgrind: instructions executed while exactly `args.instructions` requests were served (after
    100 unmeasured ones), user space only. Independent of the box's load, unlike CPU seconds."""
    await _load(args, "-n", "100", "--warmup", "0")
    await _callgrind("-i", "on")
    res = await _load(args, "-n", str(args.instructions), "--warmup", "0")
    await _callgrind("-i", "off")
    await _callgrind("-d")
    return {"requests": res["n_ok"]}


def _counters() -> dict[str, float]:
    """This process's user and system CPU seconds, read/write system calls (/proc/self/io: read, readv,
    write, writev; libuv reads and writes sockets with those) and context switches (/proc/self/status)."""
    t = os.times()
    out = {"user_s": t.user, "sys_s": t.system}
    try:
        with open("/proc/self/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        out["syscr"], out["syscw"] = float(io["syscr"]), float(io["syscw"])
        with open("/proc/self/status") as f:
            status = dict(line.split(":\t") for line in f.read().splitlines() if ":\t" in line)
        out["ctx_vol"] = float(status["voluntary_ctxt_switches"])
        out["ctx_invol"] = float(status["nonvoluntary_ctxt_switches"])
    except (OSError, KeyError, ValueError):  # not Linux: CPU seconds only
        pass
    return out


def _per_request(before: dict, after: dict, requests: float) -> dict:
    scale = {"user_s": 1e6, "sys_s": 1e6}  # -> µs
    names = {"user_s": "user_us", "sys_s": "sys_us", "syscr": "reads", "syscw": "writes",
             "ctx_vol": "ctx_switches_vol", "ctx_invol": "ctx_switches_invol"}
    return {f"{names[k]}_per_request": round((after[k] - before[k]) / requests * scale.get(k, 1), 2)
            for k in after if k in before}


async def _measure(args) -> dict:
    runner = await (_naive_site(args) if args.gateway == "naive" else _adaptspec_site(args))
    await asyncio.sleep(1.0)
    if args.instructions:
        try:
            return await _count_instructions(args)
        finally:
            await runner.cleanup()
    prof = cProfile.Profile() if args.profile else None
    t0, before = time.process_time(), _counters()
    if prof is not None:
        prof.enable()
    res = await _load(args, "-d", str(args.seconds), "--warmup", "1")
    if prof is not None:
        prof.disable()
    cpu, after = time.process_time() - t0, _counters()
    await runner.cleanup()
    requests = res["rps"] * (args.seconds + 1)  # the warm-up second is served (and costs CPU) too
    if prof is not None:
        _print_profile(prof, requests)
        if args.profile_out:
            prof.dump_stats(f"{args.profile_out}.{args.gateway}")
    return {"rps": res["rps"], "p50_ms": res.get("p50_ms"), "cpu_us_per_request": round(cpu / requests * 1e6),
            **_per_request(before, after, requests)}


def _print_profile(prof: cProfile.Profile, requests: float) -> None:
    stats = pstats.Stats(prof, stream=sys.stderr)
    by_file: collections.Counter[str] = collections.Counter()
    for (path, _line, _fn), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        by_file[path.split("site-packages/")[-1]] += tottime
    for path, seconds in by_file.most_common(25):
        print(f"{seconds / requests * 1e6:9.1f} us/request  {path}", file=sys.stderr)
    stats.sort_stats("tottime").print_stats(30)


def _pins(args) -> tuple[int, int]:
    client, rest = args.pin.split(":")
    return int(client), int(rest)


def _child(args) -> int:
    import uvloop

    if args.pin:  # the gateway shares its CPU with the upstream, as in the harness
        os.sched_setaffinity(0, {_pins(args)[1]})
    print(json.dumps(uvloop.run(_measure(args))))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", required=True, help="the overhead harness folder (fake_upstream.py, load.py)")
    ap.add_argument("--python", required=True, help="interpreter with the harness's deps (uvicorn, httptools)")
    ap.add_argument("--gateways", default="adaptspec,naive",
                    help="comma list of adaptspec, naive, adaptspec=DIR (the proxy from the source tree DIR)")
    ap.add_argument("--stream", action="store_true", help="SSE streams of 32 chunks instead of whole answers")
    ap.add_argument("--stub", default="", help="comma list of classify, decide (adaptspec only)")
    ap.add_argument("--access-log", default="off", metavar="off|-|FILE",
                    help="adaptspec's access log as `adaptspec serve --access-log` (its default is -, stderr)")
    ap.add_argument("--pin", metavar="C:G",
                    help="the harness's placement: the load client on CPU C, the upstream and the gateway on CPU G")
    ap.add_argument("--log-batch-s", type=float, default=0.1, metavar="S",
                    help="with --access-log: write a batch S s after its first line (the CLI: 0.1) or at 64 KiB; "
                         "under --instructions a gateway serves ~30 requests a second, so a long S gives the "
                         "batches of a full-speed one (64 KiB, ~200 lines) instead of ~3 lines")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--profile", action="store_true", help="cProfile the gateway (to stderr)")
    ap.add_argument("--profile-out", metavar="FILE", help="with --profile: also FILE.<gateway>, pstats' format")
    ap.add_argument("--instructions", type=int, default=0, metavar="N",
                    help="count instructions (valgrind's callgrind) for N requests instead of CPU seconds")
    ap.add_argument("--callgrind-out", metavar="DIR",
                    help="with --instructions: keep each gateway's callgrind dumps in DIR (for callgrind_annotate)")
    ap.add_argument("--prompts", metavar="distinct|FILE",
                    help="a different prompt per request: 'distinct' (held-out test prompts, 200-4000 chars) "
                         "or a JSONL file of {\"prompt\": ...} lines")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                    help="the shared data folder, for --prompts distinct")
    ap.add_argument("--gateway", help=argparse.SUPPRESS)  # internal: run one measurement in this process
    ap.add_argument("--prompt-file", help=argparse.SUPPRESS)  # internal: the resolved --prompts
    args = ap.parse_args()
    if args.gateway:
        return _child(args)
    prompts = _prepare_prompts(args)
    try:
        if args.instructions:
            return _instructions(args, prompts)
        return _cpu_seconds(args, prompts)
    finally:
        if args.prompt_file:
            os.unlink(args.prompt_file)


def _child_argv(args, gateway: str) -> list[str]:
    argv = [__file__, *sys.argv[1:], "--gateway", gateway.split("=", 1)[0]]
    return argv + ["--prompt-file", args.prompt_file] if args.prompt_file else argv


def _child_env(gateway: str) -> dict[str, str]:
    """adaptspec=DIR: the child imports adaptspec from DIR."""
    env = dict(os.environ)
    if "=" in gateway:
        env["PYTHONPATH"] = os.path.abspath(gateway.split("=", 1)[1])
    return env


def _upstream(args) -> subprocess.Popen:
    up = subprocess.Popen([args.python, f"{args.harness}/fake_upstream.py", str(UP_PORT)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if args.pin:
        os.sched_setaffinity(up.pid, {_pins(args)[1]})
    return up


def _cpu_seconds(args, prompts: dict) -> int:
    up = _upstream(args)
    runs: dict[str, list[dict]] = {g: [] for g in args.gateways.split(",")}
    try:
        time.sleep(1.5)
        for _ in range(args.rounds):
            for gateway, results in runs.items():
                out = subprocess.run([sys.executable, *_child_argv(args, gateway)], env=_child_env(gateway),
                                     check=True, stdout=subprocess.PIPE, text=True).stdout
                results.append(json.loads(out))
    finally:
        up.terminate()
        up.wait()
    summary = {"stream": args.stream, "stub": args.stub or "-", "rounds": args.rounds, "pin": args.pin, **prompts}
    for gateway, results in runs.items():
        summary[gateway] = {key: statistics.median(r[key] for r in results) for key in results[0]}
        summary[gateway]["cpu_us_per_request_all"] = [r["cpu_us_per_request"] for r in results]
    print(json.dumps(summary))
    return 0


def _instructions(args, prompts: dict) -> int:
    """Each gateway once under callgrind (instrumented only while its N requests run): instructions/request."""
    up = _upstream(args)
    summary: dict = {"stream": args.stream, "stub": args.stub or "-", "requests": args.instructions, **prompts}
    try:
        time.sleep(1.5)
        with tempfile.TemporaryDirectory() as tmp:
            for gateway in args.gateways.split(","):
                dump = f"{args.callgrind_out or tmp}/{len(summary)}.cg"
                out = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                      f"--callgrind-out-file={dump}", sys.executable, *_child_argv(args, gateway)],
                                     env=_child_env(gateway), check=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True).stdout
                served = json.loads(out.splitlines()[-1])["requests"]
                totals = [int(m.group(1)) for path in glob.glob(dump + "*") for m in
                          re.finditer(r"^(?:summary|totals): (\d+)", Path(path).read_text(), re.M)]
                summary[gateway] = {"requests": served, "instructions_per_request": round(max(totals) / served)}
    finally:
        up.terminate()
        up.wait()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
