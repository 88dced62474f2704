"""Train the EAGLE-style head (adaptspec/worker/proposers/eagle.py) by distillation from the shipped tiny target.

Data: the same corpus, tokenizer and class-balanced windows as the tiny models (scripts/train_tiny_models.py:
build_corpus / encode_streams / sample_batch, imported, not copied; held-out rows are never trained on).
For each window the frozen target gives its final hidden states f [B, T, h]; the head is trained to predict
f_{t+1} from (f_t, embed(x_{t+1})), unrolled `--depth` steps on its own predictions (step j feeds the head's
step j-1 output, as drafting does), with the loss per step

    smooth_l1(g, f) * reg_weight + CE(softmax(lm_head(f)), log_softmax(lm_head(g)))   (distillation)

and step weights 1, 0.8, 0.64, ... Reported: held-out top-1 agreement of the head's argmax with the target's
argmax at draft positions 1..depth (greedy acceptance per position, given the earlier ones accepted).

    PYTHONPATH=. .venv/bin/python scripts/train_eagle_head.py --minutes 15 --threads 1   # shipped asset
    PYTHONPATH=. .venv/bin/python scripts/train_eagle_head.py --minutes 60 --steps 100000  # longer, better

Training ends at --steps or the --minutes wall-clock cap, whichever comes first.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_tiny_models import build_corpus, encode_streams, lr_at, render_chat, sample_batch  # noqa: E402

from adaptspec.worker.model import TinyLlama  # noqa: E402
from adaptspec.worker.proposers.eagle import EagleConfig, EagleHead  # noqa: E402

log = logging.getLogger("train_eagle_head")
ROOT = Path(__file__).resolve().parents[1]


def unrolled_losses(head: EagleHead, target: TinyLlama, x: torch.Tensor, depth: int, reg_weight: float,
                    bf16: bool) -> tuple[torch.Tensor, list[dict]]:
    """Loss over `depth` unrolled draft steps for token windows x [B, T]; -> (loss, per-step stats)."""
    W = target.lm_head.weight.detach()  # [V, h]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        f = target.forward_dense(x, return_hidden=True)
    f = f.float()  # [B, T, h]
    with torch.no_grad():
        e = target.embed(x).float()  # [B, T, h]
        t_logits = f[:, 1:] @ W.T  # [B, T-1, V] teacher logits for positions 1..T-1
        t_prob = t_logits.softmax(-1)
        t_top = t_logits.argmax(-1)  # [B, T-1]
    feats = f[:, :-1]
    loss = torch.zeros(())
    stats = []
    for j in range(1, depth + 1):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            g = head(feats, e[:, j:])  # [B, T-j, h] predicts f[:, j:]
            logits = g @ W.T.to(g.dtype)  # [B, T-j, V]
        g, logits = g.float(), logits.float()
        reg = F.smooth_l1_loss(g, f[:, j:])
        kd = -(t_prob[:, j - 1:] * logits.log_softmax(-1)).sum(-1).mean()
        loss = loss + 0.8 ** (j - 1) * (reg_weight * reg + kd)
        with torch.no_grad():
            agree = (logits.argmax(-1) == t_top[:, j - 1:]).float().mean().item()
        stats.append({"reg": reg.item(), "kd": kd.item(), "top1": agree})
        feats = g[:, :-1]
    return loss, stats


@torch.inference_mode()
def heldout_agreement(head: EagleHead, target: TinyLlama, tok, corpus, seq: int, depth: int) -> dict:
    """Per class: top-1 agreement with the target at draft positions 1..depth, on held-out rows."""
    res = {}
    for cls, rows in sorted(corpus.items()):
        texts = [render_chat(m) for split, m in rows if split == "heldout"][:16]
        agree = [0.0] * depth
        n = [0] * depth
        for t in texts:
            ids = torch.tensor(tok.encode(t).ids[:seq])[None]
            if ids.shape[1] < depth + 2:
                continue
            _, stats = unrolled_losses(head, target, ids, depth, 0.0, bf16=False)
            for j, s in enumerate(stats):
                m = ids.shape[1] - 1 - j
                agree[j] += s["top1"] * m
                n[j] += m
        res[cls] = [round(a / max(c, 1), 3) for a, c in zip(agree, n, strict=True)]
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "../shared/data")
    ap.add_argument("--target", type=Path, default=ROOT / "adaptspec/assets/tiny-target")
    ap.add_argument("--out", type=Path, default=ROOT / "adaptspec/assets/tiny-eagle")
    ap.add_argument("--minutes", type=float, default=15, help="wall-clock cap (steps may end it first)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--depth", type=int, default=3, help="unrolled draft steps per window")
    ap.add_argument("--intermediate", type=int, default=1024, help="SwiGLU width of the head")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--reg-weight", type=float, default=1.0, help="weight of the hidden-state regression")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="train in float32 (slower)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from tokenizers import Tokenizer

    t_start = time.monotonic()
    target = TinyLlama.from_pretrained(args.target).requires_grad_(False)
    tok = Tokenizer.from_file(str(args.target / "tokenizer.json"))
    corpus = build_corpus(args.data.resolve())
    streams = encode_streams(tok, corpus, tok.token_to_id("<|endoftext|>"))
    classes = sorted(streams)
    head = EagleHead(EagleConfig(target.cfg.hidden_size, target.cfg.vocab_size, args.intermediate))
    head.init_weights(args.seed)
    log.info("head params %d; data ready in %.0fs", head.num_params, time.monotonic() - t_start)

    g = torch.Generator().manual_seed(args.seed + 1)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    t0 = time.monotonic()
    step, ema = 0, None
    head.train()
    while True:
        frac = max((time.monotonic() - t0) / (args.minutes * 60), step / args.steps)
        if frac >= 1:
            break
        for grp in opt.param_groups:
            grp["lr"] = lr_at(frac, args.lr)
        x = sample_batch(streams, classes, args.batch, args.seq, g)[:, :-1]  # [B, T]
        loss, stats = unrolled_losses(head, target, x, args.depth, args.reg_weight, args.bf16)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 10 == 0:
            log.info("step %d  %.0fs  loss %.3f (ema %.3f)  %s", step, time.monotonic() - t0, loss.item(), ema,
                     "  ".join(f"d{j + 1}: kd {s['kd']:.3f} reg {s['reg']:.4f} top1 {s['top1']:.3f}"
                               for j, s in enumerate(stats)))
    head.eval()
    seconds = round(time.monotonic() - t0, 1)
    agreement = heldout_agreement(head, target, tok, corpus, args.seq, args.depth)
    info = {"params": head.num_params, "target": str(args.target.name),
            "train": {"steps": step, "seconds": seconds, "final_loss_ema": round(ema or 0.0, 4),
                      "last_step": stats, "tokens": step * args.batch * args.seq},
            "heldout_top1_agreement_per_position": agreement,
            "command": "scripts/train_eagle_head.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "seed": args.seed}
    head.save_pretrained(args.out, info=info)
    log.info("saved %s: %s (total %.0fs)", args.out, info, time.monotonic() - t_start)


if __name__ == "__main__":
    main()
