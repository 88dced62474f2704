"""Record acceptance traces: per output position, how many tokens a speculative step would emit.

A trace is JSONL, one request a line (format: README "Acceptance traces", docs/INTERFACES.md):
`{"id", "class", "prompt", "prompt_tokens", "output_tokens", "max_k", "temperature", "accept_runs":
{proposer: [run_0, ..., run_{n-1}]}}`, where `run_i` is what a step starting at output position i emits when
the proposer drafts up to `max_k` tokens: 1 + the number of leading draft tokens equal to the target's greedy
output at i, i+1, ..., capped at `max_k + 1` and at the `n - i` tokens left. A step with gamma <= max_k
emits `min(run_i, gamma + 1)`.

Two sources:

- `record_tiny` — the reference worker's tiny pair, in process. The target's greedy output comes from the
  real engine (speculation off). The draft model's runs need no per-position drafting: while its drafts
  match the output, its context *is* prompt + output[:j], so its j-th draft token is its teacher-forced
  greedy prediction at output position j. One causal forward over prompt + output gives every position's
  prediction, and the runs are the lengths of the streaks of matching predictions (O(n) per request instead
  of O(n * max_k) draft forwards). The n-gram runs use the worker's own `ngram_lookup` on prompt +
  output[:i] (vectorised per position).
- `record_endpoint` — any OpenAI endpoint's greedy (temperature 0) chat output; n-gram runs only, computed
  offline on the returned text re-tokenised with a local tokenizer. When the endpoint's model uses another
  tokenizer the runs are an approximation of what its own n-gram proposer would see (token boundaries
  differ), though the text it copies is the same.

    adaptspec trace record --prompts prompts.jsonl --out tiny.jsonl --max-k 8 --max-tokens 96
    adaptspec trace record --url http://127.0.0.1:8000 --model M --prompts prompts.jsonl --out m.jsonl
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from adaptspec.bench.prompts import PromptItem
from adaptspec.errors import RequestError
from adaptspec.worker.engine import Engine, GenRequest
from adaptspec.worker.model import TinyLlama
from adaptspec.worker.proposers import ngram_lookup
from adaptspec.worker.tokenizer import Tokenizer

__all__ = ["RecordOptions", "greedy_outputs", "ngram_runs", "record_endpoint", "record_tiny", "streak_runs",
           "teacher_forced_predictions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecordOptions:
    max_k: int = 8
    max_tokens: int = 96
    ngram_min_n: int = 2  # the reference worker's defaults (Engine ngram_min_n / ngram_max_n)
    ngram_max_n: int = 4
    batch: int = 16  # sequences per target batch / draft forward

    def __post_init__(self) -> None:
        if self.max_k < 1:
            raise ValueError(f"max_k must be >= 1, got {self.max_k}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


# ----------------------------------------------------------------------------- runs from drafts

def _draft_len(i: int, n: int, max_k: int) -> int:
    """Tokens drafted at output position i of n: up to max_k, and leaving room for the step's own token."""
    return max(0, min(max_k, n - i - 1))


def streak_runs(match: Sequence[bool] | np.ndarray, max_k: int) -> list[int]:
    """Runs from per-position hits: `match[j]` says the proposer's token for output position j (given the
    true prefix) equals the output's. run_i = 1 + the length of the streak of hits from i, capped at
    min(max_k, n - i - 1)."""
    m = np.asarray(match, dtype=bool)
    n = m.shape[0]
    streak = np.zeros(n + 1, dtype=np.int64)
    for j in range(n - 1, -1, -1):  # streak[j] = consecutive hits starting at j
        streak[j] = streak[j + 1] + 1 if m[j] else 0
    caps = np.minimum(max_k, n - 1 - np.arange(n)).clip(min=0)
    return (1 + np.minimum(streak[:n], caps)).tolist()


def ngram_runs(prompt_ids: Sequence[int], output_ids: Sequence[int], max_k: int, min_n: int = 2,
               max_n: int = 4) -> list[int]:
    """Per output position i, the run of the n-gram proposer drafting from prompt + output[:i]."""
    seq = np.asarray(list(prompt_ids) + list(output_ids), dtype=np.int64)
    out = seq[len(prompt_ids):]
    n, p = out.shape[0], len(prompt_ids)
    runs = []
    for i in range(n):
        k = _draft_len(i, n, max_k)
        if k == 0:
            runs.append(1)
            continue
        draft = ngram_lookup(seq[: p + i], k, min_n, max_n)  # [<= k]
        target = out[i: i + draft.shape[0]]
        miss = np.flatnonzero(draft != target)
        runs.append(1 + (int(miss[0]) if miss.size else int(draft.shape[0])))
    return runs


@torch.inference_mode()
def teacher_forced_predictions(model: TinyLlama, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
                               ) -> list[list[int]]:
    """For each (prompt, output): the model's greedy next token at every output position j, given prompt +
    output[:j]. One right-padded causal forward over the batch (padding after a sequence cannot reach it)."""
    seqs = [list(p) + list(o)[:-1] for p, o in pairs]
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)  # [B, T]
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
    hidden = model.forward_dense(ids, return_hidden=True)  # [B, T, h]
    # logits only at the output positions: [sum(len(o)), V] rather than [B, T, V]
    rows = torch.cat([hidden[b, len(p) - 1: len(p) - 1 + len(o)] for b, (p, o) in enumerate(pairs)])
    pred = model.lm_head(rows).argmax(dim=-1).tolist()  # [sum(len(o))]
    out, at = [], 0
    for _, o in pairs:
        out.append(pred[at: at + len(o)])
        at += len(o)
    return out


# ----------------------------------------------------------------------------- the tiny pair

