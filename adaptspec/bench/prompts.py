"""Benchmark prompt sets: one prompt per line with its content class.

File format (JSON lines): ``{"category": "code", "prompt": "..."}`` or ``{"category": ..., "messages":
[...]}``; ``class`` and ``label`` are accepted for ``category`` (``summarization`` / ``translation`` map to
``summarize`` / ``translate``). An optional ``"temperature"`` (0-2) is that prompt's sampling temperature;
without it the load generator's ``--temperature`` applies.

The package ships a small default set (``adaptspec/bench/data/prompts.jsonl``, 20 prompts per class) built
from the permissively licensed sources of ``../shared/data`` only (see ``data/SOURCES.md`` for the
attributions); rebuild it, or a bigger one, with::

    python -m adaptspec.bench.prompts --data ../shared/data --per-class 20 --out adaptspec/bench/data/prompts.jsonl
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from adaptspec.control.types import CONTENT_CLASSES
from adaptspec.errors import ConfigError

_ALIASES = {"summarization": "summarize", "translation": "translate", "json": "structured"}
MAX_CHARS = 1500  # keeps every prompt well inside a small model's context


@dataclass(frozen=True, slots=True)
class PromptItem:
    category: str
    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    temperature: float | None = None  # this prompt's own; None: the load generator's

    def chat_messages(self) -> list[dict]:
        if self.messages:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]


def _category(raw: object, where: str) -> str:
    cat = _ALIASES.get(str(raw), str(raw))
    if cat not in CONTENT_CLASSES:
        raise ConfigError(f"unknown category; expected one of {list(CONTENT_CLASSES)}", file=where,
                          key="category", value=raw)
    return cat


def _temperature(raw: object, where: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0.0 <= raw <= 2.0:
        raise ConfigError("expected a number from 0 to 2", file=where, key="temperature", value=raw)
    return float(raw)


def with_temperatures(stream: Iterator[PromptItem], temperatures: Sequence[float]) -> Iterator[PromptItem]:
    """The stream with request i's temperature set to temperatures[i % len] where its prompt has none of its
    own: a mix of greedy and sampled traffic (`--temperature 0,0.7`), the same pairs for every policy that
    reads the same stream."""
    if not temperatures:
        raise ValueError("with_temperatures needs at least one temperature")
    for i, item in enumerate(stream):
        yield item if item.temperature is not None else replace(item, temperature=temperatures[i % len(temperatures)])


def load_prompts(path: str | Path) -> list[PromptItem]:
    """Read a JSON-lines prompt file (plain or .gz); errors name the file, line and field."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("prompt file not found", file=str(p))
    opener = gzip.open if p.suffix == ".gz" else open
    items: list[PromptItem] = []
    with opener(p, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{p}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"not valid JSON ({exc.msg})", file=where) from None
            if not isinstance(row, dict):
                raise ConfigError("each line must be a JSON object", file=where)
            raw_cat = row.get("category", row.get("class", row.get("label")))
            if raw_cat is None:
                raise ConfigError("missing field", file=where, key="category")
            cat = _category(raw_cat, where)
            temp = _temperature(row.get("temperature"), where)
            if isinstance(row.get("messages"), list) and row["messages"]:
                items.append(PromptItem(cat, messages=tuple(row["messages"]), temperature=temp))
            elif isinstance(row.get("prompt"), str) and row["prompt"]:
                items.append(PromptItem(cat, prompt=row["prompt"], temperature=temp))
            else:
                raise ConfigError("needs a non-empty 'prompt' string or 'messages' list", file=where,
                                  key="prompt")
    if not items:
        raise ConfigError("prompt file is empty", file=str(p))
    return items


def default_prompts() -> list[PromptItem]:
    """The small prompt set shipped with the package (all six classes)."""
    ref = resources.files("adaptspec.bench") / "data" / "prompts.jsonl"
    with resources.as_file(ref) as path:
        return load_prompts(path)


