"""Train the repo's tiny target/draft pair (shared byte-level BPE tokenizer, Llama-style, HF format).

Corpus: the permissively licensed parts of ../shared/data (see its README: no code_alpaca_2k,
alpaca_eval_chat, t0_p3 samsum/sciq/xsum), formatted with the chat template so the models learn to answer
after the assistant tag and to copy spans from the context. Windows are drawn with equal weight per content
class. The draft is distilled from the target's logits (KL) plus a little cross-entropy.

    .venv/bin/python scripts/train_tiny_models.py --data ../shared/data --out adaptspec/assets \
        --target-minutes 15 --draft-minutes 6 --threads 2 > /tmp/train.log 2>&1 &

Training ends at the step budget (--target-steps / --draft-steps) or the wall-clock cap, whichever
comes first; on a busy machine the cap decides, so the shipped numbers are in training_info.json.

Held-out prompts (every 50th row of each source, never trained on) are what benchmarks/measure_alpha.py uses.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import random
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

from adaptspec.worker.model import LlamaConfig, TinyLlama

log = logging.getLogger("train_tiny_models")

SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
HELDOUT_EVERY = 50
LANGS = {"deu": "German", "fra": "French", "spa": "Spanish", "ita": "Italian", "por": "Portuguese",
         "nld": "Dutch", "rus": "Russian", "pol": "Polish", "tur": "Turkish", "jpn": "Japanese",
         "cmn": "Chinese", "ara": "Arabic", "swe": "Swedish", "fin": "Finnish", "ces": "Czech",
         "ne": "Nepali", "si": "Sinhala", "km": "Khmer", "ps": "Pashto"}

PRESETS = {
    # ~6.1M params: batch-1 decode is fixed/weight-read bound on 2 cores, 160 tokens is compute bound
    "target": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=4,
                   num_key_value_heads=4, head_dim=64),
    "draft": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=64),
    "quick-target": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=64),
}


def render_chat(messages: list[dict]) -> str:
    """Python twin of CHAT_TEMPLATE (for a conversation that ends with the assistant's answer)."""
    return "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)


def _jsonl(path: Path):
    op = gzip.open if path.suffix == ".gz" else open
    with op(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _pair(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user.strip()}, {"role": "assistant", "content": assistant.strip()}]


def build_corpus(data: Path) -> dict[str, list[tuple[str, list[dict]]]]:
    """-> {class: [(split, messages), ...]} with split 'train' or 'heldout' (every 50th row per source)."""
    out: dict[str, list[tuple[str, list[dict]]]] = defaultdict(list)

    def add(cls: str, rows: list[list[dict]]):
        for i, m in enumerate(rows):
            out[cls].append(("heldout" if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train", m))

    # code: the answer restates the stub, so completions copy from the prompt like real code edits
    rows = []
    for r in _jsonl(data / "humaneval/HumanEval.jsonl.gz"):
        rows.append(_pair("Complete this Python function.\n\n" + r["prompt"], r["prompt"] + r["canonical_solution"]))
    for lang in ["cpp", "go", "java", "js", "rust"]:
        for r in _jsonl(data / f"humaneval_x/humaneval_{lang}.jsonl.gz"):
            rows.append(_pair(f"Complete this {lang} function.\n\n" + r["prompt"],
                              r["prompt"] + r["canonical_solution"]))
    for r in _jsonl(data / "mbpp/mbpp.jsonl"):
        tests = "\n".join(r["test_list"])
        rows.append(_pair(f"{r['text']}\nYour code should pass these tests:\n{tests}",
                          r["code"].replace("\r\n", "\n")))
    add("code", rows)

    # math
    rows = [_pair(r["question"], r["answer"]) for r in _jsonl(data / "gsm8k/train.jsonl")]
    rows += [_pair(f"{r['Body']} {r['Question']}", f"{r['Equation']} = {r['Answer']:g}\n#### {r['Answer']:g}")
             for r in _jsonl(data / "svamp/svamp.jsonl")]
    for split in ["dev", "test"]:
        rows += [_pair(r["question"] + "\nOptions: " + " ".join(r["options"]), r["rationale"])
                 for r in _jsonl(data / f"aqua_rat/{split}.jsonl")]
    add("math", rows)

    # structured: tool calls as JSON against the schema, attribute extraction
    rows = []
    for f in sorted((data / "bfcl").glob("bfcl_*.jsonl")):
        for r in _jsonl(f):
            user = " ".join(m["content"] for turn in r["question"] for m in turn if m["role"] == "user")
            calls = [{"name": name, "arguments": {k: (v[0] if isinstance(v, list) and v else v)
                                                  for k, v in args.items()}}
                     for gt in r["ground_truth"] for name, args in gt.items()]
            rows.append(_pair(f"{user}\n\nFunctions:\n{json.dumps(r['function'])}",
                              json.dumps(calls)))
    t0 = {"summarize": [], "chat": [], "structured": []}
    for name in ["cnn_dailymail", "adversarial_qa", "quoref", "duorc", "ropes", "kilt_hotpotqa",
                 "common_gen", "wiki_bio"]:
        for r in _jsonl(data / f"t0_p3/{name}.jsonl"):
            cls = {"summarization": "summarize"}.get(r["label"], r["label"])
            t0[cls].append(_pair(r["prompt"], r["completion"]))
    add("structured", rows + t0["structured"])
    add("summarize", t0["summarize"])

    # translate: both directions
    rows = []
    for f in [data / "tatoeba/tatoeba_laser_v1_14langs.jsonl", data / "flores_v1/flores_v1_dev_first500.jsonl"]:
        for i, r in enumerate(_jsonl(f)):
            lang = LANGS.get(r["lang"], r["lang"])
            if i % 2:
                rows.append(_pair(f"Translate to English:\n{r['text']}", r["eng"]))
            else:
                rows.append(_pair(f"Translate from English to {lang}:\n{r['eng']}", r["text"]))
    add("translate", rows)

    # chat: open QA, role-play prompts continued by Shakespeare prose as "creative writing"
    rows = [_pair(r["question"], r["best_answer"] + ". " + "; ".join(r["correct_answers"][:3]) + ".")
            for r in _jsonl(data / "truthfulqa/truthfulqa.jsonl")]
    shakespeare = (data / "tinyshakespeare/input.txt").read_text(encoding="utf-8")
    chunks = [c.strip() for c in shakespeare.split("\n\n") if c.strip()]
    for i in range(0, len(chunks) - 3, 3):
        rows.append(_pair("Continue the scene:\n" + chunks[i], chunks[i + 1] + "\n\n" + chunks[i + 2]))
    awesome = [r["prompt"] for r in _jsonl(data / "awesome_chatgpt_prompts/prompts_2023-12-26.jsonl")]
    for i, p in enumerate(awesome):
        rows.append([{"role": "system", "content": p}] + _pair("Hello!", chunks[(7 * i) % len(chunks)]))
    add("chat", rows + t0["chat"])
    return dict(out)


def train_tokenizer(texts: list[str], vocab_size: int, out_dirs: list[Path]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
           "eos_token": "<|end|>", "pad_token": "<|endoftext|>", "unk_token": None,
           "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
           "model_max_length": 1024, "chat_template": CHAT_TEMPLATE,
           "added_tokens_decoder": {str(tok.token_to_id(t)): {"content": t, "special": True, "lstrip": False,
                                                              "rstrip": False, "normalized": False,
                                                              "single_word": False}
                                    for t in SPECIAL_TOKENS}}
    for d in out_dirs:
        d.mkdir(parents=True, exist_ok=True)
        tok.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (d / "special_tokens_map.json").write_text(json.dumps(
            {"bos_token": "<|endoftext|>", "eos_token": "<|end|>", "pad_token": "<|endoftext|>"}, indent=2) + "\n")
    return tok


def encode_streams(tok, corpus, eot: int) -> dict[str, torch.Tensor]:
    streams = {}
    for cls, rows in corpus.items():
        texts = [render_chat(m) for split, m in rows if split == "train"]
        ids: list[int] = []
        for enc in tok.encode_batch(texts):
            ids.extend(enc.ids)
            ids.append(eot)
        streams[cls] = torch.tensor(ids, dtype=torch.long)
    return streams


def sample_batch(streams, classes, batch: int, seq: int, g: torch.Generator) -> torch.Tensor:
    rows = []
    for i in range(batch):
        s = streams[classes[(i + int(torch.randint(len(classes), (1,), generator=g))) % len(classes)]]
        start = int(torch.randint(0, s.numel() - seq - 1, (1,), generator=g))
        rows.append(s[start:start + seq + 1])
    return torch.stack(rows)


def lr_at(step_frac: float, peak: float, warm: float = 0.03) -> float:
    if step_frac < warm:
        return peak * step_frac / warm
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step_frac - warm) / (1 - warm)))))


