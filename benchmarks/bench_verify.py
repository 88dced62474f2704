"""Verifier throughput on CPU: batched ``verify_drafts`` vs a straightforward per-request Python loop.

Both implementations run side by side in one process on the same inputs (k = 4 drafts per request,
V = 32,000, float32 probabilities, drafts sampled from a draft distribution close to the target so that
acceptance is realistic), interleaved repeat by repeat; the table gives the median requests/s of each and
their ratio.

    .venv/bin/python benchmarks/bench_verify.py                    # batch 1 / 32 / 256, 1 thread
    .venv/bin/python benchmarks/bench_verify.py --batch 1 32 --repeats 9 --threads 2 --ngram
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from adaptspec.worker.verify import verify_drafts


def loop_reference(target: torch.Tensor, drafts: torch.Tensor, ks: list[int],
                   draft_probs: torch.Tensor | None) -> list[list[int]]:
    """The textbook algorithm, one request and one position at a time (host syncs, torch.multinomial)."""
    out: list[list[int]] = []
    d = t = 0
    for k in ks:
        emitted: list[int] = []
        for j in range(k):
            p, x = target[t + j], int(drafts[d + j])
            q_x = float(draft_probs[d + j, x]) if draft_probs is not None else 1.0
            if torch.rand(()).item() * q_x <= float(p[x]) and float(p[x]) > 0:
                emitted.append(x)
                continue
            if draft_probs is not None:
                residual = (p - draft_probs[d + j]).clamp_min(0)
            else:
                residual = p.clone()
                residual[x] = 0
            if float(residual.sum()) <= 0:
                residual = p
            emitted.append(int(torch.multinomial(residual / residual.sum(), 1)))
            break
        else:
            emitted.append(int(torch.multinomial(target[t + k], 1)))
        out.append(emitted)
        d, t = d + k, t + k + 1
    return out


def make_inputs(batch: int, k: int, vocab: int, ngram: bool, draft_noise: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch * (k + 1), vocab, generator=g) * 4
    target = torch.softmax(logits, -1)
    ks = [k] * batch
    req = torch.repeat_interleave(torch.arange(batch), torch.tensor(ks))
    draft_rows = torch.arange(batch * k) + req  # the target row each draft position is checked against
    draft_logits = logits[draft_rows] + torch.randn(batch * k, vocab, generator=g) * draft_noise
    draft_probs = torch.softmax(draft_logits, -1)
    drafts = torch.multinomial(draft_probs, 1, generator=g).squeeze(1)
    if ngram:  # prompt lookup mostly proposes plausible continuations: the target's top token 60% of the time
        top = target[draft_rows].argmax(dim=-1)
        drafts = torch.where(torch.rand(batch * k, generator=g) < 0.6, top, drafts)
    return target, drafts, ks, (None if ngram else draft_probs)


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32, 256])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ngram", action="store_true", help="point-mass drafts (draft_probs=None)")
    ap.add_argument("--draft-noise", type=float, default=0.5,
                    help="std of the logit noise separating draft from target (sets the acceptance rate)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    kind = "n-gram (point mass)" if args.ngram else "draft model"
    print(f"verify throughput, CPU, torch {torch.__version__}, {args.threads} thread(s), k={args.k}, "
          f"V={args.vocab}, float32, {kind}; median of {args.repeats} interleaved repeats")
    print(f"{'batch':>6} {'loop req/s':>12} {'batched req/s':>14} {'speedup':>8} {'accept rate':>12}")
    for batch in args.batch:
        target, drafts, ks, draft_probs = make_inputs(batch, args.k, args.vocab, args.ngram, args.draft_noise)
        gen = torch.Generator().manual_seed(1)
        batched = functools.partial(verify_drafts, target, drafts, ks, draft_probs, generator=gen)
        looped = functools.partial(loop_reference, target, drafts, ks, draft_probs)
        batched(), looped()  # warm up
        t_batched, t_loop = [], []
        for _ in range(args.repeats):  # interleave so both see the same machine load
            t_batched += timed(batched, 1)
            t_loop += timed(looped, 1)
        out = batched()
        accept_rate = float(((out != -1).sum(1) - 1).sum()) / (batch * args.k)
        rate_b, rate_l = batch / statistics.median(t_batched), batch / statistics.median(t_loop)
        print(f"{batch:>6} {rate_l:>12.1f} {rate_b:>14.1f} {rate_b / rate_l:>7.2f}x {accept_rate:>12.2f}")


if __name__ == "__main__":
    main()
