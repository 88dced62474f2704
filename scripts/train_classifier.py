"""Train the prompt content classifier and write the shipped artifact.

    .venv/bin/python scripts/train_classifier.py [--data ../shared/data] [--out adaptspec/control/_classifier]
    .venv/bin/python scripts/train_classifier.py --features hashed --out DIR   # the hashed byte n-gram model

`--features hashed` trains the same model over adaptspec/control/_hashed_features.py (hashed byte 1..6-grams,
2**18 buckets, no vocabulary; C=64, the 60,000 strongest buckets kept) and writes an artifact_format 2
artifact (`HashedClassifier`); the figures below are printed and recorded the same way for both.

Data: ../shared/data/combined/classifier_prompts.jsonl.gz (see ../shared/data/README.md). Rows from the
non-commercial / unlicensed sources (code_alpaca_2k, alpaca_eval, t0_p3 samsum / sciq / xsum) are never
trained on; they are scored as an out-of-distribution evaluation only. GSM8K *test* is scored as well.

Split: deterministic by a hash of a strict group key (HumanEval-X task n and HumanEval task n share a group;
t0 context-QA rows that share a passage share a group): 70% train, 10% validation (picks C), 20% test.
The shipped model is fitted on train + validation, so the test figures describe the shipped artifact.

Augmentation (train and validation only): new phrasings of permissive rows (`augment`) and short,
instruction-led prompts cut from real rows (`short_prompts`); the short prompts made from test rows form a
separate `short_test` score, so the held-out test keeps the data's own distribution.

Request-shaped prompts (train and validation only, `request_prompts`, seeded): open writing / role-play /
advice with personal context, JSON / YAML / CSV / table / schema requests and tool calls described in the text,
how-to code questions, short math, translation and summary requests worded in several languages, short RAG
contexts. Slots come from permissive rows and word lists; the rows never repeat a held-out eval prompt
(tests/data/classifier_heldout.jsonl, `--heldout`): training stops if one does, and that set's per-class
recall is recorded in meta.json (benchmarks/classifier_recall.py prints the table).

Everyday general-assistant prompts (train and validation only, `everyday_prompts`, seeded, word lists written for
this file): how-to / why / explain questions on cooking, home repair, health, travel, science, finance, learning,
hobbies, relationships and business, long writing tasks, lists / rankings / opinions, role-played consultants,
advice after personal context and an end user's app trouble (chat), beside code questions with the same leads and
everyday nouns plus a language / API / programming cue (code).

Instruction + input prompts (train and validation only, `instruction_prompts`, seeded, word lists written for this
file): the shape of public instruction sets, an instruction about "the given / following <thing>" and a short input
(a title, a word, a city, "Key: value" facts, an email, notes, a sentence to edit). Chat edits, rewrites, replies to,
writes from, describes or recommends; summarize shortens, titles or answers from the same inputs (and reads a
document given with a lead of its own, as a system prompt gives it); structured returns the facts as data; code,
math and translate get the same shape. The training rows never repeat a prompt of any committed eval set
(tests/data/classifier_heldout.jsonl, classifier_eval_*.jsonl): training stops if one does.

Model: multinomial logistic regression (scikit-learn, lbfgs, class_weight="balanced") over the features of
adaptspec/control/_features.py; its weights are rounded to float16, written as .npz + JSON (no pickle), and
loaded back into the estimator so that scikit-learn and the numpy inference path use identical weights.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import confusion_matrix, f1_score

from adaptspec.control import _features, _hashed_features
from adaptspec.control.classify import HASHED_FORMAT, Classifier, save_artifact, save_hashed_artifact
from adaptspec.control.types import CONTENT_CLASSES

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "adaptspec" / "control" / "_classifier"
DEFAULT_HELDOUT = REPO / "tests" / "data" / "classifier_heldout.jsonl"

LABEL_MAP = {"summarization": "summarize", "translation": "translate"}
# Licence rule of shared/data/README.md: never train the shipped artifact on these.
EXCLUDED_PREFIXES = ("code_alpaca_2k", "alpaca_eval", "t0/samsum/", "t0/sciq/", "t0/xsum/")
CLASS_INDEX = {c: i for i, c in enumerate(CONTENT_CLASSES)}


def is_excluded(source: str) -> bool:
    return source.startswith(EXCLUDED_PREFIXES)


def strict_group(row: dict) -> str:
    """Group key for splitting: stricter than the file's `group` (shared passages, mirrored tasks)."""
    group, source = row["group"], row["source"]
    if source.startswith(("humaneval", "humaneval_x")):
        return "humaneval-task-" + group.rsplit("/", 1)[-1]
    if source.startswith("t0/"):
        longest = max(row["text"].split("\n"), key=len)
        if len(longest) >= 200:  # a passage: group every question asked about it
            return "passage-" + longest[:300]
    return group


def split_of(group: str) -> str:
    u = zlib.crc32(group.encode("utf-8")) % 100
    return "train" if u < 70 else ("val" if u < 80 else "test")


def load_rows(data: Path) -> list[dict]:
    path = data / "combined" / "classifier_prompts.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        r["label"] = LABEL_MAP.get(r["label"], r["label"])
        if r["label"] not in CLASS_INDEX:
            raise ValueError(f"{path}: unknown label {r['label']!r}")
        r["split"] = "ood" if is_excluded(r["source"]) else split_of(strict_group(r))
    return rows