def train(model: TinyLlama, streams, minutes: float, batch: int, seq: int, lr: float, seed: int,
          teacher: TinyLlama | None = None, kd_weight: float = 0.8, max_steps: int | None = None,
          bf16: bool = True) -> dict:
    g = torch.Generator().manual_seed(seed)
    classes = sorted(streams)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    t0 = time.monotonic()
    budget = minutes * 60
    step, ema = 0, None
    model.train()
    while True:
        # progress = the larger of the time and step fractions: the run ends at whichever budget comes first
        frac = max((time.monotonic() - t0) / budget, step / max_steps if max_steps else 0.0)
        if frac >= 1:
            break
        for grp in opt.param_groups:
            grp["lr"] = lr_at(frac, lr)
        xy = sample_batch(streams, classes, batch, seq, g)
        x, y = xy[:, :-1], xy[:, 1:]
        # bf16 autocast: the matmuls run on AMX/AVX512-bf16 units, about 2x faster here than float32
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model.forward_dense(x).float()
        ce = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss = ce
        if teacher is not None:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                t_logits = teacher.forward_dense(x).float()
            t_logp = F.log_softmax(t_logits.clone().flatten(0, 1), -1)
            kd = F.kl_div(F.log_softmax(logits.flatten(0, 1), -1), t_logp, log_target=True, reduction="batchmean")
            loss = kd_weight * kd + (1 - kd_weight) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = ce.item() if ema is None else 0.95 * ema + 0.05 * ce.item()
        if step % 20 == 0:
            log.info("step %d  %.0fs  lr %.2e  ce %.3f (ema %.3f)  loss %.3f", step, time.monotonic() - t0,
                     lr_at(frac, lr), ce.item(), ema, loss.item())
    model.eval()
    return {"steps": step, "seconds": round(time.monotonic() - t0, 1), "final_ce_ema": round(ema or 0, 3),
            "tokens": step * batch * seq}


