"""A prompt set whose acceptance varies within a class (issue 10 item 6): requests of one class whose answers
copy given text next to requests of the same class that give none to copy.

    code       "edit": return given code with its formatting fixed / with comments (HumanEval prompt +
               canonical solution, MIT; MBPP code, CC BY 4.0) -- the answer copies the code;
               "question": write a function from a description (MBPP text, CC BY 4.0) -- nothing to copy.
    summarize  "source": summarise a given news article (T0/P3 over CNN/DailyMail, Apache-2.0);
               "closed": summarise what is known about a topic, no text given (TruthfulQA, Apache-2.0).

Each line: {"category", "kind", "prompt", "reference"}; `reference` is the source's own answer (the code
returned whole for edits, MBPP's solution, the article's highlights, TruthfulQA's answers). Deterministic
(first rows, no sampling).

    python benchmarks/make_within_class_prompts.py --data ../shared/data --per-kind 30 --out /tmp/within.jsonl \\
        --trace benchmarks/traces/reference-within-class.jsonl
    adaptspec trace record --prompts /tmp/within.jsonl --out benchmarks/traces/tiny-within-class.jsonl \\
        --max-k 8 --max-tokens 128

`--trace` writes a trace whose outputs are the references (what a model that answered like the sources
would emit), with the recorder's own methods (adaptspec/bench/trace_record.py): n-gram runs of the
worker's prompt lookup over the tiny pair's tokens of chat prompt + reference, and the tiny draft model's
teacher-forced runs against the reference; at most --max-tokens tokens of each reference.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

MAX_CHARS = 1500  # as adaptspec/bench/prompts.py: well inside the tiny pair's context

_EDIT = ("Fix the formatting of this code and return the whole corrected code:",
         "Check this function for bugs and return the full code:")


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _clean(code: str) -> str:
    """MBPP code as a formatter returns it: LF line ends, 4-space indents, no trailing blanks."""
    lines = code.replace("\r\n", "\n").replace("\t", "    ").split("\n")
    return "\n".join(ln.rstrip() for ln in lines).strip()


def trace(items: list[dict], max_k: int, max_tokens: int) -> list[dict]:
    """Trace lines whose outputs are the references (see the module docstring)."""
    import numpy as np

    from adaptspec.bench.prompts import PromptItem
    from adaptspec.bench.trace_record import ngram_runs, streak_runs, teacher_forced_predictions
    from adaptspec.worker.model import TinyLlama
    from adaptspec.worker.tokenizer import Tokenizer

    assets = Path(__file__).resolve().parents[1] / "adaptspec" / "assets"
    tok = Tokenizer.from_dir(assets / "tiny-target")
    draft = TinyLlama.from_pretrained(assets / "tiny-draft")
    pairs = []
    for it in items:
        msgs = PromptItem(it["category"], prompt=it["prompt"]).chat_messages()
        pairs.append((tok.encode(tok.apply_chat_template(msgs)), tok.encode(it["reference"])[:max_tokens]))
    out = []
    for lo in range(0, len(pairs), 16):
        preds = teacher_forced_predictions(draft, pairs[lo: lo + 16])
        for n, ((ids, ref), pred) in enumerate(zip(pairs[lo: lo + 16], preds, strict=True), start=lo):
            it = items[n]
            runs = {"ngram": ngram_runs(ids, ref, max_k),
                    "draft": streak_runs(np.asarray(pred) == np.asarray(ref), max_k)}
            out.append({"id": f"r{n:04d}-{it['category']}-{it['kind']}", "class": it["category"],
                        "prompt": it["prompt"], "prompt_tokens": len(ids), "output_tokens": len(ref),
                        "max_k": max_k, "temperature": 0.0, "accept_runs": runs})
    return out


def build(data: Path, per_kind: int) -> list[dict]:
    he = _jsonl(data / "humaneval" / "HumanEval.jsonl.gz")
    mbpp = _jsonl(data / "mbpp" / "mbpp.jsonl")
    cnn = [r for r in _jsonl(data / "t0_p3" / "cnn_dailymail.jsonl") if r["label"] == "summarization"]
    tqa = _jsonl(data / "truthfulqa" / "truthfulqa.jsonl")
    out: list[dict] = []
    for i in range(per_kind):
        if i % 2 == 0:
            r = he[i // 2]
            code = (r["prompt"] + r["canonical_solution"]).strip()
        else:
            code = _clean(mbpp[200 + i // 2]["code"])
        code = code[:MAX_CHARS - 120]
        text = f"{_EDIT[i % 2]}\n\n```python\n{code}\n```"
        out.append({"category": "code", "kind": "edit", "prompt": text, "reference": f"```python\n{code}\n```"})
        out.append({"category": "code", "kind": "question", "prompt": mbpp[i]["text"],
                    "reference": f"```python\n{_clean(mbpp[i]['code'])}\n```"})
        out.append({"category": "summarize", "kind": "source", "prompt": cnn[i]["prompt"][:MAX_CHARS],
                    "reference": cnn[i]["completion"]})
        q = tqa[i]
        answers = [q["best_answer"], *[a for a in q["correct_answers"] if a != q["best_answer"]][:2]]
        out.append({"category": "summarize", "kind": "closed",
                    "prompt": "Summarize in two or three sentences what is generally known about this: "
                              f"{q['question'].rstrip('?')}?",
                    "reference": " ".join(a.rstrip(".") + "." for a in answers)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data", help="the shared/data folder")
    ap.add_argument("--per-kind", type=int, default=30, help="prompts of each of the four kinds")
    ap.add_argument("--out", required=True, help="JSONL prompt file to write")
    ap.add_argument("--trace", help="also write a trace whose outputs are the references")
    ap.add_argument("--max-k", type=int, default=8, help="trace: most tokens drafted per step (default 8)")
    ap.add_argument("--max-tokens", type=int, default=128, help="trace: reference tokens kept (default 128)")
    args = ap.parse_args()
    items = build(Path(args.data), args.per_kind)
    Path(args.out).write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items), encoding="utf-8")
    if args.trace:
        lines = trace(items, args.max_k, args.max_tokens)
        Path(args.trace).write_text("".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n"
                                            for x in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