# ---- augmentation: new phrasings of the permissive rows (never of excluded ones), written by hand below.
_CODE_LEADS = (
    "Write a Python function", "Write a JavaScript function", "Write a Java method", "Write a C++ function",
    "Write a Go function", "Write a Rust function", "Write a TypeScript function", "Implement a function",
    "Create a function", "Write a program", "Write a C# method", "Write code", "Write a script",
    "Create a program", "Build a small program", "Write a Bash script", "Write a method", "Write a class",
    "Generate code", "Write an SQL query", "Write a snippet",
)
_CHAT = (
    "Write a short poem about {a} and {b}.", "Tell me a story about a {a} and a {b}.", "Write a haiku about {a}.",
    "What are some fun facts about {a}?", "Give me five ideas for a weekend involving {a}.",
    "How do I get started with {a}?", "Can you recommend a good book about {a}?", "Write a funny tweet about {a}.",
    "Why do people like {a} so much?", "Write the opening paragraph of a blog post about {a} and {b}.",
    "Explain to a child what a {a} is.", "What's your opinion on {a}?",
    "Brainstorm names for a shop that sells {a}.", "I'm bored. Suggest something to do with a {a}.",
    "Write a limerick about a {a} who loves {b}.", "Pretend you are a {a}. Describe your day.",
)
_CHAT_WRITING = (
    "Write a dialogue between a {a} and a {b}.", "Write a letter to a friend about {a}.",
    "Write an essay on the role of {a} in everyday life.", "Write a speech for a wedding that mentions a {a}.",
    "Write a song about {a} and {b}.", "Write a product description for a {a}.",
    "Write a motivational message about {a}.", "Write a short story that ends with a {b}.",
)
# Programming vocabulary beyond the Python / C++ / Go / Java / JS / Rust of HumanEval(-X) and MBPP.
_TECH = (
    "HTML", "CSS", "React", "SQL", "MySQL", "PostgreSQL", "Node.js", "TypeScript", "PHP", "Ruby", "Swift",
    "Kotlin", "Bash", "PowerShell", "Django", "Flask", "pandas", "NumPy", "Docker", "Kubernetes YAML", "jQuery",
    "Vue", "Angular", "C#", "Scala", "Haskell", "R", "MATLAB", "Perl", "Lua", "Dart", "Spring Boot",
)
_CONCEPTS = (
    "a while loop", "a closure", "a pointer", "an interface", "a promise", "a decorator", "recursion",
    "a hash map", "generics", "async/await", "an inner join", "flexbox", "a linked list", "a binary search tree",
    "exception handling", "a lambda function", "dependency injection", "a REST endpoint", "a unit test",
    "garbage collection", "a race condition", "a regular expression", "an index on a table", "a stack",
    "memoization", "a virtual DOM", "a foreign key", "inheritance", "a mutex", "string interpolation",
)
_CODE_ASKS = (
    "Explain what {c} is in {t}.", "How would you implement {c} in {t}?", "Show me an example of {c} in {t}.",
    "What is the difference between {c} and {c2} in {t}?", "Create a {t} page with a form for name and email.",
    "Write a {t} snippet that uses {c}.", "Using {t}, create a simple component that shows a list of items.",
    "Create a {t} table of users with name, email and year of birth.", "Why does my {t} code with {c} fail?",
    "Design a {t} class for a bank account with deposit and withdraw methods.",
    "Write a {t} query that returns the ten most recent orders.", "Refactor this {t} code to use {c}.",
)
_CHAT_LEADS = ("Quick question: ", "Hey! ", "I was wondering, ", "Can you tell me: ", "")
_SUMMARY_AFTER = (
    "TL;DR:", "Summarize the text above.", "Write a one-sentence summary of the above.",
    "What are the key points of this text?", "In a few words, what is this about?",
    "Give a short abstract of the article above.", "Summarize this in three bullet points.",
    "Can you give me the gist of that?",
)
_SUMMARY_BEFORE = (
    "Summarize the following text:", "Please summarise this article.", "Write a short summary of this:",
    "Give me the main points of the passage below.", "Condense this into two sentences:",
    "Read the text and summarize it for a busy reader.",
)
_DIALOGUE_BEFORE = (
    "Summarize this conversation:", "Sum up the chat below.", "Write a brief summary of the following dialogue.",
    "What did they talk about? Summarize the conversation.",
)
_DIALOGUE_AFTER = (
    "Summarize the conversation above.", "Briefly, what was decided in this chat?",
    "Write a summary of this dialogue.", "Give a one-line recap of the discussion.",
)
_RAG = (
    "Answer the question using only the context below.\n\nContext: {p}\n\nQuestion: {q}",
    "{p}\n\nBased on the passage above, {q}",
    "Use the following documents to answer.\n\n[1] {p}\n\nQ: {q}\nA:",
    "Context:\n\"\"\"\n{p}\n\"\"\"\nQuestion: {q}\nAnswer from the context only.",
)
_EXTRACT = (
    "Extract every person, place and date mentioned in the text below and return them as JSON.\n\n{p}",
    "Return a JSON object with the keys \"name\", \"birth_date\" and \"occupation\" for this bio:\n\n{p}",
    "From the following text, list the entities as a JSON array of {{\"type\", \"text\"}} objects.\n\n{p}",
    "{p}\n\nFill in this schema from the text above: {{\"title\": string, \"people\": [string], \"year\": int}}",
)
_NAMES = ("Anna", "Ben", "Carla", "Dev", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jon", "Kemi", "Liam")


def _passage(text: str) -> str:
    """The longest line of a t0 prompt, without a leading "Article:"-style label."""
    return re.sub(r"^[^\n]{0,60}?:\s+", "", max(text.split("\n"), key=len), count=1)


def _docstring(prompt: str) -> tuple[str, str] | None:
    m = re.search(r"def (\w+)\(.*?\"\"\"(.*?)(?:>>>|\"\"\")", prompt, re.S)
    if not m:
        return None
    doc = " ".join(m.group(2).split())
    return (m.group(1), doc) if len(doc) > 20 else None


def augment(rows: list[dict], data: Path, rng: random.Random) -> list[dict]:
    """Extra training rows: each takes the split of the row it is made from; rows of the test split and of
    the excluded sources are never used, so the held-out test keeps the original distribution."""
    src = [r for r in rows if r["split"] in ("train", "val")]
    out: list[dict] = []

    def add(text: str, label: str, source: str, split: str) -> None:
        out.append({"text": text, "label": label, "source": "augment/" + source, "split": split})

    questions = [r["text"].strip() for r in src if r["source"] in ("truthfulqa",)]
    for r in src:
        text, source, split = r["text"], r["source"], r["split"]
        if source == "mbpp":
            task = text.split("\nYour code should pass these tests:")[0].strip()
            add(task, "code", "mbpp-plain", split)
            lead = re.match(r"Write a (?:python )?function", task)
            if lead:
                variant = rng.choice(_CODE_LEADS) + task[lead.end() :]
                call = re.search(r"assert \w+\((.*?)\)\s*==", text)
                if call and rng.random() < 0.5:
                    variant += "\n\nInput: " + call.group(1)
                add(variant, "code", "mbpp-lead", split)
        elif source == "humaneval" and (doc := _docstring(text)):
            name, body = doc
            add(rng.choice((f"Write a Python function `{name}`: {body}", f"Implement {name}(). {body}",
                            f"Can you help me code this? {body}")), "code", "humaneval-doc", split)
        if source.startswith(("humaneval", "mbpp")) and rng.random() < 0.5:
            lang = source.split("/")[-1] if "/" in source else "python"
            fence = f"```{lang}\n{text.strip()}\n```"
            add(rng.choice((f"Complete this code:\n\n{fence}", f"{fence}\n\nWhat does this do? Fix any bugs.",
                            f"Finish the implementation below.\n{fence}")), "code", "fenced", split)
        if source.startswith("t0/") and r["label"] == "summarize":
            p = _passage(text)
            if len(p) < 300:
                continue
            k = rng.random()
            if k < 0.3:
                add(p + "\n\n" + rng.choice(_SUMMARY_AFTER), "summarize", "summary-after", split)
            elif k < 0.5:
                add(rng.choice(_SUMMARY_BEFORE) + "\n\n" + p, "summarize", "summary-before", split)
            elif k < 0.75 and questions:
                q = rng.choice(questions)
                add(rng.choice(_RAG).format(p=p, q=q), "summarize", "rag", split)
            else:
                add(rng.choice(_EXTRACT).format(p=p), "structured", "extract", split)
        if source == "truthfulqa":
            add(rng.choice(_CHAT_LEADS) + text.strip(), "chat", "question-lead", split)
        if source.startswith("t0/common_gen") and (words := re.search(r"(\w+), (\w+), (\w+)", text)):
            for templates in (_CHAT, _CHAT, _CHAT_WRITING):
                a, b = rng.sample(words.groups(), 2)
                add(rng.choice(templates).format(a=a, b=b), "chat", "open-request", split)
        if source.startswith("t0/wiki_bio") and "Bio:" in text:
            bio = text.split("Bio:", 1)[1].strip()
            add(rng.choice(_EXTRACT).format(p=bio), "structured", "extract-bio", split)

    # Multiple-choice questions from TruthfulQA's answer lists (Apache-2.0): closed-book -> chat, and
    # with a passage to read first -> summarize.
    passages = [_passage(r["text"]) for r in src if r["source"].startswith("t0/") and r["label"] == "summarize"]
    passages = [p for p in passages if len(p) >= 300]
    with open(data / "truthfulqa" / "truthfulqa.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            split = split_of(q["id"])
            if split == "test" or len(q["incorrect_answers"]) < 2:
                continue
            options = [q["best_answer"], *rng.sample(q["incorrect_answers"], min(3, len(q["incorrect_answers"])))]
            rng.shuffle(options)
            style = rng.randrange(3)
            if style == 0:
                listing = "Choices:\n" + "\n".join(f"- {o}" for o in options)
            elif style == 1:
                listing = "\n".join(f"{'ABCD'[i]}) {o}" for i, o in enumerate(options))
            else:
                listing = "Options: " + "; ".join(options)
            mc = f"{q['question']}\n\n{listing}\n\nAnswer:"
            add(mc, "chat", "multiple-choice", split)
            if passages and rng.random() < 0.4:
                add(f"Read the passage and answer.\n\n{rng.choice(passages)}\n\nQ: {mc}", "summarize",
                    "passage-multiple-choice", split)

    # Programming questions over a wider technology vocabulary (templates above, no data source).
    for k in range(900):
        split = split_of(f"code-ask-{k}")
        if split != "test":
            c, c2 = rng.sample(_CONCEPTS, 2)
            add(rng.choice(_CODE_ASKS).format(c=c, c2=c2, t=rng.choice(_TECH)), "code", "code-ask", split)

    # Dialogues built from Tatoeba's English sentences (CC BY 2.0 FR), for "summarize this chat" prompts.
    with open(data / "tatoeba" / "tatoeba_laser_v1_14langs.jsonl", encoding="utf-8") as f:
        english = [json.loads(line)["eng"] for line in f]
    for k in range(400):
        split = split_of(f"dialogue-{k}")
        if split == "test":
            continue
        a, b = rng.sample(_NAMES, 2)
        turns = "\n".join(f"{(a, b)[i % 2]}: {rng.choice(english)}" for i in range(rng.randint(4, 12)))
        if rng.random() < 0.5:
            add(rng.choice(_DIALOGUE_BEFORE) + "\n" + turns, "summarize", "dialogue", split)
        else:
            add(turns + "\n\n" + rng.choice(_DIALOGUE_AFTER), "summarize", "dialogue", split)
    return out


# ---- short, instruction-led prompts: a lead phrase and a short argument cut from a real row. The data rows
# of summarize and structured are long (1st percentile 183 / 80 characters, against 20-40 for chat), so
# without these a short "Summarize: <two sentences>" or "Return JSON with fields ... for: Bob, 31" was read
# by its length and sounded like chat. The arguments are always real text: the first sentences of a t0
# passage, a Tatoeba sentence, a wiki_bio bio and its attribute names / values, a BFCL user message and its
# function's parameter names, a HumanEval(-X) signature line, an MBPP assert, a SVAMP equation.
_SHORT_SUMMARY = (
    "Summarize: {x}", "Summarize this passage: {x}", "Summarize this: {x}", "Summarise the following text: {x}",
    "TL;DR: {x}", "Give me a one-line summary of this: {x}", "Sum this up: {x}", "Briefly summarize: {x}",
    "Summarize in one sentence: {x}", "Write a short summary of: {x}", "Shorten this to one sentence: {x}",
    "What is the gist of this? {x}", "{x}\n\nTL;DR", "{x}\n\nSummarize the above in one line.",
    "Condense into a headline: {x}", "Give this text a title: {x}", "Summary please: {x}",
    "Can you summarize this for me? {x}", "Recap in a few words: {x}", "Paraphrase briefly: {x}",
)
_SHORT_STRUCTURED = (
    "Return JSON with fields {f} for: {x}", "Extract {f} as JSON: {x}", "Output a JSON object with keys {f} for: {x}",
    "Give me {f} in JSON format: {x}", "Convert to JSON ({f}): {x}", "JSON with {f}: {x}",
    "Parse into JSON with keys {f}: {x}", "Fill this schema from the text: {{{s}}}\n{x}",
    "{x}\n\nReturn only JSON with keys {f}.", "Extract the {f} from this and return a JSON object: {x}",
    "As JSON ({f}): {x}", "Make a JSON record with {f} from: {x}", "Pull out {f} as key-value pairs: {x}",
    "Respond with a JSON object containing {f}. Input: {x}",
)
_SHORT_CODE = (
    "{x}", "{x}", "Complete this function:\n{x}", "Finish this: {x}", "Implement {x}", "Fix this: {x}",
    "What does this do? {x}", "Write the body of {x}", "{x}\n    # TODO", "Why does this fail? {x}",
)
_SHORT_MATH = (
    "What is {e}?", "Compute {e}.", "Calculate {e}", "{e} =", "{e} = ?", "Evaluate {e}.", "What's {e}?",
    "Quick math: {e}", "How much is {e}?", "Work out {e}.", "Solve for x: {q}", "Find x if {q}.",
    "x = {e}. What is x?",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _short_passage(text: str, rng: random.Random, limit: int = 240) -> str:
    """The first one to three sentences of `text`, at most about `limit` characters (cut at a word)."""
    sentences = _SENTENCE_END.split(" ".join(text.split()))
    out = sentences[0]
    for s in sentences[1 : rng.randint(1, 3)]:
        if len(out) + len(s) + 1 > limit:
            break
        out += " " + s
    if len(out) > limit:
        out = out[:limit].rsplit(" ", 1)[0]
    return out


def _field_list(names: list[str], rng: random.Random) -> tuple[str, str]:
    """("a, b and c" or '"a", "b"', and a schema body '"a": ..., "b": ...') for the given field names."""
    quoted = rng.random() < 0.3
    shown = [f'"{n}"' for n in names] if quoted else names
    listing = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + rng.choice((" and ", ", ")) + shown[-1]
    schema = ", ".join(f'"{n}": {rng.choice(("string", "...", "null", "int"))}' for n in names)
    return listing, schema


def _number(v: str) -> str:
    return v[:-2] if v.endswith(".0") else v


def short_prompts(rows: list[dict], data: Path, rng: random.Random) -> list[dict]:
    """Short instruction-led prompts from the permissive rows of every split. Those made from a test row go
    to the `short_test` split (scored separately, never trained on); the others to their row's split."""
    split_by_group = {r["group"]: r["split"] for r in rows}
    out: list[dict] = []

    def add(text: str, label: str, source: str, split: str) -> None:
        split = "short_test" if split == "test" else split
        if split in ("train", "val", "short_test"):
            out.append({"text": text, "label": label, "source": "short/" + source, "split": split})

    for r in rows:
        text, source, split = r["text"], r["source"], r["split"]
        if split == "ood":
            continue
        if source.startswith("t0/") and r["label"] == "summarize" and len(p := _passage(text)) >= 200:
            add(rng.choice(_SHORT_SUMMARY).format(x=_short_passage(p, rng)), "summarize", "summary", split)
        elif source.startswith("bfcl/") and "\n\nAvailable functions (JSON schema):\n" in text:
            question, schema = text.split("\n\nAvailable functions (JSON schema):\n", 1)
            try:
                functions = json.loads(schema)
            except json.JSONDecodeError:
                continue
            function = functions[0] if isinstance(functions, list) and functions else functions
            names = list(((function or {}).get("parameters") or {}).get("properties") or {})[:4]
            if names and len(question) <= 300:
                listing, body = _field_list(names, rng)
                add(rng.choice(_SHORT_STRUCTURED).format(f=listing, s=body, x=question.strip()), "structured",
                    "bfcl-fields", split)
        elif source.startswith(("humaneval", "mbpp")):
            lines = [ln.strip() for ln in text.split("\n")]
            if source == "mbpp":
                candidates = [ln.removeprefix("assert ") for ln in lines if ln.startswith("assert ")]
            else:
                candidates = [ln for ln in lines if "(" in ln and re.search(r"[{:]$", ln)
                              and not ln.startswith(("//", "#", "*", "/*", ">>>"))]
            if candidates:
                add(rng.choice(_SHORT_CODE).format(x=candidates[0]), "code", "code-line", split)
            # The task in the imperative with a short input, no "write a function": "Find the ... \n\n[1, 2], 3".
            task = text.split("\nYour code should pass these tests:")[0].strip()
            lead = re.match(r"Write a (?:python )?function (?:to |that )?", task, re.I)
            call = re.search(r"(?:assert |>>> )\w+\((.+?)\)(?:\s*==|\s*$)", text, re.M)
            if source == "humaneval" and (doc := _docstring(text)):
                task, lead = _SENTENCE_END.split(doc[1])[0], None
            elif source != "mbpp" or not lead:
                continue
            if call and len(call.group(1)) <= 120:
                task = task[lead.end() :] if lead else task
                add(task[:1].upper() + task[1:] + rng.choice(("\n\n", "\n\nInput: ", "\n")) + call.group(1), "code",
                    "task-input", split)

    # wiki_bio (CC BY-SA 3.0): its attribute names, with the bio's first sentence or the attribute values.
    with open(data / "t0_p3" / "wiki_bio.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            split = split_by_group.get("t0-" + row["id"], "ood")
            pairs = re.findall(r"^- ([a-z][a-z _]*?)(?: is|:) (.+?)\s*$", row["completion"] + "\n" + row["prompt"], re.M)
            pairs = [(k.strip(), v.strip()) for k, v in pairs if v.strip() and len(v) < 60]
            if len(pairs) < 2:
                continue
            chosen = rng.sample(pairs, min(len(pairs), rng.randint(2, 3)))
            listing, body = _field_list([k for k, _ in chosen], rng)
            if "Bio:" in row["prompt"] and rng.random() < 0.5:
                x = _short_passage(row["prompt"].split("Bio:", 1)[1], rng, limit=200)
            else:
                x = ", ".join(v for _, v in chosen)
            add(rng.choice(_SHORT_STRUCTURED).format(f=listing, s=body, x=x), "structured", "wiki_bio-fields", split)

    # SVAMP (MIT) equations as bare arithmetic, and as "solve for x" with the answer moved to the right.
    with open(data / "svamp" / "svamp.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            split = split_by_group.get("svamp-" + row["ID"], "ood")
            if rng.random() >= 0.4:  # short arithmetic was mostly read right already; more makes digits "math"
                continue
            expr = re.sub(r"\d+\.\d+", lambda m: _number(m.group()), row["Equation"]).strip()
            if expr.startswith("( ") and expr.endswith(" )") and expr.count("(") == 1:
                expr = expr[2:-2]
            expr = expr.replace("( ", "(").replace(" )", ")")
            simple = re.fullmatch(r"(\d+) ([-+*/]) (\d+)", expr)
            inverse = {"+": "-", "-": "+", "*": "/", "/": "*"}
            q = f"x {inverse[simple.group(2)]} {simple.group(3)} = {simple.group(1)}" if simple else expr + " = x"
            add(rng.choice(_SHORT_MATH).format(e=expr, q=q), "math", "svamp-equation", split)

    # Short chat turns stay chat: TruthfulQA questions cut to their first clause are short, too.
    for r in rows:
        if r["source"] == "truthfulqa" and r["split"] != "ood" and rng.random() < 0.3:
            add(rng.choice(("", "Hi! ", "Quick one: ", "Hey, ")) + r["text"].strip(), "chat", "question", r["split"])

    # Short summarize arguments from Tatoeba English sentences (CC BY 2.0 FR): two or three in a row.
    with open(data / "tatoeba" / "tatoeba_laser_v1_14langs.jsonl", encoding="utf-8") as f:
        english = [json.loads(line)["eng"] for line in f]
    for k in range(300):
        x = " ".join(english[(7 * k + i) % len(english)] for i in range(rng.randint(2, 3)))
        add(rng.choice(_SHORT_SUMMARY).format(x=x), "summarize", "tatoeba-summary", split_of(f"short-summary-{k}"))
    return out


# ---- request-shaped prompts: what users send to a chat endpoint (issue 31, part 4). Written from the class
# definitions, never from the held-out eval prompts (tests/data/classifier_heldout.jsonl, which the training
# rows are checked against). The data rows above are dataset-shaped (T0 templates, benchmark stubs); without
# these, long open requests with personal context read as summarize, "How do I ... in CSS?" as chat, CSV /
# YAML / text-described tool calls as code, and short non-word-problem math or non-English leads as chat.
# Slots are filled from permissive rows (TruthfulQA, awesome-chatgpt-prompts (train / val rows only),
# common_gen concepts, Tatoeba pairs 300+ (never in combined/), BFCL functions, t0 passages) and the lists below.
_TOPICS = (
    "the ocean", "autumn", "a lost dog", "friendship", "a haunted house", "coffee", "the moon", "city life",
    "a first day at school", "growing old", "a small bakery", "winter mornings", "space travel", "a thunderstorm",
    "my grandmother's kitchen", "a train journey", "social media", "climate change", "a football match",
    "artificial intelligence", "a village festival", "the desert", "a broken phone", "learning to swim",
    "a secret garden", "volcanoes", "a time machine", "a rainy Sunday", "mountains", "jazz", "a talking cat",
    "an old lighthouse", "moving to a new country", "the first snow", "a stolen painting", "video games",
)
_AUDIENCES = ("a five-year-old", "my boss", "teenagers", "a friend", "my team", "beginners", "my parents",
              "a job interview panel", "my students", "customers", "a wedding audience", "my followers")
_CREATIVE = (
    "Write a poem about {t}.", "Write a short story about {t}.", "Write a story for {a} about {t}.",
    "Compose a song about {t}.", "Write a limerick about {t}.", "Write a haiku about {t}.",
    "Write a blog post about {t}.", "Write an essay about {t}.", "Write a speech for {a} about {t}.",
    "Write a funny story about {t}, in {n} sentences.", "Write a scene set in {t2} where two strangers meet.",
    "Write a {n}-paragraph story that starts with a summary of {t}.", "Write a story in which someone writes a summary of {t}.",
    "Write a letter to {a} about {t}.", "Write a rap verse about {t}.", "Write a fairy tale about {t}.",
    "Write a monologue of a villain who hates {t}.", "Write a dialogue between {p} and {p2} about {t}.",
    "Write a slogan for a campaign about {t}.", "Describe {t} in vivid detail.", "Write a riddle about {t}.",
    "Invent a myth that explains {t}.", "Write the opening chapter of a novel about {t}.",
    "Write a movie plot about {t}.", "Write a short summary of an imaginary movie about {t}.",
    "Write an article about {t} for {a}.", "Give me a story idea involving {t}.", "Write a toast about {t}.",
    "Write a product description for a gadget inspired by {t}.", "Write a eulogy for {p} who loved {t}.",
)
_ADVICE = (
    "How can I get better at {s}?", "What's the best way to start {s}?", "Any tips for {s}?",
    "I want to get into {s}. Where do I begin?", "Give me advice on {s}.", "What are the pros and cons of {s}?",
    "Brainstorm {n} ideas for {s}.", "Suggest some ways to make {s} more fun.", "Why do people enjoy {s}?",
    "Is {s} worth it?", "Recommend some books about {s}.", "Make a weekly plan for {s}.",
    "What mistakes do beginners make in {s}?", "Help me plan {s}.", "What do you think about {s}?",
    "Rank the best cities for {s}.", "List {n} fun facts about {t}.", "Tell me about the history of {t}.",
    "Explain {t} to {a}.", "Give me {n} names for a podcast about {t}.", "What should I know before {s}?",
)
_ACTIVITIES = (
    "giving talks", "running a marathon", "learning the piano", "cooking Thai food", "gardening",
    "saving money", "photography", "learning Spanish", "a career change", "remote work", "a road trip",
    "hiking in the Alps", "writing a novel", "managing stress", "getting up early", "chess", "yoga",
    "a birthday party for my son", "a team offsite", "buying a first house", "raising chickens", "dating",
    "negotiating a raise", "studying for exams", "starting a small business", "decorating a small flat",
)
_CONTEXT = (
    "I'm a {r} and I {h}.", "I have been a {r} for {n} years.", "My {k} {h}.", "I live in {c} and I {h}.",
    "Last week my {k} told me that I should think about {s}.", "I'm {n}0 years old and recently started {s}.",
    "We are a small team of {n} people working on {t}.", "I just moved to {c} with my {k}.",
    "Yesterday I read an article about {t} and it made me think.", "Our company is planning {s} next year.",
    "I tried {s} last month but gave up after {n} weeks.", "My {k} and I disagree about {t}.",
    "I only have about {n} hours a week of free time.", "Money is a bit tight for us at the moment.",
    "I've always been curious about {t}, but I never had the time.", "Next month is my {k}'s birthday.",
    "English is not my first language, so please keep it simple.", "I'm preparing a talk for {a}.",
)
_ROLES = ("teacher", "nurse", "software engineer", "student", "retired pilot", "chef", "freelance designer",
          "small business owner", "new parent", "sales manager", "PhD student", "musician", "farmer")
_HABITS = ("work long hours", "feel tired all the time", "love to travel", "spend too much money on food",
           "want to be more creative", "struggle to focus", "have two kids", "am a bit shy", "enjoy board games")
_KIN = ("sister", "manager", "neighbour", "best friend", "wife", "husband", "son", "daughter", "colleague")
_CITIES = ("Lisbon", "Toronto", "Nairobi", "Osaka", "Berlin", "a small town", "Melbourne", "Chicago", "Lyon")
_PERSONAS = (
    "a travel guide", "a pirate captain", "a personal trainer", "a detective", "a stand-up comedian", "a chef",
    "a therapist", "a medieval king", "a Socratic tutor", "a startup mentor", "a sports commentator", "a poet",
    "a museum guide", "a motivational coach", "a fortune teller", "a grumpy wizard", "an alien visiting Earth",
    "a debate opponent", "a job interviewer", "a historian", "a storyteller", "a film critic",
)
_ROLEPLAY = (
    "I want you to act as {p}. {rule} My first request is \"{q}\"",
    "Act as {p}. {rule}", "Pretend you are {p} and {q2}", "You are {p}. {rule} Let's begin.",
    "Let's play a game: you are {p} and I am {p2}. {rule}", "Imagine you are {p}. {q2}",
    "From now on, respond as {p} would. {rule}", "Role-play as {p}. Stay in character. {q2}",
)
_RULES = (
    "Only answer in character.", "Keep your answers short and funny.", "Ask me one question at a time.",
    "Do not write explanations.", "Use simple words.", "Give me a summary of your day first.",
    "Tell me a story from your past.", "You will give me feedback on my answers.",
)
_FOREIGN_CHAT = (
    "Escribe un poema sobre {x}.", "Écris une histoire sur {x}.", "Schreib ein Gedicht über {x}.",
    "Dame consejos para {x}.", "Raconte-moi une blague sur {x}.", "Was denkst du über {x}?",
    "Scrivi una storia su {x}.", "Escreva um poema sobre {x}.", "Donne-moi des idées pour {x}.",
    "Wie kann ich besser {x} lernen?", "¿Qué opinas de {x}?", "Schreibe eine Kurzgeschichte über {x}.",
)
_FOREIGN_TOPICS = ("el mar", "la lune", "den Winter", "un dragon", "la amistad", "die Stadt", "il mare", "o amor",
                   "un voyage", "Schach", "la cocina", "les vacances", "das Meer", "un gatto")
_NOT_GIVEN_SUMMARY = (
    "Summarize the plot of {b}.", "What is {b} about?",
    "Write an executive summary for a business plan about {t}.", "Write a summary of the history of {t}.",
    "Can you summarise the main ideas of {b}?", "Write a book report on {b}.",
)
_BOOKS = ("Hamlet", "Pride and Prejudice", "The Great Gatsby", "Moby Dick", "the Odyssey", "1984",
          "the first Harry Potter book", "The Lord of the Rings", "Don Quixote", "Frankenstein", "War and Peace")
# structured: output in a format / against a schema, extraction, tool calls described in the text.
_FORMATS = ("JSON", "a JSON object", "a JSON array", "YAML", "CSV", "XML", "a markdown table", "key-value pairs",
            "a table", "TOML", "JSON Lines", "a Python dict literal")
_STRUCT_ASK = (
    "Return {f} with the fields {k} for: {x}", "Extract {k} from the text below and output {f}.\n\n{x}",
    "Give me {f} with columns {k}: {x}", "Convert this into {f} ({k}): {x}", "Output {f} only, keys: {k}. Input: {x}",
    "{x}\n\nFormat the above as {f} with {k}.", "Put the following into {f} with {k}:\n{x}",
    "Create {f} listing {n} {e} with {k}.", "Generate {f} of {n} sample {e}, each with {k}.",
    "Make {f} of {e} with the columns {k}.", "Fill in this template from the text: {s}\nText: {x}",
    "Respond only with {f} matching this schema: {s}\n{x}", "Parse this into {f} with {k}: {x}",
    "Classify the following text and return {s}: {x}", "Tag the entities in this sentence and return {f}: {x}",
    "Turn this into structured data ({f}) with {k}: {x}",
)
_ENTITIES = ("users", "products", "countries", "books", "movies", "employees", "cities", "recipes", "planets",
             "orders", "students", "cars", "events", "songs", "restaurants")
_TOOL_ASK = (
    "You can call the function {sig}. {q} Reply with the function call only.",
    "Available tool: {sig}. {q}", "Tools:\n- {sig}\n\nUser: {q}\nRespond with a JSON tool call.",
    "{q}\nUse the function {sig} and give me the call as JSON.", "Function: {sig}\nTask: {q}\nOutput the arguments as JSON.",
    "Call {sig} to answer this: {q}", "Emit a tool call to {name} for: {q}", "Which arguments would you pass to {sig} for this request? {q}",
)
_FOREIGN_STRUCT = (
    "Devuelve un objeto JSON con {k}: {x}", "Extrae {k} en formato JSON: {x}", "Gib {k} als JSON zurück: {x}",
    "Réponds en JSON avec {k} : {x}", "Restituisci un JSON con {k}: {x}", "Retorne um JSON com {k}: {x}",
)
# code: how-to questions and tasks over a wide tooling vocabulary.
_CODE_HOWTO = (
    "How do I {d} in {t}?", "How can I {d} with {t}?", "What's the best way to {d} in {t}?", "{t}: how to {d}?",
    "Show me how to {d} using {t}.", "Write {t} code to {d}.", "In {t}, {d}. How?", "Why can't I {d} in {t}?",
    "What does {kw} do in {t}?", "Explain {kw} in {t} with an example.", "Write a {t} script to {d}.",
    "Write a {cfg} for a {t} project.", "What is the time complexity of {algo}, and why?", "Code {algo} in {t} with comments.",
    "What is the difference between {algo} and {algo2}?", "Set up a {cfg} that runs the tests of my {t} app.",
    "Give me a {t} snippet that can {d}.", "I get an error when I try to {d} in {t}. What am I doing wrong?",
)
_CODE_TASKS = (
    "reverse a string", "read a JSON file", "sort a list of objects by a field", "remove duplicates from an array",
    "merge two dictionaries", "make an HTTP request", "parse command-line arguments", "connect to a database",
    "center a div", "handle errors", "write a unit test", "read a file line by line", "run tasks in parallel",
    "format a date", "split a string by commas", "check if a key exists", "create a virtual environment",
    "deploy a container", "undo a commit", "rename a branch", "set an environment variable", "paginate results",
    "validate an email address", "upload a file", "debounce a function", "cache results", "log to a file",
)
_TOOLING = ("Python", "JavaScript", "TypeScript", "Java", "C#", "C++", "Go", "Rust", "Ruby", "PHP", "Kotlin",
            "Swift", "Bash", "PowerShell", "SQL", "React", "Vue", "Django", "Flask", "pandas", "git", "Docker",
            "Kubernetes", "CSS", "HTML", "Node.js", "Spring", "Terraform", "GitHub Actions", "Unity", "Lua", "R")
_CONFIGS = ("Dockerfile", "GitHub Actions workflow", "Makefile", "docker-compose file", "nginx config", ".gitignore",
            "CI pipeline", "Helm chart", "systemd unit file", "pre-commit config")
_ALGOS = ("quicksort", "merge sort", "binary search", "Dijkstra's algorithm", "a hash table lookup", "BFS", "DFS",
          "heap sort", "dynamic programming for the knapsack problem", "a trie", "an LRU cache", "bubble sort")
_KEYWORDS = ("yield", "async", "static", "volatile", "lambda", "a decorator", "a generator", "a closure", "self",
             "this", "const", "let", "a goroutine", "a trait", "an interface", "a pointer", "useEffect", "a Dockerfile",
             "a migration", "a cron job", "a webhook", "a mutex", "a callback", "a regex")
_FOREIGN_CODE = (
    "Schreibe eine {t}-Funktion, die {g}.", "Escribe una función en {t} que {g}.", "Écris une fonction {t} qui {g}.",
    "Scrivi una funzione {t} che {g}.", "Escreva uma função em {t} que {g}.", "Wie kann ich in {t} {g}?",
)
_FOREIGN_CODE_GOALS = ("sortiert eine Liste", "ordena una lista", "inverse une chaîne", "legge un file",
                       "conta as palavras", "lee un archivo CSV", "trie un tableau", "eine Datei liest")
# math: short quantitative questions that are not word problems.
_MATH_ASK = (
    "What is {a}% of {b}?", "Solve for x: {a}x + {c} = {b}.", "Find the derivative of x^{a} + {c}x.",
    "Calculate the area of a circle with radius {a} cm.", "Is {p} a prime number?", "What is the square root of {sq}?",
    "Integrate {a}x^2 from 0 to {c}.", "Simplify ({a}x^2 * {c}x) / x.", "Convert {b} km to miles.",
    "What is the probability of getting {c} heads in {a} coin flips?", "Solve x^2 - {s}x + {pr} = 0 for x.",
    "What is the LCM of {a} and {c}?", "What is the GCD of {b} and {a}?", "Compute {a}! / {c}!.",
    "How many ways can {a} people sit in a row?", "What is the sum of the integers from 1 to {b}?",
    "Evaluate the limit of ({a}x^2 + {c}) / x^2 as x goes to infinity.", "What is {a}/{c} + {c}/{a}?",
    "Find the next term: {a}, {a2}, {a3}, ...", "Compute the determinant of [[{a}, {c}], [{c}, {a}]].",
    "What is the volume of a sphere of radius {a}?", "Convert {b} degrees Fahrenheit to Celsius.",
    "What is the mean of {a}, {b}, {c} and {s}?", "Prove that the square of an odd number is odd.",
    "What is log base {c} of {pw}?", "How many minutes are there in {a} days?", "Factor x^2 + {s}x + {pr}.",
    "A price rises {a}% and then falls {a}%. What is the net change?", "What is the perimeter of a {a} by {c} rectangle?",
)
_FOREIGN_MATH = ("Wie viel ist {a} mal {b}?", "Calcula el {a}% de {b}.", "Combien font {b} divisé par {c} ?",
                 "Risolvi: {a}x + {c} = {b}.", "Quanto é {a} vezes {c}?", "Berechne die Fläche eines Kreises mit Radius {a}.",
                 "Calcule la dérivée de x^{a}.", "¿Cuál es la raíz cuadrada de {sq}?")
# translate: non-English instruction wording and "what does ... mean" forms, Tatoeba pairs 300+.
_LANG_NAMES = {"deu": "German", "fra": "French", "spa": "Spanish", "ita": "Italian", "por": "Portuguese",
               "nld": "Dutch", "pol": "Polish", "rus": "Russian", "tur": "Turkish", "jpn": "Japanese",
               "cmn": "Chinese", "ara": "Arabic", "kor": "Korean", "hin": "Hindi"}
_TO_EN = (
    "Traduis en anglais : {x}", "Übersetze ins Englische: {x}", "Traduce al inglés: {x}", "Traduci in inglese: {x}",
    "Traduza para o inglês: {x}", "Vertaal naar het Engels: {x}", "Przetłumacz na angielski: {x}",
    "Переведи на английский: {x}", "What does \"{x}\" mean in English?", "What does this {l} sentence mean? {x}",
    "{l} to English, please: {x}", "Can you tell me what \"{x}\" means?", "Help me understand this {l}: {x}",
    "Into English: {x}", "English please: {x}", "Translate: {x}",
)
_FROM_EN = (
    "How would I say \"{x}\" in {l}?", "What's \"{x}\" in {l}?", "Put this into {l}: {x}", "Render this in {l}: {x}",
    "Convert this sentence into {l}: {x}", "Say this in {l}: {x}", "I need this in {l}: {x}",
    "Write \"{x}\" in {l}.", "Give me the {l} version of: {x}", "In {l}, how do you say \"{x}\"?",
    "Can you put \"{x}\" into {l} for me?", "{l} for \"{x}\"?", "Help me write this in {l}: {x}",
    "Traduis en {lf} : {x}", "Übersetze ins {ld}e: {x}", "Traduce al {ls}: {x}",
)
_WORD_ASK = ("What is the {l} word for \"{w}\"?", "How do you say \"{w}\" in {l}?", "\"{w}\" in {l}?",
             "What's the {l} for {w}?", "{l} word for {w}")
_WORDS = ("bicycle", "library", "thank you", "good night", "cheese", "airport", "friend", "butterfly", "window",
          "happy birthday", "excuse me", "good luck", "apple", "umbrella", "see you tomorrow", "river", "teacher")
_LANG_FORMS = {"French": ("français", "Deutsch", "francés"), "German": ("allemand", "Deutsch", "alemán"),
               "Spanish": ("espagnol", "Spanisch", "español"), "Italian": ("italien", "Italienisch", "italiano")}
# summarize: short contexts + a question (RAG), documents with a lead in several languages, lists and notes.
_RAG_SHORT = (
    "Context: {p}\n\nQuestion: {q}", "Document: {p}\n\nBased on the document, {q}", "{p}\n\nAccording to the text, {q}",
    "Use only the documents below to answer.\n\n[1] {p}\n[2] {p2}\n\nQuestion: {q}", "Text: {p}\nQuestion: {q}",
    "Question: {q}\nText: {p}", "Read this: {p}\n\n{q}", "Answer from the passage only.\nPassage: {p}\nQ: {q}",
    "Here is some context: {p}\n\nUser question: {q}", "From the passage, {q}\n\n{p}",
)
_SUMMARY_LEADS = (
    "Résume ce texte : {x}", "Fasse den folgenden Text zusammen: {x}", "Resume este texto: {x}",
    "Riassumi il seguente testo: {x}", "Resuma o texto: {x}", "Vat samen: {x}", "Podsumuj ten tekst: {x}",
    "Кратко перескажи: {x}", "Summarize these notes:\n{b}", "Summarize the changes below for users:\n{b}",
    "What are the main points here?\n{b}", "Give me the key takeaways:\n{b}", "Recap this list:\n{b}",
    "Here are my notes. Summarize them.\n{b}", "Make a short recap of the following:\n{b}",
    "Boil this down: {e}", "Make this shorter: {e}", "Cut this down to one line: {e}", "Condense: {e}",
    "What happened, in brief? {e}", "{e}\n\nShorter, please.", "Give me a brief version of this: {e}",
    "Give me the gist: {e}",
)


def request_prompts(rows: list[dict], data: Path, rng: random.Random) -> list[dict]:
    """Request-shaped prompts of every class (see the comment above). Each row's split comes from a hash of
    its own key (split_of); those that land in "test" are dropped, so the group-split test keeps the data's
    own distribution."""
    out: list[dict] = []
    src = [r for r in rows if r["split"] in ("train", "val")]

    def add(k: int, kind: str, text: str, label: str) -> None:
        split = split_of(f"request-{kind}-{k}")
        if split != "test":
            out.append({"text": text, "label": label, "source": "request/" + kind, "split": split})

    def pick(seq, m: int = 1):
        return rng.sample(seq, m) if m > 1 else rng.choice(seq)

    questions = [r["text"].strip() for r in src if r["source"] == "truthfulqa"]
    acts = [r["text"].strip() for r in src if r["source"] == "awesome_chatgpt_prompts"]
    concepts = []
    for r in src:
        if r["source"].startswith("t0/common_gen") and (m := re.search(r"(\w+), (\w+), (\w+)", r["text"])):
            concepts.append(" and ".join(m.groups()[:2]))
    passages = [_passage(r["text"]) for r in src if r["source"].startswith("t0/") and r["label"] == "summarize"]
    passages = [_short_passage(p, rng, limit=rng.choice((160, 260, 400))) for p in passages if len(p) >= 200]
    with open(data / "tatoeba" / "tatoeba_laser_v1_14langs.jsonl", encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    pairs = [p for p in pairs if int(p["id"].rsplit("-", 1)[1]) >= 300]  # combined/ holds pairs 0..299 only
    english = [p["eng"] for p in pairs]

    def topic() -> str:
        return pick(concepts) if concepts and rng.random() < 0.3 else pick(_TOPICS)

    def context() -> str:
        parts = [pick(_CONTEXT).format(r=pick(_ROLES), h=pick(_HABITS), n=rng.randint(2, 9), k=pick(_KIN),
                                       c=pick(_CITIES), s=pick(_ACTIVITIES), t=topic(), a=pick(_AUDIENCES))
                 for _ in range(rng.randint(1, 5))]
        return " ".join(parts) + " "

    for k in range(2400):  # chat
        u = rng.random()
        fill = {"t": topic(), "t2": topic(), "a": pick(_AUDIENCES), "n": rng.randint(2, 10), "s": pick(_ACTIVITIES),
                "p": pick(_PERSONAS), "p2": pick(_PERSONAS), "b": pick(_BOOKS)}
        if u < 0.3:
            text = pick(_CREATIVE).format(**fill)
        elif u < 0.5:
            text = pick(_ADVICE).format(**fill)
        elif u < 0.65:
            q = pick(questions) if questions else "What should I do?"
            text = pick(_ROLEPLAY).format(rule=pick(_RULES), q=q, q2=pick(_ADVICE).format(**fill).lower(), **fill)
        elif u < 0.72 and acts:
            text = pick(acts)
            text = _short_passage(text, rng, limit=rng.choice((150, 300, 600)))
        elif u < 0.8:
            text = pick(_FOREIGN_CHAT).format(x=pick(_FOREIGN_TOPICS))
        elif u < 0.86:
            text = pick(_NOT_GIVEN_SUMMARY).format(**fill)
        elif u < 0.93 and questions:  # closed-book Q/A forms: a "Q:" is not a passage
            q = pick(questions)
            text = pick(("Q: {q}\n\nA:", "Question: {q}\nAnswer:", "Q: {q}\nA:", "{q}\n\nAnswer:")).format(q=q)
            add(k, "chat", text, "chat")
            continue
        else:
            text = pick(_CREATIVE + _ADVICE).format(**fill)
        if rng.random() < 0.4:
            text = context() + text
        if rng.random() < 0.15:
            text += pick((" Keep it under 200 words.", " Make it funny.", " Use a friendly tone.",
                          " Please be detailed.", " Give me a few options.", " Use bullet points."))
        add(k, "chat", text, "chat")

    bfcl = [r for r in src if r["source"].startswith("bfcl/") and "\n\nAvailable functions (JSON schema):\n" in r["text"]]
    for k in range(1600):  # structured
        u = rng.random()
        if u < 0.3 and bfcl:
            question, schema = pick(bfcl)["text"].split("\n\nAvailable functions (JSON schema):\n", 1)
            try:
                functions = json.loads(schema)
            except json.JSONDecodeError:
                continue
            fn = functions[0] if isinstance(functions, list) and functions else functions
            props = list(((fn or {}).get("parameters") or {}).get("properties") or {})[:4]
            sig = f"{fn.get('name', 'f')}({', '.join(props)})"
            text = pick(_TOOL_ASK).format(sig=sig, name=fn.get("name", "f"), q=question.strip()[:300])
        else:
            names = rng.sample(("name", "age", "email", "city", "price", "title", "year", "date", "category",
                                "author", "country", "quantity", "status", "phone", "rating", "id", "amount",
                                "company", "role", "sentiment", "start_time", "address", "tags", "score"), rng.randint(2, 4))
            listing, body = _field_list(names, rng)
            x = pick(passages) if passages and rng.random() < 0.5 else " ".join(rng.sample(english, rng.randint(1, 2)))
            fill = {"f": pick(_FORMATS), "k": listing, "s": "{" + body + "}", "x": x, "n": rng.randint(2, 10),
                    "e": pick(_ENTITIES)}
            text = (pick(_FOREIGN_STRUCT) if u < 0.38 else pick(_STRUCT_ASK)).format(**fill)
        add(k, "structured", text, "structured")

    for k in range(1200):  # code
        if rng.random() < 0.88:
            a1, a2 = rng.sample(_ALGOS, 2)
            text = pick(_CODE_HOWTO).format(d=pick(_CODE_TASKS), t=pick(_TOOLING), kw=pick(_KEYWORDS),
                                            cfg=pick(_CONFIGS), algo=a1, algo2=a2)
        else:
            text = pick(_FOREIGN_CODE).format(t=pick(("Python", "JavaScript", "Java", "Go", "C")), g=pick(_FOREIGN_CODE_GOALS))
        add(k, "code", text, "code")

    for k in range(1000):  # math
        a, c = rng.randint(2, 12), rng.randint(2, 9)
        s, t = rng.randint(1, 9), rng.randint(1, 9)
        fill = {"a": a, "b": rng.choice((rng.randint(10, 99), rng.randint(100, 999))), "c": c, "p": rng.randint(50, 999),
                "sq": rng.randint(4, 60) ** 2, "s": s + t, "pr": s * t, "pw": c ** rng.randint(2, 6), "a2": 2 * a, "a3": 3 * a}
        text = (pick(_FOREIGN_MATH) if rng.random() < 0.12 else pick(_MATH_ASK)).format(**fill)
        add(k, "math", text, "math")

    for k in range(1000):  # translate
        p = pick(pairs)
        lang = _LANG_NAMES[p["lang"]]
        u = rng.random()
        if u < 0.45:
            text = pick(_TO_EN).format(x=p["text"], l=lang)
        elif u < 0.85:
            target = pick(tuple(_LANG_FORMS)) if rng.random() < 0.2 else lang
            lf, ld, ls = _LANG_FORMS.get(target, ("anglais", "Englisch", "inglés"))
            text = pick(_FROM_EN).format(x=p["eng"], l=target, lf=lf, ld=ld, ls=ls)
        else:
            text = pick(_WORD_ASK).format(w=pick(_WORDS), l=lang)
        add(k, "translate", text, "translate")

    for k in range(900):  # summarize
        if rng.random() < 0.55 and passages and questions:
            q = pick(questions)
            q = q[:1].lower() + q[1:] if rng.random() < 0.5 else q
            text = pick(_RAG_SHORT).format(p=pick(passages), p2=pick(passages), q=q)
        else:
            x = pick(passages) if passages else pick(english)
            bullets = "\n".join(f"- {e}" for e in rng.sample(english, rng.randint(3, 6)))
            story = " ".join(rng.sample(english, rng.randint(2, 3)))  # Tatoeba: first-person sentences too
            text = pick(_SUMMARY_LEADS).format(x=x, b=bullets, e=story)
        add(k, "summarize", text, "summarize")
    return out


# ---- everyday general-assistant prompts (issue 31, part 4): how-to / why / explain questions about cooking, home
# repair, health, travel, science, finance, learning, hobbies, relationships and business; long writing tasks
# (essays with a word count, lesson plans, routines, raps); lists, rankings and opinions; role-played consultants;
# advice after several sentences of personal context; an end user's trouble with an app or a device. All chat.
# Without them, "how do I / how to / explain" read as code (the code rows hold most of the how-to questions),
# long personal context as summarize and a number in a question as math. Beside them, code questions that carry
# the same everyday nouns and the same "how do I" lead, so the decision rests on the code cues (a language, an
# API, a programming verb or noun), not on the wording of the question. Word lists written for this file only;
# no slot comes from the held-out eval prompts or from any non-commercial source.
_HOW_TASKS = (
    # cooking
    "chop an onion quickly", "make buttercream icing", "bake bread without a stand mixer", "poach an egg",
    "make fluffy pancakes", "cook rice so it isn't sticky", "sharpen a kitchen knife", "season a wok",
    "make a roux for gravy", "keep guacamole from turning brown", "roast a whole chicken", "make cold brew coffee",
    "brine a turkey", "temper chocolate", "make fresh pasta by hand", "fillet a fish", "caramelize onions",
    "make sushi rice", "thicken a soup", "store fresh herbs", "make yogurt at home", "grill vegetables",
    "substitute eggs in a cake", "make a pie crust flaky", "cook a steak medium rare", "make hummus smooth",
    # home and garden
    "unclog a kitchen drain", "fix a leaking tap", "hang a heavy mirror", "paint a ceiling without streaks",
    "replace a light switch", "bleed a radiator", "get rid of mould in the shower", "fix a running toilet",
    "lay laminate flooring", "seal the gaps around a window", "put up wallpaper", "remove a red wine stain",
    "get rid of ants in the kitchen", "grow tomatoes on a balcony", "prune a rose bush", "start a compost heap",
    "repot a cactus", "keep my lawn green in summer", "clean a dryer vent", "descale a kettle",
    "assemble flat-pack furniture", "mount a TV on a wall", "insulate an attic", "fix a sagging gate",
    "clean grout", "stop a door from slamming", "reset a tripped breaker",
    # health and fitness
    "fall asleep faster", "lower my cholesterol", "start running at 50", "treat a mild sunburn",
    "improve my posture", "drink more water", "stop snacking at night", "build muscle as a beginner",
    "recover after a long hike", "get rid of hiccups", "deal with seasonal allergies", "ease a tension headache",
    "stretch before a football game", "cut down on sugar", "stay active at a desk job", "breathe while swimming",
    # travel
    "pack light for a two-week trip", "get a visa for Vietnam", "avoid jet lag", "find cheap flights",
    "travel with a toddler", "plan a road trip across Canada", "get around Tokyo by train", "travel on a budget",
    "stay safe while hiking alone", "rent a car abroad", "choose a travel insurance", "camp in the rain",
    # finance and work
    "make a monthly budget", "pay off credit card debt", "start investing with little money", "build credit",
    "save for a house deposit", "negotiate my salary", "prepare for a job interview", "write a cover letter",
    "ask my boss for a raise", "ask for feedback at work", "run a good meeting", "find a mentor",
    "price my freelance work", "register a small business", "get my first customers", "write a business plan",
    "hire my first employee", "sell crafts online", "do my own taxes", "read a pay slip",
    # learning and hobbies
    "learn a language as an adult", "remember what I read", "study for a history exam", "take better notes",
    "learn to draw faces", "read sheet music", "play barre chords", "start bird watching", "knit a hat",
    "get better at chess openings", "juggle three balls", "develop film at home", "start a vegetable garden",
    "train for a 10k", "solve a Rubik's cube", "take sharp photos at night", "ride a bike with no hands",
    "tie a tie", "skip stones", "whistle with my fingers", "choose a first telescope", "brew my own beer",
    # relationships and life
    "make friends in a new city", "apologize to a friend", "support a grieving coworker", "talk to my teenager",
    "set boundaries with my parents", "plan a surprise party", "say no without feeling guilty",
    "deal with a difficult neighbour", "keep a long-distance relationship alive", "get my kids to eat vegetables",
    "stop procrastinating", "be more confident", "handle criticism", "calm down before a presentation",
    "introduce a new cat to my dog", "potty train a toddler", "train a puppy to walk on a lead",
)
_HOW_Q = (
    "How do I {h}?", "How do I {h}", "how do i {h}", "How to {h}", "how to {h}?", "How can I {h}?",
    "What's the best way to {h}?", "What is the easiest way to {h}?", "How do you {h}?", "how would you {h}",
    "I've been meaning to learn to {h}.", "I want to {h}. Where do I start?", "Can you explain how to {h}?",
    "Teach me how to {h}.", "Explain step by step how to {h}.", "Any tips on how to {h}?", "What do I need to {h}?",
    "Help! I need to {h} today.", "Is there a trick to {h}?", "Give me a quick guide to {h}.",
    "How do I {h} without making a mess?", "How long does it take to {h}?", "What should I avoid when I {h}?",
    "I've never tried to {h} before. Walk me through it.", "how can i {h} safely",
    "My {k} says it's easy to {h}, but I always fail. What am I doing wrong?",
)
_CONCEPTS_EVERYDAY = (
    "photosynthesis", "inflation", "the greenhouse effect", "compound interest", "the placebo effect",
    "the theory of evolution", "supply and demand", "black holes", "quantum entanglement", "the water cycle",
    "continental drift", "the immune system", "the stock market", "string theory", "natural selection",
    "the Doppler effect", "game theory", "a recession", "the electoral college", "cognitive dissonance",
    "the scientific method", "how a mortgage works", "the Krebs cycle", "general relativity", "entropy",
    "the Renaissance", "the Cold War", "stoicism", "impressionism", "the carbon cycle", "mindfulness",
    "opportunity cost", "circadian rhythm", "the gig economy", "nuclear fusion", "herd immunity", "tectonic faults",
    "the Industrial Revolution", "the bystander effect", "dark matter", "the gut microbiome", "a hedge fund",
    "structural engineering", "the feudal system", "utilitarianism", "the butterfly effect", "plant hormones",
    "the ozone layer", "an index fund", "the Silk Road", "the Big Bang", "osmosis", "a credit score",
)
_PHENOMENA = (
    "the sea salty", "onions make you cry", "cats purr", "leaves change colour in autumn", "ice float",
    "we dream", "bread go stale", "the moon look bigger near the horizon", "coffee keep you awake",
    "planes leave white trails", "my ears pop on a plane", "some people get seasick", "rainbows form",
    "metal feel colder than wood", "dogs tilt their heads", "hair turn grey", "bridges have expansion joints",
    "popcorn pop", "glass break so easily", "the Earth have seasons", "soap remove grease",
)
_MATERIALS = ("bamboo", "concrete", "steel", "glass", "wool", "cork", "clay", "copper", "granite", "hemp",
              "timber", "rubber", "aluminium", "silk", "limestone", "graphene", "leather", "stone")
_FIELDS = ("buildings", "bridges", "fashion", "cars", "furniture", "farming", "medicine", "ships", "aircraft",
           "musical instruments", "sports equipment", "packaging", "art")
_EXPLAIN_Q = (
    "Explain {c}.", "Explain {c} to me, please.", "explain {c} in simple terms", "What is {c}?", "what is {c} and why does it matter",
    "Can you explain {c} to a beginner?", "Give me an overview of {c}.", "How does {c} work?",
    "Explain {c} and give an example.", "What's the big deal about {c}?", "I never understood {c}. Help?",
    "Explain {c} like I'm ten.", "Write a short explanation of {c} for {a}.", "What are the main ideas behind {c}?",
    "Why does {ph}?", "why does {ph}", "Can you tell me why {ph}?", "What role does {m} play in {f}?", "where does {m} show up in {f}",
    "What are the advantages of {m} in {f}?", "Why don't we use more {m} in {f}?",
    "What's the difference between {c} and {c2}?", "Is {c} related to {c2}?",
)
_WRITE_LONG = (
    "I need a {w}-word essay about {e}.", "Draft an essay of about {w} words on {e}.", "write an essay on {e}",
    "Write a persuasive essay arguing that {e} matters.", "Create a lesson plan about {e} for {lv}.",
    "Make a lesson plan on {e} for {lv}, with a short quiz at the end.", "Write a {n}-week study plan for {e}.",
    "Write a {d} {r} routine for {who}.", "Give me a {d} {r} routine.", "Plan a {n}-day {r} routine.",
    "Write a rap about {e}.", "Write a rap in the style of an old-school MC about {e}.", "Write a poem about {e}.",
    "Write a speech about {e} for {a}.", "Write a blog post titled 'What {e} taught me'.", "Write a cover letter for a job as a {job}.",
    "Write an email to my landlord about {issue}.", "Draft a polite complaint about {issue}.",
    "Write a short biography of a fictional {job}.", "Write a {n}-day itinerary for {place}.",
    "Make a weekly meal plan for {who}.", "Write a eulogy for my {k}, who loved {s}.", "Write a toast for my {k}'s wedding.",
    "Give me a timeline of {e}.", "Write a report on {e} for {a}.",
)
_ESSAY_TOPICS = (
    "climate change", "the history of jazz", "water safety at beaches", "renewable energy in rural areas",
    "the role of social media in politics", "urban gardening", "the ethics of zoos", "remote work",
    "the importance of sleep", "the French Revolution", "space exploration", "fast fashion", "school uniforms",
    "the four-day work week", "volunteering", "video games and learning", "the Roman Empire", "bees and pollination",
    "fractions", "the solar system", "healthy eating", "friendship", "the water cycle", "online privacy",
    "public transport", "the printing press", "recycling", "animal migration", "mental health at work",
    "bridge safety inspections", "flood defences", "tiny houses", "ancient Egypt", "the Olympic Games",
)
_LEVELS = ("third graders", "beginners in English (A1)", "a high-school biology class", "adult learners",
           "a middle-school class", "university freshmen", "kindergarten", "an evening class for retirees")
_ROUTINES = ("exercise", "morning", "skincare", "stretching", "study", "bedtime", "yoga", "strength training",
             "cleaning", "running", "meditation", "weekend")
_DURATIONS = ("daily", "weekly", "weekday", "20-minute", "one-hour", "7-day", "30-day", "beginner")
_WHO = ("a busy parent", "someone over 60", "a beginner", "me and my partner", "a college student",
        "a vegetarian family of four", "a shift worker", "someone recovering from a knee injury")
_JOBS = ("nurse", "barista", "project manager", "park ranger", "chef", "librarian", "electrician", "teacher",
         "graphic designer", "pharmacist", "accountant", "carpenter", "flight attendant", "dentist")
_ISSUES = ("a broken heater", "noisy neighbours", "a late parcel", "a mould problem", "a rent increase",
           "a billing mistake", "a cancelled flight", "a faulty washing machine")
_PLACES = ("Lisbon", "the Scottish Highlands", "Kyoto", "Patagonia", "Rome", "New Orleans", "Cape Town",
           "Iceland", "Vietnam", "the Greek islands", "Morocco", "Vancouver", "Prague", "Bali")
_LIST_CATS = {
    "companies": ("Apple", "Samsung", "Nike", "IKEA", "Toyota", "Netflix", "Amazon", "Lego", "Ford", "Spotify"),
    "cities": ("Paris", "Tokyo", "Berlin", "Mexico City", "Sydney", "Cairo", "Seoul", "Buenos Aires", "Oslo"),
    "sports": ("tennis", "rugby", "golf", "swimming", "basketball", "cricket", "cycling", "boxing", "skiing"),
    "fruits": ("mango", "kiwi", "apple", "banana", "pineapple", "pear", "plum", "cherry", "grape", "lychee"),
    "board games": ("Monopoly", "Catan", "Scrabble", "Risk", "Cluedo", "Ticket to Ride", "chess", "Go"),
    "novels": ("Dune", "Emma", "Beloved", "Middlemarch", "Ulysses", "Rebecca", "Persuasion", "Dracula"),
    "dog breeds": ("beagle", "poodle", "labrador", "husky", "dachshund", "collie", "boxer", "greyhound"),
    "painters": ("Monet", "Frida Kahlo", "Rembrandt", "Van Gogh", "Hokusai", "Turner", "Klimt", "Picasso"),
    "car brands": ("Volvo", "Honda", "Tesla", "Fiat", "BMW", "Kia", "Subaru", "Peugeot", "Mazda"),
    "holiday destinations": ("Bali", "Croatia", "Peru", "Norway", "Thailand", "Portugal", "Jordan", "Chile"),
}
_CRITERIA = ("how eco-friendly they are", "value for money", "how family-friendly they are", "how fun they are",
             "how well they treat their staff", "popularity", "how healthy they are", "how hard they are to learn",
             "how much you personally like them", "long-term reputation", "how good they are for beginners")
_RANK_Q = (
    "Put these {cat} in order of {crit}:\n{items}.", "order these {cat} by {crit}: {items}",
    "Which of these {cat} is the best for {crit}? {items}", "Sort these {cat} from best to worst: {items}.",
    "Give me your opinion: {items}. Which one wins on {crit}?", "Compare these {cat}: {items}.",
    "Which {n} {cat} would you put at the top for {crit}?", "Make a list of the {n} most overrated {cat}.",
    "Provide a list of {n} {cat} that are good for {crit} and say why.", "What are your top {n} {cat}, and why?",
    "Suggest {n} names for a new puppy, something that means {virtue}.",
    "List {n} gift ideas for someone who loves {s}.", "List the pros and cons of {s}.",
    "Which is better, {i1} or {i2}?", "{i1} or {i2}? Convince me.", "Do you prefer {i1} or {i2}, honestly?",
)
_VIRTUES = ("kindness", "hope", "strength", "light", "joy", "peace", "courage", "wisdom", "love", "home")
_CONSULTANTS = (
    "business consultant", "marketing strategist", "financial advisor", "career coach", "interior designer",
    "nutritionist", "wedding planner", "travel agent", "real estate agent", "fitness coach", "HR manager",
    "startup advisor", "brand consultant", "sommelier", "life coach", "event planner", "management consultant",
)
_VENTURES = ("a family bakery", "a luxury menswear brand's online store", "a dog-walking service", "a bike repair shop",
             "a small vineyard", "a yoga studio", "a used bookshop", "a local newspaper", "a craft brewery",
             "an online tutoring business", "a neighbourhood café", "a hair salon", "a boutique hotel",
             "a plant nursery", "a food truck", "a cleaning company", "a children's clothing label")
_GOALS = ("working out how far it could grow nationwide", "finding out why sales fell last year",
          "planning its expansion to a second city", "cutting its costs by ten percent", "choosing a new name",
          "winning back customers who left", "deciding whether to open on Sundays", "planning a rebrand",
          "getting ready to raise money from investors", "entering the European market")
_CONSULT_Q = (
    "Take the role of a {ro} hired by {v} for {g}. What would you look at first?",
    "Act as a {ro}. I run {v} and we are {g}. Give me a plan.", "You are an experienced {ro}. {ctx}What should I do?",
    "I want you to be my {ro}. {ctx}Be honest with me.", "Pretend to be a {ro} advising {v} on {g}.",
    "As a {ro}, how would you approach {g} for {v}?", "Imagine you're a {ro}. {ctx}Where do we start?",
)
_STORY_BITS = (
    "I'm {age} and I work as a {job} in {city}.", "I have {n} kids and the youngest just started school.",
    "My partner and I have been together for {n} years.", "Last month I lost my job, and money is tight.",
    "I have about ${money} saved and no debt apart from a car loan.", "I moved to {city} {n} years ago.",
    "My doctor told me to lose some weight and sleep more.", "I get home at around {hour} pm most days.",
    "My {k} lives with us and needs help with shopping.", "I have a bad knee, so I can't run.",
    "I love {s}, but I never seem to find the time.", "We rent a small two-bedroom flat with no garden.",
    "Our budget for this is around ${money}.", "I tried {s} last year and gave up after {n} weeks.",
    "My manager wants me to lead a team of {n} people.", "I'm an introvert and big groups tire me out.",
    "My car is {n} years old and makes a strange noise.", "I work from home three days a week.",
    "We're expecting our first baby in {month}.", "I'm allergic to nuts and dairy.",
    "My landlord won't fix the heating.", "I volunteer at an animal shelter on weekends.",
    "English is my second language.", "I'm a first-year student living on campus.",
    "My {k} and I keep arguing about chores.", "I've been feeling low and unmotivated for a few weeks.",
)
_STORY_ASKS = (
    "What would you suggest?", "What should I do?", "Can you give me a realistic plan?", "Any advice?",
    "What are my options?", "How should I approach this?", "Is this a good idea?", "Where do I even begin?",
    "What would you do in my place?", "Please help me think this through.", "Give me a few ideas.",
    "What's the cheapest sensible option?",
)
_APPS = ("Spotify", "Zoom", "Outlook", "my printer", "my Kindle", "Steam", "my iPhone", "my smart TV", "WhatsApp",
         "my Wi-Fi router", "Netflix", "Microsoft Word", "Google Maps", "my laptop", "Photoshop", "my Xbox",
         "Duolingo", "Chrome", "Teams", "my Bluetooth headphones", "my Android phone", "iTunes", "Slack",
         "my smartwatch", "Excel", "my Nintendo Switch", "Firefox", "my e-reader", "Skype", "my car's infotainment")
_SYMPTOMS = ("it closes by itself", "it freezes", "nothing happens", "it asks me to log in again", "the sound cuts out",
             "it says there is no internet", "the screen goes black", "it crashes after a few seconds",
             "it gets really slow", "it shows an error and closes", "the battery drains fast", "it won't update",
             "it keeps disconnecting", "the fonts look blurry", "it won't sync")
_APP_Q = (
    "Whenever I start {app}, {sy}. Any fix?", "{app} - {sy} every time. what can i do?",
    "Every time I use {app}, {sy}. Any idea why?", "Since yesterday {app} is broken: {sy}. Help?",
    "My {k} says {app} is fine, but when I start it {sy}. What should I try?",
    "How do I stop {app} from doing this: {sy}?", "Why does {app} behave like this? {sy} whenever I turn it on.",
    "{app} isn't working. When I try, {sy}. I'm not very technical, so keep it simple.",
)
_EVERYDAY_NUM = (
    "How many hours of sleep does a {age2}-year-old need?", "Is it safe to eat eggs {n} days past the date?",
    "What should I do on a {n}-day trip to {place}?", "Can I run {n} km a day at {age}?",
    "Is ${money} enough for a week in {place}?", "My {age2}-year-old won't sleep. What can I try?",
    "Is it worth buying a {n}-year-old used car?", "What can I cook for {n} people in under 30 minutes?",
    "How do I keep {n} kids busy on a rainy day?", "Is {n} cups of coffee a day too much?",
    "How much should I tip in {place}?", "Does the {n}-minute rule for dough really work?",
    "Predict how {e} will develop by 20{n2}0.", "How will {e} change over the next {n} years?",
    "Write a {w}-word reflection on {e} from the point of view of a {lvl}.", "Is a {n}-hour flight too long for a {age2}-year-old?",
    "In {game}, should I spend my {n} skill points on magic or on stealth?", "We have {n} guests on Saturday. What games can we play?",
    "Suggest a {n}-course dinner menu for a summer evening.", "Write {n} tweets for a {e} awareness week.",
    "Which is healthier for a {age}-year-old: {n} short walks or one long run?",
    "I have {n} days off in {month}. Where should I go?", "What happened in {e} in the {cent}th century?",
)
_LEVEL_WHO = ("first-year college student", "high-school senior", "travel journalist", "retired teacher", "PhD student")
_GAMES = ("Dungeons & Dragons", "Skyrim", "Elden Ring", "Baldur's Gate", "a tabletop RPG", "Pathfinder", "Diablo")
_MONTHS = ("March", "June", "September", "November", "December", "April")
_SITUATIONS = (
    "Quick business question. {ctx}What are my options?", "Here is my problem: {ctx}What would you do?",
    "My {k} asked me for advice and I don't know what to say. {ctx}",
    "{ctx}How should we respond to this?", "Situation: {ctx}Give me three options and your recommendation.",
    "I need advice on a tricky situation at work. {ctx}",
)
_SITUATION_BITS = (
    "Our suppliers now ask for payment within {n} days.", "Our gym's membership has been flat for a year.",
    "A new competitor opened across the street and cut its prices.", "Two of my best employees want the same promotion.",
    "Our supplier raised prices by {n}% without warning.", "Online reviews say our staff are rude.",
    "The landlord wants to raise our rent at the end of the year.", "Our delivery times doubled this month.",
    "My co-founder wants to quit and take the clients with him.", "A client has not paid for {n} months.",
    "Weekend sales are fine, but weekdays are almost empty.", "Our team of {n} is burning out.",
    "A regular customer complained in public on social media.", "We have room for one new product next season.",
)
_BOOK_ASK = (
    "What are the main themes of {b}?", "Who are the main characters in {b}?",
    "What is {b} about, and is it worth reading?", "Why is {b} still taught in schools?",
    "Tell me the plot of {b} without spoilers.", "Summarize the movie {mv} for me.", "What is the message of {b}?",
)
_MORE_BOOKS = ("Sapiens", "The Hobbit", "Thinking, Fast and Slow", "Jane Eyre", "The Alchemist", "Anna Karenina",
               "Catch-22", "The Road", "Atomic Habits", "Little Women", "The Odyssey", "Brave New World", "Beloved")
_MOVIES = ("Casablanca", "Inception", "Spirited Away", "The Godfather", "Jaws", "Amélie", "Parasite", "Up")


_PROG_TASKS = (
    "parse a YAML config", "strip whitespace from every line", "count the rows in a table", "add an index to a column",
    "schedule a job every hour", "kill a process by port", "find the largest files in a directory", "zip a folder",
    "compare two lists", "convert a list to a set", "write a context manager", "mock an API call in a test",
    "define an enum", "implement an iterator", "overload an operator", "serialize an object to JSON",
    "read environment variables", "write a recursive function", "use a left join", "write a subquery",
    "select the top 5 rows per group", "pivot a table", "rename a column", "drop duplicate rows",
    "loop over the lines of a file", "pipe the output of one command into another", "redirect stderr to a file",
    "make a script executable", "add a cron entry", "search files for a pattern with grep", "use awk to sum a column",
    "squash commits", "resolve a merge conflict", "cherry-pick a commit", "stash my changes", "revert a pushed commit",
    "make a div responsive", "style a button on hover", "add a dark mode toggle", "load a font",
    "write an async function", "await several promises", "handle a 404 response", "set a request timeout",
    "profile slow code", "speed up a loop", "avoid a memory leak", "use a thread pool", "type-hint a dict",
    "write a generic function", "read user input", "generate random numbers", "compile a program with flags",
    "install a package", "pin dependencies", "build a Docker image", "expose a port", "write a migration",
)


def everyday_prompts(rows: list[dict], rng: random.Random) -> list[dict]:
    """Everyday general-assistant prompts (chat) and code questions with the same leads and nouns (see the
    comment above). Splits as in request_prompts: a hash of each row's own key; rows that land in "test" dropped."""
    out: list[dict] = []

    def add(k: int, kind: str, text: str, label: str) -> None:
        split = split_of(f"everyday-{kind}-{k}")
        if split != "test":
            out.append({"text": text, "label": label, "source": "everyday/" + kind, "split": split})

    pick = rng.choice

    def slots() -> dict:
        cat = pick(tuple(_LIST_CATS))
        items = rng.sample(_LIST_CATS[cat], rng.randint(3, 6))
        return {
            "h": pick(_HOW_TASKS), "c": pick(_CONCEPTS_EVERYDAY), "c2": pick(_CONCEPTS_EVERYDAY), "ph": pick(_PHENOMENA),
            "m": pick(_MATERIALS), "f": pick(_FIELDS), "a": pick(_AUDIENCES), "k": pick(_KIN), "s": pick(_ACTIVITIES),
            "w": pick((500, 800, 1000, 1500, 2000, 3000)), "e": pick(_ESSAY_TOPICS), "lv": pick(_LEVELS),
            "n": rng.randint(2, 12), "d": pick(_DURATIONS), "r": pick(_ROUTINES), "who": pick(_WHO), "job": pick(_JOBS),
            "issue": pick(_ISSUES), "place": pick(_PLACES), "cat": cat, "items": ", ".join(items), "i1": items[0],
            "i2": items[1], "crit": pick(_CRITERIA), "virtue": pick(_VIRTUES), "ro": pick(_CONSULTANTS),
            "v": pick(_VENTURES), "g": pick(_GOALS), "app": pick(_APPS), "sy": pick(_SYMPTOMS),
            "age": rng.randint(18, 75), "age2": rng.randint(1, 16), "money": pick((300, 800, 1500, 5000, 20000)),
            "city": pick(_CITIES), "hour": rng.randint(5, 9), "n2": rng.randint(2, 12), "lvl": pick(_LEVEL_WHO),
            "w2": pick((600, 1000, 1250, 2500)), "game": pick(_GAMES), "month": pick(_MONTHS), "cent": rng.randint(12, 19),
            "b": pick(_MORE_BOOKS + _BOOKS), "mv": pick(_MOVIES),
        }

    def story(fill: dict, lo: int, hi: int) -> str:
        return " ".join(b.format(**fill) for b in rng.sample(_STORY_BITS, rng.randint(lo, hi))) + " "

    for k in range(3600):  # chat
        fill = slots()
        u = rng.random()
        if u < 0.26:
            text = pick(_HOW_Q).format(**fill)
        elif u < 0.44:
            text = pick(_EXPLAIN_Q).format(**fill)
        elif u < 0.58:
            text = pick(_WRITE_LONG).format(**fill)
        elif u < 0.68:
            text = pick(_RANK_Q).format(**fill)
        elif u < 0.76:
            text = pick(_CONSULT_Q).format(ctx=story(fill, 1, 3), **fill)
        elif u < 0.88:
            ask = pick(_STORY_ASKS + _HOW_Q + _ADVICE[:8]).format(**fill)
            text = story(fill, 2, 7) + ask
            if rng.random() < 0.3:
                text = pick(("Hi! ", "Hello. ", "Hey there, ", "Long story, sorry. ")) + text
        elif u < 0.95:
            text = pick(_APP_Q).format(**fill)
        else:
            text = pick(_EVERYDAY_NUM).format(**fill)
        add(k, "chat", text, "chat")

    for k in range(900):  # chat: numbers that are not math, situations that ask for advice, books not given
        fill = slots()
        u = rng.random()
        if u < 0.35:
            text = pick(_EVERYDAY_NUM[12:]).format(**fill)
        elif u < 0.7:
            ctx = " ".join(b.format(**fill) for b in rng.sample(_SITUATION_BITS, rng.randint(2, 4))) + " "
            if rng.random() < 0.4:
                ctx = story(fill, 1, 3) + ctx
            text = pick(_SITUATIONS).format(ctx=ctx, k=fill["k"]).strip()
        else:
            text = pick(_BOOK_ASK).format(**fill)
        if rng.random() < 0.15:
            text = text[:1].lower() + text[1:]
        if rng.random() < 0.08:
            text = text.rstrip("?.")
        add(k, "chat-more", text, "chat")

    for k in range(1200):  # summarize: first-person text handed over to be shortened (not advice after a story)
        fill = slots()
        leads = [x for x in _SUMMARY_LEADS if "{e}" in x] + ["Shorten this story: {e}", "Sum up what happened here: {e}"]
        add(k, "summary-of-story", pick(leads).format(e=story(fill, 1, 4).strip()), "summarize")

    # code: the same leads ("how do I", "explain", "what is", "I'm trying to") and everyday nouns, with code cues.
    for k in range(1400):
        fill = slots()
        lang = pick(_TOOLING)
        noun = pick(("recipes", "hiking routes", "a budget", "flight prices", "plants to water", "gym workouts",
                     "movie ratings", "a shopping list", "exam grades", "bank transactions", "book loans",
                     "weather readings", "party guests", "tide times", "chess moves", "sleep data", "invoices"))
        u = rng.random()
        if u < 0.35:
            task = pick(_PROG_TASKS + _CODE_TASKS)
            text = pick(_HOW_Q[:12] + ("How do I {d} in {t}?", "how to {d} in {t}", "I'm trying to {d} in {t}.",
                                       "In {t}, how do I {d}?", "How do I {d} in {t} without a library?")).format(
                h=f"{task} in {lang}", d=task, t=lang, k=pick(_KIN))
        elif u < 0.6:
            text = pick((
                "Write a {t} function that stores {x} and returns the total.", "How do I sort {x} by date in {t}?",
                "Write a {t} script that reads {x} from a CSV file and prints a summary.",
                "Create a {t} class to manage {x}.", "How do I save {x} to a JSON file in {t}?",
                "Write a SQL query that finds duplicate {x}.", "Build a small {t} app to track {x}.",
                "In {t}, how can I group {x} by month?", "Write a bash script that backs up {x} every night.",
                "My {t} code that loads {x} throws a KeyError. How do I fix it?",
                "How would I write a program in {t} that suggests {x}?", "Write code to plot {x} with matplotlib.",
            )).format(t=lang, x=noun)
        elif u < 0.8:
            text = pick(("Explain {kw} in {t}.", "What is {kw} in {t}?", "what does {kw} do in {t}",
                         "Explain the difference between {a1} and {a2}.", "Explain {a1} with {t} code.",
                         "What's the difference between {a1} and {a2} in {t}?",
                         "Why does my {t} program print None?", "How does {kw} work in {t}? Show code.",
                         "Can you explain this {t} error: {err}", "What does the {sym} operator mean in {t}?")).format(
                kw=pick(_KEYWORDS), t=lang, a1=pick(_ALGOS), a2=pick(_ALGOS), sym=pick(("=>", "::", "?.", "**", "%", "&&", "<<", "|>")),
                err=pick(("TypeError: 'NoneType' object is not subscriptable", "undefined is not a function",
                          "segmentation fault", "NullPointerException", "IndexError: list index out of range")))
        else:
            text = pick((
                "Write me a {t} program that {p}.", "Implement {a1} in {t} and add comments.",
                "Make a small {t} tool that {p}.", "Write a {t} CLI with one subcommand that {p}.",
                "Can you create a {t} script that {p}?", "Show me how to code a program in {t} that {p}.",
            )).format(t=lang, a1=pick(_ALGOS), p=pick((
                "renames photos by their date", "prints a multiplication table", "validates a postcode",
                "counts the words in a text file", "merges two sorted lists", "downloads a web page",
                "checks which ports are open", "resizes images in a folder", "watches a folder for new files",
                "turns a CSV into a chart")))
        if rng.random() < 0.15:
            text = text[:1].lower() + text[1:]
        add(k, "code", text, "code")
    return out


# ---- instruction + input prompts (issue 31, item 4): the shape of public instruction sets (self-instruct, Dolly,
# Alpaca): an instruction, often about "the given" or "the following" thing, then a blank line and a short input (a
# title, a word, a city, a list, "Key: value" facts, an email, a sentence to edit). Without them the shape decides:
# "<task about the given X>" + a short input reads as code (MBPP / HumanEval say "given"), and an instruction before
# a text reads as summarize. Every class gets the shape, so the decision rests on what the instruction asks:
# chat = edit / rewrite / reply to / write from / describe / recommend / classify by hand; summarize = summarize,
# title, key points of a given text; structured = the same facts as JSON / YAML / a table; code = a solution, a
# regex, a query, a shell command; math = a tip, a conversion, a proof, a sequence; translate = the text in
# another language. Instructions, slot lists, emails, notes and facts written for this file; sentences and
# passages from permissive rows (Tatoeba CC BY 2.0 FR, t0 train / val passages, MBPP / HumanEval train / val rows).
# Nothing comes from the evaluation sets (tests/data/classifier_eval_*.jsonl, classifier_heldout.jsonl), which the
# training rows are checked against, or from a non-commercial source.
_EDIT_ASK = (
    "Can you clean up the wording of this?", "Tidy up the spelling here, please.", "Where are the typos in this text?",
    "Add the missing commas to this.", "Make this paragraph sound more formal.", "Make this message sound friendlier.",
    "Rewrite this in a more casual tone.", "Rewrite the text in the passive voice.", "Switch this text to the second person.",
    "Put the following sentence into the past tense.", "Rephrase this sentence in three different ways.",
    "Rewrite this as if a pirate were saying it.", "Make the following text more persuasive.",
    "Expand this sentence into a full paragraph.", "Continue the story from where it stops.", "What happens next? Keep going:",
    "Proofread my text and explain each fix.",
    "Rewrite this for a ten-year-old reader.", "Turn this sentence into a question.",
    "Rewrite this tweet so that more people will like it.", "Reword this so it doesn't sound rude.",
    "Edit this paragraph to remove the repetition.", "Turn this text into a short poem.",
    "Write a rhyming couplet inspired by this sentence.", "Rewrite this using simpler words.",
    "Make this sound like it was written by a lawyer.", "Make this text sound like a fairy tale.",
    "Improve the flow of this paragraph.", "Change every sentence in the text to the future tense.",
    "Can you make this sound more professional?", "Rewrite this sentence without using the letter e.",
    "Give this sentence more emotion.",
    "Add more detail and colour to this description.", "Replace the clichés in this paragraph with fresh phrases.",
    "Point out the weak words in this text and suggest better ones.", "Write the next three lines of this story.",
    "Make this complaint more polite but still firm.", "Rewrite this as a limerick.",
    "Make it punchier:", "Spice this up a bit:", "Make this sound less stiff.",
    "Rewrite this so a teenager would actually read it.", "Write this again, but angrier.", "Make this sound humble.",
    "Turn this into a dramatic movie-trailer voice-over.", "Make the sentences below vary more in length.",
)
# Questions about a short text the user wrote: asked of a sentence or two, never of a passage (a question after a
# passage is reading comprehension, summarize).
_EDIT_QUESTIONS = (
    "Give me honest feedback on this opening line of my novel.", "How could I improve this paragraph?", "What tone does this text have? Make it warmer.", "Does this sentence make sense? Suggest improvements.", "Is the comma here right?",
    "Does this read well to a native speaker?", "Write a counter-argument to this opinion.", "Do you agree with this statement? Explain.", "Write a reply to this message.", "Write a witty comeback to this comment.",
)
# Shortening the same inputs the edits get: summarize.
_SHORTEN_ASK = (
    "Cut this down to a single line.", "Boil this down to two sentences.", "Give me an abstract of the following.",
    "Shorten this paragraph, keep only what matters.", "One sentence, please: what does this say?", "Make this a lot shorter.",
    "Write a two-line summary of the text.", "Summarize the text for a busy reader.", "Reduce this to its key point.",
    "Write a short synopsis of this.", "Give me the short form of this paragraph.", "Recap this in under 20 words.",
)
# Questions about a given email, notes or story: reading comprehension, summarize.
_ABOUT_ASK = (
    "What is the writer actually asking for?", "According to the text, what went wrong?", "What does the sender want me to do?",
    "Based on this message, is the sender happy or upset?", "What are the dates and deadlines mentioned here?",
    "Who is responsible for what, according to these notes?", "In the text below, what is the main problem?",
    "From this email, when does the sender want to meet?", "What does the author of this text complain about?",
    "Which of the points below affect customers?", "Answer from the text only: what changed?",
)
# A document in the system prompt with a lead of its own, then the user's question: summarize.
_DOC_LEADS = (
    "Reference material:", "You answer questions about the attached document.", "Knowledge base excerpt:",
    "Only use the sources below when you reply.", "Retrieved passages:", "Here is the page the user is looking at:",
    "Background for this conversation:", "Answer based on the report below. If it is not in the report, say so.",
    "You are a support bot. The help article:", "Document 1:", "Relevant notes:", "Search results:",
)
_EDIT_FORMS = ("{a}\n\n{x}", "{a}\n{x}", "{a} \"{x}\"", "{a}\n\nText: {x}", "{x}\n\n{a}", "{a}\n\nSentence: {x}",
               "{a}\n\n\"{x}\"", "{a} {x}")
# A short item and what is asked about it. {x}: the item; labels shown before it sometimes ("Movie: ...").
_ITEM_ASKS = {
    "movie": (
        "What's this film about, roughly?", "I loved this one. What should I watch next?", "Why did critics praise this film?",
        "Write a fan letter to the director of this movie.", "Who would enjoy this show, and why?",
        "Write a short review of the following film.", "What are the main themes of this movie?",
        "Describe the main characters of this show.", "Why is this film considered a classic?",
        "Would this be a good pick for a family movie night?", "Write a haiku about this movie.",
        "Pitch a sequel to this film in three sentences.", "What makes the soundtrack of this film special?",
        "Rank the seasons of this show and explain your ranking.", "Is this worth watching? Be honest.",
    ),
    "book": (
        "What's this book about?", "I just finished this. What should I read next?", "Who wrote this, and what else did they write?",
        "Write a book-club question about this novel.", "Why do people still read the following book?",
        "Tell me what happens in this book without spoilers.", "Describe the writing style of this book.",
        "Is this book suitable for a twelve-year-old?", "Write a short poem inspired by this book.",
        "What is the most famous quote from this book?", "Convince me to read this.",
    ),
    "music": (
        "Which songs on this album are the best known?", "Recommend artists in a similar style.",
        "What genre is this artist known for?", "Write a short review of the album below.",
        "Describe the sound of this band to someone who has never heard it.", "Which song should I start with?",
        "Why was this album so influential?", "Make me a playlist that starts with this.",
    ),
    "city": (
        "I'm visiting next month. What shouldn't I miss?", "What is the best time of year to visit this place?",
        "Plan a weekend in the city below.", "What food is this city famous for?", "Give me three hidden gems in:",
        "Describe this city to a first-time visitor.", "Suggest a day trip from this city.",
        "What should a tourist avoid here?", "Is this a good place to live with kids?", "How expensive is it to live here?",
        "Write a postcard from this city.", "What's the nightlife like in:",
    ),
    "word": (
        "What other words mean roughly the same as this one?", "What's the opposite of this word?",
        "Give me some rhymes for this.", "Use this word in three example sentences.", "What does this word mean?",
        "Where does this word come from?", "Is this word formal or informal?", "Make a crossword clue for the following word.",
        "Write a short poem that uses this word twice.", "What are some common phrases that include this word?",
        "How do I pronounce this?", "Is this word still in use?",
    ),
    "idiom": (
        "What does this saying mean?", "Use this expression in a sentence.", "Where does this idiom come from?",
        "Give an example of a situation where you would say this.", "Is there a similar saying in other languages?",
        "Can I use this in a work email?",
    ),
    "topic": (
        "Suggest a few research questions about:", "Give me a reading list on this subject.", "Make a mind map outline for the topic below.",
        "Write five quiz questions about this topic.", "Suggest some blog post titles about the topic below.",
        "Explain this topic to a complete beginner.", "What are the most common misconceptions about:",
        "Plan a six-week evening class on this.", "What are the big open questions in this field?",
        "Which famous people shaped this field?", "Write a fun fact about this subject for a newsletter.",
    ),
    "brand": (
        "Suggest a name for the business described below.", "Write a short radio ad for:", "Write an Instagram caption for this shop.",
        "Come up with a slogan for this company.", "What colours and fonts would suit this brand?",
        "Write an 'About us' paragraph for the business below.", "How should this business celebrate its tenth birthday?",
        "Write a welcome message for new customers of:", "Which social media should this business be on?",
    ),
    "ingredients": (
        "What can I cook with these?", "Name a dish that uses all of these.", "Give me a quick lunch idea with:",
        "I have only these in the fridge. Dinner ideas?", "Can I make a dessert with these?", "What goes well with these?",
        "Plan a three-course menu around:",
    ),
    "weather": (
        "What should I wear in this weather?", "Is this a good day for a picnic?", "Suggest a packing list for a trip with this forecast.",
        "Can I go cycling in this?", "What could we do with the kids on a day like this?", "Write a short poem about this weather.",
    ),
    "situation": (
        "How should I respond?", "What would a good friend say here?", "Think of a creative way to handle this.",
        "Write a short pep talk for someone in this position.", "Am I overreacting?", "What are my options here?",
        "How do I bring this up without a fight?", "Write a diary entry about this.",
    ),
    "project": (
        "What tools do I need for this project?", "What could go wrong with this project, and how do I avoid it?",
        "Give me a plan to finish this project in a week.", "How long will this take a beginner?",
        "Is this a good project to do with kids?", "Where can I find inspiration for this?",
    ),
    "game": (
        "Explain the rules of this game.", "Give tips for a beginner at the following game.", "What is a good strategy for this game?",
        "Why is this game so popular?", "How many players does this game need?", "Teach me this game in five minutes.",
    ),
    "job": (
        "What skills does this role need?", "Prepare five interview questions for this job.", "Describe a typical day in this job.",
        "Write a short LinkedIn headline for someone in this role.", "What does someone in this role earn, roughly?",
        "Is this a good career for an introvert?", "How do I switch into this career at 40?",
    ),
    "occasion": (
        "Write a card message for this occasion.", "Suggest gift ideas for the occasion below.", "Plan a small party for this occasion.",
        "Write a short toast for:", "What's a good theme for this?", "Write a funny invitation for:",
    ),
}
_ITEMS = {
    "movie": ("Inception", "The Shawshank Redemption", "Toy Story", "Stranger Things", "The Crown", "Jurassic Park",
              "Amélie", "Spirited Away", "The Office (US)", "Game of Thrones", "Forrest Gump", "The Matrix", "Finding Nemo",
              "Friends", "Mad Men", "Pulp Fiction", "The Sopranos", "Coco", "Gladiator", "Sherlock", "Black Mirror",
              "Titanic (1997)", "Ted Lasso", "The Lion King", "Interstellar", "Fargo", "Arrival", "Paddington 2", "Dark (2017)"),
    "book": ("The Hobbit", "To Kill a Mockingbird", "The Little Prince", "Dune", "Jane Eyre", "The Kite Runner",
             "Brave New World", "Charlotte's Web", "Sapiens", "The Catcher in the Rye", "The Handmaid's Tale",
             "Norwegian Wood", "The Martian", "Educated", "The Name of the Wind", "Rebecca", "The Secret History",
             "Atomic Habits", "Little Women", "Dracula", "The BFG", "Circe"),
    "music": ("Abbey Road", "Thriller", "Rumours", "Back in Black", "Kind of Blue", "Random Access Memories", "Lemonade",
              "OK Computer", "Purple Rain", "Nevermind", "The Joshua Tree", "Folklore", "Graceland", "Daft Punk",
              "Fleetwood Mac", "Nina Simone", "Radiohead", "ABBA"),
    "city": ("Kyoto", "Lisbon", "Cape Town", "Edinburgh", "Buenos Aires", "Hanoi", "Copenhagen", "Marrakesh",
             "Vancouver", "Istanbul", "Melbourne", "Prague", "Mexico City", "Reykjavik", "Budapest", "Singapore",
             "Montreal", "Seville", "Oaxaca", "Tbilisi", "Austin, TX", "Dubrovnik", "Porto", "Chicago, IL"),
    "word": ("serendipity", "brave", "meticulous", "gloomy", "ephemeral", "generous", "stubborn", "whisper", "ancient",
             "vivid", "reluctant", "harmony", "fragile", "clumsy", "resilient", "wander", "obscure", "candid",
             "nostalgia", "tranquil", "bold", "eager", "frugal", "sparkle", "quaint", "diligent"),
    "idiom": ("break the ice", "bite the bullet", "the ball is in your court", "a blessing in disguise",
              "once in a blue moon", "spill the beans", "hit the nail on the head", "let the cat out of the bag",
              "cost an arm and a leg", "under the weather", "burn the midnight oil", "the elephant in the room",
              "barking up the wrong tree", "a piece of cake", "on thin ice", "every cloud has a silver lining"),
    "topic": ("Graphic design", "Renaissance art", "Marine biology", "Public speaking", "Personal finance",
              "Urban planning", "Climate science", "Nutrition", "Film photography", "Medieval history",
              "Behavioural economics", "Astronomy", "Creative writing", "Child psychology", "Sustainable fashion",
              "Beekeeping", "Game design", "Ethics", "Volcanology", "Jazz history", "Philosophy of mind"),
    "brand": ("A bike repair café run by volunteers", "an eco-friendly cleaning brand", "A bakery that only sells sourdough",
              "a children's bookshop with a reading corner", "a dog grooming van that comes to your house",
              "A yoga studio for beginners over 50", "a vintage clothing store in a college town",
              "A tea brand that sources from small farms", "an app that helps neighbours share tools",
              "a family-run Italian restaurant", "a mobile library bus", "a surf school for kids"),
    "ingredients": ("eggs, spinach, feta, tortillas", "chickpeas, tomatoes, garlic, cumin", "pasta, lemon, parmesan, black pepper",
                    "potatoes, leeks, cream", "tofu, soy sauce, ginger, broccoli", "bananas, oats, peanut butter",
                    "salmon, dill, cucumber, yoghurt", "lentils, carrots, coconut milk, curry paste",
                    "bread, cheese, apples, mustard", "mince, beans, peppers, rice", "couscous, halloumi, mint"),
    "weather": ("Sunny, 28 degrees, no wind", "Heavy snow all day", "Overcast and humid, thunderstorms in the evening",
                "-10 C and a clear sky", "Foggy morning, warm afternoon", "Windy with showers, 12 C", "Drizzle, 9 degrees"),
    "situation": ("My best friend forgot my birthday again.", "I found a wallet with cash in it on the bus.",
                  "My coworker takes credit for my work.", "I was offered two jobs on the same day.",
                  "My neighbour's dog barks all night.", "I said something hurtful to my sister and she stopped talking to me.",
                  "I have an exam tomorrow and I haven't started studying.", "A friend asked me to lie for him to his girlfriend.",
                  "I got lost in a city where I don't speak the language.", "My team missed a big deadline because of my mistake.",
                  "My roommate never cleans the kitchen.", "I was not invited to my cousin's wedding."),
    "project": ("a birdhouse", "a bookshelf from pallets", "a raised garden bed", "a homemade kite", "a LEGO city for my son",
                "a treehouse", "a small pond", "a cardboard castle", "a herb spiral", "a photo album for my parents",
                "a costume for a school play", "a rain gauge"),
    "game": ("chess", "Monopoly", "poker", "Settlers of Catan", "bridge", "Go", "Minecraft", "Scrabble",
             "Dungeons & Dragons", "mahjong", "Tetris", "Uno", "backgammon"),
    "job": ("air traffic controller", "pharmacy assistant", "museum curator", "kindergarten teacher", "data analyst",
            "barista", "social media manager", "park ranger", "nurse", "event planner", "UX designer"),
    "occasion": ("my parents' 40th wedding anniversary", "a colleague's retirement", "a baby shower",
                 "graduation day", "Mother's Day", "a housewarming", "a friend's new job", "Lunar New Year"),
}
_ITEM_LABELS = {"movie": ("Movie", "Series", "Title"), "book": ("Book", "Title"), "music": ("Album", "Artist"),
                "city": ("City", "Location", "Destination"), "word": ("Word",), "idiom": ("Phrase", "Idiom"),
                "topic": ("Topic", "Field", "Course"), "brand": ("Brand", "Business"), "ingredients": ("Ingredients",),
                "weather": ("Weather", "Forecast"), "situation": ("Situation", "Problem"), "project": ("Project",),
                "game": ("Game",), "job": ("Job", "Position", "Role"), "occasion": ("Occasion", "Event")}
# No input: short open requests in the imperative (lists, plans, checklists, comparisons).
_OPEN_ASKS = (
    "Make a checklist for a {e}.", "Make a packing list for {t}.", "Write a to-do list for {t}.",
    "How much money should I set aside for {t}?", "Make a list of {n} fun things to do on {t}.", "Plan the schedule for {t}.",
    "Come up with {n} questions to ask at {t}.", "Brainstorm {n} themes for {t}.", "What should I bring to {t}?",
    "What sets apart {p}?", "How are {p} different?", "Compare {p}.", "Which is better for you, {p}?",
    "Tell me the difference between {p} in simple words.", "Why do people mix up {p}?",
)
_OPEN_EVENTS = ("house move", "wedding", "camping trip", "new puppy", "first day at a new job", "baby's arrival",
                "home office setup", "garage sale", "end-of-year party", "road trip", "school year start")
_OPEN_TIMES = ("a week in Iceland", "a rainy Saturday", "a school trip to a museum", "a family reunion", "a job fair",
               "a beach holiday with two toddlers", "a weekend of hiking", "a first date", "a book club meeting",
               "a charity bake sale", "a ski trip", "a long-haul flight")
_PAIRS = ("weather and climate", "a virus and bacteria", "a frog and a toad", "baking soda and baking powder",
          "a hurricane and a typhoon", "jam and jelly", "a rabbit and a hare", "empathy and sympathy", "a lake and a pond",
          "latte and cappuccino", "a moth and a butterfly", "an ale and a lager", "a psychologist and a psychiatrist",
          "an emu and an ostrich", "fog and mist", "a violin and a viola", "butter and margarine", "a cold and the flu",
          "a comet and an asteroid", "a dolphin and a porpoise", "a cave and a cavern")
# Dolly-style classification and sorting of a given list by world knowledge: chat.
_SORT_ASKS = (
    "Classify each of the following as {a} or {b}: {items}.", "Which of these are {a} and which are {b}? {items}",
    "Tell me whether each of these is {a} or {b}.\n\n{items}", "Sort these into {a} and {b}: {items}",
    "Identify which of the following are {a}: {items}", "{items}\n\nWhich of the above are {a}?",
    "Group the following into {a} and {b}.\n{items}", "Label each item as {a} or {b}:\n{lines}",
)
_SORT_SETS = (
    ("a fruit", "a vegetable", ("courgette", "papaya", "kale", "apricot", "turnip", "fig", "leek", "plum", "celery")),
    ("a mammal", "a bird", ("eagle", "dolphin", "penguin", "bat", "ostrich", "whale", "sparrow", "horse", "owl")),
    ("a city", "a country", ("Lima", "Peru", "Oslo", "Kenya", "Nairobi", "Chile", "Vienna", "Laos", "Quito")),
    ("a string instrument", "a percussion instrument", ("cello", "drum", "harp", "xylophone", "guitar", "tabla")),
    ("a team sport", "an individual sport", ("rugby", "golf", "hockey", "archery", "volleyball", "fencing")),
    ("a planet", "a star", ("Mars", "Sirius", "Venus", "Betelgeuse", "Neptune", "Vega", "Jupiter")),
    ("fiction", "non-fiction", ("Dune", "Sapiens", "Emma", "Educated", "The Hobbit", "Silent Spring")),
    ("usually served hot", "usually served cold", ("soup", "ice cream", "tea", "gazpacho", "sorbet", "porridge")),
    ("renewable", "non-renewable", ("solar", "coal", "wind", "oil", "hydro", "natural gas", "geothermal")),
    ("a reptile", "an amphibian", ("gecko", "newt", "iguana", "salamander", "tortoise", "frog", "cobra")),
)
# Facts as "Key: value" lines: chat writes prose from them, structured returns them as data.
_PEOPLE = ("Rosa Mendes", "Priya Nair", "Tom Becker", "Aiko Tanaka", "Lucas Silva", "Grace Okafor", "Jan Novak",
           "Sofia Lindqvist", "Omar Haddad", "Claire Dubois", "Diego Ramos", "Hannah Cohen", "Sam Whitfield")
_SKILLS = ("project management", "Spanish", "public speaking", "Excel", "customer service", "photography",
           "team leadership", "budgeting", "first aid", "copywriting", "data analysis", "carpentry")


def _facts(kind: str, rng: random.Random) -> list[tuple[str, str]]:
    pick = rng.choice
    if kind == "person":
        rows = [("Name", pick(_PEOPLE)), ("Job", pick(_JOBS)), ("Experience", f"{rng.randint(1, 25)} years"),
                ("Skills", ", ".join(rng.sample(_SKILLS, 2))), ("City", pick(_CITIES[:5] + ("Dublin", "Porto"))),
                ("Hobbies", ", ".join(rng.sample(_ACTIVITIES, 2))), ("Languages", pick(("English, Greek", "Hindi, English", "French")))]
    elif kind == "product":
        rows = [("Product", pick(("a bamboo toothbrush", "noise-cancelling headphones", "a camping stove", "a smart water bottle",
                                  "a wool blanket", "an electric kettle", "a kids' scooter", "a standing desk"))),
                ("Features", ", ".join(rng.sample(("lightweight", "waterproof", "two colours", "long battery life", "recycled materials",
                                                   "quiet", "foldable", "dishwasher safe", "two-year warranty"), 3))),
                ("Price", f"${rng.randint(5, 300)}"), ("For", pick(("families", "students", "hikers", "busy parents", "office workers")))]
    elif kind == "house":
        rows = [("Address", f"{rng.randint(2, 199)} {pick(('Oak', 'Mill', 'River', 'Station', 'Park'))} Street"),
                ("Bedrooms", str(rng.randint(1, 5))), ("Asking price", f"${rng.randint(180, 900)},000"),
                ("Features", ", ".join(rng.sample(("garden", "new kitchen", "garage", "near schools", "sea view",
                                                   "open-plan living room", "solar panels"), 3)))]
    elif kind == "event":
        rows = [("Event", pick(("summer fair", "book launch", "charity run", "team dinner", "open day", "jazz night"))),
                ("Date", f"{pick(_MONTHS)} {rng.randint(1, 28)}"), ("Place", pick(("the town hall", "Riverside Park",
                                                                                    "our office", "the library"))),
                ("Time", f"{rng.randint(1, 11)} pm"), ("Note", pick(("bring a friend", "free entry", "dress code: smart casual")))]
    else:  # restaurant
        rows = [("Name", pick(("The Blue Door", "Casa Luna", "Noodle Bar 88", "Green Fork", "Harbour Grill"))),
                ("Cuisine", pick(("Italian", "Thai", "vegan", "Mexican", "seafood"))), ("Area", pick(_CITIES)),
                ("Rating", f"{rng.randint(3, 5)}/5"), ("Price range", pick(("cheap", "moderate", "expensive")))]
    return rng.sample(rows, rng.randint(min(3, len(rows)), len(rows)))


def _fact_text(facts: list[tuple[str, str]], rng: random.Random) -> str:
    style = rng.randrange(4)
    if style == 0:
        return "\n".join(f"{k}: {v}" for k, v in facts)
    if style == 1:
        return "\n".join(f"- {k}: {v}" for k, v in facts)
    if style == 2:
        return ", ".join(f"{k.lower()}: {v}" for k, v in facts)
    return "\n".join(f"{k.lower()} = {v}" for k, v in facts)


_FACT_WRITE = {
    "person": ("Write a short bio from the notes below.", "Use these details to write a friendly self-introduction.",
               "Write a LinkedIn summary for this person.", "Introduce this speaker at a conference in three sentences.",
               "Write a reference letter for this person.", "Write a birthday message for this person.",
               "Write a short newsletter profile of our new colleague."),
    "product": ("Write a product description using the facts below.", "Write an ad for this product.",
                "Write three tweets announcing this product.", "Write an honest customer review of this product.",
                "Pitch this product to a shop owner.", "Write a catchy name and tagline for this product."),
    "house": ("Describe this home to a family looking to buy.", "Write a short ad for this house.",
              "Write a letter to the owners saying we love their house.", "Write the voice-over for a video tour of this home."),
    "event": ("Write an invitation using these details.", "Write an announcement for this event.",
              "Write a reminder email about this event.", "Write a short poster text for this event."),
    "restaurant": ("Write a restaurant review from these details.", "Write a short description of this restaurant.",
                   "Recommend this place to a friend in a text message.", "Write a funny one-star review of this place (it's a joke)."),
}
_FACT_STRUCT = (
    "Convert these details into JSON.", "Return this information as a JSON object.", "Turn the following into YAML.",
    "Put this into a table with the columns {k}.", "YAML version of this, please:", "Make a CSV row from these details, with a header.",
    "Output the data below as JSON with snake_case keys.", "Extract the fields as key-value JSON.",
    "Format this as an XML record.", "Write this as a Python dict.", "Structure the following as JSON, nothing else.",
)
# Emails and chat messages: chat answers or writes back; summarize shortens or titles them.
_EMAIL_BODY = (
    "I'm writing to ask whether we could move our meeting to next week.", "Thank you for your order.",
    "We would like to invite you to give a talk at our workshop in {m}.", "I'm sorry, but the parcel has not arrived yet.",
    "Could you send me the slides from yesterday?", "Our team has reviewed your application with interest.",
    "The invoice you sent last month has a mistake in the total.", "I hope you had a good holiday.",
    "We are pleased to offer you the position of {j}.", "Unfortunately the venue is not available on that date.",
    "I have been a customer for {n} years and this is the first time I complain.", "Many thanks for your help last week.",
    "Please let me know if Thursday works for you.", "The heating in my flat has been broken since Monday.",
    "Would you be interested in joining our reading group?", "I wanted to follow up on my last email.",
    "The kids had a great time at the party.", "We are raising prices by {n}% from {m}.",
    "Could you tell me more about the volunteer programme?", "I'm afraid I have to cancel my subscription.",
)
_EMAIL_CHAT = (
    "Write back and say no, kindly.", "Write a response to this email accepting the offer.", "Answer this customer's email.",
    "Write a polite follow-up to this message.", "Write a reply that apologises for the delay.",
    "Respond to this email and suggest two new dates.", "Reply to this message in a warm, friendly tone.",
    "Write a firm but polite answer to this complaint.", "How should I reply to this email?",
    "Draft a short answer to my landlord's message below.", "Help me answer this without sounding annoyed.",
    "What should I text back?", "Write my answer to this, say yes but ask for more time.",
)
_EMAIL_SUMMARY = (
    "Summarize this email in one sentence.", "Write a subject line for the following email.", "What is the main point of this email?",
    "TL;DR of this email:", "Give me the gist of this message.", "Summarize the chat below.", "Sum up what this email asks for.",
    "Give this message a short title.",
)
_REVIEW_BITS = (
    "Battery lasts all day, but it gets warm.", "Arrived on time and does the job.", "Too expensive for what it is.",
    "The staff were friendly and the room was clean.", "Broke after two weeks.", "Best purchase I made this year!",
    "The instructions were confusing.", "Comfortable, but the colour faded after one wash.", "Good value for money.",
    "Customer service never answered my emails.", "Sound quality is excellent.", "Smaller than it looks in the photos.",
    "The food was cold when it arrived.", "Easy to set up, even for my grandmother.", "Noisy at night because of the road.",
)
_MINUTE_BITS = (
    "Anna to send the report by Friday", "website launch moved to {m}", "the team agreed to try a four-day week",
    "printer on floor {n} to be replaced", "client asked for a discount of {n}%", "summer party on the {n}th",
    "security training is now mandatory", "sales up {n}% on last quarter", "two new interns start Monday",
    "car park closed for repairs in {m}", "the board wants a new logo", "travel budget cut by {n}0%",
)
_RELEASE_BITS = (
    "Faster start-up on older phones", "New export to PDF", "Removed the old sync option", "Improved search results",
    "Fixed a typo in the settings page", "Added Spanish and Polish", "Battery use reduced in the background",
    "Login now supports passkeys", "New keyboard shortcuts for editing", "Photos now upload in the background",
    "Fixed the calendar showing the wrong week",
)
_NOTES_SUMMARY = (
    "Summarize the customer reviews below.", "What do these reviews agree on?", "Give an overview of this feedback.",
    "Summarize these meeting minutes.", "What was decided in this meeting? Keep it short.",
    "What are the key points of these release notes?", "Write a one-paragraph summary of the notes below.",
    "Condense these notes into three bullet points.", "Sum these up for my boss.",
    "Write a headline for this article.", "Give the passage below a title.", "Summarize the article.",
    "What is this text mainly about?", "Summarize the main argument of the passage.",
)
_TEXT_HEADS = ("Customer reviews:", "Reviews:", "Meeting minutes:", "Notes from today's meeting:", "Release notes:",
               "Changelog:", "")
# code in the same shape: a problem, a description, a table and a question, a command.
_CODE_INSTR = (
    "Solve this programming problem in {t}.", "Write {t} code for the task below.",
    "Implement the following in {t}, with a short test.", "Here is a coding task. Give me a {t} implementation.",
    "Write a function in {t} for the problem below.", "Code this up in {t} and explain the complexity.",
    "Task for a {t} developer:", "Can you write this in {t}?",
)
_REGEX_DESCRIPTIONS = (
    "dates in the format YYYY-MM-DD", "email addresses", "UK postcodes", "hexadecimal colour codes like #a3f",
    "words that contain a double letter", "lines that end with a semicolon", "IPv4 addresses",
    "US phone numbers with an optional area code", "strings of exactly eight lowercase letters", "times in 24-hour format",
    "URLs that start with https", "numbers with two decimal places",
)
_REGEX_ASKS = ("Write a regex for the description below.", "Give me a regular expression that matches the following.",
               "Create a regex pattern:", "I need a regular expression for this:")
_SQL_TABLES = ("employees(id, name, salary, dept_id)", "orders(id, customer_id, total, created_at)",
               "students(id, name, grade, class)", "products(id, name, price, stock)", "books(id, title, author, year)")
_SQL_QUESTIONS = ("Who earns more than the average?", "How many rows were added last month?",
                  "Which three items have the highest value?", "List every name in alphabetical order.",
                  "What is the total per group?", "Which entries have no matching row in the other table?")
_SQL_ASKS = ("Write an SQL query that answers the question.", "Give me the SQL for this.",
             "Turn the question into a SQL statement for the table below.", "What query would answer this?")
_COMMANDS = ("ls -la | grep txt", "chmod 755 run.sh", "docker run -p 8080:80 nginx", "kubectl get pods -A",
             "find . -name '*.log' -delete", "tar -xzf backup.tar.gz", "git stash pop", "ssh -L 5432:localhost:5432 server",
             "awk '{print $2}' file.txt", "pip install -e .", "npm run build", "git cherry-pick abc123")
_COMMAND_ASKS = ("What does `{c}` do?", "Explain this command: {c}", "Is it safe to run `{c}`?", "What does this shell command do?\n\n{c}",
                 "Break down the command below.\n\n{c}", "What is the output of `{c}` likely to be?")
_CODE_MISC = (
    "Write a LaTeX preamble with two packages for maths.", "Write a workflow file that lints the repo on every pull request.",
    "Show me the LaTeX for a 2x2 matrix and a fraction.", "Write a Makefile with build, test and clean targets.",
    "Write a cron expression that runs a job every {n} minutes.", "Write an nginx config that proxies to port {n}000.",
    "Write a docker-compose file with a web service and a Postgres database.", "What is the difference between let and var in JavaScript?",
    "How do I write a unit test for a function that calls an API?", "Write a bash one-liner that counts the lines of every .py file.",
    "How do I add a column with a default value in PostgreSQL?", "Write a CSS grid layout with a sidebar and a main area.",
    "How do I rename a local git branch?", "How do I make a button stay at the bottom of the screen in CSS?",
    "How do I group by two columns in pandas?", "Make this HTML form send its data as JSON.",
    "In Python, how do I read a file that is too big for memory?", "How can I vertically align text in a flexbox?",
)
# math in the same shape.
_UNITS = (("ft", "in"), ("m", "cm"), ("kg", "g"), ("h", "min"), ("yd", "ft"), ("L", "mL"), ("km", "m"), ("lb", "oz"),
          ("days", "hours"), ("gallons", "quarts"))
_STATEMENTS = (
    "The sum of two odd numbers is even.", "There are infinitely many prime numbers.", "The square root of 2 is irrational.",
    "The product of three consecutive integers is divisible by 6.", "For all positive integers n, 1 + 2 + ... + n = n(n+1)/2.",
    "If x > 2 then x^2 > 4.", "Every multiple of 4 is even.", "The angles of a triangle add up to 180 degrees.",
    "n^3 - n is divisible by 3 for every integer n.", "The sum of the first n odd numbers is n^2.",
)
_MATH_INSTR = (
    "How much should I leave as a tip?\n\nBill: ${d}.{c}0, tip: {p}%", "How many {u2} is that?\n\n{a} {u1}",
    "{a} {u1} in {u2}?", "Solve the system.\n\n{a}x + {b}y = {r1}\n{c}x - y = {r2}", "Show that the statement is true.\n\n{s}",
    "Is this statement true? Give a proof or a counterexample.\n\n{s}", "Prove it:\n{s}",
    "What is the general term of this sequence?\n\n{q}", "Find the next two terms of the sequence.\n\n{q}",
    "Calculate the total cost of the items below.\n\n{table}", "Compute the average of these numbers.\n\n{nums}",
    "Estimate the total cost if each of the {n} items costs ${d}.", "Find the mean, median and mode of the data.\n\n{nums}",
    "Compute the derivative of the function.\n\nf(x) = {a}x^3 - {b}x + {c}", "Simplify the expression.\n\n({a}x + {b})({a}x - {b})",
    "Find the area of the shape.\n\nA right triangle with legs {a} cm and {b} cm.", "How many ways can you choose {c} books from {n}?",
    "Which of these numbers are prime?\n\n{nums}", "What is the chance of a total of {t} when rolling two dice?",
    "Add up the last column.\n\n{table}", "Work out the percentage change.\n\nOld: {d}\nNew: {r1}",
)
_TRANSLATE_INSTR = (
    "Translate the text into {l}.", "Render the following passage in {l}.", "Please translate this into {l} for our newsletter.",
    "Translate the sentence below into {l}, keeping the tone.", "I need the following text in {l}.",
    "Can you give me this paragraph in {l}?",
)


# The same asks worded the way instruction sets word them: "the given / following / provided <noun>" (MBPP and
# HumanEval say "given" too, of lists and integers), list-making verbs, and a sentence that defines the thing to
# write first. {g}: a reference to the item, e.g. "the given movie".
_GIVEN_REFS = ("the given {n}", "the following {n}", "the {n} below", "the provided {n}", "this {n}", "the {n} you are given",
               "the {n} that is given", "the {n} mentioned below")
_GIVEN_NOUNS = {"movie": ("movie", "film", "series", "TV show", "movie or series"), "book": ("book", "novel", "title"),
                "music": ("album", "artist", "band"), "city": ("city", "place", "destination", "location"),
                "word": ("word", "term", "adjective"), "idiom": ("phrase", "expression", "idiom"),
                "topic": ("topic", "subject", "field", "course"), "brand": ("brand", "business", "company", "shop"),
                "ingredients": ("ingredients", "items in my fridge"), "weather": ("weather", "forecast", "weather condition"),
                "situation": ("situation", "problem", "scenario"), "project": ("project", "build", "DIY idea"),
                "game": ("game",), "job": ("job", "role", "position"), "occasion": ("occasion", "event")}
_GIVEN_ASKS = (
    "Make a list of {o} for {g}.", "Create a list of {o} related to {g}.", "Come up with {o} for {g}.",
    "Suggest {o} that fit {g}.", "Give examples of {o} connected to {g}.", "Write down {o} for {g}.",
    "List {o} for {g}.", "Think of {o} that suit {g}.", "Brainstorm {o} inspired by {g}.", "Name {o} that go with {g}.",
    "Using {g}, come up with {o}.", "Based on {g}, suggest {o}.", "For {g}, write {o}.", "Provide {o} about {g}.",
)
_GIVEN_OBJECTS = ("a few gift ideas", "some fun facts", "five questions to ask", "a packing list", "some songs",
                  "possible names", "weekend activities", "practical tips", "related words", "places to visit",
                  "famous quotes", "snack ideas", "common mistakes to avoid", "three jokes", "discussion questions",
                  "a short poem", "hashtags", "talking points", "party themes", "similar recommendations", "a fun quiz",
                  "interview questions", "catchy titles", "a haiku", "three alternatives", "pros and cons")
_DEFINE_WRITE = (
    ("A tagline is a short, catchy phrase used in advertising", "Write one for {g}"),
    ("An elevator pitch is a 30-second summary of an idea", "Write one for {g}"),
    ("A haiku is a poem of three lines with 5, 7 and 5 syllables", "Write a haiku about {g}"),
    ("A limerick is a funny five-line poem", "Write a limerick about {g}"),
    ("A toast is a short speech given before a drink", "Write a toast for {g}"),
    ("A mission statement says why an organisation exists", "Write one for {g}"),
    ("A press release announces news to journalists", "Write a short press release about {g}"),
    ("An acrostic poem spells a word with the first letter of each line", "Write one about {g}"),
    ("A fun fact is a surprising piece of trivia", "Share three about {g}"),
    ("A pun is a joke that plays on the meaning of words", "Make two puns about {g}"),
    ("Good feedback is specific, kind and useful", "Give feedback on {g}"),
    ("A travel guide tells visitors what to see and do", "Write a short one for {g}"),
)


# code in the same words: "the given / provided <code noun>", a defining sentence first, "You are given ... The task is".
_CODE_NOUNS = ("code", "snippet", "function", "script", "program", "query", "command", "class", "stack trace",
               "error message", "implementation", "pseudocode", "programming problem", "algorithm", "test case")
_CODE_GIVEN_ASKS = (
    "Find and fix the bugs in {g}.", "Explain {g} line by line.", "Convert {g} into {t}.", "Write unit tests for {g}.",
    "What is the output of {g}?", "Identify the programming language of {g}.", "Optimize {g} for speed.",
    "Add comments and type hints to {g}.", "Rewrite {g} so it is easier to read.", "Tell me the time complexity of {g}.",
    "Refactor {g} into smaller functions.", "Review {g} like a senior engineer would.", "Why does {g} fail?",
    "Make {g} handle empty input.", "Port {g} to {t} and keep the same behaviour.",
)
_CODE_TOPIC_ASKS = (
    "Design a programming exercise about the given topic, with examples and constraints.", "Write a coding interview question on this subject.",
    "Write the {t} syntax for the action below.", "Show how to do the following in {t}.", "Turn the description into a {t} snippet.",
    "Look for a code snippet that does what the search query asks.", "Write a shell command for the description below.",
    "Given a language and a task, show the idiomatic way to do it.", "Find the library function in {t} that does this and show its use.",
    "Answer this programming question with an example.",
)
_CODE_TOPICS = ("recursion", "binary search trees", "string parsing", "dynamic programming", "reading a CSV file",
                "adding an image to a web page", "making a table with a header row", "reading the last 20 lines of a file",
                "sorting a list of tuples by the second item", "opening a link in a new tab", "counting files in a folder",
                "a bold heading and a numbered list", "listing running processes", "a dropdown menu", "merging two arrays",
                "checking whether a number is even", "a loop that prints 1 to 10", "a form with a password field")
_CODE_SNIPPETS = (
    "for i in range(10)\n    print(i)", "int main() {\n  printf(\"hi\")\n  return 0;\n}", "SELECT name, COUNT(*) FROM users GROUP BY name",
    "const x = [1, 2, 3].map(n => n * 2);", "def avg(xs):\n    return sum(xs) / len(xs)", "while (true) { i++; }",
    "<div class=\"box\"><p>Hello</p>", "fn main() { let v = vec![1, 2]; println!(\"{:?}\", v); }",
    "public int sum(int[] a) { int s = 0; for (int x : a) s += x; return s; }", "ls | wc -l", "x = input()\nprint(int(x) + 1)",
    "git log --oneline | head -5", "if x = 5:\n    print('five')", "echo $PATH", "df.groupby('city').size()",
    "document.getElementById('btn').onclick = go;", "let total = 0\nfor n in nums { total += n }",
)
_CODE_DEFINE = (
    ("A regular expression describes a search pattern in text", "Write one that matches {x}"),
    ("A unit test checks one small piece of code", "Write unit tests for a function that handles {x}"),
    ("A Dockerfile describes how to build a container image", "Write one for an app that does {x}"),
    ("A CI workflow runs jobs automatically when code is pushed", "Write one that runs {x}"),
    ("Big-O notation describes how running time grows with input size", "Give the complexity of {x}"),
    ("A REST endpoint answers HTTP requests", "Write one in {t} for {x}"),
    ("A linter flags style problems in source code", "Configure one for a {t} project that does {x}"),
    ("A makefile lists build targets", "Write one for a project about {x}"),
)
_GIVEN_TASK = (
    "You are given {what}. The task is to {do}.", "You will be given {what}. Your job is to {do}.",
    "In this task you get {what}, and you need to {do}.", "Given {what}, {do}.",
)
_CODE_WHAT_DO = (
    ("a question about programming and two possible answers", "decide which answer is correct and explain why"),
    ("a piece of code and an error message", "find the cause of the error"),
    ("a function signature and a docstring", "write the body of the function"),
    ("a description of a program", "write the program in {t}"),
    ("a snippet in one language", "rewrite it in {t}"),
    ("a SQL table and a question", "write the query that answers it"),
    ("a failing test", "change the code so that the test passes"),
)
_CHAT_WHAT_DO = (
    ("a short story", "write a happier ending for it"), ("a list of words", "write a poem that uses all of them"),
    ("a job title", "describe what a typical day looks like"), ("a country", "suggest dishes a visitor should try"),
    ("the name of a famous person", "write three interview questions for them"), ("a hobby", "suggest ways to get started"),
    ("a feeling", "write a short poem about it"), ("a tricky situation", "give kind and practical advice"),
    ("an opinion", "write a polite counter-argument"), ("a product", "write a funny ad for it"),
)


# Prose about a programming tool first, the request for code after it; programming Q&A with answers to judge.
_TECH_BACKGROUND = (
    "Docker packages an application and its dependencies into an image that runs the same everywhere.",
    "In git, a branch is a movable pointer to a commit, and merging joins two lines of work.",
    "A REST API exposes resources over HTTP with verbs such as GET, POST and DELETE.",
    "An index in a relational database speeds up lookups at the cost of slower writes.",
    "React components re-render when their state or props change; hooks let function components keep state.",
    "A virtual environment keeps the packages of one Python project apart from the others.",
    "Kubernetes runs containers in pods and restarts them when they fail.",
    "Continuous integration builds and tests every change that is pushed to the repository.",
    "Unit tests check small pieces of code in isolation, often with mocks for the network and the disk.",
    "Reading documentation carefully is often the fastest way to solve a programming problem.",
    "Environment variables let a program read its configuration without hard-coding it.",
    "A cron job runs a command on a schedule, for example every night at two.",
    "Async code lets a program wait for the network without blocking other work.",
    "Type hints in Python do not change how the code runs, but tools can check them.",
)
_TECH_REQUESTS = (
    "Give a minimal example in {t}.", "Show me a small working example.", "Write sample code that demonstrates this.",
    "Demonstrate it with a short config file.", "Can you show this in code?", "Write a script that uses this idea.",
    "Show a typical setup for a {t} project.", "Explain it with an example snippet.",
)
_ANSWER_BITS = ("Use the built-in function and pass the flag.", "You can't, you need a library for that.",
                "Wrap it in a try block and read the error.", "Call it in a loop until it returns None.",
                "Set the option in the config file and restart.", "Use a regular expression instead.")


def _typos(text: str, rng: random.Random) -> str:
    """`text` with a few made-up mistakes, for "correct this" requests."""
    words = text.split()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(words))
        w = words[i]
        swap = {"their": "there", "your": "you're", "its": "it's", "to": "too", "than": "then", "were": "was", "is": "are"}
        if w.lower() in swap:
            words[i] = swap[w.lower()]
        elif len(w) > 4 and w.isalpha():
            j = rng.randrange(1, len(w) - 2)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    out = " ".join(words).replace(",", "", rng.randint(0, 1))
    return out[:1].lower() + out[1:] if rng.random() < 0.4 else out


def instruction_prompts(rows: list[dict], data: Path, rng: random.Random) -> list[dict]:
    """Instruction + input prompts of every class (see the comment above). Splits as in request_prompts: a hash of
    each row's own key; rows that land in "test" are dropped."""
    out: list[dict] = []
    src = [r for r in rows if r["split"] in ("train", "val")]
    pick = rng.choice

    def add(k: int, kind: str, text: str, label: str) -> None:
        split = split_of(f"instr-{kind}-{k}")
        if split != "test":
            out.append({"text": text, "label": label, "source": "instr/" + kind, "split": split})

    with open(data / "tatoeba" / "tatoeba_laser_v1_14langs.jsonl", encoding="utf-8") as f:
        english = sorted({json.loads(line)["eng"] for line in f})
    passages = [_passage(r["text"]) for r in src if r["source"].startswith("t0/") and r["label"] == "summarize"]
    passages = [p for p in passages if len(p) >= 200 and not re.search(r"question|answer", p, re.I)]
    problems = []
    for r in src:
        if r["source"] == "mbpp":
            task = r["text"].split("\nYour code should pass these tests:")[0].strip()
            task = re.sub(r"^Write a (?:python )?function (?:to |that )?", "", task, flags=re.I)
            problems.append(task[:1].upper() + task[1:])
        elif r["source"] == "humaneval" and (doc := _docstring(r["text"])):
            problems.append(doc[1])

    def text_input() -> str:
        u = rng.random()
        if u < 0.45:
            return " ".join(rng.sample(english, rng.randint(1, 3)))
        if u < 0.75 and passages:
            return _short_passage(pick(passages), rng, limit=pick((200, 320, 480)))
        fill = {"age": rng.randint(18, 75), "job": pick(_JOBS), "city": pick(_CITIES), "n": rng.randint(2, 9),
                "k": pick(_KIN), "s": pick(_ACTIVITIES), "money": pick((300, 800, 5000)), "hour": rng.randint(5, 9),
                "month": pick(_MONTHS)}
        return " ".join(b.format(**fill) for b in rng.sample(_STORY_BITS, rng.randint(2, 4)))

    def item(kind: str) -> str:
        x = pick(_ITEMS[kind])
        return f"{pick(_ITEM_LABELS[kind])}: {x}" if rng.random() < 0.3 else x

    def email() -> str:
        body = " ".join(b.format(n=rng.randint(2, 15), m=pick(_MONTHS), j=pick(_JOBS)) for b in rng.sample(_EMAIL_BODY, rng.randint(2, 4)))
        if rng.random() < 0.25:  # a chat log
            turns = [pick(("Are we still on for tonight?", "Did you see the match?", "I can't find my keys anywhere.",
                           "What are you cooking?", "Guess who I ran into today")),
                     pick(("Not bad, a bit tired.", "Yes! Running late though.", "I did, what a finish.", "Check the car."))]
            turns += [pick(("Want to grab a coffee later?", "Haha, classic.", "Can you pick up some bread?", "So what do you think?"))]
            names = rng.sample(_NAMES, 2)
            return "\n".join(f"{names[i % 2]}: {t}" for i, t in enumerate(turns))
        name = pick(_PEOPLE).split()[0]
        return f"{pick(('Hi', 'Dear', 'Hello'))} {name},\n\n{body}\n\n{pick(('Best', 'Kind regards', 'Thanks', 'Cheers'))},\n{pick(_PEOPLE)}"

    def notes() -> str:
        u = rng.random()
        fmt = {"n": rng.randint(2, 9), "m": pick(_MONTHS)}
        if u < 0.35:
            bits = rng.sample(_REVIEW_BITS, rng.randint(3, 6))
            head = pick(_TEXT_HEADS[:2])
        elif u < 0.7:
            bits = [b.format(**fmt) for b in rng.sample(_MINUTE_BITS, rng.randint(3, 6))]
            head = pick(_TEXT_HEADS[2:4])
        else:
            bits = rng.sample(_RELEASE_BITS, rng.randint(3, 6))
            head = pick(_TEXT_HEADS[4:])
        style = rng.randrange(3)
        body = ("\n".join(f"{i + 1}. {b}" for i, b in enumerate(bits)) if style == 0 else
                "\n".join(f"- {b}" for b in bits) if style == 1 else "; ".join(bits))
        return (head + "\n" + body).strip()

    def join(instr: str, x: str) -> str:
        return pick(("{a}\n\n{x}", "{a}\n\n{x}", "{a}\n{x}", "{x}\n\n{a}")).format(a=instr, x=x)

    for k in range(4800):  # chat
        u = rng.random()
        if u < 0.25:
            x = text_input()
            short = len(x) < 160
            a = pick(_EDIT_ASK + _EDIT_QUESTIONS) if short else pick(_EDIT_ASK)
            if any(w in a for w in ("typo", "spelling", "wording", "comma", "Proofread", "native")):
                x = _typos(x, rng)
            text = pick(_EDIT_FORMS if short else _EDIT_FORMS[:4] + _EDIT_FORMS[5:]).format(a=a, x=x)
        elif u < 0.4:
            kind = pick(tuple(_ITEM_ASKS))
            text = join(pick(_ITEM_ASKS[kind]), item(kind))
        elif u < 0.55:
            kind = pick(tuple(_GIVEN_NOUNS))
            g = pick(_GIVEN_REFS).format(n=pick(_GIVEN_NOUNS[kind]))
            if rng.random() < 0.25:
                lead, ask = pick(_DEFINE_WRITE)
                instr = f"{lead}. {ask.format(g=g)}."
            else:
                instr = pick(_GIVEN_ASKS).format(o=pick(_GIVEN_OBJECTS), g=g)
                instr = instr[:1].upper() + instr[1:]
            text = join(instr, item(kind))
        elif u < 0.67:
            kind = pick(tuple(_FACT_WRITE))
            text = join(pick(_FACT_WRITE[kind]), _fact_text(_facts(kind, rng), rng))
        elif u < 0.77:
            text = join(pick(_EMAIL_CHAT), email())
        elif u < 0.87:
            text = pick(_OPEN_ASKS).format(e=pick(_OPEN_EVENTS), t=pick(_OPEN_TIMES), n=rng.randint(3, 10), p=pick(_PAIRS))
        else:
            a, b, items = pick(_SORT_SETS)
            chosen = rng.sample(items, rng.randint(4, len(items)))
            text = pick(_SORT_ASKS).format(a=a, b=b, items=", ".join(chosen), lines="\n".join(chosen))
        if rng.random() < 0.1:
            text = text[:1].lower() + text[1:]
        add(k, "chat", text, "chat")

    questions = [r["text"].strip() for r in src if r["source"] == "truthfulqa"]
    for k in range(1500):  # summarize: the same inputs, asked to be shortened, titled, summed up or read
        u = rng.random()
        if u < 0.2:
            text = join(pick(_EMAIL_SUMMARY), email())
        elif u < 0.4:
            text = join(pick(_NOTES_SUMMARY[:9]), notes())
        elif u < 0.5:
            text = join(pick(_NOTES_SUMMARY[9:]), _short_passage(pick(passages), rng, limit=pick((300, 480, 800))))
        elif u < 0.7:
            text = pick(_EDIT_FORMS[:4] + _EDIT_FORMS[5:]).format(a=pick(_SHORTEN_ASK), x=text_input())
        elif u < 0.85:
            text = join(pick(_ABOUT_ASK), pick((email, notes, text_input))())
        else:  # a document with its own lead (a system prompt), then a closed-book-sounding question
            docs = "\n\n".join(_short_passage(p, rng, limit=pick((300, 600))) for p in rng.sample(passages, rng.randint(1, 3)))
            text = f"{pick(_DOC_LEADS)}\n\n{docs}\n\n{pick(questions)}"
        add(k, "summarize", text, "summarize")

    for k in range(700):  # structured: the same facts and notes, as data
        kind = pick(tuple(_FACT_WRITE))
        facts = _facts(kind, rng)
        instr = pick(_FACT_STRUCT).format(k=", ".join(key.lower() for key, _ in facts))
        text = join(instr, _fact_text(facts, rng))
        add(k, "structured", text, "structured")

    for k in range(1000):  # code and chat in the words of instruction sets ("the given code" / "the given city")
        t = pick(_TOOLING[:12])
        u = rng.random()
        if u < 0.3:
            g = pick(_GIVEN_REFS).format(n=pick(_CODE_NOUNS))
            text = join(pick(_CODE_GIVEN_ASKS).format(g=g, t=t), pick(_CODE_SNIPPETS + tuple(problems[:40])))
        elif u < 0.55:
            text = join(pick(_CODE_TOPIC_ASKS).format(t=t), pick(_CODE_TOPICS))
        elif u < 0.7:
            lead, ask = pick(_CODE_DEFINE)
            text = f"{lead}. {ask.format(x=pick(_CODE_TOPICS), t=t)}."
        elif u < 0.85:
            what, do = pick(_CODE_WHAT_DO)
            text = join(pick(_GIVEN_TASK).format(what=what, do=do.format(t=t)), pick(_CODE_SNIPPETS))
        elif u < 0.92:
            if rng.random() < 0.5:
                text = " ".join(rng.sample(_TECH_BACKGROUND, rng.randint(1, 2))) + pick(("\n", " ", "\n\n")) + pick(_TECH_REQUESTS).format(t=t)
            else:
                question = f"Is there a way to {pick(_CODE_TASKS + _PROG_TASKS)} in {t}? " + pick((
                    "I tried a few things from the docs but nothing worked.", "Right now I do it by hand every time.",
                    "My current version is slow.", "", "I'm new to this, sorry."))
                a1, a2 = rng.sample(_ANSWER_BITS, 2)
                text = pick((f"Question: {question}\nAnswer 1: {a1}\nAnswer 2: {a2}\n\nWhich answer is right?",
                             join(pick(_GIVEN_TASK).format(what=pick(_CODE_WHAT_DO)[0], do="judge each answer"),
                                  f"{question}\n\n1) {a1}\n2) {a2}"), question))
        else:
            what, do = pick(_CHAT_WHAT_DO)
            x = pick(_ITEMS[pick(("movie", "book", "city", "word", "situation", "job", "occasion"))])
            add(k, "given-chat", join(pick(_GIVEN_TASK).format(what=what, do=do), x), "chat")
            continue
        add(k, "given-code", text, "code")

    for k in range(1100):  # code
        u = rng.random()
        t = pick(_TOOLING[:12])
        if u < 0.4 and problems:
            text = join(pick(_CODE_INSTR).format(t=t), pick(problems))
        elif u < 0.52:
            text = join(pick(_REGEX_ASKS), "Description: " + pick(_REGEX_DESCRIPTIONS) if rng.random() < 0.6 else pick(_REGEX_DESCRIPTIONS))
        elif u < 0.64:
            text = join(pick(_SQL_ASKS), f"Table: {pick(_SQL_TABLES)}\nQuestion: {pick(_SQL_QUESTIONS)}")
        elif u < 0.8:
            text = pick(_COMMAND_ASKS).format(c=pick(_COMMANDS))
        else:
            text = pick(_CODE_MISC).format(n=rng.randint(2, 9))
        add(k, "code", text, "code")

    for k in range(800):  # math
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
        u1, u2 = pick(_UNITS)
        start = rng.randint(1, 12)
        step = rng.randint(2, 11)
        seq = ", ".join(str(start + step * i) if rng.random() < 0.6 else str(start * (i + 1) ** 2) for i in range(5)) + ", ..."
        seq = ", ".join(str(start + step * i) for i in range(5)) + ", ..." if rng.random() < 0.7 else seq
        items = [(pick(("notebooks", "pens", "paint", "brushes", "glue", "tape", "flour", "eggs")), rng.randint(1, 6),
                  f"{rng.randint(1, 30)}.{rng.randint(0, 99):02d}") for _ in range(rng.randint(2, 4))]
        table = "Item | Qty | Price\n" + "\n".join(f"{i} | {q} | ${p}" for i, q, p in items)
        nums = ", ".join(str(rng.randint(1, 99)) for _ in range(rng.randint(5, 9)))
        text = pick(_MATH_INSTR).format(
            p=pick((10, 12, 15, 18, 20)), d=rng.randint(12, 250), c=c, a=a, b=b, u1=u1, u2=u2, r1=a * 2 + b * 3,
            r2=c * 2 - 3, s=pick(_STATEMENTS), q=seq, n=rng.randint(3, 12),
            t=rng.randint(2, 12), table=table, nums=nums)
        add(k, "math", text, "math")

    for k in range(400):  # translate
        lang = pick(("Spanish", "French", "German", "Italian", "Portuguese", "Japanese", "Dutch", "Polish"))
        x = _short_passage(pick(passages), rng, limit=pick((200, 400))) if rng.random() < 0.6 else " ".join(rng.sample(english, 2))
        add(k, "translate", join(pick(_TRANSLATE_INSTR).format(l=lang), x), "translate")
    return out


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def load_heldout(path: Path) -> list[dict]:
    """The held-out request-shaped eval set (tests/data/classifier_heldout.jsonl), or [] if it is absent."""
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_gsm8k_test(data: Path) -> list[dict]:
    with open(data / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        return [{"text": json.loads(line)["question"], "label": "math", "source": "gsm8k/test"} for line in f]


def build_vocabulary(texts: list[str], min_df: int) -> list[list[str]]:
    """Per group, the n-grams found in at least `min_df` of `texts`, most frequent first."""
    df = [Counter() for _ in _features.GROUPS]
    for t in texts:
        toks, bigrams, head = _features.extract(t)[0]
        df[0].update(set(toks))
        df[1].update(set(bigrams))
        df[2].update(set(_features.byte_ngrams(head).tolist()))
    words = [[f for f, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_df] for c in df[:2]]
    return [*words, sorted(f for f, n in df[2].items() if n >= min_df)]  # byte codes: ascending


def matrix(featurizer: _features.Featurizer, texts: list[str]) -> sp.csr_matrix:
    indptr, indices, values = [0], [], []
    for t in texts:
        idx, val = featurizer.transform(t)
        indices += idx
        values += val
        indptr.append(len(indices))
    x = sp.csr_matrix(
        (np.array(values), np.array(indices), np.array(indptr)), shape=(len(texts), featurizer.n_features)
    )
    x.sum_duplicates()
    # The "unknown n-gram" slots carry no weight: how many n-grams a prompt shares with the training set
    # depends on the vocabulary's own sample (passages reused by augmentation), not on the class.
    x.data[x.indices < len(_features.GROUPS)] = 0.0
    x.eliminate_zeros()
    return x


def labels(rows: list[dict]) -> np.ndarray:
    return np.array([CLASS_INDEX[r["label"]] for r in rows])


def fit(x: sp.csr_matrix, y: np.ndarray, c: float) -> LogisticRegression:
    clf = LogisticRegression(C=c, class_weight="balanced", max_iter=2000, tol=1e-5)
    clf.fit(x, y)
    return clf


def quantize(clf: LogisticRegression, keep: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Round the weights to what ships (float16 coef, float32 intercept) and load them back into clf.

    With keep > 0, only the `keep` n-grams with the strongest say are kept; the others get weight 0, which
    is exactly what dropping them from the vocabulary does (unknown n-grams weigh 0). A feature's say is
    the spread of its weights across classes: adding a constant to all classes changes no probability.
    """
    coef = clf.coef_.T.astype(np.float16)  # [n_features, n_classes]
    coef[: len(_features.GROUPS)] = 0  # unknown n-gram slots (never set in the training matrix)
    return _keep_strongest(clf, coef, coef[len(_features.GROUPS) : coef.shape[0] - len(_features.STRUCT_NAMES)], keep)


def _keep_strongest(clf, coef: np.ndarray, rows: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero all but the `keep` rows of `rows` (a view into `coef` [n_features, n_classes]) with the largest spread
    across classes; the model takes the float16 weights it will ship. Returns (coef, float32 intercept)."""
    if 0 < keep < rows.shape[0]:
        w = rows.astype(np.float64)
        say = np.abs(w - w.mean(axis=1, keepdims=True)).max(axis=1)
        rows[np.argsort(-say, kind="stable")[keep:]] = 0
    intercept = clf.intercept_.astype(np.float32)
    clf.coef_ = coef.T.astype(np.float64)
    clf.intercept_ = intercept.astype(np.float64)
    return coef, intercept


def compact(vocabulary: list[list[str]], coef: np.ndarray) -> tuple[list[list[str]], np.ndarray]:
    """Drop the n-grams whose weights are all zero from the vocabulary and the weight matrix."""
    g = len(_features.GROUPS)
    keep_rows = list(range(g))
    kept_vocab = []
    col = g
    for words in vocabulary:
        nonzero = np.any(coef[col : col + len(words)] != 0, axis=1)
        kept_vocab.append([w for w, k in zip(words, nonzero, strict=True) if k])
        keep_rows += (col + np.flatnonzero(nonzero)).tolist()
        col += len(words)
    keep_rows += list(range(col, coef.shape[0]))
    return kept_vocab, coef[keep_rows]


# ---- the hashed byte n-gram model (--features hashed): no vocabulary, a fixed number of columns

def hashed_matrix(texts: list[str]) -> sp.csr_matrix:
    """The training matrix [len(texts), N_FEATURES]: each row `_hashed_features.transform` of its text."""
    indptr, indices, values = [0], [], []
    for t in texts:
        idx, val = _hashed_features.transform(t)
        indices.append(idx)
        values.append(val)
        indptr.append(indptr[-1] + len(idx))
    return sp.csr_matrix(
        (np.concatenate(values), np.concatenate(indices), np.array(indptr)), shape=(len(texts), _hashed_features.N_FEATURES)
    )


def quantize_hashed(clf: LogisticRegression, keep: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Round the weights to what ships (float16 coef [N_FEATURES, n_classes], float32 intercept) and load them
    back into clf.

    With keep > 0, only the `keep` buckets with the strongest say are kept; the others get weight 0 (the
    artifact stores only non-zero buckets). A bucket's say is the spread of its weights across classes:
    adding a constant to all classes changes no probability.
    """
    coef = clf.coef_.T.astype(np.float16)  # [n_features, n_classes]
    return _keep_strongest(clf, coef, coef[: _hashed_features.N_BUCKETS], keep)


def compact_hashed(coef: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids of the buckets with a non-zero weight [k] uint32, their weights [k, n_classes], the structural
    features' weights [n_struct, n_classes]) of a full weight matrix [N_FEATURES, n_classes]."""
    buckets = coef[: _hashed_features.N_BUCKETS]
    ids = np.flatnonzero(np.any(buckets != 0, axis=1)).astype(np.uint32)
    return ids, buckets[ids], coef[_hashed_features.N_BUCKETS :]


def report(name: str, y: np.ndarray, pred: np.ndarray) -> dict:
    present = sorted(set(y.tolist()) | set(pred.tolist()))
    f1 = f1_score(y, pred, labels=sorted(set(y.tolist())), average="macro")
    per = f1_score(y, pred, labels=list(range(len(CONTENT_CLASSES))), average=None, zero_division=0)
    cm = confusion_matrix(y, pred, labels=list(range(len(CONTENT_CLASSES))))
    print(f"\n== {name}: n={len(y)} macro-F1={f1:.4f} accuracy={(y == pred).mean():.4f}")
    print("rows = true, cols = predicted:", " ".join(f"{c[:9]:>9}" for c in CONTENT_CLASSES))
    for i, c in enumerate(CONTENT_CLASSES):
        if cm[i].sum() or i in present:
            print(f"{c:>11} F1={per[i]:.3f}  " + " ".join(f"{v:9d}" for v in cm[i]))
    return {
        "n": int(len(y)),
        "macro_f1": round(float(f1), 4),
        "accuracy": round(float((y == pred).mean()), 4),
        "per_class_f1": {c: round(float(per[i]), 4) for i, c in enumerate(CONTENT_CLASSES)},
        "confusion": cm.tolist(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--features", choices=("words", "hashed"), default="words",
                    help="words: word / byte-4 vocabulary (_features.py, the shipped model); hashed: hashed byte "
                    "n-grams (_hashed_features.py, artifact_format 2)")
    ap.add_argument("--c", type=float, nargs="+", default=None,
                    help="C values to try (validation picks); default 16 (words: 1 4 16 -> 16), 64 (hashed)")
    ap.add_argument("--keep", type=int, default=None,
                    help="n-grams (words) / hash buckets (hashed) kept in the model; default 10000 / 60000; 0 = all")
    ap.add_argument("--no-augment", action="store_true", help="train on the data rows only")
    ap.add_argument("--heldout", type=Path, default=DEFAULT_HELDOUT,
                    help="held-out request-shaped eval prompts (jsonl: text, label): checked to share no text with "
                    "the training rows, and scored; never trained on")
    ap.add_argument("--min-df", type=int, default=2, help="keep n-grams seen in at least this many prompts")
    args = ap.parse_args(argv)
    hashed = args.features == "hashed"
    args.c = args.c or [64.0 if hashed else 16.0]
    args.keep = (60000 if hashed else 10000) if args.keep is None else args.keep

    t0 = time.perf_counter()
    rows = load_rows(args.data)
    if not args.no_augment:
        rows += augment(rows, args.data, random.Random(0)) + short_prompts(rows, args.data, random.Random(1))
        rows += request_prompts(rows, args.data, random.Random(2))
        rows += everyday_prompts(rows, random.Random(3))
        rows += instruction_prompts(rows, args.data, random.Random(4))
    by_split = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test", "ood", "short_test")}
    heldout = load_heldout(args.heldout)
    seen = {_norm(r["text"]) for r in by_split["train"] + by_split["val"]}
    unseen = heldout + [r for path in sorted(args.heldout.parent.glob("classifier_eval_*.jsonl")) for r in load_heldout(path)]
    overlap = [r["text"] for r in unseen if _norm(r["text"]) in seen]
    if overlap:  # the held-out eval must stay unseen
        raise SystemExit(f"{len(overlap)} held-out eval prompts are training rows, e.g. {overlap[0][:80]!r}")
    for s, rs in by_split.items():
        print(f"{s}: {len(rs)} rows", dict(sorted(Counter(r["label"] for r in rs).items())))
    if hashed:
        vocabulary: list = []

        def to_matrix(texts: list[str]) -> sp.csr_matrix:
            return hashed_matrix(texts)
    else:
        vocabulary = build_vocabulary([r["text"] for r in by_split["train"] + by_split["val"]], args.min_df)
        featurizer = _features.Featurizer(vocabulary)
        print("vocabulary:", dict(zip(_features.GROUPS, map(len, vocabulary), strict=False)))

        def to_matrix(texts: list[str]) -> sp.csr_matrix:
            return matrix(featurizer, texts)
    xs = {s: to_matrix([r["text"] for r in rs]) for s, rs in by_split.items()}
    ys = {s: labels(rs) for s, rs in by_split.items()}
    print(f"features built in {time.perf_counter() - t0:.1f}s")

    best_c, best_f1 = args.c[0], -1.0
    for c in args.c if len(args.c) > 1 or not hashed else []:  # hashed, one C: no validation fit
        clf = fit(xs["train"], ys["train"], c)
        f1 = f1_score(ys["val"], clf.predict(xs["val"]), average="macro")
        print(f"C={c:g}: validation macro-F1 {f1:.4f} ({clf.n_iter_[0]} iterations)")
        if f1 > best_f1:
            best_c, best_f1 = c, f1

    x_fit = sp.vstack([xs["train"], xs["val"]]).tocsr()
    y_fit = np.concatenate([ys["train"], ys["val"]])
    clf = fit(x_fit, y_fit, best_c)
    coef, intercept = (quantize_hashed if hashed else quantize)(clf, args.keep)
    train_s = time.perf_counter() - t0

    metrics = {"C": best_c, "validation_macro_f1": round(best_f1, 4) if best_f1 >= 0 else None}
    metrics["test"] = report("held-out test (group split)", ys["test"], clf.predict(xs["test"]))
    if by_split["short_test"]:
        metrics["short_test"] = report(
            "short instruction-led prompts cut from held-out test rows (never trained on)",
            ys["short_test"], clf.predict(xs["short_test"]),
        )
    metrics["ood_noncommercial"] = report(
        "out-of-distribution: excluded NC sources (never trained on)", ys["ood"], clf.predict(xs["ood"])
    )
    gsm = load_gsm8k_test(args.data)
    metrics["gsm8k_test_accuracy"] = report("gsm8k test (math)", labels(gsm), clf.predict(to_matrix([r["text"] for r in gsm])))[
        "accuracy"
    ]
    if heldout:
        metrics["heldout_requests"] = report(
            f"held-out request-shaped prompts ({args.heldout.name}, never trained on)", labels(heldout),
            clf.predict(to_matrix([r["text"] for r in heldout])),
        )
        y = labels(heldout)
        pred = clf.predict(to_matrix([r["text"] for r in heldout]))
        metrics["heldout_requests"]["recall"] = {
            c: round(float((pred[y == i] == i).mean()), 4) for i, c in enumerate(CONTENT_CLASSES) if (y == i).any()
        }
        print("recall:", metrics["heldout_requests"]["recall"])
    meta = {
        "classes": list(CONTENT_CLASSES),
        "trained_on": "shared/data combined/classifier_prompts.jsonl.gz minus " + ", ".join(EXCLUDED_PREFIXES),
        "n_train": int(len(y_fit)),
        "train_seconds": round(train_s, 1),
        "sklearn": __import__("sklearn").__version__,
        "metrics": metrics,
    }
    if hashed:
        buckets, bucket_coef, struct_coef = compact_hashed(coef)
        meta.update({
            "artifact_format": HASHED_FORMAT,
            "feature_version": _hashed_features.VERSION,
            "feature_params": _hashed_features.PARAMS,
            "structural_features": list(_hashed_features.STRUCT_NAMES),
            "kept_buckets": int(buckets.size),
        })
        save_hashed_artifact(args.out, buckets, bucket_coef, struct_coef, intercept, meta)
    else:
        meta.update({
            "feature_version": _features.VERSION,
            "feature_params": _features.PARAMS,
            "groups": list(_features.GROUPS),
            "structural_features": list(_features.STRUCT_NAMES),
            "min_df": args.min_df,
            "kept_ngrams": args.keep,
        })
        vocabulary, coef = compact(vocabulary, coef)
        meta["vocabulary_sizes"] = dict(zip(_features.GROUPS, map(len, vocabulary), strict=True))
        save_artifact(args.out, vocabulary, coef, intercept, meta)

    # The numpy inference path must agree with scikit-learn on every held-out row.
    model = Classifier.load(args.out)
    test_rows = by_split["test"]
    ours = np.array([CLASS_INDEX[model.predict(r["text"])[0]] for r in test_rows])
    agree = int((ours == clf.predict(xs["test"])).sum())
    print(f"\nnumpy inference agrees with sklearn on {agree}/{len(test_rows)} held-out rows")
    print(f"wrote {args.out} in {train_s:.1f}s (C={best_c:g})")
    return 0 if agree == len(test_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