@torch.inference_mode()
def heldout_ce(model: TinyLlama, tok, corpus, seq: int) -> dict[str, float]:
    res = {}
    for cls, rows in sorted(corpus.items()):
        texts = [render_chat(m) for split, m in rows if split == "heldout"][:16]
        tot, n = 0.0, 0
        for t in texts:
            ids = torch.tensor(tok.encode(t).ids[: seq + 1])[None]
            if ids.shape[1] < 2:
                continue
            lg = model.forward_dense(ids[:, :-1])
            tot += F.cross_entropy(lg[0], ids[0, 1:], reduction="sum").item()
            n += ids.shape[1] - 1
        res[cls] = round(tot / max(n, 1), 3)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1] / "../shared/data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "adaptspec/assets")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--target-preset", default="target", choices=sorted(PRESETS))
    ap.add_argument("--draft-preset", default="draft", choices=sorted(PRESETS))
    ap.add_argument("--target-minutes", type=float, default=15, help="wall-clock cap (steps may end it first)")
    ap.add_argument("--draft-minutes", type=float, default=6, help="wall-clock cap (steps may end it first)")
    ap.add_argument("--target-steps", type=int, default=400)
    ap.add_argument("--draft-steps", type=int, default=250)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="train in float32 (slower)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)

    t_start = time.monotonic()
    corpus = build_corpus(args.data.resolve())
    log.info("corpus: %s", {c: (sum(s == "train" for s, _ in r), sum(s == "heldout" for s, _ in r))
                            for c, r in corpus.items()})
    tdir, ddir = args.out / "tiny-target", args.out / "tiny-draft"
    texts = [render_chat(m) for rows in corpus.values() for s, m in rows if s == "train"]
    tok = train_tokenizer(texts, args.vocab, [tdir, ddir])
    eot, end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|end|>")
    streams = encode_streams(tok, corpus, eot)
    log.info("tokenizer %d ids; train tokens per class %s (%.0fs)", tok.get_vocab_size(),
             {c: s.numel() for c, s in streams.items()}, time.monotonic() - t_start)

    def make(preset: str, seed: int) -> TinyLlama:
        cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=args.max_len,
                          tie_word_embeddings=True, bos_token_id=eot, eos_token_id=end, pad_token_id=eot,
                          **PRESETS[preset])
        m = TinyLlama(cfg)
        m.init_weights(seed)
        return m

    target = make(args.target_preset, args.seed)
    log.info("target params %d", target.cfg.num_params)
    t_stats = train(target, streams, args.target_minutes, args.batch, args.seq, args.lr, args.seed + 1,
                    bf16=args.bf16, max_steps=args.target_steps)
    log.info("target trained: %s", t_stats)
    draft = make(args.draft_preset, args.seed + 2)
    log.info("draft params %d", draft.cfg.num_params)
    d_stats = train(draft, streams, args.draft_minutes, args.batch, args.seq, args.lr, args.seed + 3,
                    teacher=target, bf16=args.bf16, max_steps=args.draft_steps)
    log.info("draft trained: %s", d_stats)

    gen_cfg = {"bos_token_id": eot, "eos_token_id": [end, eot], "pad_token_id": eot, "do_sample": False}
    for m, d, stats in [(target, tdir, t_stats), (draft, ddir, d_stats)]:
        m.save_pretrained(d, dtype=torch.float16)
        (d / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
        info = {"params": m.cfg.num_params, "train": stats, "heldout_ce": heldout_ce(m, tok, corpus, args.seq),
                "command": "scripts/train_tiny_models.py " + " ".join(argv if argv is not None else []),
                "seed": args.seed}
        (d / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
        log.info("saved %s: %s", d, info)
    log.info("total %.0fs", time.monotonic() - t_start)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