def weighted_cycle(items: list[PromptItem], mix: Mapping[str, float] | None, seed: int = 0) -> Iterator[PromptItem]:
    """An endless, seeded stream of prompts: class drawn by `mix` weight (default: as in the file),
    then a prompt of that class, cycling through each class's prompts in a shuffled order."""
    rng = random.Random(seed)
    by_cat: dict[str, list[PromptItem]] = {}
    for it in items:
        by_cat.setdefault(it.category, []).append(it)
    if mix:
        missing = [c for c, w in mix.items() if w > 0 and c not in by_cat]
        if missing:
            raise ConfigError(f"the prompt set has no prompts of class(es) {missing}; it has {sorted(by_cat)}",
                              key="--mix", value=dict(mix))
        cats = [c for c, w in mix.items() if w > 0]
        weights = [mix[c] for c in cats]
    else:
        cats = sorted(by_cat)
        weights = [len(by_cat[c]) for c in cats]
    orders = {c: rng.sample(by_cat[c], len(by_cat[c])) for c in cats}
    pos = dict.fromkeys(cats, 0)
    while True:
        c = rng.choices(cats, weights)[0]
        yield orders[c][pos[c] % len(orders[c])]
        pos[c] += 1


# ---- builder from ../shared/data (permissive sources only: see the data README's licence rule) ----

def _jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS].rsplit(" ", 1)[0] + " ..."


_LANGS = {"deu": "German", "fra": "French", "spa": "Spanish", "ita": "Italian", "por": "Portuguese",
          "nld": "Dutch", "pol": "Polish", "rus": "Russian", "tur": "Turkish"}


def _sources(data: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {c: [] for c in CONTENT_CLASSES}
    out["code"] += [r["prompt"] for r in _jsonl(data / "humaneval" / "HumanEval.jsonl.gz")]  # MIT
    out["code"] += [f"{r['text']} Your code should pass: {r['test_list'][0]}"
                    for r in _jsonl(data / "mbpp" / "mbpp.jsonl")]  # CC-BY-4.0
    for r in _jsonl(data / "bfcl" / "bfcl_simple_python.jsonl"):  # Apache-2.0
        user = " ".join(m["content"] for turn in r["question"] for m in turn if m.get("role") == "user")
        out["structured"].append(
            f"{user}\n\nRespond with only a JSON object {{\"name\": ..., \"arguments\": {{...}}}} calling one of "
            f"these functions:\n{json.dumps(r['function'])}")
    for name in ("cnn_dailymail", "duorc", "quoref", "ropes"):  # Apache-2.0, MIT, CC BY 4.0, CC BY 4.0
        out["summarize"] += [r["prompt"] for r in _jsonl(data / "t0_p3" / f"{name}.jsonl")
                             if r["label"] == "summarization" and len(r["prompt"]) <= MAX_CHARS]
    for i, r in enumerate(_jsonl(data / "tatoeba" / "tatoeba_laser_v1_14langs.jsonl")):  # CC BY 2.0 FR
        lang = _LANGS.get(r["lang"])
        if lang is None:
            continue
        out["translate"].append(f"Translate into English: {r['text']}" if i % 2 else
                                f"Translate the following sentence into {lang}: {r['eng']}")
    out["math"] += [r["question"] for r in _jsonl(data / "gsm8k" / "train.jsonl")]  # MIT
    out["chat"] += [r["question"] for r in _jsonl(data / "truthfulqa" / "truthfulqa.jsonl")]  # Apache-2.0
    out["chat"] += [r["prompt"] for r in _jsonl(data / "awesome_chatgpt_prompts" / "prompts_2023-12-26.jsonl")]  # CC0
    return out


def build_prompt_set(data: str | Path, per_class: int = 20, seed: int = 0) -> list[dict]:
    """`per_class` prompts of each class from ../shared/data, drawn with a fixed seed."""
    data = Path(data)
    if not data.is_dir():
        raise ConfigError("data directory not found", key="--data", value=str(data))
    rng = random.Random(seed)
    rows = []
    for cat, texts in _sources(data).items():
        if cat in ("code", "structured"):  # a clipped schema or signature would be broken input
            texts = [t for t in texts if len(t) <= MAX_CHARS]
        picked = rng.sample(texts, min(per_class, len(texts)))
        rows += [{"category": cat, "prompt": _clip(t)} for t in picked]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build a benchmark prompt set from ../shared/data.")
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rows = build_prompt_set(args.data, args.per_class, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