def _chat_ids(tokenizer: Tokenizer, item: PromptItem) -> list[int]:
    if tokenizer.chat_template:
        return tokenizer.encode(tokenizer.apply_chat_template(item.chat_messages()))
    return tokenizer.encode("\n".join(m["content"] for m in item.chat_messages()))


def _prompt_text(item: PromptItem) -> str:
    return item.prompt if item.prompt is not None else "\n".join(m["content"] for m in item.chat_messages())


def _record(rid: str, item: PromptItem, prompt_tokens: int, output_tokens: int, max_k: int,
            runs: dict[str, list[int]]) -> dict:
    return {"id": rid, "class": item.category, "prompt": _prompt_text(item), "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens, "max_k": max_k, "temperature": 0.0, "accept_runs": runs}


def greedy_outputs(engine: Engine, prompts: Sequence[list[int]], max_tokens: int,
                   prefix: str = "rec") -> list[list[int]]:
    """The engine's greedy (temperature 0, speculation off) output of each prompt, stopping at EOS."""
    if not prompts:
        return []
    reqs = [GenRequest(f"{prefix}-{i}", ids, max_tokens=max_tokens, temperature=0.0, proposer="none",
                       num_speculative_tokens=0) for i, ids in enumerate(prompts)]
    res = engine.generate_sync(reqs)
    return [res[r.request_id] for r in reqs]


def record_tiny(items: Sequence[PromptItem], engine: Engine, draft: TinyLlama | None, opts: RecordOptions,
                bar=None) -> Iterator[dict]:
    """Trace records of `engine`'s target and the `draft` model (the one the engine's draft proposer runs;
    None: n-gram runs only) over `items`, in order (see the module docstring). Prompts that do not fit the
    context, or whose output is empty (EOS first), are skipped with a warning."""
    for lo in range(0, len(items), opts.batch):
        chunk = list(enumerate(items[lo: lo + opts.batch], start=lo))
        keep = []
        for n, it in chunk:
            ids = _chat_ids(engine.tokenizer, it)
            if len(ids) + opts.max_tokens > engine.max_model_len:
                log.warning("prompt %d (%s): %d tokens + max_tokens %d exceed the context %d; skipped",
                            n, it.category, len(ids), opts.max_tokens, engine.max_model_len)
            else:
                keep.append((n, it, ids))
        outs = greedy_outputs(engine, [ids for _, _, ids in keep], opts.max_tokens, prefix=f"rec{lo}")
        rows = []
        for (n, it, ids), out in zip(keep, outs, strict=True):
            if out:
                rows.append((n, it, ids, out))
            else:
                log.warning("prompt %d (%s): empty output (EOS first); skipped", n, it.category)
        preds: list = [None] * len(rows)
        if draft is not None and rows:
            preds = teacher_forced_predictions(draft, [(ids, out) for _, _, ids, out in rows])
        for (n, it, ids, out), pred in zip(rows, preds, strict=True):
            runs = {"ngram": ngram_runs(ids, out, opts.max_k, opts.ngram_min_n, opts.ngram_max_n)}
            if pred is not None:
                runs["draft"] = streak_runs(np.asarray(pred) == np.asarray(out), opts.max_k)
            yield _record(f"p{n:04d}-{it.category}", it, len(ids), len(out), opts.max_k, runs)
        if bar is not None:
            bar.update(len(chunk))


# ----------------------------------------------------------------------------- any OpenAI endpoint

def _chat_once(url: str, model: str | None, item: PromptItem, max_tokens: int, timeout: float,
               api_key: str | None) -> dict:
    body = {"messages": item.chat_messages(), "temperature": 0, "max_tokens": max_tokens, "stream": False}
    if model:
        body["model"] = model
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"  # "http://host:8000" and "http://host:8000/v1" alike
    req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise RequestError(f"{url} answered {exc.code}: {detail}", status=502, type="upstream_error") from None
    except (urllib.error.URLError, TimeoutError) as exc:
        raise RequestError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}", status=502,
                           type="upstream_error") from None


def record_endpoint(items: Sequence[PromptItem], url: str, model: str | None, tokenizer: Tokenizer,
                    opts: RecordOptions, concurrency: int = 4, timeout: float = 300.0,
                    api_key: str | None = None, bar=None) -> Iterator[dict]:
    """Trace records (n-gram runs only) of an OpenAI endpoint's greedy chat output over `items`, in order.

    `prompt_tokens` is the endpoint's own `usage.prompt_tokens` when it reports one (what its prefill costs);
    the runs use `tokenizer` on the chat-rendered prompt and on the returned text."""
    lock = threading.Lock()

    def one(item: PromptItem) -> dict:
        resp = _chat_once(url, model, item, opts.max_tokens, timeout, api_key)
        with lock:
            if bar is not None:
                bar.update(1)
        return resp

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        responses = pool.map(one, items)
        for n, (item, resp) in enumerate(zip(items, responses, strict=True)):
            try:
                text = resp["choices"][0]["message"]["content"] or ""
            except (KeyError, IndexError, TypeError):
                raise RequestError(f"{url}: response to prompt {n} has no choices[0].message.content",
                                   status=502, type="upstream_error") from None
            out = tokenizer.encode(text)
            if not out:
                log.warning("prompt %d (%s): empty output; skipped", n, item.category)
                continue
            ids = _chat_ids(tokenizer, item)
            usage = resp.get("usage") or {}
            n_prompt = usage.get("prompt_tokens")
            runs = {"ngram": ngram_runs(ids, out, opts.max_k, opts.ngram_min_n, opts.ngram_max_n)}
            yield _record(f"p{n:04d}-{item.category}", item, int(n_prompt) if isinstance(n_prompt, int)
                          and n_prompt > 0 else len(ids), len(out), opts.max_k, runs)
