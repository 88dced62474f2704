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
    by_split = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test", "ood", "short_test")}
    heldout = load_heldout(args.heldout)
    seen = {_norm(r["text"]) for r in by_split["train"] + by_split["val"]}
    overlap = [r["text"] for r in heldout if _norm(r["text"]) in seen]
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
