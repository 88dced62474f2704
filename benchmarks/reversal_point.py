"""Where always-on lookup turns slower than off on the reference worker: the step times behind it.

From a `bench compare` run's step telemetry (rows with `engine`), per concurrency, off against static n-gram:
- s = off's step time / requests per step: what one request-step (one emitted token) costs;
- m = (lookup's step time - off's) / tokens drafted per step: what a drafted token adds to a step (an upper
  bound: a lookup step also carries a little more prefill, as more requests finish per step);
- a drafted token pays when it is accepted more often than the break-even m / s: a rejected draft costs m, an
  accepted one saves a request-step;
- lookup's acceptance per drafted token from the same windows: emitted tokens per request-step
  e = output tokens / s x step time / requests per step, acceptance (e - 1) / drafted per request-step.

    python benchmarks/reversal_point.py RUN.json [RUN.json ...] [--labels a,b] [--md OUT.md] [--plot OUT.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OFF, NGRAM = "off", "static:ngram:4"


def fit(rows: list[dict]) -> list[dict]:
    """One dict per concurrency with both policies' telemetry: s, m, break-even, lookup's acceptance."""
    by = {(r["concurrency"], r["policy"]): r for r in rows if r.get("engine")}
    out = []
    for c in sorted({k[0] for k in by}):
        off, ng = by.get((c, OFF)), by.get((c, NGRAM))
        if off is None or ng is None:
            continue
        eo, en = off["engine"], ng["engine"]
        drafted_step = sum(en.get("drafted_per_step", {}).values())
        if drafted_step <= 0:
            continue
        s = eo["step_ms"] / eo["requests_per_step"]
        m = (en["step_ms"] - eo["step_ms"]) / drafted_step
        emitted = ng["output_tokens_per_s"] * en["step_ms"] / 1e3 / en["requests_per_step"]
        drafted = drafted_step / en["requests_per_step"]
        out.append({"concurrency": c, "request_step_ms": s, "drafted_token_ms": m, "breakeven": m / s,
                    "drafted_per_request_step": drafted, "emitted_per_request_step": emitted,
                    "accept_per_drafted": (emitted - 1.0) / drafted,
                    "ngram_over_off": ng["output_tokens_per_s"] / off["output_tokens_per_s"]})
    return out


def table(label: str, fits: list[dict]) -> str:
    lines = [f"{label}:", "",
             "| concurrency | request-step, off (ms) | drafted token (ms) | break-even acceptance | lookup drafted / "
             "request-step | lookup accepted / drafted | static n-gram / off |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for f in fits:
        lines.append(f"| {f['concurrency']} | {f['request_step_ms']:.2f} | {f['drafted_token_ms']:.2f} | "
                     f"{f['breakeven']:.2f} | {f['drafted_per_request_step']:.2f} | {f['accept_per_drafted']:.2f} | "
                     f"{f['ngram_over_off']:.2f}x |")
    return "\n".join(lines)


MARKERS = {"off": "o", "static:ngram:4": "^", "static:draft:4": "s", "adaptive": "*"}


def plot(series: dict[str, list[dict]], runs: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.5))
    for label, rows in runs.items():  # the measured step-time curves: step time vs batched tokens per step
        color = None
        for policy, marker in MARKERS.items():
            pts = sorted((r["engine"]["batched_per_step"], r["engine"]["step_ms"]) for r in rows
                         if r["policy"] == policy and r.get("engine"))
            if pts:
                line, = ax3.plot(*zip(*pts, strict=True), marker=marker, ls=":", color=color,
                                 label=f"{label}: {policy}")
                color = line.get_color()
    ax3.set_xscale("log")
    ax3.set_yscale("log")
    ax3.set_xlabel("batched tokens / step (concurrency 1 ... 256)")
    ax3.set_ylabel("ms / step")
    ax3.set_title("measured step times")
    ax3.grid(alpha=0.3)
    ax3.legend(fontsize=6)
    for label, fits in series.items():
        cs = [f["concurrency"] for f in fits]
        line, = ax1.plot(cs, [f["accept_per_drafted"] for f in fits], "o-", label=f"{label}: lookup accepted / drafted")
        ax1.plot(cs, [f["breakeven"] for f in fits], "s--", color=line.get_color(), label=f"{label}: break-even")
        ax2.plot(cs, [f["ngram_over_off"] for f in fits], "o-", color=line.get_color(), label=label)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("share of drafted tokens")
    ax1.set_title("a drafted token pays above the break-even")
    ax2.axhline(1.0, color="grey", lw=1)
    ax2.set_ylabel("static n-gram:4 / off (tokens/s)")
    ax2.set_title("always-on lookup vs off")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--labels", help="comma-separated, one per run (default: the file names)")
    ap.add_argument("--md")
    ap.add_argument("--plot")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [Path(r).stem for r in args.runs]
    if len(labels) != len(args.runs):
        ap.error("--labels: one per run")
    runs = {lab: json.loads(Path(run).read_text()) for lab, run in zip(labels, args.runs, strict=True)}
    series = {lab: fit(rows) for lab, rows in runs.items()}
    text = "\n\n".join(table(lab, fits) for lab, fits in series.items()) + "\n"
    sys.stdout.write(text)
    if args.md:
        Path(args.md).write_text(text)
    if args.plot:
        plot(series, runs, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
